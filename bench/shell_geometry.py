"""The shell's geometry on the ICT face: remeshing, rig ↔ coarse maps and maximum depth (issue 40).

Run from the repository root:  .venv/bin/python bench/shell_geometry.py [--counts 2000 4000 8000]
                                                                           [--picture docs/images/shell/coarse_meshes.png]

For each coarse triangle count: remeshing seconds, the triangle count reached, the smallest
angle and the mean of each triangle's smallest angle, the two-sided Hausdorff and mean distance
to the rig's skin (mm; the ears' folds and the nostrils, finer than one coarse edge, set the
Hausdorff), the same over ICT's narrow face; RigTransfer build seconds and the warp error of the
coarse rig against a few fine shape keys (mean / max mm); maximum-depth seconds and counts of
thin and eyelid vertices. Numba kernels are compiled (or loaded from the cache) by a small
warm-up first, so no compile time is charged. With --picture it also draws the coarse meshes
side by side, coloured by maximum depth.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from bench.bench_info import commit  # noqa: E402
from solver.geometry.closest_point import ClosestPointTree  # noqa: E402
from solver.geometry.mesh_ops import icosphere  # noqa: E402
from solver.rig import rig_triangles  # noqa: E402
from solver.shell import depth  # noqa: E402
from solver.shell.remesh import mesh_quality, remesh_isotropic, remesh_skin  # noqa: E402
from solver.shell.scale import face_height  # noqa: E402
from solver.shell.transfer import RigTransfer  # noqa: E402
from tests.ict_data import ict_available, load_ict_rig  # noqa: E402

WARP_KEYS = ("jawOpen", "mouthSmile_L", "mouthPucker", "eyeBlink_L", "browInnerUp_L", "cheekPuff_L")


def warm_up() -> None:
    vertices, triangles = icosphere(2)
    coarse = remesh_isotropic(vertices, triangles, 100)
    depth.shape_diameter(coarse.vertices, -coarse.vertices, vertices, triangles)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[2000, 4000, 8000])
    parser.add_argument("--picture", type=Path, default=None)
    arguments = parser.parse_args()
    if not ict_available():
        print("ICT FaceKit data (../shared/data) not found: nothing to measure")
        return 1
    warm_up()
    rig = load_ict_rig()
    height = face_height(rig.vertices, rig.shape_key_deltas)
    fine, fine_triangles = rig.vertices / height, rig_triangles(rig)
    fine_deltas = rig.shape_key_deltas / height
    front = np.unique(fine_triangles[(rig.vertex_group_weights[0] > 0.5)[fine_triangles].all(axis=1)])
    names = list(rig.shape_key_names)
    print(f"ICT skin: {len(fine)} vertices, {len(fine_triangles)} triangles, face height {height:.4f} m; "
          f"commit {commit()}")
    panels = []
    for count in arguments.counts:
        coarse = remesh_skin(fine, fine_triangles, count)
        quality = mesh_quality(coarse.vertices, coarse.triangles, fine, fine_triangles)
        to_coarse = ClosestPointTree(coarse.vertices, coarse.triangles).query(fine[front]).distance * height * 1000
        print(f"\n{count} wanted: {quality['triangles']} triangles, {quality['vertices']} vertices, "
              f"remesh {coarse.seconds:.2f} s, L = {coarse.target_edge_length * height * 1000:.1f} mm")
        print(f"  angles: min {quality['min_angle_deg']:.1f}°, mean of smallest {quality['mean_min_angle_deg']:.1f}°, "
              f"{100 * quality['share_min_angle_below_30']:.2f} % under 30°")
        print(f"  distance to the skin: Hausdorff {quality['hausdorff'] * height * 1000:.1f} mm, "
              f"mean {quality['mean_distance'] * height * 1000:.2f} mm; narrow face → coarse: max "
              f"{to_coarse.max():.1f}, 99 % {np.percentile(to_coarse, 99):.1f}, median {np.median(to_coarse):.2f} mm")
        start = time.perf_counter()
        transfer = RigTransfer.build(fine, fine_triangles, coarse.vertices, coarse.triangles, fine_deltas)
        transfer_seconds = time.perf_counter() - start
        coarse_deltas = transfer.coarse_deltas(fine_deltas)
        errors = []
        for name in WARP_KEYS:
            key = names.index(name)
            error = np.linalg.norm(transfer.warp(fine, coarse_deltas[key]) - (fine + fine_deltas[key]), axis=1)
            errors.append(f"{name} {error.mean() * height * 1000:.2f}/{error.max() * height * 1000:.1f}")
        print(f"  transfer build {transfer_seconds:.2f} s; warp of the coarse rig vs the key, mean/max mm: "
              + ", ".join(errors))
        start = time.perf_counter()
        max_depth, thin = depth.max_depth(coarse.vertices, coarse.triangles, coarse_deltas, names, fine, fine_triangles)
        eyelids = depth.eyelid_vertices(coarse.triangles, coarse_deltas, names)
        print(f"  depth {time.perf_counter() - start:.2f} s: δ median {np.median(max_depth):.4f}, max of keys "
              f"{max_depth[~thin].max():.4f} face units; {thin.sum()} thin, {eyelids.sum()} eyelid vertices; "
              f"jaw-intensive keys: {[n for n, j in zip(names, depth.jaw_intensive_keys(names, coarse_deltas)) if j]}")
        panels.append((f"{len(coarse.triangles)} triangles", coarse.vertices, coarse.triangles, max_depth, thin, eyelids))
    if arguments.picture is not None:
        from solver.pictures.raster import save_png
        from solver.pictures.shell_meshes import coarse_mesh_sheet

        # The face's height band of the whole skin: the face, the ears and the sides of the head.
        band = (fine[:, 1] >= fine[front, 1].min()) & (fine[:, 1] <= fine[front, 1].max())
        framing = fine[band]
        image = coarse_mesh_sheet(panels, up=(0.0, 1.0, 0.0), forward=(0.0, 0.0, 1.0), framing=framing,
                                  title=f"ICT coarse shells coloured by maximum depth (commit {commit()})")
        print(f"\npicture: {save_png(image, arguments.picture)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
