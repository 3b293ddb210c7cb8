"""Repainted shell stiffness in the add-on, in the real `bpy` module with the real solver child:
the FP_shell_* groups go back to the solver as STIFFNESS.npz only when they differ from the
fitted maps, repainting FP_shell_strain in one region changes the baked take there and not far
away, and Stiffness Map from Shell writes its own group as the volumetric stiffness map. The shell
is made without a fit (tests/shell_sheets.py `shell_from_rig`: uniform stiffness 1) to keep this
quick. Every process has a timeout."""
from __future__ import annotations

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

TRIANGLES = 500
REGION_SHARE = 0.15           # the repainted region: within this share of the head's size of the jaw's mover


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shell_stiffness")
    obj, _ = demo_head_scene(folder)
    from blender_addon import shell_operators, storage
    from shell_sheets import shell_from_rig
    from solver.rig import load_rig
    from solver.shell.shell_file import save_shell
    rig = load_rig(folder / "head.npz")
    assert len(rig.vertices) == len(obj.data.vertices)
    shell = shell_from_rig(rig, TRIANGLES)
    path = shell_operators.shell_path(obj)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_shell(path, shell)
    obj.face_physics_shell.shell_path = storage.relative(path)
    bpy.context.view_layer.objects.active = obj
    jaw = np.linalg.norm(rig.shape_key_deltas[list(rig.shape_key_names).index("jawOpen")], axis=1)
    yield {"object": obj, "folder": folder, "rig": rig, "jaw_motion": jaw}
    addon_utils.disable(ADDON, default_set=True)


def _user_groups(obj) -> dict:
    return {group.name: group_weights(obj, group.name) for group in obj.vertex_groups
            if not group.name.startswith("FP_")}


def _bake(obj) -> np.ndarray:
    from blender_addon import storage, take_folders
    assert bpy.ops.face_physics.shell_bake() == {'FINISHED'}
    settings = obj.face_physics
    take = settings.takes[settings.take_index]
    assert take.status == "finished"
    folder = [item for item in take_folders.list_takes(storage.takes_folder(obj)) if item.name == take.name][0].folder
    with np.load(folder / "result.npz", allow_pickle=False) as result:
        return result["skin_positions"], sorted(path.name for path in folder.iterdir())


def test_groups_go_back_only_when_repainted_and_repainting_changes_the_take_there(scene):
    from blender_addon import shell_maps, shell_operators
    obj, rig = scene["object"], scene["rig"]
    path = bpy.path.abspath(obj.face_physics_shell.shell_path)
    arrays, said = shell_operators.repainted_stiffness_arrays(obj, path)
    assert arrays is None and "no FP_shell_" in said
    scene_ = bpy.context.scene
    scene_.frame_start, scene_.frame_end = 1, 8
    key = obj.data.shape_keys.key_blocks["jawOpen"]
    key.value = 0.0
    key.keyframe_insert("value", frame=1)
    key.value = 1.0
    key.keyframe_insert("value", frame=5)
    bpy.ops.wm.save_mainfile()
    # The groups as Fit Stiffness writes them (the shell's own uniform maps), with a wide range so
    # a repaint can reach 10×: weight 0.5 is 1 N/m between 0.1 and 10.
    shell_operators.write_map_groups(obj, *shell_maps.read_fine_maps(path))
    settings = obj.face_physics_shell
    settings.strain_range = settings.bending_range = (0.1, 10.0)
    assert np.allclose(group_weights(obj, shell_maps.STRAIN_GROUP), 0.5)
    arrays, said = shell_operators.repainted_stiffness_arrays(obj, path)
    assert arrays is None and "as fitted" in said
    plain, files = _bake(obj)
    assert shell_maps.STIFFNESS_FILE not in files

    # Repaint FP_shell_strain to weight 1 (10 N/m, 10× the shell's) round the vertex jawOpen moves most.
    rest = np.asarray(rig.vertices)
    size = np.ptp(rest, axis=0).max()
    centre = rest[np.argmax(scene["jaw_motion"])]
    distance = np.linalg.norm(rest - centre, axis=1)
    region = np.flatnonzero(distance < REGION_SHARE * size)
    before = _user_groups(obj)
    obj.vertex_groups[shell_maps.STRAIN_GROUP].add(region.tolist(), 1.0, 'REPLACE')
    arrays, said = shell_operators.repainted_stiffness_arrays(obj, path)
    assert "repainted FP_shell_strain" in said and "FP_shell_bending as fitted" in said
    assert np.allclose(arrays["strain"][region], 10.0) and np.allclose(np.delete(arrays["strain"], region), 1.0)
    assert np.allclose(arrays["bending"], 1.0)
    repainted, files = _bake(obj)
    assert shell_maps.STIFFNESS_FILE in files
    change = np.linalg.norm(repainted - plain, axis=2).max(axis=0)            # (V,) over the frames
    far = distance > 3 * REGION_SHARE * size
    motion = np.linalg.norm(plain - plain[0], axis=2).max()
    print(f"{len(region)} repainted vertices; largest motion {motion * 1e3:.2f} mm, change in the region "
          f"{change[region].max() * 1e3:.3f} mm, far away {change[far].max() * 1e3:.2e} mm")
    assert change[region].max() > 0.005 * motion              # measured 0.32 mm of 26 mm
    assert change[far].max() < 0.1 * change[region].max()
    assert _user_groups(obj).keys() == before.keys()
    for name in before:
        assert np.array_equal(_user_groups(obj)[name], before[name])


