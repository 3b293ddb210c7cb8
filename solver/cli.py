"""Command line of the solver: `python -m solver <command> …` (the contract the add-on uses).

Commands:
  demo-rig     write the built-in procedural demo head as a face rig
  build-model  turn a face rig into a volumetric model
  demo         demo head → model → pictures, into one folder
  fit          find the activations and jaw pose behind each shape key (inverse physics)
  fit-pictures heat maps of the worst and best shape-key fits of a FIT.npz
  animate      run a model through per-frame activations, or shape-key weights through a fit
  shell-fit    rig → SHELL.npz: the interactive shell (paper 001) with stiffness fitted to the shape keys
  correctives  quadratic corrective shape keys fitted to simulated samples → CORR.npz
  play-correctives  weights through a rig and its CORR.npz, no physics → RESULT.npz and .pc2
  shell-animate  shape-key weights through the interactive shell (SHELL.npz) → RESULT.npz and .pc2
  shell-live   the add-on's live shell session (Poke): binary frames over stdin/stdout
  lips         the upper and lower lip the solver finds by itself, as LIPS.npz (to edit and pass to
               animate --lip-vertices)
  run-job      run a job folder (job.json) written by the Blender add-on; always JSON lines
  check        what this Python can run: packages, the sparse Cholesky back end, IPOPT (exit 2
               when the solver cannot run here)

Progress goes to stderr as text, or to stdout as one JSON object per line with
--json (`{"type": "progress"|"result"|"error", ...}`), for programs that drive the solver.
Bad input exits with status 2 and a message that says what to fix.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path



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

    def done(self, status: str):
        """The job protocol's last line (JSON only), for a caller that runs a command as a job."""
        if self.as_json:
            self._emit("done", status=status)


def _check(args, report):
    from .environment_check import check_environment
    info = check_environment()
    report.result(**info)
    if not info["ok"]:
        report.done("error")
        raise InputError(info["message"])
    report.done("ok")


def _demo_rig(args, report):
    from .demo_head import make_demo_rig
    from .rig import save_rig
    rig = make_demo_rig()
    save_rig(args.output, rig)
    report.result(path=str(args.output), vertices=int(len(rig.vertices)), shape_keys=int(len(rig.shape_key_names)),
                  message=f"wrote {args.output}: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys")


def _labelled(labels: dict):
    """How the command line spells a request's fields: `labels`, else --field-name."""
    return lambda field: labels.get(field, "--" + field.replace("_", "-"))


def _submit(make_request, run, labels: dict, report) -> dict:
    """Build a request (its fields checked there), run it, and report its outputs: the first as
    `path`, the others by name. A bad field exits 2, named as the user typed it."""
    from .requests.fields import RequestError
    try:
        summary = run(make_request(), report)
    except RequestError as error:
        raise InputError(error.shown_as(_labelled(labels))) from None
    outputs = list(summary.pop("outputs").items())
    report.result(path=outputs[0][1], **{key: value for key, value in outputs[1:]}, **summary)
    return summary


_BUILD_LABELS = {"rig": "RIG", "output": "-o/--output"}


def _build_model(args, report):
    from .requests.build import BuildRequest, run_build
    given = {} if args.target_tets is None else {"target_tets": args.target_tets}
    _submit(lambda: BuildRequest(rig=args.rig, output=args.output, **given), run_build, _BUILD_LABELS, report)


def _demo(args, report):
    from .demo_head import make_demo_rig
    from .pictures.views import picture_sheet
    from .model_file import load_model
    from .requests.build import BuildRequest, run_build
    from .rig import save_rig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rig = make_demo_rig()
    save_rig(out / "demo_rig.npz", rig)
    report.progress(f"demo rig: {len(rig.vertices)} vertices, {len(rig.shape_key_names)} shape keys")
    _submit(lambda: BuildRequest(rig=out / "demo_rig.npz", output=out / "demo_model.npz",
                                 target_tets=args.target_tets), run_build, {"target_tets": "--target-tets"}, report)
    pictures = picture_sheet(load_model(out / "demo_model.npz"), out)
    report.result(pictures=[str(p) for p in pictures], message="pictures: " + ", ".join(str(p) for p in pictures))


