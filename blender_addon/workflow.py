"""The add-on's workflow without operators: pre-flight checks, writing and starting the solver's
jobs from a skin object, and applying what a succeeded job returns. The operators (operators.py),
the farm command line (cli.py) and the tests all call these, so a farm bake is the artist's bake.
Nothing here changes the scene before a job has succeeded, except `apply_*`."""

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import List, Optional

import bpy
import numpy as np

from . import (bake, job_files, map_groups, preflight, preferences, scene_export, solver_environment, storage,
               take_folders, takes, timeline_markers)
from .job_runner import Job
from .preflight import ERROR, Finding
from .stepwise import drain
from .take_folders import Take


def skin_object(context):
    obj = context.active_object
    return obj if obj is not None and obj.type == 'MESH' else None


def report_findings(operator, findings: List[Finding]) -> bool:
    """Report every finding; True when one of them is an error (the job must not start)."""
    for finding in findings:
        operator.report({finding.severity}, finding.message)
    return any(finding.severity == ERROR for finding in findings)


def start_build_job(operator, context, obj):
    """Export the rig and start the model build; returns (job or None when a finding stopped
    it, what `apply_build` needs of the mesh as it was exported: topology and scene scale)."""
    storage.model_path(obj)   # fails early, with the reason, when the .blend is unsaved
    rig, findings = scene_export.export_rig(context, obj)
    if report_findings(operator, findings):
        return None, None
    job_dir = job_files.new_job_folder()
    job_files.write_build_job(job_dir, rig, obj.face_physics.target_tets)
    built_from = (scene_export.topology_signature(obj), scene_export.metres_per_unit(context, obj)[0])
    return (Job("build model", solver_environment.run_job_command(preferences.solver_python(), job_dir), job_dir),
            built_from)


def apply_build(operator, obj, job, built_from) -> None:
    """Put a succeeded build's MODEL.npz beside the .blend and point the object at it: model
    size, topology and scale, the muscle list; an earlier fit belonged to the old model and is
    dropped (its activations index the old tets; the solver would refuse them)."""
    destination = storage.model_path(obj)
    job_files.install_file(job.job_dir / job_files.MODEL_FILE, destination)
    settings = obj.face_physics
    settings.model_path = storage.relative(destination)
    settings.model_tets = int(job.result.get("tets", 0))
    settings.model_nodes = int(job.result.get("nodes", 0))
    settings.model_topology, settings.metres_per_unit = built_from
    update_muscle_list(settings, job.result.get("muscles", []))
    if settings.fit_path:
        settings.fit_path = ""
        operator.report({'INFO'}, "Face Physics: the earlier fit belonged to the previous model; fit the shape keys "
                                  "again (Fit panel)")
    refresh_fit_list(obj)


def update_muscle_list(settings, names) -> None:
    """The model's muscles, keeping each surviving muscle's slider and paralysis."""
    previous = {muscle.name: (muscle.activation, muscle.paralysed) for muscle in settings.muscles}
    settings.muscles.clear()
    for name in names:
        muscle = settings.muscles.add()
        muscle.name = name
        muscle.activation, muscle.paralysed = previous.get(name, (0.0, False))


def model_file(obj):
    path = obj.face_physics.model_path
    return bpy.path.abspath(path) if path else ""


def fit_file(obj):
    """The object's FIT.npz when it has one on disk, else ''."""
    path = obj.face_physics.fit_path
    absolute = bpy.path.abspath(path) if path else ""
    return absolute if absolute and os.path.isfile(absolute) else ""


