"""Bad input at the command line's `animate`: exit 2 with the problem and its fix, named as the
user typed it, before any work and without touching an input or an earlier output
(solver/requests/animate.py checks every field once; job folders share it, tests/test_jobs.py)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from solver import cli
from solver.model_file import save_model
from solver.rig import save_rig


@pytest.fixture(scope="module")
def files(tmp_path_factory, small_demo_model, demo_rig):
    folder = tmp_path_factory.mktemp("inputs")
    save_model(folder / "model.npz", small_demo_model)
    names = np.array([str(name) for name in small_demo_model["muscle_names"]])
    np.savez(folder / "activations.npz", muscle_contraction=np.ones((2, len(names))), muscle_names=names,
             jaw=np.zeros((2, 5)))
    np.savez(folder / "lips.npz", upper=np.array([0]), lower=np.array([1]))
    np.savez(folder / "weights.npz", names=np.array(["jawOpen"]), weights=np.zeros((2, 1)))
    np.savez(folder / "fit.npz", placeholder=np.zeros(1))
    (folder / "truncated_fit.npz").write_bytes((folder / "weights.npz").read_bytes()[:100])
    save_rig(folder / "rig.npz", demo_rig)
    (folder / "folder.npz").mkdir()
    return folder


def _animate(capsys, files, *arguments, output="out.npz"):
    """Exit status and the last JSON line of `python -m solver --json animate MODEL ACT …`."""
    argv = ["--json", "animate", str(files / "model.npz"), str(files / "activations.npz")]
    if output is not None:
        argv += ["-o", str(output if os.path.isabs(str(output)) else files / output)]
    code = cli.main(argv + [str(a) for a in arguments])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, lines[-1] if lines else {}


CASES = [
    # (arguments after MODEL ACTIVATIONS, output, expected in the message)
    ((), "model.npz", "-o/--output: model.npz is also an input of this request"),
    ((), "activations.npz", "-o/--output: activations.npz is also an input"),
    ((), "out.pc2", "-o/--output: out.pc2 does not end in .npz"),
    ((), "no_such_folder/out.npz", "does not exist. Fix: create it first"),
    ((), "folder.npz", "folder.npz is a folder"),
    (("--dynamic", "--substeps", "0"), "out.npz", "--substeps: expected a whole number in [1, 100], found 0"),
    (("--substeps", "100000"), "out.npz", "--substeps: expected a whole number in [1, 100]"),
    (("--wind", "nan,0,0"), "out.npz", "--wind: expected three finite numbers"),
    (("--wind", "1e9,0,0"), "out.npz", "--wind: 1e+09 m/s is more than the 30 m/s"),
    (("--fat-scale", "0"), "out.npz", "--fat-scale: expected a number in [0.5, 1.5], found 0.0"),
    (("--fat-scale", "-1"), "out.npz", "--fat-scale: expected a number in [0.5, 1.5]"),
    (("--fat-scale", "nan"), "out.npz", "--fat-scale: expected a number in [0.5, 1.5], found nan"),
    (("--fat-scale", "10"), "out.npz", "--fat-scale: expected a number in [0.5, 1.5]"),
    (("--fat-softening", "2"), "out.npz", "--fat-softening: expected a number in [0, 1]"),
    (("--diffusion-steps", "-1"), "out.npz", "--diffusion-steps: expected a whole number in [0, 1000]"),
    (("--diffusion-steps", "1000000000"), "out.npz", "--diffusion-steps: expected a whole number in [0, 1000]"),
    (("--diffusion-time-step", "1"), "out.npz", "--diffusion-time-step: expected a number in [1e-09, 0.001]"),
    (("--diffusion-time-step", "0"), "out.npz", "--diffusion-time-step: expected a number in [1e-09, 0.001]"),
    (("--diffusion-steps", "1000", "--diffusion-time-step", "1e-5"), "out.npz",
     "--diffusion-time-step: 1000 steps of 1e-05 m² spread a painted point over 14 cm"),
    (("--collisions", "nose"), "out.npz", "--collisions: expected one of ['teeth', 'lips'], found 'nose'"),
    (("--collisions", "teeth,teeth"), "out.npz", "--collisions: ['teeth', 'teeth'] names one twice"),
    (("--contact-solver", "magic"), "out.npz", "--contact-solver: expected one of ['newton', 'ipopt']"),
    (("--teeth-padding", "0.001"), "out.npz", "--teeth-padding: applies only with teeth collisions"),
    (("--collisions", "teeth", "--teeth-padding", "0.5"), "out.npz",
     "--teeth-padding: expected a number in [1e-05, 0.01], found 0.5"),
    (("--lip-vertices", "{files}/lips.npz"), "out.npz", "--lip-vertices: applies only with lip or teeth collisions"),
    (("--no-detail",), "out.npz", "--no-detail: applies only to shape-key animation"),
    (("--muscles", "{files}/activations.npz"), "out.npz", "--muscles: adds muscle contractions on top of shape-key"),
    (("--maps", "{files}/missing.npz"), "out.npz", "--maps: {files}/missing.npz: no such file"),
    (("--maps", "{files}/folder.npz"), "out.npz", "--maps: {files}/folder.npz is a folder, not a MAPS.npz"),
    (("--collider", "{files}/missing.npz"), "out.npz", "--collider: {files}/missing.npz: no such file"),
]


@pytest.mark.parametrize("arguments, output, expected", CASES, ids=[case[2][:40] for case in CASES])
def test_a_bad_animate_argument_exits_2_with_the_problem_and_its_fix(capsys, files, arguments, output, expected):
    before = {path.name: path.stat().st_mtime_ns for path in files.iterdir()}
    arguments = [a.replace("{files}", str(files)) for a in arguments]
    code, message = _animate(capsys, files, *arguments, output=output)
    assert code == 2, message
    assert message["type"] == "error" and expected.replace("{files}", str(files)) in message["message"], message
    assert "Fix: " in message["message"]
    assert {path.name: path.stat().st_mtime_ns for path in files.iterdir()} == before, "an input was touched"
    assert not (files / "out.npz").exists() and not (files / "out.pc2").exists()


def test_a_model_given_as_a_folder_or_not_at_all_is_named(capsys, files, tmp_path):
    code = cli.main(["--json", "animate", str(files / "folder.npz"), str(files / "activations.npz"),
                     "-o", str(tmp_path / "out.npz")])
    message = json.loads(capsys.readouterr().out.splitlines()[-1])["message"]
    assert code == 2 and "MODEL: " in message and "is a folder, not a MODEL.npz" in message
    code = cli.main(["--json", "animate", str(tmp_path / "none.npz"), str(files / "activations.npz"),
                     "-o", str(tmp_path / "out.npz")])
    message = json.loads(capsys.readouterr().out.splitlines()[-1])["message"]
    assert code == 2 and "MODEL: " in message and "no such file" in message


def test_an_earlier_result_and_its_cache_survive_a_refused_run(capsys, files, tmp_path):
    earlier = {tmp_path / "out.npz": b"earlier result", tmp_path / "out.pc2": b"earlier cache"}
    for path, content in earlier.items():
        Path(path).write_bytes(content)
    code, message = _animate(capsys, files, "--fat-scale", "3", output=tmp_path / "out.npz")
    assert code == 2
    assert all(Path(path).read_bytes() == content for path, content in earlier.items())


def _solver(capsys, files, *arguments):
    """Exit status and the last JSON line of `python -m solver --json …` ({files} → the folder)."""
    code = cli.main(["--json"] + [str(a).replace("{files}", str(files)) for a in arguments])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    return code, lines[-1] if lines else {}


OTHER_CASES = [
    (("build-model", "{files}/rig.npz", "-o", "{files}/rig.npz"), "-o/--output: rig.npz is also an input"),
    (("build-model", "{files}/rig.npz", "-o", "{files}/m.npz", "--target-tets", "0"),
     "--target-tets: expected a whole number in [500, 500000], found 0"),
    (("build-model", "{files}/rig.npz", "-o", "{files}/m.npz", "--target-tets", "-5"), "--target-tets: expected"),
    (("build-model", "{files}/rig.npz", "-o", "{files}/m.npz", "--target-tets", "1000000000"),
     "--target-tets: expected a whole number in [500, 500000]"),
    (("build-model", "{files}/rig.npz", "-o", "{files}/m.npz", "--target-tets", "1e9"),
     "argument --target-tets: invalid int value: '1e9'"),
    (("build-model", "{files}/folder.npz", "-o", "{files}/m.npz"), "RIG: {files}/folder.npz is a folder"),
    (("build-model", "{files}/rig.npz", "-o", "{files}/model.pc2"), "-o/--output: model.pc2 does not end in .npz"),
    (("build-model", "{files}/rig.npz"), "the following arguments are required: -o/--output"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/model.npz"), "-o/--output: model.npz is also an"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/f.npz", "--jobs", "0"),
     "--jobs: expected a whole number in [1, 64], found 0"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/f.npz", "--jobs", "1000"), "--jobs: expected"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/fit.npz", "--previous-fit", "{files}/fit.npz"),
     "-o/--output: fit.npz is also an input"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/f.npz", "--shapes", "jawOpen,jawOpen"),
     "--shapes: 'jawOpen' is listed twice"),
    (("fit", "{files}/model.npz", "{files}/rig.npz", "-o", "{files}/f.npz", "--shapes", "noSuchShape"),
     "shape keys not in the rig: noSuchShape"),
    (("animate", "{files}/model.npz", "{files}/fit.npz", "{files}/weights.npz", "-o", "{files}/fit.npz"),
     "-o/--output: fit.npz is also an input"),
    (("animate", "{files}/model.npz", "{files}/weights.npz", "{files}/weights.npz", "-o", "{files}/out.npz"),
     "this is shape-key weights (WEIGHTS.npz), not a fit"),
    (("animate", "{files}/model.npz", "{files}/truncated_fit.npz", "{files}/weights.npz", "-o", "{files}/out.npz"),
     "not a readable fit file, or a damaged one"),
    (("animate", "{files}/model.npz", "{files}/fit.npz", "{files}/weights.npz", "--muscles", "{files}/missing.npz",
      "-o", "{files}/out.npz"), "--muscles: {files}/missing.npz: no such file"),
    (("animate", "{files}/model.npz", "{files}/fit.npz", "{files}/weights.npz", "-o", "{files}/out.npz",
      "--substeps", "two"), "argument --substeps: invalid int value: 'two'"),
    (("no-such-command",), "invalid choice: 'no-such-command'"),
]


@pytest.mark.parametrize("arguments, expected", OTHER_CASES, ids=[case[1][:40] for case in OTHER_CASES])
def test_bad_build_fit_and_usage_input_exits_2_with_a_json_error(capsys, files, arguments, expected):
    before = {path.name: path.stat().st_mtime_ns for path in files.iterdir()}
    code, message = _solver(capsys, files, *arguments)
    assert code == 2, message
    assert message.get("type") == "error" and expected.replace("{files}", str(files)) in message["message"], message
    assert {path.name: path.stat().st_mtime_ns for path in files.iterdir()} == before, "an input was touched"
    assert not {"m.npz", "f.npz", "out.npz", "model.pc2"} & {path.name for path in files.iterdir()}
