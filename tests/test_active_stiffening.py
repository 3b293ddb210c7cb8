"""The muscle's stiffening k(S) (solver/physics/active_stiffening.py): 1 and flat when relaxed,
STIFFENING_AT_FULL at full contraction, bounded, and the same in numba as in numpy."""
from __future__ import annotations

import numpy as np

from solver.physics.activation import contraction_matrix
from solver.physics.active_stiffening import (
    SATURATION_Q,
    STIFFENING_AT_FULL,
    STIFFENING_SLOPE,
    active_stiffening,
    stiffening_and_slope,
)


def _fibres(count, rng):
    frames, _ = np.linalg.qr(rng.standard_normal((count, 3, 3)))
    return frames


def test_relaxed_muscle_is_the_tissue_and_full_contraction_is_ten_times_stiffer():
    rng = np.random.default_rng(0)
    frames = _fibres(5, rng)
    assert np.allclose(active_stiffening(np.eye(3)[None]), 1.0)
    assert np.allclose(active_stiffening(contraction_matrix(frames, np.full(5, 2.0))), STIFFENING_AT_FULL)
    # flat at rest: a 1 % contraction changes k by well under 1 %
    assert np.all(active_stiffening(contraction_matrix(frames, np.full(5, 1.01))) < 1.01)
    # grows with the contraction and stays below its bound for any activation
    k = active_stiffening(contraction_matrix(frames[:1].repeat(6, 0), np.array([1.0, 1.2, 1.5, 2.0, 3.0, 4.0])))
    assert np.all(np.diff(k) > 0.0)
    wild = rng.standard_normal((100, 3, 3)) * 5.0
    wild = wild + wild.transpose(0, 2, 1)
    assert np.all(active_stiffening(wild) < 1.0 + STIFFENING_SLOPE * SATURATION_Q)


def test_numba_value_and_slope_match_numpy_and_finite_differences():
    rng = np.random.default_rng(1)
    for _ in range(10):
        S = rng.standard_normal((3, 3)) * 0.4
        S = np.eye(3) + S + S.T
        k, slope = stiffening_and_slope(S)
        assert np.isclose(k, active_stiffening(S[None])[0], rtol=1e-13)
        direction = rng.standard_normal((3, 3))
        direction = direction + direction.T
        step = 1e-6
        numeric = (active_stiffening((S + step * direction)[None])[0]
                   - active_stiffening((S - step * direction)[None])[0]) / (2 * step)
        assert np.isclose(numeric, np.sum(2.0 * slope * (S - np.eye(3)) * direction), rtol=1e-6)