def refresh_fit_list(obj) -> None:
    """The Fit panel's list: one row per exported shape key (in the mesh's order), keeping the
    ticks, with each shape's errors from the current fit."""
    settings = obj.face_physics
    ticked = {item.name for item in settings.fit_shapes if item.selected}
    mapping = scene_export.name_mapping(settings)
    fitted = {}
    if fit_file(obj):
        fitted = {shape["name"]: shape for shape in job_files.read_fit_summary(fit_file(obj))["shapes"]}
    settings.fit_shapes.clear()
    listed = set()
    for block in scene_export.user_key_blocks(obj):
        name = preflight.solver_shape_key_name(block.name, mapping)
        if name in listed:
            continue
        listed.add(name)
        item = settings.fit_shapes.add()
        item.name, item.key_name, item.selected = name, block.name, name in ticked
        shape = fitted.get(name)
        item.fitted = shape is not None
        if shape is not None:
            item.error_mean_mm, item.error_p95_mm, item.error_max_mm = shape["error_mm"]
            item.status, item.context, item.start = shape["status"], shape["context"], shape["start"]
    rows = [item for item in settings.fit_shapes if item.fitted]
    if rows:
        max(rows, key=lambda item: item.error_mean_mm).worst = True
    settings.fit_index = min(settings.fit_index, max(len(settings.fit_shapes) - 1, 0))


def fit_preflight(context, obj) -> List[Finding]:
    """The model exists and still belongs to this mesh (what a fit needs)."""
    if not _has_model_file(obj):
        return [Finding(ERROR, "no model: press Build first (or the model file next to the .blend is missing)")]
    return preflight.check_topology(scene_export.topology_signature(obj), obj.face_physics.model_topology)


def _has_model_file(obj) -> bool:
    return bool(obj.face_physics.model_path) and os.path.isfile(model_file(obj))


def _model_preflight(context, obj) -> List[Finding]:
    """The model exists and still belongs to this mesh at this scale (what every simulation needs)."""
    findings = fit_preflight(context, obj)
    return findings + scene_export.metres_per_unit(context, obj)[1] if _has_model_file(obj) else findings


def bake_preflight(context, obj, plan: Optional["BakePlan"] = None) -> List[Finding]:
    """What stops a bake of `plan` (default: the Bake panel's settings now)."""
    settings = obj.face_physics
    findings = _model_preflight(context, obj)
    if not _has_model_file(obj):
        return findings
    plan = plan or BakePlan.of(context, obj)
    if plan.target == 'PC2':
        findings += scene_export.cache_preflight(obj)
    first, last = plan.first_frame, plan.last_frame
    if last < first:
        findings.append(Finding(ERROR, f"the frame range {first}–{last} is empty"))
    if settings.animation_source == 'SHAPE_KEYS' and settings.fit_path:
        if not fit_file(obj):
            findings.append(Finding(ERROR, f"the fit file {settings.fit_path} is missing; fit the shape keys again "
                                           f"(Fit panel)"))
        elif job_files.read_fit_summary(fit_file(obj))["tets"] != settings.model_tets:
            findings.append(Finding(ERROR, "the fit belongs to another model; fit the shape keys again (Fit panel)"))
    findings += scene_export.collider_preflight(obj) + map_groups.findings(obj) + scene_export.actuation_findings(obj)
    return findings


@dataclass(frozen=True)
class BakePlan:
    """Where a bake's frames go, fixed when it starts: changing the frame range, the bake target
    or the scene units while the solver runs does not move them."""
    object_name: str
    first_frame: int
    last_frame: int
    target: str
    metres_per_unit: float

    @staticmethod
    def of(context, obj) -> "BakePlan":
        settings = obj.face_physics
        first, last = scene_export.frame_range(context, settings)
        return BakePlan(obj.name, first, last, settings.bake_target, settings.metres_per_unit)


def write_bake_job(operator, context, obj, plan: Optional[BakePlan] = None, job_dir=None):
    """Export the animation of `plan` (default: the object's settings now) into an animate job
    folder (`job_dir`, default a new one) and return it, or None when a finding stops the bake
    (reported on `operator`). With a fit, the shape keys' values drive the face (and moving
    muscle sliders add on top); without one, the muscle contractions."""
    return drain(write_bake_job_steps(operator, context, obj, plan, job_dir))


