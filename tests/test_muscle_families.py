"""Issue 37: muscles that move like their names — the direction of each muscle family alone.

Each family is contracted alone at full contraction (γ = 2: the fibre shortened to half, the
smallest eigenvalue inverse physics lets an activation reach) on a demo model of MODEL_TETS
(7,527 tets), solved quasi-statically from rest without gravity, with the muscles stiffening as
they contract (physics/active_stiffening.py), and the motion of its landmark is read in the head
frame (rows left, up, forward; `model_head_axes`). How far each moves against the rig's own key,
on the ICT face, is bench/muscles.py's figure (docs/performance.md).

Measured on this model (mm, left / up / forward):
* smile, zygomaticus_major_L: mouth corner +0.49 / +1.68 / −0.09 (up, and 0.33 mm toward the ear);
* frown, depressor_anguli_oris_L: mouth corner +0.29 / −1.29 / −1.73 (down and back; ICT's
  mouthFrown_L key also moves the corner back, by 0.4 of its drop);
* brow raise, frontalis_L: the left brow (skin within 5 mm of the brow_inner_L–brow_outer_L
  segment, 17 vertices) −0.38 / +4.60 / −1.12 on average;
* pucker, orbicularis_oris_L + _R: mouth width −9.23 mm (corners 47.5 mm apart), the lips (skin
  in front of the corners, within 8 mm of their height and 20 mm of the midline, 232 vertices)
  +3.50 mm forward (and 0.44 mm down) on average. On the 3,065-tet model the lip ring is one tet
  thick and the contracted ring rolls the lips down and 0.16 mm back.
"""
from __future__ import annotations

import numpy as np
import pytest

from solver.model_builder.builder import BuildOptions, build_model
from solver.model_file import model_head_axes, model_landmarks
from solver.physics.activation import muscle_indices, tet_activations
from solver.physics.simulator import FaceSimulator, SimulationSettings

FULL_CONTRACTION = 2.0
# At 3,000 tets the lip ring is one tet thick and the contracted orbicularis rolls the lips down
# and back; from about 5,000 it pushes them forward (module docstring).
MODEL_TETS = 7000
MM = 1e3
# Far above the solver's error (force residual 1e-5 of the driving forces: micrometres) and
# below every motion measured here.
CLEAR_MOTION = 0.1e-3
BROW_BAND = 5e-3
LIP_HEIGHT, LIP_HALF_WIDTH = 8e-3, 20e-3


@pytest.fixture(scope="module")
def muscle_model(demo_rig):
    return build_model(demo_rig, BuildOptions(target_tets=MODEL_TETS))


@pytest.fixture(scope="module")
def simulator(muscle_model):
    return FaceSimulator(muscle_model, SimulationSettings())


def contract_alone(simulator, muscles, gamma=FULL_CONTRACTION) -> np.ndarray:
    """Skin displacement (V, 3) of these muscles alone at γ, from rest."""
    model = simulator.model
    simulator.return_to_rest()
    rest = simulator.skin_positions()
    contraction = np.ones(len(model["muscle_names"]))
    contraction[muscle_indices(model, muscles)] = gamma
    frame = simulator.step(tet_activations(model, contraction))
    assert frame.converged, frame.reason
    return simulator.skin_positions() - rest


def landmark_vertex(model, name) -> int:
    return int(np.argmin(np.linalg.norm(model["skin_vertices"] - model_landmarks(model)[name], axis=1)))


def head_frame(model, vector) -> np.ndarray:
    """(left, up, forward) components of a world vector."""
    return model_head_axes(model) @ vector


def describe(components) -> str:
    left, up, forward = np.asarray(components) * MM
    return f"left {left:+.2f}, up {up:+.2f}, forward {forward:+.2f} mm"


