"""The first triangle each ray meets: Möller–Trumbore against every triangle, compiled.

For a few hundred rays against a mesh of a few thousand triangles (placing landmarks and atlas
points, cutting the mouth, and the lip vertices the teeth's crossing test sweeps every contact
frame), a loop over the triangles beats building a hierarchy. The numpy version of the same
loop (one vectorised pass over the triangles per ray) took 61–68 ms for 300 rays against ICT's
4,000-triangle upper-teeth proxy; compiled, 19 ms on one thread and 10 on two (idle machine;
where it sits in a contact frame: docs/benchmarks.md).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .mesh_ops import as_query_points, as_triangle_mesh

# A ray along a shared edge (a mirror-symmetric mesh's midline) must not slip between the two
# triangles, so the inside test is slightly generous.
_EDGE_TOLERANCE = 1e-9
# |det| at or below this: the ray is parallel to the triangle's plane (no hit).
_PARALLEL_DETERMINANT = 1e-18


def first_ray_hits(vertices, triangles, origins, direction):
    """Nearest intersection of each ray ``origin + t·direction`` (t > 0) with the mesh;
    `direction` is one (3,) vector for every ray or one per ray (r,3).

    Returns (t (r,), triangle index (r,), barycentric (r,3)); t is inf, the index −1 and the
    barycentric NaN for rays that miss. Of equally near hits the lowest triangle index wins.
    """
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    origins = as_query_points(origins)
    directions = np.ascontiguousarray(np.broadcast_to(np.asarray(direction, dtype=np.float64), origins.shape))
    distances = np.full(len(origins), np.inf)
    hit_triangle = np.full(len(origins), -1, dtype=np.int64)
    barycentric = np.full((len(origins), 3), np.nan)
    _first_hits(vertices, triangles, origins, directions, distances, hit_triangle, barycentric)
    return distances, hit_triangle, barycentric


@njit(cache=True, fastmath=False)
def _corner_and_edges(vertices, triangles):
    """(T,9): each triangle's first corner a and edges e1 = b − a, e2 = c − a, side by side."""
    frames = np.empty((triangles.shape[0], 9))
    for triangle in range(triangles.shape[0]):
        a, b, c = triangles[triangle, 0], triangles[triangle, 1], triangles[triangle, 2]
        for axis in range(3):
            frames[triangle, axis] = vertices[a, axis]
            frames[triangle, 3 + axis] = vertices[b, axis] - vertices[a, axis]
            frames[triangle, 6 + axis] = vertices[c, axis] - vertices[a, axis]
    return frames


@njit(cache=True, fastmath=False, parallel=True)
def _first_hits(vertices, triangles, origins, directions, distances, hit_triangle, barycentric):
    frames = _corner_and_edges(vertices, triangles)
    for ray in prange(origins.shape[0]):
        ox, oy, oz = origins[ray, 0], origins[ray, 1], origins[ray, 2]
        dx, dy, dz = directions[ray, 0], directions[ray, 1], directions[ray, 2]
        best_t, best, best_u, best_v = np.inf, -1, 0.0, 0.0
        for triangle in range(frames.shape[0]):
            ax, ay, az = frames[triangle, 0], frames[triangle, 1], frames[triangle, 2]
            e1x, e1y, e1z = frames[triangle, 3], frames[triangle, 4], frames[triangle, 5]
            e2x, e2y, e2z = frames[triangle, 6], frames[triangle, 7], frames[triangle, 8]
            # p = d × e2, det = e1 · p
            px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
            determinant = e1x * px + e1y * py + e1z * pz
            if abs(determinant) <= _PARALLEL_DETERMINANT:
                continue
            inverse = 1.0 / determinant
            sx, sy, sz = ox - ax, oy - ay, oz - az
            u = (sx * px + sy * py + sz * pz) * inverse
            if u < -_EDGE_TOLERANCE:
                continue
            # q = s × e1
            qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
            v = (qx * dx + qy * dy + qz * dz) * inverse
            if v < -_EDGE_TOLERANCE or u + v > 1.0 + _EDGE_TOLERANCE:
                continue
            t = (qx * e2x + qy * e2y + qz * e2z) * inverse
            if t > 0.0 and t < best_t:
                best_t, best, best_u, best_v = t, triangle, u, v
        if best >= 0:
            distances[ray], hit_triangle[ray] = best_t, best
            barycentric[ray, 0], barycentric[ray, 1], barycentric[ray, 2] = 1.0 - best_u - best_v, best_u, best_v
