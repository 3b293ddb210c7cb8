"""Pair pruning and the least-squares fit of the corrective terms (paper 002 Eq. 11).

Basis. Eq. 11 fits a mean m, linear shapes u_i and quadratic shapes v_ij (i, j over all keys, so
i = j included) to the simulated skins p_k. Here the mean is fixed to the rig's neutral and the
linear shapes are written as the user's own deltas plus a correction, u_a = Δ_a + c_a, so the
fitted unknowns are the residual of the plain linear rig

    p_k − (neutral + Σ_a w_ka Δ_a)  ≈  Σ_a w_ka c_a  +  Σ_a w_ka² q_aa  +  Σ_(a,b) kept w_ka w_kb q_ab

Why: the corrected rig must stay the user's rig plus extra shape keys (their basis and keys are
never changed, and at w = 0 it is exactly their neutral: the simulation of the neutral is the
neutral up to the solver's tolerance); q_aa is Eq. 11's i = j term, which the four single-key
samples per key (w_a = 0.25 … 1) determine together with c_a, and which carries what a key does
non-linearly by itself (a lip rolling over the teeth only past half the key); q_ab only for the
pairs the probe keeps. One least-squares problem over all samples and all 3V coordinates at once
(the design matrix has a column per term and is shared by every coordinate).

Ridge. The coefficients w and w² of c_a and q_aa (and the pair products) are nearly collinear
over samples at 0.25 … 1, so plain least squares fits each sample's small departures from the
basis with large opposing terms, which then extrapolate badly between samples. The fit adds
λ ‖terms‖², λ = α · mean diag(DᵀD) (relative, so α means the same at any sample count), with α
chosen from RIDGE_GRID by cross-validation over *chains* (each chain left out in turn): the rig
is judged on poses of a kind it was not fitted to, which is what an animation asks of it. ICT
acceptance animation (5 keys): fitted to the 180 pair samples, 42 % nearer the simulation than
the linear rig without the ridge, 46 % with it; with 10 combination rays added, 49 % and 50 %
(docs/correctives.md).

Pruning (first order): a pair (a, b) is kept when its simulated skin at (1, 1) differs from the
sum of the simulated singles, p_a(1) + p_b(1) − neutral, by more than the threshold at some
vertex. Below it the pair's own corrective would be smaller than the threshold everywhere at
(1, 1), where w_a·w_b is largest.
"""
from __future__ import annotations

import numpy as np

DEFAULT_THRESHOLD_MM = 0.5


def probe_deviation_mm(neutral, single_at_full: dict, probe_skin: np.ndarray, first: str, second: str) -> float:
    """Largest distance (mm) of the simulated pair at (1, 1) from the sum of its simulated singles."""
    additive = single_at_full[first] + single_at_full[second] - neutral
    return 1e3 * float(np.linalg.norm(probe_skin - additive, axis=1).max())


def term_names_for(keys, kept_pairs) -> np.ndarray:
    """(N, 2) str: (a, '') then (a, a) for every key, then (a, b) for every kept pair."""
    rows = [(key, "") for key in keys] + [(key, key) for key in keys] + [tuple(pair) for pair in kept_pairs]
    return np.array(rows, dtype=str).reshape(len(rows), 2)


RIDGE_GRID = (0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)
CV_COORDINATES = 3000       # the coordinates α is judged on (a seeded subset: α is one scalar)


def _design_and_targets(neutral, deltas, keys, term_names, weights, skins):
    from .corr_file import term_coefficients
    neutral = np.asarray(neutral, dtype=np.float64)
    design = term_coefficients(term_names, keys, weights)                       # (S, N)
    linear = neutral + np.tensordot(weights, deltas, axes=1)                   # (S, V, 3)
    return design, (np.asarray(skins, dtype=np.float64) - linear).reshape(len(weights), -1)


