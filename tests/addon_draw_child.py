"""Child process of tests/test_addon_blender.py: draws every Face Physics panel into a real
UILayout and writes what happened to a JSON report.

Headless Blender never draws regions, but `popup_menu` hands its draw function a real
UILayout at once; with the 3D View's sidebar region in the context even template_list works.
Closing the popup needs a GPU window, so the process leaves from inside the draw function.
"""
import json
import os
import sys
import traceback

import bpy
import addon_utils  # noqa: E402  (only importable once bpy is)

blend, object_name, solver_python, report = sys.argv[1:5]
sys.path.insert(0, os.getcwd())
bpy.ops.wm.open_mainfile(filepath=blend)
addon_utils.enable("blender_addon", default_set=True, handle_error=None)
bpy.context.preferences.addons["blender_addon"].preferences.solver_python = solver_python
bpy.context.view_layer.objects.active = bpy.data.objects[object_name] if object_name else None
from blender_addon import panels
results = []

def draw_all(menu, context):
    for cls in panels.CLASSES:
        if not issubclass(cls, bpy.types.Panel):
            continue
        entry = {"panel": cls.__name__, "polled": bool(cls.poll(context)) if hasattr(cls, "poll") else True}
        if entry["polled"]:
            host = type("Host", (), {"layout": menu.layout})()
            try:
                cls.draw(host, context)
                entry["drawn"] = True
            except Exception:
                entry["error"] = traceback.format_exc()
        results.append(entry)
    from blender_addon import preferences
    with open(report, "w") as stream:
        json.dump({"panels": results, "solver_missing": preferences.solver_python() is None}, stream)
    sys.stdout.flush(); sys.stderr.flush()
    # Closing the popup needs a GPU window, which a headless Blender has not: leave now.
    os._exit(0)

window = bpy.context.window
area = next(area for area in window.screen.areas if area.type == 'VIEW_3D')
region = next(region for region in area.regions if region.type == 'UI')
with bpy.context.temp_override(window=window, area=area, region=region):
    bpy.context.window_manager.popup_menu(draw_all, title="Face Physics")
