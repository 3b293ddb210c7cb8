"""The sparse Cholesky back ends (solver/physics/cholesky.py): scikit-sparse's CHOLMOD and the
portable cholespy the extension bundles, behind one interface, and the solver on each."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solver.physics import cholesky
from solver.physics.activation import tet_activations
from solver.physics.cholesky import (BACKEND_VARIABLE, BACKENDS, CHOLESPY, SCIKIT_SPARSE, CholeskyUnavailable,
                                     NotPositiveDefinite, SparseCholesky, backend_name)
from solver.physics.simulator import FaceSimulator, SimulationSettings


def _laplacian_plus(size=60, diagonal=0.5, seed=0):
    """A sparse symmetric positive definite matrix: a random graph's Laplacian plus a diagonal."""
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, size, 4 * size)
    columns = rng.integers(0, size, 4 * size)
    weights = sp.coo_matrix((rng.uniform(0.5, 2.0, len(rows)), (rows, columns)), shape=(size, size))
    weights = weights + weights.T
    laplacian = sp.diags(np.asarray(weights.sum(axis=1)).ravel()) - weights
    return (laplacian + diagonal * sp.identity(size)).tocsc()


@pytest.fixture(autouse=True)
def _fresh_choice(monkeypatch):
    monkeypatch.delenv(BACKEND_VARIABLE, raising=False)
    backend_name.cache_clear()
    yield
    backend_name.cache_clear()


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_back_end_solves_shifts_and_refuses_an_indefinite_matrix(backend):
    matrix = _laplacian_plus()
    rng = np.random.default_rng(1)
    rhs, block = rng.normal(size=matrix.shape[0]), rng.normal(size=(matrix.shape[0], 3))
    factor = SparseCholesky(matrix, backend)
    assert factor.backend == backend and not factor.has_factor
    factor.factorise(matrix)
    np.testing.assert_allclose(matrix @ factor.solve(rhs), rhs, atol=1e-10)
    np.testing.assert_allclose(matrix @ factor.solve(block), block, atol=1e-10)
    # a shift: (A + βI) x = b
    factor.factorise(matrix, shift=2.0)
    np.testing.assert_allclose(matrix @ factor.solve(rhs) + 2.0 * factor.solve(rhs), rhs, atol=1e-10)
    # not positive definite: the error the Newton solver's shift search catches, and no factor left
    indefinite = (matrix - 10.0 * sp.identity(matrix.shape[0])).tocsc()
    with pytest.raises(NotPositiveDefinite):
        factor.factorise(indefinite)
    assert not factor.has_factor
    with pytest.raises(RuntimeError, match="factorise first"):
        factor.solve(rhs)
    factor.factorise(indefinite, shift=20.0)          # shifted enough, it factorises again
    np.testing.assert_allclose(indefinite @ factor.solve(rhs) + 20.0 * factor.solve(rhs), rhs, atol=1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_snapshot_keeps_its_matrix_through_later_factorisations(backend):
    matrix = _laplacian_plus()
    rhs = np.random.default_rng(2).normal(size=matrix.shape[0])
    factor = SparseCholesky(matrix, backend)
    factor.factorise(matrix)
    snapshot = factor.snapshot()
    factor.factorise(matrix, shift=5.0)
    np.testing.assert_allclose(matrix @ snapshot.solve(rhs), rhs, atol=1e-10)
    np.testing.assert_allclose(matrix @ factor.solve(rhs) + 5.0 * factor.solve(rhs), rhs, atol=1e-10)


def test_only_scikit_sparse_modifies_a_factor():
    matrix = _laplacian_plus()
    size = matrix.shape[0]
    column = sp.csc_matrix(([1.5, -0.5], ([3, 7], [0, 0])), shape=(size, 1))
    rhs = np.random.default_rng(3).normal(size=size)
    modifiable = SparseCholesky(matrix, SCIKIT_SPARSE)
    modifiable.factorise(matrix)
    updated = modifiable.snapshot()
    updated.modify(column)
    np.testing.assert_allclose((matrix + column @ column.T) @ updated.solve(rhs), rhs, atol=1e-10)
    updated.modify(column, subtract=True)
    np.testing.assert_allclose(matrix @ updated.solve(rhs), rhs, atol=1e-10)
    portable = SparseCholesky(matrix, CHOLESPY)
    portable.factorise(matrix)
    assert not portable.can_modify
    with pytest.raises(NotImplementedError, match="cholespy"):
        portable.snapshot().modify(column)


def test_the_back_end_is_chosen_by_the_environment_else_scikit_sparse(monkeypatch):
    assert backend_name() == SCIKIT_SPARSE           # both installed here: the faster one
    backend_name.cache_clear()
    monkeypatch.setenv(BACKEND_VARIABLE, CHOLESPY)
    assert backend_name() == CHOLESPY
    assert SparseCholesky(_laplacian_plus()).backend == CHOLESPY
    backend_name.cache_clear()
    monkeypatch.setenv(BACKEND_VARIABLE, "umfpack")
    with pytest.raises(CholeskyUnavailable, match="choose one of scikit-sparse, cholespy"):
        backend_name()
    assert cholesky.backend_version(CHOLESPY) != "unknown"


def test_a_demo_head_frame_is_the_same_on_either_back_end(small_demo_model, monkeypatch):
    """The portable back end solves the same equilibrium: a smile under gravity on the 3,000-tet
    demo head (Newton with shift search and CG on the kept factor) and the skin filter."""
    names = [str(n) for n in small_demo_model["muscle_names"]]
    contraction = np.ones(len(names))
    for side in "LR":
        contraction[names.index(f"zygomaticus_major_{side}")] = 1.6
    activations = tet_activations(small_demo_model, contraction)
    skins = {}
    for backend in (SCIKIT_SPARSE, CHOLESPY):
        backend_name.cache_clear()
        monkeypatch.setenv(BACKEND_VARIABLE, backend)
        simulator = FaceSimulator(small_demo_model, SimulationSettings(gravity=True))
        frame = simulator.step(activations)
        assert frame.converged, (backend, frame.reason)
        assert simulator.solver.linear_solver._factor.backend == backend
        skins[backend] = simulator.skin_positions()
    assert np.abs(skins[SCIKIT_SPARSE] - skins[CHOLESPY]).max() < 1e-7


def test_the_skin_filter_shows_the_same_skin_on_either_back_end(monkeypatch):
    from surface_sheets import grid_sheet, slot_wall
    from solver.physics.skin_filter import SkinFilter
    vertices, triangles = grid_sheet(31, 0.001)
    x = vertices[:, 0]
    simulated = vertices.copy()
    simulated[:, 2] = 0.0015 * np.clip((x - 0.015) / 0.001, 0.0, 1.0)        # a kink finer than the kernel
    simulated[:, 0] -= 0.02 * np.sin(x * 300.0) * np.exp(-((vertices[:, 1] - 0.015) / 0.006) ** 2)
    slot, keep_out = slot_wall(vertices)
    simulated[slot, 2] = 0.003

    shown = {}
    for backend in BACKENDS:
        backend_name.cache_clear()
        monkeypatch.setenv(BACKEND_VARIABLE, backend)
        skin_filter = SkinFilter(vertices, triangles, width_m=0.004)
        result, held = skin_filter.apply(simulated, vertices), skin_filter.apply(simulated, vertices, keep_out)
        shown[backend] = (result.skin, result.guarded, held.skin, held.pinned)
    # The fold guard's membrane: scikit-sparse updates a copy of the frame's factor, cholespy
    # factorises the sum; so do the pins below.
    assert shown[SCIKIT_SPARSE][1] == shown[CHOLESPY][1] > 0
    assert np.abs(shown[SCIKIT_SPARSE][0] - shown[CHOLESPY][0]).max() < 1e-12
    assert shown[SCIKIT_SPARSE][3] == shown[CHOLESPY][3] > 0
    assert np.abs(shown[SCIKIT_SPARSE][2] - shown[CHOLESPY][2]).max() < 1e-12
