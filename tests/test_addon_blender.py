"""The add-on in the real `bpy` module with the real solver subprocess: build, fit, bake
(muscles, or shape keys through the fit with maps and a collider), cancel, errors, panels.
The demo head is built at ~3000 tets so the suite stays quick."""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
import addon_utils  # noqa: E402  (comes with bpy)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from solver.model_file import load_model  # noqa: E402
from solver.physics import inputs, maps  # noqa: E402
from solver.physics.activation import bells_palsy_muscles  # noqa: E402

ADDON = "blender_addon"
FRAMES = (1, 5)
MIDDLE_FRAME = 3
# The acceptance clip: 24 frames of keyed shape keys with a fat map, left palsy and a
# collider, compared with the solver at frame 12.
CLIP = (1, 24)
CLIP_MIDDLE = 12


def _preferences():
    return bpy.context.preferences.addons[ADDON].preferences


@pytest.fixture(scope="module")
def addon(tmp_path_factory):
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable(ADDON, default_set=True, handle_error=None)
    _preferences().solver_python = sys.executable
    yield
    addon_utils.disable(ADDON, default_set=True)


@pytest.fixture(scope="module")
def scene(addon, tmp_path_factory):
    """The demo head imported, a user fat group painted, saved, built; plus a snapshot of the
    user's own data to compare against after every operation."""
    from blender_addon.rig_import import import_rig
    folder = tmp_path_factory.mktemp("addon")
    made = subprocess.run([sys.executable, "-m", "solver", "demo-rig", "-o", str(folder / "head.npz")],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    obj = import_rig(bpy.context, str(folder / "head.npz"))
    fat = obj.vertex_groups.new(name="cheek fat")
    rest = np.array([v.co for v in obj.data.vertices])
    cheek = np.flatnonzero(rest[:, 0] > np.percentile(rest[:, 0], 80))
    for index in cheek:
        fat.add([int(index)], 0.5 + 0.5 * (index % 2), 'REPLACE')
    jaw_open = obj.data.shape_keys.key_blocks["jawOpen"]
    jaw_open.keyframe_insert("value", frame=1)          # the user's own shape-key action
    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "scene.blend"))
    settings = obj.face_physics
    settings.target_tets = 3000
    unbuilt = folder / "unbuilt.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(unbuilt), copy=True)
    assert bpy.ops.face_physics.build() == {'FINISHED'}
    bpy.ops.wm.save_mainfile()
    return {"object": obj, "folder": folder, "unbuilt": unbuilt, "user_data": _user_data(obj)}


def _user_data(obj) -> dict:
    """Every byte of the user's own shape keys and vertex groups."""
    blocks = {}
    for block in obj.data.shape_keys.key_blocks:
        if block.name.startswith("FP bake "):
            continue
        co = np.empty(len(block.data) * 3, dtype=np.float32)
        block.data.foreach_get("co", co)
        blocks[block.name] = (co.tobytes(), block.value, block.relative_key.name, block.mute)
    groups = {group.name: [(v.index, g.weight) for v in obj.data.vertices for g in v.groups
                           if g.group == group.index] for group in obj.vertex_groups}
    return {"shape_keys": blocks, "groups": groups}


def _evaluated_metres(obj, frame) -> np.ndarray:
    bpy.context.scene.frame_set(frame)
    evaluated = obj.evaluated_get(bpy.context.evaluated_depsgraph_get())
    co = np.empty(len(evaluated.data.vertices) * 3, dtype=np.float32)
    evaluated.data.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64) * obj.face_physics.metres_per_unit


def _animate_muscles(obj):
    settings = obj.face_physics
    for muscle in settings.muscles:
        if muscle.name.startswith(("zygomaticus", "levator_anguli")):
            muscle.activation = 0.0                  # rest: contraction γ = 1
            muscle.keyframe_insert("activation", frame=FRAMES[0])
            muscle.activation = 1.0                  # full: γ = 2
            muscle.keyframe_insert("activation", frame=FRAMES[1])
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = FRAMES


def _bake_keeping_job(monkeypatch=None, tmp_path=None):
    """Bake, and return the solver's RESULT.npz skin positions from the take the bake made."""
    assert bpy.ops.face_physics.bake() == {'FINISHED'}
    return _shown_take_positions(bpy.context.active_object)


def _shown_take_positions(obj) -> np.ndarray:
    from blender_addon import storage
    from blender_addon.take_folders import RESULT_FILE
    with np.load(storage.takes_folder(obj) / obj.face_physics.shown_take / RESULT_FILE, allow_pickle=False) as result:
        return result["skin_positions"]


def test_the_panels_ranges_are_the_ones_the_solver_accepts(addon):
    """Every value the artist can set is one the animate request takes (solver/requests/animate.py,
    solver/physics/maps.py): the add-on cannot import the solver, so its property ranges are checked
    against it here (the map settings' ranges and defaults it reads from the solver's own file)."""
    from solver.requests import animate as request
    properties = bpy.types.Object.bl_rna.properties["face_physics"].fixed_type.properties
    for name, (low, high) in {"fat_scale": maps.FAT_SCALE_RANGE, "fat_softening": (0.0, 1.0),
                              "stiffness_range": maps.PAINTED_MULTIPLIER_LIMITS,
                              "density_range": maps.PAINTED_MULTIPLIER_LIMITS,
                              "substeps": (1, request.MAX_SUBSTEPS), "wind_speed": (0.0, request.MAX_WIND_SPEED),
                              "teeth_padding": request.TEETH_PADDING_RANGE_M}.items():
        prop = properties[name]
        assert low * (1 - 1e-6) <= prop.hard_min and prop.hard_max <= high * (1 + 1e-6), \
            f"{name}: the panel allows [{prop.hard_min:g}, {prop.hard_max:g}], the solver [{low:g}, {high:g}]"
    defaults = maps.MapSettings()
    for name, setting in (("fat_scale", "fat_scale"), ("fat_softening", "fat_softening")):
        assert properties[name].default == pytest.approx(getattr(defaults, setting)), name
    # The spread slider's default is the solver's default diffusion, its range the solver's.
    spread = properties["diffusion_spread_mm"]
    assert spread.default == pytest.approx(1000 * defaults.spread_m, abs=1e-3)
    assert (spread.hard_min, spread.hard_max) == pytest.approx(tuple(1000 * v for v in maps.DIFFUSION_SPREAD_RANGE_M))
    # A muscle slider: 0 = rest (γ = 1), 1 = full contraction, its top the solver's largest γ.
    from blender_addon import solver_numbers
    activation = properties["muscles"].fixed_type.properties["activation"]
    assert activation.hard_min == 0.0 and solver_numbers.contraction_from_activation(0.0) == 1.0
    assert solver_numbers.contraction_from_activation(activation.hard_max) == \
        pytest.approx(inputs.MUSCLE_CONTRACTION_RANGE[1])