def test_zygomaticus_major_lifts_the_mouth_corner_toward_the_ear(muscle_model, simulator):
    """Smile: the corner goes up, and its motion in the horizontal plane has a component toward the
    left ear (the direction from the corner to the left condyle, which sits in front of the ear)."""
    model = muscle_model
    corner = landmark_vertex(model, "mouth_corner_L")
    moved = head_frame(model, contract_alone(simulator, ["zygomaticus_major_L"])[corner])
    to_ear = head_frame(model, model["condyles"][0] - model["skin_vertices"][corner])
    to_ear[1] = 0.0
    toward_ear = moved @ to_ear / np.linalg.norm(to_ear)
    report = f"mouth corner {describe(moved)}; toward the ear {toward_ear * MM:+.2f} mm"
    assert moved[1] > CLEAR_MOTION, report
    assert toward_ear > CLEAR_MOTION, report


def test_depressor_anguli_oris_pulls_the_mouth_corner_down(muscle_model, simulator):
    model = muscle_model
    corner = landmark_vertex(model, "mouth_corner_L")
    moved = head_frame(model, contract_alone(simulator, ["depressor_anguli_oris_L"])[corner])
    report = f"mouth corner {describe(moved)}"
    assert moved[1] < -CLEAR_MOTION, report
    # down, not sideways (it also goes back, as the rig's mouthFrown_L key does on ICT)
    assert abs(moved[1]) > abs(moved[0]), "the corner moves more sideways than down: " + report


def test_frontalis_raises_the_brow(muscle_model, simulator):
    """The left brow: the skin within BROW_BAND of the segment from brow_inner_L to brow_outer_L,
    on average; it goes up, more than it moves any other way."""
    model = muscle_model
    landmarks = model_landmarks(model)
    inner, outer = landmarks["brow_inner_L"], landmarks["brow_outer_L"]
    skin = np.asarray(model["skin_vertices"])
    along = np.clip((skin - inner) @ (outer - inner) / np.sum((outer - inner) ** 2), 0.0, 1.0)
    brow = np.linalg.norm(skin - inner - along[:, None] * (outer - inner), axis=1) < BROW_BAND
    assert brow.sum() >= 5, f"only {brow.sum()} skin vertices along the left brow"
    moved = head_frame(model, contract_alone(simulator, ["frontalis_L"])[brow].mean(axis=0))
    report = f"left brow ({brow.sum()} vertices) {describe(moved)}"
    assert moved[1] > CLEAR_MOTION, report
    assert np.argmax(np.abs(moved)) == 1, "the brow moves more sideways or forward than up: " + report


def test_orbicularis_oris_narrows_the_mouth_and_pushes_the_lips_forward(muscle_model, simulator):
    """Pucker (the whole ring, both halves): the mouth corners come closer together and the lips —
    the skin in front of the corners, within LIP_HEIGHT of their height and LIP_HALF_WIDTH of
    the midline — move forward on average."""
    model = muscle_model
    left, right = landmark_vertex(model, "mouth_corner_L"), landmark_vertex(model, "mouth_corner_R")
    skin = np.asarray(model["skin_vertices"])
    local = (skin - 0.5 * (skin[left] + skin[right])) @ model_head_axes(model).T
    lips = (np.abs(local[:, 0]) < LIP_HALF_WIDTH) & (np.abs(local[:, 1]) < LIP_HEIGHT) & (local[:, 2] > 0.0)
    assert lips.sum() >= 20, f"only {lips.sum()} lip vertices"
    moved = contract_alone(simulator, ["orbicularis_oris_L", "orbicularis_oris_R"])
    width = np.linalg.norm(skin[left] - skin[right])
    narrowing = width - np.linalg.norm(skin[left] + moved[left] - skin[right] - moved[right])
    lip_motion = head_frame(model, moved[lips].mean(axis=0))
    report = (f"mouth {narrowing * MM:+.2f} mm narrower (of {width * MM:.1f} mm); lips ({lips.sum()} vertices) "
              f"{describe(lip_motion)}")
    assert narrowing > CLEAR_MOTION, report
    assert lip_motion[2] > CLEAR_MOTION, report
