"""Child process of tests/test_addon_presets.py: the tissue presets in a Blender whose user
folders are a temporary folder (BLENDER_USER_RESOURCES, set by the parent before bpy starts,
the only time Blender reads it). Writes what happened to a JSON report.

Arguments: the report's path, then optionally an extension zip: installed into the user's
extension repository the way Blender installs one (the add-on is then
`bl_ext.user_default.face_physics`); without it, the checkout's `blender_addon` is enabled."""
import importlib
import json
import os
import sys

import bpy
import addon_utils  # noqa: E402  (only importable once bpy is)

report_path = sys.argv[1]
bpy.ops.wm.read_homefile(use_empty=True)
if len(sys.argv) > 2:
    installed = bpy.ops.extensions.package_install_files(filepath=sys.argv[2], repo="user_default",
                                                         enable_on_install=True)
    assert installed == {'FINISHED'}, installed
    package = "bl_ext.user_default.face_physics"
    assert package in bpy.context.preferences.addons, list(bpy.context.preferences.addons.keys())
else:
    sys.path.insert(0, os.getcwd())
    package = "blender_addon"
    addon_utils.enable(package, default_set=True, handle_error=None)
preset_operators = importlib.import_module(package + ".preset_operators")

MENU = "FACE_PHYSICS_MT_tissue_presets"
mesh = bpy.data.meshes.new("skin")
obj = bpy.data.objects.new("skin", mesh)
bpy.context.scene.collection.objects.link(obj)
bpy.context.view_layer.objects.active = obj
settings = obj.face_physics


def tissue():
    return {name: (list(getattr(settings, name)) if name.endswith("_range") else getattr(settings, name))
            for name in preset_operators.TISSUE_PROPERTIES}


def run_preset(path):
    return sorted(bpy.ops.script.execute_preset(filepath=path, menu_idname=MENU))


report = {"preset_paths": bpy.utils.preset_paths(preset_operators.TISSUE_SUBDIR),
          "user_scripts": bpy.utils.user_resource('SCRIPTS'), "bundled_dir": preset_operators.BUNDLED_TISSUE_DIR,
          "bundled_files_before": sorted(os.listdir(preset_operators.BUNDLED_TISSUE_DIR))}
bundled = {name[:-3]: os.path.join(preset_operators.BUNDLED_TISSUE_DIR, name)
           for name in report["bundled_files_before"]}
report["applied"] = {}
for name, path in bundled.items():
    report["applied"][name] = {"result": run_preset(path), "tissue": tissue(),
                               "label": getattr(bpy.types, MENU).bl_label}

settings.fat_scale, settings.fat_softening, settings.diffusion_spread_mm = 1.3, 0.4, 12.0
settings.stiffness_range, settings.density_range = (2.0, 3.0), (1.5, 2.5)
saved_tissue = tissue()
report["saved"] = {"result": sorted(bpy.ops.face_physics.tissue_preset_add(name="My Face")), "tissue": saved_tissue}
report["same_name_as_bundled"] = sorted(bpy.ops.face_physics.tissue_preset_add(name="Zombie"))
report["preset_paths_after_save"] = bpy.utils.preset_paths(preset_operators.TISSUE_SUBDIR)
saved_path = bpy.utils.preset_find("My_Face", preset_operators.TISSUE_SUBDIR)
report["saved_path"] = saved_path
run_preset(bundled["Default"])
report["default_after_save"] = tissue()
report["saved_applied"] = {"result": run_preset(saved_path), "tissue": tissue()}
report["remove_bundled"] = sorted(bpy.ops.face_physics.tissue_preset_add(name="Zombie", remove_name=True))
report["remove_saved"] = sorted(bpy.ops.face_physics.tissue_preset_add(name="My_Face", remove_name=True))
report["saved_exists_after_remove"] = os.path.exists(saved_path)
report["bundled_files_after"] = sorted(os.listdir(preset_operators.BUNDLED_TISSUE_DIR))


def draw_menu(popup, context):
    """The preset menu drawn into a real layout (popup_menu hands one over at once; closing it
    needs a GPU window, so the process leaves from here, as tests/addon_draw_child.py does)."""
    menu_class = getattr(bpy.types, MENU)
    host = type("Host", (), {"layout": popup.layout, "bl_idname": MENU, "path_menu": bpy.types.Menu.path_menu,
                             **{name: getattr(menu_class, name) for name in dir(menu_class)
                                if name.startswith("preset_")}})()
    try:
        menu_class.draw(host, context)
        report["menu_drawn"] = True
    except Exception as error:     # noqa: BLE001 — reported to the test
        report["menu_drawn"] = repr(error)
    with open(report_path, "w") as stream:
        json.dump(report, stream)
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)


window = bpy.context.window
if window is None:
    report["menu_drawn"] = "no window"
    with open(report_path, "w") as stream:
        json.dump(report, stream)
else:
    bpy.context.window_manager.popup_menu(draw_menu, title="Tissue Presets")