def test_zombie_preset_sets_the_solvers_ranges(scene):
    """The bundled Zombie tissue preset (tests/test_addon_presets.py has the rest of them)."""
    settings = scene["object"].face_physics
    before = tuple(settings.stiffness_range), tuple(settings.density_range)
    zombie = ROOT / "blender_addon" / "presets" / "face_physics" / "tissue" / "Zombie.py"
    assert bpy.ops.script.execute_preset(filepath=str(zombie), menu_idname="FACE_PHYSICS_MT_tissue_presets") \
        == {'FINISHED'}
    assert tuple(settings.stiffness_range) == pytest.approx(maps.ZOMBIE_STIFFNESS_RANGE)
    assert tuple(settings.density_range) == pytest.approx((1.0, maps.ZOMBIE_DENSITY_MAX))
    settings.stiffness_range, settings.density_range = before


def test_build_gives_a_model_with_muscles(scene):
    settings = scene["object"].face_physics
    assert 2000 < settings.model_tets < 6000 and settings.model_nodes > 0
    assert len(settings.muscles) == 38 and os.path.isfile(bpy.path.abspath(settings.model_path))
    assert settings.model_path.startswith("//face_physics/")


def test_bake_to_pc2_then_shape_keys_matches_the_solver(scene, monkeypatch, tmp_path):
    obj = scene["object"]
    settings = obj.face_physics
    _animate_muscles(obj)
    settings.fat_group = "cheek fat"
    settings.fat_scale = 1.2
    assert bpy.ops.face_physics.palsy_preset(side='LEFT') == {'FINISHED'}
    model = load_model(bpy.path.abspath(settings.model_path))
    assert {m.name for m in settings.muscles if m.paralysed} == set(bells_palsy_muscles(model, "L"))

    settings.bake_target = 'PC2'
    expected = _bake_keeping_job(monkeypatch, tmp_path / "pc2")
    assert expected.shape[0] == FRAMES[1] - FRAMES[0] + 1
    assert np.abs(expected[MIDDLE_FRAME - FRAMES[0]] - expected[0]).max() > 1e-4, "the clip should move"
    modifier = obj.modifiers["Face Physics cache"]
    assert modifier.type == 'MESH_CACHE' and modifier.filepath.startswith("//face_physics/")
    assert list(obj.modifiers).index(modifier) == 0
    np.testing.assert_allclose(_evaluated_metres(obj, MIDDLE_FRAME), expected[MIDDLE_FRAME - FRAMES[0]], atol=1e-5)
    assert _user_data(obj) == scene["user_data"]

    settings.bake_target = 'SHAPE_KEYS'
    expected = _bake_keeping_job(monkeypatch, tmp_path / "keys")
    _assert_shape_key_bake_matches(obj, expected)
    assert _user_data(obj) == scene["user_data"]

    # Re-bakes and the other targets apply the same solver result again (bake.apply_bake is what
    # the Bake operator calls once the solver is done), so the solver runs only twice here.
    from blender_addon import bake
    metres = settings.metres_per_unit
    bake.apply_bake(obj, 'SHAPE_KEYS', expected, FRAMES[0], metres)       # replaces only its own keys
    _assert_shape_key_bake_matches(obj, expected)
    key = obj.data.shape_keys
    user_action = key.animation_data.action
    bake.apply_bake(obj, 'ACTION', expected, FRAMES[0], metres)
    assert key.animation_data.action != user_action and key.animation_data.action.name.startswith("FP bake ")
    _assert_shape_key_bake_matches(obj, expected)
    bake.apply_bake(obj, 'PC2', expected, FRAMES[0], metres)
    assert key.animation_data.action == user_action, "replacing an action bake gives the user's action back"
    assert not [action for action in bpy.data.actions if action.name.startswith("FP bake ")]
    assert not [b for b in key.key_blocks if b.name.startswith("FP bake ")]
    np.testing.assert_allclose(_evaluated_metres(obj, MIDDLE_FRAME), expected[MIDDLE_FRAME - FRAMES[0]], atol=1e-5)
    assert _user_data(obj) == scene["user_data"]


def test_the_python_api_bakes_and_manages_takes_without_an_active_object(scene):
    from blender_addon import api
    obj = scene["object"]
    bpy.context.view_layer.objects.active = None
    try:
        take = api.bake(obj, first=1, last=3, target='PC2')
        assert take.status == "finished" and take.frames == 3 and take.first_frame == 1
        assert take.name in [listed.name for listed in api.takes(obj)] and obj.face_physics.shown_take == take.name
        np.testing.assert_allclose(_evaluated_metres(obj, 2), _shown_take_positions(obj)[1], atol=1e-5)
        with pytest.raises(api.FacePhysicsError, match="target 'GIF'"):
            api.bake(obj, target='GIF')
        with pytest.raises(api.FacePhysicsError, match="frame range 5–2 is empty"):
            api.bake(obj, first=5, last=2)
        with pytest.raises(api.FacePhysicsError, match="no take 'nope'"):
            api.show_take(obj, "nope")
        assert api.rename_take(obj, take.name, "api take").name == "api take"
        api.free_take(obj, "api take")
        assert "api take" not in [listed.name for listed in api.takes(obj)]
    finally:
        bpy.context.view_layer.objects.active = obj
    assert _user_data(obj) == scene["user_data"]


def test_esc_while_a_bake_prepares_abandons_it_and_keeps_nothing(scene):
    """The modal Bake's own tick (job_operator.SolverJobOperator.step, what a TIMER event runs):
    a bake sampling the scene a frame a tick, abandoned by Esc, starts no solver, leaves no take
    and gives the scene its frame back."""
    from blender_addon import bake_operators, storage
    from blender_addon.take_folders import list_takes
    obj = scene["object"]
    _bake_range(obj, 1, 2000)         # ~1 ms a frame to sample: many ticks
    reports = []

    class TickedBake(bake_operators._BakeJobOperator):
        start = bake_operators.FACE_PHYSICS_OT_bake.start

        def report(self, kinds, message):
            reports.append(message)

    bpy.context.scene.frame_set(7)
    before = [take.name for take in list_takes(storage.takes_folder(obj))]
    operator = TickedBake()
    try:
        assert operator._begin(bpy.context, operator.start)
        # A tick is ~25 ms of work: the checks before sampling may take the first few on a busy machine.
        for _ in range(20):
            assert operator.step(bpy.context) is None
            if operator._stepper.fraction > 0.0:
                break
        assert operator._job is None and current_job_is_none()       # still sampling: no solver yet
        assert 0.0 < operator._stepper.fraction < 0.5 and "sampling frame" in operator._stepper.message
        assert operator.step(bpy.context, escape=True) == {'CANCELLED'}
    finally:
        obj.face_physics.use_scene_range = True
    assert [take.name for take in list_takes(storage.takes_folder(obj))] == before
    assert bpy.context.scene.frame_current == 7 and "cancelled before the solver started" in reports[-1]
    assert _user_data(obj) == scene["user_data"]


def current_job_is_none() -> bool:
    from blender_addon.job_runner import current_job
    return current_job() is None