# How the command line spells each field of an AnimateRequest (requests/animate.py), so that an
# error names what the user typed.
_ANIMATE_LABELS = {"model": "MODEL", "activations": "ACTIVATIONS", "fit": "FIT", "weights": "WEIGHTS",
                   "output": "-o/--output", "maps": "--maps", "colliders": "--collider",
                   "lip_vertices": "--lip-vertices", "detail": "--no-detail", "skin_filter": "--no-skin-filter",
                   "diffusion_time_step_m2": "--diffusion-time-step",
                   "diffusion_spread_m": "--diffusion-spread", "teeth_padding_m": "--teeth-padding",
                   "resume": "--resume"}


def _animate(args, report):
    from .requests.animate import AnimateRequest, run_animate
    shape_keys = args.weights is not None       # MODEL FIT WEIGHTS: the second positional is the fit
    given = {name: getattr(args, name) for name in ("substeps", "wind", "fat_scale", "fat_softening", "diffusion_steps",
                                                    "diffusion_time_step_m2", "diffusion_spread_m", "teeth_padding_m")
             if getattr(args, name) is not None}
    if args.muscles is not None and not shape_keys:
        raise InputError("--muscles: adds muscle contractions on top of shape-key weights. Fix: give MODEL FIT "
                         "WEIGHTS, or put the contractions in ACTIVATIONS itself.")
    _submit(lambda: AnimateRequest(
        model=args.model, output=args.output,
        activations=args.muscles if shape_keys else args.activations,
        fit=args.activations if shape_keys else None, weights=args.weights,
        maps=args.maps, colliders=tuple(args.collider or ()), lip_vertices=args.lip_vertices,
        dynamic=args.dynamic, gravity=args.gravity,
        detail=False if args.no_detail else None, skin_filter=not args.no_skin_filter,
        collisions=tuple(args.collisions or ()), contact_solver=args.contact_solver, resume=args.resume,
        actuation=args.actuation, **given),
        run_animate, {**_ANIMATE_LABELS, "activations": "--muscles"} if shape_keys else _ANIMATE_LABELS, report)


_SHELL_ANIMATE_LABELS = {"shell": "SHELL", "weights": "WEIGHTS", "output": "-o/--output", "colliders": "--collider",
                         "stiffness": "--stiffness", "fps": "--fps", "cache_start_frame": "--start-frame"}


def _shell_live(args, report):
    from .shell.live import serve
    raise SystemExit(serve(args.shell, stiffness_path=args.stiffness))      # 0 when stdin closed, 2 when the shell or the stream was unusable


def _shell_animate(args, report):
    from .requests.shell_animate import ShellAnimateRequest, run_shell_animate
    given = {name: getattr(args, name) for name in ("fps", "cache_start_frame") if getattr(args, name) is not None}
    _submit(lambda: ShellAnimateRequest(shell=args.shell, weights=args.weights, output=args.output,
                                        colliders=tuple(args.collider or ()), stiffness=args.stiffness, **given),
            run_shell_animate, _SHELL_ANIMATE_LABELS, report)


def _lips(args, report):
    from .requests.lips import LipsRequest, run_lips
    _submit(lambda: LipsRequest(model=args.model, output=args.output), run_lips,
            {"model": "MODEL", "output": "-o/--output"}, report)


_FIT_LABELS = {"model": "MODEL", "rig": "RIG", "output": "-o/--output", "processes": "--jobs"}


def _fit(args, report):
    from .requests.fit import FitRequest, run_fit
    _submit(lambda: FitRequest(model=args.model, rig=args.rig, output=args.output, shapes=tuple(args.shapes or ()),
                               processes=args.jobs, previous_fit=args.previous_fit), run_fit, _FIT_LABELS, report)


