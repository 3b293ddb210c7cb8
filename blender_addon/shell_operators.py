"""The Interactive panel's jobs: Fit Stiffness (a `shell-fit` job on the rig the build exports)
and Bake Shell (a `shell-animate` job over the frame range, into a take like any bake), with
their workflow functions, which the tests call as the operators do.

Fit Stiffness writes SHELL.npz beside the other solver files (`face_physics/<blend>_<object>_
shell.npz`) and the fitted maps into the vertex groups FP_shell_strain and FP_shell_bending
(shell_maps.py: logarithmic weights, the range on the object). The groups are replaced whole:
new groups are filled under temporary names, then the old ones removed and the new renamed, so
a failure half-way leaves the old groups; the user's own groups are never touched.

Bake Shell and Poke send the groups back (as STIFFNESS.npz, `repainted_stiffness_arrays`) when
they differ from the fitted maps, so repainting changes the physics; a missing group, or one
whose range is unknown, is the fitted map. Stiffness Map from Shell writes the strain map into
its own group FP_stiffness_from_shell, the volumetric model's stiffness map (shell_maps.py
`tissue_stiffness_weights` says what a weight means there).
"""
from __future__ import annotations

import bpy
import numpy as np

from . import (bake, job_files, preferences, scene_export, shell_maps, solver_environment, solver_numbers, storage,
               take_folders, workflow)
from .bake_operators import _BakeJobOperator
from .job_operator import SolverJobOperator, first_refusal, solver_poll
from .job_runner import Job
from .take_folders import Take
from .workflow import report_findings, skin_object

TEMPORARY_SUFFIX = ".fp_new"


def shell_path(obj):
    """Where the object's SHELL.npz lives: beside its model and fit."""
    cache = storage.cache_path(obj)
    return cache.with_name(cache.stem + "_shell.npz")


def shell_file(obj):
    """The object's fitted SHELL.npz as an absolute path, or None before a fit."""
    path = obj.face_physics_shell.shell_path
    return bpy.path.abspath(path) if path else None


# --------------------------------------------------------------------------- Fit Stiffness

def start_shell_fit_job(operator, context, obj):
    shell_path(obj)     # fails early, with the reason, when the .blend is unsaved
    rig, findings = scene_export.export_rig(context, obj)
    if report_findings(operator, findings):
        return None
    if not len(rig.get("shape_key_names", ())):
        operator.report({'ERROR'}, "Fit Stiffness needs the skin's shape keys: the stiffness is fitted to them")
        return None
    job_dir = job_files.new_job_folder()
    shell_maps.write_shell_fit_job(job_dir, rig, obj.face_physics_shell.triangles)
    return Job("fit shell stiffness", solver_environment.run_job_command(preferences.solver_python(), job_dir), job_dir)


def write_map_groups(obj, strain: np.ndarray, bending: np.ndarray) -> None:
    """FP_shell_strain / FP_shell_bending from the maps (V,), replaced whole; the ranges go to
    the object's shell settings."""
    count = len(obj.data.vertices)
    for values in (strain, bending):
        if values.shape != (count,):
            raise ValueError(f"the shell's maps have {values.shape[0]} vertices but '{obj.name}' has {count}; "
                             f"fit the stiffness again")
    settings = obj.face_physics_shell
    groups = obj.vertex_groups
    filled = []
    try:
        for name, values in ((shell_maps.STRAIN_GROUP, strain), (shell_maps.BENDING_GROUP, bending)):
            low, high = shell_maps.map_range(values)
            weights = shell_maps.weights_from_stiffness(values, low, high)
            filled.append((name, _filled_temporary_group(obj, name, weights), (low, high)))
    except BaseException:
        for _, group, _ in filled:
            groups.remove(group)
        raise
    for name, group, value_range in filled:
        _swap_in(obj, name, group)
        if name == shell_maps.STRAIN_GROUP:
            settings.strain_range = value_range
        else:
            settings.bending_range = value_range


def _filled_temporary_group(obj, name: str, weights: np.ndarray):
    """A new group `name` + TEMPORARY_SUFFIX holding `weights` (V,) (a stale one removed first)."""
    groups = obj.vertex_groups
    stale = groups.get(name + TEMPORARY_SUFFIX)
    if stale is not None:
        groups.remove(stale)
    group = groups.new(name=name + TEMPORARY_SUFFIX)
    try:
        # One add per vertex: the weights are continuous.
        for index, weight in enumerate(weights.tolist()):
            group.add([index], weight, 'REPLACE')
    except BaseException:
        groups.remove(group)
        raise
    return group


