"""One play-correctives request: shape-key weights played through the corrected rig, no physics.

`python -m solver play-correctives RIG.npz CORR.npz WEIGHTS.npz -o RESULT.npz` and the
`play-correctives` job kind parse into a `PlayCorrectivesRequest`. Per frame the skin is the
rig's neutral plus its deltas plus the corrective terms (correctives/corr_file.py), under the
frame's head transform as `animate` places the rig; RESULT.npz and its `.pc2` are written by the
writers `animate` uses (physics/animate.AnimationResult, pc2.Pc2Writer) into a partial folder
and swapped into place when every frame is done.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import fields as check
from .fields import RequestError


@dataclass(frozen=True)
class PlayCorrectivesRequest:
    rig: Path
    correctives: Path
    weights: Path
    output: Path                         # RESULT.npz; its .pc2 beside it
    cache_start_frame: float = 1.0       # as in AnimateRequest
    cache_metres_per_unit: float = 1.0

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("rig", check.input_file(self.rig, "rig", "RIG.npz"))
        put("correctives", check.input_file(self.correctives, "correctives", "CORR.npz"))
        put("weights", check.input_file(self.weights, "weights", "WEIGHTS.npz"))
        put("cache_start_frame", check.number(self.cache_start_frame, "cache_start_frame", -1e6, 1e6,
                                              meaning="the scene frame of the first frame"))
        put("cache_metres_per_unit", check.number(self.cache_metres_per_unit, "cache_metres_per_unit", 1e-6, 1e3,
                                                  meaning="metres per unit of the .pc2 (0.01 for a rig in cm)"))
        put("output", check.output_file(self.output, "output", ".npz", [self.rig, self.correctives, self.weights],
                                        companions=(".pc2",)))


def _refused(field: str, error: Exception, fix: str) -> RequestError:
    """A loader's error as the request's: its own fix when it gives one, else `fix`."""
    problem, _, own_fix = str(error).partition(". Fix: ")
    return RequestError(field, problem.rstrip("."), own_fix.rstrip(".") or fix)


def run_play_correctives(request: PlayCorrectivesRequest, report) -> dict:
    from ..correctives.corr_file import CorrectedRig, CorrectivesFormatError, load_correctives
    from ..inverse.blend import load_weights
    from ..physics.animate import AnimationResult
    from ..physics.inputs import AnimationInputError
    from ..npz_files import write_npz_atomically
    from ..pc2 import Pc2Writer
    from ..rig import RigFormatError, load_rig
    from .animate import _fresh_partial_folder, partial_folder
    try:
        rig = load_rig(request.rig)
    except RigFormatError as error:
        raise _refused("rig", error, "export the rig again") from None
    names = [str(name) for name in rig.shape_key_names]
    try:
        correctives = load_correctives(request.correctives, names, len(rig.vertices))
    except CorrectivesFormatError as error:
        raise _refused("correctives", error, "build the correctives again") from None
    try:
        weights, _, fps, heads = load_weights(request.weights, {"shape_key_names": np.array(names)})
    except AnimationInputError as error:
        # load_weights speaks of a fit; here the names are the rig's shape keys.
        message = str(error).replace("not in the fit (it has", "not shape keys of the rig (it has")
        message = message.replace("; fit those shapes or fix the names", "; fix the names")
        raise _refused("weights", f"{request.weights.name}: {message}",
                       "correct the weights file as the message says") from None
    corrected = CorrectedRig(rig.vertices, rig.shape_key_deltas, names, correctives)
    frames = len(weights)
    report.progress(f"playing {frames} frames through {len(correctives['terms'])} corrective shapes",
                    fraction=0.0, frame=0, frames=frames)
    workspace = partial_folder(request.output)
    _fresh_partial_folder(workspace)
    skin = np.empty((frames, len(rig.vertices), 3))
    seconds = np.zeros(frames)
    with Pc2Writer(workspace / "result.pc2", len(rig.vertices), start_frame=request.cache_start_frame) as cache:
        for frame in range(frames):
            started = time.perf_counter()
            head = heads[frame]
            skin[frame] = corrected.frame(weights[frame]) @ head[:3, :3].T + head[:3, 3]
            seconds[frame] = time.perf_counter() - started
            cache.append(skin[frame] / request.cache_metres_per_unit)
    # The skull and jaw follow the head transform as a rigid whole (no jaw solve without physics).
    result = AnimationResult(skin_positions=skin, converged=np.ones(frames, dtype=bool),
                             newton_iterations=np.zeros(frames, dtype=np.int64), frame_seconds=seconds, fps=fps,
                             skull_transforms=heads.copy(), jaw_transforms=heads.copy())
    write_npz_atomically(workspace / "result.npz", result.arrays())
    cache_path = request.output.with_suffix(".pc2")
    os.replace(workspace / "result.pc2", cache_path)
    os.replace(workspace / "result.npz", request.output)
    with contextlib.suppress(OSError):
        shutil.rmtree(workspace)
    milliseconds = 1e3 * float(np.median(seconds))
    return {"outputs": {"result": str(request.output), "cache": str(cache_path)}, "frames": int(frames),
            "frame_ms": round(milliseconds, 4),
            "message": f"wrote {request.output.name} and {cache_path.name}: {frames} frames of the corrected rig, "
                       f"{milliseconds:.2f} ms per frame"}
