"""Fit every (or the chosen) shape key of a rig, in parallel processes: the `fit` command's work.

`jobs` worker processes each build one ShapeFitter (the neutral solve and the symbolic analysis
once per worker) and take shapes as the parent hands them out; the parent reports each finished
shape as it arrives. Each worker runs numba and BLAS on one thread, so N jobs use N cores without
oversubscribing them.

Mirrored starts: the later shape of a mirrored pair (mouthSmile_R after mouthSmile_L) starts
from the reflection of the earlier one's fit (mirror.py). It is handed out only once that fit is
in, and the guess is used only if it fits the target better than the neutral face. FIT.npz
records each shape's start in `fit_start`.

Context shapes: ARKit defines mouthClose on top of jawOpen (it closes the lips of an open jaw).
On its own its target moves the lower lip ~3 cm up *through* the upper lip (ICT face: 32 mm up,
15 mm forward), a pose no tissue can take, so it is fitted where it is meant to be used: the
target jawOpen + mouthClose gives a_JC, b_JC, and mouthClose stores the difference

    a_C = a_neut + (a_JC − a_J),   b_C = b_JC − b_J,

so that the animation blend a_neut + w_J (a_J − a_neut) + w_C (a_C − a_neut) is exactly a_JC at
w_J = w_C = 1. Its fit error is that of the combined pose, and so is its detail residual, less
the context's: jawOpen and mouthClose played together at weight 1 with their details reproduce
jawOpen + mouthClose. Alone at weight 1 the difference is no activation at all on the ICT face
(S with negative eigenvalues where jawOpen stretched what mouthClose relaxes), and blend.py
refuses such a frame, naming the context to key. The context shape is fitted too when it was
not asked for.

The face region — where the fit error is reported and the fit weighs most — is the rig's
vertex group `face_region` when it has one, and otherwise every skin vertex in front of the
jaw hinge (the condyles) and above the menton, which leaves out the back of the head, the
ears and the neck.
"""
from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..model_file import model_landmarks
from ..rig import FaceRig
from .fit import FitSettings, ShapeFit, ShapeFitter
from .mirror import ModelMirror, mirror_partner
from .regularizers import neutral_activations

FACE_REGION_GROUP = "face_region"
# shape → the shape it is defined on top of (ARKit convention)
CONTEXT_SHAPES = {"mouthClose": "jawOpen"}
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
    landmarks = model_landmarks(model)
    menton_up = ((landmarks["menton"] - np.asarray(model["head_origin"])) @ frame.T)[1] if "menton" in landmarks \
        else local[:, 1].min()
    mask = (local[:, 2] > hinge_forward) & (local[:, 1] > menton_up - BELOW_MENTON_MARGIN)
    return mask, "in front of the jaw hinge and above the chin (no 'face_region' vertex group)"


def select_shapes(rig: FaceRig, requested: Optional[Sequence[str]]) -> list[str]:
    """The shapes to fit in the rig's order: the requested ones (default all) plus the context
    shapes they are defined on."""
    names = [str(name) for name in rig.shape_key_names]
    if not requested:
        return names
    unknown = [name for name in requested if name not in names]
    if unknown:
        raise ShapeSelectionError(f"shape keys not in the rig: {', '.join(unknown)}; the rig has: {', '.join(names)}")
    wanted = set(requested) | {CONTEXT_SHAPES[name] for name in requested
                               if name in CONTEXT_SHAPES and CONTEXT_SHAPES[name] in names}
    return [name for name in names if name in wanted]


def fit_contexts(names: Sequence[str]) -> dict:
    """shape → context shape, for the context shapes whose context is among `names`."""
    return {name: CONTEXT_SHAPES[name] for name in names if CONTEXT_SHAPES.get(name) in names}


# One fitter per worker process, built by the pool's initializer, with the shapes' deltas.
_worker_fitter: Optional[ShapeFitter] = None
_worker_deltas: dict = {}


def _start_worker(model, deltas, region, settings):
    global _worker_fitter, _worker_deltas
    import numba
    numba.set_num_threads(1)
    _worker_fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region, settings)
    _worker_deltas = deltas


def _fit_in_worker(name, start) -> ShapeFit:
    return _worker_fitter.fit(name, _worker_deltas[name], start=start)


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


