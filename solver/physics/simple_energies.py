"""Gravity and backward-Euler inertia (docs/physics.md), with the energies' common API.

Every energy here has ``energy(x) -> float``, ``gradient(x) -> (3N,)`` and
``hessian(x, project=True) -> 3N×3N csr_matrix`` on node positions x, given as (N,3) or
flattened node-major (3N,). Both energies are convex, so ``project`` changes nothing; it is
accepted so that a solver can treat every term alike.

Gravity's Hessian is zero: ``hessian`` returns an empty 3N×3N matrix (no stored entries), which
adds to any other Hessian without changing its pattern. A solver that keeps the elastic
Hessian's pattern fixed (CorotatedElasticity) can skip the term, and add the inertia's
diagonal (``InertiaEnergy.hessian_diagonal``) at ``CorotatedElasticity.diagonal_entry_positions``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

STANDARD_GRAVITY = 9.81    # m/s²; the simulator points it down the head frame's up axis


def _node_masses(node_mass) -> np.ndarray:
    node_mass = np.asarray(node_mass, dtype=np.float64)
    if node_mass.ndim != 1 or not (np.isfinite(node_mass).all() and (node_mass >= 0.0).all()):
        raise ValueError("node_mass: expected (N,) non-negative finite masses")
    return node_mass


def _flat_positions(x, node_count: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.size != 3 * node_count:
        raise ValueError(f"x: expected {node_count} nodes, found shape {x.shape}")
    return x.reshape(-1)


class GravityEnergy:
    """E = −Σ_j m_j g·x_j: the potential of uniform gravity g (m/s², a vector) on lumped node
    masses (kg)."""

    def __init__(self, node_mass, g):
        node_mass = _node_masses(node_mass)
        self.node_count = len(node_mass)
        self.gravity = np.asarray(g, dtype=np.float64).reshape(3)
        # The energy is linear in x: its gradient is the constant −(m_j g) per node.
        self._gradient = -(node_mass[:, None] * self.gravity).reshape(-1)

    def energy(self, x) -> float:
        return float(self._gradient @ _flat_positions(x, self.node_count))

    def gradient(self, x) -> np.ndarray:
        _flat_positions(x, self.node_count)
        return self._gradient.copy()

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        _flat_positions(x, self.node_count)
        size = 3 * self.node_count
        return scipy.sparse.csr_matrix((size, size))


class InertiaEnergy:
    """E = (1/2h²)(x − x̂)ᵀ M (x − x̂): backward-Euler inertia with lumped masses M.

    x̂ = x_n + h v_n (+ h² M⁻¹ f_ext if external forces are folded in) is the predicted
    position of the step, h = dt the time step (s); minimising E plus the potential energies
    gives the implicit Euler step (paper 000 §6).
    """

    def __init__(self, node_mass, x_hat, dt: float):
        node_mass = _node_masses(node_mass)
        self.node_count = len(node_mass)
        if not dt > 0.0:
            raise ValueError(f"dt: must be positive, got {dt}")
        self.dt = float(dt)
        self.x_hat = _flat_positions(x_hat, self.node_count).copy()
        # M/h² per degree of freedom, node-major like x.
        self.hessian_diagonal = np.repeat(node_mass, 3) / self.dt ** 2

    def energy(self, x) -> float:
        offset = _flat_positions(x, self.node_count) - self.x_hat
        return float(0.5 * offset @ (self.hessian_diagonal * offset))

    def gradient(self, x) -> np.ndarray:
        return self.hessian_diagonal * (_flat_positions(x, self.node_count) - self.x_hat)

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        _flat_positions(x, self.node_count)
        return scipy.sparse.diags(self.hessian_diagonal, format="csr")
