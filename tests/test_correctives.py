"""Quadratic corrective shape keys (issue 42, paper 002 §4): on the small demo model with two fitted
keys, `python -m solver correctives` (a real child process, samples solved by `animate` children
with teeth and lip contact) writes a CORR.npz whose corrected rig, played by `play-correctives`,
reproduces the simulated samples it was fitted to far better than the linear rig; a rerun solves
nothing again; bad input is refused with the field and the fix."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solver.correctives.corr_file import CorrectedRig, CorrectivesFormatError, load_correctives
from solver.inverse.fit_file import save_fit
from solver.inverse.shapes import fit_shapes, rig_shape_deltas
from solver.jobs import JobError, read_job
from solver.model_file import save_model
from solver.npz_files import read_npz, write_npz_atomically
from solver.pc2 import read_pc2
from solver.requests.correctives import CorrectivesRequest, samples_folder
from solver.requests.fields import RequestError
from solver.rig import save_rig

ROOT = Path(__file__).resolve().parents[1]
KEYS = ["jawOpen", "mouthSmile_L"]

pytestmark = pytest.mark.slow       # two keys fitted, 3 chains of 24 samples simulated: a few minutes


def _solver(*arguments, timeout=900):
    run = subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, arguments)], cwd=ROOT,
                         capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return run, lines


@pytest.fixture(scope="module")
def built(tmp_path_factory, small_demo_model, demo_rig):
    folder = tmp_path_factory.mktemp("correctives")
    save_model(folder / "model.npz", small_demo_model)
    save_rig(folder / "rig.npz", demo_rig)
    fit = fit_shapes(small_demo_model, demo_rig, KEYS, jobs=1)
    fit["shape_key_deltas"] = rig_shape_deltas(demo_rig, fit["shape_key_names"])
    save_fit(folder / "fit.npz", fit)
    started = time.monotonic()
    # Threshold 0: the one pair is kept whatever its probe says, so the pair term is fitted and tested.
    run, lines = _solver("correctives", folder / "model.npz", folder / "fit.npz", folder / "rig.npz",
                         "-o", folder / "corr.npz", "--jobs", 2, "--threshold-mm", 0)
    seconds = time.monotonic() - started
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return {"folder": folder, "lines": lines, "seconds": seconds}


def _stored_samples(folder: Path):
    """(weights (S, K), skins (S, V, 3)) of the solved samples the fit used (the probe of a kept
    pair is solved again in the pair's own chain)."""
    weights, skins = [], []
    for path in sorted(samples_folder(folder / "corr.npz").glob("*.npz")):
        if path.name.startswith("probe-"):
            continue
        arrays = read_npz(path)
        weights.append(arrays["weights"])
        skins.append(arrays["skin"])
    return np.concatenate(weights), np.concatenate(skins)


def test_the_corrected_rig_reproduces_its_samples_better_than_the_linear_rig(built, demo_rig):
    folder = built["folder"]
    result = built["lines"][-2] if built["lines"][-1]["type"] == "done" else built["lines"][-1]
    assert result["type"] == "result" and result["pairs"] == 1 and result["pairs_kept"] == 1, result
    corr = load_correctives(folder / "corr.npz", [str(n) for n in demo_rig.shape_key_names], len(demo_rig.vertices))
    assert [tuple(row) for row in corr["term_names"]] == [("jawOpen", ""), ("mouthSmile_L", ""),
                                                          ("jawOpen", "jawOpen"), ("mouthSmile_L", "mouthSmile_L"),
                                                          ("jawOpen", "mouthSmile_L")]
    weights, skins = _stored_samples(folder)
    assert len(weights) == 4 + 4 + 16           # singles and the pair's samples
    names = [str(n) for n in demo_rig.shape_key_names]
    rig = CorrectedRig(demo_rig.vertices, demo_rig.shape_key_deltas, names, corr)
    full = np.zeros((len(weights), len(names)))
    full[:, [names.index(key) for key in KEYS]] = weights
    corrected = np.array([1e3 * np.linalg.norm(rig.frame(w) - skin, axis=1).max() for w, skin in zip(full, skins)])
    linear = np.array([1e3 * np.linalg.norm(rig.linear_frame(w) - skin, axis=1).max() for w, skin in zip(full, skins)])
    print(f"per-sample worst vertex: corrected {corrected.mean():.3f} mean / {corrected.max():.3f} max mm, "
          f"linear {linear.mean():.3f} / {linear.max():.3f} mm; built in {built['seconds']:.0f} s")
    assert linear.max() > 0.3                        # there is something to correct (contacts, non-linearity)
    assert corrected.mean() < 0.5 * linear.mean()
    assert corrected.max() < linear.max()
    # CORR.npz's own residual figures are those of the rig it holds (float32 terms: within 1 µm).
    fitted = corr["sample_in_fit"]
    assert fitted.sum() == 24
    assert np.allclose(np.sort(corr["sample_error_mm"][fitted]), np.sort(corrected), atol=1e-3)


def test_play_correctives_writes_the_corrected_frames_as_animate_does(built, demo_rig):
    folder = built["folder"]
    weights, skins = _stored_samples(folder)
    write_npz_atomically(folder / "weights.npz", {"names": np.array(KEYS), "weights": weights, "fps": np.array(30.0)})
    run, lines = _solver("play-correctives", folder / "rig.npz", folder / "corr.npz", folder / "weights.npz",
                         "-o", folder / "played.npz", timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    played = read_npz(folder / "played.npz")
    corr = load_correctives(folder / "corr.npz")
    error = 1e3 * np.linalg.norm(played["skin_positions"] - skins, axis=2).max(axis=1)
    assert np.allclose(np.sort(error), np.sort(corr["sample_error_mm"][corr["sample_in_fit"]]), atol=1e-3)
    cache, start, _ = read_pc2(folder / "played.pc2")
    assert cache.shape == played["skin_positions"].shape and start == 1.0
    assert np.allclose(cache, played["skin_positions"], atol=1e-6)
    for key in ("converged", "newton_iterations", "frame_seconds", "fps", "skull_transforms", "jaw_transforms",
                "penetration_depth_max", "contacts"):
        assert key in played
    assert not (folder / ".played.partial").exists()


def test_a_rerun_solves_no_sample_again(built):
    folder = built["folder"]
    before = {path.name: path.stat().st_mtime_ns for path in samples_folder(folder / "corr.npz").glob("*.npz")}
    started = time.monotonic()
    run, lines = _solver("correctives", folder / "model.npz", folder / "fit.npz", folder / "rig.npz",
                         "-o", folder / "corr.npz", "--jobs", 2, "--threshold-mm", 0, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    after = {path.name: path.stat().st_mtime_ns for path in samples_folder(folder / "corr.npz").glob("*.npz")}
    assert before == after and len(before) == 4       # two singles, the probe, the pair
    skipped = [line for line in lines if line.get("skipped")]
    assert sum(line["skipped"] for line in skipped) == 4
    assert time.monotonic() - started < 0.5 * built["seconds"]


def test_bad_input_is_refused_with_the_field_and_the_fix(built, demo_rig):
    folder = built["folder"]
    files = {"model": folder / "model.npz", "fit": folder / "fit.npz", "rig": folder / "rig.npz"}
    cases = [({"keys": ("jawOpen", "nope")}, "keys"), ({"threshold_mm": -1.0}, "threshold_mm"),
             ({"processes": 0}, "processes"), ({"collisions": ("teeth", "nose")}, "collisions"),
             ({"output": folder / "fit.npz"}, "output"), ({"output": folder / "corr.txt"}, "output"),
             ({"combinations": -1}, "combinations"), ({"pairs": (("jawOpen", "jawOpen"),)}, "pairs"),
             ({"pairs": (("jawOpen", "mouthSmile_L"), ("mouthSmile_L", "jawOpen"))}, "pairs"),
             ({"pairs": (("jawOpen",),)}, "pairs"), ({"pairs": (("jawOpen", "mouthPucker"),)}, "pairs")]
    for change, field in cases:
        arguments = {**files, "output": folder / "other.npz", **change}
        with pytest.raises(RequestError) as caught:
            from solver.requests.correctives import run_correctives
            run_correctives(CorrectivesRequest(**arguments), None)
        assert caught.value.field == field, (change, str(caught.value))
    # A key fitted on top of another (as mouthClose on jawOpen) is sampled only with it.
    on_top = dict(read_npz(folder / "fit.npz"), fit_context=np.array(["", "jawOpen"]))
    write_npz_atomically(folder / "on_top_fit.npz", on_top)
    with pytest.raises(RequestError, match="mouthSmile_L is fitted on top of jawOpen") as caught:
        from solver.requests.correctives import run_correctives
        run_correctives(CorrectivesRequest(**{**files, "fit": folder / "on_top_fit.npz"}, keys=("mouthSmile_L",),
                                           output=folder / "other.npz"), None)
    assert caught.value.field == "keys" and "add jawOpen to the keys" in str(caught.value)
    write_npz_atomically(folder / "weights.npz", {"names": np.array(KEYS), "weights": np.ones((1, 2))})
    with pytest.raises(CorrectivesFormatError, match="key_names: missing"):
        load_correctives(folder / "rig.npz")
    with pytest.raises(CorrectivesFormatError, match="vertices"):
        load_correctives(folder / "corr.npz", vertex_count=12)
    run, lines = _solver("play-correctives", folder / "rig.npz", folder / "fit.npz", folder / "weights.npz",
                         "-o", folder / "bad.npz", timeout=120)
    assert run.returncode == 2 and "CORR" in lines[-1]["message"] and "Fix" in lines[-1]["message"], lines
    run, lines = _solver("correctives", folder / "model.npz", folder / "fit.npz", folder / "rig.npz",
                         "-o", folder / "c.npz", "--keys", "jawOpen,browDown_L", timeout=120)
    assert run.returncode == 2 and "--keys" in lines[-1]["message"] and "browDown_L" in lines[-1]["message"], lines
    run, lines = _solver("correctives", folder / "model.npz", folder / "fit.npz", folder / "rig.npz",
                         "-o", folder / "c.npz", "--pairs", "jawOpen:mouthSmile_L,mouthPucker", timeout=120)
    assert run.returncode == 2 and "--pairs" in lines[-1]["message"] and "mouthPucker" in lines[-1]["message"], lines
    job = folder / "job"
    job.mkdir()
    for name in ("model.npz", "fit.npz", "rig.npz"):
        (job / name).write_bytes((folder / name).read_bytes())
    (job / "job.json").write_text(json.dumps({"schema_version": 1, "command": "correctives",
                                              "inputs": {"model": "model.npz", "fit": "fit.npz", "rig": "rig.npz"},
                                              "outputs": {"correctives": "corr.npz"},
                                              "settings": {"jobs": 0}}))
    with pytest.raises(JobError, match="settings.jobs"):
        read_job(job)


def test_a_key_fitted_on_top_of_another_is_never_sampled_above_it():
    """mouthClose's activations are a difference to jawOpen's (FIT.npz fit_context): every chain
    carries jawOpen at least as high, single samples on the diagonal, pair samples lifted onto it."""
    from solver.correctives.samples import pair_chain, probe_chain, single_chain
    keys, contexts = ["jawOpen", "mouthClose", "mouthSmile_L"], {"mouthClose": "jawOpen"}
    single = single_chain(keys, "mouthClose", contexts).weights
    np.testing.assert_array_equal(single[:, :2], np.array([[0.25, 0.25], [0.5, 0.5], [0.75, 0.75], [1.0, 1.0]]))
    assert np.all(single[:, 2] == 0.0)
    np.testing.assert_array_equal(probe_chain(keys, "mouthClose", ["mouthSmile_L"], contexts).weights, [[1, 1, 1]])
    pair = pair_chain(keys, "jawOpen", "mouthClose", contexts=contexts).weights
    assert len(pair) == 16 and np.all(pair[:, 0] >= pair[:, 1])
    np.testing.assert_array_equal(pair[:4, :2], [[0.25, 0.25], [0.5, 0.5], [0.75, 0.75], [1.0, 1.0]])
    np.testing.assert_array_equal(single_chain(keys, "mouthSmile_L", contexts).weights[:, :2], 0.0)
    assert np.array_equal(single_chain(keys, "jawOpen").weights, single_chain(keys, "jawOpen", contexts).weights)
