"""Corrective shape keys in the real `bpy` (issue 42): a synthetic CORR.npz written with the
solver's save_correctives on a small shape-keyed mesh; Add Corrective Keys makes corr_ keys whose
drivers evaluate (depsgraph, evaluated mesh) to the solver's `CorrectedRig.frame` within 1e-6 m for
several weight vectors; add/re-add/remove leave the user's keys bit-identical; a mismatched CORR
gives a clear error; glTF and FBX exports carry the corr_ morph targets and their driven weights."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
import addon_utils  # noqa: E402  (comes with bpy)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.correctives.corr_file import CorrectedRig, save_correctives  # noqa: E402

ADDON = "blender_addon"
USER_KEYS = ("jawOpen", "mouthSmile_L", "mouthPucker", "browUp")
CORRECTED = ("jawOpen", "mouthSmile_L", "mouthPucker")
TERMS = (("jawOpen", ""), ("mouthSmile_L", ""), ("jawOpen", "jawOpen"), ("mouthPucker", "mouthPucker"),
         ("jawOpen", "mouthSmile_L"), ("mouthSmile_L", "mouthPucker"), ("jawOpen", "mouthPucker"))
UNIT_SCALE, OBJECT_SCALE = 0.01, 2.0        # local units of 2 cm: the offsets must be converted


def _smooth_field(points, rng, size_m):
    """A smooth random (V, 3) field: a few low-frequency sines over the mesh."""
    field = np.zeros_like(points)
    for _ in range(3):
        frequency, phase = rng.normal(size=(3, 3)) * 2.0, rng.uniform(0, 2 * np.pi, size=3)
        field += np.sin(points @ frequency + phase) * size_m
    return field


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable(ADDON, default_set=True, handle_error=None)
    folder = tmp_path_factory.mktemp("correctives_addon")
    bpy.context.scene.unit_settings.scale_length = UNIT_SCALE
    bpy.ops.mesh.primitive_grid_add(x_subdivisions=24, y_subdivisions=24, size=4.0)
    obj = bpy.context.active_object
    obj.scale = (OBJECT_SCALE,) * 3
    obj.shape_key_add(name="Basis", from_mix=False)
    rng = np.random.default_rng(42)
    basis = np.array([vertex.co for vertex in obj.data.vertices])
    for name in USER_KEYS:
        block = obj.shape_key_add(name=name, from_mix=False)
        block.data.foreach_set("co", (basis + _smooth_field(basis, rng, 0.2)).astype(np.float32).ravel())
    bpy.context.view_layer.update()
    yield {"object": obj, "folder": folder, "rng": rng}
    addon_utils.disable(ADDON, default_set=True)


def _corr_arrays(rig, rng, key_names=CORRECTED, terms=TERMS):
    points = rig["vertices"] / np.ptp(rig["vertices"], axis=0).max()
    pairs = np.array([(a, b) for i, a in enumerate(key_names) for b in key_names[i + 1:]], dtype=str)
    return {"key_names": np.array(key_names, dtype=str), "term_names": np.array(terms, dtype=str),
            "terms": np.stack([_smooth_field(points, rng, 0.002) for _ in terms]).astype(np.float32),
            "vertex_count": np.array(len(rig["vertices"])), "pairs": pairs,
            "probe_deviation_mm": np.ones(len(pairs)), "pair_kept": np.ones(len(pairs), dtype=bool),
            "threshold_mm": np.array(0.5), "sample_weights": np.zeros((1, len(key_names))),
            "sample_error_mm": np.zeros(1), "sample_linear_error_mm": np.zeros(1), "sample_in_fit": np.ones(1, bool)}


def _user_keys(obj) -> dict:
    """Everything of the user's keys that must stay bit-identical."""
    state = {}
    for block in obj.data.shape_keys.key_blocks:
        if block.name.startswith("corr_"):
            continue
        co = np.empty(len(block.data) * 3, dtype=np.float32)
        block.data.foreach_get("co", co)
        state[block.name] = (co.tobytes(), block.value, block.slider_min, block.slider_max, block.mute,
                             block.relative_key.name, block.vertex_group, block.interpolation)
    return state


def _evaluated_positions(obj) -> np.ndarray:
    depsgraph = bpy.context.evaluated_depsgraph_get()
    depsgraph.update()
    mesh = obj.evaluated_get(depsgraph).data
    co = np.empty(len(mesh.vertices) * 3, dtype=np.float32)
    mesh.vertices.foreach_get("co", co)
    return co.reshape(-1, 3).astype(np.float64)


def _rig_and_file(scene, name="CORR.npz", **changes):
    from blender_addon import scene_export
    rig, _ = scene_export.export_rig(bpy.context, scene["object"])
    arrays = _corr_arrays(rig, scene["rng"], **changes)
    path = scene["folder"] / name
    save_correctives(path, arrays)
    return rig, arrays, path


