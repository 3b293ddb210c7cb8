"""Derivatives of the co-rotated energy with respect to the per-tet activations (issue 4).

Inverse physics fits the activation 6-vectors a_i = (xx, yy, zz, yz, xz, xy) of the tets with
muscle so that the equilibrium r(x, a) = ∇_x E(x, a) = 0 matches a target. It needs ∂E/∂a and
the mixed derivative ∂r/∂a (the "force Jacobian"); this module provides both, with the weights,
SVD and clamping of ``corotated.py`` (whose private numba helpers it reuses, so both modules
always agree on R(F S) and on the floor of σ_i + σ_j).

Only the active term of tet i depends on its activation S = S(a) (linear, S_yz = S_zy = a_yz):

    E_i = w [ μ k(S) ‖F − R(F S) S‖² + λ (det F − det S)² ],   w = active_weight · s³,

k(S) the muscle's stiffening (active_stiffening.py). Below, μ stands for μ k(S); the variation of
k adds μ w ‖F − R S‖² ∂k/∂S to ∂E/∂S and 2 μ w (F − R S) ⟨∂k/∂S, E_k⟩ to the mixed block.

With R = R(F S) = U Vᵀ from the rotation-variant SVD F S = U diag(σ̂) Vᵀ and S symmetric,
⟨F, R S⟩ = ⟨F S, R⟩ = Σσ̂(F S), so

    ‖F − R(F S) S‖² = ‖F‖² − 2 Σσ̂(F S) + ‖S‖²,   ∂Σσ̂(G)/∂G = R(G),

and, writing E_k for the symmetric basis matrix of a_k (e_r e_rᵀ on the diagonal,
e_r e_cᵀ + e_c e_rᵀ off it — the two mirrored entries of an off-diagonal a_k both count),

    ∂E/∂S (as a 3×3 matrix) = 2 μ w (S − Fᵀ R) − 2 λ w (det F − det S) cof S
    g_k = ∂E/∂a_k = ⟨∂E/∂S, E_k⟩ = 2 μ w ⟨S − sym(Fᵀ R), E_k⟩ − 2 λ w (det F − det S) ⟨cof S, E_k⟩.

Mixed block. ∂E/∂F = 2 μ w (F − R S) + 2 λ w (det F − det S) cof F (+ the passive part, which
does not depend on S). Its derivative along a_k, with dS = E_k, d(F S) = F E_k and the polar
rotation derivative of corotated.py (twists A_p = u_i v_jᵀ − u_j v_iᵀ for the pairs
p = (i, j) ∈ {(0,1), (0,2), (1,2)}, dR = Σ_p ⟨A_p, d(F S)⟩ / (σ̂_i + σ̂_j) A_p):

    M[:, k] = −2 μ w [ Σ_p vec(A_p S) ⟨Fᵀ A_p, E_k⟩ / (σ̂_i + σ̂_j) + vec(R E_k) ]
              − 2 λ w ⟨cof S, E_k⟩ vec(cof F),

a 9×6 matrix per tet, F flattened row-major (F[a, b] → 3a + b, the convention of the 9×9
Hessians). σ̂_i + σ̂_j is floored at corotated._MIN_SINGULAR_VALUE_SUM exactly as there. M is
also ∂g/∂F (mixed partials commute), which the tests check.

Whole mesh: r = ∇_x E = Σ_i (dF_i/dx)ᵀ vec(∂E_i/∂F_i) with dF_i/dx = I₃ ⊗ G_i (shape
gradients of the CorotatedElasticity), so the force Jacobian J = ∂r/∂a (3N × 6M) has per tet the
12×6 block K_i[(n, c), k] = Σ_b G_i[n, b] M_i[3c + b, k] on the rows of its four nodes and the
six columns 6i + k; column order is tet-major. J is the Jacobian of the *force residual*; the
sensitivity of an equilibrium is dx/da = −H⁻¹ J.

Three tiers, like corotated.py:

1. ``activation_element_gradients`` (M,6) and ``activation_element_mixed_blocks`` (M,9,6):
   numba kernels (prange) on stacked F and S.
2. ``ActivationCoupling(elasticity, material, x)``: the per-tet gradients and mixed blocks of
   the tets with active weight > 0, computed once per configuration x (one parallel pass, one
   SVD per active tet), then any number of products J·da, Jᵀ·v, the CSR J and ∂E/∂a.
3. ``activation_gradient``, ``force_jacobian_product``, ``force_jacobian_transpose_product``,
   ``force_jacobian``: one-shot functions that build the coupling and use it once.

Layouts: activation arrays are (M, 6) over all tets by default (rows of tets without muscle
are zero in outputs and ignored in inputs); with ``active_only=True`` they are (A, 6) over
``ActivationCoupling.active_tets`` (the tets with active weight > 0, increasing index — for a
model, ``activation.active_tet_indices``, the rows of ACTIVATIONS.npz), and the CSR Jacobian
has 6A columns, column 6j + k for a_k of active_tets[j].
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
from numba import njit, prange

from .active_stiffening import stiffening_and_slope
from .corotated import (
    CorotatedElasticity,
    TetMaterial,
    _deformation_gradient,
    _singular_value_pair_sum,
)
from .matrix3 import PAIR_FIRST, PAIR_SECOND, cofactor3, det3, matmul3, rotation_variant_svd3

# Activation vector index → (row, column) of S, as activation.py: xx, yy, zz, yz, xz, xy.
_ENTRY_ROW = (0, 1, 2, 1, 0, 0)
_ENTRY_COLUMN = (0, 1, 2, 2, 2, 1)


# ----------------------------------------------------------------------------- one element


@njit(cache=True)
def _project_to_vector(A, k):
    """⟨A, E_k⟩: A[r, r] on the diagonal, A[r, c] + A[c, r] for an off-diagonal a_k."""
    r, c = _ENTRY_ROW[k], _ENTRY_COLUMN[k]
    if r == c:
        return A[r, r]
    return A[r, c] + A[c, r]


@njit(cache=True)
def _activation_element(F, S, weight, mu, lam, compute_gradient, compute_block, g, M):
    """Fill g (6,) = ∂E/∂a and M (9,6) = ∂(∂E/∂F)/∂a of one tet's active term (overwrites)."""
    FS = np.empty((3, 3))
    matmul3(F, S, FS)
    U, sigma, V = np.empty((3, 3)), np.empty(3), np.empty((3, 3))
    rotation_variant_svd3(FS, U, sigma, V)
    rotation = np.empty((3, 3))
    matmul3(U, V.T, rotation)
    cofactor_S = cofactor3(S)
    volume_change = det3(F) - det3(S)
    stiffening, slope = stiffening_and_slope(S)
    mu_w, lam_w = 2.0 * mu * stiffening * weight, 2.0 * lam * weight
    # k(S) varies with the activation: ∂k/∂S = 2 (dk/dq) (S − I) multiplies μ w ‖F − R S‖² in
    # ∂E/∂S and 2 μ w (F − R S) in the mixed block.
    residual = np.empty((3, 3))
    matmul3(rotation, S, residual)
    squared_residual = 0.0
    for a in range(3):
        for b in range(3):
            residual[a, b] = F[a, b] - residual[a, b]
            squared_residual += residual[a, b] * residual[a, b]
    stiffening_gradient = np.empty((3, 3))
    for a in range(3):
        for b in range(3):
            stiffening_gradient[a, b] = 2.0 * slope * (S[a, b] - (1.0 if a == b else 0.0))
    if compute_gradient:
        FtR = np.empty((3, 3))
        matmul3(F.T, rotation, FtR)
        # ∂E/∂S = μw·2(S − FᵀR) − λw·2(J − det S) cof S; ⟨·, E_k⟩ symmetrises FᵀR.
        gradient_S = np.empty((3, 3))
        for a in range(3):
            for b in range(3):
                gradient_S[a, b] = (mu_w * (S[a, b] - FtR[a, b]) - lam_w * volume_change * cofactor_S[a, b]
                                    + mu * weight * squared_residual * stiffening_gradient[a, b])
        for k in range(6):
            g[k] = _project_to_vector(gradient_S, k)
    if compute_block:
        cofactor_F = cofactor3(F)
        for k in range(6):
            r, c = _ENTRY_ROW[k], _ENTRY_COLUMN[k]
            volume_coupling = lam_w * _project_to_vector(cofactor_S, k)
            stiffening_coupling = 2.0 * mu * weight * _project_to_vector(stiffening_gradient, k)
            for a in range(3):
                for b in range(3):
                    # vec(R E_k)[3a+b] = R[a, r] δ_bc + R[a, c] δ_br (one term on the diagonal).
                    rotated_basis = 0.0
                    if b == c:
                        rotated_basis += rotation[a, r]
                    if b == r and r != c:
                        rotated_basis += rotation[a, c]
                    M[3 * a + b, k] = (-mu_w * rotated_basis - volume_coupling * cofactor_F[a, b]
                                       + stiffening_coupling * residual[a, b])
        twist, direction, pulled_back = np.empty((3, 3)), np.empty((3, 3)), np.empty((3, 3))
        for p in range(3):
            i, j = PAIR_FIRST[p], PAIR_SECOND[p]
            for a in range(3):
                for b in range(3):
                    twist[a, b] = U[a, i] * V[b, j] - U[a, j] * V[b, i]
            matmul3(twist, S, direction)            # A_p S: the change of R S per unit twist
            matmul3(F.T, twist, pulled_back)        # Fᵀ A_p: ⟨A_p, F E_k⟩ = ⟨Fᵀ A_p, E_k⟩
            scale = mu_w / _singular_value_pair_sum(sigma, i, j)
            for k in range(6):
                coefficient = scale * _project_to_vector(pulled_back, k)
                for a in range(3):
                    for b in range(3):
                        M[3 * a + b, k] -= coefficient * direction[a, b]


