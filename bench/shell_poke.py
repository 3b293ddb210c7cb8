"""A sphere pushed into cheek, nose and lips of a fitted shell (issue 40's contact acceptance).

At rest weights a sphere of 0.08 face heights comes from 0.02 in front of the skin to --push
face heights into it along the skin's normal over 20 frames and is held 20 more (30 fps). Per
place: how deep the coarse shell and the skin the user sees (after warp, detail and the fine
contact pass) end inside the sphere, how deep the coarse shell sank against its max depth, and
how far the skin moved.

    .venv/bin/python bench/shell_poke.py SHELL.npz RIG.npz [--push 0.03] [--picture PNG]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_info import commit  # noqa: E402

# Multi-PIE landmarks whose mean marks each place (as tests/test_shell_forward.py pushes them).
PLACES = {"cheek": ("mp68_03", "mp68_31"), "nose": ("mp68_30",), "lips": ("mp68_51",)}
RADIUS = 0.08


def push_sphere(shell, rig, place: str, push: float):
    from solver.shell.colliders import SphereCollider
    from solver.shell.forward import ShellSimulator, vertex_normals
    names = [str(name) for name in rig.landmark_names]
    missing = [name for name in PLACES[place] if name not in names]
    if missing:
        raise SystemExit(f"the rig has no landmarks {missing}; this bench needs the Multi-PIE 68 names")
    point = np.mean([rig.vertices[rig.landmark_vertices[names.index(name)]] for name in PLACES[place]], axis=0)
    height = shell.face_height_m
    sim = ShellSimulator(shell)
    normals = np.zeros_like(sim.rest)
    vertex_normals(sim.rest, sim.topology.triangles, normals)
    tip = rig.vertices[rig.landmark_vertices[names.index("mp68_30")]] / height
    front = normals[int(np.argmin(np.linalg.norm(sim.rest - tip, axis=1)))]
    distance = np.linalg.norm(sim.rest - point / height, axis=1)
    distance[normals @ front < 0.3] = np.inf          # not the mouth or eye sockets' lining
    nearest = int(np.argmin(distance))
    surface, normal = sim.rest[nearest], normals[nearest]
    start, end = surface + (RADIUS + 0.02) * normal, surface + (RADIUS - push) * normal
    sphere = SphereCollider(start * height, RADIUS * height)
    for frame in range(40):
        sphere.centre_m = (start + min(frame / 20, 1.0) * (end - start)) * height
        sim.step(None, colliders=[sphere])
    return sim, sphere, normals, normal


def measure(sim, sphere, normals):
    from solver.shell.colliders import analytic_signed_distances
    height = sim.face_height_m
    coarse_distance, _ = analytic_signed_distances(sim.coarse_positions * height, sphere)
    skin = sim.fine_positions_m()
    skin_distance, _ = analytic_signed_distances(skin, sphere)
    allowed = sim.fine_from_coarse @ np.maximum(-coarse_distance, 0.0)
    depth = -((sim.coarse_positions - sim.target) * normals).sum(1)
    return skin, {
        "coarse_inside_mm": 1e3 * max(0.0, -coarse_distance.min()),
        "skin_inside_mm": 1e3 * max(0.0, -skin_distance.min()),
        "skin_deeper_than_allowed_mm": 1e3 * max(0.0, float((-skin_distance - allowed).max())),
        "too_deep": -skin_distance > allowed + 1e-9,
        "sank_mm": 1e3 * height * depth.max(),
        "max_depth_mm": 1e3 * height * float(sim.max_depth[int(np.argmax(depth))]),
        "within_max_depth": bool((depth <= sim.max_depth + 1e-9).all()),
        "skin_moved_mm": 1e3 * float(np.linalg.norm(skin - sim.fine_rest_m, axis=1).max()),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shell", type=Path)
    parser.add_argument("rig", type=Path)
    parser.add_argument("--push", type=float, default=0.03, help="face heights the sphere goes past the skin")
    parser.add_argument("--picture", type=Path)
    args = parser.parse_args()
    from solver.geometry.mesh_ops import icosphere
    from solver.model_builder.landmarks import infer_landmarks
    from solver.pictures.raster import save_png
    from solver.pictures.shell_poke import poke_panel, poke_sheet
    from solver.rig import load_rig, triangulate
    from solver.shell.shell_file import load_shell
    shell, rig = load_shell(args.shell), load_rig(args.rig)
    height = shell.face_height_m
    print(f"shell: {len(shell.coarse_rest)} coarse vertices, {len(shell.coarse_triangles)} triangles; rig "
          f"{len(rig.vertices)} vertices; face height {1e3 * height:.1f} mm; sphere radius {1e3 * RADIUS * height:.1f} mm, "
          f"pushed {1e3 * args.push * height:.1f} mm past the skin; commit {commit()}")
    axes = infer_landmarks(rig).frame
    triangles = triangulate(rig.faces)
    sphere_vertices, sphere_triangles = icosphere(3, radius=RADIUS * height)
    panels = []
    for place in PLACES:
        sim, sphere, normals, normal = push_sphere(shell, rig, place, args.push)
        skin, row = measure(sim, sphere, normals)
        print(f"{place}: coarse inside {row['coarse_inside_mm']:.3f} mm, skin inside {row['skin_inside_mm']:.3f} mm "
              f"(deeper than its coarse vertices allow: {row['skin_deeper_than_allowed_mm']:.3f} mm); coarse sank "
              f"{row['sank_mm']:.2f} mm against a max depth of {row['max_depth_mm']:.2f} mm there (all within: "
              f"{row['within_max_depth']}); skin moved up to {row['skin_moved_mm']:.2f} mm")
        if args.picture:
            image = poke_panel(skin, sim.fine_rest_m, triangles, row["too_deep"], sphere_vertices + sphere.centre_m,
                               sphere_triangles, sphere.centre_m, RADIUS * height, args.push * height, normal,
                               axes.up)
            panels.append((place, image))
    if args.picture:
        save_png(poke_sheet(panels, f"sphere pushed {1e3 * args.push * height:.0f} mm past the skin, "
                                    f"{len(shell.coarse_triangles)}-triangle shell, colour: skin moved (0 to "
                                    f"{1e3 * args.push * height:.0f} mm), commit {commit()}"), args.picture)


if __name__ == "__main__":
    main()
