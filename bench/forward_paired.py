"""Two solvers side by side on the same forward frames: bench/forward_frames.py run with this
checkout's solver and with another checkout's (`--base DIR`, e.g. a worktree of the previous
commit) in turn, A B A B …, `--runs` times each (issue 41: a shared machine's speed drifts, so
the ratio of each pair is the figure to trust, not either absolute time).

Prints each run's median seconds a frame, the medians over the runs, the ratio new / base of
each pair and its median, and how far apart the two solvers' frames are (largest node distance
over every counted frame, mm: the accuracy requirement is 0.01 mm).

    .venv/bin/python bench/forward_paired.py --base ../base --runs 3 -- --model ICT.npz --frames 24
    .venv/bin/python bench/forward_paired.py --base ../base --runs 3 -- --model ICT.npz \\
        --animation performance --fit FIT.npz --range 200:230 [--collisions]

Everything after `--` goes to bench/forward_frames.py for both.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
FRAMES_SCRIPT = REPOSITORY / "bench" / "forward_frames.py"


def _run(solver_from: Path, passed: list, folder: Path, label: str) -> dict:
    summary, positions = folder / f"{label}.json", folder / f"{label}.npy"
    command = [sys.executable, str(FRAMES_SCRIPT), *passed, "--solver-from", str(solver_from),
               "--json", str(summary), "--positions", str(positions)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if completed.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{completed.stderr[-3000:]}")
    print("  " + completed.stdout.strip().splitlines()[-1], flush=True)
    result = json.loads(summary.read_text())
    result["positions"] = np.load(positions)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="checkout of the solver to compare against")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the figures here")
    arguments, passed = parser.parse_known_args()
    passed = [item for item in passed if item != "--"]
    pairs = []
    with tempfile.TemporaryDirectory() as folder:
        for run in range(arguments.runs):
            print(f"run {run + 1} of {arguments.runs}", flush=True)
            base = _run(arguments.base.resolve(), passed, Path(folder), f"base{run}")
            new = _run(REPOSITORY, passed, Path(folder), f"new{run}")
            pairs.append((base, new))
    base_medians = np.array([base["median_seconds"] for base, _ in pairs])
    new_medians = np.array([new["median_seconds"] for _, new in pairs])
    ratios = new_medians / base_medians
    base, new = pairs[0]
    distance_mm = float(np.linalg.norm(new["positions"] - base["positions"], axis=2).max() * 1e3)
    figures = {"tets": new["tets"], "nodes": new["nodes"], "animation": new["animation"],
               "collisions": new["collisions"], "frames": new["counted_frames"],
               "base_commit": base["commit"], "new_commit": new["commit"],
               "base_median_seconds": float(np.median(base_medians)), "new_median_seconds": float(np.median(new_medians)),
               "ratios": ratios.tolist(), "median_ratio": float(np.median(ratios)),
               "base_iterations": base["iterations"], "new_iterations": new["iterations"],
               "base_factorisations": base["factorisations"], "new_factorisations": new["factorisations"],
               "base_unconverged": base["unconverged"], "new_unconverged": new["unconverged"],
               "largest_node_distance_mm": distance_mm}
    print(f"\nICT {figures['tets']} tets, {figures['nodes']} nodes; {figures['animation']}"
          f"{' with teeth and lip contact' if figures['collisions'] else ''}, {figures['frames']} frames, "
          f"{arguments.runs} runs each, in turn")
    print(f"  base {figures['base_commit']}: median {figures['base_median_seconds']:.3f} s a frame "
          f"(runs {', '.join(f'{value:.3f}' for value in base_medians)}), {figures['base_iterations']} Newton "
          f"iterations, {figures['base_factorisations']} factorisations, {figures['base_unconverged']} unconverged")
    print(f"  new  {figures['new_commit']}: median {figures['new_median_seconds']:.3f} s a frame "
          f"(runs {', '.join(f'{value:.3f}' for value in new_medians)}), {figures['new_iterations']} Newton "
          f"iterations, {figures['new_factorisations']} factorisations, {figures['new_unconverged']} unconverged")
    print(f"  new / base per pair: {', '.join(f'{value:.2f}' for value in ratios)}; median {figures['median_ratio']:.2f}")
    print(f"  largest node distance between the two solvers' frames: {distance_mm:.5f} mm")
    if arguments.json:
        arguments.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
