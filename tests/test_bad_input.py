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
    for name, arrays in bad_content_files(small_demo_model).items():
        np.savez(folder / name, **arrays)
    (folder / "text.npz").write_text("vertices,faces\n0,0,0\n")
    return folder


def bad_content_files(model) -> dict:
    """ACTIVATIONS, MAPS, LIPS and MESH files whose content is wrong, by file name."""
    skin = len(model["skin_vertices"])
    names = np.array([str(name) for name in model["muscle_names"]])
    muscles, jaw = len(names), np.zeros((2, 5))

    def contraction(values, **more):
        return {"muscle_contraction": values, "muscle_names": names, "jaw": jaw, **more}
    return {
        "act_nan.npz": contraction(np.full((2, muscles), np.nan)),
        "act_zero.npz": contraction(np.zeros((2, muscles))),
        "act_huge.npz": contraction(np.full((2, muscles), 1e6)),
        "act_stretched.npz": contraction(np.full((2, muscles), 0.1)),
        "act_unknown.npz": {"muscle_contraction": np.ones((2, 1)), "muscle_names": np.array(["noSuchMuscle"]),
                            "jaw": jaw},
        "act_twice.npz": {"muscle_contraction": np.ones((2, 2)), "muscle_names": names[[0, 0]], "jaw": jaw},
        "act_no_jaw.npz": {"muscle_contraction": np.ones((2, muscles)), "muscle_names": names},
        "act_jaw_frames.npz": contraction(np.ones((2, muscles)), jaw=np.zeros((3, 5))),
        "act_jaw_inf.npz": contraction(np.ones((2, muscles)), jaw=np.full((2, 5), np.inf)),
        "act_no_frames.npz": {"muscle_contraction": np.ones((0, muscles)), "muscle_names": names,
                              "jaw": np.zeros((0, 5))},
        "act_fps_text.npz": contraction(np.ones((2, muscles)), fps=np.array("fast")),
        "act_fps_zero.npz": contraction(np.ones((2, muscles)), fps=np.float64(0.0)),
        "act_head_shear.npz": contraction(np.ones((2, muscles)), head_transforms=np.tile(np.diag([2.0, 1, 1, 1]), (2, 1, 1))),
        "act_typo.npz": contraction(np.ones((2, muscles)), head_transform=np.tile(np.eye(4), (2, 1, 1))),
        "maps_over.npz": {"fat": np.full(skin, 1.5)},
        "maps_nan.npz": {"fat": np.full(skin, np.nan)},
        "maps_count.npz": {"fat": np.zeros(10)},
        "maps_no_range.npz": {"stiffness": np.zeros(skin)},
        "maps_range.npz": {"stiffness": np.zeros(skin), "stiffness_range": np.array([0.0, 1000.0])},
        "maps_range_only.npz": {"density_range": np.array([1.0, 2.0])},
        "maps_muscle.npz": {"paralysed_muscles": np.array(["noSuchMuscle"])},
        "maps_typo.npz": {"paralyzed_muscles": np.array(["noSuchMuscle"])},
        "lips_both.npz": {"upper": np.array([0, 1]), "lower": np.array([1, 2])},
        "lips_range.npz": {"upper": np.array([skin + 5]), "lower": np.array([1])},
        "collider_keys.npz": {"vertices": np.zeros((4, 3)), "triangles": np.array([[0, 1, 2]])},
    }


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
    (("--collider", "{files}/text.npz"), "out.npz", "text.npz: not an .npz archive (a text file"),
    (("--collider", "{files}/collider_keys.npz"), "out.npz", "missing arrays ['faces', 'transforms']"),
    (("--maps", "{files}/text.npz"), "out.npz", "text.npz: not an .npz archive (a text file"),
    (("--maps", "{files}/maps_over.npz"), "out.npz", "--maps: maps_over.npz: fat: painted weights must be in [0, 1]"),
    (("--maps", "{files}/maps_nan.npz"), "out.npz", "--maps: maps_nan.npz: fat: contains NaN or infinite values"),
    (("--maps", "{files}/maps_count.npz"), "out.npz", "--maps: maps_count.npz: fat: expected shape"),
    (("--maps", "{files}/maps_no_range.npz"), "out.npz", "stiffness_range: give it with stiffness and only then"),
    (("--maps", "{files}/maps_range.npz"), "out.npz", "stiffness_range: multipliers must be in [0.01, 100]"),
    (("--maps", "{files}/maps_range_only.npz"), "out.npz", "density_range: given without a density map"),
    (("--maps", "{files}/maps_muscle.npz"), "out.npz", "paralysed_muscles: unknown muscle 'noSuchMuscle'"),
    (("--maps", "{files}/maps_typo.npz"), "out.npz", "paralyzed_muscles: not one of the keys of MAPS.npz"),
    (("--collisions", "lips", "--lip-vertices", "{files}/lips_both.npz"), "out.npz", "vertices are on both lips"),
    (("--collisions", "lips", "--lip-vertices", "{files}/lips_range.npz"), "out.npz",
     "'upper' indices must lie in [0, "),
    (("--collisions", "lips", "--lip-vertices", "{files}/text.npz"), "out.npz", "not an .npz archive"),
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
    # ACTIVATIONS.npz whose content is wrong: named as the door names it, before any frame
    *((("animate", "{files}/model.npz", f"{{files}}/{name}", "-o", "{files}/out.npz"), expected) for name, expected in (
        ("act_nan.npz", "ACTIVATIONS: act_nan.npz: muscle_contraction: contains NaN or infinite values"),
        ("act_zero.npz", "muscle_contraction: values must be in [0.5, 10], found 0"),
        ("act_huge.npz", "muscle_contraction: values must be in [0.5, 10], found 1e+06"),
        ("act_stretched.npz", "muscle_contraction: values must be in [0.5, 10], found 0.1"),
        ("act_unknown.npz", "muscle_names: unknown muscle 'noSuchMuscle'"),
        ("act_twice.npz", "is listed twice"),
        ("act_no_jaw.npz", "jaw: missing"),
        ("act_jaw_frames.npz", "muscle_contraction: expected shape (3, "),
        ("act_jaw_inf.npz", "jaw: contains NaN or infinite values"),
        ("act_no_frames.npz", "jaw: has no frames"),
        ("act_fps_text.npz", "fps: expected numbers"),
        ("act_fps_zero.npz", "fps: must be > 0"),
        ("act_head_shear.npz", "head_transforms: frame 0 is not rigid"),
        ("act_typo.npz", "head_transform: not one of the keys of ACTIVATIONS.npz"),
        ("text.npz", "ACTIVATIONS: text.npz: not an .npz archive"),
        ("folder.npz", "folder.npz is a folder"))),
    (("animate", "{files}/model.npz", "{files}/text.npz", "{files}/weights.npz", "-o", "{files}/out.npz"),
     "text.npz: not an .npz archive (a text file"),
]


@pytest.mark.parametrize("arguments, expected", OTHER_CASES, ids=[case[1][:40] for case in OTHER_CASES])
def test_bad_build_fit_and_usage_input_exits_2_with_a_json_error(capsys, files, arguments, expected):
    before = {path.name: path.stat().st_mtime_ns for path in files.iterdir()}
    code, message = _solver(capsys, files, *arguments)
    assert code == 2, message
    assert message.get("type") == "error" and expected.replace("{files}", str(files)) in message["message"], message
    assert {path.name: path.stat().st_mtime_ns for path in files.iterdir()} == before, "an input was touched"
    assert not {"m.npz", "f.npz", "out.npz", "model.pc2"} & {path.name for path in files.iterdir()}
