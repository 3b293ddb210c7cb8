"""The muscle overlay's surfaces on real models: time, triangles, smoothness, closedness and
volume, against the tet boundary the overlay drew before issue 39.

Run from the repository root:

    .venv/bin/python bench/muscle_overlay.py MODEL.npz [MODEL.npz ...]
    .venv/bin/python bench/muscle_overlay.py --picture OUT_DIR     # needs bpy

A MODEL.npz comes from `python -m solver build-model RIG.npz -o MODEL.npz --target-tets N`
(the demo rig: `python -m solver demo-rig -o RIG.npz`). Per model it prints the CPU time of
`muscle_isosurfaces` (what Show Muscles computes), its triangles, the mean / median / 95th
percentile dihedral angle, how many muscles are closed and consistently oriented, and each
muscle's enclosed volume over its own (Σ fraction × tet volume).

--picture renders the user guide's muscles picture (docs/images/user-guide/muscles.png) the
way `python -m blender_addon.cli demo` does — import the demo head, Build at 20,000 tets, Show
Muscles, the demo's Cycles studio — without the fit and bakes: OUT_DIR/muscles.png.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blender_addon import muscle_isosurface, surface_smoothing  # noqa: E402

_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]])


def tet_boundary(positions, tets, fraction):
    """The overlay before issue 39, unsmoothed: each muscle the boundary of the tets it fills most of."""
    owner, inside = np.argmax(fraction, axis=1), fraction.sum(axis=1) >= 0.5
    vertices, boundaries, offset = [], [], 0
    for muscle in np.unique(owner[inside]):
        faces = tets[inside & (owner == muscle)][:, _TET_FACES].reshape(-1, 3)
        _, first, counts = np.unique(np.sort(faces, axis=1), axis=0, return_index=True, return_counts=True)
        used, local = np.unique(faces[first[counts == 1]], return_inverse=True)     # vertices of its own
        vertices.append(positions[used])
        boundaries.append(local.reshape(-1, 3) + offset)
        offset += len(used)
    return np.concatenate(vertices), np.concatenate(boundaries), len(boundaries)


def closed_and_oriented(triangles) -> bool:
    directed = triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    count = int(triangles.max()) + 1
    forward = np.unique(directed[:, 0] * count + directed[:, 1], return_counts=True)
    backward = np.unique(directed[:, 1] * count + directed[:, 0], return_counts=True)
    return all(np.array_equal(f, b) for f, b in zip(forward, backward))


def angles_text(vertices, triangles) -> str:
    angles = np.degrees(surface_smoothing.dihedral_angles(vertices, triangles))
    return "dihedral mean %.1f°, median %.0f°, p95 %.0f°" % (angles.mean(), np.median(angles),
                                                            np.quantile(angles, 0.95))


def measure(path: Path) -> None:
    with np.load(path, allow_pickle=False) as model:
        positions, tets = model["rest_positions"], model["tets"]
        fraction = model["muscle_fraction"].astype(np.float64)
    present = np.flatnonzero(fraction.max(axis=0) > 0)
    print(f"{path}: {len(tets)} tets, {len(present)} muscles with tets")
    raw_vertices, raw, drawn = tet_boundary(positions, tets, fraction)
    print(f"  tet boundary: {len(raw)} triangles, {drawn} muscles, {angles_text(raw_vertices, raw)}")
    started = time.process_time()
    vertices, triangles, labels = muscle_isosurface.muscle_isosurfaces(positions, tets, fraction)
    seconds = time.process_time() - started
    closed = sum(closed_and_oriented(triangles[labels == muscle]) for muscle in present)
    print(f"  isosurface: {seconds:.2f} s CPU, {len(triangles)} triangles, {len(np.unique(labels))} "
          f"muscles, {closed} closed and oriented, {angles_text(vertices, triangles)}")
    ratio = (muscle_isosurface.volumes_by_label(vertices, triangles, labels, fraction.shape[1])[present]
             / (muscle_isosurface.tet_volumes(positions, tets) @ fraction)[present])
    print(f"  enclosed / own volume: min {ratio.min():.2f}, median {np.median(ratio):.2f}, max {ratio.max():.2f}; "
          f"{(np.abs(ratio - 1) < 0.01).sum()} of {len(ratio)} within 1%")


def picture(out_dir: Path) -> Path:
    import bpy
    from blender_addon import cli, demo, demo_pictures, muscle_overlay
    out_dir.mkdir(parents=True, exist_ok=True)
    python = sys.executable
    bpy.ops.wm.read_homefile(use_empty=True)
    cli._enable_addon(python)
    context = bpy.context
    bpy.ops.wm.save_as_mainfile(filepath=str(out_dir / "muscles.blend"))
    rig = demo.write_demo_rig(python, out_dir / "demo_rig.npz")
    demo._operator(bpy.ops.face_physics.import_rig, filepath=str(rig), bones=True)
    face = context.active_object
    bone_material = demo_pictures.plain_material("Face Physics demo bone", (0.85, 0.82, 0.72), 0.6)
    for bone in face.children:
        demo_pictures.assign_material(bone, bone_material)
    face.face_physics.target_tets = demo.FULL.target_tets
    demo._activate(context, face)
    demo._operator(bpy.ops.face_physics.build)
    scene = context.scene
    demo_pictures.set_up_render(scene, demo.FULL.quality)
    studio = demo_pictures.make_studio(scene, demo.FIELD_OF_VIEW_M)
    started = time.perf_counter()
    demo._operator(bpy.ops.face_physics.muscle_overlay)
    print(f"Show Muscles: {time.perf_counter() - started:.2f} s")
    overlay = muscle_overlay.find_overlay(face)
    demo_pictures.assign_material(overlay, demo_pictures.attribute_material("Face Physics demo muscles",
                                                                            "muscle", weight_colours=False))
    for obj in scene.objects:
        if obj.type == 'MESH':
            obj.hide_render = obj not in set(face.children)       # the bones and the overlay, as the demo
    studio.frame(face.matrix_world.translation + demo.FACE_CENTRE_M)
    return demo_pictures.render_png(scene, out_dir / "muscles.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--picture", type=Path, help="render the user guide's muscles picture into this folder")
    args = parser.parse_args()
    for path in args.models:
        measure(path)
    if args.picture:
        print(f"wrote {picture(args.picture)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
