#!/usr/bin/env python3
"""One-command set-up, tests and demo for Face Physics.

    python3 build.py setup [--no-bpy]      system libraries + .venv + pinned packages
    python3 build.py test [pytest args]    setup, then pytest (default: tests/)
    python3 build.py demo [--out DIR]      setup, then the demo head through the solver and the add-on
    python3 build.py addon                 the Blender extension zips, one per platform, in dist/

Standard library only: this runs with the system python3 before any venv exists.
Every command runs from the project root (the folder holding this file),
whatever the current directory is.
"""

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(ROOT, ".venv")
REQUIREMENTS = os.path.join(ROOT, "requirements.txt")
STAMP = os.path.join(VENV, ".requirements.sha256")
NO_BPY_REQUIREMENTS = os.path.join(VENV, ".requirements-no-bpy.txt")
# Beside numba's default cache (solver/**/__pycache__): removing the cache removes the stamp.
WARM_STAMP = os.path.join(ROOT, "solver", "__pycache__", "numba-warm.sha256")

MIN_PYTHON = (3, 11)

# Debian/Ubuntu packages the Python packages build against or load at run time.
APT_PACKAGES = [
    "libsuitesparse-dev",    # CHOLMOD, for scikit-sparse
    "coinor-libipopt-dev",   # IPOPT, for cyipopt
    "pkg-config",            # cyipopt finds IPOPT with it
    "libopenblas0-pthread",  # fast BLAS/LAPACK for SuiteSparse and IPOPT
]

# Modules checked after installation: (import name, distribution name).
MODULES = [
    ("numpy", "numpy"),
    ("scipy", "scipy"),
    ("numba", "numba"),
    ("sksparse.cholmod", "scikit-sparse"),
    ("cyipopt", "cyipopt"),
]
BPY_MODULE = ("bpy", "bpy")

# Extra hints for the modules whose installation most often goes wrong.
IMPORT_HINTS = {
    "sksparse.cholmod": "scikit-sparse needs the system SuiteSparse: "
                        "sudo apt-get install libsuitesparse-dev",
    "cyipopt": "cyipopt needs the system IPOPT and pkg-config: "
               "sudo apt-get install coinor-libipopt-dev pkg-config",
    "bpy": "bpy needs Python 3.11 exactly; or run setup with --no-bpy "
           "to skip the Blender module",
}


# --------------------------------------------------------------------------- helpers

def step(message):
    print("==> " + message, flush=True)


def fail(message):
    print("error: " + message, file=sys.stderr, flush=True)
    sys.exit(1)


def venv_python():
    if os.name == "nt":
        return os.path.join(VENV, "Scripts", "python.exe")
    return os.path.join(VENV, "bin", "python")


