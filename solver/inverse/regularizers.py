"""Priors on the activations of inverse physics (paper 000 §5, Eq. 5 and 6).

The unknowns are the activation 6-vectors a_i (xx, yy, zz, yz, xz, xy) of the model's active
tets (`activation.active_tet_indices`), a_neut = (1, 1, 1, 0, 0, 0) being S = I. In vector form
the Frobenius norm of a symmetric matrix counts each off-diagonal entry twice, so
‖S‖²_F = aᵀ W a with W = diag(1, 1, 1, 2, 2, 2).

Each tet's share of a muscle is weighted by its volume, w_im = f_im V_i / V̄ (V̄ the mean active
tet volume): the priors then measure muscle *volume*, so refining the mesh does not change
their balance against the fitting term (Phace sums f_im over tets of similar size).

* R_act (Eq. 5): Σ_i Σ_m w_im ‖Q_i D(γ_m) Q_iᵀ − S(a_i)‖²_F, D(γ) = diag(γ⁻¹, √γ, √γ): every tet
  of a muscle contracts the same volume-preserving way along its fibre. The contractions γ_m are
  auxiliary unknowns found in the *local* step of a local–global scheme: for fixed a each γ_m
  minimises a one-dimensional function whose stationarity condition is a polynomial of degree 6
  in u = √γ, solved by Brent's method (`best_contractions`).
* R_sparse (Eq. 6): Σ_m √(Σ_i w_im ‖a_i − a_neut‖²_W): a group norm per muscle, so a muscle that
  does not help the fit stays exactly neutral as a whole. The norm is smoothed at zero,
  √(s + ε²) − ε, so Newton-type solvers see a twice-differentiable function; ε is far below
  any activation that moves the skin.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from ..physics.activation import (NEUTRAL_ACTIVATION, active_tet_indices, contraction_matrix, symmetric_from_vector,
                                  vector_from_symmetric)

ACTIVATION_METRIC = np.array([1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
SPARSITY_SMOOTHING = 1e-4          # ε of the smoothed group norm, in activation units
# Contractions are searched in u = √γ ∈ [0.2, 5] (γ from 0.04 to 25): far beyond any muscle.
CONTRACTION_SEARCH = (0.2, 5.0)
CONTRACTION_SEARCH_SAMPLES = 200


@dataclass
class MuscleMembership:
    """Which active tets belong to which muscle, and how much."""

    tets: np.ndarray            # (A,) model tet index of each active tet
    weights: np.ndarray         # (A, m) w_im = f_im V_i / V̄
    frames: np.ndarray          # (A, 3, 3) Q_i, first column the fibre direction
    muscle_names: list

    @classmethod
    def from_model(cls, model) -> "MuscleMembership":
        tets = active_tet_indices(model)
        fraction = np.asarray(model["muscle_fraction"], dtype=np.float64)[tets]
        volume = np.asarray(model["tet_rest_volume"], dtype=np.float64)[tets]
        weights = fraction * (volume / volume.mean())[:, None]
        frames = np.asarray(model["muscle_direction"], dtype=np.float64)[tets]
        return cls(tets=tets, weights=weights, frames=frames,
                   muscle_names=[str(name) for name in model["muscle_names"]])

    @property
    def active_count(self) -> int:
        return len(self.tets)


def neutral_activations(active_count: int) -> np.ndarray:
    return np.tile(NEUTRAL_ACTIVATION, (active_count, 1))


class ActivationPrior:
    """R_act = strength · Σ_i Σ_m w_im ‖Q_i D(γ_m) Q_iᵀ − S(a_i)‖²_F; quadratic in a for fixed γ."""

    def __init__(self, membership: MuscleMembership, strength: float):
        self.membership = membership
        self.strength = float(strength)
        self._tet_weight = membership.weights.sum(axis=1)              # Σ_m w_im

    def _targets(self, contractions) -> np.ndarray:
        """Σ_m w_im vec(Q_i D(γ_m) Q_iᵀ) / Σ_m w_im per tet (A, 6): the blend the prior pulls to."""
        m = self.membership
        gamma = np.asarray(contractions, dtype=np.float64)
        share = np.divide(m.weights, self._tet_weight[:, None], out=np.zeros_like(m.weights),
                          where=self._tet_weight[:, None] > 0)
        along, across = share @ (1.0 / gamma), share @ np.sqrt(gamma)
        diagonal = np.stack([along, across, across], axis=-1)
        return vector_from_symmetric(np.einsum("aik,ak,ajk->aij", m.frames, diagonal, m.frames))

    def _constant(self, contractions) -> float:
        """Σ_i [Σ_m w_im ‖T_im‖² − (Σ_m w_im) ‖T̄_i‖²]: what the blend leaves of the sum over muscles."""
        m = self.membership
        gamma = np.asarray(contractions, dtype=np.float64)
        per_muscle = gamma ** -2 + 2.0 * gamma                      # ‖D(γ)‖²_F, rotation-invariant
        targets = self._targets(gamma)
        blended = np.einsum("ak,k,ak->a", targets, ACTIVATION_METRIC, targets)
        return float((m.weights @ per_muscle).sum() - self._tet_weight @ blended)

    def value(self, activations, contractions) -> float:
        offset = np.asarray(activations) - self._targets(contractions)
        spread = np.einsum("ak,k,ak->a", offset, ACTIVATION_METRIC, offset)
        return self.strength * (float(self._tet_weight @ spread) + self._constant(contractions))

    def gradient(self, activations, contractions) -> np.ndarray:
        offset = np.asarray(activations) - self._targets(contractions)
        return 2.0 * self.strength * self._tet_weight[:, None] * ACTIVATION_METRIC * offset

    def hessian_diagonal(self) -> np.ndarray:
        """(A, 6): the Hessian in a is this diagonal, constant."""
        return 2.0 * self.strength * self._tet_weight[:, None] * ACTIVATION_METRIC

    def best_contractions(self, activations, previous=None) -> np.ndarray:
        """The local step: per muscle, γ_m minimising Σ_i w_im ‖D(γ) − Q_iᵀ S_i Q_i‖²_F.

        With u = √γ and the weighted means α of (QᵀSQ)₁₁ and β of ((QᵀSQ)₂₂ + (QᵀSQ)₃₃)/2 this is
        φ(u) = (u⁻² − α)² + 2(u − β)² up to a constant, φ'(u) = 4 u⁻⁵ p(u) with
        p(u) = u⁶ − β u⁵ + α u² − 1. p(0) = −1 and p → ∞, so a minimiser exists; every sign change
        of p on the search interval is refined by Brent's method and the lowest φ wins. A muscle
        with no weight keeps its previous γ (1 at first)."""
        m = self.membership
        muscle_count = m.weights.shape[1]
        gamma = np.ones(muscle_count) if previous is None else np.array(previous, dtype=np.float64)
        local = np.einsum("aki,akl,alj->aij", m.frames, symmetric_from_vector(activations), m.frames)   # Qᵀ S Q
        along = local[:, 0, 0]
        across = 0.5 * (local[:, 1, 1] + local[:, 2, 2])
        grid = np.linspace(*CONTRACTION_SEARCH, CONTRACTION_SEARCH_SAMPLES)
        for muscle in range(muscle_count):
            weight = m.weights[:, muscle]
            total = weight.sum()
            if total <= 0.0:
                continue
            alpha, beta = weight @ along / total, weight @ across / total
            gamma[muscle] = _best_contraction(alpha, beta, grid)
        return gamma


def _sextic(u, alpha, beta):
    return u ** 6 - beta * u ** 5 + alpha * u ** 2 - 1.0


def _contraction_misfit(u, alpha, beta):
    return (u ** -2 - alpha) ** 2 + 2.0 * (u - beta) ** 2


def _best_contraction(alpha: float, beta: float, grid: np.ndarray) -> float:
    values = _sextic(grid, alpha, beta)
    crossings = np.flatnonzero((values[:-1] < 0.0) & (values[1:] >= 0.0))
    candidates = [brentq(_sextic, grid[i], grid[i + 1], args=(alpha, beta), xtol=1e-12) for i in crossings]
    if not candidates:          # the minimiser lies outside the search interval: take its nearer end
        candidates = [grid[0] if values[0] >= 0.0 else grid[-1]]
    best = min(candidates, key=lambda u: _contraction_misfit(u, alpha, beta))
    return float(best) ** 2


class GroupSparsity:
    """R_sparse = strength · Σ_m (√(s_m + ε²) − ε), s_m = Σ_i w_im ‖a_i − a_neut‖²_W; convex."""

    def __init__(self, membership: MuscleMembership, strength: float, smoothing: float = SPARSITY_SMOOTHING):
        self.weights = membership.weights
        self.strength = float(strength)
        self.smoothing = float(smoothing)

    def _norms(self, activations):
        offset = np.asarray(activations) - NEUTRAL_ACTIVATION
        squared = np.einsum("ak,k,ak->a", offset, ACTIVATION_METRIC, offset)
        return offset, np.sqrt(self.weights.T @ squared + self.smoothing ** 2)     # (m,)

    def value(self, activations) -> float:
        _, norms = self._norms(activations)
        return self.strength * float((norms - self.smoothing).sum())

    def muscle_norms(self, activations) -> np.ndarray:
        """(m,) √s_m: how far each muscle is from neutral (0 for an unused muscle)."""
        offset = np.asarray(activations) - NEUTRAL_ACTIVATION
        squared = np.einsum("ak,k,ak->a", offset, ACTIVATION_METRIC, offset)
        return np.sqrt(self.weights.T @ squared)

    def gradient(self, activations) -> np.ndarray:
        offset, norms = self._norms(activations)
        per_tet = self.weights @ (1.0 / norms)                                  # Σ_m w_im / ρ_m
        return self.strength * per_tet[:, None] * ACTIVATION_METRIC * offset

    def _curvature_norms(self, activations, floor):
        """(offset, ρ̂) with ρ̂_m = max(ρ_m, floor · √Σ_i w_im): the norms the curvature is taken at."""
        offset, norms = self._norms(activations)
        if floor > 0.0:
            norms = np.maximum(norms, floor * np.sqrt(self.weights.sum(axis=0)))
        return offset, norms

    def hessian_product(self, activations, direction, floor: float = 0.0) -> np.ndarray:
        """H v with H = Σ_m [W_m/ρ_m − (W_m d)(W_m d)ᵀ/ρ_m³] (W_m = w_im·W per tet, d = a − a_neut).
        With `floor` > 0, ρ_m is replaced by ρ̂_m (`_curvature_norms`): a softer curvature near
        neutral, still positive semi-definite (the rank-one part is at most ρ_m²/ρ̂_m² ≤ 1 of the first)."""
        offset, norms = self._curvature_norms(activations, floor)
        weighted_offset = ACTIVATION_METRIC * offset                            # W d per tet
        direction = np.asarray(direction)
        projection = self.weights.T @ np.einsum("ak,ak->a", weighted_offset, direction)   # (m,) Σ_i w_im (Wd)·v
        diagonal_part = (self.weights @ (1.0 / norms))[:, None] * ACTIVATION_METRIC * direction
        rank_one_part = (self.weights @ (projection / norms ** 3))[:, None] * weighted_offset
        return self.strength * (diagonal_part - rank_one_part)

    def hessian_diagonal(self, activations, floor: float = 0.0) -> np.ndarray:
        """(A, 6) an upper bound of the Hessian's diagonal (its first term), for preconditioning."""
        _, norms = self._curvature_norms(activations, floor)
        return self.strength * (self.weights @ (1.0 / norms))[:, None] * ACTIVATION_METRIC


def preferred_activations(membership: MuscleMembership, contractions) -> np.ndarray:
    """(A, 6) the activations R_act alone would choose for these contractions (muscle shares blended)."""
    return ActivationPrior(membership, 1.0)._targets(contractions)


def contraction_activation(frames, gamma) -> np.ndarray:
    """(A, 6) vec(Q D(γ) Qᵀ) for per-tet γ (A,): the 1-DoF fibre model's activations."""
    return vector_from_symmetric(contraction_matrix(frames, gamma))
