"""Analytic signed-distance colliders: sphere, capsule and box (paper 001 §3.1 "Constraints").

Paper 001 detects contacts against analytic signed distance fields; here they are props the
skin can be pushed by (a finger, a spoon, a pillow corner) and, later, the interactive shell's
tools. Each shape gives, for any point, the exact signed distance (negative inside), the
closest point on its surface and the outward unit normal there. A skin vertex with signed
distance below ``padding`` becomes a tangent-plane contact n · (x_v − p) ≥ 0 at that closest
point (contacts.py), the same interface the teeth and lip detection uses.

Every collider is placed by its own shape parameters (centre, axes, size — metres, world frame
at rest) and then moved rigidly by ``transforms``: one 4×4 world transform for the whole
animation, or (T,4,4), one per frame (frames past the end hold the last transform).

The shape functions are public (``sphere_signed_distance``, ``capsule_signed_distance``,
``box_signed_distance``) for callers that want values, gradients or closest points without the
collider wrapper; each returns a ``SignedDistance`` of (value, gradient, closest).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np

from .contacts import BonePose, ContactPlanes


class SignedDistance(NamedTuple):
    value: np.ndarray       # (K,) signed distance, metres, negative inside
    gradient: np.ndarray    # (K,3) unit outward normal of the closest surface point (∇ of value)
    closest: np.ndarray     # (K,3) closest point on the surface


def _points(points) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points: expected shape (K, 3), found {points.shape}")
    return points


def _unit(vectors: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Rows normalised; a zero row (a point exactly on the shape's core, where the direction
    is undefined) takes `fallback` so the result is still a valid unit normal."""
    length = np.linalg.norm(vectors, axis=1, keepdims=True)
    safe = length[:, 0] > 1e-15
    out = np.empty_like(vectors)
    out[safe] = vectors[safe] / length[safe]
    out[~safe] = fallback
    return out


def sphere_signed_distance(points, centre, radius: float) -> SignedDistance:
    points, centre = _points(points), np.asarray(centre, dtype=np.float64)
    offset = points - centre
    normal = _unit(offset, np.array([0.0, 0.0, 1.0]))
    return SignedDistance(np.linalg.norm(offset, axis=1) - radius, normal, centre + radius * normal)


def capsule_signed_distance(points, start, end, radius: float) -> SignedDistance:
    """The capsule of `radius` around the segment start–end (a sphere when they coincide)."""
    points = _points(points)
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    axis = end - start
    length_squared = float(axis @ axis)
    along = np.zeros(len(points)) if length_squared == 0.0 else np.clip((points - start) @ axis / length_squared, 0, 1)
    core = start + along[:, None] * axis
    offset = points - core
    # On the axis itself the normal is any direction perpendicular to it.
    fallback = np.cross(axis, np.eye(3)[np.argmin(np.abs(axis))]) if length_squared else np.array([0.0, 0.0, 1.0])
    normal = _unit(offset, fallback / np.linalg.norm(fallback))
    return SignedDistance(np.linalg.norm(offset, axis=1) - radius, normal, core + radius * normal)


def box_signed_distance(points, centre, axes, half_size) -> SignedDistance:
    """The box centred at `centre` with orthonormal `axes` (3×3, columns the box's local x, y,
    z in world coordinates) and half edge lengths `half_size` (3,)."""
    points = _points(points)
    axes = np.asarray(axes, dtype=np.float64)
    half_size = np.asarray(half_size, dtype=np.float64)
    local = (points - np.asarray(centre, dtype=np.float64)) @ axes
    excess = np.abs(local) - half_size            # > 0 on the axes where the point is outside the slab
    outside = excess.max(axis=1) > 0.0
    sign = np.where(local >= 0.0, 1.0, -1.0)

    closest_local = np.clip(local, -half_size, half_size)
    value = np.empty(len(points))
    normal_local = np.empty_like(local)
    offset = local[outside] - closest_local[outside]
    value[outside] = np.linalg.norm(offset, axis=1)
    normal_local[outside] = offset / value[outside, None]
    # Inside, the nearest surface is the face of the axis with the least clearance.
    inside = ~outside
    face_axis = np.argmax(excess[inside], axis=1)
    rows = np.flatnonzero(inside)
    value[inside] = excess[inside, face_axis]
    normal_local[inside] = 0.0
    normal_local[rows, face_axis] = sign[rows, face_axis]
    closest_local[rows, face_axis] = sign[rows, face_axis] * half_size[face_axis]
    return SignedDistance(value, normal_local @ axes.T, closest_local @ axes.T + centre)