def _swap_in(obj, name: str, group) -> None:
    """The filled temporary group takes the place (and name) of the add-on's own group `name`."""
    old = obj.vertex_groups.get(name)
    if old is not None:
        obj.vertex_groups.remove(old)
    group.name = name


def apply_shell_fit(obj, job) -> None:
    destination = shell_path(obj)
    fitted = job.job_dir / shell_maps.SHELL_FILE
    strain, bending = shell_maps.read_fine_maps(fitted)
    write_map_groups(obj, strain, bending)
    job_files.install_file(fitted, destination)
    obj.face_physics_shell.shell_path = storage.relative(destination)


class FACE_PHYSICS_OT_shell_fit(SolverJobOperator, bpy.types.Operator):
    """Fit the interactive shell's strain and bending stiffness to the shape keys and write them
    into the vertex groups FP_shell_strain and FP_shell_bending"""
    bl_idname = "face_physics.shell_fit"
    bl_label = "Fit Stiffness"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    @classmethod
    def poll(cls, context):
        return solver_poll(cls, context)

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        return start_shell_fit_job(self, context, obj)

    def apply(self, context, job):
        apply_shell_fit(bpy.data.objects[self._object_name], job)
        self.report({'INFO'}, f"Face Physics: {job.result.get('message', 'shell fitted')}")


# --------------------------------------------------------------------------- repainted maps

def repainted_stiffness_arrays(obj, path):
    """(STIFFNESS.npz arrays from the object's FP_shell_* groups, or None when they are the fitted
    maps or missing; a sentence saying which stiffness the shell uses) — shell_maps.repainted_stiffness."""
    settings = obj.face_physics_shell
    names = (shell_maps.STRAIN_GROUP, shell_maps.BENDING_GROUP)
    weights = {name: scene_export.vertex_group_weights(obj, name) for name in names}
    if all(value is None for value in weights.values()):
        return None, "the fitted stiffness (no FP_shell_* groups)"
    ranges = {shell_maps.STRAIN_GROUP: tuple(settings.strain_range),
              shell_maps.BENDING_GROUP: tuple(settings.bending_range)}
    return shell_maps.repainted_stiffness(weights, ranges, shell_maps.read_fine_maps(path))


def write_live_stiffness(obj, path):
    """For Poke: the repainted maps as STIFFNESS.npz in a fresh temporary folder (the caller
    removes it once the session has read it), or None; and the sentence of
    `repainted_stiffness_arrays`."""
    arrays, said = repainted_stiffness_arrays(obj, path)
    if arrays is None:
        return None, said
    folder = job_files.new_job_folder()
    job_files._write_npz(folder / shell_maps.STIFFNESS_FILE, arrays)
    return folder / shell_maps.STIFFNESS_FILE, said


# --------------------------------------------------------------------------- Bake Shell

def start_shell_bake_steps(operator, context, obj):
    """A new take with a shell-animate job of the frame range (the shape keys' values and the
    collider list's props, sampled as a bake samples them), started; None when a finding stops
    it (the take is removed again). Applied, followed and resumed as any bake's take."""
    path = shell_file(obj)
    if path is None:
        raise ValueError("Fit Stiffness first (Interactive panel): the shell bake plays its SHELL.npz")
    # The scale now, not the model's: the shell needs no volumetric model built.
    metres, scale_findings = scene_export.metres_per_unit(context, obj)
    if report_findings(operator, scale_findings):
        return None
    first, last = scene_export.frame_range(context, obj.face_physics)
    plan = workflow.BakePlan(obj.name, first, last, obj.face_physics.bake_target, metres)
    template = Take(name="", object=obj.name, first_frame=plan.first_frame, last_frame=plan.last_frame,
                    target=plan.target, metres_per_unit=plan.metres_per_unit)
    take = take_folders.new_take(storage.takes_folder(obj), template)
    try:
        yield 0.0, f"new take {take.name}"
        yield from bake.remove_previous_bake_steps(obj)
        obj.face_physics.shown_take = ""
        samples = yield from scene_export.sample_frames_steps(context, obj, plan.first_frame, plan.last_frame)
        weights, findings = scene_export.weights_arrays(obj, samples, shell_maps.read_shell_shape_names(path), metres)
        colliders, collider_findings = scene_export.collider_arrays(obj, samples, metres)
        if report_findings(operator, findings + collider_findings):
            take_folders.delete_take(take)
            return None
        stiffness, said = repainted_stiffness_arrays(obj, path)
        yield 0.0, f"shell bake with {said}"
        shell_maps.write_shell_animate_job(take.folder, path, weights, colliders,
                                           {"cache_start_frame": float(plan.first_frame),
                                            "cache_metres_per_unit": float(metres)}, stiffness=stiffness)
    except BaseException:
        take_folders.delete_take(take)
        raise
    take.settings = job_files.read_job_settings(take.folder)
    take.save()
    return workflow._start_take_job(plan, take, f"shell bake {plan.last_frame - plan.first_frame + 1} frames")