# ----------------------------------------------------------------------------- tier 1: kernels


@njit(cache=True, parallel=True)
def _element_kernel(F, S, weight, mu, lam, compute_gradient, compute_block, gradients, blocks):
    for t in prange(F.shape[0]):
        g = np.zeros(6)
        M = np.zeros((9, 6))
        if weight[t] != 0.0:
            _activation_element(F[t], S[t], weight[t], mu[t], lam[t], compute_gradient, compute_block, g, M)
        if compute_gradient:
            gradients[t] = g
        if compute_block:
            blocks[t] = M


def _run_element_kernel(F, S, active_weight, mu, lam, compute_gradient, compute_block):
    F = np.ascontiguousarray(F, dtype=np.float64)
    element_count = F.shape[0]
    if F.shape != (element_count, 3, 3):
        raise ValueError(f"deformation gradients: expected shape (M, 3, 3), found {F.shape}")
    S = np.ascontiguousarray(np.broadcast_to(S, (element_count, 3, 3)), dtype=np.float64)
    if not (np.isfinite(F).all() and np.isfinite(S).all()):
        raise ValueError("deformation gradients or activations contain NaN or infinite values")
    per_element = [np.ascontiguousarray(np.broadcast_to(np.asarray(value, dtype=np.float64), (element_count,)))
                   for value in (active_weight, mu, lam)]
    gradients = np.empty((element_count if compute_gradient else 0, 6))
    blocks = np.empty((element_count if compute_block else 0, 9, 6))
    _element_kernel(F, S, *per_element, compute_gradient, compute_block, gradients, blocks)
    return gradients, blocks


