"""Newton with scipy's general sparse LU for each step: the baseline CHOLMOD is measured against
(bench/newton_solve.py, bench/forward.py) and a cross-check of the production solve in the tests.
It is not part of the shipped solver."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import MatrixRankWarning, spsolve

from solver.physics.constraints import BoneConstraints
from solver.physics.linear_solver import HessianNotPositiveDefinite, LowRankTerm, shift_sequence
from solver.physics.newton import DEFAULT_MAX_ITERATIONS, DEFAULT_TOLERANCE, NewtonResult, Objective, newton_minimise


class SpsolveLinearSolver:
    """The same solve with scipy's general sparse LU (SuperLU): the benchmark's baseline.

    LU cannot tell a positive definite matrix from an indefinite one, so here the shift is
    raised until the solution is a descent direction (d · rhs > 0, rhs = −∇E)."""

    def solve(self, matrix: sp.csc_matrix, rhs: np.ndarray, relative_tolerance: float = 0.0,
              low_rank: LowRankTerm | None = None, shifts: tuple | None = None) -> tuple[np.ndarray, float]:
        # `low_rank` is part of `matrix` already; a direct solve has no use for it.
        identity = sp.eye(matrix.shape[0], format="csc")
        for shift in (shift_sequence(matrix) if shifts is None else shifts):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MatrixRankWarning)    # a singular matrix gives NaNs, handled below
                direction = np.atleast_1d(spsolve(matrix + shift * identity if shift else matrix, rhs))
            if np.all(np.isfinite(direction)) and direction @ rhs > 0.0:
                return direction, shift
        raise HessianNotPositiveDefinite(f"no descent direction even with a diagonal shift of {shift:.3g}")


def solve_reference_spsolve(objective: Objective, constraints: BoneConstraints, x0: np.ndarray,
                            skull_transform: np.ndarray | None = None, jaw_transform: np.ndarray | None = None,
                            *, tolerance: float = DEFAULT_TOLERANCE, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                            force_scale: float | None = None) -> NewtonResult:
    """The same Newton loop with scipy's spsolve for each step: the baseline CHOLMOD is
    measured against (bench/newton_solve.py) and a cross-check in the tests."""
    constraints.use_frame(skull_transform, jaw_transform)
    return newton_minimise(objective, constraints, SpsolveLinearSolver(), x0, tolerance=tolerance,
                           max_iterations=max_iterations, force_scale=force_scale)
