"""Fixtures shared by test modules: the demo head and its small (3,000-tet) model, built once."""
from __future__ import annotations

import pytest

from solver.demo_head import make_demo_rig
from solver.model_builder.builder import BuildOptions, build_model


@pytest.fixture(scope="session")
def demo_rig():
    return make_demo_rig()


@pytest.fixture(scope="session")
def small_demo_model(demo_rig):
    """Read it, never change it: every module that asks shares this one dict."""
    return build_model(demo_rig, BuildOptions(target_tets=3000))
