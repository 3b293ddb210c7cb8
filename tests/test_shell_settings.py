"""The shell's parameters (paper 001 Tables 3–4) and the face height that makes them unitless."""
from __future__ import annotations

import numpy as np
import pytest

from solver.shell.scale import face_height
from solver.shell.settings import ShellSettings


def test_defaults_are_the_papers_tables():
    settings = ShellSettings()
    assert (settings.reproducibility, settings.max_pressure, settings.barrier, settings.smoothness) == \
        (1e-2, 1e2, 0.002, 5e-7)
    assert (settings.time_step_s, settings.substep_s, settings.density, settings.damping, settings.thin_depth) == \
        (0.01, 0.002, 0.1, 0.01, 0.05)
    assert ShellSettings.from_dict(settings.as_dict()) == settings


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="density"):
        ShellSettings(density=0.0)
    with pytest.raises(ValueError, match="unknown names"):
        ShellSettings.from_dict({"densty": 1.0})
    with pytest.raises(ValueError, match="substep_s"):
        ShellSettings(substep_s=0.1)
    with pytest.raises(ValueError, match="warp_smoothing must be zero or positive"):
        ShellSettings(warp_smoothing=-0.5)
    assert ShellSettings(warp_smoothing=0.0).warp_smoothing == 0.0      # 0: the plain barycentric warp


def test_face_height_counts_the_moving_skin_only():
    rng = np.random.default_rng(0)
    face = rng.uniform([0, 0, 0], [0.15, 0.2, 0.1], (200, 3))
    neck = rng.uniform([0, -0.3, 0], [0.15, 0.0, 0.1], (100, 3))
    vertices = np.concatenate([face, neck])
    deltas = np.zeros((2, 300, 3))
    deltas[0, :200, 2] = 0.004
    deltas[1, 50:150, 1] = -0.01
    assert face_height(vertices, deltas) == pytest.approx(np.ptp(face, axis=0).max())
    assert face_height(vertices, np.zeros((0, 300, 3))) == pytest.approx(np.ptp(vertices, axis=0).max())