def _shell_fit(args, report):
    from .requests.shell_fit import DEFAULT_TRIANGLES, ShellFitRequest, run_shell_fit
    _submit(lambda: ShellFitRequest(rig=args.rig, output=args.output,
                                    triangles=DEFAULT_TRIANGLES if args.triangles is None else args.triangles),
            run_shell_fit, {"rig": "RIG", "output": "-o/--output"}, report)


_CORRECTIVES_LABELS = {"model": "MODEL", "fit": "FIT", "rig": "RIG", "output": "-o/--output", "keys": "--keys",
                       "pairs": "--pairs", "processes": "--jobs", "threshold_mm": "--threshold-mm",
                       "collisions": "--collisions", "sample_timeout_s": "--sample-timeout", "combinations": "--combinations"}


def _correctives(args, report):
    from .requests.correctives import CorrectivesRequest, run_correctives
    given = {name: getattr(args, name) for name in ("threshold_mm", "collisions", "sample_timeout_s", "combinations")
             if getattr(args, name) is not None}
    _submit(lambda: CorrectivesRequest(model=args.model, fit=args.fit, rig=args.rig, output=args.output,
                                       keys=tuple(args.keys or ()), pairs=tuple(args.pairs or ()),
                                       processes=args.jobs, **given),
            run_correctives, _CORRECTIVES_LABELS, report)


def _play_correctives(args, report):
    from .requests.play_correctives import PlayCorrectivesRequest, run_play_correctives
    given = {"cache_start_frame": args.start_frame} if args.start_frame is not None else {}
    _submit(lambda: PlayCorrectivesRequest(rig=args.rig, correctives=args.correctives, weights=args.weights,
                                           output=args.output, **given),
            run_play_correctives, {"rig": "RIG", "correctives": "CORR", "weights": "WEIGHTS",
                                   "output": "-o/--output", "cache_start_frame": "--start-frame"}, report)


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


def _comma_list(text):
    return [item.strip() for item in text.split(",") if item.strip()]


def _name_pairs(text):
    """'a:b,c:d' as [[a, b], [c, d]]; whether each is a pair of names the request checks."""
    return [item.split(":") for item in _comma_list(text)]


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


class _UsageError(Exception):
    """An argument argparse cannot read (a word where a number belongs, a missing positional)."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors reach the reporter, so that --json still prints a JSON error line."""

    def error(self, message):
        raise _UsageError(f"{self.prog}: {message}. Fix: see `{self.prog} --help`")