def test_drivers_evaluate_to_the_solvers_corrected_rig(scene):
    from blender_addon import corrective_keys, scene_export
    obj = scene["object"]
    rig, arrays, path = _rig_and_file(scene)
    metres = scene_export.metres_per_unit(bpy.context, obj)[0]
    assert metres == pytest.approx(UNIT_SCALE * OBJECT_SCALE)
    before = _user_keys(obj)
    assert bpy.ops.face_physics.add_corrective_keys(filepath=str(path)) == {'FINISHED'}
    names = corrective_keys.our_key_names(obj)
    assert names == [corrective_keys.corrective_name(a, b) for a, b in TERMS]
    for curve in obj.data.shape_keys.animation_data.drivers:
        assert curve.driver.is_simple_expression, curve.data_path     # no Python: runs without auto-run
    # The Fit list and the rig export see the user's keys only, never the correctives.
    assert [block.name for block in scene_export.user_key_blocks(obj)] == list(USER_KEYS)
    corrected = CorrectedRig(rig["vertices"], rig["shape_key_deltas"], rig["shape_key_names"], arrays)
    worst = 0.0
    for weights in ([0, 0, 0, 0], [1, 0, 0, 0], [0.3, 0.8, 0, 0], [1, 1, 1, 1], [0.25, 0.5, 0.75, 0.1],
                    [0.9, 0.05, 0.6, 1.0]):
        for name, value in zip(USER_KEYS, weights):
            obj.data.shape_keys.key_blocks[name].value = value
        skin_m = _evaluated_positions(obj) * metres
        expected = corrected.frame(np.array(weights, dtype=np.float64))
        worst = max(worst, np.abs(skin_m - expected).max())
    print(f"\nworst |Blender − CorrectedRig.frame| over 6 weight vectors: {worst:.2e} m "
          f"({len(rig['vertices'])} vertices, {len(TERMS)} corrective keys)")
    assert worst <= 1e-6
    user_values = {name: obj.data.shape_keys.key_blocks[name].value for name in USER_KEYS}
    assert _user_keys(obj) == {name: (state[0], user_values.get(name, state[1]), *state[2:])
                               for name, state in before.items()}


def test_readd_and_remove_leave_the_user_keys_bit_identical(scene):
    from blender_addon import corrective_keys
    obj = scene["object"]
    _, _, path = _rig_and_file(scene, "CORR2.npz", terms=TERMS[:3])
    before = _user_keys(obj)
    corrective_keys.add_from_file(bpy.context, obj, path)      # replaces the earlier keys
    assert corrective_keys.our_key_names(obj) == [corrective_keys.corrective_name(a, b) for a, b in TERMS[:3]]
    assert len([block for block in obj.data.shape_keys.key_blocks if block.name.startswith("corr_")]) == 3
    assert len(obj.data.shape_keys.animation_data.drivers) == 3
    assert _user_keys(obj) == before
    assert bpy.ops.face_physics.remove_corrective_keys() == {'FINISHED'}
    assert not [block for block in obj.data.shape_keys.key_blocks if block.name.startswith("corr_")]
    assert len(obj.data.shape_keys.animation_data.drivers) == 0
    assert _user_keys(obj) == before


def test_mismatched_correctives_give_a_clear_error(scene):
    from blender_addon import corrective_keys
    obj = scene["object"]
    before = _user_keys(obj)
    _, arrays, _ = _rig_and_file(scene)
    wrong_count = dict(arrays, vertex_count=np.array(10), terms=arrays["terms"][:, :10])
    save_correctives(scene["folder"] / "wrong_count.npz", wrong_count)
    with pytest.raises(corrective_keys.CorrectiveKeysError, match="made for a mesh of 10 vertices.*Fix"):
        corrective_keys.add_from_file(bpy.context, obj, scene["folder"] / "wrong_count.npz")
    _, _, path = _rig_and_file(scene, "other_keys.npz", key_names=("jawOpen", "cheekPuff"),
                               terms=(("jawOpen", "cheekPuff"),))
    with pytest.raises(corrective_keys.CorrectiveKeysError, match="cheekPuff.*not shape keys.*Fix"):
        corrective_keys.add_from_file(bpy.context, obj, path)
    (scene["folder"] / "not.npz").write_bytes(b"not a zip")
    with pytest.raises(corrective_keys.CorrectiveKeysError, match="not a readable"):
        corrective_keys.add_from_file(bpy.context, obj, scene["folder"] / "not.npz")
    with pytest.raises(RuntimeError, match="cheekPuff"):       # the operator reports it as an error
        bpy.ops.face_physics.add_corrective_keys(filepath=str(path))
    mine = obj.shape_key_add(name="corr_jawOpen", from_mix=False)       # the user's own corr_ key
    _, _, good = _rig_and_file(scene, "good.npz")
    with pytest.raises(corrective_keys.CorrectiveKeysError, match="did not add"):
        corrective_keys.add_from_file(bpy.context, obj, good)
    obj.shape_key_remove(mine)
    assert not corrective_keys.our_key_names(obj) and _user_keys(obj) == before


