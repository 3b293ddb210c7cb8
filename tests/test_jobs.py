"""The solver's job runner (`python -m solver --json run-job JOB_DIR`) as a real subprocess:
strict job.json validation, JSON-line messages, exit codes, and cancellation by signal; the
build, fit and animate commands (shape-key weights through a fit, contacts, colliders)."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solver import jobs
from solver.inverse.blend import with_muscle_layer
from solver import pc2
from solver.jobs import EXIT_BAD_INPUT, EXIT_CANCELLED, SCHEMA_VERSION, JobError, read_job
from solver.requests import fit as fit_request
from solver.requests.animate import collision_scene
from solver.requests.fields import RequestError

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


def _child_processes(pid: int) -> list:
    """PIDs whose parent is `pid` (Linux /proc)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                children.append(int(entry))
    return children


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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
    assert code == EXIT_BAD_INPUT and "holds Python objects" in messages[-2]["message"]


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


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, demo_rig):
    """A 1500-tet model of the demo head (it has teeth), built by a job."""
    folder = tmp_path_factory.mktemp("model")
    job_files.write_build_job(folder, demo_rig, target_tets=1500)
    code, _, err = _run(folder)
    assert code == 0, err
    return folder / "model.npz"


def test_sigterm_cancels_cleanly_and_keeps_the_previous_result(tmp_path, small_model):
    muscles = job_files.read_model_summary(small_model)["muscle_names"]
    job_dir = tmp_path / "animate"
    job_dir.mkdir()
    frames = 400
    job_files.write_animate_job(job_dir, small_model, {
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
    # Only the partial folder is left: the finished frames and the state a resume continues from.
    assert [name for name in os.listdir(job_dir) if name.startswith(".")] == [".result.partial"]
    kept = sorted(os.listdir(job_dir / ".result.partial"))
    assert kept[0] == ".result.skin.npy" and kept[-2:] == ["result.pc2", "state.npz"]
    assert all(name.startswith("factor_") for name in kept[1:-2])


def test_a_file_planted_where_the_result_is_written_is_not_followed(tmp_path, small_model):
    """The result and cache are written into a folder the job creates for itself, so a symlink
    at the old temporary name (or any name) cannot make the job write outside its folder; an
    output in a missing subfolder or named .pc2 is refused before any work."""
    job_dir = tmp_path / "animate"
    job_dir.mkdir()
    job_files.write_animate_job(job_dir, small_model, _neutral_contractions(small_model, 1), None, {})
    victim = tmp_path / "victim.pc2"
    victim.write_bytes(b"not the job's to write")
    for name in (".result.partial.pc2", ".result.partial.npz"):
        (job_dir / name).symlink_to(victim)
    code, messages, err = _run(job_dir)
    assert code == 0, err
    assert victim.read_bytes() == b"not the job's to write"
    assert job_files.read_result_positions(job_dir).shape[0] == 1
    assert not [name for name in os.listdir(job_dir) if name.endswith(".partial")], "the work folder was left"
    job = json.loads((job_dir / "job.json").read_text())
    for output, expected in (("sub/result.npz", r"outputs.result: the folder .*sub does not exist"),
                             ("result.pc2", "outputs.result: result.pc2 does not end in .npz")):
        (job_dir / "job.json").write_text(json.dumps({**job, "outputs": {"result": output}}))
        with pytest.raises(JobError, match=expected):
            read_job(job_dir)


# --------------------------------------------------------------------------- fit and shape-key animation

def _placeholder_files(job_dir, *names):
    for name in names:
        np.savez(job_dir / name, placeholder=np.zeros(1))


_ANIMATE = {"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
            "outputs": {"result": "r.npz"}}


@pytest.mark.parametrize("job, expected", [
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz"}, "outputs": {"fit": "fit.npz"},
      "settings": {"shapes": "jawOpen"}}, "settings.shapes: expected a non-empty list"),
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz"}, "outputs": {"fit": "fit.npz"},
      "settings": {"shapes": ["jawOpen", "jawOpen"]}}, "listed twice"),
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz"}, "outputs": {"fit": "fit.npz"},
      "settings": {"jobs": 0}}, "settings.jobs"),
    ({"command": "fit", "inputs": {"model": "model.npz"}, "outputs": {"fit": "fit.npz"}}, "inputs.rig: missing"),
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz", "previous_fit": "fit.npz"},
      "outputs": {"fit": "fit.npz"}}, "names an input"),
    ({"command": "animate", "inputs": {"model": "model.npz", "fit": "fit.npz"}, "outputs": {"result": "r.npz"}},
     "inputs.weights: missing"),
    ({"command": "animate", "inputs": {"model": "model.npz"}, "outputs": {"result": "r.npz"}}, "no animation"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"detail": False}}, "settings.detail: applies only"),
    ({"command": "animate", "inputs": {"model": "model.npz", "fit": "fit.npz", "weights": "weights.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"detail": 1}}, "settings.detail: expected true or false"),
    ({"command": "animate", "inputs": {"model": "model.npz", "fit": "fit.npz", "weights": "weights.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"skin_filter": "yes"}},
     "settings.skin_filter: expected true or false"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"collisions": ["teeth", "nose"]}}, "settings.collisions"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"contact_solver": "magic"}}, "settings.contact_solver"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"teeth_padding_m": 0.001}}, "applies only with teeth"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"collisions": ["teeth"], "teeth_padding_m": 0.5}},
     "settings.teeth_padding_m"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz",
                                       "colliders": "collider.npz"}, "outputs": {"result": "r.npz"}},
     "inputs.colliders: expected a list"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz",
                                       "colliders": ["collider.npz", "../collider.npz"]},
      "outputs": {"result": "r.npz"}}, r"inputs.colliders\[1\]: '../collider.npz' is outside"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz",
                                       "collider": ["collider.npz"]}, "outputs": {"result": "r.npz"}},
     "inputs.collider: unknown field"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"fat_softening": 1.5}}, r"settings.fat_softening: .*\[0, 1\]"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.npz"}, "settings": {"diffusion_steps": 2.5}}, "settings.diffusion_steps"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz",
                                       "lip_vertices": "lips.npz"}, "outputs": {"result": "r.npz"}},
     "inputs.lip_vertices: applies only with lip or teeth collisions"),

    # the ranges the solver can run in reasonable time, and outputs that would replace an input
    ({**_ANIMATE, "settings": {"wind": [float("nan"), 0, 0]}}, "settings.wind: expected three finite numbers"),
    ({**_ANIMATE, "settings": {"wind": [1e9, 0, 0]}}, "settings.wind: 1e.09 m/s is more than the 30 m/s"),
    ({**_ANIMATE, "settings": {"dynamic": True, "substeps": 0}},
     r"settings.substeps: expected a whole number in \[1, 100\]"),
    ({**_ANIMATE, "settings": {"fat_scale": 10}}, r"settings.fat_scale: expected a number in \[0.5, 1.5\]"),
    ({**_ANIMATE, "settings": {"diffusion_time_step_m2": 1.0}}, "settings.diffusion_time_step_m2: expected a number"),
    ({**_ANIMATE, "settings": {"diffusion_steps": 1000, "diffusion_time_step_m2": 1e-5}},
     "spread a painted point over 14 cm"),
    ({**_ANIMATE, "settings": {"collisions": "teeth"}}, "settings.collisions: expected a list"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "activations.npz"}}, "names an input"),
    ({"command": "animate", "inputs": {"model": "model.npz", "activations": "activations.npz"},
      "outputs": {"result": "r.pc2"}}, "outputs.result: r.pc2 does not end in .npz"),
    ({"command": "build-model", "inputs": {"rig": "rig.npz"}, "outputs": {"model": "m.npz"},
      "settings": {"target_tets": 0}}, r"settings.target_tets: expected a whole number in \[500, 500000\]"),
    ({"command": "build-model", "inputs": {"rig": "rig.npz"}, "outputs": {"model": "m.npz"},
      "settings": {"target_tets": 1_000_000_000}}, "settings.target_tets: expected a whole number"),
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz"}, "outputs": {"fit": "model.npz"}},
     "names an input"),
    ({"command": "fit", "inputs": {"model": "model.npz", "rig": "rig.npz"}, "outputs": {"fit": "f.npz"},
      "settings": {"shapes": []}}, "settings.shapes: expected a non-empty list"),
])
def test_fit_and_animate_jobs_are_validated_strictly(tmp_path, job, expected):
    folder = tmp_path / "job"
    folder.mkdir()
    _placeholder_files(folder, "model.npz", "rig.npz", "fit.npz", "weights.npz", "activations.npz", "collider.npz",
                       "lips.npz")
    _placeholder_files(tmp_path, "collider.npz")
    (folder / "job.json").write_text(json.dumps({"schema_version": 1, **job}))
    with pytest.raises(JobError, match=expected):
        read_job(folder)


