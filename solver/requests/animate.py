"""One animate request: what `animate` is asked to do, checked once, and the one way it is run.

The command line (`python -m solver animate …`) and a job folder (`run-job`, the add-on's door)
both parse into an `AnimateRequest`, which checks every field on construction, before a file is
loaded: ranges are bounded by what the solver can do in reasonable time, outputs may not
replace an input. `run_animate` then loads the inputs, blends shape-key weights through a fit
(with optional muscle contractions on top), builds the collision scene, simulates every frame,
and writes RESULT.npz and its `.pc2` into the partial folder beside RESULT (`partial_folder`),
swapping both into place only when every frame is done: a cancel or crash leaves the earlier
result and cache as they were, and the partial folder's finished frames and state, from which
`resume` continues (physics/checkpoint.py).

Reporting goes through `report.progress(message, **fields)` and `report.warning(message)`, which
both doors provide (solver/cli.py prints them, solver/jobs.py writes JSON lines).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..physics.maps import (DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2, DEFAULT_FAT_SOFTENING,
                            MapSettings, MapSettingsError)
from . import fields as check
from .fields import RequestError

COLLISION_KINDS = ("teeth", "lips")
CONTACT_SOLVERS = ("newton", "ipopt")
# phace: muscles and bones simulated (paper 000); volumetric-blendshapes: per-tet F targets from the
# shape keys reached by Projective Dynamics (paper 002 §3.3–3.4; solver/volumetric_blendshapes/).
ACTUATIONS = ("phace", "volumetric-blendshapes")
# Ranges: each is what an artist can mean and the solver can do in reasonable time.
MAX_SUBSTEPS = 100              # each substep is a full Newton solve of the frame
# Wind pressure ½ ρ v² at 30 m/s is 540 Pa, half the tissue's shear modulus (1 kPa): a storm
# that flattens the cheeks. At 1e9 m/s no frame converged.
MAX_WIND_SPEED = 30.0
# Without padding the proxy cannot be guaranteed to enclose every teeth vertex (collisions/teeth.py).
TEETH_PADDING_RANGE_M = (1e-5, 0.01)

INPUT_FIELDS = ("model", "activations", "fit", "weights", "maps", "colliders", "lip_vertices")


@dataclass(frozen=True)
class AnimateRequest:
    """Everything `animate` takes; the constructor checks each field (RequestError names it).

    Either `activations` alone (muscle contractions or raw activations per frame), or `fit` and
    `weights` (shape-key weights played through a fit), then optionally `activations` as muscle
    contractions added on top of the blend."""
    model: Path
    output: Path                            # RESULT.npz; its .pc2 is written beside it
    activations: Optional[Path] = None
    fit: Optional[Path] = None
    weights: Optional[Path] = None
    maps: Optional[Path] = None
    colliders: tuple = ()                   # MESH.npz paths
    lip_vertices: Optional[Path] = None     # LIPS.npz
    dynamic: bool = False
    substeps: int = 1
    gravity: bool = False
    wind: Optional[tuple] = None            # m/s, world axes
    fat_scale: float = 1.0
    fat_softening: float = DEFAULT_FAT_SOFTENING
    diffusion_steps: int = DEFAULT_DIFFUSION_STEPS
    diffusion_time_step_m2: float = DEFAULT_DIFFUSION_TIME_STEP_M2
    diffusion_spread_m: Optional[float] = None  # instead of the two above: how far a painted point spreads
    detail: Optional[bool] = None           # None: on for shape-key animation
    skin_filter: bool = True
    collisions: tuple = ()
    contact_solver: str = "newton"
    teeth_padding_m: Optional[float] = None  # None: the solver's default (collisions/teeth.py)
    resume: bool = False                    # continue the bake the partial folder beside output holds
    cache_start_frame: float = 1.0          # the .pc2 header's first frame (the scene frame of frame 0)
    cache_metres_per_unit: float = 1.0      # the .pc2 holds skin positions / this (the rig's own units)
    actuation: str = "phace"                # ACTUATIONS
    map_settings: MapSettings = field(init=False, default=None)     # the four above, checked (maps.py)

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("model", check.input_file(self.model, "model", "MODEL.npz"))
        for name, what in (("activations", "ACTIVATIONS.npz"), ("fit", "FIT.npz"), ("weights", "WEIGHTS.npz"),
                           ("maps", "MAPS.npz"), ("lip_vertices", "LIPS.npz")):
            if getattr(self, name) is not None:
                put(name, check.input_file(getattr(self, name), name, what))
        if isinstance(self.colliders, (str, Path)) or not isinstance(self.colliders, (list, tuple)):
            raise RequestError("colliders", f"expected a list of collider files, found {self.colliders!r}",
                               "give a list, empty for none")
        put("colliders", tuple(check.input_file(path, "colliders", "MESH.npz") for path in self.colliders))
        self._check_animation_inputs()
        for name in ("dynamic", "gravity", "skin_filter", "resume"):
            check.flag(getattr(self, name), name)
        if self.detail is not None:
            check.flag(self.detail, "detail")
        put("substeps", check.whole_number(self.substeps, "substeps", 1, MAX_SUBSTEPS))
        put("cache_start_frame", check.number(self.cache_start_frame, "cache_start_frame", -1e6, 1e6,
                                              meaning="the scene frame of the first simulated frame"))
        put("cache_metres_per_unit", check.number(self.cache_metres_per_unit, "cache_metres_per_unit", 1e-6, 1e3,
                                                  meaning="metres per unit of the .pc2 (0.01 for a rig in cm)"))
        if self.wind is not None:
            put("wind", check.vector3(self.wind, "wind", MAX_WIND_SPEED, "m/s"))
        if self.diffusion_spread_m is not None and (self.diffusion_steps, self.diffusion_time_step_m2) != \
                (DEFAULT_DIFFUSION_STEPS, DEFAULT_DIFFUSION_TIME_STEP_M2):
            raise RequestError("diffusion_spread_m", "given together with diffusion steps or time step",
                               "give either the spread or the steps and time step")
        try:
            if self.diffusion_spread_m is None:
                settings = MapSettings(self.fat_scale, self.fat_softening, self.diffusion_steps,
                                       self.diffusion_time_step_m2)
            else:
                settings = MapSettings.from_spread(self.fat_scale, self.fat_softening, self.diffusion_spread_m)
                put("diffusion_spread_m", settings.spread_m)
        except MapSettingsError as error:
            raise RequestError(error.field, error.problem, error.fix) from None
        put("map_settings", settings)
        for name in ("fat_scale", "fat_softening", "diffusion_steps", "diffusion_time_step_m2"):
            put(name, getattr(settings, name))
        put("collisions", check.choices(self.collisions, "collisions", COLLISION_KINDS))
        put("contact_solver", check.choice(self.contact_solver, "contact_solver", CONTACT_SOLVERS))
        if self.contact_solver == "ipopt" and self.collisions:
            from ..environment_check import ipopt_available
            if not ipopt_available():
                raise RequestError("contact_solver", "ipopt needs IPOPT (cyipopt), which this solver Python lacks",
                                   "use newton (the default), or run the solver from a Python with cyipopt "
                                   "(`python3 build.py setup` on Linux)")
        if self.teeth_padding_m is not None:
            if "teeth" not in self.collisions:
                raise RequestError("teeth_padding_m", "applies only with teeth collisions",
                                   "add teeth to the collisions, or leave the padding out")
            put("teeth_padding_m", check.number(self.teeth_padding_m, "teeth_padding_m", *TEETH_PADDING_RANGE_M,
                                                meaning="metres of gum and lining around the teeth"))
        if self.lip_vertices is not None and not {"lips", "teeth"} & set(self.collisions):
            raise RequestError("lip_vertices", "applies only with lip or teeth collisions (it says which skin is "
                                               "lip)", "add lips or teeth to the collisions, or leave the file out")
        put("actuation", check.choice(self.actuation, "actuation", ACTUATIONS))
        if self.actuation == "volumetric-blendshapes":
            self._check_volumetric_blendshapes()
        inputs = [self.model, self.activations, self.fit, self.weights, self.maps, self.lip_vertices,
                  *self.colliders]
        put("output", check.output_file(self.output, "output", ".npz", inputs, companions=(".pc2",)))

    def _check_animation_inputs(self):
        if (self.fit is None) != (self.weights is None):
            present, absent = ("fit", "weights") if self.fit is not None else ("weights", "fit")
            raise RequestError(absent, f"missing: {present} needs it",
                               "give fit and weights together (shape-key animation), or activations alone")
        if self.fit is None and self.activations is None:
            raise RequestError("activations", "no animation", "give activations (muscle contractions), or fit and "
                                                              "weights (shape-key values played through a fit)")
        if self.detail is not None and self.fit is None:
            raise RequestError("detail", "applies only to shape-key animation (fit and weights)",
                               "leave it out, or give fit and weights")


    def _check_volumetric_blendshapes(self):
        """Volumetric blendshapes play shape-key weights quasi-statically, with contact (their own,
        in the PD global step, so no IPOPT) but without muscles, maps, dynamics or resume (not
        built for this actuation yet)."""
        if self.fit is None:
            raise RequestError("actuation", "volumetric-blendshapes plays shape keys, and no fit and weights are given",
                               "give fit and weights, or use the phace actuation for muscle activations")
        unsupported = {"activations": self.activations is not None, "maps": self.maps is not None,
                       "contact_solver": self.contact_solver != "newton", "dynamic": self.dynamic,
                       "gravity": self.gravity, "wind": self.wind is not None,
                       "resume": self.resume}
        for name, given in unsupported.items():
            if given:
                raise RequestError(name, "not available with the volumetric-blendshapes actuation",
                                   "leave it out, or use the phace actuation")


# --------------------------------------------------------------------------- running

def collision_scene(model, report, collisions=(), colliders=(), lip_vertices=None, teeth_padding_m=None):
    """The CollisionScene of `collisions` (teeth, lips) and collider files, or None for neither;
    with a LIPS.npz `lip_vertices` the lips are those skin vertices instead of the automatic
    lip finder's. Fields as in AnimateRequest (already checked there)."""
    if not collisions and not colliders:
        return None
    from ..collisions.mesh_collider import load_mesh_collider
    from ..collisions.scene import CollisionScene, load_lip_vertices
    loaded = []
    for path in map(Path, colliders):
        try:
            loaded.append(load_mesh_collider(path, name=path.stem))
        except (OSError, ValueError) as error:
            raise RequestError("colliders", str(error).rstrip("."), "export the collider again") from None
    lips = None
    if lip_vertices is not None:
        try:
            lips = load_lip_vertices(lip_vertices, len(model["skin_vertices"]))
        except ValueError as error:
            raise RequestError("lip_vertices", str(error).rstrip("."), "paint the lip vertex groups again") from None
    padding = {} if teeth_padding_m is None else {"teeth_pad": teeth_padding_m}
    lips_from = [] if lips is None else [f"lips from vertex groups ({len(lips[0])} upper, {len(lips[1])} lower "
                                         f"vertices)"]
    report.progress("collision scene: " + ", ".join(list(collisions) + [Path(p).stem for p in colliders] + lips_from),
                    fraction=0.0)
    try:
        scene = CollisionScene(model, teeth="teeth" in collisions, lips="lips" in collisions, colliders=loaded,
                               lip_vertices=lips, **padding)
    except (ValueError, KeyError) as error:
        raise RequestError("collisions", str(error).rstrip("."), "turn that contact off, or give the model what it "
                                                                 "needs (teeth objects, mouth landmarks)") from None
    for collider in scene.teeth:
        if collider.proxy.source == "landmark arch":
            report.warning(f"{collider.name.replace('_', ' ')}: the model has no teeth mesh, so teeth contact uses "
                           f"an arch estimated from the lip landmarks; set the teeth objects in the Model panel and "
                           f"build again when the mouth matters")
    return scene


