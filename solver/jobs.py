"""Job folders: how the Blender add-on (or any program) asks the solver for work.

`python -m solver --json run-job JOB_DIR` reads `JOB_DIR/job.json`, validates it strictly,
runs the command it names on files inside the folder and speaks JSON lines on stdout, one
object per line (see docs/addon.md for every field):

  {"type": "progress", "message", "fraction"[, "frame", "frames" | "shape", "error_mm", ...]}
  {"type": "warning",  "message"}
  {"type": "error",    "message"}               bad input: says what is wrong and how to fix it
  {"type": "result",   "command", "outputs", "message", ...}
  {"type": "cancelled","message"}
  {"type": "done",     "status": "ok" | "error" | "cancelled" | "crashed", "exit_code"}

`done` is always the last line (unless the process is killed outright), so a reader knows
the job ended on purpose. SIGTERM, SIGINT (and SIGBREAK on Windows) cancel: the job stops at
the next Python instruction, removes what it wrote half-way and exits with EXIT_CANCELLED.
Outputs are written under temporary names and renamed only when complete, so a cancelled or
crashed job never replaces a good file of the same name. A fit job's worker processes are
stopped with it (the pool is terminated as the cancel unwinds); a reader that has to kill the
job outright should kill its whole process group.

Commands: `build-model` (rig → model), `fit` (model + rig → FIT.npz, one progress line per
finished shape, optionally keeping the other shapes of an earlier fit) and `animate` (model +
muscle contractions, or model + fit + shape-key weights with optional contractions on top;
maps with their diffusion and fat softening, teeth/lip contacts with optional painted lips,
rigid or deforming prop colliders → RESULT.npz and its .pc2).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

SCHEMA_VERSION = 1
JOB_FILE = "job.json"

EXIT_OK = 0
EXIT_CRASHED = 1
EXIT_BAD_INPUT = 2
EXIT_CANCELLED = 3

_BUILD_STAGES = ("landmarks", "tissue", "tet mesh", "attachments", "muscles", "directions", "embedding", "assemble")


class JobError(ValueError):
    """job.json (or a file it names) is invalid; the message names the field and the fix."""


class JobCancelled(BaseException):
    """Raised by the signal handler. A BaseException so that no `except Exception` in the
    solver can swallow a cancel."""


class JobMessages:
    """Writes the protocol's JSON lines; flushes each so the reader sees it at once."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout

    def emit(self, kind: str, **fields) -> None:
        self.stream.write(json.dumps({"type": kind, **fields}) + "\n")
        self.stream.flush()

    def progress(self, message: str, fraction: Optional[float] = None, **fields) -> None:
        self.emit("progress", message=message, fraction=fraction, **fields)

    def warning(self, message: str) -> None:
        self.emit("warning", message=message)


# --------------------------------------------------------------------------- validation

def _field_error(field: str, problem: str, fix: str) -> JobError:
    return JobError(f"job.json: {field}: {problem}. Fix: {fix}.")


def _require_keys(table: dict, where: str, required: tuple, optional: tuple = ()) -> None:
    if not isinstance(table, dict):
        raise _field_error(where, f"expected an object, found {type(table).__name__}", "write a JSON object")
    unknown = sorted(set(table) - set(required) - set(optional))
    if unknown:
        raise _field_error(f"{where}.{unknown[0]}", "unknown field",
                           f"use only {', '.join(required + optional)}")
    for key in required:
        if key not in table:
            raise _field_error(f"{where}.{key}", "missing", "write it")


def _boolean(settings: dict, key: str, default: bool) -> bool:
    value = settings.get(key, default)
    if not isinstance(value, bool):
        raise _field_error(f"settings.{key}", f"expected true or false, found {value!r}", "write a JSON boolean")
    return value


def _integer(settings: dict, key: str, default: int, low: int, high: int) -> int:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _field_error(f"settings.{key}", f"expected a whole number in [{low}, {high}], found {value!r}",
                           "write an integer in range")
    return value


def _number(settings: dict, key: str, default: float, low: float, high: float) -> float:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise _field_error(f"settings.{key}", f"expected a number in [{low:g}, {high:g}], found {value!r}",
                           "write a finite number in range")
    return float(value)


def _wind(settings: dict):
    value = settings.get("wind")
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 3
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in value)):
        raise _field_error("settings.wind", f"expected [x, y, z] in m/s or null, found {value!r}",
                           "write three finite numbers, or null for no wind")
    return [float(v) for v in value]


