"""Isotropic remeshing of a rig's skin to a chosen triangle count (paper 001 §4.4).

Botsch & Kobbelt's scheme ("A remeshing approach to multiresolution modeling", 2004): from
the wanted triangle count a target edge length L is derived (equilateral triangles tiling
the surface area), then each iteration

1. splits every edge longer than 4/3 L at its midpoint,
2. collapses every edge shorter than 4/5 L when that creates no edge longer than 4/3 L,
   no folded triangle and no non-manifold vertex (link condition),
3. flips edges where that brings the four vertices' valences nearer 6 (4 on a boundary),
4. moves every vertex tangentially towards the area-weighted centroid of its triangles and
   projects it back onto the original surface (closest point, solver/geometry).

Boundary loops (a neck cut, an open mouth slit, eye holes) stay what they are: a boundary
vertex lives on its own original loop as an arc-length parameter, so it can only slide
along that loop, never jump to another loop or across a slit; boundary edges are only split
or collapsed along the loop, an interior edge joining two boundary vertices is never
collapsed (that would pinch the surface), and no loop is allowed to fall below
``MIN_LOOP_VERTICES`` (4) vertices, so the number of loops never changes. After the iterations
the count is brought to the requested one exactly (±1) by collapsing the shortest or
splitting the longest edges, followed by clean-up flips and relaxation.

The kernels (remesh_kernels.py) hold the mesh as a corner table: triangle t has half-edges 3t+k from corner k to corner
k+1, ``twin[h]`` is the half-edge across (−1 on a boundary), ``out_edge[v]`` one half-edge
leaving v — for a boundary vertex always the one on the boundary, so that walking round a
vertex covers its whole fan. Split, collapse and flip are sequential numba loops in a fixed
order, so the result is deterministic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from solver.geometry.closest_point import ClosestPointTree
from solver.geometry.mesh_ops import as_triangle_mesh, triangle_normals_areas, vertex_normals

from .remesh_kernels import (collapse_listed, collapse_pass, flip_pass, loop_point, split_listed, split_pass)

DEFAULT_TRIANGLE_COUNT = 4000
_ITERATIONS = 12
_CLEANUP_ITERATIONS = 4
_RELAX_STEP = 0.5
# A relaxed vertex whose projection lands farther than this share of L from it, or on
# surface facing the other way, stays where it was: it would have jumped to another sheet
# (the other lip of a closed mouth).
_MAX_PROJECTION_SHARE = 0.5
# Matching the count exactly may make edges up to this many L long; relaxation evens them out.
_MATCH_MAX_EDGE = 2.0


@dataclass(frozen=True)
class RemeshResult:
    vertices: np.ndarray          # (n,3) on the original surface
    triangles: np.ndarray         # (m,3) int64, same orientation as the input
    target_edge_length: float     # the L of the last iteration
    seconds: float


# --------------------------------------------------------------------------- driver

class _BoundaryLoops:
    """The input's boundary loops as closed polylines (first point repeated at the end),
    with the arc length of every point from the loop's start."""

    def __init__(self, vertices: np.ndarray, loops: list[np.ndarray]):
        closed = [np.append(loop, loop[0]) for loop in loops]
        self.count = len(loops)
        self.offsets = np.concatenate([[0], np.cumsum([len(c) for c in closed])]).astype(np.int64)
        self.points = vertices[np.concatenate(closed)] if loops else np.zeros((0, 3))
        arcs = []
        for c in closed:
            steps = np.linalg.norm(np.diff(vertices[c], axis=0), axis=1)
            arcs.append(np.concatenate([[0.0], np.cumsum(steps)]))
        self.arc = np.concatenate(arcs) if loops else np.zeros(0)
        self.perimeters = np.array([a[-1] for a in arcs])

    def positions(self, loop_of: np.ndarray, arc: np.ndarray) -> np.ndarray:
        """Points at arc length `arc` on loops `loop_of` (all entries must be boundary vertices)."""
        out = np.empty((len(loop_of), 3))
        for index in range(len(loop_of)):
            loop_point(self.offsets, self.points, self.arc, loop_of[index], arc[index], out, index)
        return out


def half_edge_twins(triangles: np.ndarray, vertex_count: int) -> np.ndarray:
    """twin[3t+k] for the half-edge from corner k to k+1 of triangle t; −1 on the boundary.
    Raises ValueError on a non-manifold or inconsistently oriented mesh."""
    tails = triangles.ravel()
    heads = triangles[:, [1, 2, 0]].ravel()
    keys = tails * vertex_count + heads
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if len(sorted_keys) > 1 and np.any(sorted_keys[1:] == sorted_keys[:-1]):
        raise ValueError("the mesh is non-manifold or inconsistently oriented: an edge is used twice in the same "
                         "direction (Blender: Mesh > Normals > Recalculate Outside; Select > Non-Manifold)")
    reverse = heads * vertex_count + tails
    slot = np.minimum(np.searchsorted(sorted_keys, reverse), len(keys) - 1)
    found = sorted_keys[slot] == reverse
    return np.where(found, order[slot], -1).astype(np.int64)


