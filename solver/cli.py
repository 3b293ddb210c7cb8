"""Command line of the solver: `python -m solver <command> …` (the contract the add-on uses).

Commands:
  demo-rig     write the built-in procedural demo head as a face rig
  build-model  turn a face rig into a volumetric model
  demo         demo head → model → pictures, into one folder
  fit          find the activations and jaw pose behind each shape key (inverse physics)
  fit-pictures heat maps of the worst and best shape-key fits of a FIT.npz
  animate      run a model through per-frame activations, or shape-key weights through a fit
  run-job      run a job folder (job.json) written by the Blender add-on; always JSON lines

Progress goes to stderr as text, or to stdout as one JSON object per line with
--json (`{"type": "progress"|"result"|"error", ...}`), for programs that drive the solver.
Bad input exits with status 2 and a message that says what to fix.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


class InputError(ValueError):
    """Arguments that do not go together (the message says how to fix them)."""


class _Reporter:
    def __init__(self, as_json: bool):
        self.as_json = as_json

    def _emit(self, kind, **fields):
        if self.as_json:
            print(json.dumps({"type": kind, **fields}), flush=True)
        else:
            text = fields.get("message") or json.dumps(fields)
            print(text if kind == "progress" else f"{kind}: {text}", file=sys.stderr, flush=True)

    def progress(self, message, **fields):
        self._emit("progress", message=message, **fields)

    def result(self, **fields):
        self._emit("result", **fields)

    def warning(self, message):
        self._emit("warning", message=message)

    def error(self, message):
        self._emit("error", message=message)


def _demo_rig(args, report):
    from .demo_head import make_demo_rig
    from .rig import save_rig
    rig = make_demo_rig()
    save_rig(args.output, rig)
    report.result(path=str(args.output), vertices=int(len(rig.vertices)), shape_keys=int(len(rig.shape_key_names)),
                  message=f"wrote {args.output}: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys")


def _build(rig, target_tets, output, report):
    from .model_builder.builder import BuildOptions, build_model
    from .model_file import build_info, save_model
    start = time.perf_counter()
    model = build_model(rig, BuildOptions(target_tets=target_tets, progress=report.progress))
    save_model(output, model)
    info = build_info(model)
    report.result(path=str(output), tets=info["tet_count"], nodes=info["node_count"],
                  muscles=len(model["muscle_names"]), seconds=round(time.perf_counter() - start, 2),
                  message=f"wrote {output}: {info['tet_count']} tets, {info['node_count']} nodes, "
                          f"{len(model['muscle_names'])} muscles in {time.perf_counter() - start:.1f} s")
    return model


def _build_model(args, report):
    from .rig import load_rig
    _build(load_rig(args.rig), args.target_tets, args.output, report)


def _demo(args, report):
    from .demo_head import make_demo_rig
    from .pictures.views import picture_sheet
    from .rig import save_rig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rig = make_demo_rig()
    save_rig(out / "demo_rig.npz", rig)
    report.progress(f"demo rig: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys")
    model = _build(rig, args.target_tets, out / "demo_model.npz", report)
    pictures = picture_sheet(model, out)
    report.result(pictures=[str(p) for p in pictures], message="pictures: " + ", ".join(str(p) for p in pictures))


def _animate(args, report):
    from .model_file import load_model
    from .physics.animate import animate
    from .physics.inputs import load_activations, load_maps
    from .physics.simulator import SimulationSettings
    map_settings = _map_settings(args)       # before the slow loads: a typo fails at once
    model = load_model(args.model)
    detail = rig_offset = skin_filter = None
    if args.weights is None:
        activations = load_activations(args.activations, model)
    else:                       # MODEL FIT WEIGHTS: the second positional is the fit
        from .inverse.blend import blend, load_weights, skin_filter_for
        from .inverse.fit_file import fit_energy_warning, load_fit
        fit = load_fit(args.activations, model)
        weights, _, fps, head_transforms = load_weights(args.weights, fit)
        blended = blend(fit, weights, fps, head_transforms, detail=not args.no_detail)
        activations, detail, rig_offset = blended.activations, blended.detail, blended.rig_offset
        skin_filter, filter_warning = skin_filter_for(model, blended, enabled=not args.no_skin_filter)
        for warning in (fit_energy_warning(fit), blended.held_warning(), filter_warning):
            if warning:
                report.warning(warning)
    maps = load_maps(args.maps, model) if args.maps else None
    settings = SimulationSettings(dynamic=args.dynamic, gravity=args.gravity, fps=activations.fps,
                                  substeps=args.substeps, wind=args.wind, contact_solver=args.contact_solver)
    collisions = _collision_scene(model, args.collisions, args.collider, args.lip_vertices)

    def on_frame(event):
        state = "" if event["converged"] else f" NOT CONVERGED ({event['reason']})"
        report.progress(f"frame {event['frame']}/{event['frames']}: {event['newton_iterations']} Newton "
                        f"iterations, {event['seconds']:.2f} s{state}", **event)

    result = animate(model, activations, args.output, settings, maps=maps, fat_scale=args.fat_scale,
                     progress=on_frame, skin_detail=detail, collisions=collisions, rig_offset=rig_offset,
                     skin_filter=skin_filter, **map_settings)
    unconverged = int((~result.converged).sum())
    report.result(path=str(args.output), cache=str(args.output.with_suffix(".pc2")),
                  frames=int(len(result.converged)), unconverged_frames=unconverged,
                  message=f"wrote {args.output} and {args.output.with_suffix('.pc2')}: {len(result.converged)} "
                          f"frames, {unconverged} not converged")


def _map_settings(args) -> dict:
    """animate()'s diffusion and fat-softening arguments from the command line, checked."""
    from .physics.maps import DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2, DEFAULT_FAT_SOFTENING
    steps = DEFAULT_DIFFUSION_STEPS if args.diffusion_steps is None else args.diffusion_steps
    time_step = DEFAULT_DIFFUSION_TIME_STEP_M2 if args.diffusion_time_step is None else args.diffusion_time_step
    softening = DEFAULT_FAT_SOFTENING if args.fat_softening is None else args.fat_softening
    if steps < 0:
        raise InputError(f"--diffusion-steps must be 0 or more, got {steps}")
    if not (np.isfinite(time_step) and time_step > 0.0):
        raise InputError(f"--diffusion-time-step must be a positive diffusion time in m², got {time_step}")
    if not (np.isfinite(softening) and 0.0 <= softening <= 1.0):
        raise InputError(f"--fat-softening must be in [0, 1] (1 = the paper's softening of grown fat, 0 = none), "
                         f"got {softening}")
    return {"diffusion_steps": steps, "diffusion_time_step_m2": time_step, "fat_softening": softening}