def _name_list(settings: dict, key: str):
    """A list of distinct non-empty strings, or None when the setting is absent or null."""
    value = settings.get(key)
    if value is None:
        return None
    if (not isinstance(value, list) or not value
            or any(not isinstance(item, str) or not item.strip() for item in value)):
        raise _field_error(f"settings.{key}", f"expected a non-empty list of names, found {value!r}",
                           "write a list of strings, or leave the setting out for all")
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        raise _field_error(f"settings.{key}", f"{repeated[0]!r} is listed twice", "list each name once")
    return [item.strip() for item in value]


def _choices(settings: dict, key: str, allowed: tuple) -> list:
    value = settings.get(key, [])
    if (not isinstance(value, list) or any(not isinstance(item, str) or item not in allowed for item in value)
            or len(set(value)) != len(value)):
        raise _field_error(f"settings.{key}", f"expected a list of distinct values from {list(allowed)}, "
                                              f"found {value!r}", "write e.g. [\"teeth\", \"lips\"] or []")
    return list(value)


def _choice(settings: dict, key: str, allowed: tuple, default: str) -> str:
    value = settings.get(key, default)
    if value not in allowed:
        raise _field_error(f"settings.{key}", f"expected one of {list(allowed)}, found {value!r}",
                           f"write one of {', '.join(allowed)}")
    return value


def _inside(job_dir: Path, field: str, name, must_exist: bool) -> Path:
    if not isinstance(name, str) or not name:
        raise _field_error(field, f"expected a file name, found {name!r}", "write a path relative to the job folder")
    relative = Path(name)
    if relative.is_absolute() or relative.drive:
        raise _field_error(field, f"{name!r} is absolute", "write a path relative to the job folder")
    path = (job_dir / relative).resolve()
    # resolve() follows symlinks too, so a link pointing out of the folder is refused as well.
    if path == job_dir or job_dir not in path.parents:
        raise _field_error(field, f"{name!r} is outside the job folder", "keep every file inside the job folder")
    if must_exist and not path.is_file():
        raise _field_error(field, f"{name!r} does not exist in the job folder", "write the file before the job")
    return path