def test_a_version_1_animate_job_with_collisions_and_colliders_reads_back(tmp_path):
    _placeholder_files(tmp_path, "model.npz", "fit.npz", "weights.npz", "a.npz", "b.npz")
    (tmp_path / "job.json").write_text(json.dumps({
        "schema_version": 1, "command": "animate",
        "inputs": {"model": "model.npz", "fit": "fit.npz", "weights": "weights.npz", "colliders": ["a.npz", "b.npz"]},
        "outputs": {"result": "result.npz"},
        "settings": {"detail": False, "collisions": ["lips", "teeth"], "contact_solver": "ipopt",
                     "teeth_padding_m": 0.0005}}))
    job = read_job(tmp_path)
    assert [path.name for path in job["inputs"]["colliders"]] == ["a.npz", "b.npz"]
    settings = job["settings"]
    assert (settings["detail"], settings["collisions"], settings["contact_solver"], settings["teeth_padding_m"]) == \
        (False, ["lips", "teeth"], "ipopt", 0.0005)


FEW_SHAPES = ["mouthSmile_L", "browInnerUp", "mouthClose"]      # mouthClose brings jawOpen


@pytest.fixture(scope="module")
def few_shapes_fit(tmp_path_factory, demo_rig, small_model):
    """A few shape keys of the demo head fitted by a job in two processes."""
    folder = tmp_path_factory.mktemp("fit")
    job_files.write_fit_job(folder, small_model, demo_rig, FEW_SHAPES, processes=2)
    code, messages, err = _run(folder)
    assert code == 0, err
    assert messages[-2]["shapes"] == ["jawOpen", "mouthClose", "mouthSmile_L", "browInnerUp"]
    return {"folder": folder, "messages": messages, "fit": folder / job_files.FIT_FILE}