def _gltf_weights(path: Path):
    """(target names, the last animation sample's morph weights) of a .gltf with its .bin."""
    document = json.loads(path.read_text())
    data = (path.parent / document["buffers"][0]["uri"]).read_bytes()

    def accessor(index):
        found = document["accessors"][index]
        view = document["bufferViews"][found["bufferView"]]
        offset = view.get("byteOffset", 0) + found.get("byteOffset", 0)
        width = {"SCALAR": 1, "VEC3": 3, "VEC4": 4}[found["type"]]
        return np.frombuffer(data, dtype=np.float32, count=found["count"] * width, offset=offset)

    names = document["meshes"][0]["extras"]["targetNames"]
    for animation in document.get("animations", []):
        for channel in animation["channels"]:
            if channel["target"]["path"] == "weights":
                sampler = animation["samplers"][channel["sampler"]]
                times = accessor(sampler["input"])
                return names, accessor(sampler["output"]).reshape(len(times), -1)[-1]
    return names, None


def test_gltf_and_fbx_carry_the_correctives_and_their_driven_weights(scene):
    """Both exporters write the corr_ morph targets and bake the drivers' values into the
    exported animation themselves (glTF samples every frame; FBX bakes the scene's animation
    when "All Actions" is off): a game engine plays the corrected rig from the file alone."""
    from blender_addon import corrective_keys
    obj = scene["object"]
    _, _, path = _rig_and_file(scene, "export.npz")
    names = corrective_keys.add_from_file(bpy.context, obj, path)[0]
    blocks = obj.data.shape_keys.key_blocks
    for frame, (jaw, smile) in ((1, (0.0, 0.0)), (10, (0.8, 0.5))):
        for name, value in (("jawOpen", jaw), ("mouthSmile_L", smile), ("mouthPucker", 0.25)):
            blocks[name].value = value
            blocks[name].keyframe_insert("value", frame=frame)
    bpy.context.scene.frame_start, bpy.context.scene.frame_end = 1, 10
    expected = {"jawOpen": 0.8, "mouthSmile_L": 0.5, "corr_jawOpen": 0.8, "corr_jawOpen__jawOpen": 0.64,
                "corr_jawOpen__mouthSmile_L": 0.4, "corr_mouthSmile_L__mouthPucker": 0.125,
                "corr_jawOpen__mouthPucker": 0.2, "corr_mouthPucker__mouthPucker": 0.0625}
    bpy.ops.object.select_all(action='DESELECT')
    obj.select_set(True)
    try:
        gltf = scene["folder"] / "face.gltf"
        assert bpy.ops.export_scene.gltf(filepath=str(gltf), export_format='GLTF_SEPARATE', use_selection=True,
                                         export_morph=True, export_animations=True) == {'FINISHED'}
        targets, weights = _gltf_weights(gltf)
        assert set(names) <= set(targets) and set(USER_KEYS) <= set(targets)
        exported = dict(zip(targets, weights))
        for name, value in expected.items():
            assert exported[name] == pytest.approx(value, abs=1e-6), name
        fbx = scene["folder"] / "face.fbx"
        assert bpy.ops.export_scene.fbx(filepath=str(fbx), use_selection=True, bake_anim=True,
                                        bake_anim_use_all_actions=False, bake_anim_use_nla_strips=False) == {'FINISHED'}
        before = set(bpy.data.objects)
        assert bpy.ops.import_scene.fbx(filepath=str(fbx)) == {'FINISHED'}
        imported = next(o for o in set(bpy.data.objects) - before if o.type == 'MESH')
        bpy.context.scene.frame_set(1)
        imported_blocks = imported.data.shape_keys.key_blocks
        start = {name: imported_blocks[name].value for name in expected}
        assert all(value == pytest.approx(0.0, abs=1e-6) for name, value in start.items()
                   if "mouthPucker" not in name)
        bpy.context.scene.frame_set(10)
        # The file's own values, which FBX's frame timing may shift a little: the corrective
        # weights must be the products of the user weights the file carries.
        value = {name: block.value for name, block in imported_blocks.items()}
        assert value["jawOpen"] > 0.5
        assert value["corr_jawOpen__mouthSmile_L"] == pytest.approx(value["jawOpen"] * value["mouthSmile_L"], abs=1e-3)
        assert value["corr_jawOpen__jawOpen"] == pytest.approx(value["jawOpen"] ** 2, abs=1e-3)
        for created in set(bpy.data.objects) - before:
            bpy.data.objects.remove(created)
    finally:
        obj.data.shape_keys.animation_data_clear()
        bpy.context.scene.frame_set(1)
        corrective_keys.remove_corrective_keys(obj)
