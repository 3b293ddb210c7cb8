"""Maps between the rig's skin (fine, V vertices) and the coarse shell (n vertices), paper 001 §3.2.

* ``coarse_from_fine`` (n × V): row i holds the barycentric weights of the point of the fine
  surface closest to coarse vertex i at rest. The coarse rig is then one sparse product,
  ``coarse deltas = coarse_from_fine @ fine deltas`` (Algorithm 1, line 2), and it reproduces
  any field that is linear over each fine triangle exactly.
* ``fine_from_coarse`` (V × n): row j holds the barycentric weights of the point of the coarse
  surface closest to fine vertex j at rest. The warp of Eq. 14 is
  ``fine_rest + fine_from_coarse @ coarse_displacement``.

Both rows sum to one (a rigid translation is carried exactly) and have at most three entries.
Closest points come from solver/geometry (BVH + exact point–triangle distance).

The warp the shell file stores is ``smoothed_warp`` of ``fine_from_coarse``: barycentric
interpolation is only continuous, its slope jumps at every coarse edge, and where the rig is much
finer than the shell (the lip corners: a dozen fine triangles across one coarse one) the part of
the coarse motion that the detail correction does not cancel (blends of keys, contact) folds
those small triangles along the coarse edges. Averaging each fine vertex's weights over its
surface neighbourhood (mesh-edge distance, so never across the mouth slit) spreads each slope
jump over a coarse edge's length whatever the fine resolution.

Where two sheets nearly touch at rest (the lips of a closed mouth), the plainly closest coarse
triangle of a fine vertex can lie on the other sheet, and the warp would drag the upper lip
down with the jaw. Given the shape keys, ``build`` settles such vertices by the keys' motion
(`fine_weights_following_motion`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse

from scipy.sparse.csgraph import dijkstra

from solver.geometry.closest_point import ClosestPointTree
from solver.geometry.mesh_ops import as_query_points, as_triangle_mesh

# A fine vertex's rest match is re-examined when it misreads a key's motion by this share of its
# own largest motion, and by this share of the rig's largest motion (fine_weights_following_motion).
_MISFIT_SHARE = 0.25
_MISFIT_FLOOR = 0.02
_POSES_TRIED = 3
# smoothed_warp drops weights below this share (then renormalises), keeping rows short.
_SMALLEST_WEIGHT = 1e-3
# Dense distance rows computed at once by smoothed_warp (bounds its memory to ~32 MB).
_DISTANCE_ENTRIES = 4_000_000


@dataclass(frozen=True)
class RigTransfer:
    coarse_from_fine: scipy.sparse.csr_matrix   # (n, V)
    fine_from_coarse: scipy.sparse.csr_matrix   # (V, n)

    @classmethod
    def build(cls, fine_vertices, fine_triangles, coarse_vertices, coarse_triangles,
              fine_deltas=None) -> "RigTransfer":
        """Both maps at rest; positions in any one unit (metres or face units alike). With the rig's
        shape-key deltas (K,V,3), fine vertices that the rest pose matches ambiguously are settled by
        the keys' motion (`fine_weights_following_motion`)."""
        fine_vertices, fine_triangles = as_triangle_mesh(fine_vertices, fine_triangles)
        coarse_vertices, coarse_triangles = as_triangle_mesh(coarse_vertices, coarse_triangles)
        coarse_from_fine = surface_weights(coarse_vertices, fine_vertices, fine_triangles)
        fine_deltas = np.zeros((0, len(fine_vertices), 3)) if fine_deltas is None else np.asarray(fine_deltas, float)
        if fine_deltas.ndim != 3 or fine_deltas.shape[1:] != fine_vertices.shape:
            raise ValueError(f"fine_deltas must be (K, {len(fine_vertices)}, 3), got {fine_deltas.shape}")
        coarse_deltas = np.stack([coarse_from_fine @ delta for delta in fine_deltas]) if len(fine_deltas) else fine_deltas
        fine_from_coarse = fine_weights_following_motion(
            fine_vertices, coarse_vertices, coarse_triangles, fine_deltas, coarse_deltas)
        return cls(coarse_from_fine=coarse_from_fine, fine_from_coarse=fine_from_coarse)

    @property
    def coarse_count(self) -> int:
        return self.coarse_from_fine.shape[0]

    @property
    def fine_count(self) -> int:
        return self.coarse_from_fine.shape[1]

    def coarse_positions(self, fine_positions) -> np.ndarray:
        """(n,3) coarse positions (or displacements) of fine (V,3) ones."""
        return self.coarse_from_fine @ _rows(fine_positions, self.fine_count, "fine_positions")

    def coarse_deltas(self, fine_deltas) -> np.ndarray:
        """(K,n,3) coarse shape-key deltas of fine (K,V,3) ones."""
        fine_deltas = np.asarray(fine_deltas, dtype=np.float64)
        if fine_deltas.ndim != 3 or fine_deltas.shape[1:] != (self.fine_count, 3):
            raise ValueError(f"fine_deltas must be (K, {self.fine_count}, 3), got {fine_deltas.shape}")
        stacked = fine_deltas.transpose(1, 0, 2).reshape(self.fine_count, -1)
        return (self.coarse_from_fine @ stacked).reshape(self.coarse_count, len(fine_deltas), 3).transpose(1, 0, 2)

    def warp(self, fine_rest, coarse_displacement) -> np.ndarray:
        """Eq. 14 without the detail term: fine_rest + fine_from_coarse @ coarse_displacement."""
        fine_rest = _rows(fine_rest, self.fine_count, "fine_rest")
        return fine_rest + self.fine_from_coarse @ _rows(coarse_displacement, self.coarse_count, "coarse_displacement")