def write_bake_job_steps(operator, context, obj, plan: Optional[BakePlan] = None, job_dir=None):
    """`write_bake_job` as steps (stepwise.py): the scene is sampled a frame a step."""
    plan = plan or BakePlan.of(context, obj)
    storage.cache_path(obj)
    if report_findings(operator, bake_preflight(context, obj, plan)):
        return None
    yield 0.0, "checked the model, fit and colliders"
    # The previous bake comes off the object first (it stays in its take, to Show again): on a
    # face carrying a few hundred baked keys every frame_set of the sampling costs 5× more.
    yield from bake.remove_previous_bake_steps(obj)
    settings = obj.face_physics
    settings.shown_take = ""
    first, last = plan.first_frame, plan.last_frame
    metres = plan.metres_per_unit
    samples = yield from scene_export.sample_frames_steps(context, obj, first, last)
    use_fit = settings.animation_source == 'SHAPE_KEYS' and bool(fit_file(obj))
    findings, weights = [], None
    if use_fit:
        weights, findings = scene_export.weights_arrays(obj, samples, job_files.read_fit_shape_names(fit_file(obj)),
                                                        metres)
        activations = (scene_export.activations_arrays(obj, samples, metres, head=False)
                       if scene_export.muscles_move(samples) else None)
        if activations is not None and scene_export.actuation(obj, use_fit) == scene_export.VOLUMETRIC_BLENDSHAPES:
            findings.append(Finding(ERROR, "the muscle sliders move, and volumetric blendshapes have no muscles: "
                                           "put the sliders back to 1, or choose the Phace actuation"))
    else:
        activations = scene_export.activations_arrays(obj, samples, metres)
        moving = [name for name, values in samples.key_values.items() if np.any(values != 0.0)]
        if settings.animation_source == 'SHAPE_KEYS' and moving:
            findings.append(Finding(preflight.WARNING, f"no fit yet, so the shape keys ({', '.join(moving[:4])}"
                                                       f"{' …' if len(moving) > 4 else ''}) do not drive the bake; "
                                                       f"press Fit All in the Fit panel"))
    colliders, collider_findings = scene_export.collider_arrays(obj, samples, metres)
    simulation = {**scene_export.simulation_settings(context, obj, with_fit=use_fit),
                  "cache_start_frame": float(first), "cache_metres_per_unit": float(metres)}
    lips, lip_findings = (scene_export.lip_vertex_arrays(obj) if simulation.get("collisions") else (None, []))
    if report_findings(operator, findings + collider_findings + lip_findings):
        return None
    job_dir = job_files.new_job_folder() if job_dir is None else job_dir
    job_files.write_animate_job(job_dir, model_file(obj), activations, scene_export.export_maps(obj), simulation,
                                fit_path=fit_file(obj) if use_fit else None, weights=weights,
                                colliders=colliders, lip_vertices=lips)
    return job_dir


@contextmanager
def _playing_action(obj, action):
    """The shape keys play `action` while the bake samples the scene (Bake All Actions); the
    user's own assignment comes back afterwards, whatever happens."""
    key = obj.data.shape_keys
    if action is None or key is None:
        yield
        return
    animation = key.animation_data or key.animation_data_create()
    previous = animation.action
    animation.action = action
    try:
        yield
    finally:
        animation.action = previous


def start_bake_job(operator, context, obj, action=None, plan: Optional[BakePlan] = None):
    """Make a new take (take_folders.new_take), write the bake's job into it (`write_bake_job`;
    with `action`, the shape keys playing that action) and start the solver on it (shared with
    the farm bake and the API); None when a finding stopped it (the take is removed again). The
    job carries its `BakePlan`, which `apply_bake` follows, and its take, whose growing cache
    `follow_bake` shows. `plan` defaults to the Bake panel's settings now."""
    return drain(start_bake_job_steps(operator, context, obj, action, plan))


