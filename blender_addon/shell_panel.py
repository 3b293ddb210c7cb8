"""The Interactive panel (the interactive shell, paper 001) and its settings on the object
(`Object.face_physics_shell`): Fit Stiffness, Bake Shell, Stiffness Map from Shell and Poke
(shell_operators.py, shell_poke.py). Bake and Poke use the FP_shell_* groups as painted now."""
from __future__ import annotations

import bpy
from bpy.props import FloatProperty, FloatVectorProperty, IntProperty, PointerProperty, StringProperty

from . import shell_maps
from .panels import CATEGORY, draw_job_status
from .preferences import draw_solver_status


class FACE_PHYSICS_PG_shell(bpy.types.PropertyGroup):
    shell_path: StringProperty(name="Shell file", subtype='FILE_PATH',
                               description="The fitted SHELL.npz (written by Fit Stiffness, beside the .blend)")
    triangles: IntProperty(name="Triangles", default=shell_maps.DEFAULT_TRIANGLES, min=500, max=20000,
                           description="Triangles of the shell's coarse mesh: more follow the shape keys closer "
                                       "and run slower (4000: about the paper's)")
    # The range of each fitted map (N/m at unit face height): its vertex group's weight w stands
    # for low·(high/low)^w (shell_maps.py), so a repainted group converts back.
    strain_range: FloatVectorProperty(name="Strain stiffness range", size=2, default=(0.0, 0.0),
                                      description="Strain stiffness at weight 0 and 1 of FP_shell_strain (log scale)")
    bending_range: FloatVectorProperty(name="Bending stiffness range", size=2, default=(0.0, 0.0),
                                       description="Bending stiffness at weight 0 and 1 of FP_shell_bending (log "
                                                   "scale)")
    poke_radius: FloatProperty(name="Radius", default=0.012, min=1e-4, soft_max=0.1, subtype='DISTANCE',
                               description="The poking sphere's radius (the skin's units)")
    poke_depth: FloatProperty(name="Depth", default=0.5, min=0.0, max=1.0, subtype='FACTOR',
                              description="How far the sphere sinks into the face, as a fraction of its radius")


class VIEW3D_PT_face_physics_interactive(bpy.types.Panel):
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = CATEGORY
    bl_label = "Interactive"
    bl_options = {'DEFAULT_CLOSED'}

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        return obj is not None and obj.type == 'MESH'

    def draw(self, context):
        layout = self.layout
        if draw_solver_status(layout, context):
            return
        settings = context.active_object.face_physics_shell
        layout.prop(settings, "triangles")
        layout.operator("face_physics.shell_fit", icon='MOD_SMOOTH')
        if settings.shell_path:
            layout.label(text=bpy.path.basename(settings.shell_path), icon='FILE')
            for group, value_range in ((shell_maps.STRAIN_GROUP, settings.strain_range),
                                       (shell_maps.BENDING_GROUP, settings.bending_range)):
                if value_range[1] > 0.0:
                    layout.label(text=f"{group}: {value_range[0]:.3g} – {value_range[1]:.3g} N/m")
        layout.operator("face_physics.shell_bake", icon='RENDER_ANIMATION')
        layout.operator("face_physics.shell_tissue_map", icon='MOD_VERTEX_WEIGHT')
        box = layout.box()
        row = box.row(align=True)
        row.prop(settings, "poke_radius")
        row.prop(settings, "poke_depth")
        box.operator("face_physics.shell_poke", icon='SPHERE')
        box.label(text="Colliders: the Collisions panel's list", icon='INFO')
        draw_job_status(layout, context)


CLASSES = (FACE_PHYSICS_PG_shell, VIEW3D_PT_face_physics_interactive)


def register_properties() -> None:
    bpy.types.Object.face_physics_shell = PointerProperty(type=FACE_PHYSICS_PG_shell)


def unregister_properties() -> None:
    del bpy.types.Object.face_physics_shell
