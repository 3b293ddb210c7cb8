"""Create the solver's virtual environment and install its packages, speaking JSON lines.

Run by the add-on's "Install solver" button as a background process with Blender's Python:

    python install_solver.py --venv DIR --requirements requirements.txt

It does what `python3 build.py setup` does for a checkout, minus the system libraries
(installing those needs root; the message says which ones when a build fails): create the
venv, upgrade pip, install requirements.txt without bpy, check the imports. Messages are
the job protocol's (progress, error, done), so the same poller shows them. A stamp file is
written only after the import check passes, so a half-finished install never counts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from solver_environment import INSTALLED_STAMP, solver_requirements, venv_python  # noqa: E402

SYSTEM_LIBRARIES = ("SuiteSparse (CHOLMOD) and IPOPT with headers, and pkg-config; on Debian/Ubuntu: "
                    "sudo apt-get install libsuitesparse-dev coinor-libipopt-dev pkg-config libopenblas0-pthread")
CHECKED_MODULES = ("numpy", "scipy", "numba", "sksparse.cholmod", "cyipopt")


def emit(kind, **fields):
    print(json.dumps({"type": kind, **fields}), flush=True)


def run(command, fraction, message):
    emit("progress", message=message, fraction=fraction)
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-6000:])
        tail = completed.stdout.strip().splitlines()[-3:]
        raise RuntimeError(f"{message} failed: {' / '.join(tail)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv", type=Path, required=True)
    parser.add_argument("--requirements", type=Path, required=True)
    args = parser.parse_args(argv)
    python = venv_python(args.venv)
    try:
        stamp = args.venv / INSTALLED_STAMP
        if stamp.exists():
            stamp.unlink()
        if not python.is_file():
            run([sys.executable, "-m", "venv", str(args.venv)], 0.05, "creating the solver's virtual environment")
        run([str(python), "-m", "pip", "install", "--upgrade", "pip"], 0.15, "upgrading pip")
        requirements = args.venv / "requirements-solver.txt"
        requirements.write_text(solver_requirements(args.requirements.read_text(encoding="utf-8")), encoding="utf-8")
        run([str(python), "-m", "pip", "install", "-r", str(requirements)], 0.25,
            "installing numpy, scipy, numba, scikit-sparse, cyipopt (several minutes)")
        check = "import importlib\nfor m in %r: importlib.import_module(m)" % (CHECKED_MODULES,)
        run([str(python), "-c", check], 0.95, "checking the solver's imports")
        stamp.write_text("ok\n", encoding="utf-8")
    except (RuntimeError, OSError) as error:
        emit("error", message=f"{error}. The solver packages build against system libraries: {SYSTEM_LIBRARIES}.")
        emit("done", status="error", exit_code=2)
        return 2
    emit("result", message=f"solver installed in {args.venv}", python=str(python))
    emit("done", status="ok", exit_code=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
