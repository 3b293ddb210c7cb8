"""Headless farm bake and the product demo, with a Python that has the `bpy` module (pip's bpy,
as in the project's .venv) — no Blender install or display needed.

    python -m blender_addon.cli bake shot.blend [--object Head ...] [--solver-python PY] [--output OUT.blend]
    python -m blender_addon.cli demo [--out out/demo] [--quick] [--docs DIR] [--solver-python PY]

Bakes every object that has a built Face Physics model (or the named ones) with its saved
settings, then saves the file (in place, or as --output, with the caches beside that file). Exit status 0 when every
bake succeeded, 1 otherwise; the solver's messages are printed as they arrive.

`demo` works the built-in demo head through the add-on's operators (blender_addon/demo.py) into
OUT/demo.blend and OUT/renders/*.png; --quick is the test suite's coarse, thumbnail-sized run.

Inside a full Blender with the extension enabled the same work is
`blender -b shot.blend --python-expr "import bpy; ...; bpy.ops.face_physics.bake(); bpy.ops.wm.save_mainfile()"`:
in background mode the bake operator runs to the end within the call.
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


def bake_file(blend: str, object_names, solver_python: str, output: str) -> int:
    import bpy
    bpy.ops.wm.open_mainfile(filepath=blend)
    _enable_addon(solver_python)
    from . import operators
    from .job_runner import current_job
    names = object_names or [obj.name for obj in bpy.data.objects
                             if obj.type == 'MESH' and obj.face_physics.model_path]
    if not names:
        print(f"{blend}: no object has a Face Physics model; build one first", file=sys.stderr)
        return 1
    if output:
        _save_as_keeping_model_paths(output)
    failures = 0
    for name in names:
        obj = bpy.data.objects.get(name)
        if obj is None:
            print(f"{name}: no such object in {blend}", file=sys.stderr)
            failures += 1
            continue
        for other in bpy.context.view_layer.objects:
            other.select_set(False)
        bpy.context.view_layer.objects.active = obj
        print(f"baking {name} …", flush=True)
        try:
            result = bpy.ops.face_physics.bake()
        except RuntimeError as error:   # the operator's ERROR reports arrive as an exception here
            print(f"{name}: {error}", file=sys.stderr)
            result = {'CANCELLED'}
        if result != {'FINISHED'}:
            failures += 1
        assert current_job() is None, "a background bake must finish within the operator"
    del operators
    bpy.ops.wm.save_mainfile()
    return 1 if failures else 0


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m blender_addon.cli", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    bake = commands.add_parser("bake", help="bake every Face Physics object of a .blend, headless")
    bake.add_argument("blend")
    bake.add_argument("--object", action="append", default=[], help="bake only this object (repeatable)")
    bake.add_argument("--solver-python", default="", help="the solver Python (default: the preference saved "
                                                          "in Blender's user preferences, or the installed one)")
    bake.add_argument("--output", default="", help="save to this .blend instead of in place")
    demo = commands.add_parser("demo", help="the demo head through the add-on: build, fit, bake, render")
    demo.add_argument("--out", default="out/demo", help="output folder (default: out/demo)")
    demo.add_argument("--quick", action="store_true", help="a coarse model and thumbnails (the tests' run)")
    demo.add_argument("--docs", default="", help="also copy the pictures into this folder")
    demo.add_argument("--solver-python", default=sys.executable,
                      help="the solver Python (default: this Python)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return run_demo(args.out, args.solver_python, args.quick, args.docs)
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
