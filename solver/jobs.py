"""Job folders: how the Blender add-on (or any program) asks the solver for work.

`python -m solver --json run-job JOB_DIR` reads `JOB_DIR/job.json`, validates it strictly,
runs the command it names on files inside the folder and speaks JSON lines on stdout, one
object per line (see docs/addon.md for every field):

  {"type": "progress", "message", "fraction"[, "frame", "frames"]}
  {"type": "warning",  "message"}
  {"type": "error",    "message"}               bad input: says what is wrong and how to fix it
  {"type": "result",   "command", "outputs", "message", ...}
  {"type": "cancelled","message"}
  {"type": "done",     "status": "ok" | "error" | "cancelled" | "crashed", "exit_code"}

`done` is always the last line (unless the process is killed outright), so a reader knows
the job ended on purpose. SIGTERM, SIGINT (and SIGBREAK on Windows) cancel: the job stops at
the next Python instruction, removes what it wrote half-way and exits with EXIT_CANCELLED.
Outputs are written under temporary names and renamed only when complete, so a cancelled or
crashed job never replaces a good file of the same name.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Callable, Dict, Optional

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
    _require_keys(job["inputs"], "inputs", spec["inputs"], spec["optional_inputs"])
    _require_keys(job["outputs"], "outputs", spec["outputs"])
    settings = job.get("settings", {})
    _require_keys(settings, "settings", (), spec["settings"])
    inputs = {key: _inside(job_dir, f"inputs.{key}", value, must_exist=True)
              for key, value in job["inputs"].items() if value is not None}
    outputs = {key: _inside(job_dir, f"outputs.{key}", value, must_exist=False)
               for key, value in job["outputs"].items()}
    for key, path in outputs.items():
        if path in inputs.values():
            raise _field_error(f"outputs.{key}", "names an input file", "write outputs to new names")
    return {"command": command, "job_dir": job_dir, "inputs": inputs, "outputs": outputs,
            "settings": spec["read_settings"](settings)}


# --------------------------------------------------------------------------- commands

def _partial_name(path: Path) -> Path:
    return path.with_name(f".{path.stem}.partial{path.suffix}")


def _build_settings(settings: dict) -> dict:
    return {"target_tets": _integer(settings, "target_tets", 35000, 100, 2_000_000)}


def _animate_settings(settings: dict) -> dict:
    from .physics.maps import DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2
    return {"dynamic": _boolean(settings, "dynamic", False),
            "substeps": _integer(settings, "substeps", 1, 1, 1000),
            "gravity": _boolean(settings, "gravity", False),
            "wind": _wind(settings),
            "fat_scale": _number(settings, "fat_scale", 1.0, 0.1, 10.0),
            "diffusion_steps": _integer(settings, "diffusion_steps", DEFAULT_DIFFUSION_STEPS, 0, 10_000),
            "diffusion_time_step_m2": _number(settings, "diffusion_time_step_m2", DEFAULT_DIFFUSION_TIME_STEP_M2,
                                              1e-12, 1.0)}


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


def _run_animate(job: dict, messages: JobMessages) -> dict:
    from .model_file import load_model
    from .physics.animate import animate
    from .physics.inputs import load_activations, load_maps
    from .physics.maps import DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2
    from .physics.simulator import SimulationSettings
    settings = job["settings"]
    # Blender stores floats in single precision, hence the tolerance.
    if settings["diffusion_steps"] != DEFAULT_DIFFUSION_STEPS or not math.isclose(
            settings["diffusion_time_step_m2"], DEFAULT_DIFFUSION_TIME_STEP_M2, rel_tol=1e-5):
        # animate() does not take diffusion settings yet; say so rather than ignore them silently.
        messages.warning(f"diffusion steps/time step are not yet passed to the solver's animate; the defaults "
                         f"({DEFAULT_DIFFUSION_STEPS} steps of {DEFAULT_DIFFUSION_TIME_STEP_M2:g} m²) were used")
    model = load_model(job["inputs"]["model"])
    activations = load_activations(job["inputs"]["activations"], model)
    maps = load_maps(job["inputs"]["maps"], model) if "maps" in job["inputs"] else None
    simulation = SimulationSettings(dynamic=settings["dynamic"], gravity=settings["gravity"], fps=activations.fps,
                                    substeps=settings["substeps"], wind=settings["wind"])
    frames = activations.frame_count
    messages.progress(f"model loaded; simulating {frames} frames", fraction=0.0, frame=0, frames=frames)

    def on_frame(event):
        state = "" if event["converged"] else f" (not converged: {event.get('reason', '')})"
        messages.progress(f"frame {event['frame']}/{event['frames']}{state}",
                          fraction=round(event["frame"] / event["frames"], 4), frame=event["frame"],
                          frames=event["frames"], converged=event["converged"],
                          newton_iterations=event["newton_iterations"], seconds=event["seconds"])
        if not event["converged"]:
            messages.warning(f"frame {event['frame']} did not converge ({event.get('reason', 'no reason given')})")

    result_path = job["outputs"]["result"]
    partial = _partial_name(result_path)
    try:
        result = animate(model, activations, partial, settings=simulation, maps=maps,
                         fat_scale=settings["fat_scale"], progress=on_frame)
        os.replace(partial.with_suffix(".pc2"), result_path.with_suffix(".pc2"))
        os.replace(partial, result_path)
    finally:
        for leftover in (partial, partial.with_suffix(".pc2")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
    unconverged = int((~result.converged).sum())
    return {"outputs": {"result": result_path.name, "cache": result_path.with_suffix(".pc2").name},
            "frames": int(frames), "unconverged_frames": unconverged,
            "message": f"{frames} frames simulated, {unconverged} not converged"}


_COMMANDS: Dict[str, dict] = {
    "build-model": {"inputs": ("rig",), "optional_inputs": (), "outputs": ("model",),
                    "settings": ("target_tets",), "read_settings": _build_settings, "run": _run_build},
    "animate": {"inputs": ("model", "activations"), "optional_inputs": ("maps",), "outputs": ("result",),
                "settings": ("dynamic", "substeps", "gravity", "wind", "fat_scale", "diffusion_steps",
                             "diffusion_time_step_m2"),
                "read_settings": _animate_settings, "run": _run_animate},
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
    from .model_builder.errors import ModelBuildError
    from .model_file import ModelFormatError
    from .physics.inputs import AnimationInputError
    from .rig import RigFormatError
    messages = messages or JobMessages()
    bad_input = (JobError, RigFormatError, ModelBuildError, ModelFormatError, AnimationInputError)
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
