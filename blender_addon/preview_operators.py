"""Operators of the viewport previews: the stiffness, density and paralysis maps and a shape's
fit error as colour attributes on the skin (viewport_previews.py), and removing them. Each is a
numpy pass over the vertices, run in the operator's call (no solver process)."""

import bpy
from bpy.props import EnumProperty

from . import viewport_previews, workflow
from .job_operator import first_refusal
from .workflow import skin_object

_SHADING_HINT = "Viewport Shading ▸ Color ▸ Attribute shows it in Solid view"


def _shown(operator, show) -> set:
    """Run `show` (it returns the preview's legend) and report the legend, or why not."""
    try:
        legend = show()
    except ValueError as error:
        operator.report({'ERROR'}, f"Face Physics: {error}")
        return {'CANCELLED'}
    operator.report({'INFO'}, f"Face Physics: {legend}. {_SHADING_HINT}")
    return {'FINISHED'}


class FACE_PHYSICS_OT_map_preview(bpy.types.Operator):
    """Colour the skin by a painted map as the solver will use it: stiffness or density as the
    multiplier between the panel's two values, paralysis 0–1 (a colour attribute FP_…; the
    vertices, shape keys and vertex groups are not changed)"""
    bl_idname = "face_physics.map_preview"
    bl_label = "Preview Map"
    bl_options = {'REGISTER', 'UNDO'}

    kind: EnumProperty(items=(('STIFFNESS', "Stiffness", ""), ('DENSITY', "Density", ""),
                              ('PARALYSIS', "Paralysis", "")))

    @classmethod
    def poll(cls, context):
        return first_refusal(cls, ((skin_object(context) is not None, "Select the skin: a mesh object"),))

    def execute(self, context):
        return _shown(self, lambda: viewport_previews.show_map_preview(skin_object(context), self.kind))


class FACE_PHYSICS_OT_fit_error_preview(bpy.types.Operator):
    """Colour the skin by the fit error of the shape key chosen in the Fit list, in mm (a colour
    attribute FP_fit_error; the mesh is not changed otherwise)"""
    bl_idname = "face_physics.fit_error_preview"
    bl_label = "Show Fit Error"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None:
            cls.poll_message_set("Select the skin: a mesh object")
            return False
        settings = obj.face_physics
        if not workflow.fit_file(obj):
            cls.poll_message_set("No fit yet: press Fit All")
            return False
        if not 0 <= settings.fit_index < len(settings.fit_shapes) or \
                not settings.fit_shapes[settings.fit_index].fitted:
            cls.poll_message_set("Choose a fitted shape key in the Fit list")
            return False
        return True

    def execute(self, context):
        obj = skin_object(context)
        shape = obj.face_physics.fit_shapes[obj.face_physics.fit_index].name
        return _shown(self, lambda: viewport_previews.show_fit_error(obj, workflow.fit_file(obj), shape))


class FACE_PHYSICS_OT_clear_previews(bpy.types.Operator):
    """Remove the preview colour attributes (FP_stiffness, FP_density, FP_paralysis, FP_fit_error)
    from the skin"""
    bl_idname = "face_physics.clear_previews"
    bl_label = "Clear Previews"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or not viewport_previews.preview_attribute_names(obj):
            cls.poll_message_set("No preview on the skin")
            return False
        return True

    def execute(self, context):
        count = viewport_previews.clear_previews(skin_object(context))
        self.report({'INFO'}, f"Face Physics: removed {count} preview attribute{'s' * (count != 1)}")
        return {'FINISHED'}


def draw_preview_legend(layout, obj) -> None:
    """The colour scale of the preview on the skin, with its Clear button (panels call this)."""
    legend = obj.face_physics.preview_legend
    if not legend or not viewport_previews.preview_attribute_names(obj):
        return
    row = layout.row(align=True)
    row.label(text=f"{legend}; violet → yellow", icon='COLOR')
    row.operator("face_physics.clear_previews", text="", icon='X')


CLASSES = (FACE_PHYSICS_OT_map_preview, FACE_PHYSICS_OT_fit_error_preview, FACE_PHYSICS_OT_clear_previews)
