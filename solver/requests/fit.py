"""One fit request: which shape keys of a rig to fit on which model, checked once, and the one
way the fit runs (solver/inverse/shapes.py does the fitting; inverse-physics.md says how).

With `previous_fit` the shapes asked for are fitted and the earlier fit's other shapes (still
shape keys of the rig) are kept unchanged, in the rig's order; a kept shape fitted on top of one
fitted again now (mouthClose on jawOpen) is fitted again too, since it stores its difference to
that fit. An earlier fit that cannot be kept (another model, another energy, unreadable) is
dropped with a warning. FIT.npz is written atomically (fit_file.save_fit).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import fields as check
from .fields import RequestError

MAX_FIT_PROCESSES = 64
# The per-shape arrays of FIT.npz (solver/inverse/shapes.py), merged shape by shape when a fit
# keeps the shapes of an earlier fit; every other key is taken from the new fit.
PER_SHAPE_FIT_KEYS = ("shape_key_names", "activations", "jaw", "fit_error_mm", "status", "detail_residual",
                      "iterations", "seconds", "contractions", "fit_context", "fit_start", "muscles_held")
# Per-shape arrays taken from the rig for every shape of the merged fit (older fits lack them).
RIG_FIT_KEYS = ("shape_key_deltas",)
INPUT_FIELDS = ("model", "rig", "previous_fit")


@dataclass(frozen=True)
class FitRequest:
    model: Path
    rig: Path                               # the rig the model was built from
    output: Path                            # FIT.npz
    shapes: tuple = ()                      # shape-key names; empty: all
    processes: int = 1                      # shapes fitted at once, one process each
    previous_fit: Optional[Path] = None     # FIT.npz whose other shapes are kept

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("model", check.input_file(self.model, "model", "MODEL.npz"))
        put("rig", check.input_file(self.rig, "rig", "RIG.npz"))
        if self.previous_fit is not None:
            put("previous_fit", check.input_file(self.previous_fit, "previous_fit", "FIT.npz"))
        put("shapes", check.names(self.shapes, "shapes"))
        put("processes", check.whole_number(self.processes, "processes", 1, MAX_FIT_PROCESSES))
        put("output", check.output_file(self.output, "output", ".npz", (self.model, self.rig, self.previous_fit)))


def _previous_fit(path, model, rig_names: list, report) -> Optional[dict]:
    """The earlier fit whose other shapes are kept, or None when there is none or it cannot be
    kept (then everything asked for is fitted afresh and the rest is dropped)."""
    from ..inverse.fit_file import FitFormatError, fit_energy_warning, fitted_stiffening, load_fit
    from ..physics.active_stiffening import STIFFENING_AT_FULL
    if path is None:
        return None
    try:
        previous = load_fit(path, model)
    except FitFormatError as error:
        report.warning(f"the earlier fit cannot be kept ({error}); only the shapes fitted now are in the new fit")
        return None
    if fitted_stiffening(previous) != STIFFENING_AT_FULL:
        report.warning(f"the earlier fit cannot be kept ({fit_energy_warning(previous)}); only the shapes "
                       "fitted now are in the new fit")
        return None
    dropped = [str(name) for name in previous["shape_key_names"] if str(name) not in rig_names]
    if dropped:
        report.warning(f"the earlier fit's {', '.join(dropped)} are no longer shape keys of the rig; dropped")
    return previous


def merged_fit(new: dict, previous: Optional[dict], rig_names: list) -> dict:
    """`new` plus the shapes of `previous` it did not fit again, in the rig's order."""
    if previous is None:
        return new
    new_names = [str(name) for name in new["shape_key_names"]]
    previous_names = [str(name) for name in previous["shape_key_names"]]
    kept = [name for name in previous_names if name not in new_names and name in rig_names]
    if not kept:
        return new
    rows = {name: (new, new_names.index(name)) for name in new_names}
    rows.update({name: (previous, previous_names.index(name)) for name in kept})
    order = [name for name in rig_names if name in rows]
    merged = dict(new)
    for key in PER_SHAPE_FIT_KEYS:
        if key not in new:
            continue
        stacked = []
        for name in order:
            source, row = rows[name]
            if key in source:
                stacked.append(np.asarray(source[key][row]))
            else:     # an older fit without this per-shape key: the value a fresh fit gives a motionless shape
                stacked.append(np.zeros_like(np.asarray(new[key][0])) if key != "contractions"
                               else np.ones_like(np.asarray(new[key][0])))
        merged[key] = np.stack(stacked)
    return merged


