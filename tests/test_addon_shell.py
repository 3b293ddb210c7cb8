"""The Interactive panel in the real `bpy` module with the real solver children: Fit Stiffness
(a shell-fit job on the demo head's rig at a small triangle count) writing FP_shell_strain and
FP_shell_bending without touching the user's groups, Bake Shell making a take, and the Poke
tool's non-modal core — the sphere placed from a ray hit, the frame message, the preview updated
from the live child's reply, and everything removed again. Every process has a timeout."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
import addon_utils  # noqa: E402  (comes with bpy)

from addon_demo_scene import ADDON, demo_head_scene, group_weights  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FIT_TRIANGLES = 500


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shell_addon")
    obj, _ = demo_head_scene(folder)
    yield {"object": obj, "folder": folder}
    from blender_addon import shell_poke
    shell_poke.stop_session()
    addon_utils.disable(ADDON, default_set=True)


def _user_groups(obj) -> dict:
    return {group.name: group_weights(obj, group.name) for group in obj.vertex_groups
            if not group.name.startswith("FP_shell_")}


def test_the_interactive_panel_and_its_operators_register(scene):
    assert hasattr(bpy.types, "VIEW3D_PT_face_physics_interactive")
    assert bpy.types.VIEW3D_PT_face_physics_interactive.bl_category == "Face Physics"
    for name in ("shell_fit", "shell_bake", "shell_poke"):
        assert hasattr(bpy.ops.face_physics, name)
    assert scene["object"].face_physics_shell.triangles == 4000


@pytest.fixture(scope="module")
def fitted(scene):
    """Fit Stiffness at FIT_TRIANGLES, as the button runs it (background: to the end in the call)."""
    obj = scene["object"]
    bpy.context.view_layer.objects.active = obj
    before = _user_groups(obj)
    obj.face_physics_shell.triangles = FIT_TRIANGLES
    assert bpy.ops.face_physics.shell_fit() == {'FINISHED'}
    return before


def test_fit_stiffness_writes_the_two_groups_and_leaves_the_users_alone(scene, fitted):
    from blender_addon import shell_maps, shell_operators
    obj = scene["object"]
    settings = obj.face_physics_shell
    path = Path(bpy.path.abspath(settings.shell_path))
    assert path == shell_operators.shell_path(obj) and path.is_file()
    assert path.parent.name == "face_physics"
    strain, bending = shell_maps.read_fine_maps(path)
    for name, values, value_range in ((shell_maps.STRAIN_GROUP, strain, settings.strain_range),
                                      (shell_maps.BENDING_GROUP, bending, settings.bending_range)):
        weights = group_weights(obj, name)
        assert weights.min() >= 0.0 and weights.max() <= 1.0
        # Every vertex is in the group, and the weights convert back to the map.
        back = shell_maps.stiffness_from_weights(weights, *value_range)
        assert np.allclose(back, values, rtol=1e-5)
    after = _user_groups(obj)
    assert after.keys() == fitted.keys()
    for name in fitted:
        assert np.array_equal(after[name], fitted[name]), name
    assert not any(group.name.endswith(shell_operators.TEMPORARY_SUFFIX) for group in obj.vertex_groups)


def test_a_second_fit_replaces_the_groups_whole(scene, fitted):
    from blender_addon import shell_maps, shell_operators
    obj = scene["object"]
    count = len(obj.vertex_groups)
    strain = np.linspace(1.0, 100.0, len(obj.data.vertices))
    shell_operators.write_map_groups(obj, strain, np.full(len(strain), 3.0))
    assert len(obj.vertex_groups) == count
    assert np.allclose(shell_maps.stiffness_from_weights(group_weights(obj, shell_maps.STRAIN_GROUP),
                                                         *obj.face_physics_shell.strain_range), strain)
    # Put the fitted maps back for the tests after this one.
    shell_operators.write_map_groups(obj, *shell_maps.read_fine_maps(bpy.path.abspath(
        obj.face_physics_shell.shell_path)))
    with pytest.raises(ValueError, match="vertices"):
        shell_operators.write_map_groups(obj, strain[:-1], strain[:-1])
    assert _user_groups(obj).keys() == fitted.keys()


def test_bake_shell_makes_a_take(scene, fitted):
    from blender_addon import storage, take_folders
    obj = scene["object"]
    scene_ = bpy.context.scene
    scene_.frame_start, scene_.frame_end = 1, 6
    key = obj.data.shape_keys.key_blocks["jawOpen"]
    key.value = 0.0
    key.keyframe_insert("value", frame=1)
    key.value = 1.0
    key.keyframe_insert("value", frame=6)
    bpy.ops.wm.save_mainfile()
    assert bpy.ops.face_physics.shell_bake() == {'FINISHED'}
    settings = obj.face_physics
    take = settings.takes[settings.take_index]
    assert take.status == "finished" and settings.shown_take == take.name
    listed = take_folders.list_takes(storage.takes_folder(obj))
    finished = [item for item in listed if item.name == take.name][0]
    assert finished.frames == 6 and finished.cache.is_file()
    with np.load(finished.folder / "result.npz", allow_pickle=False) as result:
        positions = result["skin_positions"]
    assert positions.shape == (6, len(obj.data.vertices), 3)
    assert np.abs(positions[-1] - positions[0]).max() > 1e-3          # the jaw opened


def test_the_poke_core_places_the_sphere_talks_to_the_child_and_cleans_up(scene, fitted):
    from blender_addon import shell_live, shell_poke
    obj = scene["object"]
    bpy.context.scene.frame_set(1)
    depsgraph = bpy.context.evaluated_depsgraph_get()
    rest = np.array([v.co for v in obj.data.vertices])
    # A ray straight at the face's front (-Y is the demo head's front) through its middle.
    front = rest[np.argmin(rest[:, 1])]
    origin = obj.matrix_world @ __import__("mathutils").Vector((front[0], front[1] - 1.0, front[2]))
    radius, depth = 0.03, 0.01
    centre = shell_poke.sphere_from_ray(obj, depsgraph, origin, (0.0, 1.0, 0.0), radius, depth)
    assert centre is not None
    # The hit is on the surface; the centre sits `radius - depth` out along the normal (towards the viewer).
    assert centre[1] < front[1] + 1e-6
    assert shell_poke.sphere_from_ray(obj, depsgraph, origin, (0.0, -1.0, 0.0), radius, depth) is None

    obj.face_physics_shell.poke_radius = radius
    session = shell_poke.PokeSession(bpy.context, obj, bpy.path.abspath(obj.face_physics_shell.shell_path),
                                     python=sys.executable)
    try:
        assert shell_poke.find_preview(obj) is session.preview
        assert session.sphere.parent is obj and session.sphere.hide_viewport
        message = session.frame_message(bpy.context)
        (length,) = np.frombuffer(message[:4], "<u4")
        assert length == len(message) - 4 and message[4] == shell_live.FRAME
        rest_reply = session.step_blocking(bpy.context)
        assert isinstance(rest_reply, shell_live.Positions)
        preview = np.array([v.co for v in session.preview.data.vertices])
        metres = session.metres
        assert np.allclose(preview, rest_reply.positions_m / metres, atol=1e-5)
        session.aim(centre, pulling=False)
        assert not session.sphere.hide_viewport
        for _ in range(10):
            pushed = session.step_blocking(bpy.context)
        dent = np.linalg.norm(pushed.positions_m - rest_reply.positions_m, axis=1).max()
        assert dent > 1e-4
        session.aim(centre, pulling=True)
        pulled = session.step_blocking(bpy.context)
        assert pulled.grabbed > 0
        user_mesh = np.array([v.co for v in obj.data.vertices])
        assert np.array_equal(user_mesh, rest)                 # the skin itself is never written
    finally:
        process = session.live.process
        session.close()
    assert process.poll() is not None
    assert shell_poke.find_preview(obj) is None
    assert not [child for child in obj.children if child.name.startswith(shell_poke.SPHERE_NAME)]


DRAW_CHILD = r'''
import json, os, sys, traceback
import bpy
import addon_utils
blend, object_name, solver_python, report = sys.argv[-4:]
bpy.ops.wm.open_mainfile(filepath=blend)
addon_utils.enable("blender_addon", default_set=True, handle_error=None)
bpy.context.preferences.addons["blender_addon"].preferences.solver_python = solver_python
bpy.context.view_layer.objects.active = bpy.data.objects[object_name]
from blender_addon import shell_panel

def draw(menu, context):
    cls = shell_panel.VIEW3D_PT_face_physics_interactive
    entry = {"polled": bool(cls.poll(context))}
    try:
        cls.draw(type("Host", (), {"layout": menu.layout})(), context)
        entry["drawn"] = True
    except Exception:
        entry["error"] = traceback.format_exc()
    with open(report, "w") as stream:
        json.dump(entry, stream)
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)

window = bpy.context.window
area = next(area for area in window.screen.areas if area.type == 'VIEW_3D')
region = next(region for region in area.regions if region.type == 'UI')
with bpy.context.temp_override(window=window, area=area, region=region):
    bpy.context.window_manager.popup_menu(draw, title="Face Physics")
'''


def test_the_interactive_panel_draws_into_a_real_layout(scene, fitted, tmp_path):
    """As tests/addon_draw_child.py does for the other panels: a child Blender draws the panel
    into a popup's real layout (layout errors such as a missing property fail it)."""
    import json
    bpy.ops.wm.save_mainfile()
    script, report = tmp_path / "draw.py", tmp_path / "report.json"
    script.write_text(DRAW_CHILD)
    child = subprocess.run([sys.executable, str(script), bpy.data.filepath, scene["object"].name, sys.executable,
                            str(report)], cwd=str(ROOT), capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert report.is_file(), child.stderr[-2000:]
    entry = json.loads(report.read_text())
    assert entry["polled"] and entry.get("drawn"), entry
    problems = [line for line in (child.stdout + child.stderr).splitlines()
                if "rna_uiItem" in line or "not found" in line or "unknown operator" in line or "Error" in line]
    assert child.returncode == 0 and not problems, problems


def test_poke_sends_the_collision_panels_props_and_they_push(scene, fitted):
    """A prop of the Collisions panel's list, sent once as a MESH, dents the face with the tool off."""
    from blender_addon import shell_poke
    obj = scene["object"]
    bpy.context.scene.frame_set(1)
    rest = np.array([v.co for v in obj.data.vertices])
    front = rest[np.argmin(rest[:, 1])]
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.02,
                                          location=obj.matrix_world @ __import__("mathutils").Vector(
                                              (front[0], front[1] + 0.02 - 0.008, front[2])))
    prop = bpy.context.active_object
    slot = obj.face_physics.colliders.add()
    slot.collider = prop
    bpy.context.view_layer.objects.active = obj
    session = shell_poke.PokeSession(bpy.context, obj, bpy.path.abspath(obj.face_physics_shell.shell_path),
                                     python=sys.executable)
    try:
        assert [name for _, name, _ in session.colliders] == [prop.name]
        for _ in range(10):
            reply = session.step_blocking(bpy.context)
        skin_m = rest * session.metres
        assert np.linalg.norm(reply.positions_m - skin_m, axis=1).max() > 1e-3
        assert reply.contact_force_n > 0.0
    finally:
        session.close()
        obj.face_physics.colliders.remove(len(obj.face_physics.colliders) - 1)
        bpy.data.objects.remove(prop)
