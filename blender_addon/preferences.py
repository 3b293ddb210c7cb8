"""Add-on preferences: the solver Python (by default Blender's own, with the extension's wheels),
and the Install solver button's target folder for an install without bundled wheels."""

import sys
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


def is_extension() -> bool:
    return ADDON_PACKAGE.startswith("bl_ext.")


def extension_wheel_dirs():
    """The folders Blender unpacks extension wheels into (user, and system on 4.3+) that exist."""
    folders = []
    for kind in ("user_resource", "system_resource"):
        try:
            extensions = getattr(bpy.utils, kind)('EXTENSIONS')
        except (TypeError, ValueError):      # no such resource in this Blender
            continue
        if extensions:
            folder = solver_environment.wheels_site_packages(extensions)
            if folder.is_dir() and folder not in folders:
                folders.append(folder)
    return folders


def solver_python():
    """Path of the solver Python, or None (the panels then show the missing-solver message)."""
    return solver_environment.resolve_solver_python(preferred_python(), solver_venv_dir(), extension_wheel_dirs())


def solver_child_environment():
    """The solver child's environment. The extension's wheels go on its path only when it is
    Blender's own Python: a Python named in the preferences keeps its own packages."""
    own = solver_python() == Path(sys.executable)
    return solver_environment.solver_environment(wheel_dirs=extension_wheel_dirs() if own else ())


def draw_solver_status(layout, context, always=False) -> bool:
    """The one message shown while no solver Python is available; True when it was drawn."""
    if solver_python() is not None:
        if always:
            layout.label(text=f"Solver Python: {solver_python()}", icon='CHECKMARK')
        return False
    box = layout.box()
    box.alert = True
    column = box.column(align=True)
    message = solver_environment.missing_solver_message(preferred_python(), is_extension())
    for line in wrap(message, 48):
        column.label(text=line)
    if not is_extension():               # the extension's packages come in its zip, never downloaded
        box.operator("face_physics.install_solver", icon='IMPORT')
    return True


class FACE_PHYSICS_AP_preferences(bpy.types.AddonPreferences):
    bl_idname = ADDON_PACKAGE

    solver_python: StringProperty(
        name="Solver Python", subtype='FILE_PATH',
        description="An existing Python with the solver's packages (e.g. a Linux checkout's .venv/bin/python, "
                    "with scikit-sparse and IPOPT). Empty = Blender's own Python with the extension's "
                    "bundled packages")

    def draw(self, context):
        layout = self.layout
        layout.prop(self, "solver_python")
        draw_solver_status(layout, context, always=True)
        row = layout.row()
        row.operator("face_physics.check_solver", icon='VIEWZOOM')
        if not is_extension():
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
