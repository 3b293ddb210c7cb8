"""Build Correctives / Add Corrective Keys / Remove Corrective Keys (corrective_jobs.py and
corrective_keys.py do the work; docs/correctives.md)."""

import bpy
from bpy.props import EnumProperty, FloatProperty, StringProperty

from . import corrective_jobs, corrective_keys
from .job_operator import SolverJobOperator, built_model_poll, first_refusal
from .workflow import fit_file, skin_object


def _has_shape_keys(cls, context) -> bool:
    obj = skin_object(context)
    if obj is None or obj.data.shape_keys is None:
        cls.poll_message_set("Select the rig's skin: a mesh with shape keys")
        return False
    return True


class FACE_PHYSICS_OT_build_correctives(SolverJobOperator, bpy.types.Operator):
    """Simulate pairs of your shape keys through the fitted model (with the Collisions panel's
    contacts) and add corrective shape keys fitted to them, in the background. Samples already
    solved by an earlier build are reused"""
    bl_idname = "face_physics.build_correctives"
    bl_label = "Build Correctives"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    scope: EnumProperty(name="Shape keys", items=(
        ('ALL', "All fitted", "Every fitted shape key (53 ARKit keys take hours on two cores)"),
        ('SELECTED', "Selected", "The shape keys ticked in the Fit list")), default='SELECTED')
    keys: StringProperty(name="Keys", options={'SKIP_SAVE'},
                         description="Comma-separated shape keys as the solver spells them (jawOpen); "
                                     "overrides the scope, for scripts")
    pairs: StringProperty(name="Pairs", options={'SKIP_SAVE'},
                          description="Only these pairs of keys are probed for a corrective, as "
                                      "jawOpen:mouthSmile_L, mouthFunnel:mouthPucker (empty: every pair of the keys)")
    threshold_mm: FloatProperty(name="Pair threshold (mm)", default=corrective_jobs.DEFAULT_THRESHOLD_MM,
                                min=0.0, max=100.0,
                                description="A pair of keys gets a corrective when, both at 1, its simulated skin "
                                            "departs from the sum of the two single keys by more than this")

    @classmethod
    def poll(cls, context):
        return built_model_poll(cls, context) and first_refusal(
            cls, [(fit_file(skin_object(context)), "Fit the shape keys first (Fit panel)")])

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        return corrective_jobs.start_correctives_job(self, context, obj, self.scope, self.keys, self.threshold_mm,
                                                     pairs=corrective_jobs.pairs_from_text(self.pairs))

    def apply(self, context, job):
        names = corrective_jobs.apply_correctives(context, bpy.data.objects[self._object_name], job)
        self.report({'INFO'}, f"Face Physics: {len(names)} corrective shape keys built and added")

    def ended(self, context, job):
        corrective_jobs.keep_samples(bpy.data.objects[self._object_name], job)


class FACE_PHYSICS_OT_add_corrective_keys(bpy.types.Operator):
    """Add the corrective shape keys of a CORR.npz (corr_<a>, corr_<a>__<b>) with drivers on your
    shape keys; earlier corrective keys are replaced, your own keys are never changed"""
    bl_idname = "face_physics.add_corrective_keys"
    bl_label = "Add Corrective Keys"
    bl_options = {'REGISTER', 'UNDO'}

    filepath: StringProperty(subtype='FILE_PATH')
    filter_glob: StringProperty(default="*.npz", options={'HIDDEN'})

    @classmethod
    def poll(cls, context):
        return _has_shape_keys(cls, context)

    def invoke(self, context, event):
        context.window_manager.fileselect_add(self)
        return {'RUNNING_MODAL'}

    def execute(self, context):
        obj = skin_object(context)
        try:
            names, _ = corrective_keys.add_from_file(context, obj, bpy.path.abspath(self.filepath))
        except (corrective_keys.CorrectiveKeysError, OSError) as error:
            self.report({'ERROR'}, str(error))
            return {'CANCELLED'}
        self.report({'INFO'}, f"Face Physics: {len(names)} corrective shape keys added to '{obj.name}'")
        return {'FINISHED'}


class FACE_PHYSICS_OT_remove_corrective_keys(bpy.types.Operator):
    """Remove the corrective shape keys Face Physics added (and their drivers); your keys stay"""
    bl_idname = "face_physics.remove_corrective_keys"
    bl_label = "Remove Corrective Keys"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        if not _has_shape_keys(cls, context):
            return False
        if not corrective_keys.our_key_names(skin_object(context)):
            cls.poll_message_set("This object has no corrective keys")
            return False
        return True

    def execute(self, context):
        obj = skin_object(context)
        names = corrective_keys.remove_corrective_keys(obj)
        self.report({'INFO'}, f"Face Physics: {len(names)} corrective shape keys removed from '{obj.name}'")
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_OT_build_correctives, FACE_PHYSICS_OT_add_corrective_keys,
           FACE_PHYSICS_OT_remove_corrective_keys)
