"""Plain-numpy triangle-mesh helpers shared by the geometric queries.

Validation lives here so that every query rejects malformed input with the same
messages before any numba kernel sees it (a kernel would read out of bounds
instead of raising).
"""
from __future__ import annotations

import numpy as np


def as_triangle_mesh(vertices, triangles) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(vertices, triangles)`` as contiguous float64 (n,3) and int64 (t,3).

    Raises ValueError on wrong shapes, non-finite coordinates or out-of-range indices.
    """
    vertices = np.ascontiguousarray(vertices, dtype=np.float64)
    triangles = np.asarray(triangles)
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise ValueError(f"vertices must have shape (n, 3), got {vertices.shape}")
    if triangles.size == 0:
        triangles = triangles.reshape(0, 3)
    if triangles.ndim != 2 or triangles.shape[1] != 3:
        raise ValueError(f"triangles must have shape (t, 3), got {triangles.shape}")
    if not np.issubdtype(triangles.dtype, np.integer):
        raise ValueError(f"triangles must hold integer vertex indices, got dtype {triangles.dtype}")
    triangles = np.ascontiguousarray(triangles, dtype=np.int64)
    if not np.all(np.isfinite(vertices)):
        raise ValueError("vertices contain NaN or infinite coordinates")
    if triangles.size and (triangles.min() < 0 or triangles.max() >= len(vertices)):
        raise ValueError(
            f"triangle indices must lie in [0, {len(vertices) - 1}], "
            f"got range [{triangles.min()}, {triangles.max()}]"
        )
    return vertices, triangles


def as_query_points(points) -> np.ndarray:
    """Return query points as a contiguous float64 (p,3) array; a single (3,) point is not accepted."""
    points = np.ascontiguousarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"points must have shape (p, 3), got {points.shape}")
    if not np.all(np.isfinite(points)):
        raise ValueError("points contain NaN or infinite coordinates")
    return points


def triangle_normals_areas(vertices, triangles) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals (t,3) (right-hand rule over the corner order) and areas (t,).

    Zero-area triangles get a zero normal rather than NaN, so callers can weight by
    area without special cases.
    """
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    corners = vertices[triangles]
    doubled_area_vectors = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    doubled_areas = np.linalg.norm(doubled_area_vectors, axis=1)
    normals = np.zeros_like(doubled_area_vectors)
    nondegenerate = doubled_areas > 0.0
    normals[nondegenerate] = doubled_area_vectors[nondegenerate] / doubled_areas[nondegenerate, None]
    return normals, 0.5 * doubled_areas


def vertex_normals(vertices, triangles) -> np.ndarray:
    """Area-weighted unit vertex normals (n,3).

    Vertices that touch no triangle of positive area (or whose normals cancel) get a
    zero vector instead of NaN.
    """
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    normals, areas = triangle_normals_areas(vertices, triangles)
    area_weighted = normals * areas[:, None]
    # Each triangle contributes to its three corners; bincount does the scatter-add
    # an order of magnitude faster than np.add.at.
    corner_vertices = triangles.ravel()
    accumulated = np.stack(
        [
            np.bincount(corner_vertices, weights=np.repeat(area_weighted[:, axis], 3), minlength=len(vertices))
            for axis in range(3)
        ],
        axis=1,
    )
    lengths = np.linalg.norm(accumulated, axis=1)
    unit = np.zeros_like(accumulated)
    nonzero = lengths > 0.0
    unit[nonzero] = accumulated[nonzero] / lengths[nonzero, None]
    return unit


def icosphere(subdivisions, radius=1.0, centre=(0.0, 0.0, 0.0)):
    """Closed, outward-oriented unit icosahedron refined by midpoint subdivision."""
    golden = (1.0 + np.sqrt(5.0)) / 2.0
    vertices = np.array([
        [-1, golden, 0], [1, golden, 0], [-1, -golden, 0], [1, -golden, 0],
        [0, -1, golden], [0, 1, golden], [0, -1, -golden], [0, 1, -golden],
        [golden, 0, -1], [golden, 0, 1], [-golden, 0, -1], [-golden, 0, 1],
    ], dtype=float)
    triangles = np.array([
        [0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11],
        [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8],
        [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
        [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1],
    ])
    vertices /= np.linalg.norm(vertices, axis=1, keepdims=True)
    for _ in range(subdivisions):
        edges = np.sort(np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]), axis=1)
        unique_edges, edge_of = np.unique(edges, axis=0, return_inverse=True)
        midpoints = vertices[unique_edges].mean(axis=1)
        midpoints /= np.linalg.norm(midpoints, axis=1, keepdims=True)
        mid = edge_of.reshape(3, -1).T + len(vertices)  # midpoints of edges 01, 12, 20
        a, b, c = triangles.T
        triangles = np.concatenate([
            np.column_stack([a, mid[:, 0], mid[:, 2]]),
            np.column_stack([b, mid[:, 1], mid[:, 0]]),
            np.column_stack([c, mid[:, 2], mid[:, 1]]),
            mid,
        ])
        vertices = np.vstack([vertices, midpoints])
    return vertices * radius + np.asarray(centre), triangles
