"""`python3 build.py addon`: one extension zip per platform, each with the wheels of that
platform and a manifest Blender's own extension tool (bl_pkg's blender_ext.py, shipped in the
bpy module) validates; and, for real, the Linux zip installed the way Blender installs it into
a fresh Python that has only bpy (and its numpy), running the demo's Import → Build → Fit →
Bake with the solver child on that Python and the wheels from the zip."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

bpy = pytest.importorskip("bpy")
ROOT = Path(__file__).resolve().parents[1]

# Blender platform → the pattern every wheel's platform tag must match.
PLATFORM_TAGS = {
    "linux-x64": r"manylinux(_2_\d+|2014)_x86_64",
    "windows-x64": r"win_amd64",
    "macos-arm64": r"macosx_\d+_\d+_arm64",
    "macos-x64": r"macosx_\d+_\d+_x86_64",
}
BUNDLED = {"scipy", "numba", "llvmlite", "cholespy"}     # numpy is Blender's own (addon_build.py)
BUILD_TIMEOUT_S = 900          # the first build downloads ~350 MB of wheels; later ones are offline
VENV_TIMEOUT_S = 900           # bpy is 374 MB when it is not in pip's cache
DEMO_TIMEOUT_S = 900
# The bpy-only Python stays between test runs, keyed by its pins (a fresh one took 23 s).
VENV_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "face_physics" / "test-venvs"


def blender_ext_tool() -> Path:
    """bl_pkg's command-line tool (`blender --command extension …` runs it), inside the bpy module."""
    tool = Path(bpy.utils.system_resource('SCRIPTS')) / "addons_core" / "bl_pkg" / "cli" / "blender_ext.py"
    assert tool.is_file(), f"the bpy module has no {tool}"
    return tool


def validate(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(blender_ext_tool()), "validate", str(path)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, str(ROOT / "build.py"), "addon", "--dist", str(dist),
                            "--wheel-cache", str(ROOT / "dist" / "wheel-cache")],
                           capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    paths = sorted(dist.glob("*.zip"))
    assert len(paths) == len(PLATFORM_TAGS), paths
    return {platform: next(p for p in paths if p.name.endswith(platform.replace("-", "_") + ".zip"))
            for platform in PLATFORM_TAGS}


def _manifest(archive: zipfile.ZipFile) -> dict:
    return tomllib.loads(archive.read("blender_manifest.toml").decode("utf-8"))


@pytest.mark.parametrize("platform", sorted(PLATFORM_TAGS))
def test_each_platform_zip_holds_the_addon_the_solver_and_that_platforms_wheels(zips, platform):
    with zipfile.ZipFile(zips[platform]) as archive:
        names = set(archive.namelist())
        manifest = _manifest(archive)
    assert {"blender_manifest.toml", "__init__.py", "solver_bundle/requirements.txt",
            "solver_bundle/solver/jobs.py", "presets/face_physics/tissue/Zombie.py"} <= names
    assert not any("__pycache__" in name or name.endswith((".pyc", ".nbi", ".nbc")) for name in names)
    assert manifest["platforms"] == [platform] and manifest["tags"] == ["Animation"]
    assert "category" not in manifest and "website" not in manifest and manifest["license"]    # no dead link
    assert set(manifest["permissions"]) == {"files"}                 # never online: the wheels are inside
    wheels = manifest["wheels"]
    assert {name for name in names if name.startswith("wheels/")} == {w.removeprefix("./") for w in wheels}
    assert {Path(w).name.split("-")[0] for w in wheels} == BUNDLED
    for wheel in wheels:
        python_tag, abi, platforms = Path(wheel).name[:-len(".whl")].split("-")[-3:]
        assert python_tag == "cp311" and abi == "cp311", wheel
        assert all(re.fullmatch(PLATFORM_TAGS[platform], tag) for tag in platforms.split(".")), wheel


def test_blenders_own_tool_validates_every_zip_and_the_source_manifest(zips):
    for path in [*(zips[p] for p in PLATFORM_TAGS), ROOT / "blender_addon"]:
        checked = validate(path)
        assert checked.returncode == 0 and "Success" in checked.stdout, (path, checked.stdout, checked.stderr)


