"""Registering the add-on in the real bpy module, twice, through Blender's add-on manager.

Runs in a child process: other add-on tests keep the add-on enabled in their pytest worker,
and unregistering it under them would pull their properties away."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("bpy")
ROOT = Path(__file__).resolve().parents[1]

REGISTER_TWICE = textwrap.dedent("""
    import sys
    import bpy
    import addon_utils
    sys.path.insert(0, sys.argv[1])
    bpy.ops.wm.read_homefile(use_empty=True)
    for _ in range(2):
        addon_utils.enable("blender_addon", default_set=True, handle_error=None)
        assert hasattr(bpy.types.Object, "face_physics")
        assert hasattr(bpy.types.WindowManager, "face_physics_job")
        assert hasattr(bpy.types, "VIEW3D_PT_face_physics_bake")
        assert bpy.ops.face_physics.bake.get_rna_type() is not None
        assert "blender_addon" in bpy.context.preferences.addons
        addon_utils.disable("blender_addon", default_set=True)
        assert not hasattr(bpy.types.Object, "face_physics")
        assert not hasattr(bpy.types.WindowManager, "face_physics_job")
        assert not hasattr(bpy.types, "VIEW3D_PT_face_physics_bake")
        assert "blender_addon" not in bpy.context.preferences.addons
    print("REGISTERED-TWICE")
""")


def test_register_and_unregister_twice_cleanly():
    run = subprocess.run([sys.executable, "-c", REGISTER_TWICE, str(ROOT)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "REGISTERED-TWICE" in run.stdout
    assert "Traceback" not in run.stderr and "Error" not in run.stderr, run.stderr
