"""Phace passive and active co-rotated elasticity (paper 000 Eq. 1–2, docs/physics.md).

Per tet i, with deformation gradient F, symmetric activation S, weights w_p, w_a (m³) and
material parameters μ, λ (Pa):

    E_i = w_p [ μ ‖F − R(F)‖²      + λ (det F − 1)²     ]
        + w_a [ μ k(S) ‖F − R(F S) S‖²  + λ (det F − det S)² ]

with k(S) ≥ 1 the stiffening of a contracting muscle, 1 at S = I (active_stiffening.py); below,
the active term's μ stands for μ k(S), a per-tet constant in a forward frame.

R(M) is the rotation of the polar decomposition of M, taken from the rotation-variant SVD
M = U Σ Vᵀ (U, V proper rotations, σ1 ≥ σ2 ≥ |σ3|, σ3 < 0 for inverted M), R = U Vᵀ. It
maximises tr(Rᵀ M) over SO(3), so R(F S) is the minimiser over SO(3) of ‖F − R S‖² for
symmetric S: the energy is the paper's min-over-rotations form and, by the envelope theorem,

    ∂E/∂F = 2 μ w (F − R S) + 2 λ [w_p (J − 1) + w_a (J − det S)] cof F,   J = det F.

Derivative of the polar rotation. For M = F S and a perturbation dM = dF S, let
M̃ = Uᵀ dM V. Then dR = U X Vᵀ = R [ω]× with the skew X (ω = V x, x the axial vector of X)

    X_ij = (M̃_ij − M̃_ji) / (σ_i + σ_j),   i ≠ j.

σ_i + σ_j ≥ 0 for the rotation-variant SVD; it vanishes only where R is not differentiable
(e.g. a tet flattened onto a line, or σ2 = −σ3), and is floored there (_MIN_SINGULAR_VALUE_SUM),
which keeps the Hessian finite; the floored direction has large negative curvature, which the
PSD projection removes. dR does not depend on which U, V are picked for repeated singular
values, so F = I (all σ equal) is fine. With A_k = u_i v_jᵀ − u_j v_iᵀ for the pairs
(i, j) ∈ {(0,1), (0,2), (1,2)} and g_k = A_k S, ⟨dF₂, dR(dF₁) S⟩ = Σ_k ⟨g_k, dF₁⟩⟨g_k, dF₂⟩ /
(σ_i + σ_j), so

    ∂²/∂F² μ‖F − R(F S) S‖² = 2 μ [ I₉ − Σ_k g_k g_kᵀ / (σ_i + σ_j) ]
    ∂²/∂F² λ (J − d)²       = 2 λ [ cof ⊗ cof + (J − d) ∂²J/∂F² ],
    ∂²J/∂F_ab ∂F_ce        = ε_{a c a'} ε_{b e b'} F_a'b'   (summed over a', b').

With S = I (no muscle, or the neutral activation) the element energy is isotropic and the
Hessian's eigensystem is known in closed form (``_isotropic_element``); the general formulas
above serve tets with an activation.

Index convention: a 3×3 matrix F flattens row-major, F[a, b] → 3a + b, in every 9-vector and
9×9 matrix here (``F.reshape(9)``). Node positions flatten node-major, x[n, c] → 3n + c.

Three tiers (docs/physics.md):

1. ``corotated_element_energies`` / ``_gradients`` / ``_hessians``: numba kernels (prange over
   tets) on stacked F (M,3,3) and S (M,3,3); the Hessians optionally projected to positive
   semi-definite per element (negative eigenvalues of the 9×9 clamped to 0).
2. ``CorotatedElasticity``: a tet mesh with its rest shape (and optional plastic rest scale)
   precomputed once, including the sparsity pattern of the 3N×3N Hessian, so every assembly
   only refills the values of a CSR matrix whose ``indptr`` / ``indices`` are always the same
   arrays (CHOLMOD's symbolic analysis is done once per mesh). One fused parallel pass computes
   F, the element terms and their scatter into the gradient and the CSR data.
3. ``corotated_energy(rest_positions, tets, x, material)`` → (E, gradient, Hessian).

Plasticity (paper 000 §6): a per-tet uniform rest scale s replaces D_m by s D_m, so
F = D_s (s D_m)⁻¹ and the tet's volume is s³ V. The rest scale belongs to the elasticity
object; a ``TetMaterial``'s weights are volume fractions times the model's *unscaled* rest
volume, and the elasticity multiplies them by its ``volume_scale`` (s³). One material thus
serves every rest scale, and its weights need no update when the scale changes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse
from numba import njit, prange

from .active_stiffening import stiffening_and_slope
from .matrix3 import PAIR_FIRST, PAIR_SECOND, cofactor3, det3, matmul3, rotation_variant_svd3, symmetric_eigen3

# The stiffness unit of the Phace defaults μ = 1, λ = 3 (docs/physics.md): 1 kPa.
STIFFNESS_UNIT_PA = 1000.0

# Floor of σ_i + σ_j in the polar-rotation derivative. F is dimensionless (≈ 1 for tissue), so
# this is an absolute floor; it only acts on elements within 1e-8 of a singular configuration,
# and bounds the Hessian's entries by ~1e8 μ w so the 9×9 eigen-decomposition stays accurate.
_MIN_SINGULAR_VALUE_SUM = 1e-8

# Largest asymmetry |S − Sᵀ| accepted in an activation, relative to its largest entry: the
# energy is the min-over-rotations form only for symmetric S; rounding in Q Λ Qᵀ is ~1e-16.
_ACTIVATION_SYMMETRY_TOLERANCE = 1e-9


# ----------------------------------------------------------------------------- one element
# Small fixed-size linear algebra lives in matrix3.py.


@njit(cache=True)
def _singular_value_pair_sum(sigma, i, j):
    return max(sigma[i] + sigma[j], _MIN_SINGULAR_VALUE_SUM)


@njit(cache=True)
def _add_corotational_term(F, S, coefficient, compute_gradient, compute_hessian, P, H):
    """Add coefficient·‖F − R(F S) S‖² to P (∂/∂F) and H (∂²/∂F²); return its value."""
    FS = np.empty((3, 3))
    matmul3(F, S, FS)
    U, sigma, V = np.empty((3, 3)), np.empty(3), np.empty((3, 3))
    rotation_variant_svd3(FS, U, sigma, V)
    rotation, rotated_activation = np.empty((3, 3)), np.empty((3, 3))
    matmul3(U, V.T, rotation)
    matmul3(rotation, S, rotated_activation)
    value = 0.0
    for a in range(3):
        for b in range(3):
            residual = F[a, b] - rotated_activation[a, b]
            value += residual * residual
            if compute_gradient:
                P[a, b] += 2.0 * coefficient * residual
    if compute_hessian:
        for p in range(9):
            H[p, p] += 2.0 * coefficient
        twist, direction = np.empty((3, 3)), np.empty((3, 3))
        for k in range(3):
            i, j = PAIR_FIRST[k], PAIR_SECOND[k]
            for a in range(3):
                for b in range(3):
                    twist[a, b] = U[a, i] * V[b, j] - U[a, j] * V[b, i]
            matmul3(twist, S, direction)
            flat = direction.reshape(9)
            scale = 2.0 * coefficient / _singular_value_pair_sum(sigma, i, j)
            for p in range(9):
                for q in range(9):
                    H[p, q] -= scale * flat[p] * flat[q]
    return coefficient * value


@njit(cache=True)
def _add_volume_hessian(F, cofactor, outer_coefficient, curvature_coefficient, H):
    """H += outer_coefficient·cof ⊗ cof + curvature_coefficient·∂²(det F)/∂F²."""
    flat_cofactor = cofactor.reshape(9)
    for p in range(9):
        for q in range(9):
            H[p, q] += outer_coefficient * flat_cofactor[p] * flat_cofactor[q]
    # ∂²J/∂F_ab ∂F_ce = ε_a,c,a' ε_b,e,b' F_a'b' for a ≠ c, b ≠ e (a', b' the third indices).
    for a in range(3):
        for c in range(3):
            if a == c:
                continue
            row_sign = 1.0 if (c - a) % 3 == 1 else -1.0
            for b in range(3):
                for e in range(3):
                    if b == e:
                        continue
                    column_sign = 1.0 if (e - b) % 3 == 1 else -1.0
                    H[3 * a + b, 3 * c + e] += (curvature_coefficient * row_sign * column_sign
                                                * F[3 - a - c, 3 - b - e])


@njit(cache=True)
def _is_positive_definite(H):
    """Whether a Cholesky factorisation of the symmetric 9×9 H runs through (H > 0)."""
    L = np.empty((9, 9))
    for j in range(9):
        pivot = H[j, j]
        for k in range(j):
            pivot -= L[j, k] * L[j, k]
        if not pivot > 0.0:
            return False
        L[j, j] = math.sqrt(pivot)
        for i in range(j + 1, 9):
            entry = H[i, j]
            for k in range(j):
                entry -= L[i, k] * L[j, k]
            L[i, j] = entry / L[j, j]
    return True


@njit(cache=True)
def _project_positive_semidefinite(H):
    """Clamp the negative eigenvalues of the symmetric 9×9 H to zero, in place."""
    # A Cholesky attempt costs a small share of LAPACK's eigen-decomposition and settles every
    # tet that needs no projection (a third of the muscle tets at ICT's fitted mouthSmile_L):
    # ICT's projected Hessian with random activations 108 → 96 ms (docs/benchmarks.md,
    # "Assembly order").
    if _is_positive_definite(H):
        return
    eigenvalues, eigenvectors = np.linalg.eigh(H)
    if eigenvalues[0] >= 0.0:
        return
    for p in range(9):
        for q in range(p, 9):
            entry = 0.0
            for m in range(9):
                if eigenvalues[m] > 0.0:
                    entry += eigenvalues[m] * eigenvectors[p, m] * eigenvectors[q, m]
            H[p, q] = H[q, p] = entry


@njit(cache=True)
def _general_element(F, S, passive_weight, active_weight, mu, lam,
                     compute_gradient, compute_hessian, project, P, H):
    """Any activation: the formulas of the module docstring, and a 9×9 eigen-decomposition
    for the projection."""
    value = 0.0
    # Terms with zero weight are skipped: each costs an SVD.
    if passive_weight != 0.0:
        value += _add_corotational_term(F, np.eye(3), mu * passive_weight,
                                        compute_gradient, compute_hessian, P, H)
    if active_weight != 0.0:
        # The contracting muscle's shear term stiffens (active_stiffening.py); its volume term does not.
        stiffening, _ = stiffening_and_slope(S)
        value += _add_corotational_term(F, S, mu * active_weight * stiffening,
                                        compute_gradient, compute_hessian, P, H)
    volume_ratio = det3(F)
    passive_change = volume_ratio - 1.0
    active_change = volume_ratio - det3(S)
    value += lam * (passive_weight * passive_change ** 2 + active_weight * active_change ** 2)
    if compute_gradient or compute_hessian:
        cofactor = cofactor3(F)
        pressure = 2.0 * lam * (passive_weight * passive_change + active_weight * active_change)
        if compute_gradient:
            for a in range(3):
                for b in range(3):
                    P[a, b] += pressure * cofactor[a, b]
        if compute_hessian:
            _add_volume_hessian(F, cofactor, 2.0 * lam * (passive_weight + active_weight), pressure, H)
            if project:
                _project_positive_semidefinite(H)
    return value


@njit(cache=True)
def _isotropic_element(F, weight, mu, lam, compute_gradient, compute_hessian, project, P, H):
    """S = I (or no muscle): weight·ψ with ψ = μ‖F − R(F)‖² + λ(J − 1)², an isotropic energy
    of the signed singular values σ. Its Hessian has a closed-form eigensystem (Smith et al.
    2019, "Analytic eigensystems for isotropic distortion energies") in the basis of U, V;
    per unit weight, with k the third index of the pair (i, j) and J_i = ∂J/∂σ_i:

      twist (u_i v_jᵀ − u_j v_iᵀ)/√2: (ψ_i + ψ_j)/(σ_i + σ_j) = 2μ(1 − 2/(σ_i + σ_j)) + 2λ(J − 1)σ_k
      flip  (u_i v_jᵀ + u_j v_iᵀ)/√2: (ψ_i − ψ_j)/(σ_i − σ_j) = 2μ − 2λ(J − 1)σ_k
      scaling u_i v_iᵀ, the 3×3 block ∂²ψ/∂σ_i∂σ_j = 2μ δ_ij + 2λ[J_i J_j + (J − 1) ∂²J/∂σ_i∂σ_j]

    Projection clamps the six closed-form eigenvalues and those of the 3×3 block, instead of
    decomposing the 9×9.
    """
    U, sigma, V = np.empty((3, 3)), np.empty(3), np.empty((3, 3))
    rotation_variant_svd3(F, U, sigma, V)
    volume_ratio = det3(F)
    volume_change = volume_ratio - 1.0
    value = 0.0
    for a in range(3):
        for b in range(3):
            residual = F[a, b] - (U[a, 0] * V[b, 0] + U[a, 1] * V[b, 1] + U[a, 2] * V[b, 2])
            value += residual * residual
            if compute_gradient:
                P[a, b] += 2.0 * weight * mu * residual
    value = weight * (mu * value + lam * volume_change * volume_change)
    if compute_gradient:
        cofactor = cofactor3(F)
        for a in range(3):
            for b in range(3):
                P[a, b] += 2.0 * weight * lam * volume_change * cofactor[a, b]
    if not compute_hessian:
        return value

    # The Hessian in the SVD frame, A (9×9, index 3i+j for the direction u_i v_jᵀ), is sparse:
    # the 3×3 scaling block on the (i,i) directions and, per pair, a 2×2 block on (i,j), (j,i).
    # With e = u_i v_jᵀ, f = u_j v_iᵀ the twist is (e − f)/√2 and the flip (e + f)/√2, so the
    # pair's block has ½(twist + flip) on its diagonal and ½(flip − twist) off it.
    singular_product = sigma[0] * sigma[1] * sigma[2]
    pressure = 2.0 * lam * (singular_product - 1.0)
    pair_diagonal, pair_off_diagonal = np.empty(3), np.empty(3)
    for k in range(3):
        i, j = PAIR_FIRST[k], PAIR_SECOND[k]
        third = sigma[3 - i - j]
        twist_value = weight * (2.0 * mu * (1.0 - 2.0 / _singular_value_pair_sum(sigma, i, j)) + pressure * third)
        flip_value = weight * (2.0 * mu - pressure * third)
        if project:
            twist_value, flip_value = max(twist_value, 0.0), max(flip_value, 0.0)
        pair_diagonal[k] = 0.5 * (twist_value + flip_value)
        pair_off_diagonal[k] = 0.5 * (flip_value - twist_value)

    scaling = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            if i == j:
                product_of_others = sigma[(i + 1) % 3] * sigma[(i + 2) % 3]
                scaling[i, i] = weight * (2.0 * mu + 2.0 * lam * product_of_others * product_of_others)
            else:
                third = sigma[3 - i - j]
                scaling[i, j] = weight * 2.0 * lam * (
                    sigma[j] * third * sigma[i] * third + (singular_product - 1.0) * third)
    if project:
        basis = np.empty((3, 3))
        symmetric_eigen3(scaling, basis)
        clamped = np.empty((3, 3))
        for i in range(3):
            for j in range(3):
                clamped[i, j] = (max(scaling[0, 0], 0.0) * basis[i, 0] * basis[j, 0]
                                 + max(scaling[1, 1], 0.0) * basis[i, 1] * basis[j, 1]
                                 + max(scaling[2, 2], 0.0) * basis[i, 2] * basis[j, 2])
        scaling = clamped

    # H = K A Kᵀ with K[(a,b),(i,j)] = U[a,i] V[b,j] (vec(U X Vᵀ) = K vec X); first W = K A,
    # touching only A's non-zeros, then H = W Kᵀ.
    frame = np.empty((9, 9))
    for a in range(3):
        for b in range(3):
            for i in range(3):
                for j in range(3):
                    frame[3 * a + b, 3 * i + j] = U[a, i] * V[b, j]
    half = np.empty((9, 9))
    for p in range(9):
        for k in range(3):
            ij, ji = 3 * PAIR_FIRST[k] + PAIR_SECOND[k], 3 * PAIR_SECOND[k] + PAIR_FIRST[k]
            half[p, ij] = frame[p, ij] * pair_diagonal[k] + frame[p, ji] * pair_off_diagonal[k]
            half[p, ji] = frame[p, ji] * pair_diagonal[k] + frame[p, ij] * pair_off_diagonal[k]
        for j in range(3):
            half[p, 4 * j] = frame[p, 0] * scaling[0, j] + frame[p, 4] * scaling[1, j] + frame[p, 8] * scaling[2, j]
    for p in range(9):
        for q in range(p, 9):
            entry = 0.0
            for r in range(9):
                entry += half[p, r] * frame[q, r]
            H[p, q] += entry
            if q != p:
                H[q, p] += entry
    return value


@njit(cache=True)
def _is_identity(S):
    for a in range(3):
        for b in range(3):
            if S[a, b] != (1.0 if a == b else 0.0):
                return False
    return True


@njit(cache=True)
def _element(F, S, passive_weight, active_weight, mu, lam,
             compute_gradient, compute_hessian, project, P, H):
    """Energy of one tet; adds ∂E/∂F to P and ∂²E/∂F² to H (both zeroed by the caller)."""
    # Without muscle, or with the neutral activation, the two terms are one isotropic energy
    # with the summed weight: most tets of a face, and every tet at rest activation.
    if active_weight == 0.0 or _is_identity(S):
        return _isotropic_element(F, passive_weight + active_weight, mu, lam,
                                  compute_gradient, compute_hessian, project, P, H)
    return _general_element(F, S, passive_weight, active_weight, mu, lam,
                            compute_gradient, compute_hessian, project, P, H)


# ----------------------------------------------------------------------------- tier 1: kernels


@njit(cache=True, parallel=True)
def _element_kernel(F, S, passive_weight, active_weight, mu, lam,
                    compute_gradient, compute_hessian, project, energies, gradients, hessians):
    """Fill energies (M,), and gradients (M,3,3) / hessians (M,9,9) when asked (else unused)."""
    for t in prange(F.shape[0]):
        P = np.zeros((3, 3))
        H = np.zeros((9, 9))
        energies[t] = _element(F[t], S[t], passive_weight[t], active_weight[t], mu[t], lam[t],
                               compute_gradient, compute_hessian, project, P, H)
        if compute_gradient:
            gradients[t] = P
        if compute_hessian:
            hessians[t] = H


def _run_element_kernel(F, S, passive_weight, active_weight, mu, lam,
                        compute_gradient, compute_hessian, project):
    F = np.ascontiguousarray(F, dtype=np.float64)
    element_count = F.shape[0]
    if F.shape != (element_count, 3, 3):
        raise ValueError(f"deformation gradients: expected shape (M, 3, 3), found {F.shape}")
    if not np.isfinite(F).all():
        raise ValueError("deformation gradients contain NaN or infinite values")
    S = np.ascontiguousarray(np.broadcast_to(S, (element_count, 3, 3)), dtype=np.float64)
    per_element = [np.ascontiguousarray(np.broadcast_to(value, (element_count,)), dtype=np.float64)
                   for value in (passive_weight, active_weight, mu, lam)]
    energies = np.empty(element_count)
    gradients = np.empty((element_count if compute_gradient else 0, 3, 3))
    hessians = np.empty((element_count if compute_hessian else 0, 9, 9))
    _element_kernel(F, S, *per_element, compute_gradient, compute_hessian, project,
                    energies, gradients, hessians)
    return energies, gradients, hessians


def corotated_element_energies(F, S, passive_weight, active_weight, mu, lam) -> np.ndarray:
    """Per-tet energies E_i (M,) for stacked F (M,3,3) and S (M,3,3) or one (3,3); the weights
    (volumes, any plastic s³ included), μ and λ as (M,) arrays or scalars."""
    return _run_element_kernel(F, S, passive_weight, active_weight, mu, lam, False, False, False)[0]


def corotated_element_gradients(F, S, passive_weight, active_weight, mu, lam) -> np.ndarray:
    """∂E_i/∂F_i (M,3,3) (the weighted first Piola–Kirchhoff stresses)."""
    return _run_element_kernel(F, S, passive_weight, active_weight, mu, lam, True, False, False)[1]


def corotated_element_hessians(F, S, passive_weight, active_weight, mu, lam,
                               project: bool = False) -> np.ndarray:
    """∂²E_i/∂F_i² (M,9,9) in the row-major flattening F[a,b] → 3a+b; exact, or with each
    element's negative eigenvalues clamped to zero when ``project``."""
    return _run_element_kernel(F, S, passive_weight, active_weight, mu, lam, False, True, project)[2]


