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

import numpy as np

# Below this gap between two singular values the pair block uses its limit (ψ_ii − ψ_ij),
# because the quotient (ψ_i − ψ_j)/(σ_i − σ_j) loses all digits there.
EQUAL_SINGULAR_VALUES = 1e-6
PAIRS = ((0, 1), (0, 2), (1, 2))


def rotation_variant_svd(F: np.ndarray):
    """U, σ, V with F = U diag(σ) Vᵀ, U and V rotations, σ₁ ≥ σ₂ ≥ |σ₃| (σ₃ < 0 when det F < 0)."""
    U, sigma, Vt = np.linalg.svd(F)
    V = Vt.transpose(0, 2, 1).copy()
    U = U.copy()
    sigma = sigma.copy()
    flip_u = np.linalg.det(U) < 0.0
    U[flip_u, :, 2] *= -1.0
    sigma[flip_u, 2] *= -1.0
    flip_v = np.linalg.det(V) < 0.0
    V[flip_v, :, 2] *= -1.0
    sigma[flip_v, 2] *= -1.0
    return U, sigma, V


def polar_rotation(F: np.ndarray) -> np.ndarray:
    """R of F = R S (the closest rotation, det R = +1 even for inverted F)."""
    U, _, V = rotation_variant_svd(F)
    return U @ V.transpose(0, 2, 1)


def unit_volume_singular_values(sigma: np.ndarray, iterations: int = 40):
    """s (M,3) closest to σ with s₁s₂s₃ = 1 (on the positive sheet), and the multiplier ν.

    Stationarity s_i − σ_i + ν/s_i = 0 gives s_i = (σ_i ± √(σ_i² − 4ν))/2. Outside the convex set
    Π s ≥ 1 (Π σ < 1, inverted tets included) the root has ν < 0 and every s_i takes the + root;
    inside, ν > 0 grows to σ_min²/4 and then, if the product is still above 1, comes back with the
    smallest singular value on the − root. One parameter t walks that whole path (ν = t, then
    ν = 2ν_max − t past the fold) while Σ log s_i falls from +∞ to −∞; bisection on t brackets it,
    Newton finishes it.
    """
    count = len(sigma)
    positive = np.all(sigma > 0.0, axis=1)
    fold = np.where(positive, 0.25 * np.min(sigma, axis=1) ** 2, 0.0)
    smallest = np.argmin(sigma, axis=1)
    minus_sign = np.zeros((count, 3))
    minus_sign[np.arange(count), smallest] = 1.0

    def at(t):
        past = t > fold
        nu = np.where(past, 2.0 * fold - t, t)
        root = np.sqrt(np.maximum(sigma ** 2 - 4.0 * nu[:, None], 0.0))
        sign = np.where(past[:, None] & (minus_sign > 0.0), -1.0, 1.0)
        return 0.5 * (sigma + sign * root), nu

    lower = -np.ones(count)
    for _ in range(200):          # widen the bracket until the product is above 1
        short = np.sum(np.log(at(lower)[0]), axis=1) < 0.0
        if not short.any():
            break
        lower[short] *= 4.0
    upper = 2.0 * fold
    for _ in range(iterations):
        middle = 0.5 * (lower + upper)
        s, _ = at(middle)
        with np.errstate(divide="ignore"):
            above = np.sum(np.log(np.maximum(s, 0.0)), axis=1) > 0.0
        lower = np.where(above, middle, lower)
        upper = np.where(above, upper, middle)
    t = 0.5 * (lower + upper)
    for _ in range(3):            # Newton on the bracketed root: the last digits at quadratic speed
        s, nu = at(t)
        past = t > fold
        root = np.maximum(np.abs(2.0 * s - sigma), 1e-300)                 # √(σ² − 4ν)
        branch = np.where(past[:, None] & (minus_sign > 0.0), -1.0, 1.0)
        ds_dnu = -branch / root
        slope = np.sum(ds_dnu / s, axis=1) * np.where(past, -1.0, 1.0)
        value = np.sum(np.log(np.maximum(s, 1e-300)), axis=1)
        step = t - value / np.where(slope < 0.0, slope, -1.0)
        t = np.where((step > lower) & (step < upper) & (slope < 0.0), step, t)
    s, nu = at(t)
    # Polish: s ← s / (Π s)^(1/3) is a negligible move at this accuracy that makes Π s = 1 exact.
    return s / np.cbrt(np.prod(s, axis=1))[:, None], nu


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
    U, sigma, V = rotation_variant_svd(F)
    if kind == "arap":
        return U @ V.transpose(0, 2, 1)
    s, _ = unit_volume_singular_values(sigma)
    return np.einsum("mik,mk,mjk->mij", U, s, V)