def test_stiffness_map_from_shell_writes_its_own_group_as_the_stiffness_map(scene):
    from blender_addon import shell_maps, solver_numbers
    obj = scene["object"]
    before = _user_groups(obj)
    count = len(obj.vertex_groups) + (shell_maps.TISSUE_GROUP not in obj.vertex_groups)
    for _ in range(2):                      # the second run replaces the first group, it adds none
        assert bpy.ops.face_physics.shell_tissue_map() == {'FINISHED'}
        assert len(obj.vertex_groups) == count
        assert not any(group.name.endswith(".fp_new") for group in obj.vertex_groups)
    settings = obj.face_physics
    assert settings.stiffness_group == shell_maps.TISSUE_GROUP
    low, high = settings.stiffness_range
    weights = group_weights(obj, shell_maps.TISSUE_GROUP)
    multiplier = low + weights * (high - low)
    # The strain map as painted now (the previous test's repaint, if it ran; else uniform).
    strain = shell_maps.stiffness_from_weights(group_weights(obj, shell_maps.STRAIN_GROUP),
                                               *obj.face_physics_shell.strain_range) \
        if shell_maps.STRAIN_GROUP in obj.vertex_groups else np.ones(len(weights))
    relative = np.clip(strain / np.exp(np.log(strain).mean()), *solver_numbers.PAINTED_MULTIPLIER_LIMITS)
    assert np.allclose(multiplier, relative, rtol=1e-5)
    after = _user_groups(obj)
    assert after.keys() == before.keys()
    for name in before:
        assert np.array_equal(after[name], before[name])


def test_the_tissue_weights_are_the_relative_stiffness():
    from blender_addon import shell_maps
    strain = np.array([1.0, 10.0, 100.0])
    weights, (low, high) = shell_maps.tissue_stiffness_weights(strain, (0.01, 100.0))
    assert np.allclose(low + weights * (high - low), [0.1, 1.0, 10.0])
    weights, (low, high) = shell_maps.tissue_stiffness_weights(np.full(4, 5.0), (0.01, 100.0))
    assert np.allclose(low + weights * (high - low), 1.0) and high > low
    weights, (low, high) = shell_maps.tissue_stiffness_weights(np.array([1e-6, 1.0, 1e6]), (0.01, 100.0))
    assert (low, high) == (0.01, 100.0)
    with pytest.raises(ValueError, match="positive"):
        shell_maps.tissue_stiffness_weights(np.array([1.0, 0.0]), (0.01, 100.0))