def boundary_loops(triangles, vertex_count: int) -> list[np.ndarray]:
    """Ordered vertex loops of the boundary, each following the triangles' orientation,
    each starting at its smallest vertex index, sorted by that index."""
    triangles = np.asarray(triangles, dtype=np.int64)
    twin = half_edge_twins(triangles, vertex_count)
    open_edges = np.flatnonzero(twin < 0)
    tails = triangles.ravel()[open_edges]
    heads = triangles[:, [1, 2, 0]].ravel()[open_edges]
    if len(np.unique(tails)) != len(tails):
        raise ValueError("a vertex lies on the boundary twice (two holes touch at a vertex); separate them first")
    following = dict(zip(tails.tolist(), heads.tolist()))
    loops, seen = [], set()
    for start in sorted(following):
        if start in seen:
            continue
        loop = [start]
        seen.add(start)
        vertex = following[start]
        while vertex != start:
            loop.append(vertex)
            seen.add(vertex)
            vertex = following[vertex]
        loops.append(np.array(loop, dtype=np.int64))
    return loops


def weld_coincident(vertices, triangles, tolerance: float):
    """Merge vertices closer than `tolerance` (parts exported as separate pieces with
    coincident seams). Returns (vertices, triangles, welded index of every input vertex);
    triangles that lose a corner to the merge are dropped."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    vertices, triangles = as_triangle_mesh(vertices, triangles)
    pairs = cKDTree(vertices).query_pairs(tolerance, output_type="ndarray")
    if len(pairs) == 0:
        return vertices, triangles, np.arange(len(vertices))
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(len(vertices),) * 2)
    _, label = connected_components(graph, directed=False)
    # Number the groups by their first vertex so the order of the input is kept.
    _, first, inverse = np.unique(label, return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    welded_index = rank[inverse]
    welded = vertices[np.sort(first)]
    merged = welded_index[triangles]
    keep = (merged[:, 0] != merged[:, 1]) & (merged[:, 1] != merged[:, 2]) & (merged[:, 2] != merged[:, 0])
    return welded, merged[keep], welded_index


class _Remesher:
    def __init__(self, vertices: np.ndarray, triangles: np.ndarray):
        loops = boundary_loops(triangles, len(vertices))
        self.loops = _BoundaryLoops(vertices, loops)
        self.tree = ClosestPointTree(vertices, triangles)
        self.surface_normals, _ = triangle_normals_areas(vertices, triangles)
        self.pos = vertices.copy()
        self.tri = triangles.copy()
        self.loop_of = np.full(len(vertices), -1, np.int64)
        self.arc = np.zeros(len(vertices))
        for index, loop in enumerate(loops):
            first = self.loops.offsets[index]
            self.loop_of[loop] = index
            self.arc[loop] = self.loops.arc[first:first + len(loop)]

    # ---------------------------------------------------------------- one corner table per iteration
    def _table(self, wanted: int):
        vertex_count, triangle_count = len(self.pos), len(self.tri)
        triangle_capacity = 4 * max(triangle_count, 4 * wanted) + 16
        vertex_capacity = vertex_count + triangle_capacity
        tri = np.full((triangle_capacity, 3), -1, np.int64)
        tri[:triangle_count] = self.tri
        twin = np.full(3 * triangle_capacity, -1, np.int64)
        twin[:3 * triangle_count] = half_edge_twins(self.tri, vertex_count)
        pos = np.zeros((vertex_capacity, 3))
        pos[:vertex_count] = self.pos
        loop_of = np.full(vertex_capacity, -1, np.int64)
        loop_of[:vertex_count] = self.loop_of
        arc = np.zeros(vertex_capacity)
        arc[:vertex_count] = self.arc
        tails = self.tri.ravel()
        halves = np.arange(3 * triangle_count)
        out_edge = np.full(vertex_capacity, -1, np.int64)
        # Deterministic choice: the first half-edge leaving each vertex, the boundary one if any.
        order = np.lexsort((halves, tails))
        unique_tails, first = np.unique(tails[order], return_index=True)
        out_edge[unique_tails] = halves[order][first]
        open_halves = halves[twin[:3 * triangle_count] < 0]
        out_edge[tails[open_halves]] = open_halves
        valence = np.zeros(vertex_capacity, np.int64)
        valence[:vertex_count] = np.bincount(tails, minlength=vertex_count) + (self.loop_of >= 0)
        loop_size = np.bincount(self.loop_of[self.loop_of >= 0], minlength=max(self.loops.count, 1)).astype(np.int64)
        counts = np.array([vertex_count, triangle_count], np.int64)
        return dict(tri=tri, twin=twin, out_edge=out_edge, valence=valence, pos=pos, loop_of=loop_of, arc=arc,
                    loop_size=loop_size, counts=counts)

    def _compact(self, table) -> None:
        vertex_count, triangle_count = table["counts"]
        tri = table["tri"][:triangle_count]
        tri = tri[tri[:, 0] >= 0]
        alive = np.zeros(vertex_count, bool)
        alive[tri.ravel()] = True
        new_index = np.cumsum(alive) - 1
        self.tri = new_index[tri]
        self.pos = table["pos"][:vertex_count][alive]
        self.loop_of = table["loop_of"][:vertex_count][alive]
        self.arc = table["arc"][:vertex_count][alive]

    def _operate(self, edge_length: float, wanted: int, split_collapse: bool = True) -> None:
        table = self._table(wanted)
        t = table
        loop_arrays = (self.loops.offsets, self.loops.points, self.loops.arc)
        if split_collapse:
            split_pass(4.0 / 3.0 * edge_length, t["tri"], t["twin"], t["out_edge"], t["valence"], t["pos"],
                        t["loop_of"], t["arc"], t["loop_size"], t["counts"], *loop_arrays, len(t["tri"]) - 2)
            collapse_pass(0.8 * edge_length, 4.0 / 3.0 * edge_length, t["tri"], t["twin"], t["out_edge"],
                           t["valence"], t["pos"], t["loop_of"], t["loop_size"], t["counts"])
        flip_pass(t["tri"], t["twin"], t["out_edge"], t["valence"], t["pos"], t["loop_of"], t["counts"], False)
        if not split_collapse:
            # Clean-up: after the valences, flips that only widen the smallest angles.
            flip_pass(t["tri"], t["twin"], t["out_edge"], t["valence"], t["pos"], t["loop_of"], t["counts"], True)
        self._compact(table)

    def _match_count(self, edge_length: float, wanted: int) -> None:
        """Collapse the shortest or split the longest edges until the count is `wanted` (±1)."""
        surplus = len(self.tri) - wanted
        if surplus == 0:
            return
        t = self._table(wanted)
        twin = t["twin"][:3 * len(self.tri)]
        halves = np.flatnonzero((twin < 0) | (twin > np.arange(len(twin))))
        lengths = np.linalg.norm(self.pos[self.tri.ravel()[halves]] - self.pos[self.tri[:, [1, 2, 0]].ravel()[halves]],
                                 axis=1)
        if surplus > 0:
            candidates = halves[np.argsort(lengths, kind="stable")]
            collapse_listed(candidates, surplus, t["tri"], t["twin"], t["out_edge"], t["valence"], t["pos"],
                             t["loop_of"], t["loop_size"], _MATCH_MAX_EDGE * edge_length)
        else:
            candidates = halves[np.argsort(-lengths, kind="stable")]
            split_listed(candidates, -surplus, t["tri"], t["twin"], t["out_edge"], t["valence"], t["pos"],
                          t["loop_of"], t["arc"], t["loop_size"], t["counts"],
                          self.loops.offsets, self.loops.points, self.loops.arc)
        self._compact(t)

    def _relax(self, edge_length: float) -> None:
        """Tangential smoothing towards the area-weighted triangle centroids, then back onto the surface;
        boundary vertices slide along their loop towards the middle of their two boundary neighbours."""
        pos, tri = self.pos, self.tri
        corners = pos[tri]
        centroids = corners.mean(axis=1)
        _, areas = triangle_normals_areas(pos, tri)
        weight = np.bincount(tri.ravel(), weights=np.repeat(areas, 3), minlength=len(pos))
        target = np.stack([np.bincount(tri.ravel(), weights=np.repeat(areas * centroids[:, axis], 3), minlength=len(pos))
                           for axis in range(3)], axis=1) / np.maximum(weight, 1e-300)[:, None]
        normals = vertex_normals(pos, tri)
        step = target - pos
        step -= np.einsum("ij,ij->i", step, normals)[:, None] * normals
        moved = pos + _RELAX_STEP * step
        interior = self.loop_of < 0
        found = self.tree.query(moved[interior], max_distance=_MAX_PROJECTION_SHARE * edge_length)
        facing = np.zeros(len(found.distance), bool)
        hit = found.triangle_index >= 0
        facing[hit] = np.einsum("ij,ij->i", self.surface_normals[found.triangle_index[hit]], normals[interior][hit]) > 0.0
        new_pos = pos.copy()
        interior_rows = np.flatnonzero(interior)
        new_pos[interior_rows[facing]] = found.closest[facing]
        boundary = ~interior
        if boundary.any():
            twin = half_edge_twins(tri, len(pos))
            open_halves = np.flatnonzero(twin < 0)
            tails, heads = tri.ravel()[open_halves], tri[:, [1, 2, 0]].ravel()[open_halves]
            following = np.full(len(pos), -1)
            preceding = np.full(len(pos), -1)
            following[tails], preceding[heads] = heads, tails
            rows = np.flatnonzero(boundary)
            perimeter = self.loops.perimeters[self.loop_of[rows]]
            offset_next = _wrapped(self.arc[following[rows]] - self.arc[rows], perimeter)
            offset_prev = _wrapped(self.arc[preceding[rows]] - self.arc[rows], perimeter)
            self.arc[rows] = (self.arc[rows] + _RELAX_STEP * 0.5 * (offset_next + offset_prev)) % perimeter
            new_pos[rows] = self.loops.positions(self.loop_of[rows], self.arc[rows])
        self.pos = new_pos

    def run(self, wanted: int) -> float:
        area = triangle_normals_areas(self.pos, self.tri)[1].sum()
        edge_length = float(np.sqrt(4.0 * area / (np.sqrt(3.0) * wanted)))
        for iteration in range(_ITERATIONS):
            self._operate(edge_length, wanted)
            self._relax(edge_length)
            self._relax(edge_length)
            if iteration in (3, 6, 9):
                # Boundaries and curvature make the equilateral estimate off by a few per cent.
                edge_length *= float(np.sqrt(len(self.tri) / wanted))
        for _ in range(3):
            self._match_count(edge_length, wanted)
            for _ in range(_CLEANUP_ITERATIONS // 2):
                self._operate(edge_length, wanted, split_collapse=False)
                self._relax(edge_length)
            if abs(len(self.tri) - wanted) <= 1:
                break
        return edge_length


def _wrapped(offset: np.ndarray, perimeter: np.ndarray) -> np.ndarray:
    """Arc-length offsets brought into (−P/2, P/2]."""
    return offset - perimeter * np.round(offset / perimeter)


def remesh_isotropic(vertices, triangles, triangle_count: int = DEFAULT_TRIANGLE_COUNT) -> RemeshResult:
    """Remesh a manifold triangle mesh to about `triangle_count` (±1) near-equilateral triangles on
    the same surface, its boundary loops kept (see the module's docstring)."""
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    if not int(triangle_count) >= 8:
        raise ValueError(f"triangle_count must be at least 8, got {triangle_count}")
    start = time.perf_counter()
    remesher = _Remesher(vertices, triangles)
    edge_length = remesher.run(int(triangle_count))
    return RemeshResult(vertices=remesher.pos, triangles=remesher.tri, target_edge_length=edge_length,
                        seconds=time.perf_counter() - start)


def remesh_skin(vertices, triangles, triangle_count: int = DEFAULT_TRIANGLE_COUNT) -> RemeshResult:
    """`remesh_isotropic` of a rig's skin after welding coincident vertices (parts exported as
    separate pieces along seams), so that the coarse shell is one connected sheet where the
    skin is."""
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    extent = float(np.ptp(vertices, axis=0).max())
    welded, welded_triangles, _ = weld_coincident(vertices, triangles, 1e-7 * extent)
    return remesh_isotropic(welded, welded_triangles, triangle_count)


def mesh_quality(vertices, triangles, reference_vertices, reference_triangles) -> dict:
    """Triangle count, angles (degrees) and the two-sided Hausdorff distance to a reference surface
    (sampled at the vertices, edge midpoints and centroids of both meshes), in the input's units."""
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    reference_vertices, reference_triangles = as_triangle_mesh(reference_vertices, reference_triangles)
    corners = vertices[triangles]
    angles = []
    for k in range(3):
        u = corners[:, (k + 1) % 3] - corners[:, k]
        v = corners[:, (k + 2) % 3] - corners[:, k]
        cosine = np.einsum("ij,ij->i", u, v) / (np.linalg.norm(u, axis=1) * np.linalg.norm(v, axis=1))
        angles.append(np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0))))
    smallest = np.min(angles, axis=0)

    def samples(points, tris):
        c = points[tris]
        return np.concatenate([points, c.mean(axis=1), 0.5 * (c + c[:, [1, 2, 0]]).reshape(-1, 3)])

    to_reference = ClosestPointTree(reference_vertices, reference_triangles).query(samples(vertices, triangles)).distance
    to_mesh = ClosestPointTree(vertices, triangles).query(samples(reference_vertices, reference_triangles)).distance
    return {
        "triangles": len(triangles),
        "vertices": len(vertices),
        "min_angle_deg": float(smallest.min()),
        "mean_min_angle_deg": float(smallest.mean()),
        "share_min_angle_below_30": float(np.mean(smallest < 30.0)),
        "hausdorff": float(max(to_reference.max(), to_mesh.max())),
        "mean_distance": float(0.5 * (to_reference.mean() + to_mesh.mean())),
    }
