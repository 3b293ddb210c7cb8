"""Headless farm bake and fit, and the product demo, with a Python that has the `bpy` module
(pip's bpy, as in the project's .venv) — no Blender install or display needed.

    python -m blender_addon.cli bake shot.blend [--object Head ...] [--solver-python PY] [--output OUT.blend]
    python -m blender_addon.cli fit shot.blend [--object Head ...] [--shapes a,b,...] [--jobs N]
                                               [--solver-python PY] [--output OUT.blend]
    python -m blender_addon.cli demo [--out out/demo] [--quick] [--docs DIR] [--solver-python PY]

`bake` bakes every object that has a built Face Physics model (or the named ones) with its saved
settings into a new take each (api.bake), then saves the file (in place, or as --output, with the
takes beside that file). Exit status 0 when every bake succeeded, 1 otherwise; each solved frame
is printed as it arrives, with the seconds per frame and the time left.

`fit` runs the Fit panel's job on the same objects: every shape key (Fit All, a fresh fit) or
the --shapes (solver spelling; the current fit keeps the others, like Fit Selected), in --jobs
processes (default: the panel's Processes), printing each fitted shape with its errors. Only when
every fit succeeded are the fit files written (beside the saved file) and the file saved, so a
later farm `bake` plays the shape keys through the fit; on any error the exit status is 1 and
nothing on disk changes.

`demo` works the built-in demo head through the add-on's operators (blender_addon/demo.py) into
OUT/demo.blend and OUT/renders/*.png; --quick is the test suite's coarse, thumbnail-sized run.

Inside a full Blender with the extension enabled the same work is
`blender -b shot.blend --python-expr "import bpy; ...; bpy.ops.face_physics.bake(); bpy.ops.wm.save_mainfile()"`
(or `bpy.ops.face_physics.fit(shapes="mouthSmile_L")`): in background mode these operators run to
the end within the call.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _enable_addon(solver_python: str) -> None:
    import addon_utils
    import bpy
    addon_utils.enable(__package__, default_set=True, handle_error=None)
    if solver_python:
        bpy.context.preferences.addons[__package__].preferences.solver_python = solver_python


def _open_file(blend: str, object_names, solver_python: str):
    """Open `blend` with the add-on enabled. Returns the objects to work on — the named ones, or
    every mesh with a built model — and how many of the named ones are missing or not meshes
    (each reported)."""
    import bpy
    bpy.ops.wm.open_mainfile(filepath=blend)
    _enable_addon(solver_python)
    if not object_names:
        objects = [obj for obj in bpy.data.objects if obj.type == 'MESH' and obj.face_physics.model_path]
        if not objects:
            print(f"{blend}: no object has a Face Physics model; build one first", file=sys.stderr)
        return objects, 0
    objects, missing = [], 0
    for name in object_names:
        obj = bpy.data.objects.get(name)
        if obj is None or obj.type != 'MESH':
            print(f"{name}: {'no such object' if obj is None else 'not a mesh object'} in {blend}", file=sys.stderr)
            missing += 1
        else:
            objects.append(obj)
    return objects, missing


def bake_file(blend: str, object_names, solver_python: str, output: str) -> int:
    """Bake each object as its Bake button does (api.bake: a new take, shown), then save."""
    import bpy
    from . import api
    objects, failures = _open_file(blend, object_names, solver_python)
    if not objects:
        return 1
    if output:
        _save_as_keeping_model_paths(output)
    for obj in objects:
        print(f"baking {obj.name} …", flush=True)
        try:
            take = api.bake(obj, on_progress=_frame_printer(obj.name), on_report=_Reports(obj.name).report)
        except api.FacePhysicsError as error:
            print(f"{obj.name}: {error}", file=sys.stderr)
            failures += 1
            continue
        for warning in take.warnings:
            print(f"{obj.name}: solver: {warning}", file=sys.stderr)
        print(f"{obj.name}: baked {take.frames} frames into {take.name} ({take.seconds_per_frame:.2f} s per frame)",
              flush=True)
    bpy.ops.wm.save_mainfile()
    return 1 if failures else 0


def _frame_printer(name: str):
    """Prints a bake's frame, speed and time left each time a frame is solved (farm logs)."""
    printed = 0

    def show(job) -> None:
        nonlocal printed
        if job.frames_done != printed:
            printed = job.frames_done
            print(f"{name}: {job.progress_text()}", flush=True)
    return show


