"""Seconds per forward frame on the ICT face, one animation, as `animate` steps it (issue 41).

Two animations:
    smooth        a synthetic 24 fps take of muscle activations (no fit needed): smile,
                  pucker-like brow and frown muscles and the jaw, each a slow sine of its own
                  period, gravity on;
    performance   frames of a captured take (../shared/data/performance_dev.npz, 30 fps) blended
                  through a fit of the ICT shapes (blend → simulate, as `animate MODEL FIT
                  WEIGHTS` does, the shape-key detail as the skin offset), led in from the neutral
                  face by 15 frames when it starts past frame 0.
`--collisions` adds teeth and lip contact (CollisionScene(model, teeth=True, lips=True)). The
first `--warmup` frames are solved and not counted (numba's cache load, CHOLMOD's analysis).

Prints the commit, the mesh, the median and mean seconds per counted frame, Newton iterations
and factorisations; `--json` writes them with every frame's figures, `--positions` the counted
frames' node positions (.npy), so two commits' frames can be compared (bench/forward_paired.py
runs two checkouts in turn and compares both). `--solver-from DIR` imports the solver from
another checkout of the project (the previous commit, for a paired run).

    .venv/bin/python bench/forward_frames.py --model ICT.npz [--animation smooth] [--frames 24]
    .venv/bin/python bench/forward_frames.py --model ICT.npz --animation performance --fit FIT.npz \\
        --range 200:230 [--collisions]
    .venv/bin/python bench/forward_frames.py --model ICT.npz --no-shortcuts     # the solver before them

Targets (issue 41), ICT ~35k tets, 2 cores: ≤ 0.25 s a frame without collisions, ≤ 0.35 s with
teeth and lip contact; ≤ 1 s at ~100k tets.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
DEV_PERFORMANCE = REPOSITORY.parent / "shared" / "data" / "performance_dev.npz"
LEAD_IN = 15
SMOOTH_MUSCLES = {            # muscle base name: (largest contraction γ − 1, period in frames)
    "zygomaticus_major": (0.6, 48), "zygomaticus_minor": (0.4, 48), "levator_anguli_oris": (0.4, 60),
    "risorius": (0.3, 40), "frontalis": (0.5, 72), "corrugator": (0.4, 56), "orbicularis_oris": (0.3, 36),
}


def _arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="MODEL.npz built from the ICT rig")
    parser.add_argument("--animation", choices=("smooth", "performance"), default="smooth")
    parser.add_argument("--frames", type=int, default=24, help="smooth: counted frames")
    parser.add_argument("--fit", type=Path, help="performance: FIT.npz of the ICT shapes")
    parser.add_argument("--weights", type=Path, default=DEV_PERFORMANCE)
    parser.add_argument("--range", default="200:230", help="performance: frames A:B of the take")
    parser.add_argument("--warmup", type=int, default=2, help="frames solved first and not counted")
    parser.add_argument("--collisions", action="store_true", help="teeth and lip contact")
    parser.add_argument("--no-shortcuts", action="store_true",
                        help="without issue 41's forward shortcuts (on by default without collisions): the "
                             "predicted start, the oversolve guard and the stale-factor refresh")
    parser.add_argument("--solver-from", type=Path, default=REPOSITORY,
                        help="the checkout whose solver/ to import (default: this one)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the counted frames (cProfile) and print where their time went")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--positions", type=Path, help="write the counted frames' node positions here (.npy)")
    return parser.parse_args()


def _commit(folder: Path) -> str:
    try:
        described = subprocess.run(["git", "-C", str(folder), "describe", "--always", "--dirty"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        described = ""
    return described or "unknown"


def smooth_frames(model, count: int):
    """(activations (T,M,3,3), jaw (T,5)) of the synthetic take, T = count."""
    from solver.physics.activation import tet_activations
    names = [str(name) for name in model["muscle_names"]]
    time_axis = np.arange(count, dtype=np.float64)
    activations, jaws = [], []
    for frame in time_axis:
        contraction = np.ones(len(names))
        for column, name in enumerate(names):
            for base, (amplitude, period) in SMOOTH_MUSCLES.items():
                if name.startswith(base):
                    contraction[column] = 1.0 + amplitude * 0.5 * (1.0 - np.cos(2.0 * np.pi * frame / period))
        activations.append(tet_activations(model, contraction))
        jaw = np.zeros(5)
        jaw[0] = 0.12 * 0.5 * (1.0 - np.cos(2.0 * np.pi * frame / 64.0))
        jaws.append(jaw)
    return np.array(activations), np.array(jaws), None


def performance_frames(model, fit_path: Path, weights_path: Path, frames: str):
    """(activations (T,M,3,3), jaw (T,5), skin detail (T,V,3)) of the take's frames A:B, blended as
    `animate MODEL FIT WEIGHTS` blends them."""
    from solver.inverse.blend import blend, load_weights
    from solver.inverse.fit_file import load_fit
    fit = load_fit(fit_path, model)
    weights, _, fps, _ = load_weights(weights_path, fit)
    start, stop = (int(part) for part in frames.split(":"))
    clip = weights[start:stop]
    if start > 0:
        clip = np.concatenate([np.linspace(0.0, 1.0, LEAD_IN, endpoint=False)[:, None] * clip[:1], clip])
    blended = blend(fit, clip, fps, np.tile(np.eye(4), (len(clip), 1, 1)))
    animation = blended.activations
    activations = np.array([animation.tet_activations(model, frame) for frame in range(len(clip))])
    detail = np.array([blended.detail[frame] for frame in range(len(clip))])
    return activations, animation.jaw, detail, fps


# Where a frame's time goes: (label, file, function) of the profiled functions whose own time is
# the part's; the rest is Python and numpy between them.
PROFILE_PARTS = (
    ("tissue passes (E, ∇E, ∇²E: corotated._assemble)", "corotated.py", "_assemble"),
    ("CHOLMOD triangular solves (CG's preconditioner)", "cholesky.py", "solve"),
    ("CHOLMOD numeric factorisations", "cholesky.py", "factorise"),
    ("CHOLMOD rank updates of the kept factor (contacts)", "cholesky.py", "modify"),
    ("Pᵀ H P (constraints._reduce_into)", "constraints.py", "_reduce_into"),
    ("volume floor", "volume_floor.py", None),
    ("collision detection and contact", ("collisions", "contact"), None),
)


def where_the_time_went(profiler, frames: int) -> list:
    """Rows (part, seconds a frame, share, calls a frame) of PROFILE_PARTS and the rest."""
    import pstats
    stats = pstats.Stats(profiler).stats
    total = sum(entry[2] for entry in stats.values())
    rows, claimed = [], 0.0
    for label, files, function in PROFILE_PARTS:
        files = (files,) if isinstance(files, str) else files
        own = calls = 0.0
        for (filename, _, name), entry in stats.items():
            if any(part in filename for part in files) and "site-packages" not in filename \
                    and (function is None or name == function):
                own += entry[2]
                calls += entry[1]
        claimed += own
        rows.append({"part": label, "seconds_a_frame": own / frames, "share": own / total,
                     "calls_a_frame": calls / frames})
    rows.append({"part": "the rest (numpy, scipy CSR products in CG, Python)", "seconds_a_frame": (total - claimed) / frames,
                 "share": (total - claimed) / total, "calls_a_frame": 0.0})
    return rows


def main():
    args = _arguments()
    sys.path.insert(0, str(args.solver_from.resolve()))
    from solver.model_file import load_model
    from solver.physics.simulator import FaceSimulator, SimulationSettings

    model = load_model(args.model)
    fps, detail = 24.0, None
    if args.animation == "smooth":
        activations, jaws, detail = smooth_frames(model, args.frames + args.warmup)
    else:
        if args.fit is None:
            raise SystemExit("--animation performance needs --fit FIT.npz")
        activations, jaws, detail, fps = performance_frames(model, args.fit, args.weights, args.range)
    settings = {"fps": fps}
    # Set either way, so that a solver from before they were the defaults (--solver-from) runs them too.
    if args.no_shortcuts:
        settings.update(predict_start=False, oversolve_guard=None, stale_factor_krylov_iterations=None)
    else:
        settings.update(predict_start=True, oversolve_guard=0.2, stale_factor_krylov_iterations=6)
    scene = None
    if args.collisions:
        from solver.collisions.scene import CollisionScene
        scene = CollisionScene(model, teeth=True, lips=True)
    simulator = FaceSimulator(model, SimulationSettings(**settings), collisions=scene)
    records, positions = [], []
    profiler = None
    started = time.perf_counter()
    for frame in range(len(activations)):
        offset = None if detail is None or scene is None else detail[frame]
        if frame == args.warmup and args.profile:
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        result = simulator.step(activations[frame], jaws[frame], frame=frame, skin_offset=offset)
        if frame >= args.warmup:
            records.append({"seconds": result.seconds, "iterations": result.iterations,
                            "factorisations": result.factorisations, "krylov": result.krylov_iterations,
                            "converged": bool(result.converged), "load_steps": result.load_steps,
                            "rounds": result.collision_rounds})
            positions.append(result.positions)
    if profiler is not None:
        profiler.disable()
    seconds = np.array([record["seconds"] for record in records])
    summary = {"commit": _commit(args.solver_from), "solver_from": str(args.solver_from.resolve()),
               "tets": int(len(model["tets"])), "nodes": int(len(model["rest_positions"])),
               "animation": args.animation, "collisions": args.collisions, "counted_frames": len(records),
               "median_seconds": float(np.median(seconds)), "mean_seconds": float(seconds.mean()),
               "iterations": int(sum(r["iterations"] for r in records)),
               "factorisations": int(sum(r["factorisations"] for r in records)),
               "unconverged": int(sum(not r["converged"] for r in records)),
               "wall_seconds": time.perf_counter() - started, "frames": records}
    print(f"commit {summary['commit']}; ICT {summary['tets']} tets, {summary['nodes']} nodes; {args.animation}"
          f"{' with teeth and lip contact' if args.collisions else ''}: {len(records)} frames, median "
          f"{summary['median_seconds']:.3f} s, mean {summary['mean_seconds']:.3f} s a frame; Newton iterations "
          f"{summary['iterations']}, factorisations {summary['factorisations']}, unconverged {summary['unconverged']}")
    if profiler is not None:
        summary["profile"] = where_the_time_went(profiler, len(records))
        for row in summary["profile"]:
            print(f"  {row['part']:58s} {row['seconds_a_frame']:7.3f} s a frame {row['share']:6.1%}  "
                  f"{row['calls_a_frame']:5.1f} calls a frame")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    if args.positions:
        np.save(args.positions, np.array(positions))


if __name__ == "__main__":
    main()