# ----------------------------------------------------------------------------- tier 2: mesh


@dataclass(frozen=True)
class TetMaterial:
    """Per-tet weights, activation and material parameters of the co-rotated energy.

    passive_weight, active_weight: (M,) m³, the volumes of passive and muscle tissue in each
        tet at the model's rest shape *without* plasticity (CorotatedElasticity multiplies
        them by s³ for a plastic rest scale s).
    activation: (M,3,3) symmetric activation matrices S (identity = neutral).
    mu, lam: (M,) Pa (or scalars, broadcast).
    Change the activation of a frame with ``dataclasses.replace(material, activation=S)``.
    """

    passive_weight: np.ndarray
    active_weight: np.ndarray
    activation: np.ndarray
    mu: np.ndarray
    lam: np.ndarray

    def __post_init__(self):
        passive_weight = np.ascontiguousarray(self.passive_weight, dtype=np.float64)
        if passive_weight.ndim != 1:
            raise ValueError(f"passive_weight: expected shape (M,), found {passive_weight.shape}")
        element_count = len(passive_weight)

        def per_element(name, value, shape):
            array = np.asarray(value, dtype=np.float64)
            try:
                array = np.broadcast_to(array, shape)
            except ValueError:
                raise ValueError(f"{name}: expected shape {shape}, found {array.shape}") from None
            if not np.isfinite(array).all():
                raise ValueError(f"{name}: contains NaN or infinite values")
            return np.ascontiguousarray(array)

        arrays = {
            "passive_weight": per_element("passive_weight", passive_weight, (element_count,)),
            "active_weight": per_element("active_weight", self.active_weight, (element_count,)),
            "activation": per_element("activation", self.activation, (element_count, 3, 3)),
            "mu": per_element("mu", self.mu, (element_count,)),
            "lam": per_element("lam", self.lam, (element_count,)),
        }
        for name in ("passive_weight", "active_weight", "mu", "lam"):
            if (arrays[name] < 0.0).any():
                raise ValueError(f"{name}: must be non-negative")
        activation = arrays["activation"]
        asymmetry = np.abs(activation - activation.transpose(0, 2, 1)).max(initial=0.0)
        if asymmetry > _ACTIVATION_SYMMETRY_TOLERANCE * max(1.0, np.abs(activation).max(initial=0.0)):
            raise ValueError(f"activation: must be symmetric (largest |S − Sᵀ| is {asymmetry:.3g})")
        for name, array in arrays.items():
            object.__setattr__(self, name, array)

    @property
    def element_count(self) -> int:
        return len(self.passive_weight)

    def restricted_to(self, elements: np.ndarray) -> "TetMaterial":
        """The material of these tets only (a sub-mesh's, in this order)."""
        return TetMaterial(passive_weight=self.passive_weight[elements], active_weight=self.active_weight[elements],
                           activation=self.activation[elements], mu=self.mu[elements], lam=self.lam[elements])

    @classmethod
    def from_model(cls, model, mu=1.0, lam=3.0, stiffness_unit=STIFFNESS_UNIT_PA, activation=None):
        """Weights from a model (docs/model-format.md): a tet with any muscle is wholly active
        (weight V on the active energy, none on the passive), every other tet wholly passive.

        This is Phace's model (paper 000 §4–5): the muscle fractions weigh only the
        regularisers. Splitting a tet into an active share V·Σf and a passive share V·(1 − Σf)
        instead let the passive share of every muscle tet resist its own contraction; the
        atlas muscles fill about a third of their tets on the ICT face, so the muscles pulled
        with a third of their strength and a full smile was out of reach.
        μ, λ (scalars or (M,)) in units of ``stiffness_unit`` Pa; activation (M,3,3), default S = I."""
        volume = np.asarray(model["tet_rest_volume"], dtype=np.float64)
        element_count = len(volume)
        if activation is None:
            activation = np.broadcast_to(np.eye(3), (element_count, 3, 3))
        active = np.asarray(model["muscle_fraction"], dtype=np.float64).sum(axis=1) > 0.0
        return cls(
            passive_weight=np.where(active, 0.0, volume),
            active_weight=np.where(active, volume, 0.0),
            activation=activation,
            mu=np.asarray(mu, dtype=np.float64) * stiffness_unit,
            lam=np.asarray(lam, dtype=np.float64) * stiffness_unit,
        )