def read_job(job_dir) -> dict:
    """Parse and validate JOB_DIR/job.json; return {command, inputs, outputs, settings} with absolute paths."""
    job_dir = Path(job_dir).resolve()
    job_path = job_dir / JOB_FILE
    if not job_path.is_file():
        raise JobError(f"{job_path}: no job.json in the job folder. Fix: write one (see docs/addon.md).")
    try:
        job = json.loads(job_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise JobError(f"{job_path}: not readable JSON ({error}). Fix: write the job again.") from None
    _require_keys(job, "job", ("schema_version", "command", "inputs", "outputs"), ("settings",))
    version = job["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise _field_error("schema_version", f"expected a positive integer, found {version!r}",
                           f"write {SCHEMA_VERSION}")
    if version > SCHEMA_VERSION:
        raise _field_error("schema_version", f"the job is version {version} but this solver reads up to "
                                             f"{SCHEMA_VERSION}", "update the Face Physics solver")
    command = job["command"]
    if command not in _COMMANDS:
        raise _field_error("command", f"unknown command {command!r}", f"use one of {', '.join(sorted(_COMMANDS))}")
    spec = _COMMANDS[command]
    list_inputs = spec.get("list_inputs", ())
    _require_keys(job["inputs"], "inputs", spec["inputs"], spec["optional_inputs"] + list_inputs)
    _require_keys(job["outputs"], "outputs", spec["outputs"])
    settings = job.get("settings", {})
    _require_keys(settings, "settings", (), spec["settings"])
    inputs = {}
    for key, value in job["inputs"].items():
        if value is None:
            continue
        if key in list_inputs:
            if not isinstance(value, list):
                raise _field_error(f"inputs.{key}", f"expected a list of file names, found {value!r}",
                                   "write a JSON list, [] for none")
            inputs[key] = [_inside(job_dir, f"inputs.{key}[{index}]", name, must_exist=True)
                           for index, name in enumerate(value)]
        else:
            inputs[key] = _inside(job_dir, f"inputs.{key}", value, must_exist=True)
    outputs = {key: _inside(job_dir, f"outputs.{key}", value, must_exist=False)
               for key, value in job["outputs"].items()}
    input_paths = [path for value in inputs.values() for path in (value if isinstance(value, list) else [value])]
    for key, path in outputs.items():
        if path in input_paths:
            raise _field_error(f"outputs.{key}", "names an input file", "write outputs to new names")
    settings = spec["read_settings"](settings)
    spec.get("check", lambda inputs, settings: None)(inputs, settings)
    return {"command": command, "job_dir": job_dir, "inputs": inputs, "outputs": outputs, "settings": settings}


# --------------------------------------------------------------------------- commands

def _partial_name(path: Path) -> Path:
    return path.with_name(f".{path.stem}.partial{path.suffix}")


def _build_settings(settings: dict) -> dict:
    return {"target_tets": _integer(settings, "target_tets", 35000, 100, 2_000_000)}


COLLISION_KINDS = ("teeth", "lips")
CONTACT_SOLVERS = ("newton", "ipopt")
# Without any padding the proxy cannot be guaranteed to enclose every teeth vertex (teeth.py).
MIN_TEETH_PADDING_M, MAX_TEETH_PADDING_M = 1e-5, 0.01
MAX_FIT_PROCESSES = 64
# The per-shape arrays of FIT.npz (solver/inverse/shapes.py), merged shape by shape when a fit
# job keeps the shapes of an earlier fit; every other key is taken from the new fit.
PER_SHAPE_FIT_KEYS = ("shape_key_names", "activations", "jaw", "fit_error_mm", "status", "detail_residual",
                      "iterations", "seconds", "contractions", "fit_context", "fit_start", "muscles_held")
# Per-shape arrays taken from the rig for every shape of the merged fit (older fits lack them).
RIG_FIT_KEYS = ("shape_key_deltas",)


def _animate_settings(settings: dict) -> dict:
    from .physics.maps import DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2, DEFAULT_FAT_SOFTENING
    padding = settings.get("teeth_padding_m")
    return {"dynamic": _boolean(settings, "dynamic", False),
            "substeps": _integer(settings, "substeps", 1, 1, 1000),
            "gravity": _boolean(settings, "gravity", False),
            "wind": _wind(settings),
            "fat_scale": _number(settings, "fat_scale", 1.0, 0.1, 10.0),
            "diffusion_steps": _integer(settings, "diffusion_steps", DEFAULT_DIFFUSION_STEPS, 0, 10_000),
            "diffusion_time_step_m2": _number(settings, "diffusion_time_step_m2", DEFAULT_DIFFUSION_TIME_STEP_M2,
                                              1e-12, 1.0),
            "fat_softening": _number(settings, "fat_softening", DEFAULT_FAT_SOFTENING, 0.0, 1.0),
            # None = not given: shape-key animation then adds the detail
            "detail": _boolean(settings, "detail", True) if "detail" in settings else None,
            # shape-key animation is shown through the skin filter unless this is false
            "skin_filter": _boolean(settings, "skin_filter", True),
            "collisions": _choices(settings, "collisions", COLLISION_KINDS),
            "contact_solver": _choice(settings, "contact_solver", CONTACT_SOLVERS, "newton"),
            # None = the solver's own default padding (collisions/teeth.py)
            "teeth_padding_m": None if padding is None else
            _number(settings, "teeth_padding_m", 0.0, MIN_TEETH_PADDING_M, MAX_TEETH_PADDING_M)}


def _check_animate_inputs(inputs: dict, settings: dict) -> None:
    if ("fit" in inputs) != ("weights" in inputs):
        present, absent = ("fit", "weights") if "fit" in inputs else ("weights", "fit")
        raise _field_error(f"inputs.{absent}", f"missing: inputs.{present} needs it",
                           "give fit and weights together (shape-key animation), or activations alone")
    if "fit" not in inputs and "activations" not in inputs:
        raise _field_error("inputs", "no animation", "give activations (muscle contractions), or fit and weights "
                                                     "(shape-key values played through a fit)")
    if settings["detail"] is not None and "fit" not in inputs:
        raise _field_error("settings.detail", "applies only to shape-key animation (inputs fit and weights)",
                           "leave it out, or give fit and weights")
    if settings["teeth_padding_m"] is not None and "teeth" not in settings["collisions"]:
        raise _field_error("settings.teeth_padding_m", "applies only with teeth collisions",
                           "add \"teeth\" to settings.collisions, or leave the padding out")
    if "lip_vertices" in inputs and not {"lips", "teeth"} & set(settings["collisions"]):
        raise _field_error("inputs.lip_vertices", "applies only with lip or teeth collisions (it says which skin "
                                                  "is lip)", "add \"lips\" or \"teeth\" to settings.collisions, "
                                                             "or leave the file out")


def _fit_settings(settings: dict) -> dict:
    return {"shapes": _name_list(settings, "shapes"),
            "jobs": _integer(settings, "jobs", 1, 1, MAX_FIT_PROCESSES)}


def _run_build(job: dict, messages: JobMessages) -> dict:
    from .model_builder.builder import BuildOptions, build_model
    from .model_file import build_info, save_model
    from .rig import load_rig
    done_stages = []

    def on_stage(text):
        done_stages.append(text)
        messages.progress(text, fraction=round(min(len(done_stages) / len(_BUILD_STAGES), 1.0), 3))

    rig = load_rig(job["inputs"]["rig"])
    messages.progress(f"rig: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys", fraction=0.0)
    model = build_model(rig, BuildOptions(target_tets=job["settings"]["target_tets"], progress=on_stage))
    output = job["outputs"]["model"]
    save_model(output, model)   # atomic: an old model of the same name survives a cancel
    info = build_info(model)
    return {"outputs": {"model": output.name}, "tets": int(info["tet_count"]), "nodes": int(info["node_count"]),
            "muscles": [str(name) for name in model["muscle_names"]],
            "message": f"model: {info['tet_count']} tets, {info['node_count']} nodes, "
                       f"{len(model['muscle_names'])} muscles"}


def _previous_fit(job: dict, model, rig_names: list, messages: JobMessages) -> Optional[dict]:
    """The earlier fit whose other shapes are kept, or None when there is none or it does not
    belong to this model (then everything asked for is fitted afresh and the rest is dropped)."""
    from .inverse.fit_file import FitFormatError, fit_energy_warning, fitted_stiffening, load_fit
    from .physics.active_stiffening import STIFFENING_AT_FULL
    path = job["inputs"].get("previous_fit")
    if path is None:
        return None
    try:
        previous = load_fit(path, model)
    except FitFormatError as error:
        messages.warning(f"the earlier fit cannot be kept ({error}); only the shapes fitted now are in the new fit")
        return None
    if fitted_stiffening(previous) != STIFFENING_AT_FULL:
        messages.warning(f"the earlier fit cannot be kept ({fit_energy_warning(previous)}); only the shapes "
                         "fitted now are in the new fit")
        return None
    dropped = [str(name) for name in previous["shape_key_names"] if str(name) not in rig_names]
    if dropped:
        messages.warning(f"the earlier fit's {', '.join(dropped)} are no longer shape keys of the rig; dropped")
    return previous


def _merged_fit(new: dict, previous: Optional[dict], rig_names: list) -> dict:
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


def _run_fit(job: dict, messages: JobMessages) -> dict:
    from .inverse.fit_file import save_fit
    from .inverse.shapes import CONTEXT_SHAPES, fit_progress, fit_shapes, kept_fits, rig_shape_deltas, select_shapes
    from .model_file import load_model
    from .rig import load_rig
    settings = job["settings"]
    model = load_model(job["inputs"]["model"])
    rig = load_rig(job["inputs"]["rig"])
    if len(rig.vertices) != len(model["skin_vertices"]) or not np.allclose(rig.vertices, model["skin_vertices"],
                                                                          atol=1e-9):
        raise JobError("inputs.rig: not the rig the model was built from (its neutral skin differs). Fix: build "
                       "the model again from this mesh, or undo the change to its rest shape.")
    rig_names = [str(name) for name in rig.shape_key_names]
    if not rig_names:
        raise JobError("inputs.rig: the rig has no shape keys to fit. Fix: add ARKit shape keys to the mesh.")
    previous = _previous_fit(job, model, rig_names, messages)
    requested = settings["shapes"]
    if requested and previous is not None:
        # A kept shape fitted on top of a shape fitted again now stores its difference to the old
        # context fit; it is fitted again with it so that the two stay consistent.
        requested = requested + [str(name) for name in previous["shape_key_names"]
                                 if CONTEXT_SHAPES.get(str(name)) in requested and str(name) in rig_names
                                 and str(name) not in requested]
    names = select_shapes(rig, requested)
    processes = min(settings["jobs"], len(names))
    messages.progress(f"fitting {len(names)} shape{'s' * (len(names) != 1)} in {processes} "
                      f"process{'es' * (processes != 1)}", fraction=0.0, done=0, total=len(names))

    def on_shape(fit, done, total):
        message, fields = fit_progress(fit, done, total, model["muscle_names"])
        messages.progress(message, fraction=round(done / total, 4), **fields)

    earlier = kept_fits(previous) if previous is not None else None
    arrays = _merged_fit(fit_shapes(model, rig, names, jobs=settings["jobs"], progress=on_shape,
                                    earlier_fits=earlier), previous, rig_names)
    # RIG_FIT_KEYS: the rig's own deltas for every shape, the kept ones too.
    arrays["shape_key_deltas"] = rig_shape_deltas(rig, arrays["shape_key_names"])
    output = job["outputs"]["fit"]
    save_fit(output, arrays)      # atomic: a cancel or crash never leaves half a fit where a good one was
    all_names = [str(name) for name in arrays["shape_key_names"]]
    errors = np.asarray(arrays["fit_error_mm"], dtype=np.float64)
    worst = int(np.argmax(errors[:, 0]))
    kept = [name for name in all_names if name not in names]
    return {"outputs": {"fit": output.name}, "shapes": names, "kept": kept,
            "worst": {"shape": all_names[worst], "error_mm": [round(float(e), 4) for e in errors[worst]]},
            "message": f"{len(names)} shape{'s' * (len(names) != 1)} fitted"
                       + (f", {len(kept)} kept from the earlier fit" if kept else "")
                       + f"; worst {all_names[worst]}: mean {errors[worst, 0]:.2f} / 95th {errors[worst, 1]:.2f} / "
                         f"max {errors[worst, 2]:.2f} mm"}


def _with_muscle_layer(model, blended, layer):
    """The shape-key blend with muscle contractions added on top, the way the blend itself adds
    shapes: a = a_blend + (a_muscles − a_neut), jaw added likewise. A contraction of 1 adds nothing."""
    from .physics.activation import NEUTRAL_ACTIVATION, active_tet_indices, tet_activations, vector_from_symmetric
    from .physics.inputs import check_positive_definite
    if layer.muscle_contraction is None:
        raise JobError("inputs.activations: with fit and weights it may only hold muscle_contraction (raw "
                       "activations cannot be added to a blend). Fix: write muscle_contraction and muscle_names.")
    if layer.frame_count != blended.frame_count:
        raise JobError(f"inputs.activations: {layer.frame_count} frames, but the weights have "
                       f"{blended.frame_count}. Fix: give both the same frames.")
    if not np.allclose(layer.head_transforms, np.eye(4)):
        raise JobError("inputs.activations: head_transforms belong in WEIGHTS.npz when a fit drives the "
                       "animation. Fix: move them there.")
    active = active_tet_indices(model)
    activations = np.array(blended.activations, dtype=np.float64)
    for frame, contraction in enumerate(layer.muscle_contraction):
        if np.any(contraction != 1.0):
            activations[frame] += vector_from_symmetric(tet_activations(model, contraction)[active]) - \
                NEUTRAL_ACTIVATION
    check_positive_definite(activations, "muscle contractions on top of the shape-key blend",
                            "Contractions this far from 1 on top of these shape keys flatten tissue; bring the "
                            "contractions closer to 1.")
    return dataclasses.replace(blended, activations=activations, jaw=blended.jaw + layer.jaw)


def _collision_scene(model, settings: dict, collider_paths: list, messages: JobMessages,
                     lip_vertices_path: Optional[Path] = None):
    """The CollisionScene of settings.collisions and inputs.colliders, or None for neither; with
    inputs.lip_vertices the lips are those skin vertices instead of the automatic lip finder's."""
    kinds = settings["collisions"]
    if not kinds and not collider_paths:
        return None
    from .collisions.mesh_collider import load_mesh_collider
    from .collisions.scene import CollisionScene, load_lip_vertices
    colliders = []
    for index, path in enumerate(collider_paths):
        try:
            colliders.append(load_mesh_collider(path, name=f"{path.stem}"))
        except (OSError, ValueError) as error:
            raise JobError(f"inputs.colliders[{index}]: {error}") from None
    lip_vertices = None
    if lip_vertices_path is not None:
        try:
            lip_vertices = load_lip_vertices(lip_vertices_path, len(model["skin_vertices"]))
        except ValueError as error:
            raise JobError(f"inputs.lip_vertices: {error}") from None
    padding = {} if settings["teeth_padding_m"] is None else {"teeth_pad": settings["teeth_padding_m"]}
    lips_from = [] if lip_vertices is None else [f"lips from vertex groups ({len(lip_vertices[0])} upper, "
                                                 f"{len(lip_vertices[1])} lower vertices)"]
    messages.progress("collision scene: " + ", ".join(kinds + [path.stem for path in collider_paths] + lips_from),
                      fraction=0.0)
    try:
        scene = CollisionScene(model, teeth="teeth" in kinds, lips="lips" in kinds, colliders=colliders,
                               lip_vertices=lip_vertices, **padding)
    except ValueError as error:
        raise JobError(f"settings.collisions: {error}. Fix: turn that contact off, or give the model what it "
                       f"needs (teeth objects, mouth landmarks).") from None
    for collider in scene.teeth:
        if collider.proxy.source == "landmark arch":
            messages.warning(f"{collider.name.replace('_', ' ')}: the model has no teeth mesh, so teeth contact uses "
                             f"an arch estimated from the lip landmarks; set the teeth objects in the Model panel and "
                             f"build again when the mouth matters")
    return scene


def _run_animate(job: dict, messages: JobMessages) -> dict:
    from .model_file import load_model
    from .physics.animate import animate
    from .physics.inputs import load_activations, load_maps
    from .physics.simulator import SimulationSettings
    settings = job["settings"]
    inputs = job["inputs"]
    model = load_model(inputs["model"])
    detail = rig_offset = skin_filter = None
    if "fit" in inputs:
        from .inverse.blend import blend, load_weights, skin_filter_for
        from .inverse.fit_file import fit_energy_warning, load_fit
        fit = load_fit(inputs["fit"], model)
        weights, _, fps, head_transforms = load_weights(inputs["weights"], fit)
        with_detail = settings["detail"] is not False
        blended = blend(fit, weights, fps, head_transforms, detail=with_detail)
        activations, detail = blended.activations, blended.detail if with_detail else None
        rig_offset = blended.rig_offset
        skin_filter, filter_warning = skin_filter_for(model, blended, enabled=settings["skin_filter"])
        for warning in (fit_energy_warning(fit), blended.held_warning(), filter_warning):
            if warning:
                messages.warning(warning)
        if "activations" in inputs:
            activations = _with_muscle_layer(model, activations, load_activations(inputs["activations"], model))
    else:
        activations = load_activations(inputs["activations"], model)
    maps = load_maps(inputs["maps"], model) if "maps" in inputs else None
    simulation = SimulationSettings(dynamic=settings["dynamic"], gravity=settings["gravity"], fps=activations.fps,
                                    substeps=settings["substeps"], wind=settings["wind"],
                                    contact_solver=settings["contact_solver"])
    collisions = _collision_scene(model, settings, inputs.get("colliders", []), messages, inputs.get("lip_vertices"))
    frames = activations.frame_count
    messages.progress(f"model loaded; simulating {frames} frames", fraction=0.0, frame=0, frames=frames)
    deepest_mm = 0.0

    def on_frame(event):
        nonlocal deepest_mm
        state = "" if event["converged"] else f" (not converged: {event.get('reason', '')})"
        contact = {key: event[key] for key in ("penetration_depth_max_mm", "contacts", "collision_rounds")
                   if key in event}
        if "penetration_depth_max_mm" in contact:
            deepest_mm = max(deepest_mm, contact["penetration_depth_max_mm"])
            state += f", {contact['contacts']} contacts, deepest {contact['penetration_depth_max_mm']:.2f} mm"
        messages.progress(f"frame {event['frame']}/{event['frames']}{state}",
                          fraction=round(event["frame"] / event["frames"], 4), frame=event["frame"],
                          frames=event["frames"], converged=event["converged"],
                          newton_iterations=event["newton_iterations"], seconds=event["seconds"], **contact)
        if not event["converged"]:
            messages.warning(f"frame {event['frame']} did not converge ({event.get('reason', 'no reason given')})")

    result_path = job["outputs"]["result"]
    partial = _partial_name(result_path)
    try:
        result = animate(model, activations, partial, settings=simulation, maps=maps,
                         fat_scale=settings["fat_scale"], progress=on_frame, skin_detail=detail,
                         collisions=collisions, diffusion_steps=settings["diffusion_steps"],
                         diffusion_time_step_m2=settings["diffusion_time_step_m2"],
                         fat_softening=settings["fat_softening"], rig_offset=rig_offset, skin_filter=skin_filter)
        os.replace(partial.with_suffix(".pc2"), result_path.with_suffix(".pc2"))
        os.replace(partial, result_path)
    finally:
        for leftover in (partial, partial.with_suffix(".pc2")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    unconverged = int((~result.converged).sum())
    fields = {"outputs": {"result": result_path.name, "cache": result_path.with_suffix(".pc2").name},
              "frames": int(frames), "unconverged_frames": unconverged,
              "message": f"{frames} frames simulated, {unconverged} not converged"}
    if collisions is not None:
        fields["penetration_depth_max_mm"] = round(deepest_mm, 4)
        fields["message"] += f"; deepest skin vertex inside a collider {deepest_mm:.2f} mm"
    return fields


_COMMANDS: Dict[str, dict] = {
    "build-model": {"inputs": ("rig",), "optional_inputs": (), "outputs": ("model",),
                    "settings": ("target_tets",), "read_settings": _build_settings, "run": _run_build},
    "fit": {"inputs": ("model", "rig"), "optional_inputs": ("previous_fit",), "outputs": ("fit",),
            "settings": ("shapes", "jobs"), "read_settings": _fit_settings, "run": _run_fit},
    "animate": {"inputs": ("model",), "optional_inputs": ("activations", "fit", "weights", "maps", "lip_vertices"),
                "list_inputs": ("colliders",), "outputs": ("result",),
                "settings": ("dynamic", "substeps", "gravity", "wind", "fat_scale", "diffusion_steps",
                             "diffusion_time_step_m2", "fat_softening", "detail", "skin_filter", "collisions",
                             "contact_solver", "teeth_padding_m"),
                "read_settings": _animate_settings, "check": _check_animate_inputs, "run": _run_animate},
}


# --------------------------------------------------------------------------- running

def _raise_cancelled(signal_number, frame):
    raise JobCancelled(signal.Signals(signal_number).name)


@contextlib.contextmanager
def _cancel_on_signals():
    names = ("SIGTERM", "SIGINT", "SIGBREAK")
    numbers = [getattr(signal, name) for name in names if hasattr(signal, name)]
    previous = {number: signal.signal(number, _raise_cancelled) for number in numbers}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_job(job_dir, messages: Optional[JobMessages] = None) -> int:
    """Run the job in `job_dir`, speaking the protocol on `messages`; return the exit code."""
    from .inverse.fit_file import FitFormatError
    from .inverse.shapes import ShapeSelectionError
    from .model_builder.errors import ModelBuildError
    from .model_file import ModelFormatError
    from .physics.inputs import AnimationInputError
    from .rig import RigFormatError
    messages = messages or JobMessages()
    bad_input = (JobError, RigFormatError, ModelBuildError, ModelFormatError, AnimationInputError, FitFormatError,
                 ShapeSelectionError)
    status, code = "ok", EXIT_OK
    try:
        with _cancel_on_signals():
            job = read_job(job_dir)
            run: Callable[[dict, JobMessages], dict] = _COMMANDS[job["command"]]["run"]
            messages.progress(f"{job['command']} started", fraction=0.0)
            fields = run(job, messages)
            messages.emit("result", command=job["command"], **fields)
    except JobCancelled as cancel:
        status, code = "cancelled", EXIT_CANCELLED
        messages.emit("cancelled", message=f"cancelled by {cancel}; no output was replaced")
    except bad_input as error:
        status, code = "error", EXIT_BAD_INPUT
        messages.emit("error", message=str(error))
    except Exception as error:   # a solver bug: the user still gets a message, the traceback goes to stderr
        traceback.print_exc()
        status, code = "crashed", EXIT_CRASHED
        messages.emit("error", message=f"the solver crashed: {type(error).__name__}: {error}")
    messages.emit("done", status=status, exit_code=code)
    return code
