"""Any list of colliders as one collision scene (the interface FaceSimulator takes)."""
from __future__ import annotations

import inspect
from typing import Sequence

import numpy as np

from .contacts import BonePose, Collider, ContactPlanes


class ColliderSet:
    """A list of Collider objects (e.g. the SDF colliders of solver/collisions/sdf.py) in the
    scene interface FaceSimulator takes: ``names``, ``detect(skin, pose)``, ``measure(skin, pose)``."""

    def __init__(self, colliders: Sequence[Collider]):
        self.colliders = list(colliders)
        self.names = [collider.name for collider in self.colliders]

    def detect(self, skin_positions: np.ndarray, pose: BonePose, margin: float = 0.0,
               shown: bool = False) -> ContactPlanes:
        """Planes for the vertices inside a collider and, with `margin` > 0, for those less
        than `margin` outside the colliders that support it (sdf.AnalyticCollider). Props allow
        the shown skin no overlap either (`shown`, see CollisionScene.detect)."""
        return ContactPlanes.concatenate([
            collider.detect(skin_positions, pose, index, margin=margin) if margin > 0.0 and takes_margin(collider)
            else collider.detect(skin_positions, pose, index)
            for index, collider in enumerate(self.colliders)])

    def measure(self, skin_positions: np.ndarray, pose: BonePose) -> tuple[float, int]:
        """(largest penetration depth in metres, number of penetrating skin vertices)."""
        planes = self.detect(skin_positions, pose)
        inside = planes.depth > 0.0
        return float(planes.depth.max(initial=0.0)), int(len(np.unique(planes.vertex[inside])))


def takes_margin(detector) -> bool:
    """Whether `detector.detect` accepts a ``margin`` keyword (predictive detection)."""
    try:
        return "margin" in inspect.signature(detector.detect).parameters
    except (TypeError, ValueError):
        return False


# ----------------------------------------------------------------------------- the outer loop