@njit(cache=True)
def _deformation_gradient(x, tet, G, F):
    """F[c, b] = Σ_n x[tet[n], c] G[n, b]."""
    for c in range(3):
        for b in range(3):
            F[c, b] = (x[tet[0], c] * G[0, b] + x[tet[1], c] * G[1, b]
                       + x[tet[2], c] * G[2, b] + x[tet[3], c] * G[3, b])


@njit(cache=True)
def _add_element_gradient(P, tet, G, gradient):
    """gradient[tet[n], c] += Σ_b P[c, b] G[n, b]: the chain rule through F = Σ_n x_n G_nᵀ."""
    for n in range(4):
        for c in range(3):
            gradient[tet[n], c] += P[c, 0] * G[n, 0] + P[c, 1] * G[n, 1] + P[c, 2] * G[n, 2]


@njit(cache=True)
def _add_element_hessian(H, G, entry_positions, data):
    """data[entry_positions] += the tet's 12×12 block (dF/dx)ᵀ H (dF/dx), dF/dx = I₃ ⊗ G:
    K[(n,c),(m,e)] = Σ_{b,d} G[n,b] H[3c+b, 3e+d] G[m,d], in local order (3n+c)·12 + 3m+e."""
    half = np.empty((3, 3, 4, 3))  # half[c, b, m, e] = Σ_d H[3c+b, 3e+d] G[m, d]
    for c in range(3):
        for b in range(3):
            for m in range(4):
                for e in range(3):
                    half[c, b, m, e] = (H[3 * c + b, 3 * e] * G[m, 0] + H[3 * c + b, 3 * e + 1] * G[m, 1]
                                        + H[3 * c + b, 3 * e + 2] * G[m, 2])
    entry = 0
    for n in range(4):
        for c in range(3):
            for m in range(4):
                for e in range(3):
                    data[entry_positions[entry]] += (G[n, 0] * half[c, 0, m, e] + G[n, 1] * half[c, 1, m, e]
                                                     + G[n, 2] * half[c, 2, m, e])
                    entry += 1


