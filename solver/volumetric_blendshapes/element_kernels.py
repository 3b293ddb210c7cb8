"""Element tier: the three per-tet energy densities of volumetric blendshapes on stacked F (M,3,3).

Each density is a squared distance ||F − P(F)||² from F to a projection P (paper 002 Eq. 6, 9;
the Projective Dynamics form [BML*14]):
  target  P = F* (a per-tet constant target)       ψ = ||F − F*||²
  ARAP    P = R, the rotation of F = R S           ψ = Σ (σ_i − 1)²
  volume  P = the closest F' with det F' = 1      ψ = Σ (σ_i − s_i)²,  Π s_i = 1
ARAP and volume are isotropic: with the rotation-variant SVD F = U diag(σ) Vᵀ (σ₃ < 0 on
inverted tets) they are functions ψ(σ), and their 9×9 Hessians are built from ∂ψ/∂σ, ∂²ψ/∂σ²
and one 2×2 block per pair of singular values (the classical isotropic formula), which also
gives the exact eigen-decomposition that the PSD projection clamps.
Gradients are dψ/dF (M,3,3), Hessians d²ψ/dF² (M,9,9) with vec(F) row-major (index 3i + j).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from ..physics.matrix3 import rotation_variant_svd3

# Below this gap between two singular values the pair block uses its limit (ψ_ii − ψ_ij),
# because the quotient (ψ_i − ψ_j)/(σ_i − σ_j) loses all digits there.
EQUAL_SINGULAR_VALUES = 1e-6
PAIRS = ((0, 1), (0, 2), (1, 2))


def rotation_variant_svd(F: np.ndarray):
    """U, σ, V with F = U diag(σ) Vᵀ, U and V rotations, σ₁ ≥ σ₂ ≥ |σ₃| (σ₃ < 0 when det F < 0)."""
    F = np.ascontiguousarray(F, dtype=np.float64).reshape(-1, 3, 3)
    U, sigma, V = np.empty_like(F), np.empty((len(F), 3)), np.empty_like(F)
    _svd_kernel(F, U, sigma, V)
    return U, sigma, V


@njit(cache=True, parallel=True)
def _svd_kernel(F, U, sigma, V):
    for t in prange(len(F)):
        rotation_variant_svd3(F[t], U[t], sigma[t], V[t])


def polar_rotation(F: np.ndarray) -> np.ndarray:
    """R of F = R S (the closest rotation, det R = +1 even for inverted F)."""
    U, _, V = rotation_variant_svd(F)
    return U @ V.transpose(0, 2, 1)


@njit(cache=True)
def _on_unit_volume_path(sigma, fold, smallest, t, s):
    """s(t) on the stationarity path of unit_volume_singular_values; returns ν(t)."""
    past = t > fold
    nu = 2.0 * fold - t if past else t
    for i in range(3):
        root = math.sqrt(max(sigma[i] * sigma[i] - 4.0 * nu, 0.0))
        s[i] = 0.5 * (sigma[i] - root) if (past and i == smallest) else 0.5 * (sigma[i] + root)
    return nu


@njit(cache=True)
def _unit_volume_point(sigma, s):
    """s closest to σ (3,) with s₁s₂s₃ = 1, written into s; returns the multiplier ν."""
    smallest = 0
    for i in range(1, 3):
        if sigma[i] < sigma[smallest]:
            smallest = i
    fold = 0.25 * sigma[smallest] ** 2 if sigma[smallest] > 0.0 else 0.0
    lower = -1.0
    for _ in range(200):          # widen the bracket until the product is at least 1
        _on_unit_volume_path(sigma, fold, smallest, lower, s)
        if s[0] * s[1] * s[2] >= 1.0:
            break
        lower *= 4.0
    upper = 2.0 * fold
    # Start at ν = 0 (s = σ), the answer for a tet that keeps its volume, when it is inside.
    t = 0.0 if upper > 0.0 else 0.5 * (lower + upper)
    last_step = np.inf
    for _ in range(200):
        _on_unit_volume_path(sigma, fold, smallest, t, s)
        product = s[0] * s[1] * s[2]
        if product > 0.0 and abs(math.log(product)) <= 1e-15:
            break
        if product > 1.0:
            lower = t
        else:
            upper = t
        if upper - lower <= 4e-16 * max(abs(lower), abs(upper)):
            break
        # Newton on Σ log s_i(t) = 0 where it stays inside the bracket and its steps at least
        # halve; bisection otherwise (near the fold the path has a square-root kink, where
        # Newton alone creeps).
        following = 0.5 * (lower + upper)
        if product > 0.0:
            past = t > fold
            slope = 0.0
            for i in range(3):
                branch = -1.0 if (past and i == smallest) else 1.0
                slope -= branch / max(abs(2.0 * s[i] - sigma[i]), 1e-300) / s[i]    # ∂ log s_i / ∂ν
            if past:
                slope = -slope
            if slope < 0.0:
                newton = t - math.log(product) / slope
                if lower < newton < upper and abs(newton - t) <= 0.5 * last_step:
                    following = newton
        last_step = abs(following - t)
        t = following
    nu = _on_unit_volume_path(sigma, fold, smallest, t, s)
    # Polish: s ← s / (Π s)^(1/3) is a negligible move at this accuracy that makes Π s = 1 exact.
    scale = np.cbrt(s[0] * s[1] * s[2])
    for i in range(3):
        s[i] /= scale
    return nu


@njit(cache=True, parallel=True)
def _unit_volume_kernel(sigma, s, nu):
    for t in prange(len(sigma)):
        nu[t] = _unit_volume_point(sigma[t], s[t])


def unit_volume_singular_values(sigma: np.ndarray):
    """s (M,3) closest to σ with s₁s₂s₃ = 1 (on the positive sheet), and the multiplier ν (M,).

    Stationarity s_i − σ_i + ν/s_i = 0 gives s_i = (σ_i ± √(σ_i² − 4ν))/2. Outside the convex set
    Π s ≥ 1 (Π σ < 1, inverted tets included) the root has ν < 0 and every s_i takes the + root;
    inside, ν > 0 grows to σ_min²/4 and then, if the product is still above 1, comes back with the
    smallest singular value on the − root. One parameter t walks that whole path (ν = t, then
    ν = 2ν_max − t past the fold) while Σ log s_i falls from +∞ to −∞; a bracket on t, narrowed by
    Newton steps that stay inside it and bisection otherwise, finds the root.
    """
    sigma = np.ascontiguousarray(sigma, dtype=np.float64).reshape(-1, 3)
    s, nu = np.empty_like(sigma), np.empty(len(sigma))
    _unit_volume_kernel(sigma, s, nu)
    return s, nu


def _arap_sigma_derivatives(sigma):
    value = np.sum((sigma - 1.0) ** 2, axis=1)
    first = 2.0 * (sigma - 1.0)
    second = np.broadcast_to(2.0 * np.eye(3), (len(sigma), 3, 3)).copy()
    return value, first, second


def _volume_sigma_derivatives(sigma):
    s, nu = unit_volume_singular_values(sigma)
    value = np.sum((sigma - s) ** 2, axis=1)
    first = 2.0 * (sigma - s)                                  # envelope theorem
    # ds/dσ from the implicit stationarity conditions: J = diag(1/D) − (a/D)(a/D)ᵀ / Σ a²/D,
    # with D_i = 1 − ν/s_i², a_i = 1/s_i.
    D = 1.0 - nu[:, None] / s ** 2
    a = 1.0 / s
    aD = a / D
    jacobian = np.einsum("mi,ij->mij", 1.0 / D, np.eye(3)) - np.einsum("mi,mj->mij", aD, aD) / np.sum(a * aD, axis=1)[:, None, None]
    second = 2.0 * (np.eye(3) - jacobian)
    return value, first, 0.5 * (second + second.transpose(0, 2, 1))


SIGMA_DERIVATIVES = {"arap": _arap_sigma_derivatives, "volume": _volume_sigma_derivatives}


def isotropic_element(kind: str, F: np.ndarray, weight: np.ndarray, compute_hessian: bool = True, project: bool = False):
    """weight·ψ(F) per tet for kind 'arap' or 'volume': energies (M,), gradients (M,3,3),
    Hessians (M,9,9) (None unless asked; PSD-projected when `project`)."""
    F = np.asarray(F, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    U, sigma, V = rotation_variant_svd(F)
    value, first, second = SIGMA_DERIVATIVES[kind](sigma)
    energies = weight * value
    gradients = weight[:, None, None] * np.einsum("mik,mk,mjk->mij", U, first, V)
    if not compute_hessian:
        return energies, gradients, None
    count = len(F)
    # Basis matrices U e_i e_jᵀ Vᵀ, flattened row-major: basis[m, i, j] is a 9-vector.
    basis = np.einsum("mai,mbj->mijab", U, V).reshape(count, 3, 3, 9)
    diagonal = basis[:, [0, 1, 2], [0, 1, 2]]                 # (M,3,9)
    eigenvalues, eigenvectors = np.linalg.eigh(second)
    if project:
        eigenvalues = np.maximum(eigenvalues, 0.0)
    modes = np.einsum("mkr,mka->mra", eigenvectors, diagonal)  # (M,3,9)
    hessians = np.einsum("mr,mra,mrb->mab", eigenvalues, modes, modes)
    for i, j in PAIRS:
        gap = sigma[:, i] - sigma[:, j]
        close = np.abs(gap) < EQUAL_SINGULAR_VALUES
        # A + B on the symmetric mode (twist of the stretch), A − B on the antisymmetric (rotation).
        symmetric = np.where(close, second[:, i, i] - second[:, i, j],
                             (first[:, i] - first[:, j]) / np.where(close, 1.0, gap))
        total = sigma[:, i] + sigma[:, j]
        antisymmetric = (first[:, i] + first[:, j]) / np.where(np.abs(total) < 1e-12, 1e-12, total)
        if project:
            symmetric, antisymmetric = np.maximum(symmetric, 0.0), np.maximum(antisymmetric, 0.0)
        plus = (basis[:, i, j] + basis[:, j, i]) / np.sqrt(2.0)
        minus = (basis[:, i, j] - basis[:, j, i]) / np.sqrt(2.0)
        hessians += np.einsum("m,ma,mb->mab", symmetric, plus, plus) + np.einsum("m,ma,mb->mab", antisymmetric, minus, minus)
    hessians *= weight[:, None, None]
    return energies, gradients, 0.5 * (hessians + hessians.transpose(0, 2, 1))


def target_element(F: np.ndarray, target: np.ndarray, weight: np.ndarray, compute_hessian: bool = True):
    """weight·||F − F*||² per tet: energies, gradients and (constant, convex) Hessians 2·weight·I₉."""
    difference = np.asarray(F, dtype=np.float64) - target
    energies = weight * np.sum(difference ** 2, axis=(1, 2))
    gradients = 2.0 * weight[:, None, None] * difference
    hessians = 2.0 * weight[:, None, None] * np.eye(9) if compute_hessian else None
    return energies, gradients, hessians


def projections(kind: str, F: np.ndarray) -> np.ndarray:
    """P(F) (M,3,3), the local step of Projective Dynamics, for kind 'arap' or 'volume'."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    ones, zeros = np.ones(len(F)), np.zeros(len(F))
    return weighted_projections(F, ones, zeros) if kind == "arap" else weighted_projections(F, zeros, ones)