def _input_file(field: str, load, path, model):
    """`load(path, model)`, its AnimationInputError shown as the request's field, with the fix."""
    from ..physics.inputs import AnimationInputError
    try:
        return load(path, model)
    except AnimationInputError as error:
        problem = str(error).rstrip(".").removeprefix(f"{path}: ")
        raise RequestError(field, f"{Path(path).name}: {problem}",
                           "correct the file as the message says (its keys are listed in "
                           "solver/physics/inputs.py and docs/addon.md)") from None


def _animation(model, request: AnimateRequest, report):
    """(activations, skin detail, rig offset, skin filter) of the request: the activations file,
    or the weights blended through the fit with the muscle layer on top."""
    from ..physics.inputs import load_activations
    if request.fit is None:
        return _input_file("activations", load_activations, request.activations, model), None, None, None
    from ..inverse.blend import blend, load_weights, skin_filter_for, with_muscle_layer
    from ..inverse.fit_file import fit_energy_warning, load_fit
    fit = load_fit(request.fit, model)
    weights, _, fps, head_transforms = load_weights(request.weights, fit)
    with_detail = request.detail is not False
    blended = blend(fit, weights, fps, head_transforms, detail=with_detail)
    skin_filter, filter_warning = skin_filter_for(model, blended, enabled=request.skin_filter)
    for warning in (fit_energy_warning(fit), blended.held_warning(), filter_warning):
        if warning:
            report.warning(warning)
    activations = blended.activations
    if request.activations is not None:
        activations = with_muscle_layer(model, activations,
                                        _input_file("activations", load_activations, request.activations, model))
    return activations, blended.detail if with_detail else None, blended.rig_offset, skin_filter


