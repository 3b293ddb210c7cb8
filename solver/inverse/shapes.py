"""Fit every (or the chosen) shape key of a rig, in parallel processes: the `fit` command's work.

Shapes are independent problems, so `jobs` worker processes each build one ShapeFitter (the
neutral solve and the symbolic analysis once per worker) and take shapes from a queue; the
parent reports each finished shape as it arrives. Each worker runs numba and BLAS on one
thread, so N jobs use N cores without oversubscribing them.

The face region — where the fit error is reported and the fit weighs most — is the rig's
vertex group `face_region` when it has one, and otherwise every skin vertex in front of the
jaw hinge (the condyles) and above the menton, which leaves out the back of the head, the
ears and the neck.
"""
from __future__ import annotations

import multiprocessing
import os
import time
from contextlib import contextmanager
from typing import Callable, Optional, Sequence

import numpy as np

from ..rig import FaceRig
from .fit import FitSettings, ShapeFit, ShapeFitter

FACE_REGION_GROUP = "face_region"
BELOW_MENTON_MARGIN = 0.01      # m of chin underside still counted as face


class ShapeSelectionError(ValueError):
    """A requested shape key is not in the rig."""


def face_region(model, rig: FaceRig) -> tuple[np.ndarray, str]:
    """(V,) bool mask and how it was chosen."""
    names = [str(name) for name in (rig.vertex_group_names if rig.vertex_group_names is not None else [])]
    if FACE_REGION_GROUP in names:
        weights = np.asarray(rig.vertex_group_weights)[names.index(FACE_REGION_GROUP)]
        return weights > 0.5, f"vertex group '{FACE_REGION_GROUP}'"
    frame = np.asarray(model["head_frame"])
    local = (np.asarray(model["skin_vertices"]) - np.asarray(model["head_origin"])) @ frame.T
    hinge_forward = ((np.asarray(model["condyles"]) - np.asarray(model["head_origin"])) @ frame.T)[:, 2].mean()
    landmarks = {str(n): p for n, p in zip(model["landmark_names"], model["landmark_positions"])}
    menton_up = ((landmarks["menton"] - np.asarray(model["head_origin"])) @ frame.T)[1] if "menton" in landmarks \
        else local[:, 1].min()
    mask = (local[:, 2] > hinge_forward) & (local[:, 1] > menton_up - BELOW_MENTON_MARGIN)
    return mask, "in front of the jaw hinge and above the chin (no 'face_region' vertex group)"


def select_shapes(rig: FaceRig, requested: Optional[Sequence[str]]) -> list[str]:
    names = [str(name) for name in rig.shape_key_names]
    if not requested:
        return names
    unknown = [name for name in requested if name not in names]
    if unknown:
        raise ShapeSelectionError(f"shape keys not in the rig: {', '.join(unknown)}; the rig has: {', '.join(names)}")
    return list(requested)


# One fitter per worker process, built by the pool's initializer, with the shapes' deltas.
_worker_fitter: Optional[ShapeFitter] = None
_worker_deltas: dict = {}


def _start_worker(model, deltas, region, settings):
    global _worker_fitter, _worker_deltas
    import numba
    numba.set_num_threads(1)
    _worker_fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region, settings)
    _worker_deltas = deltas


def _fit_in_worker(name) -> ShapeFit:
    return _worker_fitter.fit(name, _worker_deltas[name])


@contextmanager
def _single_threaded_children():
    """Child processes read these when their BLAS loads; the parent's own threads are unaffected."""
    saved = {key: os.environ.get(key) for key in ("OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
    os.environ.update({key: "1" for key in saved})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fit_shapes(model, rig: FaceRig, names: Sequence[str], settings: FitSettings | None = None, jobs: int = 1,
               progress: Callable[[ShapeFit, int, int], None] = lambda fit, done, total: None) -> dict:
    """Fit the named shape keys; returns the FIT.npz arrays (fit_file.py) in the rig's order."""
    settings = settings or FitSettings()
    region, region_source = face_region(model, rig)
    all_names = [str(name) for name in rig.shape_key_names]
    deltas = {name: np.asarray(rig.shape_key_deltas[all_names.index(name)]) for name in names}
    started = time.perf_counter()
    results: dict[str, ShapeFit] = {}
    if jobs <= 1 or len(names) <= 1:
        fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region, settings)
        for name in names:
            results[name] = fitter.fit(name, deltas[name])
            progress(results[name], len(results), len(names))
    else:
        context = multiprocessing.get_context("spawn")
        with _single_threaded_children(), context.Pool(min(jobs, len(names)), initializer=_start_worker,
                                                       initargs=(model, deltas, region, settings)) as pool:
            for fit in pool.imap_unordered(_fit_in_worker, names):
                results[fit.name] = fit
                progress(fit, len(results), len(names))
    ordered = [results[name] for name in names]
    rest_skin = np.asarray(model["skin_vertices"])
    targets = [rest_skin + deltas[name] for name in names]
    active_count = ordered[0].activations.shape[0]
    return {
        "shape_key_names": np.array(names, dtype=str),
        "activations": np.stack([fit.activations for fit in ordered]),
        "jaw": np.stack([fit.jaw for fit in ordered]),
        "fit_error_mm": np.stack([fit.error_mm for fit in ordered]),
        "status": np.array([fit.status for fit in ordered], dtype=str),
        "detail_residual": np.stack([target - fit.skin for target, fit in zip(targets, ordered)]),
        "neutral_activations": np.tile(np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), (active_count, 1)),
        "iterations": np.array([fit.iterations for fit in ordered]),
        "seconds": np.array([fit.seconds for fit in ordered]),
        "contractions": np.stack([fit.contractions if fit.contractions is not None
                                  else np.ones(len(model["muscle_names"])) for fit in ordered]),
        "face_region": region,
        "face_region_source": np.array(region_source),
        "tet_count": np.array(len(model["tets"])),
        "skin_vertex_count": np.array(len(rest_skin)),
        "total_seconds": np.array(time.perf_counter() - started),
    }
