"""Muscle activations: the 6-vector ↔ symmetric matrix, contractions, per-tet blending, paralysis.

Paper 000 §4–5 and docs/physics.md. An activation is a symmetric 3×3 matrix S (pure
distortion, no rotation) that the active energy asks the tissue's deformation gradient to
reach, E_act = V [μ ‖F − R(FS) S‖² + λ (det F − det S)²]. As in Phace, a tet with any muscle
is wholly active and the muscle fractions weigh only the inverse problem's regularisers
(`corotated.TetMaterial.from_model`). S = I is the neutral (relaxed) activation.

Blending (`tet_activations`): a tet shared by several muscles (or partly passive) gets the
blend of its muscles' matrices normalised by the muscle content Σf,

    S_i = Σ_m (f_im / Σ_m' f_im') S_m,i        (S_i = I when Σf = 0),

so a tet filled by one muscle (even partially) gets exactly that muscle's S, and a passive
tet gets I. The blend is linear (paper 000 §6: symmetric matrices carry no
rotation, so blending them linearly is sound); a blend of volume-preserving matrices has
det S ≤ 1 only to second order in the spread of the γ's, and the volume term of E_act aims
at that det S, so the two terms stay consistent.
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

from .maps import NUMBERS

# Vector index → (row, column) of the symmetric matrix: diagonal first, then yz, xz, xy.
_VECTOR_ENTRIES = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))
NEUTRAL_ACTIVATION = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])


def symmetric_from_vector(activation_vectors) -> np.ndarray:
    """(..., 6) vectors (xx, yy, zz, yz, xz, xy) → (..., 3, 3) symmetric matrices; linear."""
    a = np.asarray(activation_vectors, dtype=np.float64)
    if a.shape[-1:] != (6,):
        raise ValueError(f"activation vectors must have a last axis of length 6, got shape {a.shape}")
    matrices = np.empty(a.shape[:-1] + (3, 3))
    for index, (row, column) in enumerate(_VECTOR_ENTRIES):
        matrices[..., row, column] = a[..., index]
        matrices[..., column, row] = a[..., index]
    return matrices


def vector_from_symmetric(matrices) -> np.ndarray:
    """(..., 3, 3) → (..., 6); the off-diagonal entries are the mean of the two mirrored ones,
    so a slightly asymmetric matrix (rounding) maps to its symmetric part."""
    s = np.asarray(matrices, dtype=np.float64)
    if s.shape[-2:] != (3, 3):
        raise ValueError(f"matrices must end in (3, 3), got shape {s.shape}")
    return np.stack([0.5 * (s[..., row, column] + s[..., column, row]) for row, column in _VECTOR_ENTRIES],
                    axis=-1)


def contraction_matrix(frames, contraction) -> np.ndarray:
    """S = Q diag(γ⁻¹, √γ, √γ) Qᵀ per tet (paper 000 §5).

    frames: (M, 3, 3) rotations Q whose first column is the fibre direction;
    contraction: (M,) γ > 0. γ = 1 is rest, γ > 1 shortens along the fibre by 1/γ and thickens
    the cross-section by √γ, so det S = 1 (muscle is incompressible).
    """
    q = np.asarray(frames, dtype=np.float64)
    gamma = np.asarray(contraction, dtype=np.float64)
    if np.any(~np.isfinite(gamma)) or np.any(gamma <= 0.0):
        raise ValueError("contraction γ must be finite and > 0 (1 = rest, > 1 contracts along the fibre)")
    return _frame_diagonal(q, 1.0 / gamma, np.sqrt(gamma))


def contraction_log_derivatives(frames, weights, log_contraction) -> np.ndarray:
    """(m, M, 6): ∂/∂(log γ_m) of Σ_m w[t, m] vec(Q_t D(γ_m) Q_tᵀ), the change of each tet's
    activation as muscle m contracts, for frames (M, 3, 3), weights (M, m) and log γ (m,). At
    γ = 1 it is R_act's preferred direction Q diag(−1, ½, ½) Qᵀ, since d/d(log γ) of
    (γ⁻¹, √γ, √γ) is (−γ⁻¹, √γ/2, √γ/2)."""
    gamma = np.exp(np.asarray(log_contraction, dtype=np.float64))
    per_muscle = _frame_diagonal(np.asarray(frames, dtype=np.float64)[None], (-1.0 / gamma)[:, None],
                                 (0.5 * np.sqrt(gamma))[:, None])                           # (m, M, 3, 3)
    return vector_from_symmetric(per_muscle * np.asarray(weights, dtype=np.float64).T[:, :, None, None])


def _frame_diagonal(frames, along_fibre, across_fibre) -> np.ndarray:
    """Q diag(a, b, b) Qᵀ for per-tet Q, a, b."""
    scales = np.stack([along_fibre, across_fibre, across_fibre], axis=-1)
    return np.einsum("...ik,...k,...jk->...ij", frames, scales, frames)


def muscle_indices(model, names: Iterable[str]) -> np.ndarray:
    """Column indices in muscle_fraction of the named muscles; ValueError names an unknown one."""
    model_names = [str(name) for name in model["muscle_names"]]
    lookup = {name: index for index, name in enumerate(model_names)}
    indices = []
    for name in names:
        if str(name) not in lookup:
            raise ValueError(f"unknown muscle {str(name)!r}; the model's muscles are: {', '.join(model_names)}")
        indices.append(lookup[str(name)])
    return np.asarray(indices, dtype=np.int64)


def active_tet_indices(model) -> np.ndarray:
    """Tets with some muscle (Σ muscle_fraction > 0), in increasing index: the A rows of raw
    `activations` (T, A, 6) in ACTIVATIONS.npz refer to these tets."""
    return np.flatnonzero(np.asarray(model["muscle_fraction"], dtype=np.float64).sum(axis=1) > 0.0)


def _muscle_weights(model):
    """Per-tet muscle shares normalised by the tet's muscle content, and that content Σf."""
    fraction = np.asarray(model["muscle_fraction"], dtype=np.float64)
    content = fraction.sum(axis=1)
    weights = np.divide(fraction, content[:, None], out=np.zeros_like(fraction), where=content[:, None] > 0.0)
    return weights, content


