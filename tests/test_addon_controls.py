"""The animator's controls in the real bpy module with the real solver: the muscle sliders
(0–1, side filter, mirror, reset, keyframes and drivers), the painted lips in the Collisions
panel (from the solver's own lips, edited, cleared), the diffusion spread and the map ranges'
defaults, and settings saved by an earlier add-on converted on load."""
from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")

from test_addon_blender import ROOT, _user_data, addon, scene  # noqa: E402,F401
from solver.collisions.lips import find_lip_surfaces  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics import maps  # noqa: E402
from solver.requests.animate import AnimateRequest  # noqa: E402

SOLVER_TIMEOUT_S = 300


def _group_vertices(obj, name) -> np.ndarray:
    from blender_addon.scene_export import vertex_group_weights
    return np.flatnonzero(vertex_group_weights(obj, name) > 0.5)


def _muscle(settings, prefix, side):
    return next(m for m in settings.muscles if m.name.startswith(prefix) and m.name.endswith(side))


def test_muscle_sliders_run_from_rest_to_full_contraction_and_a_driver_moves_them(scene):
    from blender_addon import scene_export, solver_numbers
    obj = scene["object"]
    settings = obj.face_physics
    muscle = _muscle(settings, "zygomaticus_major", "_L")
    path = f'face_physics.muscles["{muscle.name}"].activation'
    # A control rig's custom property drives the slider: 0 → 1 over frames 1–3.
    obj["smile_ctrl"] = 0.0
    obj.keyframe_insert('["smile_ctrl"]', frame=1)
    obj["smile_ctrl"] = 1.0
    obj.keyframe_insert('["smile_ctrl"]', frame=3)
    driver = obj.driver_add(path).driver
    driver.type = 'SCRIPTED'
    variable = driver.variables.new()
    variable.name = "ctrl"
    variable.targets[0].id = obj
    variable.targets[0].data_path = '["smile_ctrl"]'
    driver.expression = "ctrl"
    try:
        samples = scene_export.sample_frames(bpy.context, obj, 1, 3)
        column = [m.name for m in settings.muscles].index(muscle.name)
        assert samples.muscle_activations[:, column] == pytest.approx([0.0, 0.5, 1.0])
        assert scene_export.muscles_move(samples)
        arrays = scene_export.activations_arrays(obj, samples, 1.0, head=False)
        # 0 = rest (γ 1), 1 = full contraction (γ 2), evenly in log γ between.
        assert arrays["muscle_contraction"][:, column] == pytest.approx([1.0, 2 ** 0.5, 2.0])
        others = np.delete(arrays["muscle_contraction"], column, axis=1)
        assert np.all(others == 1.0)
        assert solver_numbers.FULL_MUSCLE_CONTRACTION == 2.0
    finally:
        obj.driver_remove(path)
        obj.animation_data_clear()
        del obj["smile_ctrl"]
        muscle.activation = 0.0


def test_side_filter_mirror_and_reset_leave_animated_sliders_to_their_animation(scene):
    from blender_addon import muscle_controls
    obj = scene["object"]
    settings = obj.face_physics
    names = [m.name for m in settings.muscles]
    left = [n for n in names if muscle_controls.muscle_side(n) == 'LEFT']
    right = [n for n in names if muscle_controls.muscle_side(n) == 'RIGHT']
    assert left and len(left) == len(right)
    assert sorted(muscle_controls.mirror_name(n) for n in left) == sorted(right)
    # The list shows one side when asked, and the name search still works within it.
    settings.muscle_side = 'LEFT'
    bit = 1 << 30
    for pattern, expected in (("", left), ("zygomaticus", [n for n in left if "zygomaticus" in n])):
        listed = types.SimpleNamespace(filter_name=pattern, bitflag_filter_item=bit, use_filter_sort_alpha=False)
        flags, order = muscle_controls.FACE_PHYSICS_UL_muscles.filter_items(listed, bpy.context, settings, "muscles")
        assert [n for n, flag in zip(names, flags) if flag & bit] == expected and order == []
    for index, name in enumerate(left):
        settings.muscles[name].activation = 0.1 + 0.8 * index / len(left)
    keyed = settings.muscles[muscle_controls.mirror_name(left[0])]
    keyed.activation = 0.25
    keyed.keyframe_insert("activation", frame=1)
    try:
        assert bpy.ops.face_physics.muscles_mirror(direction='LEFT_TO_RIGHT') == {'FINISHED'}
        for name in left[1:]:
            assert settings.muscles[muscle_controls.mirror_name(name)].activation == \
                pytest.approx(settings.muscles[name].activation)
        assert keyed.activation == pytest.approx(0.25), "a keyframed slider follows its keyframes"
        # Reset acts on the side the list shows: left back to rest, right kept.
        assert bpy.ops.face_physics.muscles_reset() == {'FINISHED'}
        assert all(settings.muscles[name].activation == 0.0 for name in left)
        assert settings.muscles[muscle_controls.mirror_name(left[1])].activation > 0.0
        settings.muscle_side = 'ALL'
        assert bpy.ops.face_physics.muscles_reset() == {'FINISHED'}
        assert all(m.activation == 0.0 for m in settings.muscles if m.name != keyed.name)
    finally:
        obj.animation_data_clear()
        settings.muscle_side = 'ALL'
        for muscle in settings.muscles:
            muscle.activation = 0.0


