"""Add-on preferences: the solver Python, and the Install solver button's target folder."""

from pathlib import Path

import bpy
from bpy.props import StringProperty

from . import solver_environment
from .ui_text import wrap

ADDON_PACKAGE = __package__

# The last Check Solver answer (the solver's `check` result), shown in the preferences; not saved.
LAST_CHECK: dict = {}


def addon_preferences():
    """The preferences, or None when the add-on was registered without Blender's add-on
    manager (e.g. `register()` from a script); callers then use the defaults."""
    addon = bpy.context.preferences.addons.get(ADDON_PACKAGE)
    return addon.preferences if addon else None


def user_data_dir() -> Path:
    """The add-on's own writable folder: the extension user folder on 4.2+, else a config folder."""
    if ADDON_PACKAGE.startswith("bl_ext.") and hasattr(bpy.utils, "extension_path_user"):
        return Path(bpy.utils.extension_path_user(ADDON_PACKAGE, create=True))
    return Path(bpy.utils.user_resource('CONFIG', path="face_physics", create=True))


def solver_venv_dir() -> Path:
    return user_data_dir() / solver_environment.VENV_DIR_NAME


def preferred_python() -> str:
    preferences = addon_preferences()
    return bpy.path.abspath(preferences.solver_python) if preferences and preferences.solver_python else ""


def solver_python():
    """Path of the solver Python, or None (the panels then show the install message)."""
    return solver_environment.resolve_solver_python(preferred_python(), solver_venv_dir())


def draw_solver_status(layout, context, always=False) -> bool:
    """The one message shown while no solver Python is available; True when it was drawn."""
    if solver_python() is not None:
        if always:
            layout.label(text=f"Solver Python: {solver_python()}", icon='CHECKMARK')
        return False
    box = layout.box()
    box.alert = True
    column = box.column(align=True)
    message = solver_environment.missing_solver_message(preferred_python())
    for line in wrap(message, 48):
        column.label(text=line)
    box.operator("face_physics.install_solver", icon='IMPORT')
    return True


class FACE_PHYSICS_AP_preferences(bpy.types.AddonPreferences):
    bl_idname = ADDON_PACKAGE

    solver_python: StringProperty(
        name="Solver Python", subtype='FILE_PATH',
        description="An existing Python with the solver's packages (e.g. a checkout's .venv/bin/python). "
                    "Empty = the one Install solver creates in the add-on's user folder")

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "solver_python")
        draw_solver_status(layout, context, always=True)
        row = layout.row()
        row.operator("face_physics.check_solver", icon='VIEWZOOM')
        row.operator("face_physics.install_solver", text="Install / Repair Solver", icon='IMPORT')
        lines = solver_environment.check_summary(LAST_CHECK)
        if lines:
            box = layout.box()
            box.alert = not LAST_CHECK.get("ok", False)
            column = box.column(align=True)
            for line in lines:
                for part in wrap(line, 72):
                    column.label(text=part)


CLASSES = (FACE_PHYSICS_AP_preferences,)
