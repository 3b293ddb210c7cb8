"""Per-shape detail corrections (paper 001 Eq. 13): what the rig's shape has that the warped
coarse equilibrium of the same shape lacks (wrinkles, creases, the eyelids' edge), added back
after the warp with the shape's weight (Eq. 14).

u_c,b = x_o,b − x_w,b: the fine shape minus the fine rest warped by the coarse equilibrium's
displacement. Corrections shorter than the clip (settings.detail_clip face units, 1e-4 of the
face height) are dropped, so the matrix is sparse where the coarse shell already follows the
shape. Stored in metres, one row per shape over the fine vertices' coordinates, node-major
(row b, column 3 v + axis), the layout ShellModel.detail and the forward warp use.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse


def detail_corrections(fine_deltas_m, fine_from_coarse, coarse_displacements, face_height_m: float,
                       clip: float) -> scipy.sparse.csr_matrix:
    """(K, 3V) corrections in metres from the rig's fine deltas (K, V, 3) in metres, the warp map
    (V × n) and the coarse equilibria's displacements from rest (K, n, 3) in face units; a fine
    vertex's correction is kept whole when its length is at least `clip` face units."""
    fine_deltas_m = np.asarray(fine_deltas_m, dtype=np.float64)
    coarse_displacements = np.asarray(coarse_displacements, dtype=np.float64)
    shapes, fine_count = fine_deltas_m.shape[:2]
    if coarse_displacements.shape[0] != shapes or fine_from_coarse.shape != (fine_count, coarse_displacements.shape[1]):
        raise ValueError(f"detail_corrections: {shapes} fine shapes of {fine_count} vertices do not match the warp "
                         f"{fine_from_coarse.shape} and coarse displacements {coarse_displacements.shape}")
    rows, columns, values = [], [], []
    threshold = clip * face_height_m
    for shape in range(shapes):
        warped = fine_from_coarse @ (coarse_displacements[shape] * face_height_m)
        correction = fine_deltas_m[shape] - warped
        kept = np.flatnonzero(np.linalg.norm(correction, axis=1) >= threshold)
        rows.append(np.full(3 * len(kept), shape, dtype=np.int64))
        columns.append((3 * kept[:, None] + np.arange(3)).ravel())
        values.append(correction[kept].ravel())
    return scipy.sparse.csr_matrix((np.concatenate(values) if values else np.zeros(0),
                                    (np.concatenate(rows) if rows else np.zeros(0, np.int64),
                                     np.concatenate(columns) if columns else np.zeros(0, np.int64))),
                                   shape=(shapes, 3 * fine_count))
