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

import math

import numpy as np
from numba import njit

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
# Side (m) of the grid cells ForwardRays bins a row's projected triangles in (ICT's incisors are
# ~1 mm thick seen from the front; a cell holds a few dozen triangles).
RAY_GRID_CELL = 1e-3
# A triangle's projected box is widened by this (m) so a line through its edge or corner is
# tested against it whichever of the neighbouring cells it falls in.
_BOX_SLACK = 1e-12


class ForwardRays:
    """Lines along the head's forward axis cast at a closed mesh in a fixed frame (a teeth row
    in its rest frame). The triangles are projected onto the (sideways, up) plane once and
    binned in a uniform grid of ``cell`` (m) squares by their bounding boxes, so a line is
    tested against the triangles of its cell only. Casting every tested lip vertex against all
    of a row's ~4,000 triangles (numpy, chunked) took 24-51 ms per detection of both rows on
    ICT, 8 % of a smooth frame once the contact region was relaxed first (contact_region.py);
    the grid makes it about a millisecond."""

    def __init__(self, vertices: np.ndarray, triangles: np.ndarray, axes: np.ndarray, cell: float = RAY_GRID_CELL):
        vertices = np.asarray(vertices, dtype=np.float64)
        self.axes = np.asarray(axes, dtype=np.float64)
        corners = vertices[np.asarray(triangles, dtype=np.int64)]           # (t,3,3)
        self.flat = np.ascontiguousarray(corners @ self.axes[:2].T)          # (t,3,2) sideways, up
        self.depth = np.ascontiguousarray(corners @ self.axes[2])            # (t,3) forward
        self.lower = self.flat.min(axis=1) - _BOX_SLACK
        self.upper = self.flat.max(axis=1) + _BOX_SLACK
        self.cell = float(cell)
        self.origin = self.lower.min(axis=0) if len(self.lower) else np.zeros(2)
        self.shape = (np.floor((self.upper.max(axis=0, initial=0.0) - self.origin) / self.cell).astype(np.int64) + 1
                      if len(self.lower) else np.ones(2, np.int64))
        first = np.floor((self.lower - self.origin) / self.cell).astype(np.int64)
        last = np.floor((self.upper - self.origin) / self.cell).astype(np.int64)
        counts = (last - first + 1).prod(axis=1)
        triangle = np.repeat(np.arange(len(first)), counts)
        offset = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        width = (last - first + 1)[triangle, 1]
        cell_index = (first[triangle, 0] + offset // width) * self.shape[1] + first[triangle, 1] + offset % width
        order = np.argsort(cell_index, kind="stable")
        self.cell_triangles = triangle[order]
        self.cell_start = np.searchsorted(cell_index[order], np.arange(self.shape.prod() + 1))

    def spans(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(front, rear), each (P,): where the line through each point enters the mesh (its
        largest forward coordinate on the line, m) and where it leaves it (its smallest); NaN
        where the line misses the mesh."""
        plane = np.ascontiguousarray(np.asarray(points, dtype=np.float64).reshape(-1, 3) @ self.axes[:2].T)
        front = np.full(len(plane), np.nan)
        rear = np.full(len(plane), np.nan)
        _cast_forward(plane, self.flat, self.depth, self.lower, self.upper, self.origin, self.cell,
                      self.shape, self.cell_start, self.cell_triangles, front, rear)
        return front, rear


@njit(cache=True)
def _cast_forward(plane, flat, depth, lower, upper, origin, cell, shape, cell_start, cell_triangles, front, rear):
    for i in range(plane.shape[0]):
        px, py = plane[i, 0], plane[i, 1]
        cx = int(math.floor((px - origin[0]) / cell))
        cy = int(math.floor((py - origin[1]) / cell))
        if cx < 0 or cy < 0 or cx >= shape[0] or cy >= shape[1]:
            continue
        slot = cx * shape[1] + cy
        for k in range(cell_start[slot], cell_start[slot + 1]):
            t = cell_triangles[k]
            if px < lower[t, 0] or px > upper[t, 0] or py < lower[t, 1] or py > upper[t, 1]:
                continue
            ax, ay = flat[t, 0, 0], flat[t, 0, 1]
            bx, by = flat[t, 1, 0], flat[t, 1, 1]
            qx, qy = flat[t, 2, 0], flat[t, 2, 1]
            area = (bx - ax) * (qy - ay) - (by - ay) * (qx - ax)
            if abs(area) <= 1e-16:
                continue
            wa = ((bx - px) * (qy - py) - (by - py) * (qx - px)) / area
            wb = ((qx - px) * (ay - py) - (qy - py) * (ax - px)) / area
            wc = 1.0 - wa - wb
            if wa < 0.0 or wb < 0.0 or wc < 0.0:
                continue
            z = wa * depth[t, 0] + wb * depth[t, 1] + wc * depth[t, 2]
            if math.isnan(front[i]) or z > front[i]:
                front[i] = z
            if math.isnan(rear[i]) or z < rear[i]:
                rear[i] = z


def forward_spans(vertices: np.ndarray, triangles: np.ndarray, points: np.ndarray, axes: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(front, rear), each (P,): where the line through each point along ``axes[2]`` (forward)
    enters the closed mesh (its largest forward coordinate on the line, m) and where it leaves
    it (its smallest); NaN where the line misses the mesh. ``axes`` (3,3): the head frame's rows
    (``model_file.model_head_axes``: left, up, forward). One call's ``ForwardRays``; keep one
    of those to cast against the same mesh again."""
    return ForwardRays(vertices, triangles, axes).spans(points)


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
        self.rays = ForwardRays(proxy.vertices, proxy.triangles, self.axes)
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
            _, rear = self.rays.spans(local[candidate])
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
