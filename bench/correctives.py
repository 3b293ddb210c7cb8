"""Quadratic corrective shape keys (issue 42): time to build CORR.npz for a few keys, its size, and
the per-frame cost of the corrected rig evaluated in numpy (against the plain linear rig).

    python bench/correctives.py --demo FOLDER [--keys jawOpen,mouthSmile_L] [--jobs 2] [--threshold-mm 0.5]
    python bench/correctives.py --model MODEL.npz --fit FIT.npz --rig RIG.npz --keys … [--jobs 2]

--demo builds the demo head's model (3,000 tets) and fits the keys into FOLDER when they are not
there yet (not timed). The build runs `python -m solver correctives` as a child process, into a
fresh output (its samples folder removed first, so every sample is solved), and then once more
to time a rerun that solves nothing. The evaluation: 200 frames of random weights on every key
of the rig (about half of them non-zero), one frame at a time, as play-correctives plays them.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_info import commit  # noqa: E402


def _solver(*arguments, timeout=3600):
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, arguments)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        sys.exit(run.stdout[-3000:] + run.stderr[-3000:])
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return time.monotonic() - started, [line for line in lines if line["type"] == "result"][-1]


def _demo_inputs(folder: Path, keys: str):
    folder.mkdir(parents=True, exist_ok=True)
    rig, model, fit = folder / "rig.npz", folder / "model.npz", folder / "fit.npz"
    if not rig.exists():
        _solver("demo-rig", "-o", rig)
    if not model.exists():
        _solver("build-model", rig, "-o", model, "--target-tets", 3000)
    if not fit.exists():
        _solver("fit", model, rig, "-o", fit, "--shapes", keys, "--jobs", 2)
    return model, fit, rig


def _evaluation_ms(rig_path: Path, corr_path: Path, frames: int = 200):
    from solver.correctives.corr_file import CorrectedRig, load_correctives
    from solver.rig import load_rig
    rig = load_rig(rig_path)
    names = [str(name) for name in rig.shape_key_names]
    corrected = CorrectedRig(rig.vertices, rig.shape_key_deltas, names, load_correctives(corr_path, names))
    weights = np.clip(np.random.default_rng(0).uniform(-1.0, 1.0, (frames, len(names))), 0.0, 1.0)
    timings = {}
    for label, play in (("linear", corrected.linear_frame), ("corrected", corrected.frame)):
        seconds = []
        for row in weights:
            started = time.perf_counter()
            play(row)
            seconds.append(time.perf_counter() - started)
        timings[label] = 1e3 * float(np.median(seconds))
    return timings, len(rig.vertices), len(names), len(corrected.term_names)


def _rms_mm(rig_path: Path, corr_path: Path):
    """(corrected, linear): the mean over the fitted samples of the RMS distance over all skin
    vertices to the simulated skin, mm (the samples stored beside CORR.npz)."""
    from solver.correctives.corr_file import CorrectedRig, load_correctives
    from solver.npz_files import read_npz
    from solver.rig import load_rig
    rig = load_rig(rig_path)
    names = [str(name) for name in rig.shape_key_names]
    corr = load_correctives(corr_path, names)
    corrected = CorrectedRig(rig.vertices, rig.shape_key_deltas, names, corr)
    columns = [names.index(str(key)) for key in corr["key_names"]]
    errors = []
    for path in sorted((corr_path.parent / f".{corr_path.stem}.samples").glob("[sp][ia]*.npz")):
        arrays = read_npz(path)
        for row, skin in zip(arrays["weights"], arrays["skin"]):
            weights = np.zeros(len(names))
            weights[columns] = row
            errors.append([1e3 * np.sqrt((np.linalg.norm(play(weights) - skin, axis=1) ** 2).mean())
                           for play in (corrected.frame, corrected.linear_frame)])
    return np.mean(errors, axis=0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--demo", type=Path, help="folder for the demo head's rig, model and fit")
    parser.add_argument("--model", type=Path)
    parser.add_argument("--fit", type=Path)
    parser.add_argument("--rig", type=Path)
    parser.add_argument("--keys", default="jawOpen,mouthSmile_L,mouthPucker")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threshold-mm", type=float, default=None)
    parser.add_argument("--output", type=Path, default=None,
                        help="CORR.npz to write, its samples beside it (default: corr.npz in the --demo folder, "
                             "else in the system's temporary folder, never in the checkout)")
    parser.add_argument("--keep-samples", action="store_true",
                        help="keep the samples an earlier run stored (then the build time is a rerun's)")
    args = parser.parse_args()
    if args.demo:
        model, fit, rig = _demo_inputs(args.demo, args.keys)
        out = args.demo / "corr.npz"
    else:
        model, fit, rig = args.model, args.fit, args.rig
        out = Path(tempfile.gettempdir()) / "face_physics_bench" / "corr.npz"
    if args.output is not None:
        out = args.output
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    samples = out.parent / f".{out.stem}.samples"
    if not args.keep_samples:
        shutil.rmtree(samples, ignore_errors=True)
    extra = [] if args.threshold_mm is None else ["--threshold-mm", args.threshold_mm]
    command = ["correctives", model, fit, rig, "-o", out, "--keys", args.keys, "--jobs", args.jobs, *extra]
    built_s, result = _solver(*command)
    rerun_s, _ = _solver(*command)
    timings, vertices, rig_keys, terms = _evaluation_ms(rig, out)
    with np.load(model, allow_pickle=False) as arrays:
        tets = len(arrays["tets"])
    print(f"commit {commit()}; mesh {vertices} skin vertices, {tets} tets; {rig_keys} rig keys")
    print(f"command: python -m solver {' '.join(map(str, command))}")
    print(f"build: {built_s:.1f} s for {result['keys']} keys with --jobs {args.jobs} ({result['pairs_kept']} of "
          f"{result['pairs']} pairs kept, {result['samples']} samples fitted); rerun (all samples stored) "
          f"{rerun_s:.1f} s")
    print(f"fit residual (per-sample worst vertex): corrected {result['error_mean_mm']:.3f} mean / "
          f"{result['error_max_mm']:.3f} max mm; linear rig {result['linear_error_mean_mm']:.3f} / "
          f"{result['linear_error_max_mm']:.3f} mm")
    rms = _rms_mm(rig, out)
    print(f"fit residual (per-sample RMS over the skin): corrected {rms[0]:.3f} mean, linear rig {rms[1]:.3f} mean")
    print(f"CORR.npz: {out.stat().st_size / 1e6:.2f} MB, {terms} corrective shapes")
    print(f"per frame in numpy: linear rig {timings['linear']:.3f} ms, corrected rig {timings['corrected']:.3f} ms "
          f"(median of 200)")


if __name__ == "__main__":
    main()
