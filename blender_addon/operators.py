"""Operators of the model, fit, maps and solver set-up: each packs settings, hands work to the
solver bridge (job_operator.SolverJobOperator for the long ones) and reports. The bake and its
takes have theirs in bake_operators.py.
"""

import bpy
from bpy.props import EnumProperty, StringProperty

from . import (fat_preview, job_files, muscle_overlay, preflight, preferences, scene_export, solver_environment,
               solver_numbers, workflow)
from .job_operator import SolverJobOperator, built_model_poll, first_refusal, solver_poll
from .job_runner import Job, current_job
from .workflow import skin_object



class FACE_PHYSICS_OT_build(SolverJobOperator, bpy.types.Operator):
    """Build the volumetric model of the active skin object (runs the solver in the background)"""
    bl_idname = "face_physics.build"
    bl_label = "Build Model"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    @classmethod
    def poll(cls, context):
        return solver_poll(cls, context)

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        job, self._built_from = workflow.start_build_job(self, context, obj)
        return job

    def apply(self, context, job):
        obj = bpy.data.objects[self._object_name]
        workflow.apply_build(self, obj, job, self._built_from)
        if muscle_overlay.find_overlay(obj) is not None:
            muscle_overlay.create_overlay(obj)
        self.report({'INFO'}, f"Face Physics: {job.result.get('message', 'model built')}")


class FACE_PHYSICS_OT_fat_preview(SolverJobOperator, bpy.types.Operator):
    """Simulate the neutral face once with the fat map, Slim ↔ Fat, stiffness reduction and
    diffusion, and show it beside the skin (replaces the previous preview; the skin is not changed)"""
    bl_idname = "face_physics.fat_preview"
    bl_label = "Preview Fat"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    @classmethod
    def poll(cls, context):
        if not built_model_poll(cls, context):
            return False
        obj = skin_object(context)
        group = obj.face_physics.fat_group
        if not group or obj.vertex_groups.get(group) is None:
            cls.poll_message_set("Choose or paint a fat map first (Fat map, +)")
            return False
        return True

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        return workflow.start_fat_preview_job(self, context, obj)

    def apply(self, context, job):
        obj = bpy.data.objects[self._object_name]
        positions = job_files.read_result_positions(job.job_dir)[0]
        preview = fat_preview.show_preview(obj, positions / obj.face_physics.metres_per_unit)
        self.report({'INFO'}, f"Face Physics: fat preview in '{preview.name}'")


class FACE_PHYSICS_OT_fat_preview_remove(bpy.types.Operator):
    """Delete the fat preview object (the skin is not changed)"""
    bl_idname = "face_physics.fat_preview_remove"
    bl_label = "Remove Fat Preview"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or fat_preview.find_preview(obj) is None:
            cls.poll_message_set("No fat preview to remove")
            return False
        return True

    def execute(self, context):
        fat_preview.remove_preview(skin_object(context))
        return {'FINISHED'}


class FACE_PHYSICS_OT_cancel_job(bpy.types.Operator):
    """Stop the running Face Physics job; the scene stays as it was"""
    bl_idname = "face_physics.cancel_job"
    bl_label = "Cancel"

    @classmethod
    def poll(cls, context):
        return current_job() is not None

    def execute(self, context):
        current_job().cancel()
        return {'FINISHED'}


class FACE_PHYSICS_OT_install_solver(SolverJobOperator, bpy.types.Operator):
    """Create (or repair) a Python environment for the solver in the add-on's user folder and
    install its packages from the package registry (several minutes; where SuiteSparse and IPOPT
    are missing, the portable wheels-only set)"""
    bl_idname = "face_physics.install_solver"
    bl_label = "Install Solver"

    @classmethod
    def poll(cls, context):
        return first_refusal(cls, (
            (current_job() is None, "A Face Physics job is running"),
            (not preferences.is_extension(), "The extension brings the solver's packages: reinstall its zip"),
            (getattr(bpy.app, "online_access", True),
             "Blender works offline: allow Online Access (Preferences › System) to download the solver's packages")))

    def start(self, context):
        venv = preferences.solver_venv_dir()
        return Job("install solver", solver_environment.install_command(venv))

    def apply(self, context, job):
        self.report({'INFO'}, f"Face Physics: {job.result.get('message', 'solver installed')}")


class FACE_PHYSICS_OT_check_solver(SolverJobOperator, bpy.types.Operator):
    """Ask the solver Python what it can run: its packages, the sparse Cholesky back end
    (scikit-sparse or the portable cholespy) and IPOPT; the answer shows in the preferences"""
    bl_idname = "face_physics.check_solver"
    bl_label = "Check Solver"

    @classmethod
    def poll(cls, context):
        return first_refusal(cls, (
            (current_job() is None, "A Face Physics job is running"),
            (preferences.solver_python() is not None, "No solver Python: set one in the preferences")))

    def start(self, context):
        return Job("check solver", solver_environment.check_command(preferences.solver_python()))

    def _finish(self, context, job):
        preferences.LAST_CHECK.clear()
        preferences.LAST_CHECK.update(job.result or {"message": f"check failed: {job.error_message()}"})
        return super()._finish(context, job)

    def apply(self, context, job):
        self.report({'INFO'}, f"Face Physics: {job.result.get('message', 'solver checked')}")


