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
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

SCHEMA_VERSION = 1
JOB_FILE = "job.json"
RIG_FILE = "rig.npz"
MODEL_FILE = "model.npz"
ACTIVATIONS_FILE = "activations.npz"
MAPS_FILE = "maps.npz"
RESULT_FILE = "result.npz"
FIT_FILE = "fit.npz"
PREVIOUS_FIT_FILE = "previous_fit.npz"
WEIGHTS_FILE = "weights.npz"
LIP_VERTICES_FILE = "lip_vertices.npz"
LIPS_FILE = "lips.npz"
CORRECTIVES_FILE = "correctives.npz"
# The solver keeps a correctives job's samples beside its output (solver/requests/correctives.py).
CORRECTIVES_SAMPLES = ".correctives.samples"
COLLIDER_PREFIX = "collider"


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


def _write_rig(job_dir: Path, rig_arrays: Dict[str, np.ndarray]) -> None:
    """The job's RIG_FILE: the face-rig keys of docs/face-rig-format.md, format version 1."""
    _write_npz(job_dir / RIG_FILE, {**rig_arrays, "format_version": np.array(1, dtype=np.int64)})


def write_build_job(job_dir, rig_arrays: Dict[str, np.ndarray], target_tets: int) -> Path:
    """A build-model job: `rig_arrays` are the face-rig keys of docs/face-rig-format.md."""
    job_dir = Path(job_dir)
    _write_rig(job_dir, rig_arrays)
    return _write_job(job_dir, "build-model", {"rig": RIG_FILE}, {"model": MODEL_FILE},
                      {"target_tets": int(target_tets)})


def place_file(job_dir, source, name: str) -> None:
    """Put a file the solver only reads into the job folder: a hard link when possible (no copy
    of a large file), else a copy. The solver never writes inputs, so the link cannot hurt the
    original."""
    target = Path(job_dir) / name
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def place_model(job_dir, model_path) -> None:
    place_file(job_dir, model_path, MODEL_FILE)


def write_fit_job(job_dir, model_path, rig_arrays: Dict[str, np.ndarray], shapes: Optional[Sequence[str]],
                  processes: int, previous_fit=None) -> Path:
    """A fit job: every shape key of the rig (`shapes` None) or the named ones; with
    `previous_fit`, the earlier FIT.npz whose other shapes the new fit keeps."""
    job_dir = Path(job_dir)
    place_model(job_dir, model_path)
    _write_rig(job_dir, rig_arrays)
    inputs = {"model": MODEL_FILE, "rig": RIG_FILE}
    if previous_fit is not None:
        place_file(job_dir, previous_fit, PREVIOUS_FIT_FILE)
        inputs["previous_fit"] = PREVIOUS_FIT_FILE
    settings = {"jobs": int(processes)}
    if shapes is not None:
        settings["shapes"] = [str(name) for name in shapes]
    return _write_job(job_dir, "fit", inputs, {"fit": FIT_FILE}, settings)


def write_correctives_job(job_dir, model_path, fit_path, rig_arrays: Dict[str, np.ndarray],
                          keys: Optional[Sequence[str]], processes: int, threshold_mm: float,
                          collisions: Sequence[str], stored_samples=None, pairs: Sequence = ()) -> Path:
    """A correctives job (docs/correctives.md): the keys named (None: every fitted key), only the
    `pairs` given probed (empty: every pair), with the samples solved before (`stored_samples`, a
    folder) linked in so only new ones are solved."""
    job_dir = Path(job_dir)
    place_model(job_dir, model_path)
    place_file(job_dir, fit_path, FIT_FILE)
    _write_rig(job_dir, rig_arrays)
    if stored_samples is not None and Path(stored_samples).is_dir():
        mirror_folder(stored_samples, job_dir / CORRECTIVES_SAMPLES)
    settings = {"jobs": int(processes), "threshold_mm": float(threshold_mm), "collisions": list(collisions)}
    if keys is not None:
        settings["keys"] = [str(name) for name in keys]
    if pairs:
        settings["pairs"] = [[str(name) for name in pair] for pair in pairs]
    return _write_job(job_dir, "correctives", {"model": MODEL_FILE, "fit": FIT_FILE, "rig": RIG_FILE},
                      {"correctives": CORRECTIVES_FILE}, settings)


def mirror_folder(source, destination) -> None:
    """Make `destination` hold exactly the files of `source` (hard links where possible, else
    copies): built beside it under a temporary name, then swapped in, so a crash leaves either
    the old folder or the new one. The solver writes each sample file once under a new name, so
    a linked file is never written through."""
    source, destination = Path(source), Path(destination)
    staging = destination.with_name(f".{destination.name}.{os.getpid()}.new")
    retired = destination.with_name(f".{destination.name}.{os.getpid()}.old")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for item in sorted(source.iterdir()):
        if item.is_file():
            place_file(staging, item, item.name)
    if destination.exists():
        os.replace(destination, retired)
    os.replace(staging, destination)
    shutil.rmtree(retired, ignore_errors=True)


def write_lips_job(job_dir, model_path) -> Path:
    """A lips job: the lips the solver finds on the model by itself (upper, lower skin vertices)."""
    job_dir = Path(job_dir)
    place_model(job_dir, model_path)
    return _write_job(job_dir, "lips", {"model": MODEL_FILE}, {"lips": LIPS_FILE}, {})


