"""What collision detection hands to the solvers: one tangent plane per offending skin vertex.

Paper 000 §4: for every skin vertex found inside a collider (teeth proxy, the other lip, an
external prop), detection projects it onto the collider's *projection region* and creates the
tangent plane there; the solver then keeps the vertex on the allowed side,

    n · (x_v − p) ≥ 0,

with x_v the skin vertex carried by its tet (x_v = Σ_k w_vk x_node). Planes are held fixed
while the solver runs and detection runs again on the result, until nothing penetrates.

A plane on a deforming collider (the other lip) also names the skin triangle p lies on and
p's barycentric weights in it (``partner``, ``partner_weight``), so the contact response can
tell two lips pushed into each other from a lip pushed into a still one (docs/collisions.md,
"Lip against lip"). Rigid colliders have partner −1 and weight 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np

_FIELDS = ("vertex", "point", "normal", "depth", "collider", "partner", "partner_weight")


@dataclass
class ContactPlanes:
    """Tangent-plane constraints n · (x_v − p) ≥ 0 on skin vertices, all in metres (world frame)."""
    vertex: np.ndarray      # (C,) int64 skin (rig) vertex indices
    point: np.ndarray       # (C,3) plane point: the closest point on the collider's projection region
    normal: np.ndarray      # (C,3) unit normal pointing to the allowed side
    depth: np.ndarray       # (C,) penetration depth at detection (≥ 0 inside, 0 for predictive planes), metres
    collider: np.ndarray    # (C,) int64 index into the scene's collider names
    partner: Optional[np.ndarray] = None          # (C,3) int64 skin vertices of the triangle p lies on, −1: none
    partner_weight: Optional[np.ndarray] = None   # (C,3) p's barycentric weights in that triangle (0: none)

    def __post_init__(self):
        count = len(self.vertex)
        if self.partner is None:
            self.partner = np.full((count, 3), -1, np.int64)
        if self.partner_weight is None:
            self.partner_weight = np.zeros((count, 3))

    @property
    def count(self) -> int:
        return int(len(self.vertex))

    @staticmethod
    def empty() -> "ContactPlanes":
        return ContactPlanes(vertex=np.zeros(0, np.int64), point=np.zeros((0, 3)), normal=np.zeros((0, 3)),
                             depth=np.zeros(0), collider=np.zeros(0, np.int64))

    @staticmethod
    def concatenate(parts: Sequence["ContactPlanes"]) -> "ContactPlanes":
        parts = [p for p in parts if p.count]
        if not parts:
            return ContactPlanes.empty()
        return ContactPlanes(*(np.concatenate([getattr(p, name) for p in parts]) for name in _FIELDS))

    def subset(self, mask_or_index) -> "ContactPlanes":
        return ContactPlanes(*(getattr(self, name)[mask_or_index] for name in _FIELDS))

    def violation(self, skin_positions: np.ndarray) -> np.ndarray:
        """(C,) how far each constrained vertex is on the wrong side of its plane (0 if allowed)."""
        signed = np.einsum("ij,ij->i", self.normal, skin_positions[self.vertex] - self.point)
        return np.maximum(-signed, 0.0)


@dataclass(frozen=True)
class BonePose:
    """Where the bones are in this frame: 4×4 world transforms from rest, and the frame index
    (external colliders carry one rigid transform per frame)."""
    skull: np.ndarray
    jaw: np.ndarray
    frame: int = 0


class Collider(Protocol):
    """Anything the skin can collide with. ``detect`` returns the planes for skin vertices that
    penetrate it at `skin_positions` (V,3) in the given pose, with ``collider`` set to
    `collider_index`; with `margin` > 0 also for those less than `margin` outside it (depth 0:
    predictive planes, inactive until the vertex reaches them)."""
    name: str

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes: ...