class FACE_PHYSICS_OT_fit(SolverJobOperator, bpy.types.Operator):
    """Fit muscle activations and the jaw to the shape keys (inverse physics), in the background.
    A bake then plays the shape keys' values through the fit"""
    bl_idname = "face_physics.fit"
    bl_label = "Fit Shape Keys"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    scope: EnumProperty(name="Shape keys", items=(
        ('ALL', "All", "Every shape key of the skin; replaces the current fit"),
        ('SELECTED', "Selected", "The shape keys ticked in the Fit list; the current fit keeps the others")))
    shapes: StringProperty(name="Shapes", options={'SKIP_SAVE'},
                           description="Comma-separated shape keys as the solver spells them (mouthSmile_L); "
                                       "overrides the scope, for scripts")

    @classmethod
    def poll(cls, context):
        if not built_model_poll(cls, context):
            return False
        if skin_object(context).data.shape_keys is None:
            cls.poll_message_set("The skin has no shape keys to fit")
            return False
        return True

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        return workflow.start_fit_job(self, context, obj, self.scope, self.shapes)

    def apply(self, context, job):
        workflow.apply_fit(bpy.data.objects[self._object_name], job)
        self.report({'INFO'}, f"Face Physics: {job.result.get('message', 'shape keys fitted')}")


class FACE_PHYSICS_OT_fit_list(bpy.types.Operator):
    """Update the Fit list from the skin's shape keys, or tick all or none of them"""
    bl_idname = "face_physics.fit_list"
    bl_label = "Fit List"
    bl_options = {'REGISTER', 'UNDO'}

    action: EnumProperty(items=(('UPDATE', "Update List", "List the skin's shape keys as they are now"),
                                ('SELECT_ALL', "Tick All", "Tick every shape key"),
                                ('SELECT_NONE', "Tick None", "Untick every shape key")))

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        return obj is not None and obj.data.shape_keys is not None

    def execute(self, context):
        obj = skin_object(context)
        if self.action == 'UPDATE':
            workflow.refresh_fit_list(obj)
        else:
            for item in obj.face_physics.fit_shapes:
                item.selected = self.action == 'SELECT_ALL'
        return {'FINISHED'}


class FACE_PHYSICS_OT_palsy_preset(bpy.types.Operator):
    """Bell's palsy: every muscle of one side paralysed, the other side free"""
    bl_idname = "face_physics.palsy_preset"
    bl_label = "Bell's Palsy"
    bl_options = {'REGISTER', 'UNDO'}

    side: EnumProperty(items=(('LEFT', "Left", "The subject's left"), ('RIGHT', "Right", "The subject's right"),
                              ('NONE', "None", "No muscle paralysed")))

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or not len(obj.face_physics.muscles):
            cls.poll_message_set("Build the model first: the muscles come from it")
            return False
        return True

    def execute(self, context):
        suffix = solver_numbers.PALSY_SUFFIXES.get(self.side)
        for muscle in skin_object(context).face_physics.muscles:
            muscle.paralysed = suffix is not None and muscle.name.endswith(suffix)
        return {'FINISHED'}


MAP_FIELDS = (('fat_group', "Fat", "FacePhysics_fat"), ('paralysis_group', "Paralysis", "FacePhysics_paralysis"),
              ('stiffness_group', "Stiffness", "FacePhysics_stiffness"),
              ('density_group', "Density", "FacePhysics_density"))


class FACE_PHYSICS_OT_paint_map(bpy.types.Operator):
    """Paint a map: create its vertex group if needed, make it active and enter Weight Paint"""
    bl_idname = "face_physics.paint_map"
    bl_label = "Paint Map"
    bl_options = {'REGISTER', 'UNDO'}

    field: EnumProperty(items=[(field, label, "") for field, label, _ in MAP_FIELDS])
    create: bpy.props.BoolProperty(name="Create", description="Create a new vertex group for the map")

    @classmethod
    def poll(cls, context):
        return skin_object(context) is not None

    def execute(self, context):
        obj = skin_object(context)
        settings = obj.face_physics
        group = obj.vertex_groups.get(getattr(settings, self.field))
        if group is None or self.create:
            default_name = dict((field, name) for field, _, name in MAP_FIELDS)[self.field]
            group = obj.vertex_groups.new(name=default_name)
            setattr(settings, self.field, group.name)
        obj.vertex_groups.active_index = group.index
        if context.mode != 'PAINT_WEIGHT' and context.view_layer.objects.active == obj:
            bpy.ops.object.mode_set(mode='WEIGHT_PAINT')
        return {'FINISHED'}


