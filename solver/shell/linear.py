"""The shell's constant system matrix, factorised once and solved by substitution (paper 001
Eq. 11: every potential is quadratic once the spring and bending directions are lagged, so the
Hessian never changes and each sub-step is one forward and one backward substitution).

The Hessian of the 3n positions is K ⊗ I₃ (every term acts on x, y and z alike), so only the
n × n K is factorised, and the three coordinates are solved together as three right-hand sides
read from the interleaved (n, 3) positions: each factor entry is loaded once for three
multiply-adds.

The factor comes from SciPy's SuperLU with a symmetric fill-reducing ordering (minimum degree
on AᵀA + A, no pivoting: K is symmetric positive definite, so L U = L D Lᵀ and only the unit
lower L and the diagonal D are kept). It runs wherever SciPy does, so the add-on's bundled
solver needs neither scikit-sparse nor cholespy for the shell, and the substitution is a
compiled loop (cholespy's own solve cost 250 µs for three right-hand sides at 2k vertices,
too much for 5 sub-steps in half a millisecond).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit


class ConstantFactor:
    """L D Lᵀ of a symmetric positive definite n × n matrix under a fill-reducing permutation."""

    def __init__(self, matrix: sp.spmatrix, dtype=np.float64):
        from scipy.sparse.linalg import splu
        matrix = sp.csc_matrix(matrix, dtype=np.float64)
        lu = splu(matrix, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                  options=dict(SymmetricMode=True))
        if not np.array_equal(lu.perm_r, lu.perm_c):
            raise ValueError("shell matrix: the factorisation pivoted; the matrix is not positive definite")
        diagonal = lu.U.diagonal()
        if not (diagonal > 0).all():
            raise ValueError("shell matrix: not positive definite (a non-positive pivot)")
        lower = sp.csc_matrix(lu.L)
        lower.sort_indices()
        self.size = matrix.shape[0]
        # Row i of the matrix is row perm[i] of the factor (Pr A Pc = L U with Pr = Pcᵀ).
        self.perm = np.ascontiguousarray(lu.perm_r, dtype=np.int64)
        self.indptr = np.ascontiguousarray(lower.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(lower.indices, dtype=np.int64)
        self.values = np.ascontiguousarray(lower.data, dtype=dtype)
        self.inverse_diagonal = np.ascontiguousarray(1.0 / diagonal, dtype=dtype)
        self.work = np.zeros((self.size, 3), dtype=dtype)
        self.nonzeros = int(lower.nnz)
        if not np.allclose(self.values[self.indptr[:-1]], 1.0):
            raise ValueError("shell matrix: unexpected factor layout (unit diagonal first in each column)")

    def solve(self, rhs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """x with K x = rhs for (n, 3) rhs (each column one right-hand side)."""
        out = np.empty((self.size, 3)) if out is None else out
        _solve(self.perm, self.indptr, self.indices, self.values, self.inverse_diagonal, rhs, self.work, out)
        return out


@njit(cache=True, fastmath=True)
def _solve(perm, indptr, indices, values, inverse_diagonal, rhs, work, out):
    n = perm.shape[0]
    for i in range(n):
        p = perm[i]
        work[p, 0] = rhs[i, 0]
        work[p, 1] = rhs[i, 1]
        work[p, 2] = rhs[i, 2]
    # L y = b (unit lower, column by column)
    for j in range(n):
        y0, y1, y2 = work[j, 0], work[j, 1], work[j, 2]
        for k in range(indptr[j] + 1, indptr[j + 1]):
            i = indices[k]
            v = values[k]
            work[i, 0] -= v * y0
            work[i, 1] -= v * y1
            work[i, 2] -= v * y2
    for j in range(n):
        d = inverse_diagonal[j]
        work[j, 0] *= d
        work[j, 1] *= d
        work[j, 2] *= d
    # Lᵀ z = y (row j of Lᵀ is column j of L)
    for j in range(n - 1, -1, -1):
        z0, z1, z2 = work[j, 0], work[j, 1], work[j, 2]
        for k in range(indptr[j] + 1, indptr[j + 1]):
            i = indices[k]
            v = values[k]
            z0 -= v * work[i, 0]
            z1 -= v * work[i, 1]
            z2 -= v * work[i, 2]
        work[j, 0], work[j, 1], work[j, 2] = z0, z1, z2
    for i in range(n):
        p = perm[i]
        out[i, 0] = work[p, 0]
        out[i, 1] = work[p, 1]
        out[i, 2] = work[p, 2]