def test_a_renamed_map_group_still_bakes_its_map_and_a_deleted_one_is_an_error(scene):
    """Maps follow their vertex group through a rename (map_groups.py): the bake after the
    rename is the bake before it, to the bit, and the panel names the new group; a deleted group
    stops the bake with the reason instead of baking without the map."""
    from blender_addon import api
    obj = scene["object"]
    settings = obj.face_physics
    rest = np.array([vertex.co for vertex in obj.data.vertices])
    chin = np.flatnonzero(rest[:, 2] < np.percentile(rest[:, 2], 30))
    group = obj.vertex_groups.new(name="firm chin")
    for index in chin:
        group.add([int(index)], 1.0, 'REPLACE')
    before_range = tuple(settings.stiffness_range)
    settings.stiffness_group, settings.stiffness_range = "firm chin", (1.0, 4.0)
    _animate_muscles(obj)
    try:
        painted = _shown_take_positions_of(obj, api.bake(obj, first=1, last=3, target='PC2'))
        group.name = "firm chin, renamed"
        bpy.context.view_layer.update()                  # the depsgraph handler follows the rename
        assert settings.stiffness_group == "firm chin, renamed"
        renamed = _shown_take_positions_of(obj, api.bake(obj, first=1, last=3, target='PC2'))
        np.testing.assert_array_equal(renamed, painted)
        settings.stiffness_group = ""
        plain = _shown_take_positions_of(obj, api.bake(obj, first=1, last=3, target='PC2'))
        assert np.abs(plain - painted).max() > 1e-6, "the stiffness map should change the bake"
        settings.stiffness_group = "firm chin, renamed"
        obj.vertex_groups.remove(group)
        with pytest.raises(api.FacePhysicsError, match="stiffness map's vertex group 'firm chin, renamed' is gone"):
            api.bake(obj, first=1, last=3, target='PC2')
    finally:
        settings.stiffness_group, settings.stiffness_range = "", before_range
        if obj.vertex_groups.get("firm chin, renamed") is not None:
            obj.vertex_groups.remove(obj.vertex_groups["firm chin, renamed"])
    assert _user_data(obj) == scene["user_data"]      # the test's own group is gone again


def _shown_take_positions_of(obj, take) -> np.ndarray:
    with np.load(take.folder / "result.npz", allow_pickle=False) as result:
        return result["skin_positions"]


def test_job_operators_never_run_from_redo_or_repeat_last(addon):
    """F9 and Shift+R call execute(), which waits for the solver: the job operators are not
    REGISTER operators, so Blender never offers them there."""
    from blender_addon.job_operator import SolverJobOperator
    job_operators = [cls for cls in SolverJobOperator.__subclasses__() for cls in [cls, *cls.__subclasses__()]
                     if hasattr(cls, "bl_idname")]
    assert len(job_operators) >= 8
    for cls in job_operators:
        assert 'REGISTER' not in getattr(cls, "bl_options", set()), cls.bl_idname


def _assert_shape_key_bake_matches(obj, expected, frames=FRAMES, middle=MIDDLE_FRAME):
    assert "Face Physics cache" not in obj.modifiers
    baked = [b.name for b in obj.data.shape_keys.key_blocks if b.name.startswith("FP bake ")]
    assert baked == [f"FP bake {frame:04d}" for frame in range(frames[0], frames[1] + 1)]
    for frame in (frames[0], middle, frames[1]):
        np.testing.assert_allclose(_evaluated_metres(obj, frame), expected[frame - frames[0]], atol=1e-5)


