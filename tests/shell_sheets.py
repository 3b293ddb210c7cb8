"""Shells for the forward tests and bench/shell.py: a small synthetic curved sheet with a hole
and two "shape keys" (a bump out of the sheet, a stretch along it), as a ShellModel
(shell_file.py) whose fine mesh is the coarse one (identity maps); and, until fitted shells
exist, a uniform-stiffness shell of a real rig's skin (`shell_from_rig`)."""
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


def shell_from_rig(rig, triangles: int) -> ShellModel:
    """A ShellModel of the rig's skin remeshed to `triangles` (remesh.py) with the rig maps of
    transfer.py, UNIFORM stiffness 1 (N/m at unit face height; not fitted), max depth δ_thin
    everywhere, no prescribed eyelids, and each key's detail computed by detail.py against its
    warped coarse target instead of a fitted equilibrium (no fit here)."""
    from solver.rig import triangulate
    from solver.shell.detail import detail_corrections
    from solver.shell.remesh import remesh_skin
    from solver.shell.scale import face_height
    from solver.shell.transfer import RigTransfer, smoothed_warp, smoothing_radius
    fine = np.asarray(rig.vertices, dtype=np.float64)
    fine_triangles = triangulate(np.asarray(rig.faces), fine)
    deltas = np.asarray(rig.shape_key_deltas, dtype=np.float64)
    height = face_height(fine, deltas)
    settings = ShellSettings(triangles=triangles)
    coarse = remesh_skin(fine, fine_triangles, triangles)
    transfer = RigTransfer.build(fine, fine_triangles, coarse.vertices, coarse.triangles, deltas)
    coarse_deltas = transfer.coarse_deltas(deltas)                       # metres
    warp = smoothed_warp(fine, fine_triangles, transfer.fine_from_coarse,
                         smoothing_radius(coarse.vertices, coarse.triangles, settings.warp_smoothing))
    # Eq. 13 against the coarse targets themselves (no fit, so no equilibria).
    detail = detail_corrections(deltas, warp, coarse_deltas / height, height, settings.detail_clip)
    n, count = len(coarse.vertices), len(fine)
    return ShellModel(face_height_m=height, coarse_rest=coarse.vertices / height,
                      coarse_triangles=np.asarray(coarse.triangles, dtype=np.int64),
                      coarse_from_fine=transfer.coarse_from_fine, fine_from_coarse=warp,
                      shape_names=tuple(str(name) for name in rig.shape_key_names),
                      coarse_deltas=coarse_deltas / height, strain_stiffness=np.ones(n),
                      bending_stiffness=np.ones(n), max_depth=np.full(n, settings.thin_depth),
                      prescribed=np.zeros(n, dtype=bool), fine_rest_m=fine, detail=detail,
                      fine_strain_stiffness=np.ones(count), fine_bending_stiffness=np.ones(count),
                      settings=settings)