def _transforms(transforms) -> np.ndarray:
    transforms = np.eye(4) if transforms is None else np.asarray(transforms, dtype=np.float64)
    if transforms.shape == (4, 4):
        transforms = transforms[None]
    if transforms.ndim != 3 or transforms.shape[1:] != (4, 4) or len(transforms) == 0:
        raise ValueError(f"transforms: expected (4,4) or (T,4,4), found {transforms.shape}")
    rotations = transforms[:, :3, :3]
    if not np.allclose(rotations @ rotations.transpose(0, 2, 1), np.eye(3), atol=1e-6):
        raise ValueError("transforms: the 3×3 parts must be rotations (rigid transforms only)")
    return transforms


@dataclass(kw_only=True)
class AnalyticCollider:
    """Base of the analytic colliders: a rest shape (``_rest_distance``) moved by one rigid
    transform per frame. Implements contacts.Collider."""
    name: str
    transforms: Optional[np.ndarray] = None     # (4,4) or (T,4,4); None: the rest placement
    padding: float = 0.0                        # m: vertices closer than this count as touching

    def __post_init__(self):
        self.transforms = _transforms(self.transforms)

    def transform(self, frame: int) -> np.ndarray:
        return self.transforms[min(max(int(frame), 0), len(self.transforms) - 1)]

    def signed_distance(self, points, frame: int = 0) -> SignedDistance:
        """Signed distance of world points to the collider as placed in `frame`."""
        transform = self.transform(frame)
        rotation, translation = transform[:3, :3], transform[:3, 3]
        rest = self._rest_distance((_points(points) - translation) @ rotation)
        return SignedDistance(rest.value, rest.gradient @ rotation.T, rest.closest @ rotation.T + translation)

    def _rest_distance(self, points: np.ndarray) -> SignedDistance:
        raise NotImplementedError

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes:
        """Planes for vertices closer than ``padding``; with `margin` > 0 also for those up to
        `margin` farther out (predictive planes, depth 0: the solver holds them inactive until
        the vertex reaches the plane)."""
        distance = self.signed_distance(skin_positions, pose.frame)
        touching = np.flatnonzero(distance.value < self.padding + max(float(margin), 0.0))
        return ContactPlanes(vertex=touching.astype(np.int64), point=distance.closest[touching],
                             normal=distance.gradient[touching], depth=np.maximum(-distance.value[touching], 0.0),
                             collider=np.full(len(touching), collider_index, dtype=np.int64))


@dataclass(kw_only=True)
class SphereCollider(AnalyticCollider):
    centre: np.ndarray = (0.0, 0.0, 0.0)
    radius: float = 0.01

    def _rest_distance(self, points):
        return sphere_signed_distance(points, self.centre, self.radius)


@dataclass(kw_only=True)
class CapsuleCollider(AnalyticCollider):
    start: np.ndarray = (0.0, 0.0, 0.0)
    end: np.ndarray = (0.0, 0.0, 0.01)
    radius: float = 0.005

    def _rest_distance(self, points):
        return capsule_signed_distance(points, self.start, self.end, self.radius)


@dataclass(kw_only=True)
class BoxCollider(AnalyticCollider):
    centre: np.ndarray = (0.0, 0.0, 0.0)
    axes: np.ndarray = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))   # columns: the box's x, y, z
    size: np.ndarray = (0.01, 0.01, 0.01)                                  # full edge lengths

    def __post_init__(self):
        super().__post_init__()
        axes = np.asarray(self.axes, dtype=np.float64)
        if axes.shape != (3, 3) or not np.allclose(axes.T @ axes, np.eye(3), atol=1e-9):
            raise ValueError("BoxCollider.axes: expected a 3×3 orthonormal matrix (columns the box's axes)")

    def _rest_distance(self, points):
        return box_signed_distance(points, self.centre, self.axes, 0.5 * np.asarray(self.size, dtype=np.float64))