def test_blenders_tool_refuses_a_permission_its_schema_lacks(tmp_path):
    """There is no `child_process` permission: the `files` text says the solver runs as a child."""
    shutil.copytree(ROOT / "blender_addon", tmp_path / "addon", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = tmp_path / "addon" / "blender_manifest.toml"
    manifest.write_text(manifest.read_text().replace("[permissions]\n", "[permissions]\nchild_process = \"Solver\"\n"))
    checked = validate(tmp_path / "addon")
    assert checked.returncode != 0 and "child_process" in checked.stdout + checked.stderr


def test_a_rebuild_needs_no_network(zips, tmp_path):
    """Every wheel is in the cache now: pip is not run (an unreachable index would fail it)."""
    env = dict(os.environ, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_NO_INDEX="1")
    built = subprocess.run([sys.executable, str(ROOT / "build.py"), "addon", "--dist", str(tmp_path),
                            "--wheel-cache", str(ROOT / "dist" / "wheel-cache")],
                           capture_output=True, text=True, timeout=300, env=env)
    assert built.returncode == 0 and "pip download" not in built.stdout, built.stdout + built.stderr
    assert len(list(tmp_path.glob("*.zip"))) == len(PLATFORM_TAGS)


# --------------------------------------------------------------------------- the acceptance run

def _pins(*names):
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        name, _, version = text.partition("==")
        if name.strip().lower() in names:
            pins[name.strip().lower()] = f"{name.strip()}=={version.strip()}"
    assert set(pins) == set(names), pins
    return [pins[name] for name in names]


def bpy_only_python() -> Path:
    """A venv with nothing but bpy and the numpy bpy pins — a stand-in for Blender's own Python."""
    pins = _pins("bpy", "numpy")
    folder = VENV_CACHE / ("bpy-only-py%d.%d-%s" % (sys.version_info[:2] + (
        hashlib.sha256("\n".join(pins).encode()).hexdigest()[:12],)))
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    complete = folder / ".complete"
    if complete.is_file():
        return python
    shutil.rmtree(folder, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(folder)], check=True, timeout=VENV_TIMEOUT_S)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True, timeout=VENV_TIMEOUT_S)
    complete.write_text("\n".join(pins) + "\n")
    return python


ACCEPTANCE = textwrap.dedent("""
    import importlib, importlib.util, json, sys, time
    from pathlib import Path
    import bpy
    zip_path, out = sys.argv[1], Path(sys.argv[2])
    seconds = {}
    start = time.perf_counter()
    assert importlib.util.find_spec("scipy") is None, "the stand-in for Blender's Python must not have scipy"
    bpy.ops.wm.read_homefile(use_empty=True)
    assert bpy.ops.extensions.package_install_files(filepath=zip_path, repo="user_default",
                                                    enable_on_install=True) == {"FINISHED"}
    package = "bl_ext.user_default.face_physics"
    assert package in bpy.context.preferences.addons
    seconds["install"] = time.perf_counter() - start
    preferences = importlib.import_module(package + ".preferences")
    demo = importlib.import_module(package + ".demo")
    assert bpy.context.preferences.addons[package].preferences.solver_python == ""
    solver_python = preferences.solver_python()
    assert bpy.ops.face_physics.check_solver() == {"FINISHED"}
    check = dict(preferences.LAST_CHECK)
    start = time.perf_counter()
    demo.run_demo(out, str(solver_python), demo.QUICK, log=lambda line: print(line, flush=True))
    seconds["demo"] = time.perf_counter() - start
    scene_objects = {obj.name: obj for obj in bpy.data.objects}
    face = scene_objects["Face"]
    baked = {name: bpy.path.abspath(obj.modifiers["Face Physics cache"].filepath)
             for name, obj in scene_objects.items() if "Face Physics cache" in obj.modifiers}
    print(json.dumps({"solver_python": str(solver_python), "executable": sys.executable, "check": check,
                      "scipy": importlib.util.find_spec("scipy").origin, "wheel_dirs":
                      [str(p) for p in preferences.extension_wheel_dirs()], "tets": face.face_physics.model_tets,
                      "fitted": [s.name for s in face.face_physics.fit_shapes if s.fitted], "baked": baked,
                      "seconds": seconds}))
""")


@pytest.mark.slow
def test_the_linux_zip_runs_the_demo_on_a_python_with_only_bpy(zips, tmp_path):
    start = time.perf_counter()
    python = bpy_only_python()
    venv_seconds = time.perf_counter() - start
    user = tmp_path / "blender-user"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FACE_PHYSICS_CHOLESKY")}
    env["BLENDER_USER_RESOURCES"] = str(user)
    run = subprocess.run([str(python), "-c", ACCEPTANCE, str(zips["linux-x64"]), str(tmp_path / "demo")],
                         env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"bpy-only venv {venv_seconds:.0f} s, install {report['seconds']['install']:.0f} s, "
          f"demo {report['seconds']['demo']:.0f} s")
    wheels = user / "extensions" / ".local" / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    # The solver child ran on the bpy Python itself, with the zip's wheels Blender unpacked.
    assert report["solver_python"] == report["executable"] == str(python)
    assert report["wheel_dirs"] == [str(wheels)] and report["scipy"].startswith(str(wheels))
    check = report["check"]
    assert check["ok"] and check["executable"] == str(python), check
    assert check["cholesky_backend"] == "cholespy" and not check["ipopt"]
    assert check["packages"]["scipy"]["version"] == _pins("scipy")[0].split("==")[1]
    assert report["tets"] > 0 and {"mouthSmile_L", "mouthSmile_R"} <= set(report["fitted"])
    assert len(report["baked"]) == 4 and all(Path(path).stat().st_size > 0 for path in report["baked"].values())
