"""Presets: tissue settings through Blender's own preset system, and shape-key naming presets.

Tissue presets are Python files run by `script.execute_preset`, listed from every folder
`bpy.utils.preset_paths(TISSUE_SUBDIR)` returns: the user's `scripts/presets/face_physics/tissue/`
and the add-on's bundled `presets/face_physics/tissue/`, which `register()` adds with
`bpy.utils.register_preset_path` (an installed extension cannot write into Blender's presets
folder, and Blender only scans add-on folders for presets when told). Saving writes to the
user's folder (`AddPresetBase` asks `bpy.utils.user_resource('SCRIPTS')`); a bundled preset is
never removed.
"""
from __future__ import annotations

import os

import bpy
from bl_operators.presets import AddPresetBase

from . import naming_presets, scene_export, solver_numbers
from .workflow import skin_object

ADDON_DIR = os.path.dirname(os.path.abspath(__file__))
TISSUE_SUBDIR = os.path.join("face_physics", "tissue")
BUNDLED_TISSUE_DIR = os.path.join(ADDON_DIR, "presets", TISSUE_SUBDIR)
# What a tissue preset holds: the Fat and Stiffness & Mass panels' settings, not the maps'
# vertex groups (those belong to one mesh).
TISSUE_PROPERTIES = ("fat_scale", "fat_softening", "stiffness_range", "density_range", "diffusion_spread_mm")


def is_bundled(path: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), ADDON_DIR]) == ADDON_DIR


class FACE_PHYSICS_MT_tissue_presets(bpy.types.Menu):
    bl_label = "Tissue Presets"
    preset_subdir = TISSUE_SUBDIR
    preset_operator = "script.execute_preset"
    preset_add_operator = "face_physics.tissue_preset_add"
    preset_extensions = {".py"}
    draw = bpy.types.Menu.draw_preset

    @staticmethod
    def reset_cb(context, filepath):
        """Before any preset runs: every tissue setting back to its default, so a preset that
        leaves one out (saved before that setting existed) does not inherit the last one's."""
        obj = skin_object(context)
        if obj is not None:
            reset_tissue(obj.face_physics)

    @staticmethod
    def solver_preset(name: str) -> dict:
        """A preset's numbers as the solver has them (solver/physics/settings.json "presets"):
        the bundled Zombie preset reads its ranges here, so they have one source."""
        return solver_numbers.NUMBERS["presets"][name]


def reset_tissue(settings) -> None:
    for name in TISSUE_PROPERTIES:
        settings.property_unset(name)


class FACE_PHYSICS_OT_tissue_preset_add(AddPresetBase, bpy.types.Operator):
    """Save the tissue settings (fat, stiffness and density ranges, diffusion spread) as a preset, or
    remove a saved one"""
    bl_idname = "face_physics.tissue_preset_add"
    bl_label = "Add Tissue Preset"
    preset_menu = "FACE_PHYSICS_MT_tissue_presets"
    preset_subdir = TISSUE_SUBDIR
    preset_defines = ["settings = bpy.context.active_object.face_physics"]
    preset_values = [f"settings.{name}" for name in TISSUE_PROPERTIES]

    @classmethod
    def poll(cls, context):
        return skin_object(context) is not None

    def execute(self, context):
        if self.remove_active or self.remove_name:
            name = FACE_PHYSICS_MT_tissue_presets.bl_label if self.remove_active else self.name
            path = bpy.utils.preset_find(name, TISSUE_SUBDIR) or \
                bpy.utils.preset_find(name, TISSUE_SUBDIR, display_name=True)
            if path and is_bundled(path):
                self.report({'WARNING'}, f"“{name}” comes with Face Physics and cannot be removed")
                return {'CANCELLED'}
        return super().execute(context)


def draw_tissue_presets(layout) -> None:
    """The preset menu with its add and remove buttons, as Blender's own preset rows are drawn."""
    row = layout.row(align=True)
    row.menu("FACE_PHYSICS_MT_tissue_presets", text=FACE_PHYSICS_MT_tissue_presets.bl_label)
    row.operator("face_physics.tissue_preset_add", text="", icon='ADD')
    row.operator("face_physics.tissue_preset_add", text="", icon='REMOVE').remove_active = True


class FACE_PHYSICS_OT_apply_naming_preset(bpy.types.Operator):
    """Fill the name-mapping list from another rig's shape-key naming (Faceit, MetaHuman-style, ICT
    FaceKit). The shape keys themselves are never renamed"""
    bl_idname = "face_physics.apply_naming_preset"
    bl_label = "Apply Naming Preset"
    bl_options = {'REGISTER', 'UNDO'}

    convention: bpy.props.EnumProperty(
        name="Naming", items=[(identifier, label, description)
                              for identifier, label, description, _ in naming_presets.CONVENTIONS])
    replace: bpy.props.BoolProperty(
        name="Replace my rows", description="Also overwrite mapping rows whose ARKit name you set yourself")

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or obj.data.shape_keys is None:
            cls.poll_message_set("Select a mesh with shape keys")
            return False
        return True

    def execute(self, context):
        obj = skin_object(context)
        settings = obj.face_physics
        rows = {item.name: item for item in settings.name_mappings}
        kept = {} if self.replace else scene_export.name_mapping(settings)
        names = [block.name for block in scene_export.user_key_blocks(obj)]
        match = naming_presets.match_shape_keys(names, self.convention, kept)
        for name, target in match.mapped.items():
            row = rows.get(name)
            if row is None:
                row = settings.name_mappings.add()
                row.name = name
            row.arkit_name = target
        label = next(label for identifier, label, _, _ in naming_presets.CONVENTIONS if identifier == self.convention)
        self.report({'INFO'} if match.matched else {'WARNING'}, naming_presets.summary(match, label))
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_MT_tissue_presets, FACE_PHYSICS_OT_tissue_preset_add, FACE_PHYSICS_OT_apply_naming_preset)


def register_preset_folder() -> None:
    # register_preset_path wants the folder holding `presets/`, i.e. the add-on's own.
    bpy.utils.register_preset_path(ADDON_DIR)


def unregister_preset_folder() -> None:
    bpy.utils.unregister_preset_path(ADDON_DIR)
