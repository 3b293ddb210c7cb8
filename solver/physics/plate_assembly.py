"""The skin filter's plate, τ² L M⁻¹ L, written straight into the filter's fixed sparsity pattern.

The plate is measured on every frame's rig frame, so it is assembled once a frame. With SciPy
that was a cotangent Laplacian built from triplets, two sparse products and a search of the
product's entries in the pattern: 27 ms a frame on ICT's 14,062 skin vertices. Here the places
every value goes are found once per mesh — where each triangle's cotangent lands in L, and where
each product L_ij L_jk / m_j lands in the pattern — and a frame only runs two compiled loops
over them.

L is the cotangent Laplacian of skin_filter.py (positive semi-definite, zero row sums; each
triangle's cotangents taken with the area given for it, so a floored area keeps it
semi-definite), M the lumped vertex areas.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sparse
from numba import njit


class PlateAssembly:
    """The plate's values in the order of `pattern`, the sorted CSC pattern of every vertex pair
    at most two edges apart on a triangle mesh of `vertex_count` vertices — taken from the mesh
    alone, so a value that happens to vanish (a right angle's cotangent) never changes it."""

    def __init__(self, triangles: np.ndarray, vertex_count: int):
        triangles = np.ascontiguousarray(triangles, dtype=np.int64)
        self.triangles = triangles
        self.vertex_count = int(vertex_count)
        ring = sparse.csr_matrix((np.ones(6 * len(triangles)),
                                  (triangles[:, [0, 1, 2, 1, 2, 0]].ravel(), triangles[:, [1, 2, 0, 0, 1, 2]].ravel())),
                                 shape=(vertex_count, vertex_count)) + sparse.identity(vertex_count, format="csr")
        ring.sort_indices()
        pattern = (ring @ ring).tocsc()
        pattern.sort_indices()
        self.pattern = pattern
        self._ring_start = np.ascontiguousarray(ring.indptr, dtype=np.int64)
        self._ring_columns = np.ascontiguousarray(ring.indices, dtype=np.int64)
        self._laplacian = np.zeros(len(self._ring_columns))
        pattern_start = np.ascontiguousarray(pattern.indptr, dtype=np.int64)
        pattern_rows = np.ascontiguousarray(pattern.indices, dtype=np.int64)
        self._edge_places = _edge_places(triangles, self._ring_start, self._ring_columns)
        self._product_places = _product_places(self._ring_start, self._ring_columns, pattern_start, pattern_rows)
        self.diagonal_places = _places(np.arange(vertex_count), np.arange(vertex_count), pattern_start, pattern_rows)
        self.value_count = len(pattern_rows)

    def values(self, surface: np.ndarray, minimum_areas: np.ndarray, tau: float) -> np.ndarray:
        """(nnz,) τ² L M⁻¹ L on `surface`, each triangle's area taken at least `minimum_areas`
        (skin_filter.py's floor for squashed triangles), in the pattern's order."""
        areas = self._fill_laplacian(surface, minimum_areas, np.ones(len(self.triangles), dtype=np.bool_))
        lumped = lumped_areas(areas, self.triangles, self.vertex_count)
        out = np.zeros(self.value_count)
        _product_values(self._ring_start, self._laplacian, lumped, self._product_places, tau * tau, out)
        return out

    def laplacian(self, surface: np.ndarray, minimum_areas: np.ndarray, chosen: np.ndarray) -> sparse.csr_matrix:
        """The cotangent Laplacian of the `chosen` triangles alone ((T,) bool; the fold guard's
        membrane), areas floored as in `values`."""
        self._fill_laplacian(surface, minimum_areas, np.asarray(chosen, dtype=np.bool_))
        return sparse.csr_matrix((self._laplacian.copy(), self._ring_columns, self._ring_start),
                                 shape=(self.vertex_count, self.vertex_count))

    def _fill_laplacian(self, surface, minimum_areas, chosen) -> np.ndarray:
        areas = np.zeros(len(self.triangles))
        _laplacian_values(np.ascontiguousarray(surface, dtype=np.float64), self.triangles,
                          np.ascontiguousarray(minimum_areas, dtype=np.float64), chosen, self._edge_places,
                          self._laplacian, areas)
        return areas


def lumped_areas(triangle_areas: np.ndarray, triangles: np.ndarray, count: int) -> np.ndarray:
    """(V,) a third of each triangle's area to each corner; a vertex on no triangle gets a tiny
    area, so it simply keeps its deviation."""
    areas = np.bincount(np.asarray(triangles).ravel(), weights=np.repeat(np.asarray(triangle_areas) / 3.0, 3),
                        minlength=count)
    return np.where(areas > 0.0, areas, max(areas.max(initial=0.0), 1e-12) * 1e-6)


@njit(cache=True)
def _find(start, indices, row, column):
    """The place of entry (row, column) among a sorted compressed column's (or row's) indices."""
    low, high = start[column], start[column + 1]
    while low < high:
        middle = (low + high) // 2
        if indices[middle] < row:
            low = middle + 1
        else:
            high = middle
    if low == start[column + 1] or indices[low] != row:
        raise ValueError("the skin filter's pattern misses an entry of the plate")
    return low


@njit(cache=True)
def _places(rows, columns, start, indices):
    places = np.empty(len(rows), dtype=np.int64)
    for k in range(len(rows)):
        places[k] = _find(start, indices, rows[k], columns[k])
    return places


@njit(cache=True)
def _edge_places(triangles, ring_start, ring_columns):
    """(T, 3, 4): for the edge opposite each corner, (a, b), the places of L_ab, L_ba, L_aa and
    L_bb in the one-ring pattern."""
    places = np.empty((len(triangles), 3, 4), dtype=np.int64)
    for t in range(len(triangles)):
        for corner in range(3):
            a, b = triangles[t, (corner + 1) % 3], triangles[t, (corner + 2) % 3]
            places[t, corner, 0] = _find(ring_start, ring_columns, b, a)
            places[t, corner, 1] = _find(ring_start, ring_columns, a, b)
            places[t, corner, 2] = _find(ring_start, ring_columns, a, a)
            places[t, corner, 3] = _find(ring_start, ring_columns, b, b)
    return places


@njit(cache=True)
def _product_places(ring_start, ring_columns, pattern_start, pattern_rows):
    """For every vertex j and every pair (i, k) of its one ring (itself included), in loop order,
    the place of (i, k) in the pattern."""
    count = 0
    for j in range(len(ring_start) - 1):
        degree = ring_start[j + 1] - ring_start[j]
        count += degree * degree
    places = np.empty(count, dtype=np.int64)
    n = 0
    for j in range(len(ring_start) - 1):
        for p in range(ring_start[j], ring_start[j + 1]):
            for q in range(ring_start[j], ring_start[j + 1]):
                places[n] = _find(pattern_start, pattern_rows, ring_columns[p], ring_columns[q])
                n += 1
    return places


@njit(cache=True)
def _laplacian_values(vertices, triangles, minimum_areas, chosen, edge_places, out, areas):
    """The cotangent Laplacian of the `chosen` triangles on the one-ring pattern into `out`, and
    their areas (each at least its minimum) into `areas`: the edge opposite each corner gets ½ cot
    of that corner's angle, cot = (u · v) / (2 area). Each triangle's part is the Gram matrix of
    its edges over 4 × area, so a floored area keeps it positive semi-definite; negative
    cotangents (obtuse angles) are kept."""
    out[:] = 0.0
    u = np.empty(3)
    v = np.empty(3)
    for t in range(len(triangles)):
        if not chosen[t]:
            continue
        for k in range(3):
            u[k] = vertices[triangles[t, 1], k] - vertices[triangles[t, 0], k]
            v[k] = vertices[triangles[t, 2], k] - vertices[triangles[t, 0], k]
        n0, n1, n2 = u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]
        areas[t] = max(0.5 * np.sqrt(n0 * n0 + n1 * n1 + n2 * n2), minimum_areas[t])
        twice_area = max(2.0 * areas[t], 1e-30)
        for corner in range(3):
            c = triangles[t, corner]
            a, b = triangles[t, (corner + 1) % 3], triangles[t, (corner + 2) % 3]
            dot = 0.0
            for k in range(3):
                dot += (vertices[a, k] - vertices[c, k]) * (vertices[b, k] - vertices[c, k])
            weight = 0.5 * dot / twice_area
            out[edge_places[t, corner, 0]] -= weight
            out[edge_places[t, corner, 1]] -= weight
            out[edge_places[t, corner, 2]] += weight
            out[edge_places[t, corner, 3]] += weight


@njit(cache=True)
def _product_values(ring_start, laplacian, lumped, product_places, scale, out):
    """out += scale Σ_j L_ij L_jk / m_j into the places of (i, k) (L symmetric)."""
    n = 0
    for j in range(len(ring_start) - 1):
        weight = scale / lumped[j]
        for p in range(ring_start[j], ring_start[j + 1]):
            left = weight * laplacian[p]
            for q in range(ring_start[j], ring_start[j + 1]):
                out[product_places[n]] += left * laplacian[q]
                n += 1