def _regularised(normal, alpha: float):
    """DᵀD + λI with the relative ridge λ = α · mean diag(DᵀD)."""
    scale = float(np.mean(np.diag(normal))) or 1.0
    return normal + alpha * scale * np.eye(len(normal))


def _ridge_solve(design, targets, alpha: float):
    if alpha == 0.0:
        return np.linalg.lstsq(design, targets, rcond=None)[0]
    return np.linalg.solve(_regularised(design.T @ design, alpha), design.T @ targets)


def fit_terms(neutral, deltas, keys, term_names, weights, skins, ridge: float = 0.0):
    """Least squares of Eq. 11 in the basis above, with the relative ridge α = `ridge`.
    `deltas` (K, V, 3) the rig's deltas of `keys`, `weights` (S, K), `skins` (S, V, 3) the
    simulated samples. Returns terms (N, V, 3) and the design matrix's rank and column count."""
    design, targets = _design_and_targets(neutral, deltas, keys, term_names, weights, skins)
    terms = _ridge_solve(design, targets, float(ridge))
    return terms.reshape(len(term_names), *np.shape(neutral)), int(np.linalg.matrix_rank(design)), design.shape[1]


def choose_ridge(neutral, deltas, keys, term_names, weights, skins, chain_index) -> tuple:
    """(α, per-α mean vertex distance in mm (len(RIDGE_GRID),) of each chain's samples to the fit
    made without that chain): the α of RIDGE_GRID whose leave-one-chain-out fits come nearest.
    `chain_index` (S,): the chain of each sample. Exact and deterministic, and one fit per α: with
    A = DᵀD + λI and R the full fit's residuals, the residuals of chain g's samples under the fit
    without g are (I − D_g A⁻¹ D_gᵀ)⁻¹ R_g. A chain whose leaving out leaves a term undetermined
    (I − H_gg singular, only at α = 0) makes that α's error infinite."""
    design, targets = _design_and_targets(neutral, deltas, keys, term_names, weights, skins)
    chain_index = np.asarray(chain_index)
    vertices = targets.shape[1] // 3
    rng = np.random.default_rng(0)
    chosen = np.sort(rng.choice(vertices, min(vertices, CV_COORDINATES // 3), replace=False))
    targets = targets.reshape(len(targets), vertices, 3)[:, chosen].reshape(len(targets), -1)
    chains = [np.flatnonzero(chain_index == chain) for chain in np.unique(chain_index)]
    errors = np.zeros(len(RIDGE_GRID))
    if len(chains) < 2:
        return 0.0, errors
    normal = design.T @ design
    for index, alpha in enumerate(RIDGE_GRID):
        inverse = np.linalg.pinv(_regularised(normal, alpha), hermitian=True)
        residual = targets - design @ (inverse @ (design.T @ targets))
        total = 0.0
        for rows in chains:
            block = np.eye(len(rows)) - design[rows] @ inverse @ design[rows].T
            if np.linalg.cond(block) > 1e10:
                total = np.inf
                break
            left_out = np.linalg.solve(block, residual[rows]).reshape(len(rows), -1, 3)
            total += np.linalg.norm(left_out, axis=2).sum()
        errors[index] = total * 1e3 / (len(weights) * len(chosen))
    return float(RIDGE_GRID[int(np.argmin(errors))]), errors


def sample_errors_mm(neutral, deltas, keys, term_names, terms, weights, skins):
    """(corrected, linear) (S,): per sample the largest distance (mm) of the corrected rig, and of
    the plain linear rig, from the simulated skin."""
    from .corr_file import term_coefficients
    linear = np.asarray(neutral) + np.tensordot(weights, deltas, axes=1)
    corrected = linear + np.tensordot(term_coefficients(term_names, keys, weights), terms, axes=1)
    distance = lambda rig: 1e3 * np.linalg.norm(rig - skins, axis=2).max(axis=1)   # noqa: E731
    return distance(corrected), distance(linear)
