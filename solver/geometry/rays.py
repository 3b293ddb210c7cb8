"""The first triangle each ray meets: Möller–Trumbore on the triangles of a bounding volume
hierarchy's leaves that the ray reaches nearer than the best hit so far.

One kernel for every ray cast in the project: the model builder's landmarks, muscles and mouth
cut, the teeth's crossing test of every contact frame's display projection, and the shell's
shape diameter (shell/depth.py). The numpy loop the crossing test used before (one vectorised
pass over all triangles per ray) took 61–68 ms for 300 rays against ICT's 4,000-triangle
upper-teeth proxy, a quarter of a second of each contact frame (docs/benchmarks.md); the same
rays take 0.1 ms through the proxy's kept hierarchy (whose build alone is 10 ms: keep it).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .bvh import TriangleBVH
from .mesh_ops import as_query_points, as_triangle_mesh

# Below this many rays a call without a kept hierarchy tests every triangle (one leaf holding them
# all) instead of building one: a TriangleBVH costs ~2.5 µs a triangle to build, a ray ~15 ns a
# triangle to test without one (ICT's 4,000-triangle teeth proxy: 9.8 ms against 19 ms for 300
# rays; the model builder's muscle placement casts 124 single rays at the whole skin).
HIERARCHY_RAYS = 150
# A ray along a shared edge (a mirror-symmetric mesh's midline) must not slip between the two
# triangles, so the inside test is slightly generous.
_EDGE_TOLERANCE = 1e-9


def first_ray_hits(vertices, triangles, origins, direction, bvh: TriangleBVH | None = None):
    """Nearest intersection of each ray ``origin + t·direction`` (t > 0) with the mesh;
    `direction` is one (3,) vector for every ray or one per ray (r,3). `bvh`: the mesh's
    TriangleBVH when the caller keeps one (built here otherwise).

    Returns (t (r,), triangle index (r,), barycentric (r,3)); t is inf, the index −1 and the
    barycentric NaN for rays that miss. Of equally near hits the lowest triangle index wins.
    """
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    origins = as_query_points(origins)
    directions = np.ascontiguousarray(np.broadcast_to(np.asarray(direction, dtype=np.float64), origins.shape))
    if bvh is None:
        bvh = TriangleBVH(vertices, triangles) if len(origins) >= HIERARCHY_RAYS else _OneLeaf(vertices, triangles)
    elif bvh.triangle_count != len(triangles) or bvh.vertex_count != len(vertices):
        raise ValueError(f"bvh: built over {bvh.triangle_count} triangles and {bvh.vertex_count} vertices, "
                         f"the mesh has {len(triangles)} and {len(vertices)}")
    distances = np.full(len(origins), np.inf)
    hit_triangle = np.full(len(origins), -1, dtype=np.int64)
    barycentric = np.full((len(origins), 3), np.nan)
    _first_hits(origins, directions, bvh.corners, bvh.triangle_order, bvh.node_first_child, bvh.node_start,
                bvh.node_stop, bvh.node_lower, bvh.node_upper, bvh.traversal_stack_size,
                distances, hit_triangle, barycentric)
    return distances, hit_triangle, barycentric


class _OneLeaf:
    """The layout of a TriangleBVH with a single leaf holding every triangle in mesh order: the
    ray kernel then tests them all, with nothing to build."""

    def __init__(self, vertices, triangles):
        self.corners = np.take(vertices, triangles, axis=0)
        self.triangle_order = np.arange(len(triangles), dtype=np.int64)
        self.node_first_child = np.full(1 if len(triangles) else 0, -1, dtype=np.int64)
        self.node_start = np.zeros(1, dtype=np.int64)
        self.node_stop = np.full(1, len(triangles), dtype=np.int64)
        # An unbounded box: every ray reaches the leaf (a tight box would cost more than it culls).
        self.node_lower = np.full((1, 3), -np.inf)
        self.node_upper = np.full((1, 3), np.inf)
        self.traversal_stack_size = 2


@njit(cache=True, fastmath=False, parallel=True)
def _first_hits(origins, directions, corners, triangle_order, first_child, node_start, node_stop, lower, upper,
                stack_size, distances, hit_triangle, barycentric):
    for ray in prange(origins.shape[0]):
        ox, oy, oz = origins[ray, 0], origins[ray, 1], origins[ray, 2]
        dx, dy, dz = directions[ray, 0], directions[ray, 1], directions[ray, 2]
        ix = 1.0 / dx if dx != 0.0 else 1e300
        iy = 1.0 / dy if dy != 0.0 else 1e300
        iz = 1.0 / dz if dz != 0.0 else 1e300
        best_t, best, best_u, best_v = np.inf, -1, 0.0, 0.0
        stack = np.empty(stack_size, np.int64)
        top = 0
        if first_child.shape[0] > 0:
            stack[0] = 0
            top = 1
        while top > 0:
            top -= 1
            node = stack[top]
            if _ray_box(ox, oy, oz, ix, iy, iz, lower, upper, node, best_t) == np.inf:
                continue
            child = first_child[node]
            if child >= 0:
                stack[top] = child
                stack[top + 1] = child + 1
                top += 2
                continue
            for slot in range(node_start[node], node_stop[node]):
                t, u, v = _ray_triangle(ox, oy, oz, dx, dy, dz, corners, slot)
                triangle = triangle_order[slot]
                if t < best_t or (t == best_t and t < np.inf and triangle < best):
                    best_t, best, best_u, best_v = t, triangle, u, v
        if best >= 0:
            distances[ray], hit_triangle[ray] = best_t, best
            barycentric[ray, 0], barycentric[ray, 1], barycentric[ray, 2] = 1.0 - best_u - best_v, best_u, best_v


@njit(cache=True, fastmath=False)
def _ray_triangle(ox, oy, oz, dx, dy, dz, corners, slot):
    """(t, u, v) of the ray's hit on triangle `slot` (Möller–Trumbore), t = inf on a miss or t ≤ 0."""
    ax, ay, az = corners[slot, 0, 0], corners[slot, 0, 1], corners[slot, 0, 2]
    e1x, e1y, e1z = corners[slot, 1, 0] - ax, corners[slot, 1, 1] - ay, corners[slot, 1, 2] - az
    e2x, e2y, e2z = corners[slot, 2, 0] - ax, corners[slot, 2, 1] - ay, corners[slot, 2, 2] - az
    # p = d × e2, det = e1 · p; a ray in the triangle's plane (or a triangle of no area) misses.
    px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
    determinant = e1x * px + e1y * py + e1z * pz
    if abs(determinant) < 1e-300:
        return np.inf, 0.0, 0.0
    inverse = 1.0 / determinant
    sx, sy, sz = ox - ax, oy - ay, oz - az
    u = (sx * px + sy * py + sz * pz) * inverse
    if u < -_EDGE_TOLERANCE or u > 1.0 + _EDGE_TOLERANCE:
        return np.inf, 0.0, 0.0
    # q = s × e1
    qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
    v = (qx * dx + qy * dy + qz * dz) * inverse
    if v < -_EDGE_TOLERANCE or u + v > 1.0 + _EDGE_TOLERANCE:
        return np.inf, 0.0, 0.0
    t = (qx * e2x + qy * e2y + qz * e2z) * inverse
    return (t, u, v) if t > 0.0 else (np.inf, 0.0, 0.0)


@njit(cache=True)
def _ray_box(ox, oy, oz, ix, iy, iz, lower, upper, node, best):
    """Entry distance of the ray into a node's box, or inf when it misses or enters beyond `best`."""
    near, far = 0.0, best
    for axis in range(3):
        o = ox if axis == 0 else (oy if axis == 1 else oz)
        inv = ix if axis == 0 else (iy if axis == 1 else iz)
        t0 = (lower[node, axis] - o) * inv
        t1 = (upper[node, axis] - o) * inv
        if t0 > t1:
            t0, t1 = t1, t0
        if t0 > near:
            near = t0
        if t1 < far:
            far = t1
        if near > far:
            return np.inf
    return near
