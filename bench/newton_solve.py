"""Benchmark the pieces of a Newton step that do not depend on the energy, on the demo head.

Run from the repository root:  .venv/bin/python bench/newton_solve.py [--target-tets N] [--json]

The demo head is built at the target tet count. A test objective would say nothing about the
real solve, so this times the solver's own work per iteration and per frame on the model's
real sizes and patterns:

* building P and c for a frame (``BoneConstraints.reduction``, the jaw moving each frame);
* Pᵀ H P for a random symmetric positive definite H on the model's tet pattern (every tet a
  random 12×12 PSD block, plus a mass-like diagonal), with the fixed-pattern block reduction
  (first call: pattern set-up; then per call) against scipy's general P.T @ H @ P;
* the reduced solve: CHOLMOD's symbolic analysis (once per model), its numeric supernodal
  factorisation and triangular solves (every iteration), against scipy's spsolve (SuperLU,
  the default COLAMD ordering), the baseline of ``solve_reference_spsolve``.

Every time is the median of several repetitions after one untimed call.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import spsolve
from sksparse import cholmod

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.demo_head import make_demo_rig  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.physics.bones import bone_transforms, rigid_transform, rotation_about_y  # noqa: E402
from solver.physics.constraints import BoneConstraints  # noqa: E402

REPEATS = 7
SPSOLVE_REPEATS = 3             # SuperLU is slow enough that fewer runs give a stable median


def median_seconds(function, repeats=REPEATS) -> float:
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_tet_hessian(model, seed=0) -> sp.csr_matrix:
    """A random SPD 3N × 3N matrix with exactly the pattern an elastic energy has on these tets."""
    tets, node_count = model["tets"], len(model["rest_positions"])
    rng = np.random.default_rng(seed)
    factors = rng.normal(size=(len(tets), 12, 12))
    blocks = factors @ factors.transpose(0, 2, 1) / 12.0
    dofs = (3 * tets[:, :, None] + np.arange(3)).reshape(-1, 12)
    diagonal = np.arange(3 * node_count)
    rows = np.concatenate([np.repeat(dofs, 12, axis=1).ravel(), diagonal])
    cols = np.concatenate([np.tile(dofs, (1, 12)).ravel(), diagonal])
    values = np.concatenate([blocks.ravel(), np.full(diagonal.size, 0.1)])
    return sp.csr_matrix((values, (rows, cols)), shape=(3 * node_count, 3 * node_count))


def frame_transforms(model, frame_index):
    """A head turning and a jaw opening a little more every frame."""
    head = rigid_transform(rotation_about_y(0.01 * frame_index), [0.0, 0.0, 0.001 * frame_index])
    return bone_transforms(head, model["jaw_frame"], [0.02 * frame_index, 0.005 * frame_index, 0.0, 0.0, 0.0])


def measure(target_tets: int) -> dict:
    start = time.perf_counter()
    model = build_model(make_demo_rig(), BuildOptions(target_tets=target_tets))
    build_seconds = time.perf_counter() - start

    start = time.perf_counter()
    constraints = BoneConstraints(model)
    constraints_seconds = time.perf_counter() - start
    frames = [frame_transforms(model, k) for k in range(REPEATS + 1)]
    frame_counter = iter(range(10 ** 9))
    reduction_seconds = median_seconds(lambda: constraints.reduction(*frames[next(frame_counter) % len(frames)]))

    hessian = random_tet_hessian(model)
    P, _ = constraints.reduction(*frames[3])
    start = time.perf_counter()
    reduced = constraints.reduce_hessian(hessian)
    first_reduction_seconds = time.perf_counter() - start
    block_reduction_seconds = median_seconds(lambda: constraints.reduce_hessian(hessian))
    scipy_reduction_seconds = median_seconds(lambda: (P.T @ hessian @ P).tocsc())
    difference = abs(reduced - (P.T @ hessian @ P).tocsc()).max()

    rhs = np.random.default_rng(1).normal(size=reduced.shape[0])
    start = time.perf_counter()
    factor = cholmod.analyze(reduced, mode="supernodal")
    analyze_seconds = time.perf_counter() - start
    factorise_seconds = median_seconds(lambda: factor.cholesky_inplace(reduced))
    triangular_solve_seconds = median_seconds(lambda: factor.solve_A(rhs))
    cholmod_solution = factor.solve_A(rhs)
    spsolve_seconds = median_seconds(lambda: spsolve(reduced, rhs), repeats=SPSOLVE_REPEATS)
    spsolve_solution = spsolve(reduced, rhs)
    scale = np.abs(rhs).max()
    return {
        "target_tets": target_tets,
        "tets": int(len(model["tets"])),
        "nodes": int(len(model["rest_positions"])),
        "pinned_nodes": int(len(model["pin_nodes"])),
        "sliding_nodes": int(len(model["slide_nodes"])),
        "reduced_unknowns": int(constraints.reduced_size),
        "hessian_nonzeros": int(hessian.nnz),
        "reduced_hessian_nonzeros": int(reduced.nnz),
        "factor_nonzeros": int(factor.L().nnz),
        "build_seconds": round(build_seconds, 2),
        "ms": {
            "constraints_setup": 1e3 * constraints_seconds,
            "P_per_frame": 1e3 * reduction_seconds,
            "PtHP_first_call_with_pattern": 1e3 * first_reduction_seconds,
            "PtHP_fixed_pattern": 1e3 * block_reduction_seconds,
            "PtHP_scipy_product": 1e3 * scipy_reduction_seconds,
            "cholmod_symbolic_analysis": 1e3 * analyze_seconds,
            "cholmod_numeric_factorisation": 1e3 * factorise_seconds,
            "cholmod_solve": 1e3 * triangular_solve_seconds,
            "spsolve": 1e3 * spsolve_seconds,
        },
        "PtHP_max_difference_to_scipy": float(difference),
        "relative_residual": {
            "cholmod": float(np.abs(reduced @ cholmod_solution - rhs).max() / scale),
            "spsolve": float(np.abs(reduced @ spsolve_solution - rhs).max() / scale),
        },
    }


def print_report(result: dict) -> None:
    ms = result["ms"]
    print(f"demo head at target {result['target_tets']}: {result['tets']} tets, {result['nodes']} nodes "
          f"({result['pinned_nodes']} pinned, {result['sliding_nodes']} sliding), built in {result['build_seconds']:.1f} s")
    print(f"reduced unknowns: {result['reduced_unknowns']}; nonzeros: H {result['hessian_nonzeros']}, "
          f"PᵀHP {result['reduced_hessian_nonzeros']}, Cholesky factor {result['factor_nonzeros']}")
    print(f"BoneConstraints set-up (once per model):   {ms['constraints_setup']:8.2f} ms")
    print(f"P, c per frame:                            {ms['P_per_frame']:8.2f} ms")
    print(f"PᵀHP, first call (pattern set-up):          {ms['PtHP_first_call_with_pattern']:8.2f} ms")
    print(f"PᵀHP, fixed pattern (per iteration):        {ms['PtHP_fixed_pattern']:8.2f} ms")
    print(f"PᵀHP, scipy P.T @ H @ P (for comparison):   {ms['PtHP_scipy_product']:8.2f} ms   "
          f"(max difference {result['PtHP_max_difference_to_scipy']:.1e})")
    print(f"CHOLMOD symbolic analysis (once per model): {ms['cholmod_symbolic_analysis']:8.2f} ms")
    print(f"CHOLMOD numeric factorisation:              {ms['cholmod_numeric_factorisation']:8.2f} ms")
    print(f"CHOLMOD triangular solves:                  {ms['cholmod_solve']:8.2f} ms")
    factor_and_solve = ms["cholmod_numeric_factorisation"] + ms["cholmod_solve"]
    print(f"spsolve (SuperLU) factor + solve:           {ms['spsolve']:8.2f} ms   "
          f"({ms['spsolve'] / factor_and_solve:.1f}x CHOLMOD's factorisation + solve)")
    residual = result["relative_residual"]
    print(f"relative residual: CHOLMOD {residual['cholmod']:.1e}, spsolve {residual['spsolve']:.1e}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-tets", type=int, default=35000, help="tet count to aim for (default 35000)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    args = parser.parse_args(argv)
    result = measure(args.target_tets)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_report(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
