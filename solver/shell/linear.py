"""The shell's constant system matrix, factorised once and solved by substitution (paper 001
Eq. 11: every potential is quadratic once the spring and bending directions are lagged, so the
Hessian never changes and each sub-step is one forward and one backward substitution).

The Hessian of the 3n positions is K ⊗ I₃ (every term acts on x, y and z alike), so only the
n × n K is factorised, and the three coordinates are solved together as three right-hand sides
read from the interleaved (n, 3) positions: each factor entry is loaded once for three
multiply-adds.

The factor comes from SciPy's SuperLU with a symmetric fill-reducing ordering (minimum degree
on AᵀA + A, no pivoting: K is symmetric positive definite, so L U = L D Lᵀ and only the unit
lower L and the diagonal D are kept; L is stored twice, by rows for the forward pass and by
columns for the backward one, so both passes gather). Measured at 4k triangles (ICT skin,
nnz(L) = 100,701): the plain column-scatter substitution with signed indices 324 µs, this one
206 µs; supernodal dense blocks and a padded 4-wide layout were not faster; float32 values
gained nothing measurable (the loop is latency-bound, not bandwidth-bound). It runs wherever SciPy does, so the add-on's bundled
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
        strict = sp.tril(sp.csc_matrix(lu.L), -1)
        by_row, by_column = sp.csr_matrix(strict), sp.csc_matrix(strict)
        by_row.sort_indices()
        by_column.sort_indices()
        self.size = matrix.shape[0]
        # Unsigned indices: the compiled loops then skip the negative-index wraparound test on
        # every access (1.5× faster substitution at 4k triangles), and 16 bits halve their reads.
        index = np.uint16 if self.size < 2 ** 16 else np.uint32
        # Row i of the matrix is row perm[i] of the factor (Pr A Pc = L U with Pr = Pcᵀ).
        self.perm = np.ascontiguousarray(lu.perm_r, dtype=np.int64)
        self.row_start = np.ascontiguousarray(by_row.indptr, dtype=np.int64)
        self.row_columns = np.ascontiguousarray(by_row.indices, dtype=index)
        self.row_values = np.ascontiguousarray(by_row.data, dtype=dtype)
        self.column_start = np.ascontiguousarray(by_column.indptr, dtype=np.int64)
        self.column_rows = np.ascontiguousarray(by_column.indices, dtype=index)
        self.column_values = np.ascontiguousarray(by_column.data, dtype=dtype)
        self.inverse_diagonal = np.ascontiguousarray(1.0 / diagonal, dtype=np.float64)
        self.work = np.zeros((self.size, 3))
        self.nonzeros = int(strict.nnz) + self.size

    def arrays(self) -> tuple:
        """The arrays `substitute` takes, in its order."""
        return (self.perm, self.row_start, self.row_columns, self.row_values, self.column_start, self.column_rows,
                self.column_values, self.inverse_diagonal)

    def solve(self, rhs: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """x with K x = rhs for (n, 3) rhs (each column one right-hand side)."""
        out = np.empty((self.size, 3)) if out is None else out
        substitute(*self.arrays(), np.ascontiguousarray(rhs, dtype=np.float64), self.work, out)
        return out


@njit(cache=True, fastmath=True, inline="always")
def _gathered(work, start, end, indices, values, a0, a1, a2):
    """(a0, a1, a2) minus Σ_k values[k] work[indices[k]] over k in [start, end): two partial sums
    per coordinate halve the chains of dependent multiply-adds."""
    b0 = 0.0
    b1 = 0.0
    b2 = 0.0
    k = start
    while k + 1 < end:
        j = indices[k]
        v = values[k]
        a0 -= v * work[j, 0]
        a1 -= v * work[j, 1]
        a2 -= v * work[j, 2]
        j = indices[k + 1]
        v = values[k + 1]
        b0 -= v * work[j, 0]
        b1 -= v * work[j, 1]
        b2 -= v * work[j, 2]
        k += 2
    if k < end:
        j = indices[k]
        v = values[k]
        a0 -= v * work[j, 0]
        a1 -= v * work[j, 1]
        a2 -= v * work[j, 2]
    return a0 + b0, a1 + b1, a2 + b2


@njit(cache=True, fastmath=True)
def substitute(perm, row_start, row_columns, row_values, column_start, column_rows, column_values,
               inverse_diagonal, rhs, work, out):
    """out = P L⁻ᵀ D⁻¹ L⁻¹ Pᵀ rhs for three right-hand sides. Both triangular passes gather
    (rows of L forward, columns of L backward), so the inner loops only load."""
    n = perm.shape[0]
    for i in range(n):
        p = perm[i]
        work[p, 0] = rhs[i, 0]
        work[p, 1] = rhs[i, 1]
        work[p, 2] = rhs[i, 2]
    for i in range(n):                                   # L y = b
        work[i, 0], work[i, 1], work[i, 2] = _gathered(work, row_start[i], row_start[i + 1], row_columns,
                                                       row_values, work[i, 0], work[i, 1], work[i, 2])
    for j in range(n - 1, -1, -1):                       # Lᵀ z = D⁻¹ y
        d = inverse_diagonal[j]
        work[j, 0], work[j, 1], work[j, 2] = _gathered(work, column_start[j], column_start[j + 1], column_rows,
                                                       column_values, work[j, 0] * d, work[j, 1] * d,
                                                       work[j, 2] * d)
    for i in range(n):
        p = perm[i]
        out[i, 0] = work[p, 0]
        out[i, 1] = work[p, 1]
        out[i, 2] = work[p, 2]
