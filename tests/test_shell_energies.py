"""Derivatives of every shell energy (tests/shell_energy_registry.py) by finite differences,
on a bumped sheet, on a near-degenerate triangle and on a flipped one; rigid-motion invariance;
the topology's areas and bending rest state; the constant lagged Hessian K ⊗ I₃; ∂g/∂κ."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse

from solver.shell.energies import (DiagonalQuadratic, bending_springs, capped_targets, inertia_terms,
                                   strain_springs)
from solver.shell.topology import ShellTopology, mixed_voronoi_areas
from tests.shell_energy_registry import SHELL_ENERGIES, curved_sheet


def _rotation(rng):
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    return q * np.sign(np.linalg.det(q))


def _fd_gradient(term, x, h=1e-6):
    g = np.zeros(x.size)
    flat = x.reshape(-1)
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = h
        g[i] = (term.energy(flat + step) - term.energy(flat - step)) / (2 * h)
    return g


def _fd_hessian(term, x, h=1e-6):
    flat = x.reshape(-1)
    columns = []
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = h
        columns.append((term.gradient(flat + step) - term.gradient(flat - step)) / (2 * h))
    return np.array(columns).T


def _configurations(rest, rng):
    """A random deformation, one with a near-degenerate triangle (a vertex almost on its
    opposite edge) and one with a flipped triangle (the vertex pushed through that edge)."""
    deformed = rest + 0.08 * rng.standard_normal(rest.shape)
    # Triangle (0, 6, 1) of the sheet: vertex 1 moved onto, then across, its opposite edge (0, 6).
    squashed = deformed.copy()
    squashed[1] = 0.5 * (deformed[0] + deformed[6]) + 1e-4 * rng.standard_normal(3)
    flipped = deformed.copy()
    flipped[1] = deformed[0] + deformed[6] - deformed[1]
    return {"deformed": deformed, "near_degenerate": squashed, "flipped": flipped}


@pytest.mark.parametrize("name", sorted(SHELL_ENERGIES))
def test_shell_energy_derivatives(name):
    rng = np.random.default_rng(7)
    rest, triangles = curved_sheet()
    entry = SHELL_ENERGIES[name](rest, triangles, rng)
    term = entry.term
    for label, x in _configurations(rest, rng).items():
        g = term.gradient(x)
        fd = _fd_gradient(term, x)
        assert np.abs(g - fd).max() <= 1e-6 * max(1.0, np.abs(fd).max()), (name, label)
        exact = term.hessian(x, project=False).toarray()
        assert np.abs(exact - exact.T).max() <= 1e-9 * max(1.0, np.abs(exact).max()), (name, label)
        fd_h = _fd_hessian(term, x)
        assert np.abs(exact - fd_h).max() <= 1e-5 * max(1.0, np.abs(fd_h).max()), (name, label)
        projected = term.hessian(x, project=True).toarray()
        assert np.linalg.eigvalsh(projected).min() >= -1e-9 * max(1.0, np.abs(projected).max()), (name, label)
    if entry.rest_is_equilibrium:
        assert np.abs(term.gradient(rest)).max() < 1e-10
    if entry.rigid_motion_invariant:
        x = rest + 0.05 * rng.standard_normal(rest.shape)
        moved = x @ _rotation(rng).T + rng.standard_normal(3)
        assert term.energy(moved) == pytest.approx(term.energy(x), rel=1e-10, abs=1e-14)


def test_topology_of_a_sheet():
    rest, triangles = curved_sheet(bump=0.0)
    topology = ShellTopology.from_triangles(rest, triangles)
    assert topology.vertex_area.sum() == pytest.approx(1.2, rel=1e-12)
    assert len(topology.edges) == 5 * 5 + 4 * 6 + 4 * 5
    assert len(topology.dihedrals) == len(topology.edges) - 2 * (4 + 5)
    # A flat sheet bends from zero: the closest points of every dihedral coincide at rest.
    assert np.abs(topology.bend_rest_length).max() < 1e-12
    assert topology.boundary.sum() == 2 * (5 + 6) - 4
    # Obtuse corners take the area's half/quarter split; the total is still the area.
    obtuse = np.array([[0, 0, 0], [1, 0, 0], [0.5, 0.1, 0]], dtype=float)
    assert mixed_voronoi_areas(obtuse, np.array([[0, 1, 2]])).sum() == pytest.approx(0.05)


def test_bumped_sheet_keeps_its_fold_at_rest():
    rest, triangles = curved_sheet(bump=0.3)
    topology = ShellTopology.from_triangles(rest, triangles)
    assert topology.bend_rest_length.max() > 1e-3
    springs = bending_springs(topology)
    energy, gradient, _ = springs.evaluate(rest, np.ones(len(rest)))
    assert energy < 1e-24 and np.abs(gradient).max() < 1e-12


def test_lagged_hessian_is_constant_scalar_matrix_times_identity():
    rng = np.random.default_rng(3)
    rest, triangles = curved_sheet()
    topology = ShellTopology.from_triangles(rest, triangles)
    stiffness = np.exp(rng.uniform(-1, 1, len(rest)))
    for springs in (strain_springs(topology), bending_springs(topology)):
        directions = springs.directions(rest + 0.05 * rng.standard_normal(rest.shape))
        K = springs.scalar_hessian(stiffness)
        for _ in range(2):
            x = rest + 0.1 * rng.standard_normal(rest.shape)
            full = springs.hessian(x, stiffness, directions)
            assert abs(full - scipy.sparse.kron(K, np.eye(3))).max() < 1e-12


@pytest.mark.parametrize("lagged", [False, True])
def test_stiffness_gradient_by_finite_differences(lagged):
    rng = np.random.default_rng(11)
    rest, triangles = curved_sheet()
    topology = ShellTopology.from_triangles(rest, triangles)
    x = rest + 0.05 * rng.standard_normal(rest.shape)
    stiffness = np.exp(rng.uniform(-1, 1, len(rest)))
    for springs in (strain_springs(topology), bending_springs(topology)):
        directions = springs.directions(rest + 0.05 * rng.standard_normal(rest.shape)) if lagged else None
        exact = springs.stiffness_gradient(x, directions).toarray()
        h = 1e-6
        for v in range(0, len(rest), 7):
            up, down = stiffness.copy(), stiffness.copy()
            up[v] += h
            down[v] -= h
            fd = (springs.evaluate(x, up, directions)[1] - springs.evaluate(x, down, directions)[1]).ravel() / (2 * h)
            assert np.abs(exact[:, v] - fd).max() < 1e-7


def test_capped_targets_and_inertia_terms():
    x = np.zeros((2, 3))
    targets = np.array([[0.5, -0.001, 0.0], [-0.3, 0.02, 0.004]])
    assert np.allclose(capped_targets(x, targets, 0.01), [[0.01, -0.001, 0.0], [-0.01, 0.01, 0.004]])
    rng = np.random.default_rng(2)
    mass, dt, nu = np.array([0.2, 0.05]), 0.002, 0.01
    tilde, previous, probe = rng.standard_normal((3, 2, 3))
    k, t = inertia_terms(mass, dt, nu, tilde, previous)
    separate = 0.5 * (mass / dt ** 2 * ((probe - tilde) ** 2).sum(1)).sum() \
        + 0.5 * (nu * mass / dt * ((probe - previous) ** 2).sum(1)).sum()
    combined = DiagonalQuadratic(k, t)
    # Equal up to a constant: compare differences between two probes.
    other = probe + 0.1
    separate_other = 0.5 * (mass / dt ** 2 * ((other - tilde) ** 2).sum(1)).sum() \
        + 0.5 * (nu * mass / dt * ((other - previous) ** 2).sum(1)).sum()
    assert combined.energy(other) - combined.energy(probe) == pytest.approx(separate_other - separate, rel=1e-9)