def read_lips(job_dir) -> Tuple[np.ndarray, np.ndarray]:
    """(upper, lower) skin-vertex indices from a finished lips job."""
    with np.load(Path(job_dir) / LIPS_FILE, allow_pickle=False) as lips:
        return (np.asarray(lips["upper"], dtype=np.int64), np.asarray(lips["lower"], dtype=np.int64))


def collider_file_name(index: int, object_name: str) -> str:
    """`collider_<index>_<name>.npz`: the solver names the collider after the file, so its
    messages say which object they mean."""
    safe = "".join(character if character.isalnum() or character in "-_" else "_" for character in object_name)
    return f"{COLLIDER_PREFIX}_{index}_{safe or 'object'}.npz"


def write_animate_job(job_dir, model_path, activations: Optional[Dict[str, np.ndarray]],
                      maps: Optional[Dict[str, np.ndarray]], settings: dict, fit_path=None,
                      weights: Optional[Dict[str, np.ndarray]] = None,
                      colliders: Sequence[Tuple[str, Dict[str, np.ndarray]]] = (),
                      lip_vertices: Optional[Dict[str, np.ndarray]] = None) -> Path:
    """An animate job. `activations` holds the ACTIVATIONS.npz keys (muscle_contraction,
    muscle_names, jaw, head_transforms, fps), or None; `fit_path` and `weights` (WEIGHTS.npz:
    names, weights, fps, head_transforms) play shape-key values through a fit, with
    `activations` (contractions only) added on top; `maps` the MAPS.npz keys or None;
    `colliders` (object name, MESH.npz arrays) pairs — `vertices` (V, 3) with a rigid transform
    per frame, or (T, V, 3) for a deforming one; `lip_vertices` the painted lips (`upper`,
    `lower` skin-vertex indices), or None for the solver's automatic lips."""
    job_dir = Path(job_dir)
    place_model(job_dir, model_path)
    inputs = {"model": MODEL_FILE}
    if fit_path is not None:
        place_file(job_dir, fit_path, FIT_FILE)
        _write_npz(job_dir / WEIGHTS_FILE, weights)
        inputs.update(fit=FIT_FILE, weights=WEIGHTS_FILE)
    if activations is not None:
        _write_npz(job_dir / ACTIVATIONS_FILE, activations)
        inputs["activations"] = ACTIVATIONS_FILE
    if maps:
        _write_npz(job_dir / MAPS_FILE, maps)
        inputs["maps"] = MAPS_FILE
    if colliders:
        names = []
        for index, (object_name, arrays) in enumerate(colliders):
            names.append(collider_file_name(index, object_name))
            _write_npz(job_dir / names[-1], arrays)
        inputs["colliders"] = names
    if lip_vertices is not None:
        _write_npz(job_dir / LIP_VERTICES_FILE, lip_vertices)
        inputs["lip_vertices"] = LIP_VERTICES_FILE
    return _write_job(job_dir, "animate", inputs, {"result": RESULT_FILE}, dict(settings))


def read_job_settings(job_dir) -> dict:
    return dict(json.loads((Path(job_dir) / JOB_FILE).read_text(encoding="utf-8"))["settings"])


def set_resume(job_dir, resume: bool) -> None:
    """Mark an animate job to continue from the frames its partial folder holds (or not);
    job.json is swapped in whole."""
    path = Path(job_dir) / JOB_FILE
    job = json.loads(path.read_text(encoding="utf-8"))
    job["settings"]["resume"] = bool(resume)
    write_text_atomically(path, json.dumps(job, indent=2))


def write_text_atomically(path, text: str) -> None:
    """Write through a temporary file beside `path`, fsynced, then swapped in with os.replace."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as stream:
        stream.write(text)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, path)


def read_result_positions(job_dir) -> np.ndarray:
    """Skin positions (T, V, 3) in metres from a finished animate job."""
    with np.load(Path(job_dir) / RESULT_FILE, allow_pickle=False) as result:
        return np.array(result["skin_positions"], dtype=np.float64)


def read_fit_summary(fit_path) -> dict:
    """Per fitted shape its errors (mean, 95th percentile, max in mm), status, context and start
    ("neutral" or "mirror:<shape>"; "" in fits made before FIT.npz recorded it), read without
    the solver (numpy only; FIT.npz is docs/inverse-physics.md)."""
    with np.load(fit_path, allow_pickle=False) as fit:
        names = [str(name) for name in fit["shape_key_names"]]
        errors = np.asarray(fit["fit_error_mm"], dtype=np.float64).reshape(len(names), 3)
        status = [str(text) for text in fit["status"]]
        contexts = [str(text) for text in fit["fit_context"]] if "fit_context" in fit.files else [""] * len(names)
        starts = [str(text) for text in fit["fit_start"]] if "fit_start" in fit.files else [""] * len(names)
        return {"shapes": [{"name": name, "error_mm": tuple(float(e) for e in errors[row]), "status": status[row],
                            "context": contexts[row], "start": starts[row]} for row, name in enumerate(names)],
                "tets": int(fit["tet_count"]), "skin_vertices": int(fit["skin_vertex_count"])}


def read_fit_shape_names(fit_path) -> List[str]:
    with np.load(fit_path, allow_pickle=False) as fit:
        return [str(name) for name in fit["shape_key_names"]]


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
