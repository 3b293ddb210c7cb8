"""The graded lattice (solver/model_builder/grading.py): a warp of the BCC lattice that is finer
around the mouth. Pure geometry, no model build."""
from __future__ import annotations

import numpy as np
import pytest

from solver.model_builder.grading import RadialGrading
from solver.model_builder.tetmesh import bcc_lattice, signed_volumes, tet_quality

GRADING = RadialGrading(centre=np.array([0.0, 0.004, 0.011]), radii=np.array([0.07, 0.045, 0.04]),
                        fine_factor=0.45)


def _points(count=2000, spread=0.08, seed=3):
    return np.random.default_rng(seed).normal(size=(count, 3)) * spread


def _jacobian(grading, point, step=1e-7):
    return np.stack([(grading.map(point + e * step) - grading.map(point - e * step)) / (2 * step)
                     for e in np.eye(3)], axis=1)


def test_inverse_undoes_the_map():
    u = _points()
    np.testing.assert_allclose(GRADING.inverse(GRADING.map(u)), u, atol=1e-12)


def test_the_lattice_is_finer_at_the_centre_and_hardly_coarser_anywhere():
    """Along an elliptic zone's oblique rays the stretch can pass 1 by a few per cent (1 exactly
    for a round zone)."""
    singular = np.array([np.linalg.svd(_jacobian(GRADING, p), compute_uv=False) for p in _points(400)])
    assert singular.max() <= 1.05
    centre = np.linalg.svd(_jacobian(GRADING, GRADING.centre + 1e-5), compute_uv=False)
    np.testing.assert_allclose(centre, 0.45, rtol=1e-3)
    far = np.linalg.svd(_jacobian(GRADING, GRADING.centre + np.array([0.0, 0.0, 0.5])), compute_uv=False)
    assert far.min() > 0.9


def test_spacing_factor_is_the_largest_stretch():
    """The mesher sizes its distance thresholds by it; it must not undershoot the real stretch."""
    for p in _points(300, seed=5):
        largest = np.linalg.svd(_jacobian(GRADING, p), compute_uv=False)[0]
        assert GRADING.spacing_factor(p) == pytest.approx(largest, rel=0.1)


def test_warped_tets_keep_their_shape_and_orientation():
    nodes, tets = bcc_lattice(np.array([-0.1, -0.1, -0.08]), np.array([0.1, 0.1, 0.1]), 0.01)
    warped = GRADING.map(nodes)
    assert (signed_volumes(warped, tets) > 0).all()
    assert tet_quality(warped, tets).min() > 0.45        # BCC tets score ≈ 0.8 unwarped


def test_the_warp_is_its_own_mirror_image():
    u = _points()
    mirror = np.array([-1.0, 1.0, 1.0])
    np.testing.assert_allclose(GRADING.map(u * mirror), GRADING.map(u) * mirror, atol=1e-15)


def test_covering_box_covers_the_target_box():
    low, high = np.array([-0.12, -0.16, -0.19]), np.array([0.12, 0.18, 0.03])
    lattice_low, lattice_high = GRADING.covering_box(low, high)
    rng = np.random.default_rng(9)
    targets = low + rng.random((5000, 3)) * (high - low)
    u = GRADING.inverse(targets)
    assert ((u >= lattice_low) & (u <= lattice_high)).all()
