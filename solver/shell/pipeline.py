"""Rig → shell: everything `shell-fit` does, in order (docs/shell.md).

1. the face height (scale.py), the length unit of the shell;
2. the skin remeshed to the requested triangle count (remesh.py), the maps between it and the
   rig's vertices and the coarse shape-key deltas (transfer.py);
3. the per-vertex maximum depth and the prescribed eyelid vertices (depth.py);
4. the stiffness fit over the fitted shape keys (stiffness_fit.py);
5. the warp, smoothed over the coarse edge length (transfer.smoothed_warp), and the per-shape
   detail corrections from the coarse equilibria through it (detail.py);
6. the fitted maps carried to the rig's vertices (for the add-on's vertex groups);
and the ShellModel that shell_file.save_shell writes.
"""
from __future__ import annotations

import time
from typing import Callable, Optional

import numpy as np

from ..rig import FaceRig, rig_triangles
from .depth import eyelid_vertices, max_depth
from .detail import detail_corrections
from .remesh import remesh_skin
from .scale import face_height
from .settings import ShellSettings
from .shell_file import ShellModel
from .stiffness_fit import FitResult, QuasiStaticProblem, fit_stiffness
from .topology import ShellTopology
from .transfer import RigTransfer, smoothed_warp, smoothing_radius

# Shape keys whose names contain one of these are correctives (combinations fixed up on top of
# other keys): paper 001 §4 fits the non-corrective keys only.
CORRECTIVE_MARKERS = ("corrective", "_corr", "corr_")


def fitted_shapes(shape_names, coarse_deltas) -> np.ndarray:
    """(K,) bool: the keys the stiffness fit uses — the non-corrective ones that move the shell."""
    moves = np.abs(np.asarray(coarse_deltas)).reshape(len(coarse_deltas), -1).max(axis=1) > 0
    corrective = np.array([any(marker in str(name).lower() for marker in CORRECTIVE_MARKERS)
                           for name in shape_names], dtype=bool)
    return moves & ~corrective


def build_shell(rig: FaceRig, triangles: int = 4000, settings: Optional[ShellSettings] = None,
                progress: Optional[Callable[[str], None]] = None) -> tuple[ShellModel, dict]:
    """The fitted shell of a rig and a summary (sizes, seconds, fit numbers)."""
    settings = settings or ShellSettings(triangles=int(triangles))
    say = progress or (lambda message: None)
    seconds = {}
    started = time.perf_counter()
    fine_rest_m = np.asarray(rig.vertices, dtype=np.float64)
    fine_triangles = rig_triangles(rig)
    fine_deltas_m = np.asarray(rig.shape_key_deltas, dtype=np.float64).reshape(-1, len(fine_rest_m), 3)
    shape_names = tuple(str(name) for name in rig.shape_key_names)
    height = face_height(fine_rest_m, fine_deltas_m)
    say(f"face height {height * 1000:.1f} mm; remeshing the skin to {settings.triangles} triangles")

    remeshed = remesh_skin(fine_rest_m, fine_triangles, settings.triangles)
    transfer = RigTransfer.build(fine_rest_m, fine_triangles, remeshed.vertices, remeshed.triangles, fine_deltas_m)
    coarse_rest = remeshed.vertices / height
    coarse_triangles = np.asarray(remeshed.triangles, dtype=np.int64)
    coarse_deltas = transfer.coarse_deltas(fine_deltas_m) / height if len(fine_deltas_m) else \
        np.zeros((0, len(coarse_rest), 3))
    seconds["remesh_transfer"] = time.perf_counter() - started

    mark = time.perf_counter()
    depth, thin = max_depth(coarse_rest, coarse_triangles, coarse_deltas, shape_names, fine_rest_m / height,
                            fine_triangles, thin_depth=settings.thin_depth)
    prescribed = eyelid_vertices(coarse_triangles, coarse_deltas, shape_names)
    seconds["depth"] = time.perf_counter() - mark

    topology = ShellTopology.from_triangles(coarse_rest, coarse_triangles)
    fitted = fitted_shapes(shape_names, coarse_deltas)
    say(f"fitting stiffness: {len(coarse_rest)} coarse vertices, {int(fitted.sum())} shape keys")
    mark = time.perf_counter()
    fit = fit_stiffness(topology, coarse_rest + coarse_deltas[fitted], prescribed, settings, log=say)
    seconds["fit"] = time.perf_counter() - mark

    mark = time.perf_counter()
    equilibria = np.repeat(coarse_rest[None], len(shape_names), axis=0)
    equilibria[fitted] = fit.equilibria
    others = np.flatnonzero(~fitted)
    if len(others):     # correctives: their equilibria at the fitted stiffness, for their detail
        equilibria[others] = shape_equilibria(topology, coarse_rest + coarse_deltas[others], prescribed,
                                              settings, fit)
    warp = smoothed_warp(fine_rest_m, fine_triangles, transfer.fine_from_coarse,
                         smoothing_radius(remeshed.vertices, coarse_triangles, settings.warp_smoothing))
    detail = detail_corrections(fine_deltas_m, warp, equilibria - coarse_rest, height, settings.detail_clip)
    fine_strain, fine_bending = (np.maximum(warp @ field, 0.0)
                                 for field in (fit.strain_stiffness, fit.bending_stiffness))
    smallest = min(fit.strain_stiffness.min(), fit.bending_stiffness.min())
    seconds["detail"] = time.perf_counter() - mark

    model = ShellModel(
        face_height_m=height, coarse_rest=coarse_rest, coarse_triangles=coarse_triangles,
        coarse_from_fine=transfer.coarse_from_fine, fine_from_coarse=warp,
        shape_names=shape_names, coarse_deltas=coarse_deltas,
        strain_stiffness=fit.strain_stiffness, bending_stiffness=fit.bending_stiffness,
        max_depth=depth, prescribed=prescribed, fine_rest_m=fine_rest_m, detail=detail,
        fine_strain_stiffness=np.maximum(fine_strain, smallest),
        fine_bending_stiffness=np.maximum(fine_bending, smallest), settings=settings)
    seconds["total"] = time.perf_counter() - started
    summary = {
        "face_height_m": height, "coarse_vertices": len(coarse_rest), "coarse_triangles": len(coarse_triangles),
        "fine_vertices": len(fine_rest_m), "shapes": len(shape_names), "fitted_shapes": int(fitted.sum()),
        "prescribed": int(prescribed.sum()), "thin": int(thin.sum()),
        "fit_iterations": fit.iterations, "fit_evaluations": fit.evaluations, "newton_solves": fit.newton_solves,
        "fit_loss": fit.loss, "fit_stop": fit.stop_reason, "max_deviation": fit.max_deviation,
        "max_deviation_mm": fit.max_deviation * height * 1000, "detail_entries": int(detail.nnz),
        "warp_entries_per_vertex": round(warp.nnz / len(fine_rest_m), 2),
        "seconds": {key: round(value, 3) for key, value in seconds.items()},
    }
    return model, summary


def shape_equilibria(topology: ShellTopology, targets, prescribed, settings: ShellSettings,
                     fit: FitResult) -> np.ndarray:
    """Quasi-static equilibria (K, n, 3) of `targets` at the fitted stiffness, from the targets;
    a shape whose solve does not converge keeps its last iterate."""
    problem = QuasiStaticProblem(topology, targets, prescribed, settings, iteration_cap=100)
    for shape in problem.shapes:
        shape.solve(fit.strain_stiffness, fit.bending_stiffness, problem.newton_tolerance, problem.iteration_cap)
        shape.accepted = shape.trial
    return problem.equilibria()