@njit(cache=True, parallel=True)
def _assemble(x, tets, shape_gradients, activation, passive_weight, active_weight, mu, lam,
              group_starts, tets_in_order, entry_positions, compute_gradient, compute_hessian, project,
              energies, gradient, hessian_data):
    """Per-tet energies; gradient (N,3) and Hessian data accumulated when asked.

    Tets run one group at a time in the order given (group_starts, tets_in_order): with several
    threads a group is a colour, tets sharing no node, so their scatter-adds touch disjoint
    entries and need no atomics or per-thread copies; on one thread it is every tet, in an order
    that keeps the entries they touch close together (CorotatedElasticity._passes).
    """
    for group in range(len(group_starts) - 1):
        for k in prange(group_starts[group], group_starts[group + 1]):
            t = tets_in_order[k]
            F = np.empty((3, 3))
            _deformation_gradient(x, tets[t], shape_gradients[t], F)
            P = np.zeros((3, 3))
            H = np.zeros((9, 9))
            energies[t] = _element(F, activation[t], passive_weight[t], active_weight[t], mu[t], lam[t],
                                   compute_gradient, compute_hessian, project, P, H)
            if compute_gradient:
                _add_element_gradient(P, tets[t], shape_gradients[t], gradient)
            if compute_hessian:
                _add_element_hessian(H, shape_gradients[t], entry_positions[t], hessian_data)


