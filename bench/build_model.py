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

With --fresh-install the builds run as a new user's would instead: each a new process
(`python -m solver build-model`, wall time including imports and numba), first with
NUMBA_CACHE_DIR pointed at an empty folder ("cold": every kernel compiles), then again with
that folder ("warm"), then on another empty folder after `python -m solver.model_builder.warm_up`
(what `build.py setup` and the add-on's installer run; its seconds reported apart). With
--against REV the same runs of commit REV (exported with git archive) interleave with this
checkout's, so the ratios are paired on a shared machine. Median of --runs runs (default 3).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
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


def _commit(tree: Path) -> str:
    described = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"],
                               capture_output=True, text=True)
    return described.stdout.strip() or "?"


def _timed_process(tree: Path, arguments, cache: Path, timeout=900) -> float:
    """Wall seconds of `python ARGUMENTS` run from `tree` with its solver first on the path."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(tree))
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], cwd=tree, env=env, check=True, timeout=timeout,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _fresh_install_run(tree: Path, rig_path: Path, target_tets: int, work: Path, tag: str, with_warm_up: bool) -> dict:
    build = ["-m", "solver", "build-model", str(rig_path), "-o", str(work / f"{tag}.npz"),
             "--target-tets", str(target_tets)]
    cold_cache = Path(tempfile.mkdtemp(dir=work))
    run = {"cold_s": _timed_process(tree, build, cold_cache)}
    run["warm_s"] = _timed_process(tree, build, cold_cache)
    if with_warm_up:
        setup_cache = Path(tempfile.mkdtemp(dir=work))
        run["warm_up_s"] = _timed_process(tree, ["-m", "solver.model_builder.warm_up"], setup_cache)
        run["after_warm_up_s"] = _timed_process(tree, build, setup_cache)
    with np.load(work / f"{tag}.npz", allow_pickle=False) as model:
        run["tets"] = int(len(model["tets"]))
    return run


def measure_fresh_install(target_tets: int, runs: int, against: str | None) -> dict:
    """Cold, warm and after-warm-up builds of the ICT face, each in a new process; see the module docstring."""
    from solver.rig import save_rig
    with tempfile.TemporaryDirectory(prefix="build-bench-") as folder:
        work = Path(folder)
        rig_path = work / "ict_rig.npz"
        save_rig(rig_path, load_ict_rig())
        trees = {"this": REPOSITORY}
        if against:
            exported = work / "against"
            exported.mkdir()
            archive = subprocess.run(["git", "-C", str(REPOSITORY), "archive", against], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(exported)], input=archive.stdout, check=True)
            trees["against"] = exported
        samples = {name: [] for name in trees}
        for run in range(runs):
            for name, tree in trees.items():
                with_warm_up = (tree / "solver" / "model_builder" / "warm_up.py").is_file()
                samples[name].append(_fresh_install_run(tree, rig_path, target_tets, work, f"{name}{run}", with_warm_up))
                print(f"run {run + 1}/{runs} {name}: {samples[name][-1]}", file=sys.stderr, flush=True)
        result = {"target_tets": target_tets, "runs": runs, "machine_load_1min": round(os.getloadavg()[0], 2)}
        for name, tree in trees.items():
            keys = samples[name][0].keys()
            result[name] = {"commit": _commit(REPOSITORY) if name == "this" else against,
                            **{key: round(statistics.median(r[key] for r in samples[name]), 2) for key in keys},
                            "samples": samples[name]}
        if against:
            result["ratio_this_over_against"] = {
                key: round(result["this"][key] / result["against"][key], 3)
                for key in ("cold_s", "warm_s") if result["against"][key]}
        return result


def print_fresh_install(result: dict) -> None:
    print(f"ICT face, target {result['target_tets']} tets, median of {result['runs']} runs, each build a new "
          f"process (wall s); load {result['machine_load_1min']} at the end")
    for name in ("this", "against"):
        if name not in result:
            continue
        row = result[name]
        line = (f"  {name:<8} {row['commit']:<14} {row['tets']} tets: cold {row['cold_s']:.1f} s, "
                f"warm {row['warm_s']:.1f} s")
        if "after_warm_up_s" in row:
            line += f", after the setup warm-up ({row['warm_up_s']:.1f} s) {row['after_warm_up_s']:.1f} s"
        print(line)
    if "ratio_this_over_against" in result:
        ratio = result["ratio_this_over_against"]
        print(f"  this / against: cold x{ratio['cold_s']:.2f}, warm x{ratio['warm_s']:.2f}")


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
    parser.add_argument("--fresh-install", action="store_true",
                        help="cold / warm / after-warm-up builds in new processes (see the docstring)")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of (--fresh-install)")
    parser.add_argument("--against", help="a commit to interleave with this checkout (--fresh-install)")
    args = parser.parse_args(argv)
    if not ict_available():
        print(f"error: the ICT FaceKit data is missing: expected {ICT_PATH} "
              "(../shared/data beside the project). Nothing to benchmark.", file=sys.stderr)
        return 2
    if args.fresh_install:
        result = measure_fresh_install(args.target_tets, args.runs, args.against)
    else:
        result = measure(args.target_tets)
    if args.json:
        print(json.dumps(result))
    elif args.fresh_install:
        print_fresh_install(result)
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