def venv_env():
    """Environment for the venv python: the project root is importable."""
    env = dict(os.environ)
    paths = [ROOT]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run(command, env=None):
    """Run a command from the project root, streaming its output; return its exit code."""
    print("    $ " + " ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def cpu_count():
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# --------------------------------------------------------------------------- setup steps

def check_python_version():
    if sys.version_info < MIN_PYTHON:
        fail("Python %d.%d or newer is required, but this is Python %s (%s).\n"
             "Run build.py with a newer python, e.g. `python3.11 build.py setup`."
             % (MIN_PYTHON + (sys.version.split()[0], sys.executable)))


def install_system_libraries():
    step("checking system libraries: " + " ".join(APT_PACKAGES))
    if shutil.which("dpkg") is None:
        print("    No dpkg here (not Debian/Ubuntu): cannot check system packages.\n"
              "    Make sure SuiteSparse (CHOLMOD), IPOPT, pkg-config and OpenBLAS are\n"
              "    installed with their headers (Debian names: %s).\n"
              "    Continuing; pip will fail to build scikit-sparse/cyipopt without them."
              % " ".join(APT_PACKAGES), flush=True)
        return

    missing = [name for name in APT_PACKAGES if not dpkg_installed(name)]
    if not missing:
        print("    all installed", flush=True)
        return

    install = ["apt-get", "install", "-y", "--no-install-recommends"] + missing
    if os.geteuid() != 0:
        fail("missing system packages: %s\nInstall them with:\n\n    sudo %s\n\n"
             "then run this command again." % (" ".join(missing), " ".join(install)))

    print("    missing: " + " ".join(missing), flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if run(["apt-get", "update"], env=env) != 0:
        fail("`apt-get update` failed (see its output above)")
    if run(install, env=env) != 0:
        fail("`%s` failed (see its output above)" % " ".join(install))


def dpkg_installed(name):
    result = subprocess.run(["dpkg", "-s", name], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, universal_newlines=True)
    return result.returncode == 0 and "Status: install ok installed" in result.stdout


def create_venv():
    if os.path.isdir(VENV):
        if not os.path.exists(venv_python()):
            fail("%s exists but has no python in it; delete the folder and run "
                 "setup again." % VENV)
        return
    step("creating virtual environment .venv with %s (Python %s)"
         % (sys.executable, sys.version.split()[0]))
    if run([sys.executable, "-m", "venv", VENV]) != 0:
        shutil.rmtree(VENV, ignore_errors=True)
        fail("could not create the virtual environment. On Debian/Ubuntu install "
             "the venv module: sudo apt-get install python3-venv")


def requirements_sha256():
    with open(REQUIREMENTS, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def read_stamp():
    """Return (sha256, bpy_installed) from the stamp, or (None, False)."""
    try:
        with open(STAMP) as f:
            lines = f.read().split()
    except OSError:
        return None, False
    if len(lines) != 2 or lines[1] not in ("bpy=installed", "bpy=skipped"):
        return None, False
    return lines[0], lines[1] == "bpy=installed"


def write_stamp(sha256, bpy_installed):
    with open(STAMP, "w") as f:
        f.write("%s\n%s\n" % (sha256, "bpy=installed" if bpy_installed else "bpy=skipped"))


def requirement_name(line):
    """'bpy==5.0.1  # comment' -> 'bpy'; comments and blank lines -> ''."""
    text = line.split("#", 1)[0].strip()
    for separator in "=<>!~;[ ":
        text = text.split(separator, 1)[0]
    return text.strip().lower()


def write_requirements_without_bpy():
    with open(REQUIREMENTS) as f:
        lines = [line for line in f if requirement_name(line) != "bpy"]
    with open(NO_BPY_REQUIREMENTS, "w") as f:
        f.writelines(lines)
    return NO_BPY_REQUIREMENTS


def install_requirements(no_bpy):
    sha256 = requirements_sha256()
    stamp_sha256, stamp_has_bpy = read_stamp()
    if stamp_sha256 == sha256 and (stamp_has_bpy or no_bpy):
        step("Python packages up to date (requirements.txt unchanged%s)"
             % ("" if stamp_has_bpy else ", bpy skipped"))
        return

    step("installing Python packages from requirements.txt%s"
         % (" (without bpy)" if no_bpy else ""))
    if os.path.exists(STAMP):
        os.remove(STAMP)  # only a complete installation writes it back
    python = venv_python()
    if run([python, "-m", "pip", "install", "--upgrade", "pip"]) != 0:
        fail("upgrading pip in .venv failed (see pip's output above)")
    requirements = write_requirements_without_bpy() if no_bpy else REQUIREMENTS
    if run([python, "-m", "pip", "install", "-r", requirements]) != 0:
        fail("pip install failed (see pip's output above). If scikit-sparse or "
             "cyipopt failed to build, check the system libraries: %s"
             % " ".join(APT_PACKAGES))
    write_stamp(sha256, bpy_installed=not no_bpy)


# The check runs inside the venv; it prints one line per module and exits 1
# if any import failed.
VERIFY_SCRIPT = r"""
import importlib, sys, traceback
from importlib.metadata import version
failed = False
for module, dist in %r:
    try:
        importlib.import_module(module)
        print("    %%-18s %%s" %% (module, version(dist)), flush=True)
    except Exception:
        failed = True
        print("    %%-18s FAILED" %% module, flush=True)
        print("FAILED-MODULE " + module, flush=True)
        traceback.print_exc(limit=1)
sys.exit(1 if failed else 0)
"""


def verify_imports(no_bpy):
    modules = MODULES if no_bpy else MODULES + [BPY_MODULE]
    step("verifying imports: " + ", ".join(module for module, _ in modules))
    result = subprocess.run([venv_python(), "-c", VERIFY_SCRIPT % (modules,)],
                            cwd=ROOT, env=venv_env(), stdout=subprocess.PIPE,
                            universal_newlines=True)
    failed = []
    for line in result.stdout.splitlines():
        if line.startswith("FAILED-MODULE "):
            failed.append(line.split(" ", 1)[1])
        else:
            print(line, flush=True)
    if result.returncode == 0:
        return
    message = ["could not import: " + ", ".join(failed or ["(see above)"])]
    for module in failed:
        if module in IMPORT_HINTS:
            message.append("  " + module + ": " + IMPORT_HINTS[module])
    message.append("To reinstall the packages: rm %s && python3 build.py setup"
                   % os.path.relpath(STAMP, ROOT))
    fail("\n".join(message))


def solver_sources_sha256():
    """Hash of the solver's Python sources: the numba cache is stale when they change."""
    digest = hashlib.sha256()
    for folder, _, names in sorted(os.walk(os.path.join(ROOT, "solver"))):
        for name in sorted(names):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as source:
                    digest.update(name.encode() + source.read())
    return digest.hexdigest()


def warm_numba_cache():
    """Compile the model builder's numba kernels into their on-disk cache (a small demo build,
    solver/model_builder/warm_up.py), so a fresh install's first model build does not wait for
    them; skipped while the solver sources are those of the last warm-up."""
    sha256 = solver_sources_sha256()
    if os.environ.get("NUMBA_CACHE_DIR") is None and os.path.exists(WARM_STAMP):
        with open(WARM_STAMP) as stamp:
            if stamp.read().strip() == sha256:
                step("model builder kernels already compiled")
                return
    step("compiling the model builder's numba kernels (a small demo build)")
    if run([venv_python(), "-m", "solver.model_builder.warm_up"], env=venv_env()) != 0:
        fail("the model builder's warm-up build failed (see above)")
    os.makedirs(os.path.dirname(WARM_STAMP), exist_ok=True)
    with open(WARM_STAMP, "w") as stamp:
        stamp.write(sha256 + "\n")


def setup(no_bpy=False):
    check_python_version()
    install_system_libraries()
    create_venv()
    install_requirements(no_bpy)
    verify_imports(no_bpy)
    warm_numba_cache()


# --------------------------------------------------------------------------- commands

def has_workers_option(pytest_args):
    """True if the pytest arguments already choose xdist workers (or disable xdist)."""
    for i, arg in enumerate(pytest_args):
        if arg.startswith("-n") or arg.startswith("--numprocesses"):
            return True
        if arg == "-p" and i + 1 < len(pytest_args) and pytest_args[i + 1] == "no:xdist":
            return True
        if arg == "-pno:xdist":
            return True
    return False


def command_setup(args, extra):
    setup(no_bpy=args.no_bpy)
    step("setup done")
    return 0


def command_test(args, pytest_args):
    setup(no_bpy=args.no_bpy)
    if not pytest_args:
        pytest_args = ["tests"]
    if cpu_count() >= 2 and not has_workers_option(pytest_args):
        pytest_args = ["-n", "2"] + pytest_args
    step("running tests")
    code = run([venv_python(), "-m", "pytest"] + pytest_args, env=venv_env())
    if code == 5:
        print("error: pytest collected no tests (exit code 5); treating that as "
              "a failure", file=sys.stderr, flush=True)
        return 1
    return code


USER_GUIDE_IMAGES = os.path.join("docs", "images", "user-guide")


def command_demo(args, extra):
    """The solver's model pictures, then the main job through the Blender add-on (headless bpy)."""
    setup(no_bpy=args.no_bpy)
    start = time.time()
    step("solver demo: demo head -> model -> pictures (output in %s)" % args.out)
    code = run([venv_python(), "-m", "solver", "demo", "--out", args.out], env=venv_env())
    if code != 0:
        return code
    if args.no_bpy:
        step("skipping the add-on demo: it needs the Blender module (set up without --no-bpy)")
        return 0
    step("add-on demo: import, build, fit, bake and render through the Blender add-on (output in %s)"
         % args.out)
    command = [venv_python(), "-m", "blender_addon.cli", "demo", "--out", args.out]
    if args.update_docs:
        command += ["--docs", USER_GUIDE_IMAGES]
    code = run(command, env=venv_env())
    if code == 0:
        step("demo done in %.0f s: %s/demo.blend, pictures in %s/renders/"
             % (time.time() - start, args.out, args.out))
    return code


ADDON_DIR = os.path.join(ROOT, "blender_addon")
DIST = os.path.join(ROOT, "dist")
# Downloaded wheels, one folder per platform: a rebuild with the same pins needs no network.
WHEEL_CACHE = os.path.join(DIST, "wheel-cache")


def addon_version():
    with open(os.path.join(ADDON_DIR, "blender_manifest.toml"), encoding="utf-8") as f:
        match = re.search(r'^version\s*=\s*"([^"]+)"', f.read(), re.MULTILINE)
    if not match:
        fail("blender_addon/blender_manifest.toml has no version")
    return match.group(1)


def command_addon(args, extra):
    """One extension zip per platform, each with its wheels (addon_build.py says which and why)."""
    check_python_version()      # addon_build reads TOML with tomllib (3.11+)
    import addon_build
    version = addon_version()
    dist = os.path.abspath(args.dist)
    step("building the Face Physics %s extension zips in %s (wheels cached in %s)"
         % (version, dist, args.wheel_cache))
    try:
        # The project's venv has pip for certain; a bare system python3 may not.
        pip_python = venv_python() if os.path.exists(venv_python()) else sys.executable
        paths = addon_build.build_extension_zips(ROOT, dist, version, os.path.abspath(args.wheel_cache),
                                                 log=lambda line: print(line, flush=True), pip_python=pip_python)
    except (addon_build.BuildError, OSError) as error:
        fail(str(error))
    step("add-on built: in Blender 4.2+ install the zip for your platform (Edit > Preferences > "
         "Get Extensions > Install from Disk): " + ", ".join(os.path.basename(p) for p in paths))
    return 0


COMMANDS = ("setup", "test", "demo", "addon")


def make_parser():
    parser = argparse.ArgumentParser(
        prog="build.py", allow_abbrev=False,
        description="Set up, test and run Face Physics. Commands run from the "
                    "project root whatever the current directory.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = commands.add_parser(
        "setup", allow_abbrev=False,
        help="install system libraries, create .venv, install requirements.txt",
        description="Install the system libraries (apt), create .venv and install "
                    "requirements.txt into it, then check the imports. Idempotent: "
                    "pip is skipped while requirements.txt is unchanged.")
    p.add_argument("--no-bpy", action="store_true",
                   help="skip the Blender module bpy (374 MB; only the add-on tests use it)")
    p.set_defaults(function=command_setup)

    p = commands.add_parser(
        "test", allow_abbrev=False,
        help="setup, then run pytest (extra arguments go to pytest)",
        description="Run setup, then `.venv/bin/python -m pytest ARGS` (default ARGS: "
                    "tests). Adds `-n 2` (pytest-xdist) on machines with 2+ CPUs unless "
                    "-n is given. Any argument not listed here goes to pytest, "
                    "e.g. `build.py test -q -k cholmod tests/`.")
    p.add_argument("--no-bpy", action="store_true", help="set up without the Blender module")
    p.set_defaults(function=command_test)

    p = commands.add_parser(
        "demo", allow_abbrev=False,
        help="setup, then the demo head through the solver and the Blender add-on",
        description="Run setup, then `.venv/bin/python -m solver demo --out DIR` (model pictures) and "
                    "`.venv/bin/python -m blender_addon.cli demo --out DIR` (the add-on, headless: "
                    "import, build, fit, bake, Cycles renders and a contact sheet; DIR/demo.blend).")
    p.add_argument("--out", default=os.path.join("out", "demo"),
                   help="output folder, relative to the project root (default: out/demo)")
    p.add_argument("--update-docs", action="store_true",
                   help="also copy the rendered pictures into %s" % USER_GUIDE_IMAGES)
    p.add_argument("--no-bpy", action="store_true",
                   help="set up without the Blender module (only the solver pictures are made)")
    p.set_defaults(function=command_demo)

    p = commands.add_parser(
        "addon", allow_abbrev=False,
        help="build the Blender extension zips (one per platform) into dist/",
        description="Zip blender_addon/ with a copy of solver/, requirements.txt and, per platform "
                    "(linux-x64, windows-x64, macos-arm64, macos-x64), the wheels of the solver's "
                    "portable packages: dist/face_physics-VERSION-<platform>.zip, each a Blender 4.2+ "
                    "extension. The first build downloads the wheels with pip (needs the package "
                    "registry); later builds reuse the wheel cache. No set-up needed.")
    p.add_argument("--dist", default=DIST, help="output folder (default: dist/ in the project root)")
    p.add_argument("--wheel-cache", default=WHEEL_CACHE,
                   help="downloaded wheels, one folder per platform (default: dist/wheel-cache)")
    p.set_defaults(function=command_addon)

    return parser


def main(argv=None):
    parser = make_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        parser.print_help()
        return 0
    if not argv[0].startswith("-") and argv[0] not in COMMANDS:
        print("unknown command: %s\n" % argv[0], file=sys.stderr)
        parser.print_help()
        return 2
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if extra and args.command != "test":
        parser.error("unrecognized arguments: " + " ".join(extra))
    return args.function(args, extra)


if __name__ == "__main__":
    sys.exit(main())
