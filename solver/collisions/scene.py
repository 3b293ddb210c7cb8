"""Everything the skin can collide with in one model, detected in one call.

``CollisionScene`` owns the teeth proxies, the shadows behind them (``teeth_shadow``: the mouth
side of each row, where the lips may not go), the two lips and any external colliders (mesh
props from ``mesh_collider``, analytic shapes from ``sdf``), in that order; a contact's
``collider`` indexes ``names``.

Rest allowance: a face rig's neutral pose is not collision-free. The padded teeth proxies
reach into the gum lining and often into the inner lips, and the lips may touch or overlap
by a hair. Pushing those vertices out would change the neutral face, so for the model's own
colliders (teeth and lips) each skin vertex may stay as deep as it was in the rest pose
(skin at rest, bones at identity): its plane is moved inwards by that rest depth and a
contact is reported only beyond it (REST_TOLERANCE). The neutral face therefore has no
contacts, and a vertex never gets deeper than at rest. External props get no allowance.

Shown allowance: the skin shown for shape-key animation (physics/skin_filter.py) is kept out
of the same colliders, except that next to the mouth corners the lips may overlap as the rig's
do, by the lips' corner fade (``lips.corner_fade``) on top of the rest allowance
(``detect(..., shown=True)``). The simulation holds the lips apart there; a display that pinned
them apart too, right up to the untested corner zone, folded the sub-millimetre triangles at the
zone's edge (docs/performance.md).

Which skin meets the teeth: the lips (paper 000 §4 handles collisions "between lips and the
teeth and between the upper and lower lip"). The rest of the mouth-socket lining lies on the
gums and teeth in the rig, is mostly embedded outside the tet mesh, and is not tested against
the teeth; ``teeth_vertices`` overrides this. When the lips cannot be found every skin vertex
is tested.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..model_file import model_head_axes
from ..npz_files import NpzReadError, read_npz
from .contacts import BonePose, Collider, ContactPlanes
from .lips import LipCollider, LipSurfaceError, LipSurfaces, find_lip_surfaces, lip_colliders
from .teeth import DEFAULT_PAD, DEFAULT_SPACING, TeethCollider, teeth_proxies
from .teeth_shadow import TeethShadow

# Contacts of a vertex inside a collider at rest are reported only this far (metres) beyond its rest depth.
REST_TOLERANCE = 1e-5


@dataclass
class CollisionMeasure:
    """How badly the skin penetrates the scene (after the rest allowance)."""
    max_depth_m: float
    penetrating_vertices: int
    per_collider: dict = field(default_factory=dict)   # name -> number of penetrating vertices

    def as_dict(self) -> dict:
        return {"max_depth_mm": round(self.max_depth_m * 1e3, 4), "penetrating_vertices": self.penetrating_vertices,
                "per_collider": dict(self.per_collider)}


class CollisionScene:
    """Teeth proxies, lips and external colliders of one model (see the module docstring).

    ``lip_vertices`` = (upper, lower) skin vertex indices overrides the automatic lip finder
    (e.g. the Blender vertex groups FP_lip_upper / FP_lip_lower). ``teeth_vertices``: the skin
    vertices tested against the teeth — "lips" (default: both lips, or every vertex when the
    lips cannot be found), "all", or an index array. ``teeth_shadow``: keep those vertices out
    of the mouth behind each teeth row too (teeth_shadow.py; on by default with the teeth).
    """

    def __init__(self, model: dict, teeth: bool = True, lips: bool = True, colliders: Sequence[Collider] = (),
                 lip_vertices: Optional[tuple] = None, rest_allowance: bool = True,
                 teeth_pad: float = DEFAULT_PAD, teeth_spacing: float = DEFAULT_SPACING,
                 teeth_vertices="lips", teeth_shadow: bool = True):
        self.skin_rest = np.ascontiguousarray(model["skin_vertices"], dtype=np.float64)
        self.teeth: list[TeethCollider] = []
        self.shadows: list[TeethShadow] = []
        self.lips: Optional[LipSurfaces] = None
        self.teeth_vertices: Optional[np.ndarray] = None     # None: every skin vertex
        own: list = []
        lip_list = []
        if lips:
            lip_list, self.lips = lip_colliders(model, lip_vertices)
        if teeth:
            self.teeth_vertices = self._teeth_vertices(model, teeth_vertices, lip_vertices)
            self.teeth = [TeethCollider(proxy, self.teeth_vertices)
                          for proxy in teeth_proxies(model, teeth_pad, teeth_spacing)]
            own += self.teeth
            if teeth_shadow:
                tested = (np.arange(len(self.skin_rest)) if self.teeth_vertices is None else self.teeth_vertices)
                self.shadows = [TeethShadow(collider.proxy, model_head_axes(model), tested, self.skin_rest)
                                for collider in self.teeth]
                own += self.shadows
        own += lip_list
        self.colliders = own + list(colliders)
        self.names = [collider.name for collider in self.colliders]
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"collider names must be unique, got {self.names}")
        self._own_count = len(own)
        self.allowance = [np.zeros(len(self.skin_rest)) for _ in own]
        if rest_allowance and own:
            rest_pose = BonePose(skull=np.eye(4), jaw=np.eye(4), frame=0)
            for index, collider in enumerate(own):
                found = collider.detect(self.skin_rest, rest_pose, index)
                np.maximum.at(self.allowance[index], found.vertex, found.depth)
        self.shown_allowance = [allowance + self.lips.corner_allowance if isinstance(collider, LipCollider)
                                else allowance for allowance, collider in zip(self.allowance, own)]

    def _teeth_vertices(self, model, choice, lip_vertices) -> Optional[np.ndarray]:
        if not isinstance(choice, str):
            return np.unique(np.asarray(choice, dtype=np.int64))
        if choice == "all":
            return None
        if choice != "lips":
            raise ValueError(f"teeth_vertices must be 'lips', 'all' or an index array, got {choice!r}")
        lips = self.lips
        if lips is None:
            try:
                lips = find_lip_surfaces(model, lip_vertices)
            except LipSurfaceError:
                return None
        return np.union1d(lips.upper_vertices, lips.lower_vertices)

    def detect(self, skin_positions: np.ndarray, pose: BonePose, margin: float = 0.0,
               shown: bool = False) -> ContactPlanes:
        """Tangent planes for every skin vertex penetrating any collider (all in world metres);
        with `margin` > 0 also for vertices less than `margin` outside one (depth 0: predictive
        planes, see contact_response.py); with `shown`, beyond the shown allowance (the lips'
        corner fade included; module docstring)."""
        allowances = self.shown_allowance if shown else self.allowance
        skin_positions = np.ascontiguousarray(skin_positions, dtype=np.float64)
        if skin_positions.shape != self.skin_rest.shape:
            raise ValueError(f"skin_positions must have shape {self.skin_rest.shape}, got {skin_positions.shape}")
        parts = []
        for index, collider in enumerate(self.colliders):
            found = (collider.detect(skin_positions, pose, index, margin=margin) if margin > 0.0
                     else collider.detect(skin_positions, pose, index))
            if index < self._own_count and found.count:
                found = _beyond_rest(found, allowances[index][found.vertex], skin_positions, margin)
            parts.append(found)
        return ContactPlanes.concatenate(parts)

    def crossings(self, skin_before: np.ndarray, pose_before: BonePose, skin_after: np.ndarray,
                  pose_after: BonePose) -> ContactPlanes:
        """Planes for the lip vertices that passed through a teeth proxy between two states
        and ended behind it (``TeethCollider.crossings``), with the rest allowance of
        ``detect``."""
        parts = []
        for index, collider in enumerate(self.colliders[:self._own_count]):
            if not isinstance(collider, TeethCollider):
                continue
            found = collider.crossings(skin_before, pose_before, skin_after, pose_after, index)
            if found.count:
                found = _beyond_rest(found, self.allowance[index][found.vertex], np.asarray(skin_after))
            parts.append(found)
        return ContactPlanes.concatenate(parts)

    def measure(self, skin_positions: np.ndarray, pose: BonePose, shown: bool = False) -> CollisionMeasure:
        """Deepest penetration (m), penetrating skin vertices, and their count per collider;
        with `shown`, beyond the shown allowance (the skin as the skin filter shows it)."""
        contacts = self.detect(skin_positions, pose, shown=shown)
        per_collider = {name: int(len(np.unique(contacts.vertex[contacts.collider == index])))
                        for index, name in enumerate(self.names)}
        return CollisionMeasure(max_depth_m=float(contacts.depth.max()) if contacts.count else 0.0,
                                penetrating_vertices=int(len(np.unique(contacts.vertex))),
                                per_collider=per_collider)

    def posed_proxies(self, pose: BonePose) -> dict:
        """{name: (vertices (n,3), triangles (t,3))} of the teeth proxies in the pose's world frame."""
        return {collider.name: collider.posed(pose) for collider in self.teeth}


