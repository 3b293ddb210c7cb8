"""Every energy of the interactive shell by name, for one shared derivative test
(tests/test_shell_energies.py), like tests/energy_registry.py for the volumetric model.

``SHELL_ENERGIES[name](rest, triangles, rng)`` builds the energy on a small triangle mesh with
random stiffness (and lagged positions, targets, masses) and returns a RegisteredEnergy."""
from __future__ import annotations

import numpy as np

from solver.shell.energies import (DiagonalQuadratic, SpringEnergy, actuation_stiffness, bending_springs,
                                   inertia_terms, strain_springs)
from solver.shell.topology import ShellTopology
from tests.energy_registry import RegisteredEnergy


def curved_sheet(rows: int = 5, columns: int = 6, bump: float = 0.15):
    """A bumped rectangular sheet (1 × 1.2 units) with alternating diagonals, so dihedrals are
    folded at rest and both diagonal directions occur."""
    u, v = np.meshgrid(np.linspace(0, 1, rows), np.linspace(0, 1.2, columns), indexing="ij")
    z = bump * np.sin(np.pi * u) * np.cos(1.3 * v)
    rest = np.stack([u.ravel(), v.ravel(), z.ravel()], axis=1)
    triangles = []
    for i in range(rows - 1):
        for j in range(columns - 1):
            a, b, c, d = i * columns + j, (i + 1) * columns + j, (i + 1) * columns + j + 1, i * columns + j + 1
            triangles += [(a, b, c), (a, c, d)] if (i + j) % 2 else [(a, b, d), (b, c, d)]
    return rest, np.array(triangles, dtype=np.int64)


def _stiffness(rng, n):
    return np.exp(rng.uniform(-1.0, 1.0, n))


def _springs(kind, lagged):
    def build(rest, triangles, rng):
        topology = ShellTopology.from_triangles(rest, triangles)
        springs = (strain_springs if kind == "strain" else bending_springs)(topology)
        lag = rest + 0.05 * rng.standard_normal(rest.shape) if lagged else None
        return RegisteredEnergy(SpringEnergy(springs, _stiffness(rng, len(rest)), lag),
                                rigid_motion_invariant=not lagged, rest_is_equilibrium=not lagged)
    return build


def _actuation(rest, triangles, rng):
    topology = ShellTopology.from_triangles(rest, triangles)
    stiffness = actuation_stiffness(topology, 1e2, 1e-2)
    return RegisteredEnergy(DiagonalQuadratic(stiffness, rest + 0.02 * rng.standard_normal(rest.shape)),
                            rigid_motion_invariant=False, rest_is_equilibrium=False)


def _inertia_damping(rest, triangles, rng):
    topology = ShellTopology.from_triangles(rest, triangles)
    k, t = inertia_terms(0.1 * topology.vertex_area, 0.002, 0.01, rest + 0.01 * rng.standard_normal(rest.shape),
                         rest + 0.01 * rng.standard_normal(rest.shape))
    return RegisteredEnergy(DiagonalQuadratic(k, t), rigid_motion_invariant=False, rest_is_equilibrium=False)


SHELL_ENERGIES = {
    "strain": _springs("strain", lagged=False),
    "strain_lagged": _springs("strain", lagged=True),
    "bending": _springs("bending", lagged=False),
    "bending_lagged": _springs("bending", lagged=True),
    "actuation": _actuation,
    "inertia_damping": _inertia_damping,
}
