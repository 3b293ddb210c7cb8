"""Volumetric blendshapes on the ICT face: Projective Dynamics frame time beside Newton's on the
same energy (solver/volumetric_blendshapes/; docs/volumetric_blendshapes.md).

The named keys of /work/s11/ict's FIT.npz (its shape_key_deltas and jaw poses) are transferred
onto the model's tets (one PD factorisation for all), then a ramp of their weights is played:
each frame by PD warm-started from the previous one (the one factorisation reused), and the same
frame by projected Newton (CHOLMOD, a factorisation per iteration) from the same start. Prints
the setup, seconds and iterations per frame, and the largest node distance PD − Newton.

    .venv/bin/python bench/pd.py [--keys jawOpen mouthSmile_L mouthSmile_R] [--frames 3]
        [--model M.npz --fit F.npz] [--pd-tolerance 1e-7]
        [--transfer-iterations 60] [--transfer-tolerance 1e-6]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "bench"))

from bench_info import commit  # noqa: E402
from solver.inverse.fit_file import load_fit  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.volumetric_blendshapes import animate as player_module  # noqa: E402
from solver.volumetric_blendshapes.animate import VolumetricBlendshapePlayer, posed_bones  # noqa: E402
from solver.volumetric_blendshapes.projective_dynamics import model_fixed_nodes, newton_solve  # noqa: E402

ICT = Path("/work/s11/ict")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ICT / "model.npz")
    parser.add_argument("--fit", type=Path, default=ICT / "fit.npz")
    parser.add_argument("--keys", nargs="+", default=["jawOpen", "mouthSmile_L", "mouthSmile_R"])
    parser.add_argument("--frames", type=int, default=3)
    parser.add_argument("--pd-tolerance", type=float, default=1e-7, help="m: PD stops when no node moves more")
    parser.add_argument("--transfer-iterations", type=int, default=60)
    parser.add_argument("--transfer-tolerance", type=float, default=1e-6, help="m, as --pd-tolerance, for the transfer")
    args = parser.parse_args()
    model = load_model(args.model)
    fit = load_fit(args.fit, model)
    names = [str(name) for name in fit["shape_key_names"]]
    chosen = [names.index(key) for key in args.keys]
    print(f"commit {commit()}; {len(model['rest_positions'])} nodes, {len(model['tets'])} tets, "
          f"{len(model_fixed_nodes(model))} bone nodes fixed; keys {', '.join(args.keys)}")
    player_module.PD_TOLERANCE_M = args.pd_tolerance
    started = time.perf_counter()
    player = VolumetricBlendshapePlayer(model, np.array(args.keys), np.asarray(fit["shape_key_deltas"], float)[chosen],
                                        np.asarray(fit["jaw"], float)[chosen], transfer_iterations=args.transfer_iterations,
                                        transfer_tolerance_m=args.transfer_tolerance)
    print(f"setup {time.perf_counter() - started:.1f} s (transfer of {len(chosen)} keys {player.transfer_seconds:.1f} s, "
          f"at most {args.transfer_iterations} PD iterations each); "
          f"global matrix factorised in {player.solver.factorisation_seconds:.2f} s")
    for frame in range(1, args.frames + 1):
        weights = np.full(len(chosen), frame / args.frames)
        previous = player.x.copy()
        x_pd, pd_report = player.frame(weights)
        start = previous.copy()
        start[player.solver.fixed] = posed_bones(model, weights @ player.shape_jaw)[player.solver.fixed]
        x_newton, newton_report = newton_solve(player.energy.terms, start, np.flatnonzero(player.solver.fixed),
                                               iterations=30, tolerance_m=1e-9)
        print(f"frame {frame} (weights {frame / args.frames:.2f}): PD {pd_report.seconds:.2f} s "
              f"({pd_report.iterations} it, {pd_report.seconds / pd_report.iterations * 1e3:.0f} ms/it, "
              f"converged {pd_report.converged}); Newton {newton_report.seconds:.2f} s ({newton_report.iterations} it, "
              f"converged {newton_report.converged}); max |PD − Newton| {1e6 * np.abs(x_pd - x_newton).max():.3f} µm")


if __name__ == "__main__":
    main()