def _beyond_rest(found: ContactPlanes, allowance: np.ndarray, skin_positions: np.ndarray,
                 margin: float = 0.0) -> ContactPlanes:
    """Keep contacts deeper than their rest depth plus REST_TOLERANCE (or, with `margin`, less
    than `margin` short of it), with the planes moved in by that much, so a vertex at its rest
    depth lies on the allowed side."""
    allowance = np.where(allowance > 0.0, allowance + REST_TOLERANCE, 0.0)
    signed = np.einsum("ij,ij->i", found.normal, found.point - skin_positions[found.vertex]) - allowance
    keep = signed > -max(margin, 0.0) if margin > 0.0 else signed > 0.0
    kept = found.subset(keep)
    kept.point = kept.point - allowance[keep, None] * kept.normal
    kept.depth = np.maximum(signed[keep], 0.0)
    return kept


LIP_VERTICES_KEYS = ("upper", "lower")


def check_lip_vertices(upper, lower, skin_vertex_count: int, source: str = "lip vertices") -> tuple:
    """(upper, lower) as sorted unique int64 skin-vertex indices, or ValueError naming what is
    wrong: each a non-empty 1-D integer array within [0, skin_vertex_count), no vertex on both."""
    checked = []
    for key, values in zip(LIP_VERTICES_KEYS, (upper, lower)):
        values = np.asarray(values)
        if values.size == 0:
            raise ValueError(f"{source}: '{key}' is empty; paint the FP_lip_{key} vertex group (weight above 0.5) "
                             f"or delete it to find the lips automatically")
        if values.dtype == object or values.dtype.kind not in "iu" or values.ndim != 1:
            raise ValueError(f"{source}: '{key}' must be a 1-D array of integer skin vertex indices, got "
                             f"{values.dtype} of shape {values.shape}")
        if values.min() < 0 or values.max() >= skin_vertex_count:
            raise ValueError(f"{source}: '{key}' indices must lie in [0, {skin_vertex_count - 1}] (the model's skin "
                             f"vertices), got [{values.min()}, {values.max()}]; build the model from this mesh again")
        checked.append(np.unique(values.astype(np.int64)))
    both = np.intersect1d(*checked)
    if both.size:
        raise ValueError(f"{source}: {both.size} vertices are on both lips (first: vertex {both[0]}); take them out of "
                         f"one of FP_lip_upper / FP_lip_lower")
    return tuple(checked)


def load_lip_vertices(path, skin_vertex_count: int) -> tuple:
    """(upper, lower) skin-vertex indices from a LIPS.npz (keys ``upper``, ``lower``, read with
    allow_pickle=False), checked by ``check_lip_vertices``: the override of the automatic lip
    finder (``CollisionScene(lip_vertices=...)``)."""
    path = Path(path)
    source = f"lip vertices file {path.name}"
    try:
        data = read_npz(path)
    except NpzReadError as error:
        raise ValueError(f"{source}: {str(error).removeprefix(f'{path}: ')}; save it with "
                         f"numpy.savez(path, upper=..., lower=...), integer arrays") from None
    missing = [key for key in LIP_VERTICES_KEYS if key not in data]
    if missing:
        raise ValueError(f"{source}: missing arrays {missing} (found {sorted(data)}); save it with "
                         f"numpy.savez(path, upper=..., lower=...)")
    return check_lip_vertices(*(data[key] for key in LIP_VERTICES_KEYS), skin_vertex_count, source)
