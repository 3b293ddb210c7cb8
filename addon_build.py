"""`python3 build.py addon`: one Blender extension zip per platform, each carrying the wheels of
the solver's portable package set, so the solver runs on Blender's own Python with nothing
downloaded or compiled at install time.

Standard library only (build.py runs before any venv exists). The layout follows what
`blender --command extension build --split-platforms` makes: every zip holds the add-on at its
root, `blender_manifest.toml` naming that zip's platform and wheels, and the wheels under
`wheels/`; the file is called `face_physics-VERSION-<platform with _>.zip`.

Which packages travel as wheels (solver_environment.solver_requirements(portable=True), pinned
by requirements.txt, less matplotlib, which only the solver's pictures use): scipy, numba,
llvmlite and cholespy (CHOLMOD inside its wheels). numpy is
NOT bundled: Blender 4.2–5.0 ships numpy 1.26 in its own Python (bpy 5.0.1 pins 1.26.4, our pin),
and Blender installs extension wheels into one `.local/.../site-packages` that it puts *before*
its own site-packages for Blender itself and every add-on. A bundled numpy would therefore replace
Blender's numpy inside Blender, and a second extension shipping another numpy would fight ours.
The solver child uses the numpy of the Python it runs on — Blender's own — and the wheels above
accept numpy 1.26 (scipy 1.17 needs >= 1.26.4, numba 0.68 accepts 1.26–2.x).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile

from blender_addon.solver_environment import solver_requirements

PYTHON_VERSION = "3.11"          # Blender 4.2-5.0's Python; the wheels' cp311 tags must match it
ABI = "cp311"
WHEELS_DIR = "wheels"

# Packages Blender's own Python already has, and that must not be shadowed (see above).
PROVIDED_BY_BLENDER = {"numpy"}
# Only the solver's pictures (solver/pictures: `solver demo`, `fit-pictures`) draw with
# matplotlib; no add-on job does, and its eight dependencies would have to travel too.
NOT_NEEDED_BY_ADDON_JOBS = {"matplotlib"}


class Platform:
    """A Blender platform, the wheel platform tags pip may pick for it, and pins that differ
    from requirements.txt because the registry has no wheel of the pinned version there."""

    def __init__(self, name, wheel_tags, pin_overrides=None, note=""):
        self.name = name
        self.wheel_tags = wheel_tags
        self.pin_overrides = pin_overrides or {}
        self.note = note


PLATFORMS = (
    # Blender 4.2+ needs glibc 2.28, so any manylinux tag up to 2_28 runs wherever Blender does.
    Platform("linux-x64", ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
                           "manylinux2014_x86_64"]),
    Platform("windows-x64", ["win_amd64"]),
    # scipy 1.17's oldest Apple-silicon wheel is macosx_12_0: this zip needs macOS 12 or newer.
    Platform("macos-arm64", ["macosx_12_0_arm64"], note="macOS 12+ (scipy's wheels)"),
    # numba stopped publishing Intel-Mac wheels after 0.62 (llvmlite after 0.45): the last ones
    # are bundled here; the solver uses nothing numba 0.62 lacks.
    Platform("macos-x64", ["macosx_11_0_x86_64"], {"numba": "0.62.1", "llvmlite": "0.45.1"},
             note="numba 0.62.1 / llvmlite 0.45.1, the last Intel-Mac wheels"),
)

SKIPPED_IN_ZIPS = ("__pycache__",)
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".nbi", ".nbc", ".tmp")
# Inside the zip the solver's source sits under this folder; the add-on puts it on the solver
# child's PYTHONPATH (blender_addon/solver_environment.py says why).
SOLVER_BUNDLE = "solver_bundle"


class BuildError(RuntimeError):
    pass


def _normalised(name):
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_pins(requirements_text, platform):
    """[(name, version)] of the wheels one platform's zip carries."""
    pins = []
    for line in solver_requirements(requirements_text, portable=True).splitlines():
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, separator, version = text.partition("==")
        if not separator:
            raise BuildError(f"requirements.txt: {text!r} is not pinned with ==; the extension's wheels need exact pins")
        name = name.strip().lower()
        if name not in PROVIDED_BY_BLENDER | NOT_NEEDED_BY_ADDON_JOBS:
            pins.append((name, platform.pin_overrides.get(name, version.strip())))
    return pins


def _cached_wheel(cache, name, version):
    if os.path.isdir(cache):
        for filename in sorted(os.listdir(cache)):
            parts = filename.split("-")
            if filename.endswith(".whl") and len(parts) >= 5 and _normalised(parts[0]) == _normalised(name) \
                    and parts[1] == version:
                return os.path.join(cache, filename)
    return None