def mirror_sources(names: Sequence[str], mirrored: bool, earlier: Sequence[str] = ()) -> dict:
    """shape → the shape whose fit it starts from, reflected (only when the model has a mirror):
    the later shape of each mirrored pair in `names`, and a shape whose partner is not fitted
    now but is among the `earlier` fits. Context shapes keep the neutral start: mouthClose
    started from jawOpen's fit on the ICT face ended less accurate (1.07 / 5.67 mm against
    0.98 / 5.08) for a 7 % shorter fit."""
    if not mirrored:
        return {}
    sources = {}
    for position, name in enumerate(names):
        partner = mirror_partner(name, names)
        kept_partner = mirror_partner(name, earlier)
        if partner is not None and names.index(partner) < position:
            sources[name] = partner
        elif partner is None and kept_partner is not None:
            sources[name] = kept_partner
    return sources


@dataclass(frozen=True)
class KeptFit:
    """A shape's fit from an earlier FIT.npz: what a mirror partner fitted now may start from."""
    status: str
    activations: np.ndarray
    jaw: np.ndarray


def kept_fits(fit_arrays) -> dict:
    """shape → KeptFit for every shape of FIT.npz arrays (fit_file.load_fit)."""
    return {str(name): KeptFit(str(status), np.asarray(activations), np.asarray(jaw))
            for name, status, activations, jaw in zip(fit_arrays["shape_key_names"], fit_arrays["status"],
                                                      fit_arrays["activations"], fit_arrays["jaw"])}


def _mirrored_guess(source: Optional[str], fits: dict, mirror: Optional[ModelMirror]):
    """(activations, jaw) to start from, or None when there is no source or it was not fitted."""
    if source is None or fits[source].status != "fitted":
        return None
    return mirror.activations(fits[source].activations), mirror.jaw(fits[source].jaw)


def held_muscle_names(fit: ShapeFit, muscle_names) -> list:
    """The names of the muscles the fit held at rest (ShapeFit.held_muscles), for progress lines."""
    if fit.held_muscles is None:
        return []
    return [str(muscle_names[i]) for i in np.flatnonzero(fit.held_muscles)]


def describe_start(started_from: str) -> str:
    """Words for a `fit_start` label, for progress lines: "" for the neutral face."""
    kind, _, name = started_from.partition(":")
    return f", started from the mirror of {name}" if kind == "mirror" else ""


def fit_progress(fit: ShapeFit, done: int, total: int, muscle_names) -> tuple[str, dict]:
    """(message, fields) of the progress line of one fitted shape, the same for the command line
    and the add-on's jobs: words for a person, and the figures as JSON fields."""
    mean, p95, worst = (float(value) for value in fit.error_mm)
    on_top = f" on top of {fit.context}" if fit.context else ""
    message = (f"{fit.name} ({done}/{total}): {fit.status}{on_top}, error mean {mean:.2f} / 95th {p95:.2f} / "
               f"max {worst:.2f} mm, {fit.iterations} iterations, {fit.seconds:.1f} s{describe_start(fit.started_from)}")
    fields = dict(shape=fit.name, done=done, total=total, status=fit.status, context=fit.context,
                  start=fit.started_from, error_mm=[round(mean, 4), round(p95, 4), round(worst, 4)],
                  iterations=int(fit.iterations), seconds=round(float(fit.seconds), 2),
                  muscles_held=held_muscle_names(fit, muscle_names))
    return message, fields


def _labelled(fit: ShapeFit, source: Optional[str]) -> ShapeFit:
    started = f"mirror:{source}" if fit.started_from == "guess" else fit.started_from
    return dataclasses.replace(fit, started_from=started)


