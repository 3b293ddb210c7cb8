"""The contact response: per time step, the alternation of a solve with the contact term of
contact.py and a new detection, until the skin is out of the colliders (paper 000 §4 Eq. 3;
docs/collisions.md).

IPOPT path — the planes become linear inequality rows on the reduced unknowns (weights ×
basis rows of P, ipopt_solve.skin_plane_inequalities), solved exactly by the interior point
method, alternating with detection the same way. Slower per round, but no penalty parameter.

Outer loop (both paths), per time step: detect at the start (bones and colliders moved) →
solve → update multipliers → detect again. On the Newton path the simulator's solve relaxes
the tissue around the round's planes, the rest of the mesh held, before each whole-mesh step
(contact_region.py). A plane is replaced when its vertex is found again
(same collider), kept while the vertex is still in contact (λ > 0, or for IPOPT a gap within
the tolerance), and dropped once the vertex has separated with λ = 0. The step is done when
the largest plane violation, the largest AL complementarity slack |min(g, λ/κ)| and the
largest penetration found by detection are all ≤ the contact tolerance (default 0.05 mm), or
it stops after ``max_contact_rounds`` and reports itself unconverged. Multipliers carry over
to the next step for vertices detected again (warm start: a held contact needs one round).
Lip against lip (a deforming collider): a lip vertex inside the other lip is held behind the
mid-plane between it and the other lip, and *reaction planes* push the corners of the other
lip's triangle back to the same mid-plane, so the two meet half-way in one round
(ContactResponse.detect, _reaction_planes).

The energy comes in the three tiers of the other energies (docs/physics.md):
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..collisions.contacts import BonePose, ContactPlanes
from .contact import AugmentedLagrangianContact
from ..collisions.collider_set import takes_margin
from .skin_embedding import SkinEmbedding, SkinOverBone, SlidingNodes

CONTACT_STIFFNESS_FACTOR = 100.0    # κ relative to the vertex's local tissue stiffness
# m: largest violation / penetration accepted: a quarter of the 0.2 mm bound, so what a
# frame leaves (and the display projection's own tolerance) stays well inside it. Before the
# reaction planes (ContactResponse._reaction_planes) two lips pressed together closed their last
# tenths of a millimetre by only ~5 % a round and some lip frames did not reach it in 20 rounds;
# now they take 3-4.
DEFAULT_CONTACT_TOLERANCE = 5e-5
DEFAULT_MAX_CONTACT_ROUNDS = 20
PENALTY_GROWTH_TRIGGER = 0.25       # a round must cut a plane's violation at least 4× …
PENALTY_GROWTH = 10.0               # … or that plane's κ grows tenfold,
MAX_PENALTY_BOOST = 100.0            # up to this factor over its starting value (more bends coarse tets inside out)
# Predictive detection: skin vertices within this distance outside a collider also get a plane
# (inactive, λ = 0, while they stay outside), so vertices a round pushes or pulls towards the
# collider are held in the same Newton solve instead of being found by the next detection. On
# ICT's performance frames 200–230 most rounds after the first found lip vertices 0.3–3 mm inside
# that had no plane the round before; 2.5 mm instead of 1 mm took the frames from 359 to 279
# Newton iterations and 0.72 × the time (docs/benchmarks.md, "Contact frames"). The colliders'
# clearance grids reach as far (collisions/detection.py, CLEARANCE_REACH); beyond it detection
# would walk every point in a collider's box.
DEFAULT_CONTACT_MARGIN = 2.5e-3     # m
# A vertex follows a common motion of its tet's movable nodes by the fraction Σ_{k movable} w_k
# (its "drive"); pushing it out by d moves those nodes by d / drive. Below this drive (nodes
# moved ≥ 4× the depth, or against the push when the drive is negative) the push can only be
# had by crushing the tet: such planes are not applied, and the vertices are reported.
MIN_CONTACT_DRIVE = 0.25
_KEY_STRIDE = 1 << 20               # (vertex, collider) → one int64 key; far more colliders than any scene
# A re-detected plane replaces the vertex's old plane on the same collider when their normals
# agree within 5°; otherwise both are kept (see ContactResponse._merge).
REPLACE_NORMAL_COSINE = math.cos(math.radians(5.0))
# The planes ContactResponse.detect adds on the other lip's vertices (the reaction to a lip plane,
# see ContactResponse._reaction_planes) name the lip collider plus this, so they have keys of their own.
REACTION_COLLIDER_OFFSET = 1 << 10


# lip frames, where the fit's residual overlaps the lips by up to 7 mm). A pass is one detection.
PROJECTION_PASSES = 16


@dataclass
class ContactOutcome:
    """One time step's solve with contacts."""
    x: np.ndarray                   # (3N,)
    converged: bool
    reason: str
    iterations: int                 # Newton (or IPOPT) iterations over all rounds
    factorisations: int
    krylov_iterations: int
    rounds: int                     # solve → detect rounds
    contacts: int                   # planes pushing at the end (λ > 0; IPOPT: gap within tolerance)
    penetration_depth_max: float    # m, deepest vertex of the displayed skin (projection included) at the end
    violation_max: float            # m, largest plane violation at the final positions
    anchored_vertices: int = 0      # penetrating vertices the tissue cannot push (MIN_CONTACT_DRIVE)
    anchored_depth_max: float = 0.0     # m, how deep the deepest of them was (before the display projection)
    skin_correction: Optional[np.ndarray] = None   # (V,3) m, the display projection (project_displayed)
    projected_vertices: int = 0     # vertices it moved
    projection_max: float = 0.0     # m, the largest move
    bone_limited_vertices: int = 0  # vertices whose plane was held at MAX_TISSUE_COMPRESSION (last detection)
    bone_limited_max: float = 0.0   # m, how far the deepest such plane was moved out
    history: list = field(default_factory=list)   # per round: (planes, penetration m, violation m, slack m)
    projected_steps: int = 0        # Newton steps on the projected Hessian (newton.py), all rounds
    region_iterations: int = 0      # Newton iterations of the contact region's relaxations (contact_region.py)


