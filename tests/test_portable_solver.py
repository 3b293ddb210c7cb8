"""The portable solver install, for real: the add-on's installer with --portable makes a venv
of wheels only (numpy, scipy, numba, cholespy — no scikit-sparse, no cyipopt, nothing built),
`solver check` there reports cholespy, and a demo-head animation with teeth contact run in it
lands where the same run on this (scikit-sparse) Python does. Needs the package registry."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 600


def _json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def _solver(python, *arguments):
    completed = subprocess.run([str(python), "-m", "solver", "--json", *map(str, arguments)], capture_output=True,
                               text=True, timeout=RUN_TIMEOUT_S,
                               env={**{k: v for k, v in os.environ.items() if k != "FACE_PHYSICS_CHOLESKY"},
                                    "PYTHONPATH": str(ROOT)})
    return completed.returncode, _json_lines(completed.stdout), completed.stderr


@pytest.fixture(scope="module")
def portable_python(tmp_path_factory):
    venv = tmp_path_factory.mktemp("portable") / "venv"
    completed = subprocess.run([sys.executable, str(ROOT / "blender_addon" / "install_solver.py"), "--venv", str(venv),
                                "--requirements", str(ROOT / "requirements.txt"), "--portable"],
                               capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    lines = _json_lines(completed.stdout)
    assert completed.returncode == 0 and lines[-1] == {"type": "done", "status": "ok", "exit_code": 0}, \
        (completed.stdout[-3000:], completed.stderr[-3000:])
    result = next(line for line in lines if line["type"] == "result")
    assert result["portable"] is True
    return Path(result["python"])


def test_the_portable_install_has_cholespy_and_no_system_library_packages(portable_python):
    code, lines, stderr = _solver(portable_python, "check")
    assert code == 0, stderr
    result = next(line for line in lines if line["type"] == "result")
    assert result["ok"] and result["cholesky_backend"] == "cholespy"
    assert not result["packages"]["scikit-sparse"]["version"] and not result["packages"]["cyipopt"]["version"]
    assert not result["ipopt"] and any("ipopt" in note for note in result["notes"])
    assert not any(name in result["packages"] for name in ("pytest", "bpy"))


def test_a_demo_head_animation_runs_the_same_on_the_portable_solver(portable_python, tmp_path):
    assert _solver(sys.executable, "demo-rig", "-o", tmp_path / "head.npz")[0] == 0
    code, _, stderr = _solver(sys.executable, "build-model", tmp_path / "head.npz", "-o", tmp_path / "model.npz",
                              "--target-tets", 2000)
    assert code == 0, stderr
    with np.load(tmp_path / "model.npz", allow_pickle=False) as model:
        names = [str(n) for n in model["muscle_names"]]
    contraction = np.ones((2, len(names)))
    for side in "LR":
        contraction[:, names.index(f"zygomaticus_major_{side}")] = [1.3, 1.6]
    np.savez(tmp_path / "act.npz", muscle_contraction=contraction, jaw=np.array([[0.05, 0, 0, 0, 0], [0.1, 0, 0, 0, 0]]))
    skins = {}
    for label, python in (("scikit-sparse", sys.executable), ("cholespy", portable_python)):
        output = tmp_path / f"result_{label}.npz"
        code, lines, stderr = _solver(python, "animate", tmp_path / "model.npz", tmp_path / "act.npz", "-o", output,
                                      "--collisions", "teeth", "--gravity")
        assert code == 0, (label, stderr[-2000:])
        with np.load(output, allow_pickle=False) as result:
            assert result["converged"].all(), label
            skins[label] = result["skin_positions"]
    assert np.abs(skins["scikit-sparse"] - skins["cholespy"]).max() < 1e-6