@njit(cache=True)
def _greedy_tet_colors(tets, node_count):
    """Colour tets so that tets sharing a node differ (greedy, smallest free colour)."""
    incidence_start = np.zeros(node_count + 1, dtype=np.int64)
    for t in range(tets.shape[0]):
        for k in range(4):
            incidence_start[tets[t, k] + 1] += 1
    for n in range(node_count):
        incidence_start[n + 1] += incidence_start[n]
    incident = np.empty(incidence_start[node_count], dtype=np.int64)
    fill = incidence_start[:-1].copy()
    for t in range(tets.shape[0]):
        for k in range(4):
            incident[fill[tets[t, k]]] = t
            fill[tets[t, k]] += 1
    colors = np.full(tets.shape[0], -1, dtype=np.int64)
    # A tet has fewer than 4·(largest node valence) neighbours, so that many colours suffice.
    largest_valence = np.max(incidence_start[1:] - incidence_start[:-1]) if node_count else 0
    taken_by = np.full(4 * largest_valence + 1, -1, dtype=np.int64)  # colour → last tet it blocked
    for t in range(tets.shape[0]):
        for k in range(4):
            node = tets[t, k]
            for neighbour in incident[incidence_start[node]:incidence_start[node + 1]]:
                if colors[neighbour] >= 0:
                    taken_by[colors[neighbour]] = t
        color = 0
        while taken_by[color] == t:
            color += 1
        colors[t] = color
    return colors


