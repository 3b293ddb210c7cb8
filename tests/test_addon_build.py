"""addon_build.py's pure parts, without a download: which wheels each platform's zip carries and
where the generated manifest keys go."""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import addon_build  # noqa: E402

PLATFORMS = {platform.name: platform for platform in addon_build.PLATFORMS}


def test_the_zips_carry_the_portable_set_without_numpy_matplotlib_or_test_packages():
    requirements = (ROOT / "requirements.txt").read_text()
    linux = dict(addon_build.wheel_pins(requirements, PLATFORMS["linux-x64"]))
    assert set(linux) == {"scipy", "numba", "llvmlite", "cholespy"}
    intel_mac = dict(addon_build.wheel_pins(requirements, PLATFORMS["macos-x64"]))
    assert intel_mac["numba"] == "0.62.1" and intel_mac["llvmlite"] == "0.45.1"
    assert intel_mac["scipy"] == linux["scipy"]


def test_an_unpinned_requirement_is_refused_with_the_reason():
    with pytest.raises(addon_build.BuildError, match="scipy>=1.17.*not pinned with =="):
        addon_build.wheel_pins("numpy==1.26.4\nscipy>=1.17\n", PLATFORMS["linux-x64"])


def test_the_platform_and_wheels_go_before_the_first_table_of_the_manifest():
    source = (ROOT / "blender_addon" / "blender_manifest.toml").read_text()
    text = addon_build.platform_manifest(source, PLATFORMS["windows-x64"], ["a-1-cp311-cp311-win_amd64.whl"])
    manifest = tomllib.loads(text)
    assert manifest["platforms"] == ["windows-x64"]
    assert manifest["wheels"] == ["./wheels/a-1-cp311-cp311-win_amd64.whl"]
    assert "platforms" not in manifest["permissions"] and "wheels" not in manifest["build"]