def activation_element_gradients(F, S, active_weight, mu, lam) -> np.ndarray:
    """∂E_i/∂a_i (M,6) for stacked F (M,3,3) and symmetric S (M,3,3) or one (3,3); the active
    weights (volumes, any plastic s³ included), μ and λ as (M,) arrays or scalars. The passive
    part of E_i does not depend on a, so its weight is not needed."""
    return _run_element_kernel(F, S, active_weight, mu, lam, True, False)[0]


def activation_element_mixed_blocks(F, S, active_weight, mu, lam) -> np.ndarray:
    """M_i = ∂(∂E_i/∂F_i)/∂a_i (M,9,6), F flattened row-major (F[a, b] → 3a + b), a in the
    order (xx, yy, zz, yz, xz, xy)."""
    return _run_element_kernel(F, S, active_weight, mu, lam, False, True)[1]


# ----------------------------------------------------------------------------- tier 2: mesh


@njit(cache=True, parallel=True)
def _mesh_blocks(x, tets, shape_gradients, active_tets, S, weight, mu, lam, gradients, blocks):
    """Per active tet j (tet t = active_tets[j]): gradients[j] = ∂E/∂a, blocks[j] = M."""
    for j in prange(active_tets.shape[0]):
        t = active_tets[j]
        F = np.empty((3, 3))
        _deformation_gradient(x, tets[t], shape_gradients[t], F)
        g = np.empty(6)
        M = np.empty((9, 6))
        _activation_element(F, S[t], weight[t], mu[t], lam[t], True, True, g, M)
        gradients[j] = g
        blocks[j] = M


@njit(cache=True, parallel=True)
def _forward_contributions(tets, shape_gradients, active_tets, blocks, da, contributions):
    """contributions[j, n, c] = Σ_b G[n, b] (M_j da_j)[3c + b]: tet j's share of J·da."""
    for j in prange(active_tets.shape[0]):
        t = active_tets[j]
        G = shape_gradients[t]
        dP = np.zeros(9)
        for p in range(9):
            entry = 0.0
            for k in range(6):
                entry += blocks[j, p, k] * da[j, k]
            dP[p] = entry
        for n in range(4):
            for c in range(3):
                contributions[j, n, c] = dP[3 * c] * G[n, 0] + dP[3 * c + 1] * G[n, 1] + dP[3 * c + 2] * G[n, 2]