def platform_wheels(requirements_text, platform, cache_root, log=print, pip_python=sys.executable):
    """The wheel files for one platform: from the cache when there, else `pip download`ed into it
    (so a rebuild needs no network)."""
    cache = os.path.join(cache_root, platform.name)
    pins = wheel_pins(requirements_text, platform)
    missing = [(name, version) for name, version in pins if _cached_wheel(cache, name, version) is None]
    if missing:
        os.makedirs(cache, exist_ok=True)
        # Downloaded beside the cache, then moved in whole: a build running at the same time
        # (two test workers) never takes a half-written wheel for a cached one.
        download = tempfile.mkdtemp(prefix=".download-", dir=cache)
        try:
            command = [pip_python, "-m", "pip", "download", "--only-binary=:all:", "--no-deps",
                       "--python-version", PYTHON_VERSION, "--implementation", "cp", "--abi", ABI,
                       "--dest", download]
            for tag in platform.wheel_tags:
                command += ["--platform", tag]
            command += [f"{name}=={version}" for name, version in missing]
            log("    $ " + " ".join(command))
            if subprocess.run(command).returncode != 0:
                raise BuildError(f"pip could not download the {platform.name} wheels "
                                 f"({', '.join(f'{n}=={v}' for n, v in missing)}); see pip's output above. "
                                 f"The first build needs the package registry; later ones use {cache}")
            for filename in os.listdir(download):
                if filename.endswith(".whl"):
                    os.replace(os.path.join(download, filename), os.path.join(cache, filename))
        finally:
            shutil.rmtree(download, ignore_errors=True)
    wheels = []
    for name, version in pins:
        path = _cached_wheel(cache, name, version)
        if path is None:
            raise BuildError(f"pip reported success but no {name}-{version} wheel is in {cache}")
        wheels.append(path)
    return wheels


def platform_manifest(source_text, platform, wheel_names):
    """The source manifest with this platform's `platforms` and `wheels` (top-level keys, so they
    go before the first table)."""
    generated = ("# Written by `python3 build.py addon` for this platform's zip.\n"
                 f"platforms = [\"{platform.name}\"]\n"
                 "wheels = [\n" + "".join(f"  \"./{WHEELS_DIR}/{name}\",\n" for name in wheel_names) + "]\n\n")
    match = re.search(r"^\[", source_text, re.MULTILINE)
    at = match.start() if match else len(source_text)
    text = source_text[:at] + generated + source_text[at:]
    tomllib.loads(text)          # a syntax slip here would otherwise surface only in Blender
    return text


def _zip_tree(archive, folder, prefix, skip=()):
    for directory, subdirectories, files in os.walk(folder):
        subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_IN_ZIPS)
        for name in sorted(files):
            relative = os.path.relpath(os.path.join(directory, name), folder).replace(os.sep, "/")
            if name.endswith(SKIPPED_SUFFIXES) or relative in skip:
                continue
            archive.write(os.path.join(directory, name), prefix + relative)


def write_platform_zip(path, root, platform, wheels):
    addon_dir = os.path.join(root, "blender_addon")
    with open(os.path.join(addon_dir, "blender_manifest.toml"), encoding="utf-8") as f:
        manifest = platform_manifest(f.read(), platform, [os.path.basename(w) for w in wheels])
    temporary = path + ".tmp"
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("blender_manifest.toml", manifest)
        _zip_tree(archive, addon_dir, "", skip=("blender_manifest.toml",))
        _zip_tree(archive, os.path.join(root, "solver"), f"{SOLVER_BUNDLE}/solver/")
        archive.write(os.path.join(root, "requirements.txt"), f"{SOLVER_BUNDLE}/requirements.txt")
        for wheel in wheels:     # wheels are zips already: stored, as Blender's own build does
            archive.write(wheel, f"{WHEELS_DIR}/{os.path.basename(wheel)}", compress_type=zipfile.ZIP_STORED)
    os.replace(temporary, path)


def zip_name(version, platform):
    return f"face_physics-{version}-{platform.name.replace('-', '_')}.zip"


def build_extension_zips(root, dist, version, cache_root, log=print, pip_python=sys.executable):
    """Every platform's zip in `dist`; returns their paths. `pip_python` runs `pip download`
    (only for wheels not in the cache)."""
    with open(os.path.join(root, "requirements.txt"), encoding="utf-8") as f:
        requirements_text = f.read()
    os.makedirs(dist, exist_ok=True)
    paths = []
    for platform in PLATFORMS:
        wheels = platform_wheels(requirements_text, platform, cache_root, log, pip_python)
        path = os.path.join(dist, zip_name(version, platform))
        write_platform_zip(path, root, platform, wheels)
        log(f"    {os.path.basename(path)}: {os.path.getsize(path) / 1e6:.0f} MB"
            + (f" ({platform.note})" if platform.note else ""))
        paths.append(path)
    return paths