def _index_dtype(largest_value: int):
    """int32 whenever it suffices, as scipy would pick, so it never copies our index arrays."""
    return np.int32 if largest_value <= np.iinfo(np.int32).max else np.int64


class CorotatedElasticity:
    """The co-rotated energy of a tet mesh, with everything about the rest shape precomputed.

    rest_positions (N,3) m; tets (M,4) positively oriented; rest_scale (M,) plastic rest scale
    s > 0 per tet (None: 1). Positions x may be given as (N,3) or flattened (3N,).

    Attributes:
        shape_gradients (M,4,3): G with F[c, b] = Σ_n x[tet[n], c] G[n, b], i.e. the constant
            9×12 map dF/dx of each tet is I₃ ⊗ G in our flattening; it is stored factored,
            12 numbers per tet instead of 108.
        rest_volume (M,): s³ · det(D_m) / 6.
        volume_scale (M,): s³, the factor applied to a TetMaterial's weights.
        hessian_indptr, hessian_indices: the CSR pattern of the 3N×3N Hessian (every pair of
            nodes sharing a tet, as dense 3×3 blocks; column indices sorted).
        element_entry_positions (M,144): where entry (3i+c, 3j+e) of each tet's 12×12 block,
            local nodes i, j, lives in the CSR data array (local index (3i+c)·12 + 3j+e).
        diagonal_entry_positions (3N,): where each diagonal entry lives in the data array,
            for adding a diagonal term (lumped mass) without changing the pattern.
    """

    def __init__(self, rest_positions, tets, rest_scale=None):
        rest_positions = np.ascontiguousarray(rest_positions, dtype=np.float64)
        tets = np.ascontiguousarray(tets, dtype=np.int64)
        if rest_positions.ndim != 2 or rest_positions.shape[1] != 3:
            raise ValueError(f"rest_positions: expected shape (N, 3), found {rest_positions.shape}")
        if tets.ndim != 2 or tets.shape[1] != 4:
            raise ValueError(f"tets: expected shape (M, 4), found {tets.shape}")
        node_count, element_count = len(rest_positions), len(tets)
        if element_count and (tets.min() < 0 or tets.max() >= node_count):
            raise ValueError("tets: node index out of range")
        self.node_count, self.element_count = node_count, element_count
        self.tets = tets

        rest_edges = (rest_positions[tets[:, 1:]] - rest_positions[tets[:, :1]]).transpose(0, 2, 1)
        rest_determinant = np.linalg.det(rest_edges)
        if (rest_determinant <= 0.0).any():
            raise ValueError(f"tets: {(rest_determinant <= 0).sum()} tets are not positively oriented")
        scale = np.ones(element_count) if rest_scale is None else np.asarray(rest_scale, dtype=np.float64)
        if scale.shape != (element_count,) or not (np.isfinite(scale).all() and (scale > 0.0).all()):
            raise ValueError("rest_scale: expected (M,) positive finite values")
        self.rest_scale = scale
        self.volume_scale = scale ** 3
        self.rest_volume = rest_determinant / 6.0 * self.volume_scale
        inverse_rest_edges = np.linalg.inv(rest_edges) / scale[:, None, None]
        self.shape_gradients = np.ascontiguousarray(
            np.concatenate([-inverse_rest_edges.sum(axis=1, keepdims=True), inverse_rest_edges], axis=1))
        self._build_hessian_pattern()
        colors = _greedy_tet_colors(tets, node_count)
        self._colors = colors
        self._tets_by_color = np.argsort(colors, kind="stable")
        self._color_starts = np.searchsorted(colors[self._tets_by_color], np.arange(colors.max(initial=-1) + 2))
        # One thread needs no colours. Tets in colour order scatter all over the Hessian's data
        # (10 MB at 35k tets), and in the mesh's own order hardly less; sorted by their lowest
        # node, consecutive tets fill the same rows: ICT's 35,617-tet Hessian in 61 ms instead
        # of 118 (docs/benchmarks.md, "Assembly order").
        self._locality_order = np.lexsort((tets.max(axis=1), tets.min(axis=1))) if element_count \
            else np.zeros(0, dtype=np.int64)
        self._single_pass = np.array([0, element_count])

    @property
    def color_count(self) -> int:
        """Number of tet colours, i.e. of parallel passes per assembly."""
        return len(self._color_starts) - 1

    def _build_hessian_pattern(self):
        node_count, tets = self.node_count, self.tets
        # Every ordered pair of nodes of every tet, (M,16) in local order 4i + j.
        pair_keys = (np.repeat(tets, 4, axis=1) * node_count + np.tile(tets, (1, 4)))
        unique_keys, pair_of_entry = np.unique(pair_keys, return_inverse=True)
        pair_of_entry = pair_of_entry.reshape(self.element_count, 4, 4)
        pair_row, pair_column = unique_keys // node_count, unique_keys % node_count
        # Node-level CSR of the pairs (sorted by row, then column, by np.unique).
        node_start = np.zeros(node_count + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair_row, minlength=node_count), out=node_start[1:])
        degree = np.diff(node_start)
        if (degree == 0).any():
            raise ValueError(f"rest_positions: {(degree == 0).sum()} nodes belong to no tet")
        # Row 3n+c holds node n's neighbours m as column triples 3m, 3m+1, 3m+2: it starts at
        # 9·node_start[n] + 3c·degree[n], and pair p = node_start[n] + slot sits at 3·slot.
        pair_count = len(unique_keys)
        index_dtype = _index_dtype(9 * pair_count)
        row_start = (9 * node_start[:-1, None] + 3 * np.arange(3) * degree[:, None]).reshape(-1)
        self.hessian_indptr = np.append(row_start, 9 * pair_count).astype(index_dtype)

        def entry_position(pair, c, e):
            row = pair_row[pair]
            return 6 * node_start[row] + 3 * pair + 3 * c * degree[row] + e

        pair_index = np.arange(pair_count)[:, None, None]
        c, e = np.arange(3)[None, :, None], np.arange(3)[None, None, :]
        indices = np.empty(9 * pair_count, dtype=index_dtype)
        column = np.broadcast_to(3 * pair_column[:, None, None] + e, (pair_count, 3, 3))
        indices[entry_position(pair_index, c, e).reshape(-1)] = column.reshape(-1)
        self.hessian_indices = indices

        local_pair = pair_of_entry[:, :, None, :, None]        # (M, i, c, j, e)
        local_c = np.arange(3)[None, None, :, None, None]
        local_e = np.arange(3)[None, None, None, None, :]
        self.element_entry_positions = np.ascontiguousarray(
            entry_position(local_pair, local_c, local_e).reshape(self.element_count, 144), dtype=index_dtype)

        self_pair = np.searchsorted(unique_keys, np.arange(node_count) * (node_count + 1))
        self.diagonal_entry_positions = entry_position(self_pair[:, None], np.arange(3), np.arange(3)).reshape(-1)

    # ------------------------------------------------------------------ evaluation

    def _positions(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.size != 3 * self.node_count:
            raise ValueError(f"x: expected {self.node_count} nodes, found shape {x.shape}")
        x = x.reshape(self.node_count, 3)
        if not np.isfinite(x).all():
            raise ValueError("x: contains NaN or infinite values")
        return x

    def deformation_gradients(self, x) -> np.ndarray:
        """F (M,3,3) of every tet at positions x; F = D_s (s D_m)⁻¹."""
        element_positions = self._positions(x)[self.tets]                  # (M, 4 nodes, 3)
        return element_positions.transpose(0, 2, 1) @ self.shape_gradients  # Σ_n x[n,c] G[n,b]

    def _passes(self) -> tuple[np.ndarray, np.ndarray]:
        """(group starts, tets in order) for _assemble: the colours when numba runs on several
        threads, else one group of every tet in locality order (a worker of `fit --jobs N`, or
        NUMBA_NUM_THREADS=1)."""
        if numba.get_num_threads() > 1:
            return self._color_starts, self._tets_by_color
        return self._single_pass, self._locality_order

    def passes_over(self, elements: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group starts, tets in order) as ``_passes`` gives them, for the tets of the boolean
        mask `elements` only: what ``gradient(..., passes=…)`` takes to sum over those tets."""
        if numba.get_num_threads() > 1:
            order = self._tets_by_color[elements[self._tets_by_color]]
            return np.searchsorted(self._colors[order], np.arange(self.color_count + 1)), order
        order = self._locality_order[elements[self._locality_order]]
        return np.array([0, len(order)]), order

    def _evaluate(self, x, material: TetMaterial, compute_gradient, compute_hessian, project, passes=None):
        if material.element_count != self.element_count:
            raise ValueError(f"material: {material.element_count} tets, the mesh has {self.element_count}")
        positions = np.ascontiguousarray(self._positions(x))
        # Tets outside `passes` leave their entry at 0.
        energies = np.empty(self.element_count) if passes is None else np.zeros(self.element_count)
        gradient = np.zeros((self.node_count if compute_gradient else 0, 3))
        # A fresh data array per call, so a Hessian returned earlier never changes under its
        # holder; only the pattern arrays are shared.
        data = np.zeros(len(self.hessian_indices) if compute_hessian else 0)
        _assemble(positions, self.tets, self.shape_gradients, material.activation,
                  material.passive_weight * self.volume_scale, material.active_weight * self.volume_scale,
                  material.mu, material.lam, *(self._passes() if passes is None else passes),
                  self.element_entry_positions,
                  compute_gradient, compute_hessian, project,
                  energies, gradient, data)
        hessian = None
        if compute_hessian:
            size = 3 * self.node_count
            hessian = scipy.sparse.csr_matrix((data, self.hessian_indices, self.hessian_indptr),
                                              shape=(size, size), copy=False)
            hessian.has_sorted_indices = True
        return float(energies.sum()), gradient.reshape(-1) if compute_gradient else None, hessian

    def energy(self, x, material: TetMaterial) -> float:
        return self._evaluate(x, material, False, False, False)[0]

    def gradient(self, x, material: TetMaterial, passes=None) -> np.ndarray:
        """∂E/∂x (3N,), node-major; with `passes` (``passes_over``) of the energy of those tets only."""
        return self._evaluate(x, material, True, False, False, passes)[1]

    def energy_and_gradient(self, x, material: TetMaterial) -> tuple[float, np.ndarray]:
        """(E, ∂E/∂x) in one pass: the gradient costs ~10 % over the energy alone, against a
        second pass over every tet (a line search that accepts its trial needs both there)."""
        energy, gradient, _ = self._evaluate(x, material, True, False, False)
        return energy, gradient

    def hessian(self, x, material: TetMaterial, project: bool = True) -> scipy.sparse.csr_matrix:
        """∂²E/∂x² (3N×3N CSR whose indptr/indices are views of hessian_indptr/hessian_indices,
        never copies); each tet's 9×9 block in F projected to positive semi-definite when
        ``project`` (the assembled matrix is then PSD too)."""
        return self._evaluate(x, material, False, True, project)[2]

    def energy_gradient_hessian(self, x, material: TetMaterial, project: bool = True):
        """(E, gradient, Hessian) in one pass over the tets: one SVD per term and tet."""
        return self._evaluate(x, material, True, True, project)


# ----------------------------------------------------------------------------- tier 3


def corotated_energy(rest_positions, tets, x, material: TetMaterial, project: bool = True):
    """(E, gradient (3N,), Hessian 3N×3N CSR) of the co-rotated energy at positions x.

    Builds the rest-shape data every call: for repeated evaluation keep a CorotatedElasticity.
    """
    return CorotatedElasticity(rest_positions, tets).energy_gradient_hessian(x, material, project)
