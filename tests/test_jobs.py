"""The solver's job runner (`python -m solver --json run-job JOB_DIR`) as a real subprocess:
strict job.json validation, JSON-line messages, exit codes, and cancellation by signal."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solver.jobs import EXIT_BAD_INPUT, EXIT_CANCELLED, SCHEMA_VERSION, JobError, read_job

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from blender_addon import job_files  # noqa: E402  (numpy-only module, no bpy)


def _start(job_dir):
    return subprocess.Popen([sys.executable, "-m", "solver", "--json", "run-job", str(job_dir)],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _run(job_dir):
    process = _start(job_dir)
    out, err = process.communicate(timeout=600)
    return process.returncode, [json.loads(line) for line in out.splitlines() if line.strip()], err


def _write_job(job_dir, **overrides):
    job = {"schema_version": SCHEMA_VERSION, "command": "build-model", "inputs": {"rig": "rig.npz"},
           "outputs": {"model": "model.npz"}, "settings": {"target_tets": 1000}}
    job.update(overrides)
    (job_dir / "job.json").write_text(json.dumps(job))


@pytest.fixture(scope="module")
def demo_rig(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rig")
    made = subprocess.run([sys.executable, "-m", "solver", "demo-rig", "-o", str(folder / "rig.npz")],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    with np.load(folder / "rig.npz", allow_pickle=False) as rig:
        return {key: rig[key] for key in rig.files if key != "format_version"}


@pytest.mark.parametrize("change, expected", [
    ({"schema_version": 99}, "update the Face Physics solver"),
    ({"schema_version": "1"}, "schema_version"),
    ({"command": "format-disk"}, "unknown command"),
    ({"inputs": {"rig": "../rig.npz"}}, "outside the job folder"),
    ({"inputs": {"rig": "/etc/passwd"}}, "is absolute"),
    ({"inputs": {"rig": "missing.npz"}}, "does not exist"),
    ({"outputs": {"model": "rig.npz"}}, "names an input"),
    ({"settings": {"target_tets": True}}, "settings.target_tets"),
    ({"settings": {"target_tets": 3000, "colour": "red"}}, "settings.colour: unknown field"),
    ({"extra": 1}, "job.extra: unknown field"),
])
def test_job_json_is_validated_strictly(tmp_path, change, expected):
    np.savez(tmp_path / "rig.npz", vertices=np.zeros((4, 3)))
    _write_job(tmp_path, **change)
    with pytest.raises(JobError, match=expected.replace("(", r"\(")):
        read_job(tmp_path)


def test_a_symlink_out_of_the_job_folder_is_refused(tmp_path):
    outside = tmp_path / "outside.npz"
    np.savez(outside, vertices=np.zeros((4, 3)))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "rig.npz").symlink_to(outside)
    _write_job(job_dir)
    with pytest.raises(JobError, match="outside the job folder"):
        read_job(job_dir)


def test_bad_input_gives_an_error_line_done_and_status_2(tmp_path):
    np.savez(tmp_path / "rig.npz", vertices=np.zeros((4, 3)))      # no faces: the rig is invalid
    _write_job(tmp_path)
    code, messages, _ = _run(tmp_path)
    assert code == EXIT_BAD_INPUT
    assert [m["type"] for m in messages][-2:] == ["error", "done"]
    assert "faces" in messages[-2]["message"] and messages[-1] == {"type": "done", "status": "error",
                                                                   "exit_code": EXIT_BAD_INPUT}


def test_object_arrays_in_a_job_file_are_refused_not_unpickled(tmp_path, demo_rig):
    arrays = dict(demo_rig)
    arrays["shape_key_names"] = np.array(list(arrays["shape_key_names"]), dtype=object)
    np.savez(tmp_path / "rig.npz", **arrays)
    _write_job(tmp_path)
    code, messages, _ = _run(tmp_path)
    assert code == EXIT_BAD_INPUT and "object array" in messages[-2]["message"]


def test_build_then_animate_jobs_write_outputs_and_report_per_frame_progress(tmp_path, demo_rig):
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    job_files.write_build_job(build_dir, demo_rig, target_tets=2000)
    code, messages, err = _run(build_dir)
    assert code == 0, err
    assert messages[-1] == {"type": "done", "status": "ok", "exit_code": 0}
    result = messages[-2]
    assert result["type"] == "result" and result["command"] == "build-model" and result["outputs"] == {
        "model": "model.npz"}
    fractions = [m["fraction"] for m in messages if m["type"] == "progress"]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    muscles = result["muscles"]

    animate_dir = tmp_path / "animate"
    animate_dir.mkdir()
    frames = 3
    contraction = np.ones((frames, len(muscles)))
    contraction[:, :4] = np.linspace(1.0, 1.5, frames)[:, None]
    job_files.write_animate_job(animate_dir, build_dir / "model.npz", {
        "muscle_contraction": contraction, "muscle_names": np.array(muscles), "jaw": np.zeros((frames, 5)),
        "head_transforms": np.tile(np.eye(4), (frames, 1, 1)), "fps": np.float64(24)},
        {"fat": np.linspace(0, 1, len(demo_rig["vertices"])), "paralysed_muscles": np.array(muscles[:2])},
        {"dynamic": False, "substeps": 1, "gravity": True, "wind": None, "fat_scale": 1.1})
    code, messages, err = _run(animate_dir)
    assert code == 0, err
    frame_messages = [m for m in messages if m["type"] == "progress" and m.get("frame")]
    assert [m["frame"] for m in frame_messages] == [1, 2, 3] and frame_messages[-1]["fraction"] == 1.0
    assert messages[-2]["outputs"] == {"result": "result.npz", "cache": "result.pc2"}
    positions = job_files.read_result_positions(animate_dir)
    assert positions.shape == (frames, len(demo_rig["vertices"]), 3)
    assert not any(name.startswith(".") for name in os.listdir(animate_dir)), "partial files left behind"


def test_sigterm_cancels_cleanly_and_keeps_the_previous_result(tmp_path, demo_rig):
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    job_files.write_build_job(build_dir, demo_rig, target_tets=1500)
    assert _run(build_dir)[0] == 0
    muscles = job_files.read_model_summary(build_dir / "model.npz")["muscle_names"]
    job_dir = tmp_path / "animate"
    job_dir.mkdir()
    frames = 400
    job_files.write_animate_job(job_dir, build_dir / "model.npz", {
        "muscle_contraction": np.linspace(1.0, 1.6, frames)[:, None].repeat(len(muscles), 1),
        "jaw": np.zeros((frames, 5))}, None, {"gravity": True})
    (job_dir / "result.npz").write_bytes(b"an earlier good result")
    (job_dir / "result.pc2").write_bytes(b"an earlier good cache")
    process = _start(job_dir)
    for line in process.stdout:                       # wait for the first simulated frame
        if json.loads(line).get("frame", 0) >= 1:
            break
    process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    out, _ = process.communicate(timeout=60)
    assert time.monotonic() - started < 10
    messages = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert process.returncode == EXIT_CANCELLED
    assert [m["type"] for m in messages][-2:] == ["cancelled", "done"]
    assert messages[-1]["status"] == "cancelled"
    assert (job_dir / "result.npz").read_bytes() == b"an earlier good result"
    assert (job_dir / "result.pc2").read_bytes() == b"an earlier good cache"
    assert not any(name.startswith(".") for name in os.listdir(job_dir)), "partial files left behind"