COLLISION_KINDS = ("teeth", "lips")


def _collision_kinds(text):
    kinds = [kind.strip() for kind in text.split(",") if kind.strip()]
    unknown = sorted(set(kinds) - set(COLLISION_KINDS))
    if not kinds or unknown:
        raise argparse.ArgumentTypeError(f"--collisions takes a comma-separated subset of "
                                         f"{','.join(COLLISION_KINDS)}; got {text!r}")
    return kinds


def _collision_scene(model, kinds, collider_paths, lip_vertices_path=None):
    """The CollisionScene for --collisions / --collider (and --lip-vertices), or None when
    neither collisions nor colliders are given."""
    kinds, collider_paths = kinds or [], collider_paths or []
    if lip_vertices_path is not None and not {"lips", "teeth"} & set(kinds):
        raise InputError("--lip-vertices applies only with --collisions lips and/or teeth")
    if not kinds and not collider_paths:
        return None
    try:
        from .collisions.scene import CollisionScene, load_lip_vertices
        from .collisions.mesh_collider import load_mesh_collider
    except ImportError as error:
        raise InputError(f"--collisions / --collider: collision detection is not available in this "
                         f"solver ({error}); run without them") from None
    colliders = []
    for path in collider_paths:
        try:
            colliders.append(load_mesh_collider(path))
        except (OSError, ValueError, KeyError) as error:
            raise InputError(f"--collider {path}: {error}") from None
    lip_vertices = None
    if lip_vertices_path is not None:
        try:
            lip_vertices = load_lip_vertices(lip_vertices_path, len(model["skin_vertices"]))
        except ValueError as error:
            raise InputError(f"--lip-vertices: {error}") from None
    try:
        return CollisionScene(model, teeth="teeth" in kinds, lips="lips" in kinds, colliders=colliders,
                              lip_vertices=lip_vertices)
    except (ValueError, KeyError) as error:
        raise InputError(f"--collisions: {error}") from None