class FACE_PHYSICS_OT_check(bpy.types.Operator):
    """Check the skin before building or baking: degenerate faces, NaNs, units, shape-key names,
    topology since the build, modifiers before the cache"""
    bl_idname = "face_physics.check"
    bl_label = "Check Mesh"

    @classmethod
    def poll(cls, context):
        return skin_object(context) is not None

    def execute(self, context):
        obj = skin_object(context)
        findings = scene_export.export_rig(context, obj)[1]
        if obj.face_physics.model_path:
            findings += workflow.bake_preflight(context, obj)
        workflow.report_findings(self, findings)
        if not findings:
            self.report({'INFO'}, "Face Physics: no problems found")
        return {'FINISHED'}


class FACE_PHYSICS_OT_map_shape_key_names(bpy.types.Operator):
    """List the shape keys whose names are not ARKit names, to map them"""
    bl_idname = "face_physics.map_shape_key_names"
    bl_label = "List Non-ARKit Names"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        return obj is not None and obj.data.shape_keys is not None

    def execute(self, context):
        obj = skin_object(context)
        settings = obj.face_physics
        mapping = scene_export.name_mapping(settings)
        listed = {item.name for item in settings.name_mappings}
        names = scene_export.shape_keys(obj, mapping)[0]
        for name in names:
            if name not in listed and preflight.solver_shape_key_name(name, {}) not in preflight.SOLVER_SHAPE_KEYS:
                settings.name_mappings.add().name = name
        return {'FINISHED'}


class FACE_PHYSICS_OT_collider_add(bpy.types.Operator):
    """Add a collider slot (a closed mesh the skin may not enter), or remove the active one"""
    bl_idname = "face_physics.collider_add"
    bl_label = "Add Collider"
    bl_options = {'REGISTER', 'UNDO'}

    remove: bpy.props.BoolProperty()

    @classmethod
    def poll(cls, context):
        return skin_object(context) is not None

    def execute(self, context):
        settings = skin_object(context).face_physics
        if self.remove:
            if len(settings.colliders):
                settings.colliders.remove(settings.collider_index)
                settings.collider_index = max(0, settings.collider_index - 1)
        else:
            settings.colliders.add()
            settings.collider_index = len(settings.colliders) - 1
        return {'FINISHED'}


class FACE_PHYSICS_OT_muscle_overlay(bpy.types.Operator):
    """Show or hide the model's muscles as a coloured mesh object parented to the skin"""
    bl_idname = "face_physics.muscle_overlay"
    bl_label = "Muscle Overlay"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or not obj.face_physics.model_path:
            cls.poll_message_set("Build the model first")
            return False
        return True

    def execute(self, context):
        obj = skin_object(context)
        if muscle_overlay.find_overlay(obj) is not None:
            muscle_overlay.remove_overlay(obj)
        else:
            muscle_overlay.create_overlay(obj)
        return {'FINISHED'}


class FACE_PHYSICS_OT_import_rig(bpy.types.Operator):
    """Import a face-rig .npz (e.g. `python -m solver demo-rig -o head.npz`) as a mesh with shape keys"""
    bl_idname = "face_physics.import_rig"
    bl_label = "Import Face Rig (.npz)"
    bl_options = {'REGISTER', 'UNDO'}

    filepath: StringProperty(subtype='FILE_PATH')
    filter_glob: StringProperty(default="*.npz", options={'HIDDEN'})
    bones: bpy.props.BoolProperty(name="Teeth and Bones", default=True,
                                  description="Also import the rig's teeth, skull and jaw (when it has them) as "
                                              "objects parented to the skin, and set them in the Model panel")

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {'RUNNING_MODAL'}

    def execute(self, context):
        from .rig_import import import_rig, import_rig_bones
        try:
            obj = import_rig(context, bpy.path.abspath(self.filepath))
            if self.bones:
                import_rig_bones(context, bpy.path.abspath(self.filepath), obj)
        except (OSError, ValueError, KeyError) as error:
            self.report({'ERROR'}, f"could not import {self.filepath}: {error}")
            return {'CANCELLED'}
        self.report({'INFO'}, f"imported {obj.name}")
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_OT_build, FACE_PHYSICS_OT_fat_preview, FACE_PHYSICS_OT_fat_preview_remove,
           FACE_PHYSICS_OT_cancel_job, FACE_PHYSICS_OT_install_solver, FACE_PHYSICS_OT_check_solver,
           FACE_PHYSICS_OT_fit, FACE_PHYSICS_OT_fit_list, FACE_PHYSICS_OT_palsy_preset,
           FACE_PHYSICS_OT_paint_map, FACE_PHYSICS_OT_check, FACE_PHYSICS_OT_map_shape_key_names,
           FACE_PHYSICS_OT_collider_add, FACE_PHYSICS_OT_muscle_overlay, FACE_PHYSICS_OT_import_rig)