def test_the_farm_bake_command_bakes_a_saved_file_headless(scene, tmp_path):
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = FRAMES
    scene["object"].face_physics.bake_target = 'PC2'
    bpy.ops.wm.save_mainfile()
    output = tmp_path / "baked.blend"
    run = subprocess.run([sys.executable, "-m", "blender_addon.cli", "bake", bpy.data.filepath,
                          "--solver-python", sys.executable, "--output", str(output)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert output.is_file() and f"baking {scene['object'].name}" in run.stdout
    from solver.pc2 import read_pc2
    # The take is beside the output file.
    (cache,) = glob.glob(str(tmp_path / "face_physics" / f"baked_{scene['object'].name}_takes" / "FP_take_*" /
                             "result.pc2"))
    positions, start, _ = read_pc2(cache)
    assert len(positions) == FRAMES[1] - FRAMES[0] + 1 and start == FRAMES[0]


_READ_SAVED_FIT = """
import pickle, sys
import bpy
import addon_utils  # only importable once bpy is
blend, name, out = sys.argv[1:4]
sys.path[:0] = ["tests", "."]
bpy.ops.wm.open_mainfile(filepath=blend)
addon_utils.enable("blender_addon", default_set=True, handle_error=None)
from test_addon_blender import _user_data
obj = bpy.data.objects[name]
settings = obj.face_physics
rows = {item.name: (item.fitted, [item.error_mean_mm, item.error_p95_mm, item.error_max_mm], item.worst)
        for item in settings.fit_shapes}
with open(out, "wb") as stream:
    pickle.dump({"fit_path": settings.fit_path, "model_path": settings.model_path, "rows": rows,
                 "user_data": _user_data(obj)}, stream)
"""


def _saved_fit_state(blend, object_name, tmp_path) -> dict:
    """The object's fit path, Fit list and user data as saved in `blend`, read by a child Python
    (this process keeps the module's scene open)."""
    import pickle
    out = tmp_path / "saved.pickle"
    child = subprocess.run([sys.executable, "-c", _READ_SAVED_FIT, str(blend), object_name, str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    return pickle.loads(out.read_bytes())


def _farm_fit(*arguments):
    return subprocess.run([sys.executable, "-m", "blender_addon.cli", "fit", *map(str, arguments),
                           "--solver-python", sys.executable], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_farm_fit_command_fits_and_saves_a_file_for_a_later_farm_bake(scene, tmp_path):
    obj = scene["object"]
    bpy.ops.wm.save_mainfile()
    # A copy beside scene.blend shares its model (the //face_physics/ path); the fit is its own.
    blend = scene["folder"] / "farm_fit.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend), copy=True)
    fit = scene["folder"] / "face_physics" / f"farm_fit_{obj.name}_fit.npz"
    kept = {item.name for item in obj.face_physics.fit_shapes if item.fitted}    # an earlier fit keeps these
    unbuilt = scene["unbuilt"]
    originals = {path: path.read_bytes() for path in (blend, unbuilt)}
    failures = [(_farm_fit(blend, "--shapes", "mouthSmile_L,noSuchShape"), "noSuchShape: not shape keys of"),
                (_farm_fit(blend, "--object", "Nobody"), "Nobody: no such object"),
                (_farm_fit(unbuilt), "no object has a Face Physics model")]
    for run, message in failures:
        assert run.returncode != 0 and message in run.stderr, run.stdout + run.stderr
        assert "Traceback" not in run.stderr
    assert {path: path.read_bytes() for path in originals} == originals and not fit.exists()

    run = _farm_fit(blend, "--shapes", "mouthSmile_L", "--jobs", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"fitting {obj.name}" in run.stdout
    assert any(line.startswith("  mouthSmile_L: ") and "error mean" in line for line in run.stdout.splitlines())
    saved = _saved_fit_state(blend, obj.name, tmp_path)
    assert saved["fit_path"] == f"//face_physics/farm_fit_{obj.name}_fit.npz" and fit.is_file()
    assert saved["model_path"] == obj.face_physics.model_path
    rows = saved["rows"]
    assert {name for name, row in rows.items() if row[0]} == kept | {"mouthSmile_L"}
    with np.load(fit, allow_pickle=False) as arrays:
        for name, errors in zip(arrays["shape_key_names"], arrays["fit_error_mm"]):
            np.testing.assert_allclose(rows[str(name)][1], errors, rtol=1e-6)
    assert rows["mouthSmile_L"][1][0] < 1.0 and [row[2] for row in rows.values()].count(True) == 1
    assert saved["user_data"] == scene["user_data"]


def _bake_range(obj, first, last):
    settings = obj.face_physics
    settings.use_scene_range = False
    settings.frame_start, settings.frame_end = first, last


class _Caller:
    """What an operator gives the shared workflow functions: somewhere to report."""

    def __init__(self):
        self.reports = []

    def report(self, kind, message):
        self.reports.append((kind, message))


def test_a_cancelled_bake_keeps_its_frames_and_resumes_to_the_uninterrupted_take(scene):
    """Takes: a bake cancelled after a few frames keeps them (shown on the object, the take
    resumable), Resume continues it to the result an uninterrupted bake gives (1e-6 m), and three
    takes coexist, switch, rename and free; the user's data is never touched."""
    from blender_addon import storage, takes, workflow
    from blender_addon.take_folders import list_takes
    obj = scene["object"]
    settings = obj.face_physics
    _animate_muscles(obj)
    settings.bake_target = 'PC2'
    _bake_range(obj, 1, 12)
    try:
        assert bpy.ops.face_physics.bake() == {'FINISHED'}
        whole_name = settings.shown_take
        whole = _shown_take_positions(obj)

        caller = _Caller()
        job = workflow.start_bake_job(caller, bpy.context, obj)
        assert job is not None, caller.reports
        while job.update() is None and job.frames_done < 3:
            workflow.follow_bake(job)
            time.sleep(0.02)
        job.cancel()
        assert job.wait() == 'CANCELLED'
        workflow.end_bake(job)              # what the operator's `ended` hook does
        job.close()
        stopped = takes.selected_take(obj)
        assert stopped.status == "cancelled" and 3 <= stopped.frames_done < 12 and stopped.resumable
        assert settings.shown_take == stopped.name and obj.modifiers[0].name == storage.CACHE_MODIFIER_NAME
        np.testing.assert_allclose(_evaluated_metres(obj, 2), whole[1], atol=1e-5)   # a kept frame, shown
        assert _user_data(obj) == scene["user_data"]
        # Blender quit mid-bake: the take still says running. Opening the file lists it as cancelled.
        stopped.status = "running"
        stopped.save()
        import blender_addon
        blender_addon._after_load()          # the add-on's load_post handler
        assert takes.selected_take(obj).status == "cancelled" and takes.selected_take(obj).resumable

        assert bpy.ops.face_physics.resume_take() == {'FINISHED'}
        resumed = _shown_take_positions(obj)
        assert settings.shown_take == stopped.name and takes.selected_take(obj).status == "finished"
        gap = np.abs(resumed - whole).max()
        assert gap < 1e-6, f"the resumed take differs from the uninterrupted one by {gap:.2e} m " \
                           f"{np.abs(resumed - whole).max(axis=(1, 2))} k={stopped.frames_done}"
        np.testing.assert_allclose(_evaluated_metres(obj, 12), whole[11], atol=1e-5)

        settings.bake_target = 'SHAPE_KEYS'
        _bake_range(obj, 1, 4)
        assert bpy.ops.face_physics.bake() == {'FINISHED'}
        keys_name = settings.shown_take
        assert len({whole_name, stopped.name, keys_name}) == 3
        assert [take.name for take in list_takes(storage.takes_folder(obj))][-3:] == [whole_name, stopped.name,
                                                                                       keys_name]
        assert storage.CACHE_MODIFIER_NAME not in obj.modifiers and "FP bake 0004" in obj.data.shape_keys.key_blocks
        for name, frame, expected in ((whole_name, 7, whole[6]), (keys_name, 3, _shown_take_positions(obj)[2]),
                                      (stopped.name, 12, whole[11])):
            settings.take_index = [item.name for item in settings.takes].index(name)
            assert bpy.ops.face_physics.show_take() == {'FINISHED'} and settings.shown_take == name
            np.testing.assert_allclose(_evaluated_metres(obj, frame), expected, atol=1e-5, err_msg=name)
        assert not [b for b in obj.data.shape_keys.key_blocks if b.name.startswith("FP bake ")]

        settings.take_index = [item.name for item in settings.takes].index(stopped.name)
        assert bpy.ops.face_physics.rename_take(new_name="resumed smile") == {'FINISHED'}
        assert settings.shown_take == "resumed smile" and obj.modifiers[0].filepath.endswith("resumed smile/result.pc2")
        np.testing.assert_allclose(_evaluated_metres(obj, 12), whole[11], atol=1e-5)
        with pytest.raises(RuntimeError, match="exists already"):
            bpy.ops.face_physics.rename_take(new_name=whole_name)
        assert bpy.ops.face_physics.free_take() == {'FINISHED'}
        assert "resumed smile" not in [item.name for item in settings.takes]
        assert not (storage.takes_folder(obj) / "resumed smile").exists() and settings.shown_take == ""
        assert storage.CACHE_MODIFIER_NAME not in obj.modifiers
    finally:
        settings.use_scene_range = True
        settings.bake_target = 'PC2'
    assert bpy.context.window_manager.face_physics_job.running is False
    assert _user_data(obj) == scene["user_data"]


def test_a_solver_error_reaches_the_user_with_its_message(scene):
    obj = scene["object"]
    model = Path(bpy.path.abspath(obj.face_physics.model_path))
    good = model.read_bytes()
    model.write_bytes(b"this is not a model")
    try:
        with pytest.raises(RuntimeError, match=r"bake \d+ frames \(FP_take_\d+\) failed: .*not"):
            bpy.ops.face_physics.bake()
    finally:
        model.write_bytes(good)
    assert "not" in bpy.context.window_manager.face_physics_job.last_error


def test_a_missing_solver_python_gives_the_install_message_not_a_traceback(scene):
    preferences = _preferences()
    preferences.solver_python = str(scene["folder"] / "no" / "python")
    try:
        assert not bpy.ops.face_physics.build.poll()
        with pytest.raises(RuntimeError, match="solver Python in the Face Physics preferences does not exist"):
            bpy.ops.face_physics.build()
        # Installing downloads packages: offered only where Blender may go online.
        assert bpy.ops.face_physics.install_solver.poll() == bpy.app.online_access
    finally:
        preferences.solver_python = sys.executable


def test_check_solver_asks_the_real_solver_python_and_shows_its_answer(addon):
    """Check Solver runs `python -m solver check` in the solver Python (a real child process)
    and the preferences show the verdict, the sparse Cholesky back end and each package."""
    from blender_addon import preferences as addon_preferences, solver_environment
    assert bpy.ops.face_physics.check_solver.poll()
    assert bpy.ops.face_physics.check_solver() == {'FINISHED'}
    answer = addon_preferences.LAST_CHECK
    assert answer["ok"] and answer["cholesky_backend"] in ("scikit-sparse", "cholespy")
    lines = solver_environment.check_summary(answer)
    assert lines[0].startswith("solver ready") and any(line.startswith("cholespy: ") for line in lines)


FITTED = ("mouthSmile_L", "mouthClose")       # mouthClose is fitted on top of jawOpen, so jawOpen comes too


@pytest.fixture(scope="module")
def fitted(scene):
    """The shape keys of FITTED (ticked in the Fit list) fitted by the Fit operator."""
    obj = scene["object"]
    settings = obj.face_physics
    assert [item.name for item in settings.fit_shapes] == [b.name for b in obj.data.shape_keys.key_blocks[1:]
                                                           if not b.name.startswith("FP bake ")]
    for item in settings.fit_shapes:
        item.selected = item.name in FITTED
    assert bpy.ops.face_physics.fit(scope='SELECTED') == {'FINISHED'}
    bpy.ops.wm.save_mainfile()
    return {"fit": Path(bpy.path.abspath(settings.fit_path))}


def test_fit_selected_fills_the_error_list_and_stores_the_fit_beside_the_model(scene, fitted):
    obj = scene["object"]
    settings = obj.face_physics
    assert settings.fit_path == f"//face_physics/scene_{obj.name}_fit.npz" and fitted["fit"].is_file()
    rows = {item.name: item for item in settings.fit_shapes}
    assert sorted(name for name, item in rows.items() if item.fitted) == ["jawOpen", "mouthClose", "mouthSmile_L"]
    with np.load(fitted["fit"], allow_pickle=False) as fit:
        for name, errors in zip(fit["shape_key_names"], fit["fit_error_mm"]):
            item = rows[str(name)]
            np.testing.assert_allclose([item.error_mean_mm, item.error_p95_mm, item.error_max_mm], errors, rtol=1e-6)
    fitted_rows = [item for item in settings.fit_shapes if item.fitted]
    assert [item.worst for item in fitted_rows].count(True) == 1
    worst = next(item for item in fitted_rows if item.worst)
    assert worst.error_mean_mm == max(item.error_mean_mm for item in fitted_rows)
    assert rows["mouthClose"].context == "jawOpen" and rows["mouthSmile_L"].error_mean_mm < 1.0
    assert _user_data(obj) == scene["user_data"]


def test_cancel_during_a_fit_leaves_the_scene_and_the_earlier_fit_untouched(scene, fitted):
    from blender_addon import workflow
    obj = scene["object"]
    settings = obj.face_physics
    fit_bytes = fitted["fit"].read_bytes()

    def state():
        return (_user_data(obj), settings.fit_path,
                [(i.name, i.selected, i.fitted, i.error_mean_mm, i.error_p95_mm, i.error_max_mm, i.worst)
                 for i in settings.fit_shapes], [b.name for b in obj.data.shape_keys.key_blocks])

    before = state()
    reports = []

    class Caller:      # what an operator provides to the shared start function
        def report(self, kind, message):
            reports.append((kind, message))

    job = workflow.start_fit_job(Caller(), bpy.context, obj, 'ALL')
    assert job is not None, reports
    written = json.loads((job.job_dir / "job.json").read_text())
    assert "shapes" not in written["settings"] and "previous_fit" not in written["inputs"], "Fit All fits afresh"
    while job.update() is None and not job.message.startswith("fitting"):
        time.sleep(0.05)
    assert job.outcome is None, job.error_message()
    job.cancel()
    assert job.wait() == 'CANCELLED'
    job.close()
    assert bpy.context.window_manager.face_physics_job.running is False
    assert state() == before
    assert fitted["fit"].read_bytes() == fit_bytes


KEYED = (("mouthSmile_L", (0.0, 1.0)), ("jawOpen", (0.0, 0.15)))


def _key_shape_keys(obj):
    """mouthSmile_L 0 → 1 and jawOpen 0 → 0.15 over the frames, in the user's own shape-key action."""
    blocks = obj.data.shape_keys.key_blocks
    for name, (start, end) in KEYED:
        for frame, value in ((CLIP[0], start), (CLIP[1], end)):
            blocks[name].value = value
            blocks[name].keyframe_insert("value", frame=frame)


def _unkey_shape_keys(obj):
    """Back to the fixture's animation: only jawOpen keyed at 0 on the first frame."""
    blocks = obj.data.shape_keys.key_blocks
    for name, _ in KEYED:
        for frame in CLIP:
            if (name, frame) != ("jawOpen", CLIP[0]):
                blocks[name].keyframe_delete("value", frame=frame)
        blocks[name].value = 0.0


def _cheek_sphere(obj, radius=0.01):
    """A UV sphere that moves into the left cheek: 0.5 mm off it on the first frame, 2 mm in on the last."""
    rest = np.array([v.co for v in obj.data.vertices])
    normals = np.array([v.normal for v in obj.data.vertices])
    with np.load(bpy.path.abspath(obj.face_physics.model_path), allow_pickle=False) as model:
        landmarks = dict(zip(model["landmark_names"], model["landmark_positions"]))
    cheek = 0.5 * (landmarks["cheekbone_L"] + landmarks["mouth_corner_L"])   # the demo head: 1 unit = 1 m
    vertex = int(np.argmin(np.linalg.norm(rest - cheek, axis=1)))
    bpy.ops.mesh.primitive_uv_sphere_add(radius=radius, segments=24, ring_count=12)
    sphere = bpy.context.active_object
    sphere.name = "finger"
    for frame, depth in ((CLIP[0], -0.0005), (CLIP[1], 0.002)):
        sphere.location = rest[vertex] + normals[vertex] * (radius - depth)
        sphere.keyframe_insert("location", frame=frame)
    bpy.context.view_layer.objects.active = obj
    return sphere


def test_bake_from_keyed_shape_keys_with_maps_and_a_collider_matches_the_solver(scene, fitted, monkeypatch,
                                                                                  tmp_path, capfd):
    obj = scene["object"]
    settings = obj.face_physics
    obj.animation_data_clear()                 # the earlier tests' muscle keyframes: only shape keys drive now
    for muscle in settings.muscles:
        muscle.activation = 0.0
    scene_range = bpy.context.scene.frame_start, bpy.context.scene.frame_end
    _key_shape_keys(obj)
    try:
        _bake_the_keyed_shape_keys(obj, monkeypatch, tmp_path, capfd)
    finally:
        _unkey_shape_keys(obj)
        bpy.context.scene.frame_start, bpy.context.scene.frame_end = scene_range
    assert _user_data(obj) == scene["user_data"]


def _bake_the_keyed_shape_keys(obj, monkeypatch, tmp_path, capfd):
    settings = obj.face_physics
    sphere = _cheek_sphere(obj)
    settings.colliders.add().collider = sphere
    settings.teeth_contact, settings.lip_contact = True, False
    settings.fat_group, settings.fat_scale = "cheek fat", 1.2
    assert bpy.ops.face_physics.palsy_preset(side='LEFT') == {'FINISHED'}
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = CLIP
    bpy.context.scene.frame_set(CLIP_MIDDLE)
    user_data = _user_data(obj)
    capfd.readouterr()

    settings.bake_target = 'PC2'
    expected = _bake_keeping_job(monkeypatch, tmp_path / "pc2")
    # The solver's warnings become Blender reports: the imported demo head has no teeth objects.
    assert "no teeth mesh" in capfd.readouterr().out
    from blender_addon import storage
    job = storage.takes_folder(obj) / settings.shown_take
    written = json.loads((Path(job) / "job.json").read_text())
    assert written["inputs"]["colliders"] == ["collider_0_finger.npz"] and "activations" not in written["inputs"]
    assert written["settings"]["collisions"] == ["teeth"] and written["settings"]["detail"] is True
    assert written["settings"]["skin_filter"] is True
    with np.load(Path(job) / "weights.npz", allow_pickle=False) as weights:
        columns = dict(zip(weights["names"], weights["weights"].T))
    for frame in range(CLIP[0], CLIP[1] + 1):     # the values the scene evaluates (Bézier keys ease)
        bpy.context.scene.frame_set(frame)
        for name in ("mouthSmile_L", "jawOpen"):
            assert columns[name][frame - CLIP[0]] == pytest.approx(obj.data.shape_keys.key_blocks[name].value)
    assert columns["mouthSmile_L"][-1] == 1.0 and set(columns) <= {"jawOpen", "mouthClose", "mouthSmile_L"}
    with np.load(Path(job) / "maps.npz", allow_pickle=False) as maps:
        assert maps["fat"].max() == 1.0 and all(name.endswith("_L") for name in maps["paralysed_muscles"])
    with np.load(Path(job) / "result.npz", allow_pickle=False) as result:
        assert result["contacts"].max() > 0, "the sphere should press on the cheek"
    assert np.abs(expected[CLIP_MIDDLE - CLIP[0]] - expected[0]).max() > 1e-3, "the smile should move the face"
    np.testing.assert_allclose(_evaluated_metres(obj, CLIP_MIDDLE), expected[CLIP_MIDDLE - CLIP[0]], atol=1e-5)
    bpy.context.scene.frame_set(CLIP_MIDDLE)
    assert _user_data(obj) == user_data

    # The user's keys are animated over the range: each baked key is the frame minus what they add.
    settings.bake_target = 'SHAPE_KEYS'
    expected = _bake_keeping_job(monkeypatch, tmp_path / "keys")
    _assert_shape_key_bake_matches(obj, expected, CLIP, CLIP_MIDDLE)
    bpy.context.scene.frame_set(CLIP_MIDDLE)
    assert _user_data(obj) == user_data
    from blender_addon import bake
    bake.apply_bake(obj, 'ACTION', expected, CLIP[0], settings.metres_per_unit)
    _assert_shape_key_bake_matches(obj, expected, CLIP, CLIP_MIDDLE)
    bake.apply_bake(obj, 'PC2', expected, CLIP[0], settings.metres_per_unit)
    bpy.context.scene.frame_set(CLIP_MIDDLE)
    assert _user_data(obj) == user_data


def test_opening_another_file_or_disabling_stops_the_running_job(tmp_path):
    """No solver outlives the file it was started for: load_pre (and disabling the add-on) cancel
    and reap the running job, and the next file shows no job running (a fresh Blender process,
    since opening a file would replace this module's scene)."""
    report = tmp_path / "load.json"
    child = subprocess.run([sys.executable, str(ROOT / "tests" / "addon_load_child.py"), str(report)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and report.is_file(), child.stderr
    results = json.loads(report.read_text())
    assert results == {"alive_before": True, "alive_after_load": False, "job_after_load": False,
                       "running_flag_after_load": False, "alive_after_disable": False}, results


def _draw_panels(tmp_path, blend, object_name, solver_python):
    report = tmp_path / "draw.json"
    child = subprocess.run([sys.executable, str(ROOT / "tests" / "addon_draw_child.py"), str(blend), object_name,
                            solver_python, str(report)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0 and report.is_file(), child.stderr
    problems = [line for line in (child.stdout + child.stderr).splitlines()
                if "rna_uiItem" in line or "not found" in line or "unknown operator" in line or "Error" in line]
    assert not problems, problems
    return json.loads(report.read_text())


@pytest.mark.parametrize("state", ["with model", "without model", "no object", "no solver"])
def test_every_panel_draws_into_a_real_layout(scene, tmp_path, state):
    blend = scene["unbuilt"] if state == "without model" else Path(bpy.data.filepath)
    bpy.ops.wm.save_mainfile()
    object_name = "" if state == "no object" else scene["object"].name
    solver_python = str(tmp_path / "missing-python") if state == "no solver" else sys.executable
    drawn = _draw_panels(tmp_path, blend, object_name, solver_python)
    panels = {entry["panel"]: entry for entry in drawn["panels"]}
    assert all("error" not in entry for entry in panels.values()), panels
    assert panels["VIEW3D_PT_face_physics_model"]["drawn"]
    assert drawn["solver_missing"] == (state == "no solver")
    expected_polled = state != "no object"
    assert all(entry["polled"] == expected_polled for name, entry in panels.items()
               if name != "VIEW3D_PT_face_physics_model")


def test_muscle_overlay_toggles_a_coloured_child_object(scene):
    from blender_addon import muscle_overlay
    obj = scene["object"]
    assert bpy.ops.face_physics.muscle_overlay() == {'FINISHED'}
    overlay = muscle_overlay.find_overlay(obj)
    assert overlay is not None and overlay.parent == obj and len(overlay.data.polygons) > 100
    assert "muscle" in overlay.data.color_attributes
    assert bpy.ops.face_physics.muscle_overlay() == {'FINISHED'}
    assert muscle_overlay.find_overlay(obj) is None
    assert _user_data(obj) == scene["user_data"]


def test_paint_map_creates_the_group_and_enters_weight_paint(scene):
    obj = scene["object"]
    settings = obj.face_physics
    previous, previous_range = settings.stiffness_group, tuple(settings.stiffness_range)
    try:
        assert bpy.ops.face_physics.paint_map(field='stiffness_group', create=True) == {'FINISHED'}
        assert settings.stiffness_group == "FacePhysics_stiffness"
        assert obj.vertex_groups.active.name == "FacePhysics_stiffness" and obj.mode == 'WEIGHT_PAINT'
        bpy.ops.object.mode_set(mode='OBJECT')
        obj.vertex_groups.active.add([0, 1], 0.25, 'REPLACE')
        settings.stiffness_range = (0.5, 4.0)
        # The raw weights and the panel's range travel; the solver makes them material.
        from blender_addon import scene_export
        maps = scene_export.export_maps(obj)
        assert maps["stiffness"][:2].tolist() == [0.25, 0.25] and maps["stiffness"][2:].max() == 0.0
        assert maps["stiffness_range"].tolist() == [0.5, 4.0]
    finally:
        bpy.ops.object.mode_set(mode='OBJECT')
        group = obj.vertex_groups.get("FacePhysics_stiffness")
        if group is not None:
            obj.vertex_groups.remove(group)
        settings.stiffness_group, settings.stiffness_range = previous, previous_range


def test_check_reports_non_arkit_names_and_the_mapping_list_fixes_them(scene):
    obj = scene["object"]
    block = obj.data.shape_keys.key_blocks["cheekPuff"]
    try:
        block.name = "puffy cheeks"
        assert bpy.ops.face_physics.map_shape_key_names() == {'FINISHED'}
        mappings = obj.face_physics.name_mappings
        assert [item.name for item in mappings] == ["puffy cheeks"]
        from blender_addon import scene_export
        _, findings = scene_export.export_rig(bpy.context, obj)
        assert any("puffy cheeks" in finding.message for finding in findings)
        mappings[0].arkit_name = "cheekPuff"
        rig, findings = scene_export.export_rig(bpy.context, obj)
        assert not findings and "cheekPuff" in list(rig["shape_key_names"])
        assert bpy.ops.face_physics.check() == {'FINISHED'}
    finally:
        block.name = "cheekPuff"
        obj.face_physics.name_mappings.clear()


# --------------------------------------------------------------------------- fat preview, painted lips, deforming props

def _preview_jobs(monkeypatch, folder):
    """Keep the next jobs' folders under `folder`; returns a function listing them."""
    folder.mkdir(parents=True)
    monkeypatch.setenv("FACE_PHYSICS_KEEP_JOBS", "1")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return lambda: sorted(glob.glob(str(folder / "face_physics_job_*")), key=os.path.getmtime)


def _mesh_positions(mesh) -> np.ndarray:
    co = np.empty(len(mesh.vertices) * 3, dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64)


def test_fat_preview_shows_the_fattened_neutral_face_on_its_own_object(scene, monkeypatch, tmp_path):
    from blender_addon import fat_preview, scene_export
    obj = scene["object"]
    settings = obj.face_physics
    settings.fat_group, settings.fat_scale, settings.fat_softening = "cheek fat", 1.3, 0.5
    settings.diffusion_spread_mm = 9.0
    jobs_made = _preview_jobs(monkeypatch, tmp_path / "jobs")
    try:
        assert bpy.ops.face_physics.fat_preview() == {'FINISHED'}
        (job,) = jobs_made()
        written = json.loads((Path(job) / "job.json").read_text())
        assert written["settings"]["fat_softening"] == 0.5
        assert written["settings"]["diffusion_spread_m"] == pytest.approx(0.009)
        assert written["settings"]["fat_scale"] == pytest.approx(1.3) and "maps" in written["inputs"]
        with np.load(Path(job) / "activations.npz", allow_pickle=False) as activations:
            np.testing.assert_array_equal(activations["muscle_contraction"], 1.0)     # one neutral frame
            assert activations["muscle_contraction"].shape[0] == 1
        with np.load(Path(job) / "result.npz", allow_pickle=False) as result:
            simulated = result["skin_positions"][0] / settings.metres_per_unit

        preview = fat_preview.find_preview(obj)
        assert preview is not None and preview.name == f"{obj.name} FP fat preview" and preview.parent == obj
        shown = _mesh_positions(preview.data)
        np.testing.assert_allclose(shown, simulated, atol=1e-6)
        assert len(preview.data.polygons) == len(obj.data.polygons) and preview.location.x > 0
        moved = np.linalg.norm(shown - scene_export.rest_coordinates(obj.data), axis=1)
        fat = scene_export.vertex_group_weights(obj, "cheek fat")
        x = scene_export.rest_coordinates(obj.data)[:, 0]
        far = x < np.percentile(x, 20)
        assert moved[fat > 0].max() > 1e-3, "the painted cheek should swell by over a millimetre"
        assert moved[fat > 0].mean() > 3 * moved[far].mean()
        assert _user_data(obj) == scene["user_data"]

        settings.fat_scale = 1.1              # a second preview replaces the first
        assert bpy.ops.face_physics.fat_preview() == {'FINISHED'}
        previews = [child for child in obj.children if child.get(fat_preview.PREVIEW_TAG) == obj.name]
        assert len(previews) == 1 and previews[0].name == f"{obj.name} FP fat preview"
        assert not [mesh for mesh in bpy.data.meshes if mesh.name.startswith(f"{obj.name} FP fat preview.")]
        smaller = np.linalg.norm(_mesh_positions(previews[0].data) - scene_export.rest_coordinates(obj.data), axis=1)
        assert smaller[fat > 0].max() < moved[fat > 0].max()
        assert _user_data(obj) == scene["user_data"]

        bpy.ops.wm.save_mainfile()            # the Fat panel draws with its preview row
        drawn = _draw_panels(tmp_path, Path(bpy.data.filepath), obj.name, sys.executable)
        assert all("error" not in entry for entry in drawn["panels"])
        assert bpy.ops.face_physics.fat_preview_remove() == {'FINISHED'}
        assert fat_preview.find_preview(obj) is None and not bpy.ops.face_physics.fat_preview_remove.poll()
        assert _user_data(obj) == scene["user_data"]
    finally:
        fat_preview.remove_preview(obj)
        settings.fat_softening, settings.diffusion_spread_mm = 1.0, 1000 * maps.MapSettings().spread_m


def test_the_fat_preview_button_says_what_it_needs(scene):
    obj = scene["object"]
    settings = obj.face_physics
    group = settings.fat_group
    bpy.ops.mesh.primitive_cube_add()
    unbuilt = bpy.context.active_object
    try:
        with pytest.raises(RuntimeError, match=r"Build the model first \(Model panel\)"):
            bpy.ops.face_physics.fat_preview()
        bpy.context.view_layer.objects.active = obj
        settings.fat_group = ""
        with pytest.raises(RuntimeError, match="Choose or paint a fat map first"):
            bpy.ops.face_physics.fat_preview()
    finally:
        settings.fat_group = group
        bpy.data.objects.remove(unbuilt)
        bpy.context.view_layer.objects.active = obj


class _Reports:      # what an operator provides to the shared job functions
    def __init__(self):
        self.reports = []

    def report(self, kind, message):
        self.reports.append((kind, message))


def test_a_bake_applies_where_it_was_started_whatever_changes_meanwhile(scene):
    """The frame range, bake target and units are read once, when the bake starts (its BakePlan):
    changing them while the solver runs does not move or retarget the frames."""
    from blender_addon import cli, workflow
    obj = scene["object"]
    settings = obj.face_physics
    saved = (settings.use_scene_range, settings.frame_start, settings.frame_end, settings.bake_target)
    settings.use_scene_range, settings.frame_start, settings.frame_end, settings.bake_target = False, 7, 8, 'PC2'
    try:
        job = workflow.start_bake_job(_Reports(), bpy.context, obj)
        assert job is not None and job.plan.first_frame == 7 and job.plan.target == 'PC2'
        settings.frame_start, settings.frame_end, settings.bake_target = 1, 3, 'SHAPE_KEYS'
        keys_before = len(obj.data.shape_keys.key_blocks)
        assert cli._waited(obj, job)
        assert workflow.apply_bake(job) == 2
        job.close()
        modifier = obj.modifiers["Face Physics cache"]
        assert modifier.frame_start == pytest.approx(7.0)
        assert len(obj.data.shape_keys.key_blocks) == keys_before, "no shape keys for a PC2 bake"
    finally:
        settings.use_scene_range, settings.frame_start, settings.frame_end, settings.bake_target = saved


def test_painted_lip_groups_replace_the_solvers_automatic_lips(scene):
    import io
    from blender_addon import job_files, workflow
    from solver import jobs
    from solver.requests import animate as animate_request
    from solver.collisions.lips import find_lip_surfaces
    from solver.model_file import load_model
    obj = scene["object"]
    settings = obj.face_physics
    model = load_model(bpy.path.abspath(settings.model_path))
    automatic = find_lip_surfaces(model)
    upper, lower = obj.vertex_groups.new(name="FP_lip_upper"), obj.vertex_groups.new(name="FP_lip_lower")
    upper.add([int(i) for i in automatic.upper_vertices], 1.0, 'REPLACE')
    lower.add([int(i) for i in automatic.lower_vertices], 0.8, 'REPLACE')
    lower.add([int(automatic.upper_vertices[0])], 0.3, 'REPLACE')          # under the 0.5 threshold: not a lip
    saved = (settings.use_scene_range, settings.frame_start, settings.frame_end, settings.teeth_contact,
             settings.lip_contact, [item.collider for item in settings.colliders])
    settings.use_scene_range, settings.frame_start, settings.frame_end = False, 1, 2
    settings.teeth_contact, settings.lip_contact = False, True
    settings.colliders.clear()
    job_dir = None
    try:
        caller = _Reports()
        job_dir = workflow.write_bake_job(caller, bpy.context, obj)
        assert job_dir is not None, caller.reports
        job = jobs.read_job(job_dir)
        assert job["inputs"]["lip_vertices"].name == job_files.LIP_VERTICES_FILE
        assert job["settings"]["fat_softening"] == pytest.approx(settings.fat_softening)
        collision_scene = animate_request.collision_scene(model, jobs.JobMessages(io.StringIO()),
                                                          job["request"].collisions,
                                                          lip_vertices=job["inputs"]["lip_vertices"])
        assert collision_scene.lips.source == "vertex groups"
        np.testing.assert_array_equal(collision_scene.lips.upper_vertices, automatic.upper_vertices)
        np.testing.assert_array_equal(collision_scene.lips.lower_vertices, automatic.lower_vertices)
        job_files.remove_job_folder(job_dir)

        for index in range(len(obj.data.vertices)):        # an empty lower lip stops the bake with the reason
            lower.remove([index])
        caller = _Reports()
        job_dir = workflow.write_bake_job(caller, bpy.context, obj)
        assert job_dir is None and any("FP_lip_lower has no vertex" in message for _, message in caller.reports)
        obj.vertex_groups.remove(lower)                     # one group alone: automatic lips, with a warning
        caller = _Reports()
        job_dir = workflow.write_bake_job(caller, bpy.context, obj)
        assert job_dir is not None and "lip_vertices" not in jobs.read_job(job_dir)["inputs"]
        assert any("found automatically" in message for _, message in caller.reports)
    finally:
        if job_dir is not None:
            job_files.remove_job_folder(job_dir)
        for name in ("FP_lip_upper", "FP_lip_lower"):
            if obj.vertex_groups.get(name) is not None:
                obj.vertex_groups.remove(obj.vertex_groups[name])
        (settings.use_scene_range, settings.frame_start, settings.frame_end, settings.teeth_contact,
         settings.lip_contact, colliders) = saved
        settings.colliders.clear()
        for collider in colliders:
            settings.colliders.add().collider = collider
    assert _user_data(obj) == scene["user_data"]


def test_a_deforming_collider_is_exported_frame_by_frame_and_a_rigid_one_once(scene):
    from blender_addon import scene_export
    from solver.collisions import MeshCollider
    obj = scene["object"]
    settings = obj.face_physics
    saved = [item.collider for item in settings.colliders]
    made = []
    try:
        bpy.ops.mesh.primitive_uv_sphere_add(radius=0.01, segments=16, ring_count=8, location=(0.3, 0.0, 0.0))
        balloon = bpy.context.active_object
        balloon.shape_key_add(name="Basis")
        inflate = balloon.shape_key_add(name="inflate", from_mix=False)
        for point in inflate.data:
            point.co = point.co * 1.5
        for frame, value in ((FRAMES[0], 0.0), (FRAMES[1], 1.0)):
            inflate.value = value
            inflate.keyframe_insert("value", frame=frame)
        bpy.ops.mesh.primitive_uv_sphere_add(radius=0.01, segments=16, ring_count=8, location=(0.3, 0.1, 0.0))
        ball = bpy.context.active_object
        for frame, y in ((FRAMES[0], 0.1), (FRAMES[1], 0.12)):
            ball.location.y = y
            ball.keyframe_insert("location", frame=frame)
        made = [balloon, ball]
        bpy.context.view_layer.objects.active = obj
        settings.colliders.clear()
        for collider in made:
            settings.colliders.add().collider = collider
        samples = scene_export.sample_frames(bpy.context, obj, *FRAMES)
        metres = settings.metres_per_unit
        arrays, findings = scene_export.collider_arrays(obj, samples, metres)
        assert not findings, findings
        (balloon_name, deforming), (ball_name, rigid) = arrays
        frames = FRAMES[1] - FRAMES[0] + 1
        assert (balloon_name, ball_name) == (balloon.name, ball.name)
        assert deforming["vertices"].shape == (frames, len(balloon.data.vertices), 3)
        np.testing.assert_array_equal(deforming["transforms"], np.tile(np.eye(4), (frames, 1, 1)))
        to_skin = np.array(obj.matrix_world.inverted() @ balloon.matrix_world)
        centre = to_skin[:3, 3] * metres
        radius = np.linalg.norm(deforming["vertices"] - centre, axis=2).mean(axis=1)
        assert radius[0] == pytest.approx(0.01 * metres, rel=1e-3) and radius[-1] == pytest.approx(0.015 * metres,
                                                                                                    rel=1e-3)
        assert np.all(np.diff(radius) > 0)
        assert rigid["vertices"].shape == (len(ball.data.vertices), 3) and rigid["transforms"].shape == (frames, 4, 4)
        assert np.linalg.norm(rigid["transforms"][-1, :3, 3]) == pytest.approx(0.02 * metres, rel=1e-4)
        for name, collider in arrays:                      # both pass the solver's own validation
            loaded = MeshCollider(name, collider["vertices"], collider["faces"], collider["transforms"])
            assert loaded.deforming == (name == balloon_name)
    finally:
        settings.colliders.clear()
        for collider in saved:
            settings.colliders.add().collider = collider
        for collider in made:
            bpy.data.objects.remove(collider)
        bpy.context.view_layer.objects.active = obj
    assert _user_data(obj) == scene["user_data"]
