"""Benchmark the geometric queries on a face-sized mesh.

Run from the repository root:  .venv/bin/python bench/geometry_queries.py [--points N]

The mesh is an open patch of a randomly perturbed sphere (~30k triangles, 10 cm
radius, like a face scan); query points fill its bounding box enlarged by 10%,
as a tetrahedral model builder's candidate nodes would. Compile time is measured
in a fresh subprocess with an empty numba cache, so it is what a first run on a
new machine pays; loading the cached kernels is measured too.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numba
import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fresh_interpreter import report_first_calls  # noqa: E402

from solver.geometry import ClosestPointTree, TriangleBVH, WindingNumberTree  # noqa: E402

# Runs in a subprocess: imports, then one tiny query of each kind, timing each step.
_FIRST_CALL_SCRIPT = """
import time
import numpy as np
start = time.perf_counter()
from solver.geometry import ClosestPointTree, WindingNumberTree
imported = time.perf_counter()
vertices = np.eye(3)
triangles = np.array([[0, 1, 2]])
points = np.zeros((4, 3))
WindingNumberTree(vertices, triangles).query(points)
winding = time.perf_counter()
ClosestPointTree(vertices, triangles).query(points)
closest = time.perf_counter()
print(imported - start, winding - imported, closest - winding)
"""


def perturbed_sphere_patch(rng, rings=100, segments=151, radius=0.1, noise=0.01):
    """Open latitude-longitude patch of a sphere with per-vertex radial noise (relative)."""
    polar, azimuth = np.meshgrid(
        np.linspace(0.15 * np.pi, 0.85 * np.pi, rings), np.linspace(0.0, 1.6 * np.pi, segments), indexing="ij"
    )
    r = radius * (1.0 + noise * rng.standard_normal(polar.shape))
    vertices = np.column_stack([
        (r * np.sin(polar) * np.cos(azimuth)).ravel(),
        (r * np.sin(polar) * np.sin(azimuth)).ravel(),
        (r * np.cos(polar)).ravel(),
    ])
    grid = np.arange(rings * segments).reshape(rings, segments)
    a, b = grid[:-1, :-1].ravel(), grid[1:, :-1].ravel()
    c, d = grid[1:, 1:].ravel(), grid[:-1, 1:].ravel()
    return vertices, np.vstack([np.column_stack([a, b, c]), np.column_stack([a, c, d])])


def timed(function, *arguments, **keywords):
    """(result, wall seconds, CPU seconds summed over all threads of this process)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function(*arguments, **keywords)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def throughput(label, point_count, wall, cpu):
    # CPU time is reported too because on a shared machine other processes stretch
    # the wall time; CPU seconds per point is what the code itself costs.
    print(f"{label}: {wall:.2f} s wall, {point_count / wall / 1e6:.2f} M points/s;"
          f" {cpu:.2f} CPU s ({cpu / point_count * 1e6:.2f} CPU µs per point)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    arguments = parser.parse_args()

    report_first_calls(_FIRST_CALL_SCRIPT, ("import", "winding", "closest point"))

    rng = np.random.default_rng(0)
    vertices, triangles = perturbed_sphere_patch(rng)
    lower, upper = vertices.min(axis=0), vertices.max(axis=0)
    margin = 0.1 * (upper - lower)
    points = rng.uniform(lower - margin, upper + margin, (arguments.points, 3))
    print(f"mesh: {len(vertices)} vertices, {len(triangles)} triangles; {len(points)} query points")

    # Warm up in this process so the timings below exclude loading the kernels.
    WindingNumberTree(vertices, triangles).query(points[:100])
    ClosestPointTree(vertices, triangles).query(points[:100])

    print(f"numba threads: {numba.get_num_threads()}")

    bvh, bvh_seconds, _ = timed(TriangleBVH, vertices, triangles)
    winding_tree, expansion_seconds, _ = timed(WindingNumberTree.from_bvh, bvh)
    closest_tree = ClosestPointTree.from_bvh(bvh)  # needs nothing beyond the BVH
    print(f"BVH build: {bvh_seconds * 1e3:.1f} ms ({bvh.node_count} nodes, depth {bvh.max_depth});"
          f" winding expansions: {expansion_seconds * 1e3:.1f} ms")

    winding, wall, cpu = timed(winding_tree.query, points)
    throughput(f"winding numbers (inside fraction {np.mean(winding > 0.5):.3f})", len(points), wall, cpu)

    result, wall, cpu = timed(closest_tree.query, points)
    throughput(f"closest points (median distance {np.median(result.distance) * 1e3:.1f} mm)", len(points), wall, cpu)

    bound = 0.005
    _, wall, cpu = timed(closest_tree.query, points, max_distance=bound)
    throughput(f"closest points within {bound * 1e3:.0f} mm", len(points), wall, cpu)


if __name__ == "__main__":
    main()
