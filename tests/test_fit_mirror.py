"""Mirrored starts of the fit (solver/inverse/mirror.py): the reflection of one shape's fit is the
first guess of its mirror partner.

The reflection is checked against the physics (the equilibrium of mirrored activations and jaw
is the mirror image of the original one) and the scheduling against what it promises (the later
shape of a pair starts from its partner's fit, whatever the number of processes)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial import cKDTree

from solver.inverse.fit import ShapeFitter
from solver.inverse.mirror import ModelMirror, mirror_partner
from solver.inverse.regularizers import MuscleMembership, neutral_activations
from solver.inverse.shapes import describe_start, face_region, fit_shapes, kept_fits, mirror_sources
from solver.physics.bones import jaw_transform

MM = 1e-3


@pytest.fixture(scope="module")
def mirror(small_demo_model):
    found = ModelMirror.from_model(small_demo_model)
    assert found is not None, "the demo head is symmetric; its model should mirror onto itself"
    return found


def _world_reflection(model):
    frame = np.asarray(model["jaw_frame"])
    normal, origin = frame[:3, 0], frame[:3, 3]
    reflection = np.eye(4)
    reflection[:3, :3] -= 2.0 * np.outer(normal, normal)
    reflection[:3, 3] = 2.0 * normal * (normal @ origin)
    return reflection


def test_mirrored_shape_names():
    names = ["mouthSmile_L", "mouthSmile_R", "jawLeft", "jawRight", "mouthLeft", "mouthRight", "eyeLookIn_L",
             "eyeLookIn_R", "browInnerUp", "cheekPuff", "noseSneer_L"]
    assert mirror_partner("mouthSmile_L", names) == "mouthSmile_R"
    assert mirror_partner("mouthSmile_R", names) == "mouthSmile_L"
    assert mirror_partner("jawRight", names) == "jawLeft"
    assert mirror_partner("mouthLeft", names) == "mouthRight"
    assert mirror_partner("eyeLookIn_R", names) == "eyeLookIn_L"
    assert mirror_partner("browInnerUp", names) is None
    assert mirror_partner("noseSneer_L", names) is None          # its partner is not in the rig
    # only the later shape of a pair waits, and only when the model mirrors
    assert mirror_sources(names, True) == {"mouthSmile_R": "mouthSmile_L", "jawRight": "jawLeft",
                                           "mouthRight": "mouthLeft", "eyeLookIn_R": "eyeLookIn_L"}
    assert mirror_sources(names, False) == {}
    assert mirror_sources(["noseSneer_R", "browInnerUp"], True, earlier=["noseSneer_L"]) \
        == {"noseSneer_R": "noseSneer_L"}
    assert describe_start("mirror:mouthSmile_L") == ", started from the mirror of mouthSmile_L"
    assert describe_start("neutral") == ""


def test_the_small_demo_model_mirrors_onto_itself(small_demo_model, mirror):
    partner = mirror.partner_of_active_tet
    matched = np.flatnonzero(partner >= 0)
    assert mirror.matched_share > 0.95
    # a reflection is an involution: the mirror of a tet's mirror is the tet itself
    assert np.mean(partner[partner[matched]] == matched) > 0.95
    assert np.allclose(mirror.reflection @ mirror.reflection, np.eye(3))


def test_an_asymmetric_model_has_no_mirror(small_demo_model):
    model = dict(small_demo_model)
    positions = np.array(small_demo_model["rest_positions"], dtype=np.float64)
    positions[:, 0] += 0.3 * np.maximum(positions[:, 0], 0.0)      # the left half stretched sideways
    model["rest_positions"] = positions
    assert ModelMirror.from_model(model) is None


def test_mirrored_jaw_parameters_give_the_reflected_jaw_transform(small_demo_model, mirror):
    reflection = _world_reflection(small_demo_model)
    frame = np.asarray(small_demo_model["jaw_frame"])
    for b in ([0.2, 0.05, 0.002, -0.003, 0.004], [0.0, -0.1, -0.004, 0.0, 0.001]):
        reflected = reflection @ jaw_transform(frame, np.array(b)) @ reflection
        assert np.allclose(jaw_transform(frame, mirror.jaw(b)), reflected, atol=1e-12)
        assert np.allclose(mirror.jaw(mirror.jaw(b)), b)


def test_mirrored_activations_and_jaw_give_the_mirror_image_of_the_equilibrium(small_demo_model, demo_rig, mirror):
    """A one-sided contraction with a turned jaw, and its reflection: the two skins are mirror
    images up to the mesh's own asymmetry (a few nodes snapped to the skin). Dropping the sign
    flip of the off-diagonal xz and xy entries would break this."""
    model = small_demo_model
    membership = MuscleMembership.from_model(model)
    region, _ = face_region(model, demo_rig)
    fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region)
    rng = np.random.default_rng(7)
    activations = neutral_activations(membership.active_count)
    centroids = np.asarray(model["rest_positions"])[np.asarray(model["tets"])[membership.tets]].mean(axis=1)
    left = centroids[:, 0] > 0.01
    activations[left] += rng.uniform(-0.15, 0.15, (left.sum(), 6))
    jaw = np.array([0.12, 0.06, 0.002, 0.0, 0.001])
    original = fitter.face.solve(activations, jaw, start=fitter.rest_state.x)
    mirrored = fitter.face.solve(mirror.activations(activations), mirror.jaw(jaw), start=fitter.rest_state.x)
    assert original.converged and mirrored.converged
    reflection = _world_reflection(model)
    rest_skin = np.asarray(model["skin_vertices"])
    _, partner = cKDTree(rest_skin).query(rest_skin @ reflection[:3, :3].T + reflection[:3, 3])
    reflected = original.skin @ reflection[:3, :3].T + reflection[:3, 3]
    motion = np.linalg.norm(original.skin - rest_skin, axis=1)
    mismatch = np.linalg.norm(mirrored.skin[partner] - reflected, axis=1)
    assert motion[region].max() > 3 * MM
    assert np.median(mismatch[region]) < 0.02 * motion[region].max()
    assert np.percentile(mismatch[region], 95) < 0.1 * motion[region].max()


def test_a_guess_that_fits_worse_than_the_neutral_face_is_not_used(small_demo_model, demo_rig):
    model = small_demo_model
    region, _ = face_region(model, demo_rig)
    fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region)
    names = list(demo_rig.shape_key_names)
    delta = demo_rig.shape_key_deltas[names.index("browInnerUp")]
    wrong = (neutral_activations(fitter.membership.active_count), np.array([0.25, 0.0, 0.0, 0.0, 0.0]))
    assert fitter.fit("browInnerUp", delta, start=wrong).started_from == "neutral"


@pytest.fixture(scope="module")
def smile_pair(small_demo_model, demo_rig):
    return fit_shapes(small_demo_model, demo_rig, ["mouthSmile_L", "mouthSmile_R"], jobs=1)


def test_the_later_shape_of_a_pair_starts_from_its_partners_reflected_fit(small_demo_model, demo_rig, smile_pair):
    """Whatever the number of processes, mouthSmile_R waits for mouthSmile_L and starts from its
    reflection; the mirrored start needs fewer iterations and fits as well."""
    one = smile_pair
    two = fit_shapes(small_demo_model, demo_rig, ["mouthSmile_L", "mouthSmile_R"], jobs=2)
    for arrays in (one, two):
        assert list(arrays["fit_start"]) == ["neutral", "mirror:mouthSmile_L"]
        assert arrays["iterations"][1] < arrays["iterations"][0]
        left_error, right_error = arrays["fit_error_mm"][:, 0]
        assert right_error < left_error + 0.05, arrays["fit_error_mm"]
    # A worker's forward solves are preconditioned by the factor of its last solve, so each trial
    # equilibrium agrees only to the Newton tolerance and the fits' paths drift apart a little:
    # the mean and 95th percentile within 0.01 mm, the one worst vertex within 0.05 mm (measured
    # 0.012 mm on mouthSmile_L).
    assert np.allclose(one["fit_error_mm"][:, :2], two["fit_error_mm"][:, :2], atol=0.01)
    assert np.allclose(one["fit_error_mm"][:, 2], two["fit_error_mm"][:, 2], atol=0.05)


def test_refitting_one_shape_of_a_pair_starts_from_the_kept_partner(small_demo_model, demo_rig, smile_pair):
    """An artist re-fits mouthSmile_R alone, keeping an earlier fit (the fit job's previous_fit):
    it starts from the reflection of the kept mouthSmile_L."""
    again = fit_shapes(small_demo_model, demo_rig, ["mouthSmile_R"], earlier_fits=kept_fits(smile_pair))
    assert list(again["fit_start"]) == ["mirror:mouthSmile_L"]
    assert again["fit_error_mm"][0, 0] == pytest.approx(smile_pair["fit_error_mm"][1, 0], abs=0.02)
    alone = fit_shapes(small_demo_model, demo_rig, ["mouthSmile_R"])
    assert list(alone["fit_start"]) == ["neutral"]
