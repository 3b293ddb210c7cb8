"""Memory of a long bake (issue 41): peak resident memory of `animate` and how it grows per frame.

Writes a smooth synthetic take (every fitted shape key a slow sinusoid of its own period and
phase, clipped to [0, 1], 24 fps; deterministic), runs `python -m solver --json animate MODEL FIT
WEIGHTS -o RESULT` as a child process with a timeout, and samples the child's resident memory
(/proc/PID/status VmRSS, Linux) against the frames it has reported. Prints the peak (VmHWM), the
resident memory after the first tenth of the frames and at the last one, the growth per 1,000
frames (least squares over the samples after the first tenth), seconds per frame, mesh sizes and
the commit. Target (issue 41): peak ≤ 1.5 GB on ICT 35k, flat over a 2,000-frame bake.
`--stop-after N` ends the bake after N frames and prints the peak so far: what a long take costs
before its frames run (its inputs, the solver's set-up), without baking all of it.

    .venv/bin/python bench/animate_memory.py --model MODEL.npz --fit FIT.npz [--frames 2000] [--collisions teeth,lips]
                                             [--stop-after N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "bench"))

from bench_info import commit  # noqa: E402


def smooth_weights(names, contexts, frames: int, strength: float = 1.0, fps: float = 24.0,
                   seed: int = 7) -> np.ndarray:
    """(frames, K): each key strength × (0.5 + 0.6 sin(2π t / period + phase)), periods 1.5–6 s,
    clipped to [0, 1]; a key fitted on top of another (the fit's `fit_context`: mouthClose on
    jawOpen) never above it, as the fit asks."""
    rng = np.random.default_rng(seed)
    periods, phases = rng.uniform(1.5, 6.0, len(names)), rng.uniform(0.0, 2 * np.pi, len(names))
    t = np.arange(frames)[:, None] / fps
    weights = np.clip(strength * (0.5 + 0.6 * np.sin(2 * np.pi * t / periods + phases)), 0.0, 1.0)
    for index, context in enumerate(contexts):
        if context in names:
            weights[:, index] = np.minimum(weights[:, index], weights[:, names.index(context)])
    return weights


def resident_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB, (nan, nan) once it is gone."""
    values = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, amount = line.split(":")
                values[key] = float(amount.split()[0]) / 1024.0
    except OSError:
        return float("nan"), float("nan")
    return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--collisions", default="")
    parser.add_argument("--strength", type=float, default=1.0,
                        help="scales every weight: memory does not depend on it, the seconds a frame do")
    parser.add_argument("--timeout", type=float, default=6 * 3600.0, help="seconds the bake may take")
    parser.add_argument("--stop-after", type=int, default=0,
                        help="end the bake after this many frames and print the peak so far (0: bake them all)")
    args = parser.parse_args()
    with np.load(args.fit, allow_pickle=False) as fit:
        names = [str(name) for name in fit["shape_key_names"]]
        contexts = [str(name) for name in fit["fit_context"]] if "fit_context" in fit.files else [""] * len(names)
    with np.load(args.model, allow_pickle=False) as model:
        tets, nodes, skin = len(model["tets"]), len(model["rest_positions"]), len(model["skin_vertices"])
    folder = Path(tempfile.mkdtemp(prefix="animate_memory_"))
    weights = folder / "weights.npz"
    np.savez(weights, names=np.array(names), weights=smooth_weights(names, contexts, args.frames, args.strength), fps=np.array(24.0))
    command = [sys.executable, "-m", "solver", "--json", "animate", str(args.model), str(args.fit), str(weights),
               "-o", str(folder / "result.npz")] + (["--collisions", args.collisions] if args.collisions else [])
    print(f"model: {tets} tets, {nodes} nodes, {skin} skin vertices; {len(names)} keys, {args.frames} frames at "
          f"24 fps, weights × {args.strength:g}, collisions {args.collisions or 'off'}; commit {commit()}", flush=True)
    child = subprocess.Popen(command, cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    frames_done, seconds, samples, peak, errors = [0], [], [], [0.0], []

    def read_progress():
        for line in child.stdout:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue
            if message.get("type") == "error":
                errors.append(message.get("message", ""))
            if message.get("frame"):
                frames_done[0] = int(message["frame"])
                if "seconds" in message:
                    seconds.append(float(message["seconds"]))

    reader = threading.Thread(target=read_progress, daemon=True)
    reader.start()
    started = time.monotonic()
    while child.poll() is None:
        if time.monotonic() - started > args.timeout:
            child.kill()
            raise SystemExit(f"the bake took longer than {args.timeout:.0f} s")
        rss, hwm = resident_mb(child.pid)
        if np.isfinite(rss):
            samples.append((frames_done[0], rss))
            peak[0] = max(peak[0], hwm)
        if args.stop_after and frames_done[0] >= args.stop_after:
            child.kill()
            child.wait(timeout=60)
            first = next((mb for frame, mb in samples if frame >= 1), float("nan"))
            print(f"stopped after {frames_done[0]} of {args.frames} frames: peak resident memory {peak[0]:.0f} MB, "
                  f"{first:.0f} MB at the first frame; {np.median(seconds):.2f} s a frame median; "
                  f"wall {time.monotonic() - started:.0f} s")
            return
        time.sleep(0.25)
    reader.join(timeout=10)
    if child.returncode != 0:
        raise SystemExit(f"animate failed ({child.returncode}): {' '.join(errors)} {child.stderr.read()[-2000:]}")
    data = np.array(samples)
    late = data[data[:, 0] >= max(1, args.frames // 10)]
    slope = float(np.polyfit(late[:, 0], late[:, 1], 1)[0]) * 1000.0 if len(np.unique(late[:, 0])) > 1 else float("nan")
    early = late[0, 1] if len(late) else float("nan")
    print(f"peak resident memory {peak[0]:.0f} MB; {early:.0f} MB after {args.frames // 10} frames, "
          f"{data[-1, 1]:.0f} MB at the last sample; growth {slope:+.1f} MB per 1,000 frames; "
          f"{np.median(seconds):.2f} s a frame median ({len(seconds)} frames); wall {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