def tet_activations(model, muscle_contraction) -> np.ndarray:
    """Per-tet activation matrices (M, 3, 3) from one contraction γ per muscle (m,).

    A tet's muscles share its frame Q_i (`muscle_direction`), so blending their
    Q diag(γ⁻¹, √γ, √γ) Qᵀ by normalised fraction blends the diagonal entries: S_i =
    Q_i diag(Σ w γ⁻¹, Σ w √γ, Σ w √γ) Q_iᵀ. Passive tets (no muscle) get I exactly.
    """
    gamma = np.asarray(muscle_contraction, dtype=np.float64)
    muscle_count = len(model["muscle_names"])
    if gamma.shape != (muscle_count,):
        raise ValueError(f"muscle_contraction must have shape ({muscle_count},), one γ per model muscle; "
                         f"got {gamma.shape}")
    if np.any(~np.isfinite(gamma)) or np.any(gamma <= 0.0):
        raise ValueError("contraction γ must be finite and > 0 (1 = rest, > 1 contracts along the fibre)")
    weights, content = _muscle_weights(model)
    activations = _frame_diagonal(np.asarray(model["muscle_direction"], dtype=np.float64),
                                  weights @ (1.0 / gamma), weights @ np.sqrt(gamma))
    activations[content <= 0.0] = np.eye(3)
    return activations


def tet_activations_from_vectors(activation_vectors, active_tets, tet_count: int) -> np.ndarray:
    """Per-tet activation matrices (tet_count, 3, 3) from raw 6-vectors (A, 6) given for the
    tets `active_tets` (A,); every other tet gets I."""
    vectors = np.asarray(activation_vectors, dtype=np.float64)
    active_tets = np.asarray(active_tets, dtype=np.int64)
    if vectors.shape != (len(active_tets), 6):
        raise ValueError(f"activation vectors must have shape ({len(active_tets)}, 6), one per active tet; "
                         f"got {vectors.shape}")
    activations = np.tile(np.eye(3), (tet_count, 1, 1))
    activations[active_tets] = symmetric_from_vector(vectors)
    return activations


def apply_paralysis(activations, model, paralysed_muscles: Sequence[str] = (),
                    paralysis_per_tet: Optional[np.ndarray] = None) -> np.ndarray:
    """Pull activations toward I where muscles are paralysed: S ← (1 − p) S + p I (a new array).

    p combines two sources: the share of the tet's muscle content that belongs to
    `paralysed_muscles` (a tet wholly inside paralysed muscles becomes passive, one with none of
    them is unchanged) and a painted per-tet weight in [0, 1]. Both act as successive pulls,
    so p = 1 − (1 − p_muscles)(1 − p_painted).
    """
    activations = np.asarray(activations, dtype=np.float64)
    weights, _ = _muscle_weights(model)
    paralysis = weights[:, muscle_indices(model, paralysed_muscles)].sum(axis=1)
    if paralysis_per_tet is not None:
        painted = np.asarray(paralysis_per_tet, dtype=np.float64)
        if painted.shape != paralysis.shape:
            raise ValueError(f"paralysis_per_tet must have shape {paralysis.shape}, got {painted.shape}")
        if np.any(~np.isfinite(painted)) or np.any(painted < 0.0) or np.any(painted > 1.0):
            raise ValueError("paralysis_per_tet must lie in [0, 1]")
        paralysis = 1.0 - (1.0 - paralysis) * (1.0 - painted)
    p = np.clip(paralysis, 0.0, 1.0)[:, None, None]   # shares summed in float can exceed 1 by rounding
    return (1.0 - p) * activations + p * np.eye(3)


def bells_palsy_muscles(model, side: str) -> list:
    """All muscles of one side, `side` = "L" (the subject's left) or "R": the paralysed set of a
    one-sided facial palsy (paper 000 §8, Fig. 13-c)."""
    if side not in ("L", "R"):
        raise ValueError(f"side must be 'L' (subject's left) or 'R', got {side!r}")
    palsy = NUMBERS["presets"]["bells_palsy"]       # the suffixes the add-on's preset uses too
    suffix = palsy["left_suffix"] if side == "L" else palsy["right_suffix"]
    return [str(name) for name in model["muscle_names"] if str(name).endswith(suffix)]
