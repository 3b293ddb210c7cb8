"""Keeping the lips out of the mouth behind the teeth rows (issue 5: no lip vertex ends behind
the teeth).

The projection regions (``teeth.labial_region``) make sure a lip vertex found *inside* a
teeth proxy is never pushed out through its mouth side. A lip can still reach the mouth
without entering a proxy: rolled in over an incisal edge. On ICT's lip animation the lower
lip, rolled in by mouthRollLower and carried up by the closing jaw, went round the edge of
the upper incisors and ended up to 7.6 mm behind them, at their height (docs/collisions.md,
"Behind the teeth on ICT"), where the shape keys themselves put it.

The *shadow* of a row: the points whose line along the head's forward axis passes through the
row and which lie behind the row's last (mouth-side) surface on that line. A tested skin
vertex in the shadow gets a plane that sends it towards the other jaw, past the row's biting
edge at its sideways position: for the upper row below the lowest point of the row's
cross-section there (a lower lip tucked under the upper incisors is held under their edge, as
a bitten lip is), for the lower row above the highest. The normal is the head's up axis
(down for the upper row), so no such plane points into the mouth either.

Tested vertices: the scene's lip vertices that are not in the shadow at rest (the demo head's
inner lip lining runs behind its teeth in the neutral face).
"""
from __future__ import annotations

import numpy as np

from .contacts import BonePose, ContactPlanes
from .detection import apply_transform, rigid_inverse, rotate
from .teeth import TeethProxy

# Sideways spacing (m) of the samples of a row's biting-edge profile, and how far beyond the
# edge the planes sit: twice the contact tolerance, so a vertex the rounds leave as deep as that
# tolerance allows is still off the row's silhouette. With half of it, and the edge interpolated
# linearly between samples, one lower-lip vertex of ICT's lip animation stayed 0.002 mm inside
# the upper incisors' silhouette: 2.2 mm behind their tip on its forward line.
EDGE_SAMPLE_SPACING = 1e-4
EDGE_CLEARANCE = 1e-4
# Rays are tested against the row's triangles in chunks of this many points (memory ~ chunk × triangles).
_RAY_CHUNK = 256


def forward_spans(vertices: np.ndarray, triangles: np.ndarray, points: np.ndarray, axes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(front, rear), each (P,): where the line through each point along ``axes[2]`` (forward)
    enters the closed mesh (its largest forward coordinate on the line, m) and where it leaves
    it (its smallest); NaN where the line misses the mesh. ``axes`` (3,3): the head frame's rows
    (``model_file.model_head_axes``: left, up, forward)."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    forward = axes[2]
    plane = points @ axes[:2].T                                   # (P,2) sideways, up
    corners = vertices[triangles]                                 # (t,3,3)
    flat = corners @ axes[:2].T                                   # (t,3,2)
    depth = corners @ forward                                     # (t,3)
    lower, upper = flat.min(1), flat.max(1)
    front = np.full(len(points), -np.inf)
    rear = np.full(len(points), np.inf)
    for start in range(0, len(points), _RAY_CHUNK):
        chunk = plane[start:start + _RAY_CHUNK]
        near = ((chunk[:, None] >= lower[None] - 1e-12) & (chunk[:, None] <= upper[None] + 1e-12)).all(2)
        rows, tris = np.nonzero(near)
        if not len(rows):
            continue
        a, b, c = flat[tris, 0], flat[tris, 1], flat[tris, 2]
        p = chunk[rows]
        area = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])
        usable = np.abs(area) > 1e-16
        area = np.where(usable, area, 1.0)
        wa = ((b[:, 0] - p[:, 0]) * (c[:, 1] - p[:, 1]) - (b[:, 1] - p[:, 1]) * (c[:, 0] - p[:, 0])) / area
        wb = ((c[:, 0] - p[:, 0]) * (a[:, 1] - p[:, 1]) - (c[:, 1] - p[:, 1]) * (a[:, 0] - p[:, 0])) / area
        wc = 1.0 - wa - wb
        hit = usable & (wa >= 0) & (wb >= 0) & (wc >= 0)
        z = wa * depth[tris, 0] + wb * depth[tris, 1] + wc * depth[tris, 2]
        np.maximum.at(front, start + rows[hit], z[hit])
        np.minimum.at(rear, start + rows[hit], z[hit])
    missed = ~np.isfinite(front)
    front[missed], rear[missed] = np.nan, np.nan
    return front, rear