def test_lips_start_from_the_solvers_lips_are_edited_in_edit_mode_and_cleared(scene):
    from blender_addon.scene_export import LOWER_LIP_GROUP, UPPER_LIP_GROUP, lip_vertex_arrays
    obj = scene["object"]
    bpy.context.view_layer.objects.active = obj
    assert obj.vertex_groups.get(UPPER_LIP_GROUP) is None
    assert bpy.ops.face_physics.lips_from_solver() == {'FINISHED'}
    try:
        expected = find_lip_surfaces(load_model(bpy.path.abspath(obj.face_physics.model_path)))
        upper, lower = _group_vertices(obj, UPPER_LIP_GROUP), _group_vertices(obj, LOWER_LIP_GROUP)
        assert np.array_equal(upper, expected.upper_vertices)
        assert np.array_equal(lower, np.setdiff1d(expected.lower_vertices, expected.upper_vertices))
        arrays, findings = lip_vertex_arrays(obj)
        assert not findings and np.array_equal(arrays["upper"], upper)
        # Painted lips are never replaced without asking: the job refuses, Replace confirms first.
        with pytest.raises(RuntimeError, match="painted already"):
            bpy.ops.face_physics.lips_from_solver()
        # Move one lower-lip vertex onto the upper lip in Edit Mode.
        moved = int(lower[0])
        for vertex in obj.data.vertices:
            vertex.select = vertex.index == moved
        bpy.ops.object.mode_set(mode='EDIT')
        try:
            assert bpy.ops.face_physics.lip_group_edit(lip='UPPER', action='ASSIGN') == {'FINISHED'}
        finally:
            bpy.ops.object.mode_set(mode='OBJECT')
        assert moved in _group_vertices(obj, UPPER_LIP_GROUP)
        assert moved not in _group_vertices(obj, LOWER_LIP_GROUP)
        assert bpy.ops.face_physics.lips_replace('EXEC_DEFAULT') == {'FINISHED'}
        assert moved not in _group_vertices(obj, UPPER_LIP_GROUP), "replaced by the solver's lips again"
    finally:
        assert bpy.ops.face_physics.lips_clear('EXEC_DEFAULT') == {'FINISHED'}
    assert obj.vertex_groups.get(UPPER_LIP_GROUP) is None and obj.vertex_groups.get(LOWER_LIP_GROUP) is None
    assert _user_data(obj) == scene["user_data"]


def test_the_solvers_lips_command_writes_a_lips_file_animate_accepts(scene, tmp_path):
    model = bpy.path.abspath(scene["object"].face_physics.model_path)
    lips = tmp_path / "lips.npz"
    done = subprocess.run([sys.executable, "-m", "solver", "lips", model, "-o", str(lips)], cwd=ROOT,
                          capture_output=True, text=True, timeout=SOLVER_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    with np.load(lips, allow_pickle=False) as data:
        assert data["upper"].size > 50 and data["lower"].size > 50
        assert not np.intersect1d(data["upper"], data["lower"]).size
    refused = subprocess.run([sys.executable, "-m", "solver", "lips", model, "-o", model], cwd=ROOT,
                             capture_output=True, text=True, timeout=SOLVER_TIMEOUT_S)
    assert refused.returncode == 2 and "also an input" in refused.stderr


def test_map_ranges_default_to_a_visible_change_and_the_spread_is_sent_in_metres(scene, tmp_path):
    from blender_addon import scene_export
    obj = scene["object"]
    settings = obj.face_physics
    assert tuple(settings.stiffness_range) == (1.0, 2.0) and tuple(settings.density_range) == (1.0, 2.0)
    before = settings.diffusion_spread_mm
    settings.diffusion_spread_mm = 12.0
    try:
        sent = scene_export.fat_settings(obj)
        assert sent["diffusion_spread_m"] == pytest.approx(0.012)
        model = tmp_path / "model.npz"
        model.write_bytes(b"")
        request = AnimateRequest(model=model, output=tmp_path / "out.npz", activations=model, **sent)
        assert request.map_settings.spread_m == pytest.approx(0.012)
        assert request.diffusion_time_step_m2 <= maps.DEFAULT_DIFFUSION_TIME_STEP_M2
    finally:
        settings.diffusion_spread_mm = before


def test_settings_saved_by_an_earlier_add_on_are_converted_on_load(scene):
    import blender_addon
    obj = scene["object"]
    settings = obj.face_physics
    muscle = settings.muscles[0]
    muscle["contraction"] = 2.0 ** 0.5                 # as the γ slider stored it
    settings["diffusion_steps"], settings["diffusion_time_step"] = 20, 3e-6
    blender_addon._after_load()                        # the add-on's load_post handler
    assert "contraction" not in muscle.keys() and muscle.activation == pytest.approx(0.5)
    assert "diffusion_steps" not in settings.keys()
    assert settings.diffusion_spread_mm == pytest.approx(1000 * (2 * 20 * 3e-6) ** 0.5)
    muscle.activation = 0.0
    settings.diffusion_spread_mm = 1000 * maps.MapSettings().spread_m