@njit(cache=True, parallel=True)
def _transpose_product(v, tets, shape_gradients, active_tets, blocks, out):
    """out[j] = M_jᵀ vec(dF_j(v)): (Jᵀ v) restricted to active tet j."""
    for j in prange(active_tets.shape[0]):
        t = active_tets[j]
        dF = np.empty((3, 3))
        _deformation_gradient(v, tets[t], shape_gradients[t], dF)
        for k in range(6):
            entry = 0.0
            for a in range(3):
                for b in range(3):
                    entry += blocks[j, 3 * a + b, k] * dF[a, b]
            out[j, k] = entry


@njit(cache=True, parallel=True)
def _node_blocks(tets, shape_gradients, active_tets, blocks, values):
    """values[j, k, n, c] = K_j[(n, c), k] = Σ_b G[n, b] M_j[3c + b, k] (column-major per tet)."""
    for j in prange(active_tets.shape[0]):
        G = shape_gradients[active_tets[j]]
        for k in range(6):
            for n in range(4):
                for c in range(3):
                    values[j, k, n, c] = (blocks[j, 3 * c, k] * G[n, 0] + blocks[j, 3 * c + 1, k] * G[n, 1]
                                          + blocks[j, 3 * c + 2, k] * G[n, 2])


class ActivationCoupling:
    """∂E/∂a and the force Jacobian J = ∂(∇_x E)/∂a of a mesh at one configuration x.

    elasticity: the CorotatedElasticity (its tets, shape gradients and volume_scale s³ are used
        as is, so a plastic rest scale is honoured); material: its TetMaterial, whose
        ``activation`` (M,3,3) is the S at which the derivatives are taken; x: (N,3) or (3N,).

    Attributes (A = number of tets with active weight > 0):
        active_tets (A,) int64: those tets, increasing.
        element_gradients (A,6): ∂E/∂a of each active tet.
        mixed_blocks (A,9,6): M of each active tet (F row-major).
    The blocks are computed once here; every product afterwards costs O(A) and no SVD.
    """

    def __init__(self, elasticity: CorotatedElasticity, material: TetMaterial, x):
        if material.element_count != elasticity.element_count:
            raise ValueError(f"material: {material.element_count} tets, the mesh has {elasticity.element_count}")
        x = np.asarray(x, dtype=np.float64)
        if x.size != 3 * elasticity.node_count:
            raise ValueError(f"x: expected {elasticity.node_count} nodes, found shape {x.shape}")
        x = np.ascontiguousarray(x.reshape(elasticity.node_count, 3))
        if not np.isfinite(x).all():
            raise ValueError("x: contains NaN or infinite values")
        self.elasticity, self.material = elasticity, material
        self.node_count, self.element_count = elasticity.node_count, elasticity.element_count
        weight = material.active_weight * elasticity.volume_scale
        self.active_tets = np.flatnonzero(weight > 0.0).astype(np.int64)
        count = len(self.active_tets)
        self.element_gradients = np.empty((count, 6))
        self.mixed_blocks = np.empty((count, 9, 6))
        _mesh_blocks(x, elasticity.tets, elasticity.shape_gradients, self.active_tets, material.activation,
                     weight, material.mu, material.lam, self.element_gradients, self.mixed_blocks)
        # Rows 3·node + c of each active tet's 12 force entries, local order (n, c).
        self._rows = (3 * elasticity.tets[self.active_tets][:, :, None] + np.arange(3)).reshape(count, 12)

    @property
    def active_count(self) -> int:
        return len(self.active_tets)

    # -------------------------------------------------------------- layouts

    def _expand(self, active_values, active_only):
        if active_only:
            return active_values
        full = np.zeros((self.element_count, 6))
        full[self.active_tets] = active_values
        return full

    def _activation_input(self, da, active_only, name):
        da = np.asarray(da, dtype=np.float64)
        rows = self.active_count if active_only else self.element_count
        if da.shape != (rows, 6):
            raise ValueError(f"{name}: expected shape ({rows}, 6), found {da.shape}")
        return np.ascontiguousarray(da if active_only else da[self.active_tets])

    # -------------------------------------------------------------- results

    def activation_gradient(self, active_only: bool = False) -> np.ndarray:
        """∂E/∂a: (M,6), zero rows for tets without muscle; (A,6) when ``active_only``."""
        return self._expand(self.element_gradients.copy(), active_only)

    def force_jacobian_product(self, da, active_only: bool = False) -> np.ndarray:
        """J·da (3N,), node-major, for da (M,6) (rows of tets without muscle ignored) or
        (A,6) when ``active_only``."""
        da = self._activation_input(da, active_only, "da")
        contributions = np.empty((self.active_count, 4, 3))
        _forward_contributions(self.elasticity.tets, self.elasticity.shape_gradients, self.active_tets,
                               self.mixed_blocks, da, contributions)
        return np.bincount(self._rows.reshape(-1), weights=contributions.reshape(-1),
                           minlength=3 * self.node_count)

    def force_jacobian_transpose_product(self, v, active_only: bool = False) -> np.ndarray:
        """Jᵀ·v for v (3N,) or (N,3): (M,6), zero rows for tets without muscle; (A,6) when
        ``active_only``. The adjoint of ``force_jacobian_product``."""
        v = np.asarray(v, dtype=np.float64)
        if v.size != 3 * self.node_count:
            raise ValueError(f"v: expected {3 * self.node_count} entries, found shape {v.shape}")
        out = np.empty((self.active_count, 6))
        _transpose_product(np.ascontiguousarray(v.reshape(self.node_count, 3)), self.elasticity.tets,
                           self.elasticity.shape_gradients, self.active_tets, self.mixed_blocks, out)
        return self._expand(out, active_only)

    def force_jacobian(self, active_only: bool = False) -> scipy.sparse.csr_matrix:
        """J as CSR: 3N × 6M (column 6i + k for a_k of tet i; the columns of tets without
        muscle are empty), or 3N × 6A with column 6j + k for active_tets[j] when
        ``active_only``. 72 stored entries per active tet (its 12 node rows × 6 columns,
        entries that happen to be zero included, so the pattern depends only on the mesh and
        the active set)."""
        count = self.active_count
        values = np.empty((count, 6, 4, 3))
        _node_blocks(self.elasticity.tets, self.elasticity.shape_gradients, self.active_tets,
                     self.mixed_blocks, values)
        # Column-major storage is immediate: column 6i + k holds its tet's 12 rows (distinct
        # nodes, so no duplicates); CSC → CSR is a linear-time transpose with sorted indices.
        first_column = np.arange(count) if active_only else self.active_tets
        column_count = 6 * (count if active_only else self.element_count)
        entries_per_column = np.zeros(column_count, dtype=np.int64)
        entries_per_column[(6 * first_column[:, None] + np.arange(6)).reshape(-1)] = 12
        indptr = np.concatenate([[0], np.cumsum(entries_per_column)])
        rows = np.broadcast_to(self._rows[:, None, :], (count, 6, 12)).reshape(-1)
        jacobian = scipy.sparse.csc_matrix((values.reshape(-1), rows, indptr),
                                           shape=(3 * self.node_count, column_count)).tocsr()
        return jacobian


