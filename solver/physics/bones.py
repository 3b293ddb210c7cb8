"""Rigid motion of the two bones: the skull follows the head, the jaw follows the skull.

The jaw moves relative to the skull with 5 parameters (paper 000 §3, "Jaw kinematics")
expressed in the model's ``jaw_frame`` (columns: hinge axis toward the subject's left, up,
forward; origin at the midpoint of the condyles):

    b[0]  opening rotation about the jaw-frame x axis (the hinge) [rad]. Positive opens the
          mouth: a rotation by +b[0] about the left-pointing hinge turns forward into down,
          so the chin (forward of and below the condyles) moves down.
    b[1]  rotation about the jaw-frame y axis (vertical) [rad]; positive turns the chin toward
          the subject's left (right-hand rule about up: forward turns toward left).
    b[2:5] translation along the jaw-frame x, y, z axes [m] (left, up, forward).

All transforms are 4×4 homogeneous matrices acting on column vectors, ``p' = T @ [p, 1]``.
"""
from __future__ import annotations

import numpy as np

JAW_PARAMETER_COUNT = 5


def rotation_about_x(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rotation_about_y(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rigid_transform(rotation: np.ndarray, translation) -> np.ndarray:
    transform = np.eye(4)
    transform[:3, :3] = rotation
    transform[:3, 3] = translation
    return transform


def jaw_transform(jaw_frame: np.ndarray, b) -> np.ndarray:
    """The jaw's rigid transform relative to the skull (rest world → moved world, skull fixed).

    Order of operations, all in jaw-frame coordinates (origin at the condyle midpoint):
    first the opening rotation about the hinge x axis by b[0], then the rotation about the
    jaw-frame y axis by b[1] (the axis stays fixed in the skull, so an opened jaw turns as a
    whole about the vertical), then the translation (b[2], b[3], b[4]). In matrices:

        jaw_transform = F · Translate(b[2:5]) · R_y(b[1]) · R_x(b[0]) · F⁻¹,   F = jaw_frame.

    b = 0 gives the identity.
    """
    b = np.asarray(b, dtype=float)
    if b.shape != (JAW_PARAMETER_COUNT,):
        raise ValueError(f"jaw parameters b must have shape ({JAW_PARAMETER_COUNT},), got {b.shape}")
    frame = np.asarray(jaw_frame, dtype=float)
    motion_in_jaw_frame = rigid_transform(rotation_about_y(b[1]) @ rotation_about_x(b[0]), b[2:5])
    frame_inverse = rigid_transform(frame[:3, :3].T, -frame[:3, :3].T @ frame[:3, 3])
    return frame @ motion_in_jaw_frame @ frame_inverse


def bone_transforms(head_transform: np.ndarray, jaw_frame: np.ndarray, b) -> tuple[np.ndarray, np.ndarray]:
    """World transforms (skull, jaw) of the bones for one frame.

    The skull is the head transform itself; the jaw first moves relative to the skull
    (``jaw_transform``) and is then carried along by the head: jaw = head ∘ jaw-relative.
    """
    head = np.asarray(head_transform, dtype=float)
    return head.copy(), head @ jaw_transform(jaw_frame, b)
