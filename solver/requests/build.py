"""One build request: a face rig turned into a volumetric model, checked once, and the one way
the build runs (solver/model_builder/builder.py). MODEL.npz is written atomically."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import fields as check

# Below ~500 tets the face is a handful of tets across (a 105-tet model was built without a word);
# above 500k the build and every frame take hours and the Hessian most of the memory.
TARGET_TETS_RANGE = (500, 500_000)
DEFAULT_TARGET_TETS = 35_000
STAGES = ("landmarks", "tissue", "tet mesh", "attachments", "muscles", "directions", "embedding", "assemble")
INPUT_FIELDS = ("rig",)


@dataclass(frozen=True)
class BuildRequest:
    rig: Path
    output: Path                    # MODEL.npz
    target_tets: int = DEFAULT_TARGET_TETS

    def __post_init__(self):
        object.__setattr__(self, "rig", check.input_file(self.rig, "rig", "RIG.npz"))
        object.__setattr__(self, "target_tets", check.whole_number(self.target_tets, "target_tets",
                                                                   *TARGET_TETS_RANGE))
        object.__setattr__(self, "output", check.output_file(self.output, "output", ".npz", (self.rig,)))


def run_build(request: BuildRequest, report) -> dict:
    """Build the model and write MODEL.npz; the summary: outputs, tets, nodes, muscles, seconds, message."""
    from ..model_builder.builder import BuildOptions, build_model
    from ..model_file import build_info, save_model
    from ..rig import load_rig
    started = time.perf_counter()
    done = []

    def on_stage(text):
        done.append(text)
        report.progress(text, fraction=round(min(len(done) / len(STAGES), 1.0), 3))

    rig = load_rig(request.rig)
    report.progress(f"rig: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys", fraction=0.0)
    model = build_model(rig, BuildOptions(target_tets=request.target_tets, progress=on_stage))
    save_model(request.output, model)   # atomic: an old model of the same name survives a cancel
    info = build_info(model)
    seconds = time.perf_counter() - started
    return {"outputs": {"model": str(request.output)}, "tets": int(info["tet_count"]),
            "nodes": int(info["node_count"]), "muscles": [str(name) for name in model["muscle_names"]],
            "seconds": round(seconds, 2),
            "message": f"model: {info['tet_count']} tets, {info['node_count']} nodes, "
                       f"{len(model['muscle_names'])} muscles in {seconds:.1f} s"}
