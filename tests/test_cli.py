"""The solver's command line as programs drive it: a real subprocess, JSON lines on stdout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from solver.model_file import load_model
from solver.pc2 import read_pc2
from solver.physics.inputs import ActivationInput, save_activations
from solver.rig import load_rig

ROOT = Path(__file__).resolve().parents[1]


def _solver(*args, cwd):
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solver", "--json", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=600)


def _messages(completed):
    return [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]


def test_demo_rig_then_build_model_through_the_command_line(tmp_path):
    made = _solver("demo-rig", "-o", "rig.npz", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    rig = load_rig(tmp_path / "rig.npz")
    assert rig.has_shape_key("jawOpen") and rig.has_shape_key("mouthSmile_L")

    built = _solver("build-model", "rig.npz", "-o", "model.npz", "--target-tets", "4000", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    messages = _messages(built)
    assert messages[-1]["type"] == "result"
    assert {m["type"] for m in messages[:-1]} == {"progress"}
    model = load_model(tmp_path / "model.npz")
    assert len(model["tets"]) == messages[-1]["tets"]
    assert 2500 < len(model["tets"]) < 6000

    # animate: a jaw-opening ramp, quasi-static under gravity
    frames = 3
    jaw = np.zeros((frames, 5))
    jaw[:, 0] = np.linspace(0.0, 0.15, frames)
    save_activations(tmp_path / "act.npz", ActivationInput(
        jaw=jaw, head_transforms=np.tile(np.eye(4), (frames, 1, 1)),
        muscle_contraction=np.ones((frames, len(model["muscle_names"]))), fps=24.0))
    ran = _solver("animate", "model.npz", "act.npz", "-o", "result.npz", "--gravity", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    messages = _messages(ran)
    assert [m["frame"] for m in messages if m["type"] == "progress" and m.get("frame")] == [1, 2, 3]
    assert messages[-1]["type"] == "result" and messages[-1]["unconverged_frames"] == 0
    with np.load(tmp_path / "result.npz", allow_pickle=False) as result:
        skin = result["skin_positions"]
        assert skin.shape == (frames, len(rig.vertices), 3)
        assert result["converged"].all() and (result["newton_iterations"] > 0).all()
    cache, _, _ = read_pc2(tmp_path / "result.pc2")
    np.testing.assert_allclose(cache, skin, atol=1e-6)          # float32 cache of the same frames
    chin_landmark = model["landmark_positions"][list(model["landmark_names"]).index("chin")]
    chin = np.argmin(np.linalg.norm(rig.vertices - chin_landmark, axis=1))
    drop = (skin[-1, chin] - skin[0, chin]) @ model["head_frame"][1]
    assert drop < -0.003, f"opening the jaw moved the chin by {drop * 1e3:.2f} mm along up"


def test_a_rig_in_centimetres_is_refused_with_a_json_error_and_status_2(tmp_path):
    made = _solver("demo-rig", "-o", "rig.npz", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    with np.load(tmp_path / "rig.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    arrays["vertices"] = arrays["vertices"] * 100.0
    arrays["shape_key_deltas"] = arrays["shape_key_deltas"] * 100.0
    np.savez(tmp_path / "rig_cm.npz", **arrays)

    refused = _solver("build-model", "rig_cm.npz", "-o", "model.npz", cwd=tmp_path)
    assert refused.returncode == 2
    (message,) = _messages(refused)
    assert message["type"] == "error"
    assert "centimetres" in message["message"]
    assert not (tmp_path / "model.npz").exists()


def test_a_missing_rig_file_names_the_path(tmp_path):
    refused = _solver("build-model", "nowhere.npz", "-o", "model.npz", cwd=tmp_path)
    assert refused.returncode == 2
    (message,) = _messages(refused)
    assert message["type"] == "error" and "nowhere.npz" in message["message"]