# ----------------------------------------------------------------------------- tier 3


def activation_gradient(elasticity: CorotatedElasticity, material: TetMaterial, x,
                        active_only: bool = False) -> np.ndarray:
    """∂E/∂a (M,6) (or (A,6)) at positions x; builds an ActivationCoupling (keep one to reuse)."""
    return ActivationCoupling(elasticity, material, x).activation_gradient(active_only)


def force_jacobian_product(elasticity: CorotatedElasticity, material: TetMaterial, x, da,
                           active_only: bool = False) -> np.ndarray:
    """(∂∇_x E/∂a)·da (3N,) at positions x."""
    return ActivationCoupling(elasticity, material, x).force_jacobian_product(da, active_only)


def force_jacobian_transpose_product(elasticity: CorotatedElasticity, material: TetMaterial, x, v,
                                     active_only: bool = False) -> np.ndarray:
    """(∂∇_x E/∂a)ᵀ·v (M,6) (or (A,6)) at positions x."""
    return ActivationCoupling(elasticity, material, x).force_jacobian_transpose_product(v, active_only)


def force_jacobian(elasticity: CorotatedElasticity, material: TetMaterial, x,
                   active_only: bool = False) -> scipy.sparse.csr_matrix:
    """∂∇_x E/∂a as a 3N × 6M (or 3N × 6A) CSR matrix at positions x."""
    return ActivationCoupling(elasticity, material, x).force_jacobian(active_only)
