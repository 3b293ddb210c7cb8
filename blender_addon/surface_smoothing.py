"""Taubin (λ|μ) smoothing of a triangle surface and the measures that say how smooth it is,
in numpy alone (the add-on cannot use scipy).

A muscle's isosurface (muscle_isosurface.py) is smooth at the scale of a few tets but faceted
at the scale of one. Plain Laplacian smoothing rounds the facets off but shrinks the surface
towards its centre; Taubin's pair of steps — a shrinking step λ > 0 then an inflating step
μ < −λ — removes the high frequencies while keeping the low-frequency shape, so a muscle keeps
its volume (Taubin 1995, "A signal processing approach to fair surface design").
"""
from __future__ import annotations

import numpy as np

# λ = 0.5 and the pass band k_PB = 1/λ + 1/μ = 0.1 (μ ≈ −0.53): Taubin's own example values.
TAUBIN_LAMBDA = 0.5
TAUBIN_MU = -0.53
TAUBIN_PASSES = 30


def unique_edges(triangles: np.ndarray) -> np.ndarray:
    """(E, 2) undirected edges of the triangles, each once, smaller index first."""
    edges = np.sort(np.asarray(triangles, dtype=np.int64)[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    if len(edges) == 0:
        return edges
    count = int(edges.max()) + 1
    keys = np.unique(edges[:, 0] * count + edges[:, 1])     # one int per edge: far faster than axis=0
    return np.stack([keys // count, keys % count], axis=1)


def _umbrella(vertices: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of each vertex's neighbours minus the vertex (0 for a vertex without edges)."""
    # Both directions of every edge, summed per vertex by bincount (far faster than np.add.at).
    ends = np.concatenate([edges[:, 0], edges[:, 1]])
    others = np.concatenate([edges[:, 1], edges[:, 0]])
    total = np.stack([np.bincount(ends, weights=vertices[others, axis], minlength=len(vertices))
                      for axis in range(vertices.shape[1])], axis=1)
    degree = np.bincount(edges.ravel(), minlength=len(vertices)).astype(np.float64)
    lonely = degree == 0
    degree[lonely] = 1.0
    step = total / degree[:, None] - vertices
    step[lonely] = 0.0
    return step


def taubin_smooth(vertices, triangles, passes: int = TAUBIN_PASSES, lam: float = TAUBIN_LAMBDA,
                  mu: float = TAUBIN_MU) -> np.ndarray:
    """The vertices after `passes` λ|μ pairs of umbrella-operator steps on the triangles' edges."""
    smoothed = np.array(vertices, dtype=np.float64)
    if len(smoothed) == 0 or len(triangles) == 0:
        return smoothed
    edges = unique_edges(triangles)
    for _ in range(passes):
        smoothed += lam * _umbrella(smoothed, edges)
        smoothed += mu * _umbrella(smoothed, edges)
    return smoothed


def subdivide(vertices, triangles):
    """Each triangle split into four at its edge midpoints (shared edges share their midpoint):
    a muscle only a tet or two thick, a tube a few triangles round, gets enough vertices for
    smoothing to round it."""
    vertices = np.asarray(vertices, dtype=np.float64)
    triangles = np.asarray(triangles, dtype=np.int64)
    edges = unique_edges(triangles)
    count = len(vertices)
    keys = edges[:, 0] * count + edges[:, 1]

    def middle(a, b):
        return count + np.searchsorted(keys, np.minimum(a, b) * count + np.maximum(a, b))

    a, b, c = triangles.T
    ab, bc, ca = middle(a, b), middle(b, c), middle(c, a)
    finer = np.concatenate([np.stack([a, ab, ca], 1), np.stack([ab, b, bc], 1), np.stack([ca, bc, c], 1),
                            np.stack([ab, bc, ca], 1)])
    return np.concatenate([vertices, 0.5 * (vertices[edges[:, 0]] + vertices[edges[:, 1]])]), finer


def face_normals(vertices, triangles) -> np.ndarray:
    """Unit normals of the triangles (zero for a degenerate one)."""
    corners = np.asarray(vertices, dtype=np.float64)[np.asarray(triangles)]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    length = np.linalg.norm(normal, axis=1, keepdims=True)
    return np.divide(normal, length, out=np.zeros_like(normal), where=length > 0)


def dihedral_angles(vertices, triangles) -> np.ndarray:
    """Angle (radians) between the normals of each pair of triangles sharing an edge the same
    way round (consistently oriented neighbours): 0 on a flat sheet, large at a crease."""
    triangles = np.asarray(triangles, dtype=np.int64)
    normals = face_normals(vertices, triangles)
    directed = triangles[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    owner = np.repeat(np.arange(len(triangles)), 3)
    # Each edge a→b of one triangle meets b→a of its neighbour when both face the same way.
    code = {(int(a), int(b)): int(face) for (a, b), face in zip(directed, owner)}
    pairs = [(face, code[(int(b), int(a))]) for (a, b), face in zip(directed, owner)
             if (int(b), int(a)) in code and face < code[(int(b), int(a))]]
    if not pairs:
        return np.zeros(0)
    pairs = np.array(pairs)
    cosine = np.clip(np.einsum("ij,ij->i", normals[pairs[:, 0]], normals[pairs[:, 1]]), -1.0, 1.0)
    return np.arccos(cosine)


def enclosed_volume(vertices, triangles) -> float:
    """Signed volume enclosed by a closed, outward-oriented triangle surface (divergence theorem)."""
    corners = np.asarray(vertices, dtype=np.float64)[np.asarray(triangles)]
    return float(np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6.0)