def _fit(args, report):
    from .inverse.fit_file import save_fit
    from .inverse.shapes import fit_progress, fit_shapes, select_shapes
    from .model_file import load_model
    from .rig import load_rig
    model = load_model(args.model)
    rig = load_rig(args.rig)
    if len(rig.vertices) != len(model["skin_vertices"]) or not np.allclose(rig.vertices, model["skin_vertices"],
                                                                          atol=1e-9):
        raise InputError(f"{args.rig} is not the rig {args.model} was built from (its neutral skin differs); "
                         f"build the model from this rig first")
    names = select_shapes(rig, args.shapes)
    if args.jobs < 1:
        raise InputError("--jobs must be at least 1")

    def on_shape(fit, done, total):
        message, fields = fit_progress(fit, done, total, model["muscle_names"])
        report.progress(message, **fields)

    arrays = fit_shapes(model, rig, names, jobs=args.jobs, progress=on_shape)
    save_fit(args.output, arrays)
    errors = arrays["fit_error_mm"]
    report.result(path=str(args.output), shapes=len(names),
                  worst_mean_error_mm=round(float(errors[:, 0].max()), 4),
                  message=f"wrote {args.output}: {len(names)} shapes, mean error up to {errors[:, 0].max():.2f} mm "
                          f"(95th percentile up to {errors[:, 1].max():.2f} mm), {float(arrays['total_seconds']):.0f} s")


def _fit_pictures(args, report):
    from .inverse.fit_file import load_fit
    from .model_file import load_model
    from .pictures.fit_errors import fit_error_sheet
    from .pictures.raster import save_png
    model = load_model(args.model)
    fit = load_fit(args.fit, model)
    try:
        sheet = fit_error_sheet(model, fit, count=args.count, limit_mm=args.limit_mm)
    except ValueError as error:
        raise InputError(f"{args.fit}: {error}") from None
    save_png(sheet.image, args.output)
    worst = [panel.name for panel in sheet.panels if panel.row == "worst"]
    best = [panel.name for panel in sheet.panels if panel.row == "best"]
    report.result(path=str(args.output), worst=worst, best=best, limit_mm=round(sheet.limit_mm, 4),
                  message=f"wrote {args.output}: worst {', '.join(worst)}; best {', '.join(best) or '-'}; "
                          f"colour scale 0-{sheet.limit_mm:.2f} mm")


def _names(text):
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one shape-key name")
    return names


def _run_job(args, report):
    from .jobs import run_job
    code = run_job(args.job_dir)
    if code:
        raise SystemExit(code)


def _wind(text):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"--wind takes X,Y,Z in m/s, e.g. 0,-8,0; got {text!r}")
    return values


