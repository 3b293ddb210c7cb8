"""Benchmark the model builder on the ICT FaceKit face.

Run from the repository root:  .venv/bin/python bench/build_model.py [--target-tets N] [--json]

The ICT face (~14k skin vertices, both teeth meshes, 53 ARKit shape keys) is converted
with tests/ict_data.py from ../shared/data. First every numba kernel the builder uses is
called once on a one-triangle mesh — that time is the compile (or, with a warm numba
cache, cache-load) time and is reported on its own; then a tiny warm-up build (2000 tets)
runs so nothing first-call is charged to the measured build. Reports total and per-stage seconds (build_info["timings_s"]), peak
memory (getrusage maxrss: the whole process, warm-up and rig included), tet and node
counts, lattice spacing, tet quality and the tet volume against the builder's
Monte-Carlo estimate of the tissue volume.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.demo_head import make_demo_rig  # noqa: E402
from solver.geometry import ClosestPointTree, WindingNumberTree, vertex_normals  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.model_builder.tetmesh import dihedral_angle_range, tet_quality  # noqa: E402
from solver.model_file import build_info  # noqa: E402
from tests.ict_data import ICT_PATH, ict_available, load_ict_rig  # noqa: E402

WARM_UP_TETS = 2000
SLIVER_DEGREES = 10.0


def peak_memory_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0      # Linux: kilobytes


def first_call_seconds() -> float:
    """Compile (or load from numba's cache) the geometry kernels: one query each on one triangle."""
    start = time.perf_counter()
    vertices, triangles, points = np.eye(3), np.array([[0, 1, 2]]), np.zeros((4, 3))
    WindingNumberTree(vertices, triangles).query(points)
    ClosestPointTree(vertices, triangles).query(points)
    vertex_normals(vertices, triangles)
    return time.perf_counter() - start


def timed_build(rig, target_tets):
    start = time.perf_counter()
    model = build_model(rig, BuildOptions(target_tets=target_tets))
    return model, time.perf_counter() - start


def measure(target_tets: int) -> dict:
    compile_seconds = first_call_seconds()
    start = time.perf_counter()
    rig = load_ict_rig()
    load_seconds = time.perf_counter() - start
    _, warm_up_seconds = timed_build(rig, WARM_UP_TETS)
    memory_before = peak_memory_mb()

    model, seconds = timed_build(rig, target_tets)
    memory_after = peak_memory_mb()
    start = time.perf_counter()
    make_demo_rig()
    demo_rig_seconds = time.perf_counter() - start
    info = build_info(model)
    nodes, tets = model["rest_positions"], model["tets"]
    quality = tet_quality(nodes, tets)
    min_dihedral, max_dihedral = dihedral_angle_range(nodes, tets)
    tet_volume = float(model["tet_rest_volume"].sum())
    estimate = info["tissue_volume_estimate_m3"]
    return {
        "rig": {"vertices": int(len(rig.vertices)), "shape_keys": int(len(rig.shape_key_names)),
                "load_seconds": round(load_seconds, 3)},
        "target_tets": target_tets,
        "demo_rig_seconds": round(demo_rig_seconds, 3),
        "numba_first_call_seconds": round(compile_seconds, 3),
        "warm_up": {"target_tets": WARM_UP_TETS, "seconds": round(warm_up_seconds, 3)},
        "seconds": round(seconds, 3),
        "stage_seconds": info["timings_s"],
        "peak_memory_mb": round(memory_after, 1),
        "peak_memory_before_build_mb": round(memory_before, 1),
        "tets": int(len(tets)),
        "nodes": int(len(nodes)),
        "lattice_spacing_mm": round(info["lattice_spacing_m"] * 1e3, 3),
        "quality": {
            "min": round(float(quality.min()), 4),
            "mean": round(float(quality.mean()), 4),
            "min_dihedral_deg": round(float(min_dihedral.min()), 2),
            "max_dihedral_deg": round(float(max_dihedral.max()), 2),
            "percent_min_dihedral_below_10_deg": round(100.0 * float(np.mean(min_dihedral < SLIVER_DEGREES)), 3),
        },
        "volume": {
            "tets_cm3": round(tet_volume * 1e6, 2),
            "monte_carlo_cm3": round(estimate * 1e6, 2),
            "monte_carlo_stderr_cm3": round(info["tissue_volume_estimate_stderr_m3"] * 1e6, 2),
            "relative_difference_percent": round(100.0 * (tet_volume / estimate - 1.0), 3),
        },
        "muscles": int(len(model["muscle_names"])),
        "pinned_nodes": int(len(model["pin_nodes"])),
        "sliding_nodes": int(len(model["slide_nodes"])),
        "embedding_max_outside_mm": round(info["embedding_max_outside_m"] * 1e3, 3),
        "skin_vertices_over_2mm_outside": info["embedding_vertices_outside"]["over_2mm"],
        "skin_vertices": info["embedding_vertices_outside"]["total"],
    }


def print_report(result: dict) -> None:
    warm, quality, volume = result["warm_up"], result["quality"], result["volume"]
    rig = result["rig"]
    print(f"ICT face: {rig['vertices']} skin vertices, {rig['shape_keys']} shape keys "
          f"(converted in {rig['load_seconds']:.2f} s)")
    print(f"numba compile / cache load: {result['numba_first_call_seconds']:.2f} s; warm-up build "
          f"({warm['target_tets']} tets): {warm['seconds']:.2f} s (neither included below)")
    print(f"build at target {result['target_tets']}: {result['seconds']:.2f} s")
    for stage, seconds in result["stage_seconds"].items():
        print(f"  {stage:<12} {seconds:7.3f} s")
    print(f"peak memory (maxrss): {result['peak_memory_mb']:.0f} MB "
          f"({result['peak_memory_before_build_mb']:.0f} MB before this build)")
    print(f"tets: {result['tets']}, nodes: {result['nodes']}, lattice spacing {result['lattice_spacing_mm']:.2f} mm")
    print(f"quality: min {quality['min']:.3f}, mean {quality['mean']:.3f}; dihedral angles "
          f"{quality['min_dihedral_deg']:.1f}-{quality['max_dihedral_deg']:.1f} deg; "
          f"{quality['percent_min_dihedral_below_10_deg']:.2f} % of tets with a dihedral < {SLIVER_DEGREES:.0f} deg")
    print(f"tissue volume: tets {volume['tets_cm3']:.1f} cm3 vs Monte-Carlo {volume['monte_carlo_cm3']:.1f} "
          f"+- {volume['monte_carlo_stderr_cm3']:.1f} cm3 ({volume['relative_difference_percent']:+.2f} %)")
    print(f"muscles: {result['muscles']}, pinned nodes: {result['pinned_nodes']}, sliding nodes: "
          f"{result['sliding_nodes']}, farthest skin vertex outside the tets: {result['embedding_max_outside_mm']:.2f} mm "
          f"({result['skin_vertices_over_2mm_outside']} of {result['skin_vertices']} skin vertices over 2 mm outside)")
    print(f"the built-in demo head's rig (solver.demo_head.make_demo_rig): {result['demo_rig_seconds']:.2f} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-tets", type=int, default=35000, help="tet count to aim for (default 35000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    if not ict_available():
        print(f"error: the ICT FaceKit data is missing: expected {ICT_PATH} "
              "(../shared/data beside the project). Nothing to benchmark.", file=sys.stderr)
        return 2
    result = measure(args.target_tets)
    if args.json:
        print(json.dumps(result))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
