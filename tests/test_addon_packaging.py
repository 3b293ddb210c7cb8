"""`python3 build.py addon`: both zips install with Blender's own installers (in a child
process with its own user folder) and drive the solver copy bundled inside them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("bpy")
ROOT = Path(__file__).resolve().parents[1]

INSTALL_AND_RUN = textwrap.dedent("""
    import importlib, json, subprocess, sys
    import bpy
    import addon_utils
    kind, path = sys.argv[1:3]
    if kind == "extension":
        assert bpy.ops.extensions.package_install_files(filepath=path, repo="user_default",
                                                        enable_on_install=True) == {"FINISHED"}
        package = "bl_ext.user_default.face_physics"
    else:
        assert bpy.ops.preferences.addon_install(filepath=path) == {"FINISHED"}
        package = "face_physics"
        addon_utils.enable(package, default_set=True, handle_error=None)
    assert package in bpy.context.preferences.addons
    environment = importlib.import_module(package + ".solver_environment")
    preferences = importlib.import_module(package + ".preferences")
    source = environment.solver_source_dir()
    probe = subprocess.run([sys.executable, "-c", "import solver.jobs, solver; print(solver.__file__)"],
                           env=environment.solver_environment(), capture_output=True, text=True)
    print(json.dumps({"source": str(source), "solver_file": probe.stdout.strip(), "stderr": probe.stderr,
                      "solver_python": str(preferences.solver_python()),
                      "has_model_panel": hasattr(bpy.types, "VIEW3D_PT_face_physics_model")}))
""")


@pytest.fixture(scope="module")
def zips(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, str(ROOT / "build.py"), "addon", "--dist", str(dist)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    extension, legacy = sorted(dist.glob("*.zip"), key=lambda p: "legacy" in p.name)
    return {"extension": extension, "legacy": legacy}


def test_the_zips_hold_the_addon_and_a_copy_of_the_solver(zips):
    with zipfile.ZipFile(zips["extension"]) as archive:
        names = set(archive.namelist())
    assert {"blender_manifest.toml", "__init__.py", "solver_bundle/requirements.txt",
            "solver_bundle/solver/jobs.py"} <= names
    assert not any("__pycache__" in name or name.endswith((".pyc", ".nbi", ".nbc")) for name in names)
    with zipfile.ZipFile(zips["legacy"]) as archive:
        assert all(name.startswith("face_physics/") for name in archive.namelist())


@pytest.mark.parametrize("kind", ["extension", "legacy"])
def test_installed_zip_enables_and_runs_its_bundled_solver(zips, tmp_path, kind):
    env = dict(os.environ, BLENDER_USER_RESOURCES=str(tmp_path / "blender-user"))
    env.pop("PYTHONPATH", None)
    run = subprocess.run([sys.executable, "-c", INSTALL_AND_RUN, kind, str(zips[kind])], env=env,
                         capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["has_model_panel"]
    assert report["source"].startswith(str(tmp_path)) and report["source"].endswith("solver_bundle")
    assert report["solver_file"].startswith(report["source"]), report["stderr"]
    assert report["solver_python"] == "None"       # nothing installed yet: the panels show Install solver
