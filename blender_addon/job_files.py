"""Job folders the add-on hands to the solver: input `.npz` files plus a versioned `job.json`.

No bpy here (and no solver import: the solver lives in another Python), so the format can be
unit-tested anywhere. The solver side that reads these folders is `solver/jobs.py`; the schema
is documented in docs/addon.md. Arrays are written as plain numeric/str arrays so the solver
can load them with allow_pickle=False.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Dict, Optional

import numpy as np

SCHEMA_VERSION = 1
JOB_FILE = "job.json"
RIG_FILE = "rig.npz"
MODEL_FILE = "model.npz"
ACTIVATIONS_FILE = "activations.npz"
MAPS_FILE = "maps.npz"
RESULT_FILE = "result.npz"


def new_job_folder(parent: Optional[str] = None) -> Path:
    """A fresh, empty folder for one job (in the system temp folder unless `parent` is given)."""
    return Path(tempfile.mkdtemp(prefix="face_physics_job_", dir=parent))


def remove_job_folder(job_dir) -> None:
    shutil.rmtree(job_dir, ignore_errors=True)


def _write_npz(path: Path, arrays: Dict[str, np.ndarray]) -> None:
    for key, value in arrays.items():
        if np.asarray(value).dtype == object:
            raise ValueError(f"{key}: object arrays cannot be read by the solver (allow_pickle=False)")
    with open(path, "wb") as stream:
        np.savez(stream, **{key: np.asarray(value) for key, value in arrays.items()})


def _write_job(job_dir: Path, command: str, inputs: dict, outputs: dict, settings: dict) -> Path:
    job = {"schema_version": SCHEMA_VERSION, "command": command, "inputs": inputs, "outputs": outputs,
           "settings": settings}
    path = job_dir / JOB_FILE
    path.write_text(json.dumps(job, indent=2), encoding="utf-8")
    return path


def write_build_job(job_dir, rig_arrays: Dict[str, np.ndarray], target_tets: int) -> Path:
    """A build-model job: `rig_arrays` are the face-rig keys of docs/face-rig-format.md."""
    job_dir = Path(job_dir)
    _write_npz(job_dir / RIG_FILE, {**rig_arrays, "format_version": np.array(1, dtype=np.int64)})
    return _write_job(job_dir, "build-model", {"rig": RIG_FILE}, {"model": MODEL_FILE},
                      {"target_tets": int(target_tets)})


def place_model(job_dir, model_path) -> None:
    """Put the model into the job folder: a hard link when possible (no copy of a large file),
    else a copy. The solver only reads it, so the link cannot hurt the original."""
    target = Path(job_dir) / MODEL_FILE
    try:
        os.link(model_path, target)
    except OSError:
        shutil.copyfile(model_path, target)


def write_animate_job(job_dir, model_path, activations: Dict[str, np.ndarray],
                      maps: Optional[Dict[str, np.ndarray]], settings: dict) -> Path:
    """An animate job. `activations` holds the ACTIVATIONS.npz keys (muscle_contraction,
    muscle_names, jaw, head_transforms, fps); `maps` the MAPS.npz keys or None."""
    job_dir = Path(job_dir)
    place_model(job_dir, model_path)
    _write_npz(job_dir / ACTIVATIONS_FILE, activations)
    inputs = {"model": MODEL_FILE, "activations": ACTIVATIONS_FILE}
    if maps:
        _write_npz(job_dir / MAPS_FILE, maps)
        inputs["maps"] = MAPS_FILE
    return _write_job(job_dir, "animate", inputs, {"result": RESULT_FILE}, dict(settings))


def read_result_positions(job_dir) -> np.ndarray:
    """Skin positions (T, V, 3) in metres from a finished animate job."""
    with np.load(Path(job_dir) / RESULT_FILE, allow_pickle=False) as result:
        return np.array(result["skin_positions"], dtype=np.float64)


def read_model_summary(model_path) -> dict:
    """Muscle names and sizes of a MODEL.npz, read without the solver (numpy only)."""
    with np.load(model_path, allow_pickle=False) as model:
        return {"muscle_names": [str(name) for name in model["muscle_names"]],
                "tets": int(len(model["tets"])), "nodes": int(len(model["rest_positions"])),
                "skin_vertices": int(len(model["skin_vertices"]))}


def install_file(source, destination) -> None:
    """Copy `source` to `destination` through a temporary file in the destination's folder,
    fsynced, then swapped in with os.replace: a crash never leaves half a file where a good
    one was."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    try:
        with open(source, "rb") as reader, open(temporary, "wb") as writer:
            shutil.copyfileobj(reader, writer, 1 << 20)
            writer.flush()
            os.fsync(writer.fileno())
        os.replace(temporary, destination)
    finally:
        if temporary.exists():
            temporary.unlink()