class FACE_PHYSICS_OT_shell_bake(_BakeJobOperator, bpy.types.Operator):
    """Play the shape-key animation of the frame range through the interactive shell into a new
    take (shown like any bake; the colliders of the Collisions panel push it). The stiffness is
    the FP_shell_strain / FP_shell_bending groups as painted now; a missing group is the fitted map"""
    bl_idname = "face_physics.shell_bake"
    bl_label = "Bake Shell"
    bl_options = {'UNDO'}

    @classmethod
    def poll(cls, context):
        if not solver_poll(cls, context):
            return False
        obj = skin_object(context)
        return first_refusal(cls, [(bool(obj.face_physics_shell.shell_path),
                                    "Fit Stiffness first: the bake plays the fitted shell")])

    def start(self, context):
        return start_shell_bake_steps(self, context, skin_object(context))


# --------------------------------------------------------------------------- Stiffness Map from Shell

def write_tissue_map(obj) -> tuple:
    """The shell's strain map (the FP_shell_strain group as painted now, else the fitted map) as
    the volumetric stiffness map: the group FP_stiffness_from_shell (replaced whole, never one of
    the user's), chosen as the model's stiffness map with the range its weights mean. (low, high)."""
    path = shell_file(obj)
    if path is None:
        raise ValueError("Fit Stiffness first (Interactive panel): the map comes from the fitted shell")
    arrays, _ = repainted_stiffness_arrays(obj, path)
    strain = arrays["strain"] if arrays is not None else shell_maps.read_fine_maps(path)[0]
    if len(strain) != len(obj.data.vertices):
        raise ValueError(f"the shell's maps have {len(strain)} vertices but '{obj.name}' has "
                         f"{len(obj.data.vertices)}; fit the stiffness again")
    weights, value_range = shell_maps.tissue_stiffness_weights(strain, solver_numbers.PAINTED_MULTIPLIER_LIMITS)
    _swap_in(obj, shell_maps.TISSUE_GROUP, _filled_temporary_group(obj, shell_maps.TISSUE_GROUP, weights))
    settings = obj.face_physics
    settings.stiffness_group = shell_maps.TISSUE_GROUP
    settings.stiffness_range = value_range
    return value_range


class FACE_PHYSICS_OT_shell_tissue_map(bpy.types.Operator):
    """Make the volumetric model's stiffness map from the shell's strain stiffness (as painted in
    FP_shell_strain, else as fitted): a new vertex group FP_stiffness_from_shell, chosen as the
    stiffness map, with the Stiffness × range set so tissue is as much stiffer or softer than the
    face's typical tissue as the shell's skin is"""
    bl_idname = "face_physics.shell_tissue_map"
    bl_label = "Stiffness Map from Shell"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or not obj.face_physics_shell.shell_path:
            cls.poll_message_set("Fit Stiffness first: the map comes from the fitted shell")
            return False
        return True

    def execute(self, context):
        obj = skin_object(context)
        try:
            low, high = write_tissue_map(obj)
        except (OSError, ValueError) as error:
            self.report({'ERROR'}, f"Face Physics: {error}")
            return {'CANCELLED'}
        self.report({'INFO'}, f"Face Physics: stiffness map {shell_maps.TISSUE_GROUP}, multiplier {low:.3g} – "
                              f"{high:.3g} (the shell's strain stiffness relative to its geometric mean)")
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_OT_shell_fit, FACE_PHYSICS_OT_shell_bake, FACE_PHYSICS_OT_shell_tissue_map)