def _rows(array, count: int, name: str) -> np.ndarray:
    array = np.asarray(array, dtype=np.float64)
    if array.shape != (count, 3):
        raise ValueError(f"{name} must be ({count}, 3), got {array.shape}")
    return array


def surface_weights(points, vertices, triangles) -> scipy.sparse.csr_matrix:
    """(p × v) CSR: each point's barycentric weights on its closest triangle of the mesh."""
    points = as_query_points(points)
    vertices, triangles = as_triangle_mesh(vertices, triangles)
    triangle_index, barycentric = _closest(points, vertices, triangles)
    return _weights_matrix(triangle_index, barycentric, triangles, len(vertices))


def _closest(points, vertices, triangles):
    found = ClosestPointTree(vertices, triangles).query(points)
    return found.triangle_index.copy(), found.barycentric.copy()


def _weights_matrix(triangle_index, barycentric, triangles, column_count) -> scipy.sparse.csr_matrix:
    barycentric = np.clip(barycentric, 0.0, 1.0)
    barycentric = barycentric / barycentric.sum(axis=1, keepdims=True)
    rows = np.repeat(np.arange(len(triangle_index)), 3)
    matrix = scipy.sparse.csr_matrix((barycentric.ravel(), (rows, triangles[triangle_index].ravel())),
                                     shape=(len(triangle_index), column_count))
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    return matrix


def _motion_misfit(triangle_index, barycentric, triangles, fine_deltas, coarse_deltas) -> np.ndarray:
    """(V,) the largest distance over the shape keys between each fine vertex's own delta and the
    delta its weights read off the coarse deltas."""
    corners = triangles[triangle_index]
    worst = np.zeros(len(triangle_index))
    for fine, coarse in zip(fine_deltas, coarse_deltas):
        read = np.einsum("ij,ijk->ik", barycentric, coarse[corners])
        worst = np.maximum(worst, np.linalg.norm(read - fine, axis=1))
    return worst


def fine_weights_following_motion(fine_vertices, coarse_vertices, coarse_triangles, fine_deltas, coarse_deltas) -> scipy.sparse.csr_matrix:
    """`surface_weights` of the fine vertices on the coarse mesh, corrected where the rest pose is
    ambiguous: a fine vertex whose rest match reads a shape key's motion wrongly by more than
    ``_MISFIT_SHARE`` of its own motion (and ``_MISFIT_FLOOR`` of the largest) is matched again in
    the pose of that key (fine vertex and coarse mesh both moved), and the match that reads all
    the keys best is kept. This is what separates the lips of a closed mouth: at rest the upper
    lip's underside is as near to the lower lip's coarse triangles as to its own, in jawOpen it
    is not."""
    triangle_index, barycentric = _closest(fine_vertices, coarse_vertices, coarse_triangles)
    if len(fine_deltas):
        misfit = _motion_misfit(triangle_index, barycentric, coarse_triangles, fine_deltas, coarse_deltas)
        motion = np.linalg.norm(fine_deltas, axis=2)                                  # (K, V)
        suspect = (misfit > _MISFIT_SHARE * motion.max(axis=0)) & (misfit > _MISFIT_FLOOR * motion.max())
        if suspect.any():
            rows = np.flatnonzero(suspect)
            residual = np.stack([np.linalg.norm(np.einsum("ij,ijk->ik", barycentric[rows],
                                                          coarse[coarse_triangles[triangle_index[rows]]]) - fine[rows],
                                                axis=1) for fine, coarse in zip(fine_deltas, coarse_deltas)])
            # The poses of the few keys each vertex misreads most are tried: the key it misreads
            # worst need not separate the sheets (mouthClose moves the jaw with the lips shut).
            tried = np.argsort(-residual, axis=0, kind="stable")[:_POSES_TRIED]
            for key in np.unique(tried):
                members = rows[(tried == key).any(axis=0)]
                moved = ClosestPointTree(coarse_vertices + coarse_deltas[key], coarse_triangles).query(
                    fine_vertices[members] + fine_deltas[key][members])
                candidate_misfit = _motion_misfit(moved.triangle_index, moved.barycentric, coarse_triangles,
                                                  fine_deltas[:, members], coarse_deltas)
                better = candidate_misfit < misfit[members]
                triangle_index[members[better]] = moved.triangle_index[better]
                barycentric[members[better]] = moved.barycentric[better]
                misfit[members[better]] = candidate_misfit[better]
    return _weights_matrix(triangle_index, barycentric, coarse_triangles, len(coarse_vertices))


