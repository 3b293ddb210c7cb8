"""One lips request: the upper and lower lip the solver finds on a model by itself, written as a
LIPS.npz (`upper`, `lower` skin-vertex indices, the file `animate --lip-vertices` reads), so an
artist can start painting the lips from what the solver would use (collisions/lips.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import fields as check

INPUT_FIELDS = ("model",)


@dataclass(frozen=True)
class LipsRequest:
    model: Path
    output: Path                    # LIPS.npz

    def __post_init__(self):
        object.__setattr__(self, "model", check.input_file(self.model, "model", "MODEL.npz"))
        object.__setattr__(self, "output", check.output_file(self.output, "output", ".npz", (self.model,)))


def run_lips(request: LipsRequest, report) -> dict:
    """Find the lips of the model's skin and write LIPS.npz atomically; the summary: outputs,
    vertex counts, how the lips were found (the mouth slit's walls or the landmarks), message."""
    from ..collisions.lips import LipSurfaceError, find_lip_surfaces
    from ..model_file import load_model
    from ..npz_files import write_npz_atomically
    started = time.perf_counter()
    model = load_model(request.model)
    report.progress(f"model: {len(model['skin_vertices'])} skin vertices", fraction=0.2)
    try:
        lips = find_lip_surfaces(model)
    except LipSurfaceError as error:
        raise check.RequestError("model", f"the solver cannot find the lips of this model by itself ({error})",
                                 "paint the vertex groups FP_lip_upper and FP_lip_lower by hand") from None
    upper, lower = (np.asarray(v, dtype=np.int64) for v in (lips.upper_vertices, lips.lower_vertices))
    # A vertex on the mouth corner can close both lips' triangles; the painted lips may not share
    # one (collisions/scene.check_lip_vertices), so it stays with the upper lip.
    lower = np.setdiff1d(lower, upper)
    write_npz_atomically(request.output, {"upper": upper, "lower": lower})
    seconds = time.perf_counter() - started
    return {"outputs": {"lips": str(request.output)}, "upper": int(upper.size), "lower": int(lower.size),
            "source": lips.source, "seconds": round(seconds, 2),
            "message": f"lips: {upper.size} upper and {lower.size} lower lip vertices (found from the "
                       f"{lips.source}) in {seconds:.1f} s"}