def partial_folder(output: Path) -> Path:
    """Where a bake writing `output` keeps its frames until all are done: `.<stem>.partial/`
    beside it, holding the growing `result.pc2` (watchable while the bake runs) and the resume
    state (physics/checkpoint.py). A cancel or crash leaves it, and the earlier result, as they
    were; the next fresh run of the same output replaces it."""
    return output.resolve().parent / f".{output.stem}.partial"


def _fresh_partial_folder(workspace: Path) -> None:
    # A symlink planted under the name is removed, never followed.
    if workspace.is_symlink() or workspace.is_file():
        workspace.unlink()
    elif workspace.is_dir():
        shutil.rmtree(workspace)
    workspace.mkdir()


def _fingerprint(request: AnimateRequest) -> str:
    """What a resumed bake must share with the one it continues: every setting and input."""
    from ..physics.checkpoint import fingerprint
    settings = {item.name: getattr(request, item.name) for item in dataclasses.fields(request)
                if item.name not in ("output", "resume", "map_settings") + INPUT_FIELDS}
    inputs = [request.model, request.activations, request.fit, request.weights, request.maps, request.lip_vertices,
              *request.colliders]
    return fingerprint(settings, inputs)


def run_animate(request: AnimateRequest, report) -> dict:
    """Simulate the request and write RESULT.npz and its .pc2 (module docstring); the result's
    summary: outputs (paths), frames, unconverged_frames, message and, with collisions,
    penetration_depth_max_mm."""
    from ..model_file import load_model
    from ..physics.animate import animate
    from ..physics.checkpoint import Checkpoint, ResumeError
    from ..physics.inputs import load_maps
    from ..physics.simulator import SimulationSettings
    if request.actuation == "volumetric-blendshapes":
        return _run_volumetric_blendshapes(request, report)
    workspace = partial_folder(request.output)
    if request.resume and not (workspace.is_dir() and not workspace.is_symlink()):
        raise RequestError("resume", f"there is nothing to resume: no partial bake at {workspace}",
                           "bake afresh (without resume)")
    model = load_model(request.model)
    activations, detail, rig_offset, skin_filter = _animation(model, request, report)
    maps = _input_file("maps", load_maps, request.maps, model) if request.maps is not None else None
    simulation = SimulationSettings(dynamic=request.dynamic, gravity=request.gravity, fps=activations.fps,
                                    substeps=request.substeps, wind=request.wind,
                                    contact_solver=request.contact_solver)
    collisions = collision_scene(model, report, request.collisions, request.colliders, request.lip_vertices,
                                 request.teeth_padding_m)
    frames = activations.frame_count
    report.progress(f"model loaded; simulating {frames} frames", fraction=0.0, frame=0, frames=frames)

    def on_frame(event):
        state = "" if event["converged"] else f" (not converged: {event.get('reason', '')})"
        contact = {key: event[key] for key in ("penetration_depth_max_mm", "contacts", "collision_rounds")
                   if key in event}
        if "penetration_depth_max_mm" in contact:
            state += f", {contact['contacts']} contacts, deepest {contact['penetration_depth_max_mm']:.2f} mm"
        report.progress(f"frame {event['frame']}/{event['frames']}: {event['newton_iterations']} Newton iterations, "
                        f"{event['seconds']:.2f} s{state}",
                        fraction=round(event["frame"] / event["frames"], 4), frame=event["frame"],
                        frames=event["frames"], converged=event["converged"],
                        newton_iterations=event["newton_iterations"], seconds=event["seconds"], **contact)
        if not event["converged"]:
            report.warning(f"frame {event['frame']} did not converge ({event.get('reason', 'no reason given')})")

    output = request.output
    cache = output.with_suffix(".pc2")
    if not request.resume:
        _fresh_partial_folder(workspace)
    checkpoint = Checkpoint(workspace, _fingerprint(request), frames)
    try:
        result = animate(model, activations, workspace / "result.npz", settings=simulation, maps=maps,
                         map_settings=request.map_settings, progress=on_frame, skin_detail=detail,
                         collisions=collisions, rig_offset=rig_offset, skin_filter=skin_filter,
                         checkpoint=checkpoint, resume=request.resume, cache_start_frame=request.cache_start_frame,
                         cache_metres_per_unit=request.cache_metres_per_unit)
    except ResumeError as error:
        raise RequestError("resume", str(error), "bake afresh (without resume)") from None
    os.replace(workspace / "result.pc2", cache)
    os.replace(workspace / "result.npz", output)
    with contextlib.suppress(OSError):
        shutil.rmtree(workspace)
    unconverged = int((~result.converged).sum())
    summary = {"outputs": {"result": str(output), "cache": str(cache)}, "frames": int(frames),
               "unconverged_frames": unconverged,
               "message": f"wrote {output.name} and {cache.name}: {frames} frames simulated, "
                          f"{unconverged} not converged"}
    return _with_contact_summary(summary, result, collisions)


