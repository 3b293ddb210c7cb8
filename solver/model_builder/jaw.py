"""The 5-DoF jaw joint (paper 000 §3): condyles, hinge axis, jaw frame, and which skin
follows the jaw.

The hinge (x) axis passes through the centres of the two mandibular condyles; the
vertical (y) axis is perpendicular to it through their midpoint; the jaw may also
translate slightly, which gives b ∈ R⁵ (2 rotations + 3 translations).

Artists' jawOpen shapes are rarely rigid (ICT's chin skin deforms by ~1 cm), so a
rigid fit gives a trustworthy axis *direction* and opening angle but not a reliable
hinge *location*. The condyles are therefore placed from average adult proportions
relative to the eyes (just in front of the ear, below the Frankfort plane), scaled
by the face size, unless a supplied jaw mesh or supplied landmarks say otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Condyle centre relative to the eye centre, in metres for an average adult face, in
# head-frame axes (left, up, forward): the lateral offset is half the intercondylar
# distance, the vertical and backward offsets put it ~1 cm under the ear canal and
# ~1.2 cm in front of it.
CONDYLE_FROM_EYE = np.array([0.016, -0.035, -0.068])


@dataclass
class JawModel:
    condyles: np.ndarray        # (2,3) left, right condyle centres (world)
    frame: np.ndarray           # (4,4) jaw frame → world: columns hinge axis, up, forward, origin
    skin_weight: np.ndarray     # (V,) 0 = moves with the skull, 1 = moves with the jaw (from jawOpen)
    open_angle_deg: float       # opening angle of the jawOpen shape key (rigid fit), 0 if none
    axis_fit_deviation_deg: float
    method: str


def _rigid_fit(rest, moved):
    rest_centre, moved_centre = rest.mean(0), moved.mean(0)
    u, _, vt = np.linalg.svd((rest - rest_centre).T @ (moved - moved_centre))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rotation = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    return rotation, moved_centre - rotation @ rest_centre


def _rotation_axis_angle(rotation):
    angle = np.arccos(np.clip((np.trace(rotation) - 1) / 2, -1, 1))
    axis = np.array([rotation[2, 1] - rotation[1, 2], rotation[0, 2] - rotation[2, 0],
                     rotation[1, 0] - rotation[0, 1]])
    norm = np.linalg.norm(axis)
    return (axis / norm if norm > 1e-12 else np.zeros(3)), np.degrees(angle)


def build_jaw(rig, landmarks, skin_field=None) -> JawModel:
    frame = landmarks.frame
    vertices = rig.vertices
    eyes = {side: frame.local(landmarks.position[f"eye_{side}"][None])[0] for side in "LR"}
    condyles_local = []
    for side, sign in (("L", 1.0), ("R", -1.0)):
        offset = CONDYLE_FROM_EYE * landmarks.scale * np.array([sign, 1.0, 1.0])
        condyles_local.append(eyes[side] + offset)
    condyles = frame.world(np.array(condyles_local))
    method = "condyles from adult proportions relative to the eyes"
    if rig.jaw_vertices is not None:
        # A supplied mandible: its condyles are its highest points behind the teeth, per side.
        jaw_local = frame.local(rig.jaw_vertices)
        behind = jaw_local[:, 2] < np.percentile(jaw_local[:, 2], 30)
        for i, sign in enumerate((1.0, -1.0)):
            side = behind & (sign * jaw_local[:, 0] > 0)
            if side.sum() >= 3:
                top = side & (jaw_local[:, 1] >= np.percentile(jaw_local[side, 1], 95))
                condyles[i] = rig.jaw_vertices[top].mean(0)
        method = "condyles from the supplied jaw mesh"

    hinge = condyles[0] - condyles[1]
    hinge /= np.linalg.norm(hinge)
    up = frame.up - hinge * (hinge @ frame.up)
    up /= np.linalg.norm(up)
    forward = np.cross(hinge, up)
    origin = condyles.mean(0)
    jaw_frame = np.eye(4)
    jaw_frame[:3, 0], jaw_frame[:3, 1], jaw_frame[:3, 2], jaw_frame[:3, 3] = hinge, up, forward, origin

    open_angle, deviation = 0.0, 0.0
    weight = np.zeros(len(vertices))
    if rig.has_shape_key("jawOpen"):
        deltas = rig.shape_key("jawOpen")
        magnitude = np.linalg.norm(deltas, axis=1)
        # Fit the rigid motion on the strongly moving lower face below the mouth (the
        # lips roll and stretch; the chin and jaw line move nearly rigidly).
        local_y = frame.local(vertices)[:, 1]
        chin = (magnitude > 0.5 * magnitude.max()) & (local_y < -0.015 * landmarks.scale)
        if chin.sum() < 10:
            chin = magnitude > 0.5 * magnitude.max()
        rotation, _ = _rigid_fit(vertices[chin], vertices[chin] + deltas[chin])
        axis, open_angle = _rotation_axis_angle(rotation)
        deviation = float(np.degrees(np.arccos(min(1.0, abs(axis @ hinge)))))
        # Expected displacement of a point rigidly attached to the jaw, rotating by the fitted
        # angle about the hinge: the ratio to it says how much a skin vertex follows the jaw.
        radius = np.linalg.norm(np.cross(vertices - origin, hinge), axis=1)
        expected = np.radians(open_angle) * np.maximum(radius, 1e-6)
        weight = np.clip(magnitude / expected, 0.0, 1.0)
        # Near the hinge nothing moves much either way; call it skull.
        weight[radius < 0.25 * np.median(radius[chin])] = 0.0
    return JawModel(condyles=condyles, frame=jaw_frame, skin_weight=weight,
                    open_angle_deg=float(open_angle), axis_fit_deviation_deg=deviation, method=method)
