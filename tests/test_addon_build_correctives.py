"""Build Correctives from Blender (issue 42): the real bpy module, the real solver child. The demo
head (~3,000 tets) is built and two keys fitted; a cancelled build keeps what it solved and changes
nothing; the build adds driven corr_ keys, stores CORR.npz and the solved samples beside the
.blend, and a rebuild reuses every stored sample."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

bpy = pytest.importorskip("bpy")
import addon_utils  # noqa: E402  (comes with bpy)

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from addon_demo_scene import ADDON, demo_head_scene  # noqa: E402

KEYS = ["jawOpen", "mouthSmile_L"]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    from blender_addon import api
    folder = tmp_path_factory.mktemp("correctives")
    obj, _ = demo_head_scene(folder)
    obj.face_physics.fit_processes = 2
    api.build(obj, target_tets=3000)
    api.fit(obj, shapes=KEYS)
    bpy.ops.wm.save_mainfile()
    user_keys = {block.name: _coordinates(block) for block in obj.data.shape_keys.key_blocks}
    yield {"object": obj, "folder": folder, "user_keys": user_keys}
    addon_utils.disable(ADDON, default_set=True)


def _coordinates(block) -> bytes:
    co = np.empty(len(block.data) * 3, dtype=np.float32)
    block.data.foreach_get("co", co)
    return co.tobytes()


def _samples(folder: Path) -> dict:
    return {path.name: path.stat().st_mtime_ns for path in folder.iterdir()} if folder.is_dir() else {}


def test_a_cancelled_build_keeps_what_it_solved_and_changes_nothing(fitted):
    from blender_addon import api, storage
    from blender_addon.api import FacePhysicsError
    obj = fitted["object"]

    def cancel_after_the_first_chain(job):
        if "samples solved" in job.message:
            job.cancel()

    with pytest.raises(FacePhysicsError, match="cancelled"):
        api.build_correctives(obj, keys=KEYS, on_progress=cancel_after_the_first_chain)
    assert any(name.endswith(".npz") for name in _samples(storage.correctives_samples_path(obj)))
    assert not storage.correctives_path(obj).exists()
    assert {block.name for block in obj.data.shape_keys.key_blocks} == set(fitted["user_keys"])


def test_build_correctives_adds_driven_keys_and_keeps_the_samples(fitted):
    from blender_addon import api, storage
    from blender_addon.corrective_keys import our_key_names
    obj = fitted["object"]
    messages = []
    added = api.build_correctives(obj, keys=KEYS, on_progress=lambda job: messages.append(job.message))
    # The cancelled build's chains are not simulated again.
    assert any("already solved, skipped" in message and not message.startswith("0 of") for message in messages)
    assert added and set(added) == set(our_key_names(obj))
    assert {"corr_jawOpen", "corr_jawOpen__jawOpen", "corr_mouthSmile_L"} <= set(added)
    corr = storage.correctives_path(obj)
    assert corr.is_file() and corr.parent == fitted["folder"] / "face_physics"
    with np.load(corr, allow_pickle=False) as arrays:
        assert sorted(str(name) for name in arrays["key_names"]) == sorted(KEYS)
    drivers = {driver.data_path for driver in obj.data.shape_keys.animation_data.drivers}
    assert all(f'key_blocks["{name}"].value' in drivers for name in added)
    # The user's own keys are untouched, bit for bit.
    for name, coordinates in fitted["user_keys"].items():
        assert _coordinates(obj.data.shape_keys.key_blocks[name]) == coordinates
    stored = _samples(storage.correctives_samples_path(obj))
    assert sum(name.endswith(".npz") for name in stored) >= 3        # 2 single-key chains, a probe, …

    # The operator, with every sample stored and the one pair chosen (the same samples): nothing is
    # simulated again, the keys are rebuilt.
    started = time.monotonic()
    assert bpy.ops.face_physics.build_correctives(keys=",".join(KEYS), pairs="mouthSmile_L:jawOpen") == {'FINISHED'}
    assert set(our_key_names(obj)) == set(added)
    assert _samples(storage.correctives_samples_path(obj)) == stored
    print(f"rebuild with every sample stored: {time.monotonic() - started:.1f} s")


def test_build_correctives_refuses_keys_that_are_not_fitted_and_bad_pairs(fitted):
    from blender_addon import api
    from blender_addon.api import FacePhysicsError
    obj = fitted["object"]
    before = {block.name for block in obj.data.shape_keys.key_blocks}
    with pytest.raises(FacePhysicsError, match="mouthPucker: not in the fit"):
        api.build_correctives(obj, keys=["jawOpen", "mouthPucker"])
    with pytest.raises(FacePhysicsError, match="jawOpen is paired with itself"):
        api.build_correctives(obj, keys=KEYS, pairs=[("jawOpen", "jawOpen")])
    assert {block.name for block in obj.data.shape_keys.key_blocks} == before
