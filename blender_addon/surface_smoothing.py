"""Taubin (λ|μ) smoothing of a triangle surface and the measures that say how smooth it is,
in numpy alone (the add-on cannot use scipy).

The boundary of a muscle's tets is a staircase of tet faces. Plain Laplacian smoothing
rounds it off but shrinks it towards its centre; Taubin's pair of steps — a shrinking step
λ > 0 then an inflating step μ < −λ — removes the stair-step noise (high frequencies) while
keeping the low-frequency shape, so a muscle keeps its volume (Taubin 1995, "A signal
processing approach to fair surface design").
"""
from __future__ import annotations

import numpy as np

# λ = 0.5 and the pass band k_PB = 1/λ + 1/μ = 0.1 (μ ≈ −0.53): Taubin's own example values.
TAUBIN_LAMBDA = 0.5
TAUBIN_MU = -0.53
TAUBIN_PASSES = 30
# A surface of fewer triangles than this (a muscle of a few dozen tets) is subdivided twice
# before smoothing, a larger one once: the demo head's 3,000-tet muscles are 1–40 tets, and
# after one level their mean dihedral angle only halves (90° → 45°), after two it is 25–33°.
SMALL_SURFACE = 400


def unique_edges(triangles: np.ndarray) -> np.ndarray:
    """(E, 2) undirected edges of the triangles, each once, smaller index first."""
    edges = np.asarray(triangles, dtype=np.int64)[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    return np.unique(np.sort(edges, axis=1), axis=0)


def _umbrella(vertices: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean of each vertex's neighbours minus the vertex (0 for a vertex without edges)."""
    total = np.zeros_like(vertices)
    np.add.at(total, edges[:, 0], vertices[edges[:, 1]])
    np.add.at(total, edges[:, 1], vertices[edges[:, 0]])
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
    a muscle only a few tets big gets enough vertices to round off."""
    vertices = np.asarray(vertices, dtype=np.float64)
    triangles = np.asarray(triangles, dtype=np.int64)
    edges = unique_edges(triangles)
    midpoint_of = {(int(a), int(b)): len(vertices) + row for row, (a, b) in enumerate(edges)}

    def middle(a, b):
        return np.array([midpoint_of[(min(x, y), max(x, y))] for x, y in zip(a.tolist(), b.tolist())],
                        dtype=np.int64)

    a, b, c = triangles.T
    ab, bc, ca = middle(a, b), middle(b, c), middle(c, a)
    finer = np.concatenate([np.stack([a, ab, ca], 1), np.stack([ab, b, bc], 1), np.stack([ca, bc, c], 1),
                            np.stack([ab, bc, ca], 1)])
    return np.concatenate([vertices, 0.5 * (vertices[edges[:, 0]] + vertices[edges[:, 1]])]), finer


def smooth_closed_surface(vertices, triangles, passes: int = TAUBIN_PASSES, levels: int = None):
    """(vertices, triangles) of a closed surface subdivided `levels` times, Taubin-smoothed, and scaled
    about its centre back to the volume it enclosed: Taubin keeps the volume of a large
    surface, but one of a few tets is all "noise" at the tet scale and would still shrink."""
    if levels is None:
        levels = 2 if len(triangles) < SMALL_SURFACE else 1
    finer_vertices, finer = vertices, triangles
    for _ in range(levels):
        finer_vertices, finer = subdivide(finer_vertices, finer)
    smoothed = taubin_smooth(finer_vertices, finer, passes)
    before, after = enclosed_volume(vertices, triangles), enclosed_volume(smoothed, finer)
    if before > 0 and after > 0:
        centre = smoothed.mean(axis=0)
        smoothed = centre + (smoothed - centre) * (before / after) ** (1.0 / 3.0)
    return smoothed, finer


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
