"""The coarse shell's elements at rest (paper 001 §3.1): edges for the strain springs (Eq. 7),
dihedrals for the bending springs (Eq. 9) and the per-vertex (mixed Voronoi) areas that weight
actuation (Eq. 5), mass (Eq. 3) and the stiffness losses (Eq. 18).

A bending element is the dihedral of one interior edge (a, b) with the wing vertices c and d of
its two triangles. Its spring acts between q1, the point of the edge (a, b) closest to the line
(c, d), and q2, the point of that line closest to q1, both found at rest: their barycentric
weights are fixed, so q1 − q2 = Σ_k w_k x_k is linear in the positions. For a flat rest dihedral
the two lines cross and the rest distance is zero; a folded rest dihedral keeps its fold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ShellTopology:
    rest: np.ndarray              # (n, 3) rest positions
    triangles: np.ndarray         # (m, 3) int64
    edges: np.ndarray             # (E, 2) int64, each undirected edge once, smaller index first
    edge_rest_length: np.ndarray  # (E,)
    dihedrals: np.ndarray         # (D, 4) int64: edge a, edge b, wing c, wing d
    bend_weights: np.ndarray      # (D, 4): q1 − q2 = Σ_k bend_weights[k] x[dihedrals[k]]
    bend_rest_length: np.ndarray  # (D,) |q1 − q2| at rest
    bend_coefficient: np.ndarray  # (D,) ‖e⁰‖ / h̄ of Eq. 9 (h̄ a third of the mean triangle height)
    vertex_area: np.ndarray       # (n,) mixed Voronoi area
    boundary: np.ndarray          # (n,) bool, on an open boundary

    @property
    def vertex_count(self) -> int:
        return len(self.rest)

    @classmethod
    def from_triangles(cls, rest, triangles) -> "ShellTopology":
        rest = np.ascontiguousarray(rest, dtype=np.float64)
        triangles = np.ascontiguousarray(triangles, dtype=np.int64)
        if rest.ndim != 2 or rest.shape[1] != 3 or triangles.ndim != 2 or triangles.shape[1] != 3:
            raise ValueError("rest: expected (n, 3) positions and (m, 3) triangles")
        if triangles.size and (triangles.min() < 0 or triangles.max() >= len(rest)):
            raise ValueError("triangles: vertex index out of range")
        edges, edge_triangles = _edges_with_triangles(triangles)
        boundary = np.zeros(len(rest), dtype=bool)
        open_edges = edge_triangles[:, 1] < 0
        boundary[edges[open_edges].ravel()] = True
        dihedrals = _dihedrals(triangles, edges, edge_triangles)
        weights, bend_length, bend_coefficient = _bending_at_rest(rest, dihedrals)
        return cls(rest=rest, triangles=triangles, edges=edges,
                   edge_rest_length=np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=1),
                   dihedrals=dihedrals, bend_weights=weights, bend_rest_length=bend_length,
                   bend_coefficient=bend_coefficient, vertex_area=mixed_voronoi_areas(rest, triangles),
                   boundary=boundary)


def _edges_with_triangles(triangles: np.ndarray):
    """Unique edges and, per edge, up to two incident triangles (-1 where open). An edge with
    more than two triangles is non-manifold: the shell cannot bend across it, so it is refused."""
    corners = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    owner = np.tile(np.arange(len(triangles)), 3)
    corners.sort(axis=1)
    edges, inverse, counts = np.unique(corners, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    if (counts > 2).any():
        raise ValueError(f"triangles: {int((counts > 2).sum())} edges have more than two triangles; the shell "
                         "needs a manifold surface")
    edge_triangles = np.full((len(edges), 2), -1, dtype=np.int64)
    order = np.argsort(inverse, kind="stable")
    first = np.ones(len(order), dtype=bool)
    first[1:] = inverse[order][1:] != inverse[order][:-1]
    edge_triangles[inverse[order][first], 0] = owner[order][first]
    edge_triangles[inverse[order][~first], 1] = owner[order][~first]
    return edges.astype(np.int64), edge_triangles


def _dihedrals(triangles, edges, edge_triangles) -> np.ndarray:
    interior = edge_triangles[:, 1] >= 0
    a, b = edges[interior, 0], edges[interior, 1]
    t1, t2 = triangles[edge_triangles[interior, 0]], triangles[edge_triangles[interior, 1]]

    def wing(tri):
        # The triangle's vertex that is neither a nor b.
        not_edge = (tri != a[:, None]) & (tri != b[:, None])
        return tri[np.arange(len(tri)), np.argmax(not_edge, axis=1)]
    return np.stack([a, b, wing(t1), wing(t2)], axis=1).astype(np.int64)


def _bending_at_rest(rest, dihedrals):
    """Barycentric weights of q1 − q2, its rest length and ‖e⁰‖/h̄ per dihedral."""
    if len(dihedrals) == 0:
        return np.zeros((0, 4)), np.zeros(0), np.zeros(0)
    pa, pb, pc, pd = (rest[dihedrals[:, k]] for k in range(4))
    u, v, w0 = pb - pa, pd - pc, pa - pc
    uu, uv, vv = (u * u).sum(1), (u * v).sum(1), (v * v).sum(1)
    uw, vw = (u * w0).sum(1), (v * w0).sum(1)
    denominator = uu * vv - uv * uv
    parallel = denominator <= 1e-12 * uu * vv
    safe = np.where(parallel, 1.0, denominator)
    # Closest points of the two lines; s on the edge is clamped to the segment, and t re-solved
    # for the clamped s (the closest point of the line (c, d) to q1).
    s = np.where(parallel, 0.5, (uv * vw - vv * uw) / safe)
    s = np.clip(s, 0.0, 1.0)
    t = np.where(vv > 0, (uv * s + vw) / np.where(vv > 0, vv, 1.0), 0.5)
    weights = np.stack([1.0 - s, s, -(1.0 - t), -t], axis=1)
    q = (weights[:, :, None] * np.stack([pa, pb, pc, pd], axis=1)).sum(1)
    edge_length = np.sqrt(uu)
    area1 = 0.5 * np.linalg.norm(np.cross(u, pc - pa), axis=1)
    area2 = 0.5 * np.linalg.norm(np.cross(u, pd - pa), axis=1)
    # Heights of the two triangles over the common edge; h̄ is a third of their mean.
    heights = (2.0 * area1 + 2.0 * area2) / (2.0 * np.maximum(edge_length, 1e-300))
    h_bar = np.maximum(heights / 3.0, 1e-300)
    return weights, np.linalg.norm(q, axis=1), edge_length / h_bar


def mixed_voronoi_areas(rest, triangles) -> np.ndarray:
    """Per-vertex mixed Voronoi areas (Meyer et al. 2003): the Voronoi region inside
    non-obtuse triangles, and half / a quarter of the area for the obtuse triangle's corners.
    They sum to the surface area."""
    rest = np.asarray(rest, dtype=np.float64)
    p = [rest[triangles[:, k]] for k in range(3)]
    area = 0.5 * np.linalg.norm(np.cross(p[1] - p[0], p[2] - p[0]), axis=1)
    result = np.zeros(len(rest))
    dots = np.stack([((p[(k + 1) % 3] - p[k]) * (p[(k + 2) % 3] - p[k])).sum(1) for k in range(3)], axis=1)
    obtuse = dots < 0
    any_obtuse = obtuse.any(axis=1)
    safe_area = np.maximum(area, 1e-300)
    for k in range(3):
        i, j = (k + 1) % 3, (k + 2) % 3
        # Voronoi share of corner k: (|e_kj|² cot(angle at i) + |e_ki|² cot(angle at j)) / 8.
        cot_i = dots[:, i] / (2.0 * safe_area)
        cot_j = dots[:, j] / (2.0 * safe_area)
        length_kj = ((p[j] - p[k]) ** 2).sum(1)
        length_ki = ((p[i] - p[k]) ** 2).sum(1)
        voronoi = (length_kj * cot_i + length_ki * cot_j) / 8.0
        share = np.where(any_obtuse, np.where(obtuse[:, k], area / 2.0, area / 4.0), voronoi)
        np.add.at(result, triangles[:, k], share)
    return result