def cross_section_profile(vertices: np.ndarray, triangles: np.ndarray, axes: np.ndarray, along: int, lowest: bool,
                          spacing: float = EDGE_SAMPLE_SPACING) -> tuple[np.ndarray, np.ndarray]:
    """(sideways samples (S,), extreme (S,)): for each sideways coordinate s (along ``axes[0]``, the
    head's left),
    the lowest (``lowest``) or highest coordinate along ``axes[along]`` of the mesh's
    cross-section at s: with ``along`` 1 (up) the bottom or top of its silhouette seen from the
    front, with 2 (forward) its frontmost point. Exact at the samples, where every triangle
    edge crossing the sample contributes its value (the extreme of a cross-section lies on its
    boundary, which the edges crossing it make up)."""
    sideways, up = vertices @ axes[0], vertices @ axes[along]
    samples = np.arange(sideways.min(), sideways.max() + spacing, spacing)
    extreme = np.full(len(samples), np.inf if lowest else -np.inf)
    reduce_at = np.minimum.at if lowest else np.maximum.at
    edges = np.unique(np.sort(np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]),
                              axis=1), axis=0)
    s0, s1 = sideways[edges[:, 0]], sideways[edges[:, 1]]
    u0, u1 = up[edges[:, 0]], up[edges[:, 1]]
    low, high = np.minimum(s0, s1), np.maximum(s0, s1)
    first = np.searchsorted(samples, low, side="left")
    last = np.searchsorted(samples, high, side="right")
    counts = np.maximum(last - first, 0)
    edge_of = np.repeat(np.arange(len(edges)), counts)
    sample = np.repeat(first, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    span = s1[edge_of] - s0[edge_of]
    fraction = np.where(np.abs(span) > 0, (samples[sample] - s0[edge_of]) / np.where(span == 0, 1.0, span), 0.0)
    reduce_at(extreme, sample, u0[edge_of] + fraction * (u1[edge_of] - u0[edge_of]))
    crossed = np.isfinite(extreme)          # the last sample may lie past the mesh
    return samples[crossed], extreme[crossed]


def interval_bounds(vertices: np.ndarray, axes: np.ndarray, along: int, lowest: bool, samples: np.ndarray,
                    extreme: np.ndarray) -> np.ndarray:
    """(S−1,) for each interval between consecutive samples of ``cross_section_profile``, the
    lowest (``lowest``) or highest value the cross-section's extreme takes anywhere in it. The
    extreme is the lower (upper) envelope of the triangle edges crossing s, linear in s between
    the mesh's vertices, so over an interval it is reached at an end or at a vertex inside:
    the bound is exact, and a point beyond it is off the mesh's silhouette wherever it lies in
    the interval (linear interpolation of the samples is not: a cusp between two samples dips
    below it)."""
    reduce = np.minimum if lowest else np.maximum
    bounds = reduce(extreme[:-1], extreme[1:])
    sideways, values = vertices @ axes[0], vertices @ axes[along]
    interval = np.searchsorted(samples, sideways, side="right") - 1
    inside = (interval >= 0) & (interval < len(bounds))
    reduce.at(bounds, interval[inside], values[inside])
    return bounds


class TeethShadow:
    """The shadow behind one teeth row (module docstring), as a Collider moving with its bone.

    proxy: the row's TeethProxy; axes (3,3): the head frame's rows left, up, forward (rest,
    ``model_file.model_head_axes``);
    tested_vertices: the skin vertices that may not enter the shadow; rest_skin (V,3): the
    neutral skin, whose vertices already in the shadow are left alone.
    """

    def __init__(self, proxy: TeethProxy, axes: np.ndarray, tested_vertices: np.ndarray, rest_skin: np.ndarray):
        self.proxy = proxy
        self.name = f"{proxy.name}_shadow"
        self.axes = np.asarray(axes, dtype=np.float64)
        self.upper = proxy.bone == "skull"
        # The allowed side: below the upper row's edge, above the lower row's.
        self.normal_rest = -self.axes[1] if self.upper else self.axes[1]
        # Per interval of sideways samples: how far the row reaches towards the other jaw, and
        # how far forward (only points behind its frontmost point can be behind its rear: the
        # lips in front are passed over before any ray is cast).
        self.edge_samples, self.edge_height = self._bounds(along=1, lowest=self.upper)
        self.front_samples, self.frontmost = self._bounds(along=2, lowest=False)
        tested = np.asarray(tested_vertices, dtype=np.int64)
        rest_depth = self._depths(np.asarray(rest_skin, dtype=np.float64)[tested])[0]
        self.tested_vertices = tested[~(rest_depth > 0.0)]

    def _bounds(self, along: int, lowest: bool) -> tuple[np.ndarray, np.ndarray]:
        vertices = self.proxy.vertices
        samples, extreme = cross_section_profile(vertices, self.proxy.triangles, self.axes, along, lowest)
        return samples, interval_bounds(vertices, self.axes, along, lowest, samples, extreme)

    @staticmethod
    def _in_interval(samples: np.ndarray, bounds: np.ndarray, sideways: np.ndarray) -> np.ndarray:
        return bounds[np.clip(np.searchsorted(samples, sideways, side="right") - 1, 0, len(bounds) - 1)]

    def transform(self, pose: BonePose) -> np.ndarray:
        return np.asarray(pose.skull if self.upper else pose.jaw, dtype=np.float64)

    def _depths(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(depth (P,), target height (P,)) of points in the row's rest frame: how far past the
        biting edge's plane (the edge's bound over the point's sideways interval, less
        EDGE_CLEARANCE towards the other jaw) a point in the shadow lies; NaN for points not in
        the shadow."""
        sideways, up, forward = local @ self.axes[0], local @ self.axes[1], local @ self.axes[2]
        inside = (sideways >= self.edge_samples[0]) & (sideways <= self.edge_samples[-1])
        edge = self._in_interval(self.edge_samples, self.edge_height, sideways)
        target = edge - EDGE_CLEARANCE if self.upper else edge + EDGE_CLEARANCE
        beyond = (up - target) if self.upper else (target - up)
        depth = np.full(len(local), np.nan)
        frontmost = self._in_interval(self.front_samples, self.frontmost, sideways)
        candidate = np.flatnonzero(inside & (beyond > 0.0) & (forward < frontmost))
        if len(candidate):
            _, rear = forward_spans(self.proxy.vertices, self.proxy.triangles, local[candidate], self.axes)
            behind = np.isfinite(rear) & (forward[candidate] < rear)
            depth[candidate[behind]] = beyond[candidate[behind]]
        return depth, target

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes:
        """Planes for the tested vertices in the shadow. `margin` is accepted for the Collider
        protocol and not used: a vertex nearing the shadow comes round the biting edge, where
        the teeth proxy's own predictive planes already hold it."""
        if not len(self.tested_vertices):
            return ContactPlanes.empty()
        transform = self.transform(pose)
        local = apply_transform(np.asarray(skin_positions, dtype=np.float64)[self.tested_vertices],
                                rigid_inverse(transform))
        depth, target = self._depths(local)
        found = np.flatnonzero(np.isfinite(depth))
        if not len(found):
            return ContactPlanes.empty()
        point = local[found] + (target[found] - local[found] @ self.axes[1])[:, None] * self.axes[1]
        return ContactPlanes(vertex=self.tested_vertices[found], point=apply_transform(point, transform),
                             normal=rotate(np.tile(self.normal_rest, (len(found), 1)), transform),
                             depth=depth[found], collider=np.full(len(found), collider_index, np.int64))
