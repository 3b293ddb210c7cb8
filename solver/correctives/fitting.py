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


def fit_terms(neutral, deltas, keys, term_names, weights, skins):
    """Least squares of Eq. 11 in the basis above. `deltas` (K, V, 3) the rig's deltas of `keys`,
    `weights` (S, K), `skins` (S, V, 3) the simulated samples. Returns terms (N, V, 3) and the
    design matrix's rank and column count."""
    from .corr_file import term_coefficients
    neutral = np.asarray(neutral, dtype=np.float64)
    design = term_coefficients(term_names, keys, weights)                       # (S, N)
    linear = neutral + np.tensordot(weights, deltas, axes=1)                   # (S, V, 3)
    targets = (np.asarray(skins, dtype=np.float64) - linear).reshape(len(weights), -1)
    terms, _, rank, _ = np.linalg.lstsq(design, targets, rcond=None)
    return terms.reshape(len(term_names), *neutral.shape), int(rank), design.shape[1]


def sample_errors_mm(neutral, deltas, keys, term_names, terms, weights, skins):
    """(corrected, linear) (S,): per sample the largest distance (mm) of the corrected rig, and of
    the plain linear rig, from the simulated skin."""
    from .corr_file import term_coefficients
    linear = np.asarray(neutral) + np.tensordot(weights, deltas, axes=1)
    corrected = linear + np.tensordot(term_coefficients(term_names, keys, weights), terms, axes=1)
    distance = lambda rig: 1e3 * np.linalg.norm(rig - skins, axis=2).max(axis=1)   # noqa: E731
    return distance(corrected), distance(linear)
