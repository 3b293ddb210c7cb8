"""Forward-physics frame time on the ICT face: quasi-static, warm-started, CHOLMOD vs spsolve.

With --cholesky the same frames run on each named sparse Cholesky back end in turn
(solver/physics/cholesky.py: scikit-sparse, the Linux build, and cholespy, the portable wheels
the extension bundles), so the two are measured side by side in one run.

A mid-strength expression (smile muscles ramped to γ = 1.5, jaw opened 0.1 rad) is solved
over a few frames under gravity, each frame warm-started from the previous one, as an
animation is. The same frames are then solved with the same Newton loop on a plain
scipy `spsolve` (SuperLU) instead of CHOLMOD. Prints seconds per frame, Newton iterations
and tet counts, for each requested mesh size.

    .venv/bin/python bench/forward.py [--target-tets 10000 35000 100000] [--frames 5] [--no-baseline]
        [--cholesky scikit-sparse cholespy]

Anchor: Phace reports ≈ 22 s per frame on 35,626 tets (paper 000 §7). Target: ≤ 1 s per frame.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from bench_info import commit  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.physics import cholesky  # noqa: E402
from solver.physics.activation import tet_activations  # noqa: E402
from baselines.spsolve_newton import solve_reference_spsolve  # noqa: E402
from solver.physics.simulator import FaceSimulator, SimulationSettings  # noqa: E402
from tests.ict_data import ICT_PATH, ict_available, load_ict_rig  # noqa: E402

SMILE_MUSCLES = ("zygomaticus_major", "zygomaticus_minor", "levator_anguli_oris", "risorius")


class _SpsolveNewton:
    """The simulator's Newton solver with SuperLU in place of CHOLMOD, for the baseline."""

    def __init__(self, simulator):
        self.simulator = simulator

    def solve(self, x0, skull_transform=None, jaw_transform=None, force_scale=None):
        s = self.simulator.settings
        return solve_reference_spsolve(self.simulator.objective, self.simulator.constraints, x0,
                                       skull_transform, jaw_transform, tolerance=s.tolerance,
                                       max_iterations=s.max_iterations, force_scale=force_scale)


def expression_frames(model, frames):
    names = [str(n) for n in model["muscle_names"]]
    for strength in np.linspace(0.2, 1.0, frames):
        contraction = np.ones(len(names))
        for base in SMILE_MUSCLES:
            for side in "LR":
                contraction[names.index(f"{base}_{side}")] = 1.0 + 0.5 * strength
        jaw = np.zeros(5)
        jaw[0] = 0.1 * strength
        yield tet_activations(model, contraction), jaw


def run(model, frames, baseline):
    simulator = FaceSimulator(model, SimulationSettings(gravity=True))
    if baseline:
        simulator.solver = _SpsolveNewton(simulator)
    identity = np.broadcast_to(np.eye(3), (len(model["tets"]), 3, 3))
    settle = simulator.step(identity)          # neutral under gravity; includes CHOLMOD's analysis
    steps = [simulator.step(activation, jaw) for activation, jaw in expression_frames(model, frames)]
    return settle, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-tets", type=int, nargs="+", default=[10000, 35000, 100000])
    parser.add_argument("--frames", type=int, default=5)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--cholesky", nargs="+", choices=cholesky.BACKENDS, default=None,
                        help="the sparse Cholesky back ends to run, each in turn (default: the one chosen)")
    args = parser.parse_args()
    if not ict_available():
        sys.exit(f"the ICT FaceKit data is needed for this benchmark: {ICT_PATH} not found")
    rig = load_ict_rig()
    print(f"commit {commit()}; ICT face: {len(rig.vertices)} skin vertices; {args.frames} warm-started "
          f"expression frames after a neutral frame under gravity")
    backends = args.cholesky or [cholesky.backend_name()]
    for target in args.target_tets:
        model = build_model(rig, BuildOptions(target_tets=target))
        print(f"\n{len(model['tets'])} tets, {len(model['rest_positions'])} nodes (target {target})")
        runs = [(name, False) for name in backends] + ([("spsolve", True)] if not args.no_baseline else [])
        for label, baseline in runs:
            if not baseline:
                os.environ[cholesky.BACKEND_VARIABLE] = label
                cholesky.backend_name.cache_clear()
                label = f"{label} {cholesky.backend_version(label)}"
            started = time.perf_counter()
            settle, steps = run(model, args.frames, baseline)
            per_frame = np.mean([s.seconds for s in steps])
            iterations = [s.iterations for s in steps]
            seconds = ", ".join(f"{s.seconds:.2f}" for s in steps)
            linear_algebra = ("" if baseline else f", Cholesky factorisations {[s.factorisations for s in steps]}, "
                              f"CG iterations {[s.krylov_iterations for s in steps]}")
            unconverged = sum(not s.converged for s in steps) + (not settle.converged)
            print(f"  {label:20s} {per_frame:6.2f} s per frame ({seconds}), Newton iterations {iterations}"
                  f"{linear_algebra}; neutral frame "
                  f"{settle.seconds:.2f} s ({settle.iterations} it); unconverged frames: {unconverged}; "
                  f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
