"""Left–right mirror images of fits: a shape's fitted mirror partner, reflected, is its first guess.

ARKit rigs come in mirrored pairs (mouthSmile_L / mouthSmile_R, jawLeft / jawRight, …), and a
model built from a symmetric head is symmetric about its sagittal plane up to the snapping of a
few nodes to the skin. The reflection of one fit (activations and jaw pose) is then nearly the
fit of the other shape. On the ICT face the objective at that start was 11–40 times lower than at
the neutral face where measured (mouthSmile_R 0.19 against 7.5 mm², mouthRight 0.57 against 22.7,
browOuterUp_R 0.10 against 1.04), and the 22 mirrored shapes took 54 outer iterations instead of
176 (docs/benchmarks.md, "Mirrored starts").

The sagittal plane is the plane through the jaw frame's origin (the midpoint of the condyles)
normal to its hinge (x) axis. A muscle tet's mirror is the muscle tet whose centroid is nearest
to its reflected centroid; a model whose tets do not mirror onto each other (an asymmetric head,
a lattice off the plane) has no mirror, and its shapes start from the neutral face.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy.spatial import cKDTree

from ..physics.activation import (NEUTRAL_ACTIVATION, active_tet_indices, symmetric_from_vector,
                                  vector_from_symmetric)

# Name pairs of mirrored ARKit shapes: a suffix (mouthSmile_L) or a word (jawLeft, mouthLeft).
MIRRORED_NAME_PARTS = (("_L", "_R"), ("Left", "Right"))
# A reflected centroid matches a tet this close (as a share of the median muscle-tet edge).
MATCH_DISTANCE = 0.25
# Share of muscle tets that must match for the model to count as symmetric.
MIN_MATCHED_SHARE = 0.9


def mirror_partner(name: str, names: Sequence[str]) -> Optional[str]:
    """The mirrored shape of `name` among `names` (mouthSmile_L → mouthSmile_R, jawLeft →
    jawRight), or None."""
    for left, right in MIRRORED_NAME_PARTS:
        for this, other in ((left, right), (right, left)):
            if this in name:
                head, _, tail = name.rpartition(this)
                partner = head + other + tail
                if partner != name and partner in names:
                    return partner
    return None


@dataclass(frozen=True)
class ModelMirror:
    """The reflection of activations and jaw parameters about a model's sagittal plane."""

    partner_of_active_tet: np.ndarray      # (A,) index of each muscle tet's mirror, −1 if none
    reflection: np.ndarray                 # (3, 3) Householder matrix I − 2 n nᵀ
    matched_share: float

    @classmethod
    def from_model(cls, model) -> Optional["ModelMirror"]:
        """The model's mirror, or None when its muscle tets are not symmetric."""
        frame = np.asarray(model["jaw_frame"], dtype=np.float64)
        normal = frame[:3, 0] / np.linalg.norm(frame[:3, 0])
        origin = frame[:3, 3]
        reflection = np.eye(3) - 2.0 * np.outer(normal, normal)
        positions = np.asarray(model["rest_positions"], dtype=np.float64)
        tets = np.asarray(model["tets"])[active_tet_indices(model)]
        if len(tets) == 0:
            return None
        corners = positions[tets]
        centroids = corners.mean(axis=1)
        edges = np.linalg.norm(corners[:, [0, 0, 0, 1, 1, 2]] - corners[:, [1, 2, 3, 2, 3, 3]], axis=2)
        reflected = origin + (centroids - origin) @ reflection.T
        distance, nearest = cKDTree(centroids).query(reflected)
        matched = distance <= MATCH_DISTANCE * np.median(edges)
        share = float(matched.mean())
        if share < MIN_MATCHED_SHARE:
            return None
        return cls(partner_of_active_tet=np.where(matched, nearest, -1), reflection=reflection, matched_share=share)

    def activations(self, activations) -> np.ndarray:
        """(A, 6): tet i gets H S_j H of its mirror j (neutral where it has none)."""
        activations = np.asarray(activations, dtype=np.float64)
        matrices = symmetric_from_vector(activations[np.maximum(self.partner_of_active_tet, 0)])
        mirrored = vector_from_symmetric(self.reflection @ matrices @ self.reflection)
        mirrored[self.partner_of_active_tet < 0] = NEUTRAL_ACTIVATION
        return mirrored

    @staticmethod
    def jaw(jaw) -> np.ndarray:
        """b of the mirrored jaw pose. In the jaw frame the reflection is x → −x: the opening
        rotation about the hinge (x) axis stays, the turn about y and the sideways shift flip."""
        return np.asarray(jaw, dtype=np.float64) * np.array([1.0, -1.0, -1.0, 1.0, 1.0])
