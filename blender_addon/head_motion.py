"""Rigid transforms between Blender's world and the solver's rig frame (numpy only, no bpy).

The rig frame is the skin object's local frame scaled to metres: rig = local × `metres_per_unit`
(scene unit scale × the object's uniform scale). The skin's own object transform then moves
the baked cache exactly as it moves the mesh, so the solver only needs the head's motion
*relative to the skin object*.
"""
from __future__ import annotations

import numpy as np


def nearest_rotation(matrix: np.ndarray) -> np.ndarray:
    """The rotation closest to a 3×3 matrix (Blender's float32 matrices are orthonormal only to
    ~1e-7; the solver checks 1e-6)."""
    u, _, vt = np.linalg.svd(matrix)
    rotation = u @ vt
    if np.linalg.det(rotation) < 0.0:
        u[:, -1] *= -1.0
        rotation = u @ vt
    return rotation


def head_transforms_in_rig_frame(skin_worlds, head_worlds, metres_per_unit: float) -> np.ndarray:
    """(T, 4, 4) rigid head transforms for ACTIVATIONS.npz, relative to the first frame.

    skin_worlds, head_worlds: (T, 4, 4) world matrices per frame. In the skin's local frame the
    head moves by L(t) = S(t)⁻¹ H(t) H(0)⁻¹ S(0); in metres the translation scales by
    `metres_per_unit` and the rotation is unchanged (uniform scale commutes with it).
    """
    skin_worlds = np.asarray(skin_worlds, dtype=np.float64)
    head_worlds = np.asarray(head_worlds, dtype=np.float64)
    start = head_worlds[0]
    transforms = np.empty_like(skin_worlds)
    for frame, (skin, head) in enumerate(zip(skin_worlds, head_worlds)):
        local = np.linalg.inv(skin) @ head @ np.linalg.inv(start) @ skin_worlds[0]
        transform = np.eye(4)
        transform[:3, :3] = nearest_rotation(local[:3, :3])
        transform[:3, 3] = local[:3, 3] * metres_per_unit
        transforms[frame] = transform
    return transforms


def world_vector_in_rig_frame(vector, skin_world) -> np.ndarray:
    """A world direction (wind velocity, m/s) expressed in the rig's axes (rotation only)."""
    rotation = nearest_rotation(np.asarray(skin_world, dtype=np.float64)[:3, :3])
    return rotation.T @ np.asarray(vector, dtype=np.float64)
