"""Presets: tissue settings through Blender's preset system (bundled presets listed beside the
user's, saving into the user's folder only) and the shape-key naming presets (the tables and
their matching without Blender, then the operator in real bpy)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blender_addon import naming_presets, preflight  # noqa: E402

BUNDLED_DIR = ROOT / "blender_addon" / "presets" / "face_physics" / "tissue"
NUMBERS = json.loads((ROOT / "solver" / "physics" / "settings.json").read_text())


# ---- naming tables, no Blender ----

@pytest.mark.parametrize("convention", sorted(naming_presets.TABLES))
def test_each_table_names_arkit_shapes_once_and_its_keys_never_collide(convention):
    table = naming_presets.TABLES[convention]
    assert set(table.values()) <= set(preflight.ARKIT_SHAPE_KEYS)
    assert len(set(table.values())) == len(table)                       # one shape key per ARKit name
    keys = [naming_presets.matching_key(name) for name in table]
    assert len(set(keys)) == len(keys)
    # ARKit's own names, accepted by every convention, never mean another shape in this one.
    arkit = {naming_presets.matching_key(name): name for name in preflight.ARKIT_SHAPE_KEYS}
    assert all(arkit[key] == table[own] for key, own in zip(keys, table) if key in arkit)


def test_ict_table_covers_the_ict_facekit_expressions_it_can():
    """The 53 names of ICT's generic face (as tests/ict_data.py reads them), less the four that
    split one ARKit shape into sides."""
    ict = ["browDown_L", "browDown_R", "browInnerUp_L", "browInnerUp_R", "browOuterUp_L", "browOuterUp_R",
           "cheekPuff_L", "cheekPuff_R", "cheekSquint_L", "cheekSquint_R", "eyeBlink_L", "eyeBlink_R",
           "eyeLookDown_L", "eyeLookDown_R", "eyeLookIn_L", "eyeLookIn_R", "eyeLookOut_L", "eyeLookOut_R",
           "eyeLookUp_L", "eyeLookUp_R", "eyeSquint_L", "eyeSquint_R", "eyeWide_L", "eyeWide_R", "jawForward",
           "jawLeft", "jawOpen", "jawRight", "mouthClose", "mouthDimple_L", "mouthDimple_R", "mouthFrown_L",
           "mouthFrown_R", "mouthFunnel", "mouthLeft", "mouthLowerDown_L", "mouthLowerDown_R", "mouthPress_L",
           "mouthPress_R", "mouthPucker", "mouthRight", "mouthRollLower", "mouthRollUpper", "mouthShrugLower",
           "mouthShrugUpper", "mouthSmile_L", "mouthSmile_R", "mouthStretch_L", "mouthStretch_R",
           "mouthUpperUp_L", "mouthUpperUp_R", "noseSneer_L", "noseSneer_R"]
    shouted = [name.upper().replace("_", "-") for name in ict]            # separators and case do not count
    match = naming_presets.match_shape_keys(shouted, 'ICT')
    assert len(match.mapped) == 49 and not match.duplicates
    assert match.mapped["MOUTHSMILE-L"] == "mouthSmile_L" and match.mapped["JAWOPEN"] == "jawOpen"
    assert match.missing == ["browInnerUp", "cheekPuff", "tongueOut"]
    assert naming_presets.match_shape_keys(ict, 'ICT').matched == 49    # as ICT spells them: already ARKit


def test_matching_ignores_case_separators_side_words_and_rig_prefixes():
    key = naming_presets.matching_key
    assert key("CTRL_expressions_eyeBlinkL") == key("eye_blink_L") == key("EyeBlinkLeft") == key("eyeBlink.L") \
        == key("head_lod0_mesh__eye_blink_l") == "eyeblinkl"
    assert key("browDown.R") == "browdownr" and key("mouthLeft") != key("mouthSmileLeft")


def test_faceit_names_in_another_case_are_mapped_and_apple_spellings_need_no_row():
    names = ["EyeBlinkLeft", "eye_blink_right", "jawOpen", "mouthSmileLeft", "smile_big"]
    match = naming_presets.match_shape_keys(names, 'FACEIT')
    assert match.mapped == {"EyeBlinkLeft": "eyeBlink_L", "eye_blink_right": "eyeBlink_R"}
    assert match.already == {"jawOpen": "jawOpen", "mouthSmileLeft": "mouthSmile_L"}
    assert match.matched == 4 and len(match.missing) == 52 - 4


def test_metahuman_names_kept_rows_and_duplicates():
    names = ["CTRL_expressions_eyeBlinkL", "eyeBlinkR", "mouthCornerPullL", "mouth_corner_pull_L",
             "browRaiseInL", "jawOpen", "CTRL_expressions_mouthCornerDepressR", "mouthSmileR"]
    kept = {"eyeBlinkR": "eyeSquint_R"}                  # the artist's own choice stays
    match = naming_presets.match_shape_keys(names, 'METAHUMAN', kept)
    assert match.mapped == {"CTRL_expressions_eyeBlinkL": "eyeBlink_L", "mouthCornerPullL": "mouthSmile_L",
                            "CTRL_expressions_mouthCornerDepressR": "mouthFrown_R", "mouthSmileR": "mouthSmile_R"}
    assert match.kept == kept and match.duplicates == {"mouth_corner_pull_L": "mouthSmile_L"}
    assert "browInnerUp" in match.missing and "eyeSquint_R" not in match.missing
    text = naming_presets.summary(match, "MetaHuman-style")
    assert "5 shape keys matched" in text and "1 rows you set kept" in text and "browInnerUp" in text
    # A row the table agrees with is not "kept": applying twice gives the same rows.
    again = naming_presets.match_shape_keys(names, 'METAHUMAN', {**kept, **match.mapped})
    assert again.mapped == match.mapped and again.kept == kept


# ---- tissue presets: files ----

def test_bundled_tissue_presets_and_their_one_source_of_numbers():
    assert sorted(path.name for path in BUNDLED_DIR.glob("*.py")) == \
        ["Default.py", "Firm_Lean_Face.py", "Soft_Aged_Tissue.py", "Zombie.py"]
    code = [line for line in (BUNDLED_DIR / "Zombie.py").read_text().splitlines() if not line.startswith("#")]
    assert not any("5.7" in line or "0.7" in line for line in code)       # read from settings.json
    assert any('solver_preset("zombie")' in line for line in code)
    assert NUMBERS["presets"]["zombie"] == {"stiffness_range": [0.7, 5.7], "density_range": [1.0, 3.0]}


def test_the_zip_carries_the_bundled_presets(tmp_path):
    import addon_build
    path = str(tmp_path / "addon.zip")
    addon_build.write_platform_zip(path, str(ROOT), addon_build.PLATFORMS[0], [])
    import zipfile
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    assert {f"presets/face_physics/tissue/{path.name}" for path in BUNDLED_DIR.glob("*.py")} <= names
    assert "preset_operators.py" in names and "naming_presets.py" in names


# ---- real bpy ----

bpy = pytest.importorskip("bpy")
import addon_utils  # noqa: E402  (comes with bpy)


@pytest.mark.parametrize("install", ["checkout", "extension zip"])
def test_tissue_presets_apply_save_to_the_user_folder_and_bundled_ones_stay(tmp_path, install):
    """In the checkout's add-on, and in the extension zip installed as Blender installs one
    (the zip without wheels: no preset needs the solver)."""
    user = tmp_path / "user"
    report = tmp_path / "presets.json"
    arguments = [str(report)]
    bundled_dir = BUNDLED_DIR
    if install == "extension zip":
        import addon_build
        addon_build.write_platform_zip(str(tmp_path / "face_physics.zip"), str(ROOT), addon_build.PLATFORMS[0], [])
        arguments.append(str(tmp_path / "face_physics.zip"))
        bundled_dir = user / "extensions" / "user_default" / "face_physics" / "presets" / "face_physics" / "tissue"
    child = subprocess.run([sys.executable, str(ROOT / "tests" / "addon_presets_child.py"), *arguments],
                           cwd=ROOT, env=dict(os.environ, BLENDER_USER_RESOURCES=str(user)),
                           capture_output=True, text=True, timeout=180)
    assert child.returncode == 0 and report.is_file(), child.stderr[-3000:]
    result = json.loads(report.read_text())
    user_folder = user / "scripts" / "presets" / "face_physics" / "tissue"
    assert result["bundled_dir"] == str(bundled_dir)
    assert result["preset_paths"] == [str(bundled_dir)]
    assert result["preset_paths_after_save"] == [str(user_folder), str(bundled_dir)]
    applied = result["applied"]
    assert all(entry["result"] == ["FINISHED"] for entry in applied.values())
    assert applied["Zombie"]["tissue"]["stiffness_range"] == pytest.approx([0.7, 5.7])
    assert applied["Zombie"]["tissue"]["density_range"] == pytest.approx([1.0, 3.0])
    assert applied["Zombie"]["tissue"]["fat_scale"] == pytest.approx(NUMBERS["settings"]["fat_scale"]["default"])
    assert applied["Zombie"]["label"] == "Zombie"
    assert applied["Firm_Lean_Face"]["tissue"]["stiffness_range"] == pytest.approx([1.2, 1.6])
    assert applied["Soft_Aged_Tissue"]["tissue"]["diffusion_spread_mm"] == pytest.approx(10.0)
    assert applied["Default"]["tissue"]["stiffness_range"] == pytest.approx([1.0, 2.0])     # the property default
    assert result["saved"]["result"] == ["FINISHED"] and result["same_name_as_bundled"] == ["CANCELLED"]
    assert Path(result["saved_path"]) == user_folder / "My_Face.py"
    assert result["default_after_save"]["fat_scale"] == pytest.approx(1.0)
    assert result["saved_applied"]["tissue"] == result["saved"]["tissue"]       # float32 round trip, exact
    assert result["remove_bundled"] == ["CANCELLED"] and result["remove_saved"] == ["FINISHED"]
    assert not result["saved_exists_after_remove"]
    assert result["bundled_files_after"] == result["bundled_files_before"]     # the add-on's folder untouched
    assert result["menu_drawn"] is True


@pytest.fixture(scope="module")
def addon():
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable("blender_addon", default_set=True, handle_error=None)
    yield
    addon_utils.disable("blender_addon", default_set=True)


def test_naming_preset_fills_rows_for_metahuman_names_and_leaves_shape_keys_alone(addon):
    mesh = bpy.data.meshes.new("mh")
    mesh.from_pydata([(0, 0, 0), (1, 0, 0), (0, 1, 0)], [], [(0, 1, 2)])
    obj = bpy.data.objects.new("mh", mesh)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    names = ["CTRL_expressions_eyeBlinkL", "eyeBlinkR", "mouthCornerPullL", "mouth_corner_pull_R", "jawOpen",
             "browRaiseInL", "smile_big"]
    obj.shape_key_add(name="Basis")
    for index, name in enumerate(names):
        block = obj.shape_key_add(name=name)
        block.data[0].co = (0.01 * (index + 1), 0, 0)
    before = [(block.name, tuple(block.data[0].co)) for block in mesh.shape_keys.key_blocks]
    settings = obj.face_physics
    row = settings.name_mappings.add()
    row.name, row.arkit_name = "eyeBlinkR", "eyeSquint_R"            # the artist's own row

    assert bpy.ops.face_physics.apply_naming_preset(convention='METAHUMAN') == {'FINISHED'}
    rows = {item.name: item.arkit_name for item in settings.name_mappings}
    assert rows == {"eyeBlinkR": "eyeSquint_R", "CTRL_expressions_eyeBlinkL": "eyeBlink_L",
                    "mouthCornerPullL": "mouthSmile_L", "mouth_corner_pull_R": "mouthSmile_R"}
    assert bpy.ops.face_physics.apply_naming_preset(convention='METAHUMAN', replace=True) == {'FINISHED'}
    rows = {item.name: item.arkit_name for item in settings.name_mappings}
    assert rows["eyeBlinkR"] == "eyeBlink_R" and len(rows) == 4
    assert [(block.name, tuple(block.data[0].co)) for block in mesh.shape_keys.key_blocks] == before
    bpy.data.objects.remove(obj)