def start_bake_job_steps(operator, context, obj, action=None, plan: Optional[BakePlan] = None):
    """`start_bake_job` as steps (stepwise.py), for the modal Bake: sampling the scene a frame a
    step. Abandoned half-way (Esc), the new take is removed and the scene's frame comes back."""
    plan = plan or BakePlan.of(context, obj)
    template = Take(name="", object=obj.name, first_frame=plan.first_frame, last_frame=plan.last_frame,
                    target=plan.target, metres_per_unit=plan.metres_per_unit,
                    action="" if action is None else action.name)
    take = take_folders.new_take(storage.takes_folder(obj), template)
    try:
        yield 0.0, f"new take {take.name}"
        with _playing_action(obj, action):
            job_dir = yield from write_bake_job_steps(operator, context, obj, plan, job_dir=take.folder)
    except BaseException:
        take_folders.delete_take(take)
        raise
    if job_dir is None:
        take_folders.delete_take(take)
        return None
    take.settings = job_files.read_job_settings(take.folder)
    take.save()
    return _start_take_job(plan, take, f"bake {plan.last_frame - plan.first_frame + 1} frames")


def _start_take_job(plan: BakePlan, take: Take, description: str) -> Job:
    job = Job(f"{description} ({take.name})",
              solver_environment.run_job_command(preferences.solver_python(), take.folder), take.folder,
              keep_folder=True)
    job.plan, job.take = plan, take
    obj = bpy.data.objects.get(plan.object_name)
    if obj is not None:
        takes.refresh(obj, select=take.name)
    return job


def resume_bake_job(operator, context, obj, take: Take):
    """Continue a cancelled or failed take from its last finished frame, with the inputs and
    settings it was started with (its own job folder); the result equals an uninterrupted bake."""
    if not take.resumable:
        raise ValueError(f"{take.name} cannot be resumed: it is {take.status}"
                         + ("" if take.status == "finished" else " and has no saved state (no frame finished)"))
    if preferences.solver_python() is None:
        raise ValueError("no solver Python: see the Face Physics preferences")
    job_files.set_resume(take.folder, True)
    take.status = "running"
    take.save()
    plan = BakePlan(obj.name, take.first_frame, take.last_frame, take.target, take.metres_per_unit)
    return _start_take_job(plan, take, f"resume at frame {take.first_frame + take.frames_done}")


def follow_bake(job) -> None:
    """While a bake runs: show its take's cache once the first frame is written, and let the
    viewport redraw the object as frames arrive (called on every timer tick)."""
    take, plan = job.take, job.plan
    if take is None or job.frames_done == job.frames_shown:
        return
    obj = bpy.data.objects.get(plan.object_name)
    if obj is None or not take.cache.is_file():
        return
    if obj.face_physics.shown_take != take.name:
        takes.show(obj, take)
    job.frames_shown = job.frames_done
    obj.update_tag()


def end_bake(job) -> None:
    """A bake was cancelled or failed: its take keeps its finished frames (shown on the object)
    and can be resumed from the last one; a take without a finished frame is removed."""
    take = job.take
    if take is None:
        return
    take.frames_done = take_folders.saved_frames(take)
    obj = bpy.data.objects.get(job.plan.object_name)
    if not take.frames_done:        # nothing to show or resume: the take goes, the report says why
        take_folders.delete_take(take)
        if obj is not None:
            takes.refresh(obj)
        return
    take.status = "cancelled" if job.outcome == 'CANCELLED' else "failed"
    take.warnings = list(job.warnings) + ([] if job.outcome == 'CANCELLED' else [job.error_message()])
    take.seconds_per_frame = job.seconds_per_frame or take.seconds_per_frame
    take.save()
    if obj is None:
        return
    if take.cache.is_file():
        takes.show(obj, take)
    takes.refresh(obj)


def start_fat_preview_job(operator, context, obj):
    """Start one quasi-static frame of the neutral face with the painted maps and the Fat panel's
    settings (no animation, collisions, gravity or wind); the operator shows it on the preview
    object once the solver succeeded."""
    if report_findings(operator, _model_preflight(context, obj) + map_groups.findings(obj)):
        return None
    muscles = [muscle.name for muscle in obj.face_physics.muscles]
    neutral = {"muscle_contraction": np.ones((1, len(muscles))), "muscle_names": np.array(muscles, dtype=str),
               "jaw": np.zeros((1, 5))}
    job_dir = job_files.new_job_folder()
    job_files.write_animate_job(job_dir, model_file(obj), neutral, scene_export.export_maps(obj),
                                scene_export.fat_settings(obj))
    return Job("fat preview", solver_environment.run_job_command(preferences.solver_python(), job_dir), job_dir)


