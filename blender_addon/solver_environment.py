"""Where the solver lives and which Python runs it (no bpy).

The solver is a child process ("the solver Python"), so a crash in native code never takes
Blender down. Which Python, in this order:

- the Python the user names in the preferences (e.g. the Linux `.venv/bin/python` of
  `python3 build.py setup`, with scikit-sparse and IPOPT: the fast path);
- Blender's own Python (`sys.executable`; in the bpy module, the interpreter that imported bpy)
  when the solver's portable packages are found on it: numpy from Blender itself, scipy, numba,
  llvmlite and cholespy from the wheels the extension zip carries, which Blender unpacked into
  its extensions `.local/lib/pythonX.Y/site-packages` at install (the child gets that folder on
  PYTHONPATH). No venv, no compiler, no network;
- the virtual environment the "Install solver" button creates in the add-on's user data
  folder (`solver-venv/`): only for an install without bundled wheels (a source checkout).

The solver's *source* travels with the add-on: `build.py addon` copies `solver/` and
`requirements.txt` into the zip under `solver_bundle/`, and the child process gets that
folder on PYTHONPATH. So the add-on and the solver it drives are always the same version, and
no Python ever needs the solver itself installed. Run from a source checkout, the add-on uses
the checkout's own `solver/` (the folder above `blender_addon/`).
"""
from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Dict, List, Optional, Sequence

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


# What the solver imports at its start, each a top-level package (numpy comes from Blender).
PORTABLE_MODULES = ("numpy", "scipy", "numba", "llvmlite", "cholespy")


def portable_packages_found(wheel_dirs: Sequence = ()) -> bool:
    """Whether this Python, with `wheel_dirs` in front, has every package of the portable set.
    Looked up only (PathFinder, nothing imported: the add-on never loads numba or scipy)."""
    search = [str(path) for path in wheel_dirs] + sys.path
    return all(PathFinder.find_spec(name, search) is not None for name in PORTABLE_MODULES)


def resolve_solver_python(preferred: str, venv_dir, wheel_dirs: Sequence = ()) -> Optional[Path]:
    """The solver Python to use: the preference if it names an existing file; else this Python
    (Blender's own) when it has the portable packages, with the extension's wheels; else the
    Install solver venv's; else None (then the add-on shows the missing-solver message)."""
    if preferred:
        path = Path(os.path.expanduser(preferred))
        return path if path.is_file() else None
    if portable_packages_found(wheel_dirs):
        return Path(sys.executable)
    installed = venv_python(venv_dir) if venv_dir else None
    if installed and installed.is_file() and (Path(venv_dir) / INSTALLED_STAMP).is_file():
        return installed
    return None


def missing_solver_message(preferred: str, extension: bool = False) -> str:
    if preferred:
        return (f"The solver Python in the Face Physics preferences does not exist: {preferred}. "
                f"Fix the path, or clear it to use Blender's own Python with the bundled packages.")
    if extension:
        return ("The solver's packages (scipy, numba, cholespy) did not install with the extension. "
                "Install the Face Physics zip made for this platform again, or set a solver Python "
                "in the add-on preferences.")
    return ("Face Physics needs its solver (numpy, scipy, numba, CHOLMOD) in a Python of its own. "
            "Press Install solver, or set an existing solver Python in the add-on preferences.")


def solver_environment(base: Optional[Dict[str, str]] = None, wheel_dirs: Sequence = ()) -> Dict[str, str]:
    """Environment for the solver child: the solver source first on PYTHONPATH, then the
    extension's unpacked wheels (Blender puts them on its own sys.path, a child does not inherit
    that), and none of Blender's own Python settings leaking into the other interpreter."""
    env = dict(os.environ if base is None else base)
    for variable in ("PYTHONHOME", "PYTHONSTARTUP", "PYTHONNOUSERSITE"):
        env.pop(variable, None)
    source = solver_source_dir()
    paths = ([str(source)] if source else []) + [str(path) for path in wheel_dirs]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def wheels_site_packages(extensions_dir) -> Path:
    """Where Blender unpacks the wheels of the extensions under `extensions_dir` (the layout of
    `~/.local`, as addon_utils does it)."""
    return (Path(extensions_dir) / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
            / "site-packages")


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
