"""A small synthetic shell for the forward tests: a curved sheet with a hole and two "shape
keys" (a bump out of the sheet, a stretch along it), as a ShellModel (shell_file.py) whose
fine mesh is the coarse one (identity maps)."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solver.shell.settings import ShellSettings
from solver.shell.shell_file import ShellModel


def sheet_grid(cells: int = 24, hole: bool = True):
    """(rest (n,3), triangles (m,3)) of the unit square bent into a gentle cylinder, z up, with a
    round hole at (0.3, 0.6) (the 'mouth')."""
    k = cells + 1
    u, v = np.meshgrid(np.linspace(0.0, 1.0, k), np.linspace(0.0, 1.0, k), indexing="ij")
    u, v = u.ravel(), v.ravel()
    rest = np.stack([u, v, 0.15 * np.sin(np.pi * u)], axis=1)
    index = np.arange(k * k).reshape(k, k)
    a, b, c, d = index[:-1, :-1].ravel(), index[1:, :-1].ravel(), index[1:, 1:].ravel(), index[:-1, 1:].ravel()
    triangles = np.concatenate([np.stack([a, b, c], 1), np.stack([a, c, d], 1)])
    if hole:
        centroid = rest[triangles].mean(axis=1)
        keep = np.hypot(centroid[:, 0] - 0.3, centroid[:, 1] - 0.6) > 0.12
        triangles = triangles[keep]
    used = np.unique(triangles)
    renumber = np.full(len(rest), -1)
    renumber[used] = np.arange(len(used))
    return rest[used], renumber[triangles].astype(np.int64)


def sheet_shell(cells: int = 24, stiffness: float = 0.05, face_height_m: float = 0.2, max_depth: float = 0.05,
                prescribed=None, detail_scale: float = 0.0, hole: bool = True) -> ShellModel:
    rest, triangles = sheet_grid(cells, hole)
    n = len(rest)
    # The sheet's outward normal is +z at its middle (triangle winding a, b, c gives +z there).
    bump = np.zeros((n, 3))
    r2 = (rest[:, 0] - 0.65) ** 2 + (rest[:, 1] - 0.35) ** 2
    bump[:, 2] = 0.06 * np.exp(-r2 / 0.02)
    stretch = np.zeros((n, 3))
    stretch[:, 1] = 0.05 * (rest[:, 1] - 0.5) * np.exp(-((rest[:, 0] - 0.5) ** 2) / 0.05)
    deltas = np.stack([bump, stretch])
    identity = sp.identity(n, format="csr")
    detail = sp.csr_matrix(detail_scale * np.stack([np.sin(7 * rest).ravel(), np.cos(5 * rest).ravel()]))
    prescribed_mask = np.zeros(n, dtype=bool)
    if prescribed is not None:
        prescribed_mask[np.asarray(prescribed)] = True
    return ShellModel(face_height_m=face_height_m, coarse_rest=rest, coarse_triangles=triangles,
                      coarse_from_fine=identity, fine_from_coarse=identity, shape_names=("bump", "stretch"),
                      coarse_deltas=deltas, strain_stiffness=np.full(n, stiffness),
                      bending_stiffness=np.full(n, stiffness), max_depth=np.full(n, max_depth),
                      prescribed=prescribed_mask, fine_rest_m=rest * face_height_m, detail=detail,
                      fine_strain_stiffness=np.full(n, stiffness), fine_bending_stiffness=np.full(n, stiffness),
                      settings=ShellSettings())