def _parser():
    parser = argparse.ArgumentParser(prog="python -m solver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="JSON lines on stdout instead of text on stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_rig = commands.add_parser("demo-rig", help="write the built-in demo head rig")
    demo_rig.add_argument("-o", "--output", type=Path, required=True)
    demo_rig.set_defaults(run=_demo_rig)
    build = commands.add_parser("build-model", help="build a volumetric model from a face rig")
    build.add_argument("rig", type=Path)
    build.add_argument("-o", "--output", type=Path, required=True)
    build.add_argument("--target-tets", type=int, default=35000, help="approximate tet count (default 35000)")
    build.set_defaults(run=_build_model)
    demo = commands.add_parser("demo", help="demo head → model → pictures")
    demo.add_argument("--out", type=Path, default=Path("out/demo"))
    demo.add_argument("--target-tets", type=int, default=30000)
    demo.set_defaults(run=_demo)
    fit = commands.add_parser("fit", help="inverse physics: the activations and jaw pose behind each shape key")
    fit.add_argument("model", type=Path)
    fit.add_argument("rig", type=Path)
    fit.add_argument("-o", "--output", type=Path, required=True)
    fit.add_argument("--shapes", type=_names, default=None, help="comma-separated shape keys (default: all)")
    fit.add_argument("--jobs", type=int, default=1, help="shapes fitted in parallel processes")
    fit.set_defaults(run=_fit)
    fit_pictures = commands.add_parser("fit-pictures", help="heat maps of the worst and best shape-key fits")
    fit_pictures.add_argument("model", type=Path)
    fit_pictures.add_argument("fit", type=Path)
    fit_pictures.add_argument("-o", "--output", type=Path, required=True)
    fit_pictures.add_argument("--count", type=int, default=3, help="worst and best shapes shown (default 3 each)")
    fit_pictures.add_argument("--limit-mm", type=float, default=None,
                              help="error at the top of the colour scale (default: 95th percentile, at least 1 mm)")
    fit_pictures.set_defaults(run=_fit_pictures)

    run = commands.add_parser("animate", help="forward physics: MODEL.npz + ACTIVATIONS.npz (or FIT.npz + "
                                              "WEIGHTS.npz) → RESULT.npz and .pc2")
    run.add_argument("model", type=Path)
    run.add_argument("activations", type=Path, help="ACTIVATIONS.npz, or FIT.npz when WEIGHTS.npz follows")
    run.add_argument("weights", type=Path, nargs="?", default=None,
                     help="WEIGHTS.npz: shape-key weights per frame, played through FIT.npz")
    run.add_argument("--no-detail", action="store_true",
                     help="with FIT + WEIGHTS: physics only, without the shape keys' residual detail")
    run.add_argument("--no-skin-filter", action="store_true",
                     help="with FIT + WEIGHTS: show the simulated skin as it is, without smoothing its deviation "
                          "from the plain rig to the tet mesh's resolution (docs/performance.md)")
    run.add_argument("-o", "--output", type=Path, required=True)
    run.add_argument("--dynamic", action="store_true", help="backward-Euler dynamics instead of quasi-statics")
    run.add_argument("--substeps", type=int, default=1, help="time steps per frame when dynamic")
    run.add_argument("--gravity", action="store_true")
    run.add_argument("--wind", type=_wind, default=None, help="wind velocity X,Y,Z in m/s (world axes)")
    run.add_argument("--maps", type=Path, help="MAPS.npz with fat/stiffness/density/paralysis maps")
    run.add_argument("--fat-scale", type=float, default=1.0, help="plastic scale where the fat map is 1")
    # Defaults None = the solver's (physics/maps.py), filled in by _map_settings: importing
    # maps.py here would load scipy for every command.
    run.add_argument("--fat-softening", type=float, default=None,
                     help="how much grown fat softens, 0..1 (1 = the paper's μ reduction, the default; 0 = none)")
    run.add_argument("--diffusion-steps", type=int, default=None,
                     help="diffusion steps of the painted maps into the volume (default 10)")
    run.add_argument("--diffusion-time-step", type=float, default=None, metavar="M2",
                     help="diffusion time per step in m² (default 3e-6)")
    run.add_argument("--collisions", type=_collision_kinds, default=None,
                     help="keep the skin out of the teeth and/or the other lip: teeth, lips or teeth,lips")
    run.add_argument("--collider", type=Path, action="append", default=None, metavar="MESH.npz",
                     help="an external collider mesh, rigid or deforming (repeatable)")
    run.add_argument("--lip-vertices", type=Path, default=None, metavar="LIPS.npz",
                     help="the lips' skin vertices (upper, lower index arrays) instead of the automatic lip finder")
    run.add_argument("--contact-solver", choices=("newton", "ipopt"), default="newton",
                     help="contact response: augmented Lagrangian in Newton (default) or IPOPT")
    run.set_defaults(run=_animate)
    job = commands.add_parser("run-job", help="run JOB_DIR/job.json (the add-on's job protocol, docs/addon.md)")
    job.add_argument("job_dir", type=Path)
    job.set_defaults(run=_run_job)
    return parser


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    report = _Reporter(args.json)
    from .model_builder.errors import ModelBuildError
    from .model_file import ModelFormatError
    from .inverse.fit_file import FitFormatError
    from .inverse.shapes import ShapeSelectionError
    from .physics.inputs import AnimationInputError
    from .rig import RigFormatError
    try:
        args.run(args, report)
    except (RigFormatError, ModelBuildError, ModelFormatError, AnimationInputError, FitFormatError,
            ShapeSelectionError, InputError) as error:
        report.error(str(error))
        return 2
    return 0