def weighted_projections(F: np.ndarray, arap_weight: np.ndarray, volume_weight: np.ndarray) -> np.ndarray:
    """a_t R(F_t) + b_t P_vol(F_t) (M,3,3) from one SVD per tet: the local step of the ARAP and
    volume terms together."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    out = np.empty_like(F)
    _weighted_projections_kernel(F, np.ascontiguousarray(arap_weight, dtype=np.float64),
                                 np.ascontiguousarray(volume_weight, dtype=np.float64), out)
    return out


@njit(cache=True, parallel=True)
def _weighted_projections_kernel(F, arap_weight, volume_weight, out):
    for t in prange(len(F)):
        U, sigma, V, s = np.empty((3, 3)), np.empty(3), np.empty((3, 3)), np.ones(3)
        rotation_variant_svd3(F[t], U, sigma, V)
        if volume_weight[t] != 0.0:
            _unit_volume_point(sigma, s)
        scale = np.empty(3)
        for i in range(3):
            scale[i] = arap_weight[t] + volume_weight[t] * s[i]
        for a in range(3):
            for b in range(3):
                out[t, a, b] = U[a, 0] * scale[0] * V[b, 0] + U[a, 1] * scale[1] * V[b, 1] + U[a, 2] * scale[2] * V[b, 2]
