"""The Bake panel's actuation choice (issue 42): the real bpy module, the real solver child. The demo
head (~3,000 tets) is built and one key fitted; with Volumetric blendshapes chosen, a bake that
asks for what that model cannot do (dynamics, gravity, wind, maps) is refused before anything is
written, naming the settings to turn off; a bake with them off sends `actuation:
volumetric-blendshapes`, with teeth and lip contact when they are on, and plays."""
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

from addon_demo_scene import ADDON, demo_head_scene  # noqa: E402

KEY = "jawOpen"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from blender_addon import api
    folder = tmp_path_factory.mktemp("actuation")
    obj, _ = demo_head_scene(folder)
    api.build(obj, target_tets=3000)
    api.fit(obj, shapes=[KEY])
    block = obj.data.shape_keys.key_blocks[KEY]
    for frame, value in ((1, 0.0), (3, 1.0)):
        block.value = value
        block.keyframe_insert("value", frame=frame)
    yield obj
    addon_utils.disable(ADDON, default_set=True)


def test_volumetric_blendshapes_refuse_dynamics_before_a_bake(fitted):
    from blender_addon import api
    from blender_addon.api import FacePhysicsError
    obj = fitted
    settings = obj.face_physics
    settings.actuation = 'VOLUMETRIC_BLENDSHAPES'
    settings.teeth_contact, settings.lip_contact, settings.gravity = True, False, True
    takes_before = [take.name for take in api.takes(obj)]
    reports = []
    with pytest.raises(FacePhysicsError) as refused:
        api.bake(obj, first=1, last=3, on_report=lambda kinds, message: reports.append(message))
    message = str(refused.value) + " ".join(reports)
    assert "Gravity (Dynamics panel)" in message and "Phace actuation" in message
    assert "contact" not in message.split("turn off")[1].lower()
    assert [take.name for take in api.takes(obj)] == takes_before


def test_a_volumetric_blendshape_bake_sends_its_actuation_and_plays(fitted):
    from blender_addon import api, take_folders
    obj = fitted
    settings = obj.face_physics
    settings.actuation = 'VOLUMETRIC_BLENDSHAPES'
    settings.teeth_contact = settings.lip_contact = settings.gravity = False
    take = api.bake(obj, first=1, last=3, target='SHAPE_KEYS')
    job = json.loads((take.folder / "job.json").read_text())
    assert job["settings"]["actuation"] == "volumetric-blendshapes"
    assert not {"collisions", "gravity", "dynamic"} & set(job["settings"])
    assert job["settings"]["skin_filter"] is True       # the skin is shown through the Phace path's filter
    assert take.status == "finished", take.warnings
    assert "volumetric blendshapes" in take_folders.settings_summary(job["settings"])
    with np.load(take.folder / take_folders.RESULT_FILE, allow_pickle=False) as result:
        skin = result["skin_positions"]
    assert skin.shape[0] == 3 and np.all(np.isfinite(skin))
    assert np.abs(skin[2] - skin[0]).max() > 1e-3       # jawOpen at 1 on the last frame opens the mouth


def test_a_volumetric_blendshape_bake_takes_teeth_and_lip_contact(fitted):
    from blender_addon import api, take_folders
    obj = fitted
    settings = obj.face_physics
    settings.actuation = 'VOLUMETRIC_BLENDSHAPES'
    settings.teeth_contact = settings.lip_contact = True
    settings.gravity = False
    take = api.bake(obj, first=1, last=3, target='SHAPE_KEYS')
    job = json.loads((take.folder / "job.json").read_text())
    assert job["settings"]["actuation"] == "volumetric-blendshapes"
    assert job["settings"]["collisions"] == ["teeth", "lips"] and "contact_solver" not in job["settings"]
    assert take.status == "finished", take.warnings
    with np.load(take.folder / take_folders.RESULT_FILE, allow_pickle=False) as result:
        assert result["converged"].all() and result["penetration_depth_max"].max() <= 1e-4