def fit_shapes(model, rig: FaceRig, names: Sequence[str], settings: FitSettings | None = None, jobs: int = 1,
               progress: Callable[[ShapeFit, int, int], None] = lambda fit, done, total: None,
               earlier_fits: Optional[dict] = None) -> dict:
    """Fit the named shape keys; returns the FIT.npz arrays (fit_file.py) in the rig's order.
    `earlier_fits`: shape → KeptFit (kept_fits) of an earlier fit, used only as mirrored starts:
    re-fitting mouthSmile_R alone starts from the reflection of the kept mouthSmile_L.

    The later shape of a mirrored pair waits for the earlier one's fit and starts from its
    reflection (mirror_sources), on one process or many: which start a shape gets does not depend
    on the number of jobs or on timing."""
    settings = settings or FitSettings()
    region, region_source = face_region(model, rig)
    all_names = [str(name) for name in rig.shape_key_names]
    deltas = {name: np.asarray(rig.shape_key_deltas[all_names.index(name)]) for name in names}
    contexts = fit_contexts(names)
    fitted_deltas = {name: deltas[name] + (deltas[contexts[name]] if name in contexts else 0.0) for name in names}
    mirror = ModelMirror.from_model(model)
    earlier_fits = {name: fit for name, fit in (earlier_fits or {}).items() if name not in names}
    sources = mirror_sources(list(names), mirror is not None, list(earlier_fits))
    started = time.perf_counter()
    results: dict[str, ShapeFit] = {}
    known = dict(earlier_fits)      # the fits a guess may come from: earlier ones, then each new one
    finished: "queue.Queue" = queue.Queue()

    def report(fit):
        results[fit.name] = known[fit.name] = _labelled(fit, sources.get(fit.name))
        progress(dataclasses.replace(results[fit.name], context=contexts.get(fit.name, "")), len(results),
                 len(names))

    def ready():
        return [name for name in pending if name not in sources or sources[name] in known]

    pending = list(names)
    if jobs <= 1 or len(names) <= 1:
        fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region, settings)
        while pending:
            name = ready()[0]
            pending.remove(name)
            report(fitter.fit(name, fitted_deltas[name], start=_mirrored_guess(sources.get(name), known, mirror)))
    else:
        spawn = multiprocessing.get_context("spawn")
        workers = min(jobs, len(names))
        with _single_threaded_children(), spawn.Pool(workers, initializer=_start_worker,
                                                     initargs=(model, fitted_deltas, region, settings)) as pool:
            running = 0
            while pending or running:
                for name in ready()[:workers - running]:
                    pending.remove(name)
                    running += 1
                    pool.apply_async(_fit_in_worker, (name, _mirrored_guess(sources.get(name), known, mirror)),
                                     callback=finished.put, error_callback=finished.put)
                outcome = finished.get()
                running -= 1
                if isinstance(outcome, BaseException):
                    raise outcome
                report(outcome)
    rest_skin = np.asarray(model["skin_vertices"])
    for name, context_name in contexts.items():
        results[name] = _relative_to_context(rest_skin, results[name], results[context_name])
    ordered = [results[name] for name in names]
    targets = [rest_skin + deltas[name] for name in names]
    active_count = ordered[0].activations.shape[0]
    return {
        "shape_key_names": np.array(names, dtype=str),
        "activations": np.stack([fit.activations for fit in ordered]),
        "jaw": np.stack([fit.jaw for fit in ordered]),
        "fit_error_mm": np.stack([fit.error_mm for fit in ordered]),
        "status": np.array([fit.status for fit in ordered], dtype=str),
        "detail_residual": np.stack([target - fit.skin for target, fit in zip(targets, ordered)]),
        "shape_key_deltas": rig_shape_deltas(rig, names),
        "neutral_activations": np.tile(np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), (active_count, 1)),
        "iterations": np.array([fit.iterations for fit in ordered]),
        "seconds": np.array([fit.seconds for fit in ordered]),
        "contractions": np.stack([fit.contractions if fit.contractions is not None
                                  else np.ones(len(model["muscle_names"])) for fit in ordered]),
        "fit_context": np.array([contexts.get(name, "") for name in names], dtype=str),
        "fit_start": np.array([fit.started_from for fit in ordered], dtype=str),
        "muscles_held": np.stack([fit.held_muscles if fit.held_muscles is not None
                                  else np.zeros(len(model["muscle_names"]), dtype=bool) for fit in ordered]),
        "face_region": region,
        "face_region_source": np.array(region_source),
        "tet_count": np.array(len(model["tets"])),
        "skin_vertex_count": np.array(len(rest_skin)),
        "total_seconds": np.array(time.perf_counter() - started),
    }


def rig_shape_deltas(rig: FaceRig, names: Sequence[str], dtype=np.float32) -> np.ndarray:
    """(K, V, 3) the rig's own shape-key deltas of `names`, float32 as FIT.npz keeps them
    (`shape_key_deltas`: the plain rig frame a played fit is compared with, physics/skin_filter.py)."""
    all_names = [str(name) for name in rig.shape_key_names]
    return np.stack([np.asarray(rig.shape_key_deltas[all_names.index(str(name))]) for name in names]).astype(dtype)


def _relative_to_context(rest_skin, combined: ShapeFit, context: ShapeFit) -> ShapeFit:
    """The combined fit (context + shape) turned into the shape's own activations and jaw (see the
    module docstring). `skin` becomes the combined pose less the context's motion, so that the
    detail residuals of the two add up to the combined pose's: played together at weight 1 they
    reproduce context + shape. The error stays that of the combined pose."""
    if combined.status != "fitted":
        return combined
    neutral = neutral_activations(len(combined.activations))
    activations = neutral + combined.activations - context.activations
    jaw = combined.jaw - context.jaw
    skin = combined.skin - (context.skin - rest_skin)
    return dataclasses.replace(combined, activations=activations, jaw=jaw, skin=skin, context=context.name)