@pytest.mark.slow
def test_a_fit_job_fits_every_shape_key_with_one_progress_line_each(tmp_path, demo_rig, small_model):
    from solver.inverse.fit_file import load_fit
    from solver.model_file import load_model
    job_files.write_fit_job(tmp_path, small_model, demo_rig, None, processes=2)
    code, messages, err = _run(tmp_path)
    assert code == 0, err
    rig_names = [str(name) for name in demo_rig["shape_key_names"]]
    shape_lines = [m for m in messages if m["type"] == "progress" and "shape" in m]
    assert sorted(m["shape"] for m in shape_lines) == sorted(rig_names)
    assert [m["done"] for m in shape_lines] == list(range(1, len(rig_names) + 1))
    assert [m["fraction"] for m in shape_lines][-1] == 1.0
    for line in shape_lines:
        mean, p95, worst = line["error_mm"]
        assert 0.0 <= mean <= worst and p95 <= worst and line["shape"] in line["message"]
        # The same words as the command line's (inverse.shapes.fit_progress).
        assert f"{line['iterations']} iterations" in line["message"]
    assert next(m for m in shape_lines if m["shape"] == "mouthClose")["context"] == "jawOpen"
    result = messages[-2]
    assert result["type"] == "result" and result["outputs"] == {"fit": "fit.npz"} and result["kept"] == []
    fit = load_fit(tmp_path / job_files.FIT_FILE, load_model(small_model))
    assert [str(name) for name in fit["shape_key_names"]] == rig_names
    errors = fit["fit_error_mm"]
    assert result["worst"]["shape"] == rig_names[int(np.argmax(errors[:, 0]))]
    # The merge of a partial fit must know every per-shape array of FIT.npz.
    per_shape = {key for key, value in fit.items() if value.ndim and value.shape[0] == len(rig_names)}
    assert per_shape == set(fit_request.PER_SHAPE_FIT_KEYS) | set(fit_request.RIG_FIT_KEYS)


def _refit(folder, shapes, few_shapes_fit, demo_rig, small_model) -> list:
    """The messages of a fit job that fits `shapes` and keeps the rest of `few_shapes_fit`."""
    job_files.write_fit_job(folder, small_model, demo_rig, shapes, processes=1, previous_fit=few_shapes_fit["fit"])
    code, messages, err = _run(folder)
    assert code == 0, err
    return messages


def test_fitting_some_shape_keys_keeps_the_others_of_the_earlier_fit(tmp_path, few_shapes_fit, demo_rig,
                                                                    small_model):
    result = _refit(tmp_path, ["jawOpen"], few_shapes_fit, demo_rig, small_model)[-2]
    # mouthClose is stored relative to jawOpen, so it is fitted again with it.
    assert result["shapes"] == ["jawOpen", "mouthClose"]
    assert result["kept"] == ["mouthSmile_L", "browInnerUp"]           # in the rig's order
    with np.load(few_shapes_fit["fit"], allow_pickle=False) as old, \
            np.load(tmp_path / "fit.npz", allow_pickle=False) as new:
        names = [str(name) for name in new["shape_key_names"]]
        assert names == [str(name) for name in old["shape_key_names"]]
        for key in fit_request.PER_SHAPE_FIT_KEYS:
            for row, name in enumerate(names):
                if name in result["kept"]:
                    np.testing.assert_array_equal(new[key][row], old[key][row], err_msg=f"{key} of {name}")
        # every shape, kept or fitted again, carries the rig's own delta (the skin filter's rig frame)
        rig_names = [str(name) for name in demo_rig["shape_key_names"]]
        for row, name in enumerate(names):
            np.testing.assert_allclose(new["shape_key_deltas"][row],
                                       demo_rig["shape_key_deltas"][rig_names.index(name)], atol=1e-9, err_msg=name)


def test_refitting_one_shape_of_a_pair_starts_from_the_kept_partner(tmp_path, few_shapes_fit, demo_rig,
                                                                     small_model):
    messages = _refit(tmp_path, ["mouthSmile_R"], few_shapes_fit, demo_rig, small_model)
    line = next(m for m in messages if m["type"] == "progress" and m.get("shape") == "mouthSmile_R")
    assert line["start"] == "mirror:mouthSmile_L"
    assert "started from the mirror of mouthSmile_L" in line["message"]
    with np.load(tmp_path / "fit.npz", allow_pickle=False) as new:
        starts = dict(zip((str(name) for name in new["shape_key_names"]), (str(s) for s in new["fit_start"])))
    assert starts["mouthSmile_R"] == "mirror:mouthSmile_L" and starts["mouthSmile_L"] == "neutral"


def test_sigterm_stops_a_parallel_fit_and_its_workers_and_keeps_the_earlier_fit(tmp_path, demo_rig, small_model):
    job_files.write_fit_job(tmp_path, small_model, demo_rig, None, processes=2)
    (tmp_path / "fit.npz").write_bytes(b"an earlier good fit")
    process = _start(tmp_path)
    for line in process.stdout:                       # wait for the first fitted shape
        if "shape" in json.loads(line):
            break
    workers = _child_processes(process.pid)
    assert len(workers) >= 2, workers
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    messages = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert process.returncode == EXIT_CANCELLED
    assert [m["type"] for m in messages][-2:] == ["cancelled", "done"]
    assert (tmp_path / "fit.npz").read_bytes() == b"an earlier good fit"
    assert not any(name.startswith(".") for name in os.listdir(tmp_path)), "partial files left behind"
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in workers if _alive(pid)], "fit worker processes outlived the cancelled job"


def _left_cheek(model_path):
    """(rest skin, the skin vertex between the left cheekbone and mouth corner, its normal)."""
    from solver.geometry import vertex_normals
    from solver.model_file import load_model, model_landmarks
    model = load_model(model_path)
    skin = model["skin_vertices"]
    landmarks = model_landmarks(model)
    vertex = int(np.argmin(np.linalg.norm(skin - 0.5 * (landmarks["cheekbone_L"] + landmarks["mouth_corner_L"]),
                                          axis=1)))
    return skin, vertex, vertex_normals(skin, model["skin_triangles"])[vertex]