def _waited(obj, job, on_update=lambda job: None) -> bool:
    """Run a started job to its end (Ctrl-C stops the solver too, then re-raises); print its
    warnings; True when it finished, else False once the reason is printed and the job closed."""
    try:
        job.wait(on_update)
    except KeyboardInterrupt:     # the solver runs in a session of its own: stop it too
        job.cancel()
        job.wait()
        job.close()
        raise
    on_update(job)                # the messages read by the last poll
    for warning in job.warnings:
        print(f"{obj.name}: solver: {warning}", file=sys.stderr)
    if job.outcome == 'FINISHED':
        return True
    reason = "cancelled" if job.outcome == 'CANCELLED' else f"failed: {job.error_message()}"
    print(f"{obj.name}: {job.description} {reason}", file=sys.stderr)
    job.close()
    return False


class _Reports:
    """What the workflow's start functions report to (in place of an operator), printed (errors and warnings on stderr)."""

    def __init__(self, object_name: str):
        self.object_name = object_name

    def report(self, kinds, message: str) -> None:
        quiet = not kinds & {'ERROR', 'WARNING'}
        prefix = "" if 'ERROR' in kinds or quiet else "warning: "
        print(f"{self.object_name}: {prefix}{message}", file=sys.stdout if quiet else sys.stderr, flush=True)


def fit_file(blend: str, object_names, shapes: str, processes, solver_python: str, output: str) -> int:
    import bpy
    from . import workflow
    objects, failures = _open_file(blend, object_names, solver_python)
    if failures or not objects:
        return 1
    try:
        for obj in objects:      # a misspelt shape stops the run before any fit starts
            workflow.fit_shape_selection(obj, 'ALL', shapes)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    finished = []
    try:
        for obj in objects:
            job = _run_fit_job(obj, shapes, processes)
            if job is None:
                return 1
            finished.append((obj, job))
        # Every fit succeeded: only now is anything written, beside the output file when there is one.
        if output:
            _save_as_keeping_model_paths(output)
        for obj, job in finished:
            workflow.apply_fit(obj, job)
            print(f"{obj.name}: {job.result.get('message', 'shape keys fitted')}", flush=True)
        bpy.ops.wm.save_mainfile()
    except (RuntimeError, ValueError, OSError, KeyError) as error:
        print(f"could not apply the fit: {error}", file=sys.stderr)
        return 1
    finally:
        for _, job in finished:
            job.close()
    return 0


def _run_fit_job(obj, shapes: str, processes):
    """The Fit panel's job for `obj` run to the end, each fitted shape printed as it arrives.
    Returns the succeeded job (its fit not applied yet, its folder kept until `close`), or None
    once the reason it did not start or failed is printed."""
    import bpy
    from . import workflow
    print(f"fitting {obj.name} …", flush=True)
    try:
        job = workflow.start_fit_job(_Reports(obj.name), bpy.context, obj, 'ALL', shapes, processes)
    except (RuntimeError, ValueError, OSError) as error:
        print(f"{obj.name}: {error}", file=sys.stderr)
        return None
    if job is None:            # a pre-flight error, already printed
        return None
    printed = 0

    def show_fitted_shapes(job) -> None:
        nonlocal printed
        for shape in job.finished_shapes[printed:]:
            mean, p95, worst = shape["error_mm"]
            on_top = f" on top of {shape['context']}" if shape.get("context") else ""
            start = str(shape.get("start") or "")
            mirrored = f", started from the mirror of {start[len('mirror:'):]}" if start.startswith("mirror:") else ""
            print(f"  {shape['shape']}: {shape['status']}{on_top}, error mean {mean:.2f} / 95th {p95:.2f} / "
                  f"max {worst:.2f} mm{mirrored}", flush=True)
        printed = len(job.finished_shapes)

    return job if _waited(obj, job, show_fitted_shapes) else None


