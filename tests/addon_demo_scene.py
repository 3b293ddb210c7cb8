"""The demo head imported into an empty Blender scene with the add-on enabled and the solver
child on this Python: what the Interactive panel's add-on tests start from. A user group
"my cheeks" stands for the artist's own groups, which the tests check are never touched."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADDON = "blender_addon"


def demo_head_scene(folder: Path):
    """(object, rig path): the demo rig made by the real `demo-rig` command (timeout 300 s),
    imported, with "my cheeks", saved as folder/scene.blend."""
    import addon_utils
    import bpy
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable(ADDON, default_set=True, handle_error=None)
    bpy.context.preferences.addons[ADDON].preferences.solver_python = sys.executable
    from blender_addon.rig_import import import_rig
    rig_path = folder / "head.npz"
    made = subprocess.run([sys.executable, "-m", "solver", "demo-rig", "-o", str(rig_path)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    obj = import_rig(bpy.context, str(rig_path))
    mine = obj.vertex_groups.new(name="my cheeks")
    mine.add(list(range(0, len(obj.data.vertices), 7)), 0.25, 'REPLACE')
    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "scene.blend"))
    return obj, rig_path


def group_weights(obj, name):
    """A vertex group's weight on every vertex of obj (0 where the vertex is not in it), numpy."""
    import numpy as np
    index = obj.vertex_groups[name].index
    weights = np.zeros(len(obj.data.vertices))
    for vertex in obj.data.vertices:
        for element in vertex.groups:
            if element.group == index:
                weights[vertex.index] = element.weight
    return weights
