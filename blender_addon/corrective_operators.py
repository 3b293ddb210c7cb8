"""Add Corrective Keys / Remove Corrective Keys (corrective_keys.py does the work; docs/correctives.md)."""

import bpy
from bpy.props import StringProperty

from . import corrective_keys
from .workflow import skin_object


def _has_shape_keys(cls, context) -> bool:
    obj = skin_object(context)
    if obj is None or obj.data.shape_keys is None:
        cls.poll_message_set("Select the rig's skin: a mesh with shape keys")
        return False
    return True


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


CLASSES = (FACE_PHYSICS_OT_add_corrective_keys, FACE_PHYSICS_OT_remove_corrective_keys)