def _save_as_keeping_model_paths(output: str) -> None:
    """Save under the new name first, so caches land beside it; Blender remaps its own relative
    paths on Save As but not the add-on's model and fit paths, so those are carried over by hand."""
    import bpy
    fields = ("model_path", "fit_path")
    paths = {(obj.name, field): bpy.path.abspath(getattr(obj.face_physics, field)) for obj in bpy.data.objects
             if obj.type == 'MESH' for field in fields if getattr(obj.face_physics, field)}
    bpy.ops.wm.save_as_mainfile(filepath=output)
    for (name, field), path in paths.items():
        setattr(bpy.data.objects[name].face_physics, field, bpy.path.relpath(path))


def _processes(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"{value} is not in 1–64")
    return value


def _shape_names(text: str) -> str:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one shape key")
    return ",".join(names)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blender_addon.cli", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    farm = argparse.ArgumentParser(add_help=False)     # what bake and fit share
    farm.add_argument("blend")
    farm.add_argument("--object", action="append", default=[],
                      help="only this object (repeatable; default: every object with a built model)")
    farm.add_argument("--solver-python", default="", help="the solver Python (default: the preference saved "
                                                          "in Blender's user preferences, or the installed one)")
    farm.add_argument("--output", default="", help="save to this .blend instead of in place")
    commands.add_parser("bake", parents=[farm], help="bake every Face Physics object of a .blend, headless")
    fit = commands.add_parser("fit", parents=[farm], help="fit the shape keys of every Face Physics object of a "
                                                          ".blend, headless")
    fit.add_argument("--shapes", type=_shape_names, default=None,
                     help="comma-separated shape keys as the solver spells them (mouthSmile_L); the current fit "
                          "keeps the others (default: every shape key, a fresh fit)")
    fit.add_argument("--jobs", type=_processes, default=None,
                     help="shape keys fitted at once, one process and core each (default: the Fit panel's Processes)")
    demo = commands.add_parser("demo", help="the demo head through the add-on: build, fit, bake, render")
    demo.add_argument("--out", default="out/demo", help="output folder (default: out/demo)")
    demo.add_argument("--quick", action="store_true", help="a coarse model and thumbnails (the tests' run)")
    demo.add_argument("--docs", default="", help="also copy the pictures into this folder")
    demo.add_argument("--solver-python", default=sys.executable,
                      help="the solver Python (default: this Python)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return run_demo(args.out, args.solver_python, args.quick, args.docs)
    if args.command == "fit":
        return fit_file(args.blend, args.object, args.shapes or "", args.jobs, args.solver_python, args.output)
    return bake_file(args.blend, args.object, args.solver_python, args.output)


def run_demo(out: str, solver_python: str, quick: bool, docs: str) -> int:
    import bpy
    from . import demo
    # The demo starts from an empty file; the add-on is enabled after it, as in a fresh session.
    bpy.ops.wm.read_homefile(use_empty=True)
    _enable_addon(solver_python)
    try:
        pictures = demo.run_demo(Path(out), solver_python, demo.QUICK if quick else demo.FULL,
                                 Path(docs) if docs else None)
    except (RuntimeError, OSError) as error:     # operator ERROR reports arrive as RuntimeError
        print(f"demo failed: {error}", file=sys.stderr)
        return 1
    print("pictures:\n" + "\n".join(f"  {path}" for path in pictures.values()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