def run_fit(request: FitRequest, report) -> dict:
    """Fit the request's shapes and write FIT.npz; the summary: outputs, shapes (fitted now),
    kept (from the earlier fit), worst (shape, error_mm) and message."""
    from ..inverse.fit_file import save_fit
    from ..inverse.shapes import CONTEXT_SHAPES, fit_progress, fit_shapes, kept_fits, rig_shape_deltas, select_shapes
    from ..model_file import load_model
    from ..rig import load_rig
    model = load_model(request.model)
    rig = load_rig(request.rig)
    if len(rig.vertices) != len(model["skin_vertices"]) or not np.allclose(rig.vertices, model["skin_vertices"],
                                                                          atol=1e-9):
        raise RequestError("rig", "not the rig the model was built from (its neutral skin differs)",
                           "build the model again from this mesh, or undo the change to its rest shape")
    rig_names = [str(name) for name in rig.shape_key_names]
    if not rig_names:
        raise RequestError("rig", "the rig has no shape keys to fit", "add ARKit shape keys to the mesh")
    previous = _previous_fit(request.previous_fit, model, rig_names, report)
    requested = list(request.shapes)
    if requested and previous is not None:
        # A kept shape fitted on top of a shape fitted again now stores its difference to the old
        # context fit; it is fitted again with it so that the two stay consistent.
        requested += [str(name) for name in previous["shape_key_names"]
                      if CONTEXT_SHAPES.get(str(name)) in requested and str(name) in rig_names
                      and str(name) not in requested]
    names = select_shapes(rig, requested)
    processes = min(request.processes, len(names))
    report.progress(f"fitting {len(names)} shape{'s' * (len(names) != 1)} in {processes} "
                    f"process{'es' * (processes != 1)}", fraction=0.0, done=0, total=len(names))

    def on_shape(fit, done, total):
        message, fields = fit_progress(fit, done, total, model["muscle_names"])
        report.progress(message, fraction=round(done / total, 4), **fields)

    earlier = kept_fits(previous) if previous is not None else None
    arrays = merged_fit(fit_shapes(model, rig, names, jobs=request.processes, progress=on_shape,
                                   earlier_fits=earlier), previous, rig_names)
    # RIG_FIT_KEYS: the rig's own deltas for every shape, the kept ones too.
    arrays["shape_key_deltas"] = rig_shape_deltas(rig, arrays["shape_key_names"])
    save_fit(request.output, arrays)      # atomic: a cancel or crash never leaves half a fit where a good one was
    all_names = [str(name) for name in arrays["shape_key_names"]]
    errors = np.asarray(arrays["fit_error_mm"], dtype=np.float64)
    worst = int(np.argmax(errors[:, 0]))
    kept = [name for name in all_names if name not in names]
    seconds = float(arrays["total_seconds"]) if "total_seconds" in arrays else None
    return {"outputs": {"fit": str(request.output)}, "shapes": names, "kept": kept,
            "worst": {"shape": all_names[worst], "error_mm": [round(float(e), 4) for e in errors[worst]]},
            "message": f"{len(names)} shape{'s' * (len(names) != 1)} fitted"
                       + (f", {len(kept)} kept from the earlier fit" if kept else "")
                       + f"; worst {all_names[worst]}: mean {errors[worst, 0]:.2f} / 95th {errors[worst, 1]:.2f} / "
                         f"max {errors[worst, 2]:.2f} mm" + ("" if seconds is None else f"; {seconds:.0f} s")}
