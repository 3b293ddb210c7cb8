"""Detection kernels: which skin points are inside a collider, and where they are pushed to.

Every collider surface (teeth proxy, lip patch, external mesh) is a ``SurfaceQuery``: a
``TriangleBVH`` plus the *pseudo-normal* of every triangle feature, stored in the tree's
slot order so the kernel reads them next to the corners. A single branch-and-bound walk
returns, per query point, the closest surface point p, its distance and the pseudo-normal
of the feature (face, edge or corner) p lies on:

* face   – the triangle's normal;
* edge   – the normalised sum of the normals of the faces sharing the edge;
* corner – the angle-weighted vertex normal (Thürmer & Wüthrich 1998).

Bærentzen & Aanæs (2005) show that on a closed, consistently oriented manifold the sign of
pseudo_normal · (x − p) tells inside (< 0) from outside exactly, including at edges and
corners where the plain face normal of the closest triangle can have either sign. That is
the point-in-volume test used for the closed colliders; it needs the closest point anyway,
so inside/outside and the projection cost one walk. On an open patch (a lip) the same sign
says "behind the patch"; there, points whose closest feature is on the patch's open border
are only counted when they lie nearly straight behind it (see ``behind_open_patch``),
because beside the border the sign says nothing.

Candidates are culled first with the collider's bounding box (``indices_in_box``), so only
the few hundred skin vertices near a collider are walked.

The kernels are serial on purpose: a pass handles a few hundred to a few thousand points
(~0.5 µs each), where thread start-up and, on a loaded machine, threads waiting for a core
cost more than the work itself (a parallel version measured 7 ms per call under load
against 0.3 ms serial). Deforming surfaces are refitted by ``_refit_surface`` in one
compiled pass: corners, node boxes bottom-up, and the pseudo-normals.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from ..geometry.bvh import TriangleBVH
from ..geometry.closest_point import nearest_triangle_slot
from ..geometry.mesh_ops import as_query_points, as_triangle_mesh

# Feature codes written by the kernel (corner k = 0..2, edge k joins corner k and k+1).
FEATURE_FACE, FEATURE_EDGE, FEATURE_CORNER = 0, 1, 2


class SurfaceHit(NamedTuple):
    closest: np.ndarray       # (p,3) closest surface point; NaN where nothing is within reach
    distance: np.ndarray      # (p,) distance to it; inf where nothing is within reach
    normal: np.ndarray        # (p,3) unit pseudo-normal of the feature holding the closest point
    triangle: np.ndarray      # (p,) original triangle index; -1 where nothing is within reach
    on_border: np.ndarray     # (p,) bool: the feature lies on an open boundary of the surface

    def signed_side(self, points) -> np.ndarray:
        """(p,) pseudo_normal · (x − p): negative inside / behind the surface."""
        return np.einsum("ij,ij->i", self.normal, points - self.closest)


@njit(cache=True, fastmath=False)
def _feature_of(u, v, w):
    """(feature code, index) of the barycentric position returned by ``_closest_on_triangle``,
    which writes exact 0 and 1 weights on the edge and corner regions."""
    if u == 1.0:
        return FEATURE_CORNER, 0
    if v == 1.0:
        return FEATURE_CORNER, 1
    if w == 1.0:
        return FEATURE_CORNER, 2
    if w == 0.0:
        return FEATURE_EDGE, 0
    if u == 0.0:
        return FEATURE_EDGE, 1
    if v == 0.0:
        return FEATURE_EDGE, 2
    return FEATURE_FACE, 0


@njit(cache=True, fastmath=False)
def _closest_features_kernel(
    points, search_bound_squared, corners, triangle_order, node_first_child, node_start, node_stop,
    node_lower, node_upper, stack_size, face_normal, edge_normal, corner_normal, edge_open, corner_open,
    closest, distance, normal, triangle_index, on_border,
):
    """Fill the outputs (preset to "not found") for every point with a triangle strictly
    closer than sqrt(search_bound_squared)."""
    point_count = points.shape[0]
    if node_start.shape[0] == 0:
        return
    node_stack = np.empty(stack_size, np.int64)
    bound_stack = np.empty(stack_size)
    for point in range(point_count):
        best_squared, best_slot, best_u, best_v, best_w = nearest_triangle_slot(
            points[point, 0], points[point, 1], points[point, 2], search_bound_squared, corners,
            node_first_child, node_start, node_stop, node_lower, node_upper, node_stack, bound_stack)
        if best_slot < 0:
            continue
        distance[point] = math.sqrt(best_squared)
        triangle_index[point] = triangle_order[best_slot]
        for axis in range(3):
            closest[point, axis] = (
                best_u * corners[best_slot, 0, axis]
                + best_v * corners[best_slot, 1, axis]
                + best_w * corners[best_slot, 2, axis]
            )
        feature, which = _feature_of(best_u, best_v, best_w)
        if feature == FEATURE_CORNER:
            for axis in range(3):
                normal[point, axis] = corner_normal[best_slot, which, axis]
            on_border[point] = corner_open[best_slot, which]
        elif feature == FEATURE_EDGE:
            for axis in range(3):
                normal[point, axis] = edge_normal[best_slot, which, axis]
            on_border[point] = edge_open[best_slot, which]
        else:
            for axis in range(3):
                normal[point, axis] = face_normal[best_slot, axis]
            on_border[point] = False


@njit(cache=True, fastmath=False)
def indices_in_box(points, lower, upper):
    """Indices (k,) of the points inside the axis-aligned box [lower, upper]."""
    count = 0
    inside = np.empty(points.shape[0], np.int64)
    for point in range(points.shape[0]):
        keep = True
        for axis in range(3):
            value = points[point, axis]
            if value < lower[axis] or value > upper[axis]:
                keep = False
                break
        if keep:
            inside[count] = point
            count += 1
    return inside[:count].copy()


@njit(cache=True, fastmath=False)
def _unit_in_place(array, row):
    length = math.sqrt(array[row, 0] ** 2 + array[row, 1] ** 2 + array[row, 2] ** 2)
    for axis in range(3):
        array[row, axis] = array[row, axis] / length if length > 0.0 else 0.0


@njit(cache=True, fastmath=False)
def _refit_surface(vertices, slot_triangles, node_first_child, node_start, node_stop, edge_id,
                   edge_count, corners, node_lower, node_upper, face_normal, edge_normal, corner_normal):
    """Corners, node boxes and pseudo-normals of the mesh at new vertex positions.

    Nodes are numbered level by level, so children come after their parent and a reverse
    sweep sees both children before the parent.
    """
    slot_count = slot_triangles.shape[0]
    vertex_count = vertices.shape[0]
    edge_sum = np.zeros((edge_count, 3))
    vertex_sum = np.zeros((vertex_count, 3))
    for slot in range(slot_count):
        for corner in range(3):
            for axis in range(3):
                corners[slot, corner, axis] = vertices[slot_triangles[slot, corner], axis]
        ex = corners[slot, 1, 0] - corners[slot, 0, 0]
        ey = corners[slot, 1, 1] - corners[slot, 0, 1]
        ez = corners[slot, 1, 2] - corners[slot, 0, 2]
        fx = corners[slot, 2, 0] - corners[slot, 0, 0]
        fy = corners[slot, 2, 1] - corners[slot, 0, 1]
        fz = corners[slot, 2, 2] - corners[slot, 0, 2]
        face_normal[slot, 0] = ey * fz - ez * fy
        face_normal[slot, 1] = ez * fx - ex * fz
        face_normal[slot, 2] = ex * fy - ey * fx
        _unit_in_place(face_normal, slot)
        for corner in range(3):
            following, preceding = (corner + 1) % 3, (corner + 2) % 3
            ax = corners[slot, following, 0] - corners[slot, corner, 0]
            ay = corners[slot, following, 1] - corners[slot, corner, 1]
            az = corners[slot, following, 2] - corners[slot, corner, 2]
            bx = corners[slot, preceding, 0] - corners[slot, corner, 0]
            by = corners[slot, preceding, 1] - corners[slot, corner, 1]
            bz = corners[slot, preceding, 2] - corners[slot, corner, 2]
            lengths = math.sqrt((ax * ax + ay * ay + az * az) * (bx * bx + by * by + bz * bz))
            angle = math.acos(min(max((ax * bx + ay * by + az * bz) / lengths, -1.0), 1.0)) if lengths > 0 else 0.0
            vertex = slot_triangles[slot, corner]
            edge = edge_id[3 * slot + corner]
            for axis in range(3):
                vertex_sum[vertex, axis] += angle * face_normal[slot, axis]
                edge_sum[edge, axis] += face_normal[slot, axis]
    for edge in range(edge_count):
        _unit_in_place(edge_sum, edge)
    for vertex in range(vertex_count):
        _unit_in_place(vertex_sum, vertex)
    for slot in range(slot_count):
        for corner in range(3):
            edge = edge_id[3 * slot + corner]
            vertex = slot_triangles[slot, corner]
            for axis in range(3):
                edge_normal[slot, corner, axis] = edge_sum[edge, axis]
                corner_normal[slot, corner, axis] = vertex_sum[vertex, axis]
    for node in range(node_start.shape[0] - 1, -1, -1):
        child = node_first_child[node]
        for axis in range(3):
            if child < 0:
                low, high = np.inf, -np.inf
                for slot in range(node_start[node], node_stop[node]):
                    for corner in range(3):
                        low = min(low, corners[slot, corner, axis])
                        high = max(high, corners[slot, corner, axis])
            else:
                low = min(node_lower[child, axis], node_lower[child + 1, axis])
                high = max(node_upper[child, axis], node_upper[child + 1, axis])
            node_lower[node, axis] = low
            node_upper[node, axis] = high


def unit_rows(vectors):
    """Each row scaled to unit length (zero rows stay zero)."""
    length = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return np.divide(vectors, length, out=np.zeros_like(vectors), where=length > 0)


class SurfaceQuery:
    """A triangle mesh prepared for closest-point-with-pseudo-normal queries.

    Works on closed meshes (point-in-volume by the pseudo-normal sign) and on open patches
    (``on_border`` marks features on the open boundary). ``refit`` moves it onto new vertex
    positions of the same mesh without rebuilding the hierarchy, for deforming surfaces.
    """

    def __init__(self, vertices, triangles):
        vertices, triangles = as_triangle_mesh(vertices, triangles)
        self.triangles = triangles
        self.bvh = TriangleBVH(vertices, triangles)
        slot_triangles = self.bvh.slot_triangles
        self._slot_triangles = np.ascontiguousarray(slot_triangles)
        # Undirected edge k of slot s joins corners k and k+1; its id indexes the unique edges.
        directed = np.stack([slot_triangles, np.roll(slot_triangles, -1, axis=1)], axis=-1).reshape(-1, 2)
        keys = np.sort(directed, axis=1)
        _, edge_id, edge_uses = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        self._edge_id = np.ascontiguousarray(edge_id.reshape(-1), dtype=np.int64)
        self._edge_count = len(edge_uses)
        open_edge = edge_uses == 1
        self.edge_open = np.ascontiguousarray(open_edge[self._edge_id].reshape(-1, 3))
        vertex_on_border = np.zeros(len(vertices), bool)
        vertex_on_border[keys[open_edge[self._edge_id]].ravel()] = True
        self.corner_open = np.ascontiguousarray(vertex_on_border[slot_triangles])
        self.vertex_count = len(vertices)
        # The tree's own arrays are overwritten in place by every refit.
        self.bvh.corners = np.ascontiguousarray(self.bvh.corners)
        self.bvh.node_lower = np.ascontiguousarray(self.bvh.node_lower)
        self.bvh.node_upper = np.ascontiguousarray(self.bvh.node_upper)
        self._update(vertices)

    @property
    def is_closed(self) -> bool:
        return not self.edge_open.any()

    @property
    def lower(self) -> np.ndarray:
        return self.bvh.node_lower[0] if self.bvh.node_count else np.full(3, np.inf)

    @property
    def upper(self) -> np.ndarray:
        return self.bvh.node_upper[0] if self.bvh.node_count else np.full(3, -np.inf)

    def refit(self, vertices) -> None:
        """Follow a deformation of the mesh (same triangles): refit the boxes, redo the normals."""
        vertices = np.ascontiguousarray(vertices, dtype=np.float64)
        if vertices.shape != (self.vertex_count, 3) or not np.all(np.isfinite(vertices)):
            raise ValueError(f"refit needs finite vertices of shape ({self.vertex_count}, 3), got {vertices.shape}")
        self._update(vertices)

    def _update(self, vertices):
        bvh = self.bvh
        slot_count = len(self._slot_triangles)
        if not hasattr(self, "face_normal"):
            self.face_normal = np.zeros((slot_count, 3))
            self.edge_normal = np.zeros((slot_count, 3, 3))
            self.corner_normal = np.zeros((slot_count, 3, 3))
        if slot_count == 0:
            return
        _refit_surface(vertices, self._slot_triangles, bvh.node_first_child, bvh.node_start, bvh.node_stop,
                       self._edge_id, self._edge_count, bvh.corners, bvh.node_lower, bvh.node_upper,
                       self.face_normal, self.edge_normal, self.corner_normal)

    def query(self, points, max_distance: float = np.inf) -> SurfaceHit:
        """Closest point, distance, pseudo-normal and border flag for each point (see ``SurfaceHit``)."""
        points = as_query_points(points)
        count = len(points)
        hit = SurfaceHit(closest=np.full((count, 3), np.nan), distance=np.full(count, np.inf),
                         normal=np.zeros((count, 3)), triangle=np.full(count, -1, np.int64),
                         on_border=np.zeros(count, np.bool_))
        if count == 0:
            return hit
        bound = float(np.nextafter(float(max_distance) ** 2, np.inf))
        bvh = self.bvh
        _closest_features_kernel(
            points, bound, bvh.corners, bvh.triangle_order, bvh.node_first_child, bvh.node_start,
            bvh.node_stop, bvh.node_lower, bvh.node_upper, bvh.traversal_stack_size,
            self.face_normal, self.edge_normal, self.corner_normal, self.edge_open, self.corner_open,
            hit.closest, hit.distance, hit.normal, hit.triangle, hit.on_border,
        )
        return hit


class Penetrations(NamedTuple):
    """Offending points (indices into the queried array) with their tangent planes."""
    index: np.ndarray   # (C,) int64
    point: np.ndarray   # (C,3)
    normal: np.ndarray  # (C,3) unit, towards the allowed side
    depth: np.ndarray   # (C,)

    @staticmethod
    def empty() -> "Penetrations":
        return Penetrations(np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 3)), np.zeros(0))


def plane_normals(points, closest, pseudo_normal):
    """Unit plane normals for points pushed to `closest`: the push direction p − x when it
    leaves through the surface's front, else the surface's own pseudo-normal.

    p − x equals the face normal when p is inside a face and x behind it; it also gives a
    plane through p that x must cross at edges and corners. Where x sits in front of the
    region feature yet inside the volume (a concave spot), p − x would point inwards, so
    the surface normal is used instead.
    """
    push = closest - points
    length = np.linalg.norm(push, axis=1)
    outward = (np.einsum("ij,ij->i", push, pseudo_normal) > 0) & (length > 1e-12)
    normal = pseudo_normal.copy()
    normal[outward] = push[outward] / length[outward, None]
    return unit_rows(normal)


@njit(cache=True, fastmath=False)
def _uncleared(points, lower, cell, shape, clear):
    """Indices of the points not in a cleared cell (points outside the grid are cleared)."""
    keep = np.empty(points.shape[0], np.int64)
    count = 0
    for point in range(points.shape[0]):
        outside_grid = False
        flat = 0
        for axis in range(3):
            index = int(math.floor((points[point, axis] - lower[axis]) / cell))
            if index < 0 or index >= shape[axis]:
                outside_grid = True
                break
            flat = flat * shape[axis] + index
        if not outside_grid and not clear[flat]:
            keep[count] = point
            count += 1
    return keep[:count].copy()


# The largest predictive margin the clearance grids serve; a larger one walks every point in the
# collider's box. It covers the contact's predictive planes (physics/contact_response.py,
# DEFAULT_CONTACT_MARGIN, 2.5 mm; tests/test_detection_queries.py keeps the two together).
CLEARANCE_REACH = 2.5e-3


class ClearanceGrid:
    """Cells of a closed surface's bounding box that lie wholly outside it, by more than `reach`.

    A cell is cleared when its centre is outside the surface by more than the cell's
    half-diagonal plus `reach`, so no point in it can be inside or within `reach` of the
    surface (the predictive margin of ``closed_penetrations``). Most skin points near a
    collider are outside it; they are dropped here with one lookup instead of a tree walk.
    Points outside the grid's box are cleared, so the box is grown by `reach` too.
    """

    def __init__(self, volume: SurfaceQuery, cell: float, max_cells_per_axis: int = 48,
                 reach: float = CLEARANCE_REACH):
        self.reach = float(reach)
        lower, upper = volume.lower - self.reach, volume.upper + self.reach
        cell = max(float(cell), float((upper - lower).max()) / max_cells_per_axis)
        self.shape = np.maximum(np.ceil((upper - lower) / cell).astype(np.int64), 1)
        self.lower = np.ascontiguousarray(lower, dtype=np.float64)
        self.cell = cell
        axes = [self.lower[k] + cell * (np.arange(self.shape[k]) + 0.5) for k in range(3)]
        centres = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        hit = volume.query(centres)
        outside = hit.signed_side(centres) > 0
        self.clear = np.ascontiguousarray(outside & (hit.distance > 0.5 * math.sqrt(3.0) * cell + self.reach))

    def uncleared(self, points, margin: float = 0.0) -> np.ndarray:
        """Indices of the points that may be inside the surface or within `margin` of it
        (all of them when `margin` exceeds the grid's reach)."""
        if margin > self.reach:
            return np.arange(len(points), dtype=np.int64)
        return _uncleared(np.ascontiguousarray(points, dtype=np.float64), self.lower, self.cell,
                          self.shape, self.clear)


def inside_closed(volume: SurfaceQuery, points, max_depth: float = np.inf):
    """(mask (p,), hit) of the points inside the closed surface and at most `max_depth` deep."""
    hit = volume.query(points, max_depth)
    inside = (hit.triangle >= 0) & (hit.signed_side(points) < 0)
    return inside, hit


def behind_open_patch(hit: SurfaceHit, points, border_cone_cos: float) -> np.ndarray:
    """(p,) bool: behind the patch. On the open border only within the cone of half-angle
    acos(border_cone_cos) around the inward normal, since beside the border the sign of the
    one-sided normal does not tell in front from behind."""
    offset = points - hit.closest
    side = np.einsum("ij,ij->i", hit.normal, offset)
    behind = (hit.triangle >= 0) & (side < 0)
    straight = -side >= border_cone_cos * np.linalg.norm(offset, axis=1)
    return behind & (~hit.on_border | straight)


def closed_penetrations(volume: SurfaceQuery, region: SurfaceQuery | None, points,
                        max_depth: float = np.inf, surface_normals: bool = False,
                        margin: float = 0.0) -> Penetrations:
    """Points inside the closed `volume`, each pushed to the closest point of `region`
    (the whole surface when `region` is None).

    With `surface_normals` the plane normal is the region's pseudo-normal at p instead of
    the push direction (``plane_normals``): it can only point where the region faces, which
    is what keeps a lip in front of the teeth even when the closest region point lies
    below or beside it.

    With `margin` > 0, points outside the volume but less than `margin` from the region
    (and in front of its plane there) are returned too, with depth 0: predictive planes,
    which hold a vertex that a solve would otherwise carry into the collider. A point
    outside whose closest region point is farther (e.g. beside the lingual side of a
    teeth proxy) gets none: its plane would lie across the collider.
    """
    if len(points) == 0 or volume.bvh.node_count == 0:
        return Penetrations.empty()
    hit = volume.query(points, max(max_depth, margin))
    side = hit.signed_side(points)
    found = hit.triangle >= 0
    inside = found & (side < 0) & (hit.distance <= max_depth)
    near = found & (side >= 0) & (hit.distance < margin) if margin > 0.0 else np.zeros(len(points), bool)
    index = np.flatnonzero(inside | near)
    if len(index) == 0:
        return Penetrations.empty()
    inner, is_inside = points[index], inside[index]
    if region is not None:
        hit = region.query(inner)
        closest, pseudo, found = hit.closest, hit.normal, hit.triangle >= 0
    else:
        closest, pseudo, found = hit.closest[index], hit.normal[index], np.ones(len(index), bool)
    normal = np.zeros_like(inner)
    normal[found] = (unit_rows(pseudo[found]) if surface_normals
                     else plane_normals(inner[found], closest[found], pseudo[found]))
    signed_depth = np.einsum("ij,ij->i", normal, closest - inner)
    if margin > 0.0:
        reach = np.linalg.norm(closest - inner, axis=1)
        found &= is_inside | ((reach < margin) & (signed_depth <= 0.0))
    index, closest, normal, signed_depth = index[found], closest[found], normal[found], signed_depth[found]
    return Penetrations(index.astype(np.int64), closest, normal, np.maximum(signed_depth, 0.0))


def patch_penetrations(region: SurfaceQuery, points, max_depth: float, border_cone_cos: float,
                       surface_normals: bool = False, margin: float = 0.0) -> Penetrations:
    """Points behind the open patch `region` and within `max_depth` of it, pushed onto it
    (`surface_normals` as in ``closed_penetrations``); with `margin` > 0 also the points in
    front of it and less than `margin` away (depth 0, predictive), by the same border rule.
    Penetrations.index refers to `points`; ``patch_hits`` gives the triangle of each."""
    return patch_hits(region, points, max_depth, border_cone_cos, surface_normals, margin)[0]


def patch_hits(region: SurfaceQuery, points, max_depth: float, border_cone_cos: float,
               surface_normals: bool = False, margin: float = 0.0) -> tuple[Penetrations, np.ndarray]:
    """(``patch_penetrations``'s result, (C,) region triangle holding each plane point)."""
    if len(points) == 0 or region.bvh.node_count == 0:
        return Penetrations.empty(), np.zeros(0, np.int64)
    hit = region.query(points, max(max_depth, margin))
    behind = behind_open_patch(hit, points, border_cone_cos) & (hit.distance <= max_depth)
    if margin > 0.0:
        in_front = behind_open_patch(hit, 2.0 * hit.closest - points, border_cone_cos) & (hit.distance < margin)
        behind = behind | (in_front & ~behind)
    index = np.flatnonzero(behind)
    if len(index) == 0:
        return Penetrations.empty(), np.zeros(0, np.int64)
    inner, closest = points[index], hit.closest[index]
    normal = unit_rows(hit.normal[index]) if surface_normals else plane_normals(inner, closest, hit.normal[index])
    depth = np.maximum(np.einsum("ij,ij->i", normal, closest - inner), 0.0)
    return Penetrations(index.astype(np.int64), closest, normal, depth), hit.triangle[index].astype(np.int64)


def apply_transform(points, transform) -> np.ndarray:
    """Points (p,3) carried by a 4×4 transform. einsum rather than a BLAS product: on a few
    thousand rows the BLAS threads cost more than the product (and spin afterwards)."""
    return np.einsum("ij,pj->pi", transform[:3, :3], points) + transform[:3, 3]


def rotate(vectors, transform) -> np.ndarray:
    """Directions (p,3) rotated by a 4×4 transform's rotation part."""
    return np.einsum("ij,pj->pi", transform[:3, :3], vectors)


def rigid_inverse(transform: np.ndarray) -> np.ndarray:
    """Inverse of a 4×4 rigid transform (rotation transposed), exact for rotations."""
    rotation, translation = transform[:3, :3], transform[:3, 3]
    inverse = np.eye(4)
    inverse[:3, :3] = rotation.T
    inverse[:3, 3] = -rotation.T @ translation
    return inverse


def transformed_box(lower, upper, transform, pad: float = 0.0):
    """World AABB (lower, upper) of the box [lower, upper] carried by the 4×4 `transform`, grown by `pad`."""
    corners = np.array([[x, y, z] for x in (lower[0], upper[0]) for y in (lower[1], upper[1])
                        for z in (lower[2], upper[2])])
    moved = corners @ transform[:3, :3].T + transform[:3, 3]
    return moved.min(0) - pad, moved.max(0) + pad


def candidates_in_box(points, lower, upper) -> np.ndarray:
    """Indices of the points inside [lower, upper] (numba scan, no temporaries)."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    return indices_in_box(points, np.ascontiguousarray(lower, dtype=np.float64),
                          np.ascontiguousarray(upper, dtype=np.float64))
