"""Where the solver lives and which Python runs it (no bpy).

The solver needs numpy, scipy, numba, CHOLMOD and IPOPT, which Blender's Python does not
have and should not get (they would clash with other add-ons and Blender's own numpy). So
the solver always runs in a separate Python — "the solver Python":

- the Python the user names in the preferences (e.g. the project's `.venv/bin/python`), or
- the virtual environment the "Install solver" button creates in the add-on's user data
  folder (`solver-venv/`).

The solver's *source* travels with the add-on: `build.py addon` copies `solver/` and
`requirements.txt` into the zip under `solver_bundle/`, and the child process gets that
folder on PYTHONPATH. So the add-on and the solver it drives are always the same version,
and the venv holds only third-party packages (nothing to re-install when the add-on is
updated unless requirements.txt changed). Run from a source checkout, the add-on uses the
checkout's own `solver/` (the folder above `blender_addon/`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, List, Optional

ADDON_DIR = Path(__file__).resolve().parent
BUNDLE_DIR_NAME = "solver_bundle"
VENV_DIR_NAME = "solver-venv"
REQUIREMENTS_NAME = "requirements.txt"

# The add-on's and the project's tests need these; the solver never imports them.
_NOT_FOR_THE_SOLVER = {"bpy", "pytest", "pytest-xdist"}
# These build against system libraries (SuiteSparse, IPOPT); the portable set leaves them out and
# the solver runs on cholespy's bundled CHOLMOD, without the optional IPOPT contact solver.
NEEDS_SYSTEM_LIBRARIES = {"scikit-sparse", "cyipopt"}


def solver_source_dir() -> Optional[Path]:
    """The folder holding the `solver` package and requirements.txt, or None."""
    for candidate in (ADDON_DIR / BUNDLE_DIR_NAME, ADDON_DIR.parent):
        if (candidate / "solver" / "__init__.py").is_file() and (candidate / REQUIREMENTS_NAME).is_file():
            return candidate
    return None


def venv_python(venv_dir) -> Path:
    venv_dir = Path(venv_dir)
    return venv_dir / "Scripts" / "python.exe" if os.name == "nt" else venv_dir / "bin" / "python"


def resolve_solver_python(preferred: str, venv_dir) -> Optional[Path]:
    """The solver Python to use: the preference if it names an existing file, else the
    installed venv's, else None (then the add-on shows the install message)."""
    if preferred:
        path = Path(os.path.expanduser(preferred))
        return path if path.is_file() else None
    installed = venv_python(venv_dir) if venv_dir else None
    if installed and installed.is_file() and (Path(venv_dir) / INSTALLED_STAMP).is_file():
        return installed
    return None


def missing_solver_message(preferred: str) -> str:
    if preferred:
        return (f"The solver Python in the Face Physics preferences does not exist: {preferred}. "
                f"Fix the path, or clear it and press Install solver.")
    return ("Face Physics needs its solver (numpy, scipy, numba, CHOLMOD) in a Python of its own. "
            "Press Install solver, or set an existing solver Python in the add-on preferences.")


def solver_environment(base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Environment for the solver child: the solver source first on PYTHONPATH, and none of
    Blender's own Python settings leaking into the other interpreter."""
    env = dict(os.environ if base is None else base)
    for variable in ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONNOUSERSITE"):
        env.pop(variable, None)
    source = solver_source_dir()
    paths = [str(source)] if source else []
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def check_command(python) -> List[str]:
    """`python -m solver --json check`: which packages and back ends the solver Python has."""
    return [str(python), "-m", "solver", "--json", "check"]


def check_summary(result: Optional[dict]) -> List[str]:
    """Lines for the preferences from a check's result: the verdict, the sparse Cholesky back
    end, IPOPT, and each problem with its fix."""
    if not result:
        return []
    lines = [str(result.get("message", ""))]
    packages = result.get("packages") or {}
    for name, package in sorted(packages.items()):
        if isinstance(package, dict):
            state = package.get("version") or "not installed"
            if package.get("version") and not package.get("imports"):
                state += " (does not load)"
            lines.append(f"{name}: {state}")
    lines += [f"Problem: {problem}" for problem in result.get("problems") or []]
    lines += [str(note) for note in result.get("notes") or []]
    return lines


def run_job_command(python, job_dir) -> List[str]:
    return [str(python), "-m", "solver", "--json", "run-job", str(job_dir)]


# --------------------------------------------------------------------------- installing

INSTALLED_STAMP = ".face-physics-installed"


def solver_requirements(requirements_text: str, portable: bool = False) -> str:
    """requirements.txt without the packages only the tests use; `portable`: also without
    those that build against system libraries (wheels only, on any platform)."""
    dropped = _NOT_FOR_THE_SOLVER | (NEEDS_SYSTEM_LIBRARIES if portable else set())
    kept = []
    for line in requirements_text.splitlines():
        name = line.split("#", 1)[0].strip()
        for separator in "=<>!~;[ ":
            name = name.split(separator, 1)[0]
        if name.strip().lower() not in dropped:
            kept.append(line)
    return "\n".join(kept) + "\n"


def install_command(venv_dir, portable: bool = False) -> List[str]:
    """The background installer, run with Blender's own Python (it has venv and ensurepip);
    `portable`: straight to the wheels-only set."""
    source = solver_source_dir()
    if source is None:
        raise FileNotFoundError("the add-on has no solver source to install (solver_bundle/ is missing); "
                                "reinstall the add-on from the zip `python3 build.py addon` made")
    return [sys.executable, str(ADDON_DIR / "install_solver.py"), "--venv", str(venv_dir),
            "--requirements", str(source / REQUIREMENTS_NAME)] + (["--portable"] if portable else [])
