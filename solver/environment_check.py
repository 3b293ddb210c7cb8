"""What this Python can run of the solver: `python -m solver check` (the add-on's Check solver).

The solver needs numpy, scipy and numba, and a sparse Cholesky back end (physics/cholesky.py:
scikit-sparse, or the portable cholespy). IPOPT (cyipopt) is optional: only the contact solver
`--contact-solver ipopt` needs it. Each package is imported, not only looked up, so a package
that is installed but cannot load its library (scikit-sparse without SuiteSparse) counts as
missing, with the import's own message.
"""
from __future__ import annotations

import importlib
import platform
import sys
from importlib.metadata import PackageNotFoundError, version

# (distribution, module to import, what needs it)
REQUIRED = (("numpy", "numpy", "everything"), ("scipy", "scipy", "everything"),
            ("numba", "numba", "the tissue energy's kernels"))
CHOLESKY = (("scikit-sparse", "sksparse.cholmod"), ("cholespy", "cholespy"))
OPTIONAL = (("cyipopt", "cyipopt", "the contact solver `ipopt` (the default `newton` does not need it)"),)


def _package(distribution: str, module: str) -> dict:
    """{"version", "imports", "error"} of one package."""
    try:
        found = version(distribution)
    except PackageNotFoundError:
        found = None
    try:
        importlib.import_module(module)
    except Exception as error:     # noqa: BLE001 - any failure to load is what the user must see
        return {"version": found, "imports": False, "error": f"{type(error).__name__}: {error}"}
    return {"version": found, "imports": True, "error": ""}


def check_environment() -> dict:
    """The report (JSON-ready): Python, platform, each package, the Cholesky back end chosen,
    whether IPOPT is there, the problems with their fixes, and ok (the solver can run)."""
    from .physics.cholesky import CholeskyUnavailable, backend_name
    packages = {name: _package(name, module) for name, module, _ in REQUIRED}
    packages.update({name: _package(name, module) for name, module in CHOLESKY})
    packages.update({name: _package(name, module) for name, module, _ in OPTIONAL})
    problems = [f"{name} does not load ({packages[name]['error'] or 'not installed'}); {needed} needs it. "
                f"Fix: install the Face Physics zip made for this platform again (its wheels bring {name}), "
                f"or install {name} into this Python"
                for name, _, needed in REQUIRED if not packages[name]["imports"]]
    cholesky = cholesky_version = None
    try:
        cholesky = backend_name()
        cholesky_version = packages[cholesky]["version"] or "unknown"
    except CholeskyUnavailable as error:
        problems.append(str(error))
    missing_optional = [f"{name} is not available: {needed}"
                        for name, _, needed in OPTIONAL if not packages[name]["imports"]]
    ok = not problems
    summary = (f"solver ready: Python {platform.python_version()}, sparse Cholesky {cholesky} {cholesky_version}"
               + (", IPOPT available" if packages["cyipopt"]["imports"] else ", no IPOPT (optional)")
               if ok else "the solver cannot run here: " + "; ".join(problems))
    return {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
            "packages": packages, "cholesky_backend": cholesky, "cholesky_version": cholesky_version,
            "ipopt": packages["cyipopt"]["imports"], "problems": problems, "notes": missing_optional,
            "ok": ok, "message": summary}


def ipopt_available() -> bool:
    """Whether cyipopt imports in this Python."""
    name, module, _ = OPTIONAL[0]
    return _package(name, module)["imports"]
