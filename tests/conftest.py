"""Fixtures shared by test modules: the demo head and its small (3,000-tet) model, and a tissue
slab to press things into, each built once."""
from __future__ import annotations

import numpy as np
import pytest

from block_models import bcc_block, block_model

from solver.demo_head import make_demo_rig
from solver.model_builder.builder import BuildOptions, build_model


@pytest.fixture(scope="session")
def demo_rig():
    return make_demo_rig()


@pytest.fixture(scope="session")
def small_demo_model(demo_rig):
    """Read it, never change it: every module that asks shares this one dict."""
    return build_model(demo_rig, BuildOptions(target_tets=3000))


@pytest.fixture(scope="session")
def slab():
    """A 48 × 8 × 48 mm tissue slab on a pinned base (BCC, 4 mm spacing, 2,688 tets), and the
    middle of its top: (model, centre)."""
    nodes, tets = bcc_block((0.048, 0.008, 0.048), 0.004)
    base = np.flatnonzero(nodes[:, 1] < nodes[:, 1].min() + 1e-9)
    model = block_model(nodes, tets, pin_nodes=base)
    top = model["skin_vertices"][:, 1].max()
    return model, np.array([0.024, top, 0.024])