def plane_keys(planes: ContactPlanes) -> np.ndarray:
    """(C,) one int64 per plane for its (vertex, collider): the key of ContactResponse.carried()."""
    return planes.vertex.astype(np.int64) * _KEY_STRIDE + planes.collider.astype(np.int64)


def _pushed_partner_share(planes: ContactPlanes) -> np.ndarray:
    """(C,) for each plane, the barycentric share of its partner triangle (0 without one) whose
    vertices have a lip plane of their own in this detection: for two overlapping lips, the share
    of the other lip that the display projection moves towards the interface too, so each goes
    half-way (project_displayed)."""
    share = np.zeros(planes.count)
    has_partner = planes.partner >= 0
    if not has_partner.any():
        return share
    inside = np.zeros(int(max(planes.vertex.max(), planes.partner.max())) + 1, bool)
    inside[planes.vertex[has_partner.any(axis=1)]] = True
    partner_pushed = has_partner & inside[np.maximum(planes.partner, 0)]
    return (planes.partner_weight * partner_pushed).sum(axis=1)


def _deepest_per_key(keys: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Indices of the deepest row of each distinct key (the first of equally deep rows), in
    increasing key order."""
    order = np.lexsort((-depth, keys))
    return order[np.r_[True, keys[order][1:] != keys[order][:-1]]] if len(order) else order


def _move_partners_away(correction: np.ndarray, planes: ContactPlanes) -> None:
    """Move the corners (weight > 0) of each lip plane's partner triangle by the plane's depth
    along −n, away from its vertex, so that triangle clears the vertex; a corner several planes
    ask to move takes the deepest."""
    rows = np.repeat(np.arange(planes.count), 3)
    corners, weights = planes.partner.reshape(-1), planes.partner_weight.reshape(-1)
    rows, corners = rows[(corners >= 0) & (weights > 0.0)], corners[(corners >= 0) & (weights > 0.0)]
    first = _deepest_per_key(corners, planes.depth[rows])
    correction[corners[first]] -= planes.depth[rows[first]][:, None] * planes.normal[rows[first]]


# Per-plane state columns of the Newton path.
_MULTIPLIER, _BOOST, _VIOLATION, _ANCHOR = 0, 1, 2, slice(3, 6)


class ContactResponse:
    """The alternation of solve and detection for one simulator (docstring above).

    collisions: the scene (``detect(skin, pose[, margin])``, ``measure(skin, pose)``);
    embedding: the model's skin embedding; node_stiffness (N,): each node's local stiffness
    (N/m), from which κ is scaled; movable_nodes (N,) bool: nodes with unknowns; `sliding`
    (optional): the sliding nodes as ``SlidingNodes``, whose bone normal blocks part of a push.

    The tissue holds the embedded skin out of the colliders. What is shown is the embedded
    skin plus the frame's ``skin_offset`` (the shape-key detail residual animate adds), plus
    ``project_displayed``'s correction: every vertex of that displayed skin still inside a
    collider — an anchored vertex, or one its offset carries in — is moved onto its plane.
    """

    def __init__(self, collisions, embedding: SkinEmbedding, node_stiffness: np.ndarray, movable_nodes: np.ndarray,
                 *, tolerance: float = DEFAULT_CONTACT_TOLERANCE, max_rounds: int = DEFAULT_MAX_CONTACT_ROUNDS,
                 stiffness_factor: float = CONTACT_STIFFNESS_FACTOR, hessian_layout=None,
                 margin: float = DEFAULT_CONTACT_MARGIN, min_drive: float = MIN_CONTACT_DRIVE,
                 skin_over_bone: Optional[SkinOverBone] = None, sliding: Optional[SlidingNodes] = None):
        self.collisions = collisions
        self.sliding = sliding
        self.embedding = embedding
        self.skin_over_bone = skin_over_bone
        # The vertex's stiffness through its four nodes acting as independent springs in
        # series with the weights as levers, 1 / Σ_k (w_k² / k_k): for a vertex on a node it
        # is that node's; for a vertex between nodes it is softer, which keeps κ w_k² — what
        # the penalty adds to a node's Hessian — within CONTACT_STIFFNESS_FACTOR of the node's
        # own stiffness.
        node_stiffness = np.asarray(node_stiffness, dtype=np.float64)
        self.vertex_stiffness = 1.0 / np.einsum("vk,vk->v", embedding.weights ** 2, 1.0 / node_stiffness[embedding.nodes])
        self.node_movable = np.asarray(movable_nodes, dtype=bool)
        movable = self.node_movable[embedding.nodes]
        self.drive = np.einsum("vk,vk->v", embedding.weights, movable.astype(np.float64))
        self.min_drive = float(min_drive)
        self.vertex_movable = movable.any(axis=1) & (self.drive >= min_drive)
        self._sliding_slot = np.full(len(self.node_movable), -1, np.int64)
        if sliding is not None and len(sliding.nodes):
            self._sliding_slot[sliding.nodes] = np.arange(len(sliding.nodes))
        self.tolerance, self.max_rounds, self.stiffness_factor = tolerance, max_rounds, stiffness_factor
        self.hessian_layout = hessian_layout
        self.margin = float(margin) if margin and takes_margin(collisions) else 0.0
        self.forget_carried()
        self.last_anchored = (0, 0.0)
        self.last_bone_limited = (0, 0.0)

    # -------------------------------------------------------------- pieces

    def displayed_skin(self, x, skin_offset=None) -> np.ndarray:
        skin = self.embedding.skin_positions(x)
        return skin if skin_offset is None else skin + skin_offset

    def drive_along(self, vertices: np.ndarray, directions: np.ndarray, pose: BonePose) -> np.ndarray:
        """(C,) how far each skin vertex moves along its direction (C,3, unit) when its tet's
        nodes move by one unit that way as far as their constraints let them, counting the bone
        only where the push goes towards it: Σ_k w_k m_k, with m_k = 1 for a free node, 0 for a
        pinned one, and for a node sliding on a bone plane of normal b_k (pointing into the
        tissue) 1 − min(n·b_k, 0)² (only the part of a push into the bone that lies within its
        plane).

        Why per direction: a skin vertex over thin tissue sits in tets whose bottom nodes slide
        on the bone. Pushed straight at the bone, those nodes cannot give; counted as movable
        (the per-vertex ``drive``), the push was applied anyway, its penalty grew round after
        round, and the only way out was sideways: under the headset the demo head's glabella
        nodes slid 30-130 mm over the skull and tets turned inside out. Why only towards the
        bone: a push away from it (the teeth pushing the lips' lining out) stretches the tissue
        off the bone through the free nodes above, as before; counting the sliding nodes there
        too left 15-31 ICT lip vertices a frame to the display projection (up to 3 mm)."""
        nodes = self.embedding.nodes[vertices]
        mobility = self.node_movable[nodes].astype(np.float64)
        slot = self._sliding_slot[nodes]
        on_plane = slot >= 0
        if on_plane.any():
            sliding = self.sliding
            rotation = np.stack([np.asarray(pose.skull, dtype=np.float64)[:3, :3],
                                 np.asarray(pose.jaw, dtype=np.float64)[:3, :3]])
            index = slot[on_plane]
            normal = np.einsum("cij,cj->ci", rotation[sliding.bone[index]], sliding.rest_normals[index])
            along = np.einsum("cd,cd->c", normal, np.broadcast_to(directions[:, None, :], nodes.shape + (3,))[on_plane])
            mobility[on_plane] = 1.0 - np.minimum(along, 0.0) ** 2
        return np.einsum("ck,ck->c", self.embedding.weights[vertices], mobility)

    def pushable(self, planes: ContactPlanes, pose: BonePose) -> np.ndarray:
        """(C,) bool: planes the tissue can be asked to hold (drive along the normal ≥ the minimum)."""
        if not planes.count:
            return np.zeros(0, bool)
        return self.drive_along(planes.vertex, planes.normal, pose) >= self.min_drive

    def detect(self, x, pose: BonePose, margin: Optional[float] = None) -> tuple[ContactPlanes, np.ndarray]:
        """(planes on movable vertices of the embedded skin at x, their anchors (C,3)), with the
        predictive margin unless `margin` = 0 is given. Penetrations of anchored vertices (too
        little drive, see MIN_CONTACT_DRIVE) are left out and recorded in ``last_anchored`` =
        (count, deepest m).

        The anchor is the point the AL term holds the vertex behind, g = n · (x_v − anchor):
        the plane point, except on a deforming collider (the other lip: ``partner`` names the
        skin triangle the point lies on). There the two lips meet half-way: the vertex is held
        behind the plane through the midpoint between it and its plane point, and the movable
        corners of the partner triangle get *reaction planes* holding them on the other side of
        that same plane (``_reaction_planes``); so the anchor is moved back towards the vertex by
        half the depth times the share of the triangle that has movable corners (the rest of the
        way is the vertex's alone).

        A plane that would compress the tissue under its vertex beyond MAX_TISSUE_COMPRESSION
        of its rest depth (``skin_over_bone``) is moved out to that depth, and its depth reduced
        to match; ``last_bone_limited`` = (count, largest move m)."""
        margin = self.margin if margin is None else margin
        skin = self.embedding.skin_positions(x)
        planes = (self.collisions.detect(skin, pose, margin=margin) if margin > 0.0
                  else self.collisions.detect(skin, pose))
        if not planes.count:
            self.last_anchored = (0, 0.0)
            return planes, np.zeros((0, 3))
        usable = self.pushable(planes, pose)
        anchored = ~usable & (planes.depth > 0.0)
        self.last_anchored = (int(len(np.unique(planes.vertex[anchored]))), float(planes.depth[anchored].max(initial=0.0)))
        planes = planes.subset(usable)
        planes, share = self._reaction_planes(planes, skin, pose)
        excess = (self.skin_over_bone.compression_limit(planes, pose) if self.skin_over_bone is not None and planes.count
                  else np.zeros(planes.count))
        limited = excess > 0.0
        self.last_bone_limited = (int(len(np.unique(planes.vertex[limited]))), float(excess.max(initial=0.0)))
        planes.depth = np.maximum(planes.depth - excess, 0.0)
        return planes, planes.point - (0.5 * share * planes.depth + excess)[:, None] * planes.normal

    def _reaction_planes(self, planes: ContactPlanes, skin: np.ndarray, pose: BonePose
                         ) -> tuple[ContactPlanes, np.ndarray]:
        """The planes with reaction planes appended, and each plane's half-way share (C',).

        A lip plane (one with a partner triangle on the other lip) of depth d > 0 holds its
        vertex behind the mid-plane: normal n through M = p − ½ d n. Each movable corner j of
        the partner triangle (weight > 0, drive along −n ≥ MIN_CONTACT_DRIVE) still on the vertex's side
        of that mid-plane gets a plane on the mid-plane facing the other way (normal −n, depth
        n · (x_j − M)), collider = the lip's + REACTION_COLLIDER_OFFSET, partner = the vertex;
        of several for one corner the deepest is kept. The vertex's share is the partner weight
        on movable corners: 1 when the whole triangle is pushed back, so the vertex goes half-way.

        Why: with only each lip's own vertices held against the other lip (both ways), nothing
        pushes the other lip back — a lip vertex pushed out of the other lip only lifts that
        lip's vertices resting on its own triangles, which follow it. Measured on the demo head's
        lip frames: the other lip followed a pushed vertex by 0.91 of its move, so each round cut
        the overlap by ~5 % and 0.07 mm overlaps were still there after 20 rounds; and two
        vertices that had crossed each other were pushed to alternating sides round after round.
        The reaction planes are single-vertex planes like any other, so the Hessian pattern is
        unchanged."""
        share = np.zeros(planes.count)
        lip = np.flatnonzero((planes.partner >= 0).all(axis=1) & (planes.depth > 0.0))
        if not len(lip):
            return planes, share
        normal = planes.normal[lip]
        middle = planes.point[lip] - 0.5 * planes.depth[lip][:, None] * normal
        corners, weights = planes.partner[lip], planes.partner_weight[lip]
        reaction = np.broadcast_to(-normal[:, None, :], corners.shape + (3,)).reshape(-1, 3)
        movable = (self.drive_along(corners.reshape(-1), reaction, pose).reshape(corners.shape) >= self.min_drive) \
            & (weights > 0.0)
        share[lip] = (weights * movable).sum(axis=1)
        beyond = np.einsum("ckd,cd->ck", skin[corners] - middle[:, None, :], normal)   # on the vertex's side
        row, corner = np.nonzero(movable & (beyond > 0.0))
        if not len(row):
            return planes, share
        vertex, depth = corners[row, corner], beyond[row, corner]
        collider = planes.collider[lip][row] + REACTION_COLLIDER_OFFSET
        first = _deepest_per_key(vertex.astype(np.int64) * _KEY_STRIDE + collider, depth)   # per (corner, collider)
        pushing = planes.vertex[lip][row[first]]
        reactions = ContactPlanes(vertex=vertex[first], point=middle[row[first]], normal=-normal[row[first]],
                                  depth=depth[first], collider=collider[first],
                                  partner=np.column_stack([pushing, np.full((len(first), 2), -1)]),
                                  partner_weight=np.column_stack([np.ones(len(first)), np.zeros((len(first), 2))]))
        return ContactPlanes.concatenate([planes, reactions]), np.concatenate([share, np.zeros(len(first))])

    def measure(self, x, pose: BonePose, skin_offset=None) -> tuple[float, int]:
        return self.collisions.measure(self.displayed_skin(x, skin_offset), pose)

    def _warm_multipliers(self, planes: ContactPlanes) -> np.ndarray:
        if not planes.count or not len(self._carried_keys):
            return np.zeros(planes.count)
        order = np.argsort(self._carried_keys)
        keys = plane_keys(planes)
        slot = np.clip(np.searchsorted(self._carried_keys, keys, sorter=order), 0, len(order) - 1)
        found = self._carried_keys[order[slot]] == keys
        return np.where(found, self._carried_multipliers[order[slot]], 0.0)

    @staticmethod
    def _merge(planes: ContactPlanes, state: np.ndarray, keep: np.ndarray,
               detected: ContactPlanes, fresh_state: np.ndarray) -> tuple[ContactPlanes, np.ndarray]:
        """Each detected plane replaces the old plane of the same (vertex, collider) whose normal
        it matches within REPLACE_NORMAL_COSINE, taking its geometry and anchor from
        `fresh_state` and the rest of the state row (multiplier, …) from the old plane. A plane
        facing another way is added beside the old ones: a vertex in a concave corner of a
        collider is then held by the planes of both sides, instead of being pushed from one to
        the other round after round. On a deforming collider (the other lip) the old plane is
        stale once the lip has moved, so it is always replaced. Old planes not replaced stay
        where `keep`."""
        old_rows: dict = {}
        for row, key in enumerate(plane_keys(planes).tolist()):
            old_rows.setdefault(key, []).append(row)
        inherited = fresh_state.copy()
        replaced = np.zeros(planes.count, bool)
        deforming = (planes.partner >= 0).any(axis=1)
        for index, key in enumerate(plane_keys(detected).tolist()):
            rows = old_rows.get(key)
            if not rows:
                continue
            cosine = planes.normal[rows] @ detected.normal[index]
            best = int(np.argmax(cosine))
            if (cosine[best] >= REPLACE_NORMAL_COSINE or deforming[rows[best]]) and not replaced[rows[best]]:
                inherited[index, :_ANCHOR.start] = state[rows[best], :_ANCHOR.start]
                replaced[rows[best]] = True
        stays = keep & ~replaced
        merged = ContactPlanes.concatenate([detected, planes.subset(stays)])
        return merged, np.concatenate([inherited, state[stays]])

    def _fresh_state(self, planes: ContactPlanes, anchors: np.ndarray, *, warm: bool) -> np.ndarray:
        """(C,6) state of newly detected planes: multiplier (the last step's for the same plane
        when `warm`, else 0), boost 1, violation = depth, anchor."""
        multipliers = self._warm_multipliers(planes) if warm else np.zeros(planes.count)
        return np.column_stack([multipliers, np.ones(planes.count), planes.depth,
                                np.reshape(anchors, (-1, 3))])

    def _contact_force_scale(self, planes: ContactPlanes, multipliers: np.ndarray) -> float:
        """The contact forces' magnitude: the multipliers, or the tissue's stiffness times the
        depth to push out (what the force will be once the vertex is out)."""
        if not planes.count:
            return 0.0
        pushed = self.vertex_stiffness[planes.vertex] * planes.depth
        return float(max(pushed.max(), multipliers.max(initial=0.0)))

    def _remember(self, planes: ContactPlanes, multipliers: np.ndarray):
        pushing = multipliers > 0.0
        self._carried_keys, self._carried_multipliers = plane_keys(planes)[pushing], multipliers[pushing]

    def carried(self) -> tuple:
        """The multipliers carried to the next step, as (keys, values); ``carry`` puts them back
        (the simulator does when it abandons an attempt at a frame)."""
        return self._carried_keys, self._carried_multipliers

    def carry(self, carried: tuple) -> None:
        self._carried_keys, self._carried_multipliers = carried

    def forget_carried(self) -> None:
        """Carry no multiplier to the next step (a fresh start: no warm start from the last one)."""
        self._carried_keys, self._carried_multipliers = np.zeros(0, np.int64), np.zeros(0)

    def project_displayed(self, x, pose: BonePose, skin_offset=None) -> np.ndarray:
        """(V,3) the display correction: every vertex of the displayed skin (embedded + offset)
        still inside a collider by more than the tolerance is moved onto its deepest plane.
        What it moves: anchored vertices (drive below MIN_CONTACT_DRIVE, skin embedded outside
        the tet mesh over the bone or on the gums, which no force on the tissue can move out),
        vertices whose offset (the fit's residual, up to several mm where a fit is poor) carries
        them in, and those held at MAX_TISSUE_COMPRESSION. Two lips pushed into each other go
        half-way each, as in ``detect``. A lip vertex that a pass has moved out of a rigid
        collider (the teeth, a prop) does not go back in: when it is inside the other lip, that
        lip's triangle moves out of its way instead. Without that rule a lower-lip vertex
        wedged between the upper lip and the upper teeth on ICT was pushed out of each into the
        other for all 16 passes and stayed 0.34 mm deep. A per-frame display offset like the
        detail residual itself; the tissue is left as the solve found it."""
        skin = self.displayed_skin(x, skin_offset)
        correction = np.zeros_like(skin)
        held_by_rigid = np.zeros(len(skin), bool)
        if skin_offset is not None and hasattr(self.collisions, "crossings"):
            # An offset of several millimetres can carry a vertex through the teeth, past
            # where the passes below look (they find vertices inside): back onto the plane of
            # the labial triangle its offset crossed.
            crossed = self.collisions.crossings(self.embedding.skin_positions(x), pose, skin, pose)
            chosen = _deepest_per_key(crossed.vertex, crossed.depth)
            correction[crossed.vertex[chosen]] += crossed.depth[chosen, None] * crossed.normal[chosen]
            held_by_rigid[crossed.vertex[chosen]] = True
        for _ in range(PROJECTION_PASSES):
            planes = self.collisions.detect(skin + correction, pose)
            inside = planes.depth > self.tolerance
            if not inside.any():
                break
            share = _pushed_partner_share(planes)
            planes, share = planes.subset(inside), share[inside]
            on_lip = (planes.partner >= 0).any(axis=1)
            yields = on_lip & held_by_rigid[planes.vertex]
            if yields.any():
                _move_partners_away(correction, planes.subset(yields))
                planes, share, on_lip = planes.subset(~yields), share[~yields], on_lip[~yields]
            chosen = _deepest_per_key(planes.vertex, planes.depth)
            move = planes.depth[chosen] * (1.0 - 0.5 * share[chosen])
            correction[planes.vertex[chosen]] += move[:, None] * planes.normal[chosen]
            held_by_rigid[planes.vertex[chosen[~on_lip[chosen]]]] = True
        return correction

    def _finish(self, x, pose, skin_offset) -> dict:
        """The outcome's display fields: the projection, what it moved, and the deepest vertex
        of the displayed skin after it (anchored vertices included)."""
        anchored, anchored_depth = self.last_anchored
        limited, limited_by = self.last_bone_limited
        correction = self.project_displayed(x, pose, skin_offset)
        final = self.collisions.detect(self.displayed_skin(x, skin_offset) + correction, pose)
        moved = np.linalg.norm(correction, axis=1)
        return dict(skin_correction=correction, penetration_depth_max=float(final.depth.max(initial=0.0)),
                    anchored_vertices=anchored, anchored_depth_max=anchored_depth,
                    projected_vertices=int((moved > 0.0).sum()), projection_max=float(moved.max(initial=0.0)),
                    bone_limited_vertices=limited, bone_limited_max=limited_by)

    # -------------------------------------------------------------- Newton path

    def solve_newton(self, objective, solve: Callable, x_start: np.ndarray, pose: BonePose,
                     force_scale: float, detect_at: Optional[np.ndarray] = None,
                     skin_offset: Optional[np.ndarray] = None,
                     iteration_budget: Optional[int] = None, tolerance: Optional[float] = None) -> ContactOutcome:
        """`solve(x0, force_scale) -> NewtonResult` runs the frame's Newton solver on
        `objective`, whose ``contact`` attribute this sets to the AL term of each round. The
        first detection runs at `detect_at` (default x_start): the start moved onto this
        step's bone constraints, so that teeth moved by the jaw are seen where they are.
        `skin_offset` (V,3): the display offset (see the class). `iteration_budget`: stop,
        unconverged, once the rounds have taken this many Newton iterations, the contact region's
        counted at their worth in whole-mesh iterations (the simulator then solves the frame in
        load steps). `tolerance`: the depth and violation at which the rounds
        stop, instead of the response's."""
        tolerance = self.tolerance if tolerance is None else tolerance
        planes, anchors = self.detect(x_start if detect_at is None else detect_at, pose)
        # Per-plane state: multiplier λ (N), penalty boost b (κ = b κ₀), violation before the round (m), anchor (m).
        state = self._fresh_state(planes, anchors, warm=True)
        x, totals, reasons = np.asarray(x_start, dtype=np.float64).copy(), np.zeros(5, np.int64), []
        region_work = 0.0
        converged, depth, violation, rounds, history = False, 0.0, 0.0, 0, []
        try:
            for rounds in range(1, self.max_rounds + 1):
                term = None
                if planes.count:
                    stiffness = state[:, _BOOST] * self.stiffness_factor * self.vertex_stiffness[planes.vertex]
                    term = AugmentedLagrangianContact(self.embedding, planes, state[:, _MULTIPLIER], stiffness,
                                                      hessian_layout=self.hessian_layout, anchors=state[:, _ANCHOR])
                objective.contact = term
                result = solve(x, max(force_scale, self._contact_force_scale(planes, state[:, _MULTIPLIER])))
                x = np.asarray(result.x, dtype=np.float64)
                totals += (result.iterations, result.factorisations, result.krylov_iterations,
                           result.projected_steps, result.region_iterations)
                region_work += result.region_work
                slack = violation = 0.0
                if term is not None:
                    plane_violation = np.maximum(-term.gaps(x), 0.0)
                    updated = term.updated_multipliers(x)
                    violation = float(plane_violation.max())
                    slack = float((np.abs(updated - state[:, _MULTIPLIER]) / term.stiffness).max())   # |min(g, λ/κ)|
                    # Where a round did not cut the violation by PENALTY_GROWTH_TRIGGER, the tissue
                    # there is stiffer than κ allows for (a vertex carried by a tet with pinned
                    # nodes, several planes on one tet): the usual AL remedy is a larger κ. It
                    # changes Hessian values only, never the pattern.
                    stalled = (plane_violation > self.tolerance) & (
                        plane_violation > PENALTY_GROWTH_TRIGGER * state[:, _VIOLATION])
                    state[:, _BOOST] = np.where(stalled, np.minimum(state[:, _BOOST] * PENALTY_GROWTH, MAX_PENALTY_BOOST),
                                                state[:, _BOOST])
                    state[:, _MULTIPLIER], state[:, _VIOLATION] = updated, plane_violation
                detected, anchors = self.detect(x, pose)
                depth = float(detected.depth.max(initial=0.0))
                converged = result.converged and max(violation, slack, depth) <= tolerance
                history.append((planes.count, depth, violation, slack))
                reasons = [] if result.converged else [f"round {rounds}: {result.reason}"]
                planes, state = self._merge(planes, state, state[:, _MULTIPLIER] > 0.0, detected,
                                            self._fresh_state(detected, anchors, warm=False))
                if converged:
                    break
                # A solve that ran out of iterations while still descending goes on in the next
                # round from where it stopped (on ICT's lip animation the frame that switches
                # from the pressed lips to the pucker in one step used up its 50 in the first
                # round and converged in the rounds after); any other failure (no descent,
                # non-finite energy) would only repeat itself.
                if not (result.converged or result.out_of_iterations):
                    break
                if iteration_budget is not None and totals[0] + region_work >= iteration_budget:
                    reasons.append(f"{int(totals[0])} Newton iterations and {int(totals[4])} in the contact region "
                                   f"({region_work:.0f} iterations' worth) in {rounds} rounds reached the budget of "
                                   f"{iteration_budget}")
                    break
        finally:
            objective.contact = None
        multipliers = state[:, _MULTIPLIER]
        self._remember(planes, multipliers)
        if not converged and not reasons:
            reasons.append(f"contacts unresolved after {rounds} rounds: penetration {depth * 1e3:.4f} mm, "
                           f"plane violation {violation * 1e3:.4f} mm > tolerance {tolerance * 1e3:.4f} mm")
        return ContactOutcome(x=x, converged=converged, reason="; ".join(reasons), iterations=int(totals[0]),
                              factorisations=int(totals[1]), krylov_iterations=int(totals[2]), rounds=rounds,
                              contacts=int((multipliers > 0.0).sum()), violation_max=violation, history=history,
                              projected_steps=int(totals[3]), region_iterations=int(totals[4]),
                              **self._finish(x, pose, skin_offset))

    # -------------------------------------------------------------- IPOPT path

    def solve_ipopt(self, objective, constraints, newton_solve: Callable, x_start: np.ndarray, pose: BonePose,
                    force_scale: float, tolerance: float, max_iterations: Optional[int] = None,
                    detect_at: Optional[np.ndarray] = None, skin_offset: Optional[np.ndarray] = None,
                    contact_tolerance: Optional[float] = None) -> ContactOutcome:
        """The same alternation with IPOPT on the planes as linear inequalities (rounds with no
        plane use `newton_solve(x0, force_scale)`, the unconstrained frame). `tolerance`: IPOPT's
        and the Newton solves'; `contact_tolerance`: the depth and violation at which the rounds
        stop (and IPOPT's constraint violation, a tenth of it), instead of the response's, as in
        ``solve_newton``."""
        from .ipopt_solve import DEFAULT_MAX_ITERATIONS, skin_plane_inequalities, solve_with_ipopt
        limit = self.tolerance if contact_tolerance is None else contact_tolerance
        planes = self._fixed(*self.detect(x_start if detect_at is None else detect_at, pose))
        x, totals, reasons = np.asarray(x_start, dtype=np.float64).copy(), np.zeros(4, np.int64), []
        converged, depth, violation, rounds, contacts, history = False, 0.0, 0.0, 0, 0, []
        for rounds in range(1, self.max_rounds + 1):
            if planes.count:
                inequalities = skin_plane_inequalities(constraints, self.embedding, planes)
                result = solve_with_ipopt(
                    objective, constraints, x, inequalities, tolerance=tolerance,
                    max_iterations=max_iterations or DEFAULT_MAX_ITERATIONS,
                    force_scale=max(force_scale, self._contact_force_scale(planes, np.zeros(0))),
                    options={"constr_viol_tol": 0.1 * limit})
                totals[0] += result.iterations
            else:
                result = newton_solve(x, force_scale)
                totals += (result.iterations, result.factorisations, result.krylov_iterations,
                           result.projected_steps)
            x = np.asarray(result.x, dtype=np.float64)
            skin = self.embedding.skin_positions(x)
            gaps = (np.einsum("cd,cd->c", planes.normal, skin[planes.vertex] - planes.point)
                    if planes.count else np.zeros(0))
            violation = float(np.maximum(-gaps, 0.0).max(initial=0.0))
            touching = gaps <= self.tolerance
            contacts = int(touching.sum())
            detected = self._fixed(*self.detect(x, pose))
            depth = float(detected.depth.max(initial=0.0))
            converged = result.converged and max(violation, depth) <= limit
            history.append((planes.count, depth, violation, 0.0))
            if not result.converged:
                reasons.append(f"round {rounds}: {result.reason}")
                break
            planes, _ = self._merge(planes, np.zeros((planes.count, 6)), touching, detected,
                                    np.zeros((detected.count, 6)))
            if converged:
                break
        if not converged and not reasons:
            reasons.append(f"contacts unresolved after {rounds} rounds: penetration {depth * 1e3:.4f} mm, "
                           f"plane violation {violation * 1e3:.4f} mm > tolerance {limit * 1e3:.4f} mm")
        return ContactOutcome(x=x, converged=converged, reason="; ".join(reasons), iterations=int(totals[0]),
                              factorisations=int(totals[1]), krylov_iterations=int(totals[2]), rounds=rounds,
                              contacts=contacts, violation_max=violation, history=history,
                              projected_steps=int(totals[3]), **self._finish(x, pose, skin_offset))

    @staticmethod
    def _fixed(planes: ContactPlanes, anchors: np.ndarray) -> ContactPlanes:
        """The planes with their anchors as points: fixed planes on the embedded skin, for
        IPOPT's linear rows."""
        return ContactPlanes(vertex=planes.vertex, point=anchors, normal=planes.normal, depth=planes.depth,
                             collider=planes.collider)