def smoothing_radius(coarse_vertices, coarse_triangles, smoothing: float) -> float:
    """The radius `smoothed_warp` averages over: `smoothing` (ShellSettings.warp_smoothing) times the
    coarse mesh's median edge, each edge counted once, in the vertices' length unit."""
    triangles = np.asarray(coarse_triangles, dtype=np.int64)
    edges = np.unique(np.sort(np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]]),
                              axis=1), axis=0)
    vertices = np.asarray(coarse_vertices, dtype=np.float64)
    return smoothing * float(np.median(np.linalg.norm(vertices[edges[:, 0]] - vertices[edges[:, 1]], axis=1)))


def smoothed_warp(fine_vertices, fine_triangles, fine_from_coarse, radius: float) -> scipy.sparse.csr_matrix:
    """(V × n) the warp `fine_from_coarse` averaged over each fine vertex's surface neighbourhood
    (module docstring): row j = Σ_i φ(d_ji) row_i / Σ_i φ(d_ji) over the fine vertices i within
    `radius` of j along the mesh's edges, φ(d) = (1 − (d/radius)²)², a smooth bump (same length
    unit as the vertices). Weights below _SMALLEST_WEIGHT are dropped and rows renormalised, so
    rows still sum to one (translations carried exactly). radius 0 returns the warp unchanged."""
    fine_vertices, fine_triangles = as_triangle_mesh(fine_vertices, fine_triangles)
    warp = scipy.sparse.csr_matrix(fine_from_coarse, dtype=np.float64)
    count = len(fine_vertices)
    if warp.shape[0] != count:
        raise ValueError(f"smoothed_warp: the warp has {warp.shape[0]} rows for {count} fine vertices")
    if not radius > 0:
        return warp
    edges = np.concatenate([fine_triangles[:, [0, 1]], fine_triangles[:, [1, 2]], fine_triangles[:, [2, 0]]])
    lengths = np.linalg.norm(fine_vertices[edges[:, 0]] - fine_vertices[edges[:, 1]], axis=1)
    graph = scipy.sparse.csr_matrix((lengths, (edges[:, 0], edges[:, 1])), shape=(count, count))
    graph = graph.maximum(graph.T)
    rows, columns, values = [], [], []
    chunk = max(1, _DISTANCE_ENTRIES // count)
    for start in range(0, count, chunk):
        sources = np.arange(start, min(count, start + chunk))
        distance = dijkstra(graph, directed=False, indices=sources, limit=radius)
        source, target = np.nonzero(np.isfinite(distance))
        rows.append(sources[source])
        columns.append(target)
        values.append((1.0 - (distance[source, target] / radius) ** 2) ** 2)
    kernel = scipy.sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                                     shape=(count, count))
    smoothed = _normalised_rows(scipy.sparse.csr_matrix(kernel @ warp))
    smoothed.data[smoothed.data < _SMALLEST_WEIGHT] = 0.0
    smoothed.eliminate_zeros()
    return _normalised_rows(smoothed)


def _normalised_rows(matrix: scipy.sparse.csr_matrix) -> scipy.sparse.csr_matrix:
    sums = np.asarray(matrix.sum(axis=1)).ravel()
    normalised = scipy.sparse.csr_matrix(scipy.sparse.diags(1.0 / sums) @ matrix)
    normalised.sort_indices()
    return normalised
