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
rigid or deforming prop colliders → RESULT.npz and its .pc2), `lips` (model → LIPS.npz),
`shell-fit` (rig → SHELL.npz: the interactive shell with its fitted stiffness) and
`shell-animate` (SHELL.npz + shape-key weights, optional rigid prop colliders → RESULT.npz and
its .pc2 through the interactive shell).
"""
from __future__ import annotations

import contextlib
import importlib
import json
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
    job = {"command": command, "job_dir": job_dir, "inputs": inputs, "outputs": outputs, "settings": dict(settings)}
    from .requests.fields import RequestError
    try:
        job["request"] = spec["request"](inputs, outputs, job["settings"])
    except RequestError as error:
        raise _request_error(command, error) from None
    return job


# --------------------------------------------------------------------------- commands

def _build_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.build import BuildRequest
    return BuildRequest(rig=inputs["rig"], output=outputs["model"], **settings)


def _fit_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.fit import FitRequest
    settings = dict(settings)
    if "shapes" in settings and not settings["shapes"]:
        raise JobError("job.json: settings.shapes: expected a non-empty list of shape-key names, found []. Fix: "
                       "name the shapes, or leave the setting out to fit them all.")
    if "jobs" in settings:
        settings["processes"] = settings.pop("jobs")
    return FitRequest(model=inputs["model"], rig=inputs["rig"], output=outputs["fit"],
                      previous_fit=inputs.get("previous_fit"), **settings)


def _animate_request(inputs: dict, outputs: dict, settings: dict):
    """The job as an AnimateRequest (requests/animate.py), which checks every field; the job's
    settings are the request's fields by name."""
    from .requests.animate import AnimateRequest
    return AnimateRequest(model=inputs["model"], output=outputs["result"], activations=inputs.get("activations"),
                          fit=inputs.get("fit"), weights=inputs.get("weights"), maps=inputs.get("maps"),
                          colliders=tuple(inputs.get("colliders", ())), lip_vertices=inputs.get("lip_vertices"),
                          **settings)


def _shell_animate_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.shell_animate import ShellAnimateRequest
    return ShellAnimateRequest(shell=inputs["shell"], weights=inputs["weights"], output=outputs["result"],
                               colliders=tuple(inputs.get("colliders", ())), stiffness=inputs.get("stiffness"),
                               **settings)


def _lips_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.lips import LipsRequest
    return LipsRequest(model=inputs["model"], output=outputs["lips"], **settings)


def _shell_fit_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.shell_fit import ShellFitRequest
    return ShellFitRequest(rig=inputs["rig"], output=outputs["shell"], **settings)


def _correctives_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.correctives import CorrectivesRequest
    settings = dict(settings)
    if "jobs" in settings:
        settings["processes"] = settings.pop("jobs")
    return CorrectivesRequest(model=inputs["model"], fit=inputs["fit"], rig=inputs["rig"],
                              output=outputs["correctives"], **settings)


def _play_correctives_request(inputs: dict, outputs: dict, settings: dict):
    from .requests.play_correctives import PlayCorrectivesRequest
    return PlayCorrectivesRequest(rig=inputs["rig"], correctives=inputs["correctives"], weights=inputs["weights"],
                                  output=outputs["result"], **settings)


def _request_label(command: str):
    """How job.json spells a field of the command's request."""
    spec = _COMMANDS[command]

    def label(field: str) -> str:
        if field in spec["labels"]:
            return spec["labels"][field]
        return f"inputs.{field}" if field in spec["inputs"] + spec["optional_inputs"] + \
            spec.get("list_inputs", ()) else f"settings.{field}"
    return label


def _request_error(command: str, error) -> JobError:
    return JobError("job.json: " + error.shown_as(_request_label(command)))


def _runner(module: str, name: str):
    """A command's run: its request module imported when a job runs (not when one is only
    validated), the request read with the job run, its outputs named within the folder."""
    def run(job: dict, messages: JobMessages) -> dict:
        run_request = getattr(importlib.import_module(f".requests.{module}", __package__), name)
        summary = run_request(job["request"], messages)
        summary["outputs"] = {key: Path(path).name for key, path in summary["outputs"].items()}
        return summary
    return run


_COMMANDS: Dict[str, dict] = {
    "build-model": {"inputs": ("rig",), "optional_inputs": (), "outputs": ("model",),
                    "settings": ("target_tets",), "request": _build_request, "labels": {"output": "outputs.model"},
                    "run": _runner("build", "run_build")},
    "fit": {"inputs": ("model", "rig"), "optional_inputs": ("previous_fit",), "outputs": ("fit",),
            "settings": ("shapes", "jobs"), "request": _fit_request,
            "labels": {"output": "outputs.fit", "processes": "settings.jobs"}, "run": _runner("fit", "run_fit")},
    "animate": {"inputs": ("model",), "optional_inputs": ("activations", "fit", "weights", "maps", "lip_vertices"),
                "list_inputs": ("colliders",), "outputs": ("result",),
                "settings": ("dynamic", "substeps", "gravity", "wind", "fat_scale", "diffusion_steps",
                             "diffusion_time_step_m2", "diffusion_spread_m", "fat_softening", "detail", "skin_filter", "collisions",
                             "contact_solver", "teeth_padding_m", "resume",
                             "cache_start_frame", "cache_metres_per_unit", "actuation"),
                "request": _animate_request, "labels": {"output": "outputs.result"},
                "run": _runner("animate", "run_animate")},
    "shell-animate": {"inputs": ("shell", "weights"), "optional_inputs": ("stiffness",), "list_inputs": ("colliders",),
                      "outputs": ("result",), "settings": ("fps", "cache_start_frame", "cache_metres_per_unit"),
                      "request": _shell_animate_request, "labels": {"output": "outputs.result"},
                      "run": _runner("shell_animate", "run_shell_animate")},
    "lips": {"inputs": ("model",), "optional_inputs": (), "outputs": ("lips",), "settings": (),
             "request": _lips_request, "labels": {"output": "outputs.lips"}, "run": _runner("lips", "run_lips")},
    "shell-fit": {"inputs": ("rig",), "optional_inputs": (), "outputs": ("shell",), "settings": ("triangles",),
                  "request": _shell_fit_request, "labels": {"output": "outputs.shell"},
                  "run": _runner("shell_fit", "run_shell_fit")},
    "correctives": {"inputs": ("model", "fit", "rig"), "optional_inputs": (), "outputs": ("correctives",),
                    "settings": ("keys", "pairs", "jobs", "threshold_mm", "collisions", "sample_timeout_s",
                                 "combinations"),
                    "request": _correctives_request,
                    "labels": {"output": "outputs.correctives", "processes": "settings.jobs"},
                    "run": _runner("correctives", "run_correctives")},
    "play-correctives": {"inputs": ("rig", "correctives", "weights"), "optional_inputs": (),
                         "outputs": ("result",), "settings": ("cache_start_frame", "cache_metres_per_unit"),
                         "request": _play_correctives_request, "labels": {"output": "outputs.result"},
                         "run": _runner("play_correctives", "run_play_correctives")},
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
    from .requests.fields import RequestError
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
    except RequestError as error:
        status, code = "error", EXIT_BAD_INPUT
        messages.emit("error", message=str(_request_error(job["command"], error)))
    except Exception as error:   # a solver bug: the user still gets a message, the traceback goes to stderr
        traceback.print_exc()
        status, code = "crashed", EXIT_CRASHED
        messages.emit("error", message=f"the solver crashed: {type(error).__name__}: {error}")
    messages.emit("done", status=status, exit_code=code)
    return code