def _cheek_sphere(model_path, frames, radius=0.01):
    """MESH.npz arrays of a sphere moving into the left cheek: 0.5 mm off, then 1 and 2 mm in."""
    from solver.geometry import icosphere
    skin, vertex, normal = _left_cheek(model_path)
    vertices, faces = icosphere(2, radius)
    transforms = np.tile(np.eye(4), (frames, 1, 1))
    for frame, depth in enumerate(np.linspace(-0.0005, 0.002, frames)):
        transforms[frame, :3, 3] = skin[vertex] + normal * (radius - depth)
    return {"vertices": vertices, "faces": faces, "transforms": transforms}


def test_an_animate_job_plays_shape_key_weights_through_a_fit_like_the_command_line(tmp_path, few_shapes_fit,
                                                                                     small_model):
    frames = 3
    weights = {"names": np.array(["mouthSmile_L", "jawOpen"]),
               "weights": np.column_stack([np.linspace(0, 1, frames), np.linspace(0, 0.1, frames)]),
               "fps": np.float64(24)}
    sphere = _cheek_sphere(small_model, frames)
    muscles = job_files.read_model_summary(small_model)["muscle_names"]
    at_rest = {"muscle_contraction": np.ones((frames, len(muscles))), "muscle_names": np.array(muscles),
               "jaw": np.zeros((frames, 5))}
    fit_path = few_shapes_fit["fit"]
    results = {}
    # The detail path itself, with the skin filter off; then the filter on (the default).
    for name, settings in (("with detail", {"detail": True, "skin_filter": False}),
                           ("physics only", {"detail": False, "skin_filter": False}),
                           ("filtered", {})):
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        # Contractions of 1 on top of the blend add nothing.
        job_files.write_animate_job(folder, small_model, at_rest, None,
                                    {**settings, "collisions": ["teeth"], "contact_solver": "newton"},
                                    fit_path=fit_path, weights=weights, colliders=[("cheek sphere", sphere)])
        code, messages, err = _run(folder)
        assert code == 0, err
        frame_lines = [m for m in messages if m["type"] == "progress" and m.get("frame")]
        assert [m["frame"] for m in frame_lines] == [1, 2, 3] and all("contacts" in m for m in frame_lines)
        with np.load(folder / "result.npz", allow_pickle=False) as result:
            results[name] = {key: result[key] for key in ("skin_positions", "contacts", "penetration_depth_max")}
    assert results["with detail"]["contacts"].max() > 0, "the sphere should press on the cheek"

    for key, value in (("weights", weights), ("sphere", sphere)):
        np.savez(tmp_path / f"{key}.npz", **value)
    for name, extra in (("with detail", ["--no-skin-filter"]), ("filtered", [])):
        cli = subprocess.run([sys.executable, "-m", "solver", "--json", "animate", str(small_model), str(fit_path),
                              str(tmp_path / "weights.npz"), "-o", str(tmp_path / "cli.npz"), "--collisions", "teeth",
                              "--collider", str(tmp_path / "sphere.npz"), *extra],
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=600)
        assert cli.returncode == 0, cli.stderr
        with np.load(tmp_path / "cli.npz", allow_pickle=False) as expected:
            np.testing.assert_allclose(results[name]["skin_positions"], expected["skin_positions"], atol=1e-12,
                                       err_msg=name)
    with np.load(fit_path, allow_pickle=False) as fit:
        order = [list(fit["shape_key_names"]).index(name) for name in weights["names"]]
        detail = np.einsum("tk,kvd->tvd", weights["weights"], fit["detail_residual"][order])
    # With colliders the detail is shown collision-aware: the few vertices it carries into a
    # collider are projected back out (docs/collisions.md, "Display projection"); everywhere
    # else the displayed skin is the physics plus exactly the detail.
    shown = results["with detail"]["skin_positions"] - results["physics only"]["skin_positions"]
    projected = np.linalg.norm(shown - detail, axis=2) > 1e-12
    assert projected.sum() <= 0.01 * projected.size, f"{int(projected.sum())} vertex frames differ from the detail"
    np.testing.assert_allclose(shown[~projected], detail[~projected], atol=1e-12)
    # Filtered, the skin stays out of the sphere and the teeth as well.
    assert results["filtered"]["penetration_depth_max"].max() <= 0.2e-3
    assert results["with detail"]["penetration_depth_max"].max() <= 0.2e-3