def _run_volumetric_blendshapes(request: AnimateRequest, report) -> dict:
    """`--actuation volumetric-blendshapes`: the weights through volumetric blendshapes
    (solver/volumetric_blendshapes/animate.py), RESULT.npz and .pc2 written, then swapped in."""
    from ..inverse.blend import load_weights
    from ..inverse.fit_file import load_fit
    from ..model_file import load_model
    from ..volumetric_blendshapes.animate import VolumetricBlendshapeError, play_volumetric_blendshapes
    model = load_model(request.model)
    fit = load_fit(request.fit, model)
    weights, _, fps, head_transforms = load_weights(request.weights, fit)
    if "shape_key_deltas" not in fit:          # before any folder is made
        raise RequestError("fit", "has no shape_key_deltas (fits made before they were stored), which volumetric "
                                  "blendshapes are made from", "fit the shapes again with this solver")
    frames = len(weights)
    scene = collision_scene(model, report, request.collisions, request.colliders, request.lip_vertices,
                            request.teeth_padding_m)
    report.progress(f"model loaded; volumetric blendshapes: transferring {len(fit['shape_key_names'])} shapes, "
                    f"then {frames} frames", fraction=0.0, frame=0, frames=frames)
    workspace = partial_folder(request.output)
    _fresh_partial_folder(workspace)

    def on_frame(event):
        contact = {key: event[key] for key in ("penetration_depth_max_mm", "contacts") if key in event}
        state = (f", {contact['contacts']} contacts, deepest {contact['penetration_depth_max_mm']:.2f} mm"
                 if contact else "")
        report.progress(f"frame {event['frame']}/{event['frames']}: {event['newton_iterations']} PD iterations, "
                        f"{event['seconds']:.2f} s{state}", fraction=round(event["frame"] / event["frames"], 4),
                        frame=event["frame"], frames=event["frames"], converged=event["converged"],
                        newton_iterations=event["newton_iterations"], seconds=event["seconds"], **contact)
        if not event["converged"]:
            report.warning(f"frame {event['frame']} did not converge ({event['reason']})")

    try:
        result = play_volumetric_blendshapes(model, fit, weights, fps, head_transforms, workspace / "result.npz",
                                             detail=request.detail is not False, progress=on_frame, scene=scene,
                                             skin_filter=_skin_filter(model) if request.skin_filter else None,
                                             cache_start_frame=request.cache_start_frame,
                                             cache_metres_per_unit=request.cache_metres_per_unit)
    except VolumetricBlendshapeError as error:
        raise RequestError("fit", str(error), "fit the shapes again with this solver") from None
    output, cache = request.output, request.output.with_suffix(".pc2")
    os.replace(workspace / "result.pc2", cache)
    os.replace(workspace / "result.npz", output)
    with contextlib.suppress(OSError):
        shutil.rmtree(workspace)
    unconverged = int((~result.converged).sum())
    summary = {"outputs": {"result": str(output), "cache": str(cache)}, "frames": int(frames),
               "unconverged_frames": unconverged,
               "message": f"wrote {output.name} and {cache.name}: {frames} frames of volumetric blendshapes, "
                          f"{unconverged} not converged"}
    return _with_contact_summary(summary, result, scene)


def _skin_filter(model):
    """The model's SkinFilter (physics/skin_filter.py), or a RequestError when the model does not
    say how fine its tets are (models built before the lattice spacing was recorded)."""
    from ..physics.skin_filter import SkinFilter
    try:
        return SkinFilter.for_model(model)
    except ValueError as error:
        raise RequestError("skin_filter", str(error).rstrip("."), "build the model again with this solver, or turn "
                                                                  "the skin filter off (--no-skin-filter)") from None


def _with_contact_summary(summary: dict, result, scene) -> dict:
    """The summary with the deepest shown skin vertex inside a collider, when there is a scene."""
    if scene is not None:
        deepest_mm = 1e3 * float(result.penetration_depth_max.max(initial=0.0))
        summary["penetration_depth_max_mm"] = round(deepest_mm, 4)
        summary["message"] += f"; deepest skin vertex inside a collider {deepest_mm:.2f} mm"
    return summary