def _parser():
    parser = _Parser(prog="python -m solver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="JSON lines on stdout instead of text on stderr")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_rig = commands.add_parser("demo-rig", help="write the built-in demo head rig")
    demo_rig.add_argument("-o", "--output", type=Path, required=True)
    demo_rig.set_defaults(run=_demo_rig)
    build = commands.add_parser("build-model", help="build a volumetric model from a face rig")
    build.add_argument("rig", type=Path)
    build.add_argument("-o", "--output", type=Path, required=True)
    build.add_argument("--target-tets", type=int, default=None,
                       help="approximate tet count, 500 to 500,000 (default 35000)")
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
    fit.add_argument("--previous-fit", type=Path, default=None, metavar="FIT.npz",
                     help="keep this earlier fit's other shapes; fit only --shapes (and what they bring)")
    fit.set_defaults(run=_fit)
    shell_fit = commands.add_parser("shell-fit", help="interactive shell: remesh the skin, fit its stiffness to the "
                                                      "shape keys (SHELL.npz)")
    shell_fit.add_argument("rig", type=Path)
    shell_fit.add_argument("-o", "--output", type=Path, required=True)
    shell_fit.add_argument("--triangles", type=int, default=None, help="coarse shell triangles (default 4000)")
    shell_fit.set_defaults(run=_shell_fit)
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
    run.add_argument("--muscles", type=Path, default=None, metavar="ACTIVATIONS.npz",
                     help="with FIT + WEIGHTS: muscle contractions added on top of the shape-key blend")
    run.add_argument("--no-detail", action="store_true",
                     help="with FIT + WEIGHTS: physics only, without the shape keys' residual detail")
    run.add_argument("--no-skin-filter", action="store_true",
                     help="with FIT + WEIGHTS: show the simulated skin as it is, without smoothing its deviation "
                          "from the plain rig to the tet mesh's resolution (docs/performance.md)")
    run.add_argument("-o", "--output", type=Path, required=True)
    run.add_argument("--dynamic", action="store_true", help="backward-Euler dynamics instead of quasi-statics")
    run.add_argument("--gravity", action="store_true")
    # Defaults None = the request's own (solver/requests/animate.py, where every range is checked).
    run.add_argument("--substeps", type=int, default=None, help="time steps per frame when dynamic (default 1)")
    run.add_argument("--wind", type=_wind, default=None, help="wind velocity X,Y,Z in m/s (world axes)")
    run.add_argument("--maps", type=Path, help="MAPS.npz with fat/stiffness/density/paralysis maps")
    run.add_argument("--fat-scale", type=float, default=None,
                     help="growth where the fat map is 1: 1 unchanged (default), up to 1.5 fatter, down to 0.5 slimmer")
    run.add_argument("--fat-softening", type=float, default=None,
                     help="how much grown fat softens, 0..1 (1 = the paper's μ reduction, the default; 0 = none)")
    run.add_argument("--diffusion-steps", type=int, default=None,
                     help="diffusion steps of the painted maps into the volume (default 10)")
    run.add_argument("--diffusion-time-step", dest="diffusion_time_step_m2", type=float, default=None, metavar="M2",
                     help="diffusion time per step in m² (default 3e-6)")
    run.add_argument("--diffusion-spread", dest="diffusion_spread_m", type=float, default=None, metavar="M",
                     help="instead of the two above: how far a painted point spreads into the tissue, metres "
                          "(default 0.0077, i.e. 10 steps of 3e-6 m²)")
    run.add_argument("--collisions", type=_comma_list, default=None,
                     help="keep the skin out of the teeth and/or the other lip: teeth, lips or teeth,lips")
    run.add_argument("--teeth-padding", dest="teeth_padding_m", type=float, default=None, metavar="M",
                     help="with teeth collisions: metres of gum and lining around the teeth (default 0.001)")
    run.add_argument("--collider", type=Path, action="append", default=None, metavar="MESH.npz",
                     help="an external collider mesh, rigid or deforming (repeatable)")
    run.add_argument("--lip-vertices", type=Path, default=None, metavar="LIPS.npz",
                     help="the lips' skin vertices (upper, lower index arrays) instead of the automatic lip finder")
    run.add_argument("--contact-solver", default="newton",
                     help="contact response: newton (augmented Lagrangian, the default) or ipopt")
    run.add_argument("--resume", action="store_true",
                     help="continue the bake of the same output that was cancelled or crashed, from its last "
                          "finished frame (same inputs and settings; docs/addon.md, Takes, streaming and resume)")
    run.add_argument("--actuation", default="phace",
                     help="phace (muscles and bones, the default) or volumetric-blendshapes (per-tet targets from "
                          "the fit's shape keys, Projective Dynamics; docs/volumetric_blendshapes.md)")
    run.set_defaults(run=_animate)
    shell = commands.add_parser("shell-animate", help="interactive shell: SHELL.npz + WEIGHTS.npz → RESULT.npz "
                                                      "and .pc2")
    shell.add_argument("shell", type=Path, metavar="SHELL.npz")
    shell.add_argument("weights", type=Path, metavar="WEIGHTS.npz")
    shell.add_argument("-o", "--output", type=Path, required=True, metavar="RESULT.npz")
    shell.add_argument("--collider", type=Path, action="append", default=None, metavar="MESH.npz",
                       help="a rigid collider mesh, as animate takes (repeatable)")
    shell.add_argument("--fps", type=float, default=None, help="frames per second (default: the weights file's)")
    shell.add_argument("--start-frame", dest="cache_start_frame", type=float, default=None,
                       help="the scene frame of the first frame, for the .pc2 (default 1)")
    shell.add_argument("--stiffness", type=Path, default=None, metavar="STIFFNESS.npz",
                       help="repainted strain/bending stiffness per rig vertex (default: the shell's fitted maps)")
    shell.set_defaults(run=_shell_animate)
    live = commands.add_parser("shell-live", help="the add-on's live shell session: binary frames over stdin and "
                                                  "stdout (solver/shell/live.py, docs/addon.md)")
    live.add_argument("shell", type=Path, metavar="SHELL.npz")
    live.add_argument("--stiffness", type=Path, default=None, metavar="STIFFNESS.npz",
                      help="repainted strain/bending stiffness per rig vertex (default: the shell's fitted maps)")
    live.set_defaults(run=_shell_live)
    corr = commands.add_parser("correctives", help="quadratic corrective shape keys fitted to simulated samples "
                                                   "(docs/correctives.md) → CORR.npz")
    corr.add_argument("model", type=Path)
    corr.add_argument("fit", type=Path)
    corr.add_argument("rig", type=Path)
    corr.add_argument("-o", "--output", type=Path, required=True)
    corr.add_argument("--keys", type=_names, default=None, help="comma-separated shape keys (default: all fitted)")
    corr.add_argument("--pairs", type=_name_pairs, default=None, metavar="A:B,…",
                      help="the only pairs of keys probed for a corrective, e.g. jawOpen:mouthSmile_L (default: "
                           "every pair of the keys)")
    corr.add_argument("--jobs", type=int, default=1, help="chains of samples simulated at once, one process each")
    corr.add_argument("--threshold-mm", dest="threshold_mm", type=float, default=None,
                      help="keep a pair when its simulation at (1, 1) departs from the sum of its singles by more "
                           "(default 0.5)")
    corr.add_argument("--collisions", type=_comma_list, default=None,
                      help="contacts the samples are simulated with (default teeth,lips; '' for none)")
    corr.add_argument("--sample-timeout", dest="sample_timeout_s", type=float, default=None, metavar="S",
                      help="seconds one chain of samples may take before its process is stopped (default 1800)")
    corr.add_argument("--combinations", type=int, default=None, metavar="N",
                      help="rays to combinations of 3-5 keys linked by kept pairs, 4 samples each (default: as "
                           "many as kept pairs; 0: pairs only, as paper 002)")
    corr.set_defaults(run=_correctives)
    play = commands.add_parser("play-correctives", help="shape-key weights through RIG.npz + CORR.npz, no physics "
                                                        "→ RESULT.npz and .pc2")
    play.add_argument("rig", type=Path)
    play.add_argument("correctives", type=Path)
    play.add_argument("weights", type=Path)
    play.add_argument("-o", "--output", type=Path, required=True)
    play.add_argument("--start-frame", type=float, default=None, help="the .pc2's first frame (default 1)")
    play.set_defaults(run=_play_correctives)
    lips = commands.add_parser("lips", help="the lips the solver finds by itself, as a LIPS.npz to edit and pass "
                                            "back with animate --lip-vertices")
    lips.add_argument("model", type=Path, metavar="MODEL")
    lips.add_argument("-o", "--output", type=Path, required=True, metavar="LIPS.npz")
    lips.set_defaults(run=_lips)
    check = commands.add_parser("check", help="what this Python can run: packages, sparse Cholesky, IPOPT")
    check.set_defaults(run=_check)
    job = commands.add_parser("run-job", help="run JOB_DIR/job.json (the add-on's job protocol, docs/addon.md)")
    job.add_argument("job_dir", type=Path)
    job.set_defaults(run=_run_job)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else [str(argument) for argument in argv]
    try:
        args = _parser().parse_args(argv)
    except _UsageError as error:
        _Reporter("--json" in argv).error(str(error))
        return 2
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
    except KeyboardInterrupt:       # every output is written then swapped: nothing half-written is left
        report.error("interrupted; no output was written or replaced")
        return 130
    return 0