def test_muscle_contractions_add_on_top_of_the_shape_key_blend(small_model):
    from solver.model_file import load_model
    from solver.physics.activation import active_tet_indices, tet_activations, vector_from_symmetric
    from solver.physics.inputs import ActivationInput
    model = load_model(small_model)
    active = active_tet_indices(model)
    rng = np.random.default_rng(1)
    frames = 2
    blended_vectors = np.tile([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], (frames, len(active), 1))
    blended_vectors[:, :, :3] += rng.uniform(-0.05, 0.05, (frames, len(active), 3))
    jaw = rng.uniform(-0.01, 0.01, (frames, 5))
    blended = ActivationInput(jaw=jaw, head_transforms=np.tile(np.eye(4), (frames, 1, 1)),
                              activations=blended_vectors)
    names = [str(name) for name in model["muscle_names"]]
    at_rest = ActivationInput(jaw=np.zeros((frames, 5)), head_transforms=blended.head_transforms,
                              muscle_contraction=np.ones((frames, len(names))), muscle_names=np.array(names))
    unchanged = with_muscle_layer(model, blended, at_rest)
    np.testing.assert_array_equal(unchanged.activations, blended_vectors)
    np.testing.assert_array_equal(unchanged.jaw, jaw)
    contraction = np.ones((frames, len(names)))
    contraction[1, names.index("zygomaticus_major_L")] = 1.6
    layered = with_muscle_layer(model, blended, dataclasses.replace(at_rest, muscle_contraction=contraction))
    own = vector_from_symmetric(tet_activations(model, contraction[1])[active]) - [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(layered.activations[1], blended_vectors[1] + own, atol=1e-12)
    np.testing.assert_array_equal(layered.activations[0], blended_vectors[0])
    assert np.abs(own).max() > 0.1


def test_teeth_contact_on_a_model_without_teeth_warns_of_the_landmark_arch(small_model):
    import io
    from solver.model_file import load_model
    model = {key: value for key, value in load_model(small_model).items() if "teeth" not in key}
    stream = io.StringIO()
    settings = {"collisions": ["teeth"], "teeth_padding_m": None}
    scene = collision_scene(model, jobs.JobMessages(stream), settings["collisions"])
    assert [collider.proxy.source for collider in scene.teeth] == ["landmark arch", "landmark arch"]
    warnings = [json.loads(line) for line in stream.getvalue().splitlines() if '"warning"' in line]
    assert len(warnings) == 2 and all("no teeth mesh" in warning["message"] for warning in warnings)


# --------------------------------------------------------------------------- maps, painted lips, deforming props

def _neutral_contractions(model_path, frames):
    muscles = job_files.read_model_summary(model_path)["muscle_names"]
    return {"muscle_contraction": np.ones((frames, len(muscles))), "muscle_names": np.array(muscles),
            "jaw": np.zeros((frames, 5))}


def _cheek_fat(model_path, radius=0.025):
    """A fat map of 1 within `radius` of the left cheek (halfway cheekbone–mouth corner), 0 elsewhere."""
    from solver.model_file import load_model, model_landmarks
    model = load_model(model_path)
    landmarks = model_landmarks(model)
    cheek = 0.5 * (landmarks["cheekbone_L"] + landmarks["mouth_corner_L"])
    return (np.linalg.norm(model["skin_vertices"] - cheek, axis=1) < radius).astype(np.float64)


def test_diffusion_and_fat_softening_settings_change_the_result_without_a_warning(tmp_path, small_model):
    maps = {"fat": _cheek_fat(small_model)}
    runs = {"default": {"fat_scale": 1.3},
            "explicit defaults": {"fat_scale": 1.3, "diffusion_steps": 10, "diffusion_time_step_m2": 3e-6,
                                  "fat_softening": 1.0},
            "wider": {"fat_scale": 1.3, "diffusion_steps": 30, "diffusion_time_step_m2": 6e-6},
            "stiff fat": {"fat_scale": 1.3, "fat_softening": 0.0}}
    skins = {}
    for name, settings in runs.items():
        folder = tmp_path / name.replace(" ", "_")
        folder.mkdir()
        job_files.write_animate_job(folder, small_model, _neutral_contractions(small_model, 1), maps, settings)
        code, messages, err = _run(folder)
        assert code == 0, err
        assert not [m for m in messages if m["type"] == "warning"], f"{name}: {messages}"
        skins[name] = job_files.read_result_positions(folder)[0]
    np.testing.assert_array_equal(skins["explicit defaults"], skins["default"])
    for name in ("wider", "stiff fat"):
        moved = np.linalg.norm(skins[name] - skins["default"], axis=1).max()
        assert moved > 1e-4, f"{name} moved the skin by only {moved * 1e3:.4f} mm from the default"

    # The command line takes the same settings and gives the same face.
    wider = tmp_path / "wider"
    cli = subprocess.run([sys.executable, "-m", "solver", "--json", "animate", str(small_model),
                          str(wider / job_files.ACTIVATIONS_FILE), "-o", str(tmp_path / "cli.npz"), "--maps",
                          str(wider / job_files.MAPS_FILE), "--fat-scale", "1.3", "--diffusion-steps", "30",
                          "--diffusion-time-step", "6e-6"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr
    with np.load(tmp_path / "cli.npz", allow_pickle=False) as result:
        np.testing.assert_array_equal(result["skin_positions"][0], skins["wider"])
    refused = subprocess.run([sys.executable, "-m", "solver", "--json", "animate", str(small_model),
                              str(wider / job_files.ACTIVATIONS_FILE), "-o", str(tmp_path / "x.npz"),
                              "--fat-softening", "1.5"],
                             env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--fat-softening: expected a number in [0, 1]" in refused.stdout


def test_painted_lip_vertices_replace_the_automatic_lips_and_bad_ones_are_named(tmp_path, small_model):
    import io
    from solver.collisions.lips import find_lip_surfaces
    from solver.model_file import load_model
    model = load_model(small_model)
    automatic = find_lip_surfaces(model)
    assert automatic.source != "vertex groups"
    settings = {"collisions": ["teeth", "lips"], "teeth_padding_m": None}
    path = tmp_path / "lips.npz"
    np.savez(path, upper=automatic.upper_vertices, lower=automatic.lower_vertices)
    stream = io.StringIO()
    scene = collision_scene(model, jobs.JobMessages(stream), settings["collisions"], lip_vertices=path)
    assert scene.lips.source == "vertex groups"
    np.testing.assert_array_equal(scene.lips.upper_vertices, automatic.upper_vertices)
    np.testing.assert_array_equal(scene.teeth_vertices, np.union1d(automatic.upper_vertices,
                                                                   automatic.lower_vertices))
    assert "lips from vertex groups" in stream.getvalue()

    skin_count = len(model["skin_vertices"])
    upper, lower = automatic.upper_vertices, automatic.lower_vertices
    for arrays, expected in (({"upper": upper, "lower": np.array([], dtype=np.int64)}, "'lower' is empty"),
                             ({"upper": np.append(upper, skin_count), "lower": lower}, r"must lie in \[0, "),
                             ({"upper": upper, "lower": np.append(lower, upper[0])}, "on both lips"),
                             ({"upper": upper.astype(float), "lower": lower}, "integer skin vertex indices"),
                             ({"upper": upper}, r"missing arrays \['lower'\]")):
        np.savez(path, **arrays)
        with pytest.raises(RequestError, match="lip_vertices: .*" + expected):
            collision_scene(model, jobs.JobMessages(io.StringIO()), settings["collisions"], lip_vertices=path)


def _inflating_sphere(model_path, growth, radius=0.01):
    """MESH.npz arrays of a sphere beside the left cheek whose vertices (T, V, 3) grow by
    `growth` (m) per frame about a fixed centre, 0.5 mm off the skin at growth 0; identity
    transforms (the vertices are in the world already)."""
    from solver.geometry import icosphere
    skin, vertex, normal = _left_cheek(model_path)
    unit, faces = icosphere(2, 1.0)
    centre = skin[vertex] + normal * (radius + 0.0005)
    vertices = np.stack([centre + unit * (radius + extra) for extra in growth])
    return {"vertices": vertices, "faces": faces, "transforms": np.tile(np.eye(4), (len(growth), 1, 1))}, vertex, normal


def test_a_lips_job_writes_the_solvers_lips_and_animate_takes_them_back(tmp_path, small_model):
    """The lips the solver finds by itself, as a file the artist edits (the add-on paints them
    into FP_lip_upper / FP_lip_lower) and animate accepts as painted lips."""
    folder = tmp_path / "lips"
    folder.mkdir()
    job_files.write_lips_job(folder, small_model)
    code, lines, err = _run(folder)
    assert code == 0, err
    result = next(line for line in lines if line["type"] == "result")
    with np.load(folder / "lips.npz", allow_pickle=False) as lips:
        upper, lower = lips["upper"], lips["lower"]
    assert (result["upper"], result["lower"]) == (upper.size, lower.size) and upper.size > 20 and lower.size > 20
    assert not np.intersect1d(upper, lower).size
    from solver.collisions.scene import load_lip_vertices
    skin_count = job_files.read_model_summary(small_model)["skin_vertices"]
    checked = load_lip_vertices(folder / "lips.npz", skin_count)
    assert np.array_equal(checked[0], upper) and np.array_equal(checked[1], lower)
    job = json.loads((folder / "job.json").read_text())
    job["outputs"]["lips"] = "model.npz"
    (folder / "job.json").write_text(json.dumps(job))
    with pytest.raises(JobError, match="names an input"):
        read_job(folder)


def test_a_spread_and_diffusion_steps_together_are_refused(tmp_path, small_model):
    folder = tmp_path / "job"
    folder.mkdir()
    job_files.write_animate_job(folder, small_model, _neutral_contractions(small_model, 1), None,
                                {"diffusion_spread_m": 0.01, "diffusion_steps": 4})
    with pytest.raises(JobError, match="settings.diffusion_spread_m: given together with diffusion steps"):
        read_job(folder)


def test_a_deforming_collider_detects_against_the_shape_of_each_frame(small_model):
    from solver.collisions import BonePose, MeshCollider, MeshColliderError
    arrays, vertex, normal = _inflating_sphere(small_model, [0.0, 0.003])
    collider = MeshCollider("balloon", arrays["vertices"], arrays["faces"], arrays["transforms"])
    assert collider.deforming and collider.frame_count == 2
    from solver.model_file import load_model
    skin = load_model(small_model)["skin_vertices"]
    touching = [collider.detect(skin, BonePose(np.eye(4), np.eye(4), frame), 0).vertex for frame in (0, 1, 1, 0, 5)]
    assert len(touching[0]) == 0 and vertex in touching[1]
    np.testing.assert_array_equal(touching[2], touching[1])
    assert len(touching[3]) == 0 and np.array_equal(touching[4], touching[1])     # frame 5 holds the last shape
    np.testing.assert_allclose(collider.posed(1)[0], arrays["vertices"][1])
    with pytest.raises(MeshColliderError, match="'vertices' has 2 frames but 'transforms' has 3"):
        MeshCollider("balloon", arrays["vertices"], arrays["faces"], np.tile(np.eye(4), (3, 1, 1)))
    squashed = arrays["vertices"].copy()
    squashed[1, :, 2] = squashed[1, 0, 2]
    with pytest.raises(MeshColliderError, match="frame 1: .*zero area"):
        MeshCollider("balloon", squashed, arrays["faces"], arrays["transforms"])


def test_a_collider_inflating_over_the_clip_pushes_the_skin_further_each_frame(tmp_path, small_model):
    growth = [0.0, 0.0015, 0.003]       # 0.5 mm off the cheek, then 1 and 2.5 mm into it
    arrays, vertex, normal = _inflating_sphere(small_model, growth)
    job_files.write_animate_job(tmp_path, small_model, _neutral_contractions(small_model, len(growth)), None, {},
                                colliders=[("balloon", arrays)])
    code, messages, err = _run(tmp_path)
    assert code == 0, err
    with np.load(tmp_path / "result.npz", allow_pickle=False) as result:
        skin, contacts, depth = result["skin_positions"], result["contacts"], result["penetration_depth_max"]
    from solver.model_file import load_model
    rest = load_model(small_model)["skin_vertices"][vertex]
    pushed_in = [(rest - frame[vertex]) @ normal for frame in skin]
    assert contacts[0] == 0 and contacts[1] > 0 and contacts[2] > contacts[1]
    assert abs(pushed_in[0]) < 1e-4 and pushed_in[1] > 0.5e-3 and pushed_in[2] > pushed_in[1] + 1e-3, pushed_in
    assert depth.max() <= 0.2e-3


# --------------------------------------------------------------------------- one pipeline behind both doors

def _cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, args)],
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=timeout)


def test_the_command_line_and_a_job_folder_run_the_same_animate_request(tmp_path, few_shapes_fit, small_model):
    """Shape-key weights through a fit, with muscle contractions on top, fat, stiffness and
    paralysis maps, teeth and lip contact and a prop: both doors build the same AnimateRequest
    (solver/requests/animate.py) and write the same RESULT.npz, array for array."""
    frames = 2
    weights = {"names": np.array(["mouthSmile_L", "jawOpen"]),
               "weights": np.column_stack([np.linspace(0.3, 0.8, frames), np.linspace(0.0, 0.2, frames)]),
               "fps": np.float64(24)}
    layer = _neutral_contractions(small_model, frames)
    names = [str(name) for name in layer["muscle_names"]]
    layer["muscle_contraction"][:, names.index("zygomaticus_major_R")] = 0.9
    skin_count = job_files.read_model_summary(small_model)["skin_vertices"]
    rng = np.random.default_rng(3)
    maps = {"fat": _cheek_fat(small_model), "stiffness": rng.uniform(0.0, 1.0, skin_count),
            "stiffness_range": np.array([0.8, 1.5]),
            "paralysis": _cheek_fat(small_model, radius=0.03), "paralysed_muscles": np.array(["zygomaticus_major_L"])}
    settings = {"fat_scale": 1.2, "fat_softening": 0.5, "diffusion_steps": 5, "collisions": ["teeth", "lips"],
                "teeth_padding_m": 0.0015}
    sphere = _cheek_sphere(small_model, frames)
    folder = tmp_path / "job"
    folder.mkdir()
    job_files.write_animate_job(folder, small_model, layer, maps, settings, fit_path=few_shapes_fit["fit"],
                                weights=weights, colliders=[("cheek sphere", sphere)])
    code, messages, err = _run(folder)
    assert code == 0, err
    collider = next(folder.glob("collider*.npz"))
    completed = _cli("animate", folder / job_files.MODEL_FILE, folder / job_files.FIT_FILE,
                     folder / job_files.WEIGHTS_FILE, "--muscles", folder / job_files.ACTIVATIONS_FILE,
                     "--maps", folder / job_files.MAPS_FILE, "--fat-scale", 1.2, "--fat-softening", 0.5,
                     "--diffusion-steps", 5, "--collisions", "teeth,lips", "--teeth-padding", 0.0015,
                     "--collider", collider, "-o", tmp_path / "cli.npz")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    with np.load(folder / job_files.RESULT_FILE, allow_pickle=False) as job_result, \
            np.load(tmp_path / "cli.npz", allow_pickle=False) as cli_result:
        assert sorted(job_result.files) == sorted(cli_result.files)
        for key in job_result.files:
            if key != "frame_seconds":
                np.testing.assert_array_equal(job_result[key], cli_result[key], err_msg=key)
        assert job_result["contacts"].max() > 0


@pytest.mark.parametrize("setting, value, flag, shown", [
    ("fat_scale", 10.0, "--fat-scale", "expected a number in [0.5, 1.5], found 10"),
    ("fat_scale", 0.0, "--fat-scale", "expected a number in [0.5, 1.5], found 0"),
    ("fat_softening", -0.5, "--fat-softening", "expected a number in [0, 1], found -0.5"),
    ("diffusion_steps", 1_000_000_000, "--diffusion-steps", "expected a whole number in [0, 1000]"),
    ("diffusion_time_step_m2", 1.0, "--diffusion-time-step", "expected a number in [1e-09, 0.001], found 1"),
    ("substeps", 0, "--substeps", "expected a whole number in [1, 100], found 0"),
    ("diffusion_spread_m", 0.2, "--diffusion-spread", "expected a number in [0, 0.05], found 0.2"),
])
def test_both_doors_refuse_an_out_of_range_setting_with_the_same_message(tmp_path, small_model, setting, value,
                                                                       flag, shown):
    folder = tmp_path / "job"
    folder.mkdir()
    job_files.write_animate_job(folder, small_model, _neutral_contractions(small_model, 1), None, {setting: value})
    with pytest.raises(JobError) as from_job:
        read_job(folder)
    completed = _cli("animate", small_model, folder / job_files.ACTIVATIONS_FILE, flag, value,
                     "-o", tmp_path / "out.npz", timeout=120)
    assert completed.returncode == 2, completed.stderr
    from_cli = json.loads(completed.stdout.splitlines()[-1])["message"]
    assert f"settings.{setting}: {shown}" in str(from_job.value)
    assert f"{flag}: {shown}" in from_cli
    # the same problem and fix, only the field spelt as each door spells it
    assert str(from_job.value).split(": ", 2)[2] == from_cli.split(": ", 1)[1]
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("name", ["maps_over.npz", "maps_range.npz", "maps_typo.npz", "act_huge.npz", "act_nan.npz",
                                  "act_typo.npz"])
def test_both_doors_refuse_a_bad_input_file_with_the_same_message(tmp_path, small_model, name):
    """A MAPS.npz or ACTIVATIONS.npz whose content is wrong: the same problem and fix from a job
    folder (inputs.maps / inputs.activations) as from the command line (--maps / ACTIVATIONS),
    exit 2, before any frame."""
    from solver.model_file import load_model
    from tests.test_bad_input import bad_content_files
    arrays = bad_content_files(load_model(small_model))[name]
    is_maps = name.startswith("maps")
    folder = tmp_path / "job"
    folder.mkdir()
    activations = arrays if not is_maps else _neutral_contractions(small_model, 2)
    job_files.write_animate_job(folder, small_model, activations, arrays if is_maps else None, {})
    code, messages, _ = _run(folder)
    assert code == EXIT_BAD_INPUT and messages[-1]["status"] == "error"
    from_job = messages[-2]["message"]
    path = folder / (job_files.MAPS_FILE if is_maps else job_files.ACTIVATIONS_FILE)
    door = ["--maps", path] if is_maps else []
    completed = _cli("animate", small_model, folder / job_files.ACTIVATIONS_FILE, *door, "-o", tmp_path / "out.npz",
                     timeout=120)
    assert completed.returncode == 2, completed.stderr
    from_cli = json.loads(completed.stdout.splitlines()[-1])["message"]
    assert from_job.startswith("job.json: inputs.maps: " if is_maps else "job.json: inputs.activations: "), from_job
    assert from_cli.startswith("--maps: " if is_maps else "ACTIVATIONS: "), from_cli
    assert from_job.split(": ", 2)[2] == from_cli.split(": ", 1)[1]
    assert "Fix: " in from_cli and not (tmp_path / "out.npz").exists()


# --------------------------------------------------------------------------- resuming a bake

def _resume_case(folder, small_model, fit_path, frames, **settings):
    weights = {"names": np.array(["mouthSmile_L", "jawOpen"]),
               "weights": np.column_stack([np.linspace(0, 1, frames), np.linspace(0, 0.6, frames)]),
               "fps": np.float64(30)}
    folder.mkdir()
    # The cache in centimetres from scene frame 5, as the add-on asks for a rig modelled in cm.
    job_files.write_animate_job(folder, small_model, None, None, {"collisions": ["teeth", "lips"],
                                                                  "cache_metres_per_unit": 0.01,
                                                                  "cache_start_frame": 5, **settings},
                                fit_path=fit_path, weights=weights)


def test_a_cancelled_bake_resumes_to_the_uninterrupted_result(tmp_path, few_shapes_fit, small_model):
    """Shape keys through the fit with teeth and lip contact: a bake stopped by SIGTERM after a
    few frames and resumed writes the result an uninterrupted bake writes (1e-6 m; the carried
    Newton factor is the one thing not saved); a resume with other settings, or with nothing
    to resume, is refused with the reason."""
    frames = 10
    _resume_case(tmp_path / "whole", small_model, few_shapes_fit["fit"], frames)
    code, _, err = _run(tmp_path / "whole")
    assert code == 0, err
    stopped = tmp_path / "stopped"
    _resume_case(stopped, small_model, few_shapes_fit["fit"], frames)
    process = _start(stopped)
    for line in process.stdout:
        if json.loads(line).get("frame", 0) >= 4:
            break
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=120)
    assert process.returncode == EXIT_CANCELLED
    with np.load(stopped / ".result.partial" / "state.npz", allow_pickle=False) as state:
        done = int(state["frames_done"])
    assert 4 <= done < frames and not (stopped / "result.npz").exists()
    # The solved skin waits on disk in full precision (physics/skin_store.py), not in the .pc2 alone.
    assert (stopped / ".result.partial" / ".result.skin.npy").is_file()

    job = json.loads((stopped / "job.json").read_text())
    (stopped / "job.json").write_text(json.dumps({**job, "settings": {**job["settings"], "resume": True,
                                                                      "teeth_padding_m": 0.002}}))
    code, messages, _ = _run(stopped)
    assert code == EXIT_BAD_INPUT and "settings.resume: the saved bake was made with other inputs or settings" in \
        messages[-2]["message"]
    (stopped / "job.json").write_text(json.dumps({**job, "settings": {**job["settings"], "resume": True}}))
    code, messages, err = _run(stopped)
    assert code == 0, err
    assert [m["frame"] for m in messages if m["type"] == "progress" and m.get("frame")] == \
        list(range(done + 1, frames + 1))
    with np.load(tmp_path / "whole" / "result.npz", allow_pickle=False) as whole, \
            np.load(stopped / "result.npz", allow_pickle=False) as resumed:
        gap = np.abs(whole["skin_positions"] - resumed["skin_positions"]).max()
        assert gap < 1e-6, f"resumed bake differs by {gap:.2e} m"
        for key in ("converged", "contacts", "inverted_tets"):
            np.testing.assert_array_equal(whole[key], resumed[key], err_msg=key)
    (whole_cache, start, _), (resumed_cache, _, _) = (pc2.read_pc2(folder / "result.pc2")
                                                      for folder in (tmp_path / "whole", stopped))
    assert whole_cache.shape == resumed_cache.shape == (frames, len(whole_cache[0]), 3) and start == 5.0
    assert np.abs(whole_cache - resumed_cache).max() < 1e-4                  # cm
    with np.load(stopped / "result.npz", allow_pickle=False) as resumed:
        np.testing.assert_allclose(0.01 * resumed_cache, resumed["skin_positions"], atol=1e-8)
    assert not (stopped / ".result.partial").exists()
    code, messages, _ = _run(stopped)
    assert code == EXIT_BAD_INPUT and "settings.resume: there is nothing to resume" in messages[-2]["message"]
