"""Fixed-size 3×3 linear algebra for numba kernels: products, determinant, cofactor, a
symmetric eigen-decomposition and the rotation-variant SVD.

Written out because numba's `@` and np.linalg on 3×3 matrices call BLAS/LAPACK with per-call
overheads that dominate at this size. Shared by the Phace energies (corotated.py,
activation_derivatives.py, volume_floor.py) and the volumetric-blendshape projections.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

# The three index pairs (i, j), i < j, of a 3×3 matrix's off-diagonal (Jacobi sweeps, the
# polar-rotation derivative's pair blocks).
PAIR_FIRST = (0, 0, 1)
PAIR_SECOND = (1, 2, 2)


@njit(cache=True)
def det3(A):
    return (A[0, 0] * (A[1, 1] * A[2, 2] - A[1, 2] * A[2, 1])
            - A[0, 1] * (A[1, 0] * A[2, 2] - A[1, 2] * A[2, 0])
            + A[0, 2] * (A[1, 0] * A[2, 1] - A[1, 1] * A[2, 0]))


@njit(cache=True)
def matmul3(A, B, out):
    for a in range(3):
        for b in range(3):
            out[a, b] = A[a, 0] * B[0, b] + A[a, 1] * B[1, b] + A[a, 2] * B[2, b]


@njit(cache=True)
def cofactor3(F):
    """∂ det F / ∂F, written with products of entries so it stays exact for singular F."""
    cofactor = np.empty((3, 3))
    for a in range(3):
        a1, a2 = (a + 1) % 3, (a + 2) % 3
        for b in range(3):
            b1, b2 = (b + 1) % 3, (b + 2) % 3
            cofactor[a, b] = F[a1, b1] * F[a2, b2] - F[a1, b2] * F[a2, b1]
    return cofactor


@njit(cache=True)
def symmetric_eigen3(A, V):
    """Cyclic Jacobi: diagonalise the symmetric A in place (eigenvalues on its diagonal,
    descending) and return the eigenvectors as the columns of V, a proper rotation."""
    for a in range(3):
        for b in range(3):
            V[a, b] = 1.0 if a == b else 0.0
    scale = 0.0
    for a in range(3):
        for b in range(3):
            scale += A[a, b] * A[a, b]
    # Quadratic convergence: 3×3 matrices need 4–6 sweeps to reach rounding level.
    for _ in range(12):
        off_diagonal = A[0, 1] * A[0, 1] + A[0, 2] * A[0, 2] + A[1, 2] * A[1, 2]
        if off_diagonal <= 1e-34 * scale:
            break
        for k in range(3):
            p, q = PAIR_FIRST[k], PAIR_SECOND[k]
            apq = A[p, q]
            if apq == 0.0:
                continue
            theta = (A[q, q] - A[p, p]) / (2.0 * apq)
            # t = tan of the rotation angle, the smaller root of t² + 2θt − 1 = 0.
            if abs(theta) > 1e150:
                t = 0.5 / theta
            else:
                t = 1.0 / (abs(theta) + math.sqrt(theta * theta + 1.0))
                if theta < 0.0:
                    t = -t
            c = 1.0 / math.sqrt(t * t + 1.0)
            s = t * c
            A[p, p] -= t * apq
            A[q, q] += t * apq
            A[p, q] = A[q, p] = 0.0
            r = 3 - p - q
            arp, arq = A[r, p], A[r, q]
            A[r, p] = A[p, r] = c * arp - s * arq
            A[r, q] = A[q, r] = s * arp + c * arq
            for a in range(3):
                vap, vaq = V[a, p], V[a, q]
                V[a, p] = c * vap - s * vaq
                V[a, q] = s * vap + c * vaq
    # Sort descending; a column swap is paired with a sign flip to keep det V = +1.
    for first, second in ((0, 1), (1, 2), (0, 1)):
        if A[first, first] < A[second, second]:
            A[first, first], A[second, second] = A[second, second], A[first, first]
            for a in range(3):
                V[a, first], V[a, second] = V[a, second], -V[a, first]


@njit(cache=True)
def rotation_variant_svd3(M, U, sigma, V):
    """M = U diag(σ) Vᵀ with U, V proper rotations, σ1 ≥ σ2 ≥ |σ3|, σ3 < 0 when det M < 0.

    V diagonalises MᵀM (Jacobi); then M V = U R by Givens QR. The Givens rotations are proper
    and leave R's first two diagonal entries non-negative, so R's diagonal is the signed σ
    (R is diagonal up to rounding, as M V has orthogonal columns). Unlike singular values
    read off MᵀM, σ from the QR step keep full accuracy for nearly flat tets.
    """
    gram = np.empty((3, 3))
    for a in range(3):
        for b in range(3):
            gram[a, b] = M[0, a] * M[0, b] + M[1, a] * M[1, b] + M[2, a] * M[2, b]
    symmetric_eigen3(gram, V)
    B = np.empty((3, 3))
    matmul3(M, V, B)
    for a in range(3):
        for b in range(3):
            U[a, b] = 1.0 if a == b else 0.0
    # Zero B[1,0], B[2,0], B[2,1] with rotations of the rows (p, q); U accumulates them.
    for p, q, column in ((0, 1, 0), (0, 2, 0), (1, 2, 1)):
        x, y = B[p, column], B[q, column]
        radius = math.hypot(x, y)
        if radius == 0.0:
            continue
        c, s = x / radius, y / radius
        for b in range(3):
            bp, bq = B[p, b], B[q, b]
            B[p, b] = c * bp + s * bq
            B[q, b] = c * bq - s * bp
        for a in range(3):
            up, uq = U[a, p], U[a, q]
            U[a, p] = c * up + s * uq
            U[a, q] = c * uq - s * up
    for i in range(3):
        sigma[i] = B[i, i]
