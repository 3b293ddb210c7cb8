"""The measuring of issue 42's acceptance (bench/correctives_acceptance.py's `measure`) on the small
demo head: skins displaced from the linear rig by known amounts give exactly those distances over
the face region, and lips in teeth agree with a count made directly from the teeth colliders'
detection. (The measuring approach from helper D's branch corr-acceptance, ae75fd7.)"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.correctives_acceptance import animation_weights, measure  # noqa: E402
from solver.collisions.contacts import BonePose  # noqa: E402
from solver.collisions.scene import CollisionScene  # noqa: E402
from solver.collisions.teeth import TeethCollider  # noqa: E402
from solver.inverse.shapes import face_region  # noqa: E402

pytestmark = pytest.mark.slow       # builds the demo model (about a minute)

KEYS = ["jawOpen", "mouthSmile_L"]


def _lips_in_teeth_directly(model, skin) -> int:
    scene = CollisionScene(model, teeth=True, lips=False, teeth_shadow=False)
    found = scene.detect(skin, BonePose(np.eye(4), np.eye(4), 0))
    teeth = [index for index, collider in enumerate(scene.colliders) if isinstance(collider, TeethCollider)]
    return len({int(vertex) for vertex, collider, depth in zip(found.vertex, found.collider, found.depth)
                if collider in teeth and depth > 1e-4})


def test_the_acceptance_measures_known_displacements_and_counts_lips_in_teeth_as_detection_does(
        small_demo_model, demo_rig):
    model, rig = small_demo_model, demo_rig
    names = [str(name) for name in rig.shape_key_names]
    weights = animation_weights(KEYS, 4, seed=1)
    assert weights.shape == (4, 2) and np.all(weights[0] == 0) and 0 <= weights.min() <= weights.max() <= 1
    neutral, deltas = np.asarray(rig.vertices, float), np.asarray(rig.shape_key_deltas, float)
    linear = neutral + np.tensordot(weights, deltas[[names.index(key) for key in KEYS]], axes=1)
    face, _ = face_region(model, rig)
    # The simulated skin: the linear rig moved back 2 mm (+ 1 mm a frame) everywhere, so lips go
    # into the teeth; the corrected rig: the simulated skin moved 0.5 mm a frame along x.
    back = -np.asarray(model["head_frame"], dtype=float)[2]
    back /= np.linalg.norm(back)
    simulated = linear + back * (0.002 + 0.001 * np.arange(4))[:, None, None]
    corrected = simulated + np.array([1.0, 0.0, 0.0]) * (0.0005 * np.arange(4))[:, None, None]
    poses = np.tile(np.eye(4), (4, 1, 1))
    rows = measure(model, rig, KEYS, weights, {"skin_positions": simulated, "skull_transforms": poses,
                                               "jaw_transforms": poses}, corrected, face)
    np.testing.assert_allclose(rows["corrected_mean_mm"], 0.5 * np.arange(4), atol=1e-9)
    np.testing.assert_allclose(rows["corrected_max_mm"], 0.5 * np.arange(4), atol=1e-9)
    np.testing.assert_allclose(rows["linear_mean_mm"], 2.0 + np.arange(4), atol=1e-6)
    np.testing.assert_allclose(rows["linear_max_mm"], 2.0 + np.arange(4), atol=1e-6)
    for label, skins in (("simulated", simulated), ("corrected", corrected), ("linear", linear)):
        assert rows[f"{label}_lips_in_teeth"] == [_lips_in_teeth_directly(model, skin) for skin in skins]
    assert sum(rows["simulated_lips_in_teeth"]) > sum(rows["linear_lips_in_teeth"])     # moved back: deeper