def fit_shape_selection(obj, scope: str, shapes_text: str = "") -> Optional[List[str]]:
    """The shape keys (solver spelling) a fit job is asked for: None = all of them."""
    settings = obj.face_physics
    exported = [preflight.solver_shape_key_name(block.name, scene_export.name_mapping(settings))
                for block in scene_export.user_key_blocks(obj)]
    if shapes_text.strip():
        names = [name.strip() for name in shapes_text.split(",") if name.strip()]
    elif scope == 'SELECTED':
        names = [item.name for item in settings.fit_shapes if item.selected]
        if not names:
            raise ValueError("no shape key is ticked in the Fit list; tick the ones to fit, or press Fit All")
    else:
        return None
    unknown = [name for name in names if name not in exported]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not shape keys of '{obj.name}' (after the name mapping); press "
                         f"Update List in the Fit panel")
    return names


def start_fit_job(operator, context, obj, scope: str, shapes_text: str = "", processes: Optional[int] = None):
    """Export the rig and start the fit job (shared by the operator, the farm fit and the tests);
    `processes` defaults to the panel's Processes. Nothing in the scene changes here: `apply_fit`
    applies the fit only when the job succeeded."""
    storage.fit_path(obj)   # fails early, with the reason, when the .blend is unsaved
    if report_findings(operator, fit_preflight(context, obj)):
        return None
    rig, findings = scene_export.export_rig(context, obj)
    if report_findings(operator, findings):
        return None
    if not len(rig["shape_key_names"]):
        raise ValueError(f"'{obj.name}' has no shape keys to fit")
    names = fit_shape_selection(obj, scope, shapes_text)
    # Fitting some shapes keeps the others of the current fit; fitting all starts afresh.
    previous = fit_file(obj) if names is not None else ""
    job_dir = job_files.new_job_folder()
    job_files.write_fit_job(job_dir, model_file(obj), rig, names,
                            obj.face_physics.fit_processes if processes is None else processes,
                            previous_fit=previous or None)
    count = len(rig["shape_key_names"]) if names is None else len(names)
    return Job(f"fit {count} shape key{'s' * (count != 1)}",
               solver_environment.run_job_command(preferences.solver_python(), job_dir), job_dir)


def apply_fit(obj, job) -> None:
    """Put a succeeded fit job's FIT.npz beside the .blend (`face_physics/<blend>_<object>_fit.npz`)
    and fill the Fit list's errors from it (the Fit operator's and the farm fit's last step)."""
    destination = storage.fit_path(obj)
    job_files.install_file(job.job_dir / job_files.FIT_FILE, destination)
    obj.face_physics.fit_path = storage.relative(destination)
    refresh_fit_list(obj)


def apply_bake(job) -> int:
    """Write a succeeded bake job's frames where its plan says (the Bake operator's and the farm
    bake's last step): the take is finished and shown; returns the number of frames."""
    return drain(apply_bake_steps(job))


def apply_bake_steps(job):
    """`apply_bake` as steps (stepwise.py): shape keys are made a frame a step."""
    plan = job.plan
    obj = bpy.data.objects.get(plan.object_name)
    if obj is None:
        raise RuntimeError(f"the object {plan.object_name!r} the bake was started on is gone")
    take = job.take
    if take is None:        # a job folder of its own (no take): the frames straight onto the object
        positions = job_files.read_result_positions(job.job_dir)
        yield from bake.apply_bake_steps(obj, plan.target, positions, plan.first_frame, plan.metres_per_unit)
        timeline_markers.mark_bake(bpy.context.scene, job.job_dir, plan.first_frame)
        return len(positions)
    take_folders.finish_take(take, job.seconds_per_frame, job.warnings)
    frames = yield from takes.show_steps(obj, take)
    takes.refresh(obj)
    return frames
