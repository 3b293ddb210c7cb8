"""Create the solver's virtual environment and install its packages, speaking JSON lines.

Run by the add-on's "Install solver" button as a background process with Blender's Python:

    python install_solver.py --venv DIR --requirements requirements.txt [--portable]

It does what `python3 build.py setup` does for a checkout, minus the system libraries
(installing those needs root): create the venv, upgrade pip, install requirements.txt without
the test packages, check the imports. scikit-sparse and cyipopt build against SuiteSparse and
IPOPT; where that fails (Windows, macOS, a Linux without the libraries) the installer goes on
with the portable set — wheels only, no compiler: numpy, scipy, numba and cholespy, whose
wheels bundle CHOLMOD (solver/physics/cholesky.py) — and says so; `--portable` goes there
directly. Without IPOPT only the optional `ipopt` contact solver is missing. Messages are the
job protocol's (progress, error, result, done), so the same poller shows them. A stamp file is
written only after the import check passes, so a half-finished install never counts. Last, the
model builder's numba kernels are compiled into their cache (a small demo build), so the first
real build does not pay for it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solver_environment import INSTALLED_STAMP, solver_requirements, venv_python  # noqa: E402

SYSTEM_LIBRARIES = ("SuiteSparse (CHOLMOD) and IPOPT with headers, and pkg-config; on Debian/Ubuntu: "
                    "sudo apt-get install libsuitesparse-dev coinor-libipopt-dev pkg-config libopenblas0-pthread")
# What the solver cannot run without (the sparse Cholesky of the portable set; scikit-sparse,
# when it built, is the faster one and is chosen first).
CHECKED_MODULES = ("numpy", "scipy", "numba", "cholespy")


def emit(kind, **fields):
    print(json.dumps({"type": kind, **fields}), flush=True)


def run(command, fraction, message):
    emit("progress", message=message, fraction=fraction)
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3600)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-6000:])
        tail = completed.stdout.strip().splitlines()[-3:]
        raise RuntimeError(f"{message} failed: {' / '.join(tail)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--requirements", type=Path, required=True)
    parser.add_argument("--portable", action="store_true",
                        help="install only the wheels-only set (no scikit-sparse, no cyipopt)")
    args = parser.parse_args(argv)
    python = venv_python(args.venv)
    requirements_text = args.requirements.read_text(encoding="utf-8")
    try:
        stamp = args.venv / INSTALLED_STAMP
        if stamp.exists():
            stamp.unlink()
        if not python.is_file():
            run([sys.executable, "-m", "venv", str(args.venv)], 0.05, "creating the solver's virtual environment")
        run([str(python), "-m", "pip", "install", "--upgrade", "pip"], 0.15, "upgrading pip")
        portable = args.portable
        if not portable:
            try:
                run([str(python), "-m", "pip", "install", "-r", str(_written(args.venv, requirements_text, False))],
                    0.25, "installing numpy, scipy, numba, scikit-sparse, cholespy, cyipopt (several minutes)")
            except RuntimeError as error:
                emit("warning", message=f"{error}. scikit-sparse and cyipopt need system libraries "
                                        f"({SYSTEM_LIBRARIES}); installing the portable set instead")
                portable = True
        if portable:
            run([str(python), "-m", "pip", "install", "--only-binary=:all:", "-r",
                 str(_written(args.venv, requirements_text, True))],
                0.6, "installing the portable set: numpy, scipy, numba, cholespy (wheels only)")
        check = "import importlib\nfor m in %r: importlib.import_module(m)" % (CHECKED_MODULES,)
        run([str(python), "-c", check], 0.9, "checking the solver's imports")
        stamp.write_text("portable\n" if portable else "ok\n", encoding="utf-8")
        _warm_up(python, args.requirements.resolve().parent)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        emit("error", message=f"{error}. The solver needs numpy, scipy, numba and cholespy from the package "
                              f"registry (Blender's Preferences › System › Allow Online Access).")
        emit("done", status="error", exit_code=2)
        return 2
    kind = "portable set (cholespy, no IPOPT)" if portable else "full set (scikit-sparse, IPOPT)"
    emit("result", message=f"solver installed in {args.venv}: {kind}", python=str(python), portable=portable)
    emit("done", status="ok", exit_code=0)
    return 0


def _warm_up(python: Path, source: Path) -> None:
    """Compile the model builder's numba kernels now (solver/model_builder/warm_up.py), so the
    user's first model build does not wait for them; an install without it still works."""
    if not (source / "solver" / "model_builder" / "warm_up.py").is_file():
        return
    emit("progress", message="compiling the model builder (about half a minute)", fraction=0.95)
    # Blender's own Python settings must not leak into the venv's interpreter.
    env = {name: value for name, value in os.environ.items()
           if name not in ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONNOUSERSITE")}
    env["PYTHONPATH"] = str(source)
    try:
        completed = subprocess.run([str(python), "-m", "solver.model_builder.warm_up"], cwd=source, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        failure = None if completed.returncode == 0 else " / ".join(completed.stdout.strip().splitlines()[-2:])
    except (OSError, subprocess.TimeoutExpired) as error:
        failure = str(error)
    if failure:
        emit("warning", message=f"compiling the model builder ahead failed; the first model build will "
                                f"compile it instead: {failure}")


def _written(venv: Path, requirements_text: str, portable: bool) -> Path:
    path = venv / ("requirements-portable.txt" if portable else "requirements-solver.txt")
    path.write_text(solver_requirements(requirements_text, portable=portable), encoding="utf-8")
    return path


if __name__ == "__main__":
    sys.exit(main())
