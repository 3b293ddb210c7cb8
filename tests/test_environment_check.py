"""`python -m solver check` (solver/environment_check.py): what the solver Python can run, in a
real child process, and the one feature that needs IPOPT saying so when it is absent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver import environment_check
from solver.physics.cholesky import BACKEND_VARIABLE
from solver.requests.animate import AnimateRequest
from solver.requests.fields import RequestError

REPOSITORY = Path(__file__).resolve().parents[1]


def _check(environment=None):
    env = {key: value for key, value in os.environ.items() if key != BACKEND_VARIABLE}
    env.update({"PYTHONPATH": str(REPOSITORY), **(environment or {})})
    completed = subprocess.run([sys.executable, "-m", "solver", "--json", "check"], capture_output=True, text=True,
                               env=env, timeout=120)
    lines = [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]
    return completed.returncode, {line["type"]: line for line in lines}


def test_check_names_the_packages_and_the_cholesky_back_end():
    code, lines = _check()
    assert code == 0 and lines["done"]["status"] == "ok"
    result = lines["result"]
    assert result["ok"] and result["problems"] == []
    assert result["cholesky_backend"] == "scikit-sparse"       # the faster one, when it imports
    for name in ("numpy", "scipy", "numba", "scikit-sparse", "cholespy", "cyipopt"):
        assert result["packages"][name]["imports"] and result["packages"][name]["version"], name
    assert result["message"].startswith("solver ready: Python 3.")
    code, lines = _check({BACKEND_VARIABLE: "cholespy"})
    assert code == 0 and lines["result"]["cholesky_backend"] == "cholespy"


def test_a_solver_that_cannot_run_says_why_and_exits_2():
    code, lines = _check({BACKEND_VARIABLE: "umfpack"})
    assert code == 2 and lines["done"]["status"] == "error"
    assert not lines["result"]["ok"]
    assert "choose one of scikit-sparse, cholespy" in lines["error"]["message"]


def test_the_ipopt_contact_solver_is_refused_where_ipopt_is_missing(monkeypatch, tmp_path):
    for name in ("MODEL.npz", "A.npz"):
        (tmp_path / name).write_bytes(b"")        # existing paths: the files are read later, not here
    fields = dict(model=tmp_path / "MODEL.npz", activations=tmp_path / "A.npz", output=tmp_path / "R.npz",
                  collisions=["teeth"], contact_solver="ipopt")
    monkeypatch.setattr(environment_check, "ipopt_available", lambda: False)
    with pytest.raises(RequestError, match="contact_solver: ipopt needs IPOPT") as error:
        AnimateRequest(**fields)
    assert "newton" in str(error.value)
