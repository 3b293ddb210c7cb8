"""Energies of the interactive shell (paper 001 §3.1), each in three tiers: a numba element
kernel, a whole-mesh pass, and a convenience object with ``energy(x)``, ``gradient(x)`` and
``hessian(x, project=True)`` on (n, 3) or flat node-major positions, in face units.

Strain (Eq. 7–8) and bending (Eq. 9) are both *difference springs*: an element e has vertices
v_k with fixed weights w_k, the vector r = Σ_k w_k x_k, a rest length L and a coefficient
c_e = a_e κ̄_e (a_e = rest length for strain, ‖e⁰‖/h̄ for bending; κ̄_e the mean of its vertices'
stiffness, §4.1). Its energy is ½ c_e ‖r − L u‖² with the direction u either

- **lagged**: u = r(x̂)/‖r(x̂)‖ from per-step constant positions x̂ (forward, Eq. 8): the energy is
  quadratic, its Hessian c_e w_k w_l I₃ is constant, and the whole Hessian is K ⊗ I₃ with an n×n K
  (``scalar_hessian``), factorised once; or
- **current**: u = r/‖r‖ (x̂ = x, the quasi-static fit, §4.2): ½ c_e (‖r‖ − L)², a nonlinear
  spring whose Hessian c_e [r̂r̂ᵀ + (1 − L/‖r‖)(I − r̂r̂ᵀ)] is made PSD by flooring 1 − L/‖r‖ at 0.

Energies are linear in the stiffness, so ∂g/∂κ (``stiffness_gradient``) is the unit-stiffness
gradient of each element spread over its vertices: the adjoint's ∂²Ψ/∂x∂θ (Eq. 20).

Actuation (Eq. 5) and inertia with damping (Eq. 3, 10) are quadratic with diagonal Hessians.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
from numba import njit

from .topology import ShellTopology

# Below this length a current-direction spring has no direction: its force is taken as zero.
_SHORTEST = 1e-14


# --------------------------------------------------------------------------- tier 1: element

@njit(cache=True)
def spring_element(r, rest_length, coefficient, direction, lagged, project):
    """Energy, gradient (3,) and Hessian (3, 3) with respect to r of ½ c ‖r − L u‖²."""
    gradient = np.zeros(3)
    hessian = np.zeros((3, 3))
    if lagged:
        energy = 0.0
        for a in range(3):
            d = r[a] - rest_length * direction[a]
            energy += 0.5 * coefficient * d * d
            gradient[a] = coefficient * d
            hessian[a, a] = coefficient
        return energy, gradient, hessian
    length = np.sqrt(r[0] ** 2 + r[1] ** 2 + r[2] ** 2)
    stretch = length - rest_length
    energy = 0.5 * coefficient * stretch * stretch
    if length <= _SHORTEST:
        if rest_length == 0.0:
            for a in range(3):
                hessian[a, a] = coefficient
        return energy, gradient, hessian
    transverse = 1.0 - rest_length / length
    if project and transverse < 0.0:
        transverse = 0.0
    for a in range(3):
        gradient[a] = coefficient * stretch * r[a] / length
        for b in range(3):
            along = r[a] * r[b] / (length * length)
            hessian[a, b] = coefficient * (along + transverse * ((1.0 if a == b else 0.0) - along))
    return energy, gradient, hessian


# --------------------------------------------------------------------------- tier 2: whole mesh

@njit(cache=True)
def springs_pass(x, elements, weights, rest_length, coefficient, directions, lagged, project,
                 gradient_out, blocks_out):
    """Σ energy; adds each element's gradient into gradient_out (n, 3) and writes its Hessian
    in r into blocks_out (E, 3, 3) (skipped when blocks_out has no rows)."""
    total = 0.0
    r = np.zeros(3)
    want_blocks = blocks_out.shape[0] > 0
    for e in range(elements.shape[0]):
        r[:] = 0.0
        for k in range(elements.shape[1]):
            for a in range(3):
                r[a] += weights[e, k] * x[elements[e, k], a]
        energy, g, h = spring_element(r, rest_length[e], coefficient[e], directions[e], lagged, project)
        total += energy
        for k in range(elements.shape[1]):
            for a in range(3):
                gradient_out[elements[e, k], a] += weights[e, k] * g[a]
        if want_blocks:
            blocks_out[e] = h
    return total


def _flat_pattern(elements: np.ndarray, size: int, block: int):
    """CSR pattern of Σ over elements of (k×k) blocks of block×block entries, and for every
    element entry (e, k, l, a, b) the index of its value in the CSR data: sparsity built once,
    values refilled with one bincount."""
    count, k = elements.shape
    rows = (block * elements[:, :, None, None, None] + np.arange(block)[None, None, None, :, None])
    cols = (block * elements[:, None, :, None, None] + np.arange(block)[None, None, None, None, :])
    rows = np.broadcast_to(rows, (count, k, k, block, block)).ravel()
    cols = np.broadcast_to(cols, (count, k, k, block, block)).ravel()
    keys, positions = np.unique(rows.astype(np.int64) * size + cols, return_inverse=True)
    indptr = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // size, minlength=size), out=indptr[1:])
    return (keys % size).astype(np.int64), indptr, positions.ravel().astype(np.int64)


class DifferenceSprings:
    """Springs on r = Σ_k w_k x_k with per-vertex stiffness averaged onto elements."""

    def __init__(self, vertex_count: int, elements, weights, rest_length, shape_coefficient):
        self.vertex_count = int(vertex_count)
        self.elements = np.ascontiguousarray(elements, dtype=np.int64)
        self.weights = np.ascontiguousarray(weights, dtype=np.float64)
        self.rest_length = np.ascontiguousarray(rest_length, dtype=np.float64)
        self.shape_coefficient = np.ascontiguousarray(shape_coefficient, dtype=np.float64)
        count, k = self.elements.shape
        # κ̄_e = mean of the element's vertex stiffness (paper 001 §4.1): an E × n averaging matrix.
        self.averaging = scipy.sparse.csr_matrix(
            (np.full(count * k, 1.0 / k), self.elements.ravel(), np.arange(0, count * k + 1, k)),
            shape=(count, self.vertex_count))
        self._patterns = {}

    def coefficients(self, stiffness) -> np.ndarray:
        stiffness = np.asarray(stiffness, dtype=np.float64)
        if stiffness.shape != (self.vertex_count,):
            raise ValueError(f"stiffness: expected ({self.vertex_count},), found {stiffness.shape}")
        return self.shape_coefficient * (self.averaging @ stiffness)

    def directions(self, lagged_positions) -> np.ndarray:
        """Unit directions of r at the lagged positions (Eq. 8); zero where r vanishes."""
        x = _positions(lagged_positions, self.vertex_count)
        r = np.einsum("ek,ekc->ec", self.weights, x[self.elements])
        length = np.linalg.norm(r, axis=1)
        return np.where(length[:, None] > _SHORTEST, r / np.maximum(length, _SHORTEST)[:, None], 0.0)

    def evaluate(self, x, stiffness, directions=None, project=True, want_hessian=False):
        """(energy, gradient (n, 3), r-space blocks or None); lagged when directions are given."""
        x = _positions(x, self.vertex_count)
        coefficient = self.coefficients(stiffness)
        lagged = directions is not None
        if directions is None:
            directions = np.zeros((len(self.elements), 3))
        gradient = np.zeros((self.vertex_count, 3))
        blocks = np.zeros((len(self.elements) if want_hessian else 0, 3, 3))
        energy = springs_pass(x, self.elements, self.weights, self.rest_length, coefficient,
                              np.ascontiguousarray(directions, dtype=np.float64), lagged, project,
                              gradient, blocks)
        return energy, gradient, (blocks if want_hessian else None)

    def _pattern(self, block: int):
        if block not in self._patterns:
            self._patterns[block] = _flat_pattern(self.elements, block * self.vertex_count, block)
        return self._patterns[block]

    def hessian(self, x, stiffness, directions=None, project=True) -> scipy.sparse.csr_matrix:
        """The 3n × 3n Hessian: per element, w_k w_l times its r-space Hessian."""
        _, _, blocks = self.evaluate(x, stiffness, directions, project, want_hessian=True)
        indices, indptr, positions = self._pattern(3)
        values = (self.weights[:, :, None, None, None] * self.weights[:, None, :, None, None]
                  * blocks[:, None, None, :, :])
        data = np.bincount(positions, weights=values.ravel(), minlength=len(indices))
        size = 3 * self.vertex_count
        return scipy.sparse.csr_matrix((data, indices, indptr), shape=(size, size))

    def scalar_hessian(self, stiffness) -> scipy.sparse.csr_matrix:
        """The n × n K with lagged Hessian = K ⊗ I₃: K_kl = Σ_e c_e w_k w_l (constant)."""
        indices, indptr, positions = self._pattern(1)
        values = self.coefficients(stiffness)[:, None, None] * self.weights[:, :, None] * self.weights[:, None, :]
        data = np.bincount(positions, weights=values.ravel(), minlength=len(indices))
        return scipy.sparse.csr_matrix((data, indices, indptr), shape=(self.vertex_count,) * 2)

    def stiffness_gradient(self, x, directions=None) -> scipy.sparse.csr_matrix:
        """∂(gradient)/∂κ, 3n × n: column v is Σ_{e ∋ v} (a_e / k) ∇ψ_e with ψ_e the element's
        energy at unit stiffness."""
        x = _positions(x, self.vertex_count)
        count, k = self.elements.shape
        r = np.einsum("ek,ekc->ec", self.weights, x[self.elements])
        if directions is not None:
            g_r = r - self.rest_length[:, None] * directions
        else:
            length = np.linalg.norm(r, axis=1)
            # (‖r‖ − L) r̂, the unit-stiffness force; zero where r has no direction.
            g_r = np.where(length[:, None] > _SHORTEST,
                           ((length - self.rest_length) / np.maximum(length, _SHORTEST))[:, None] * r, 0.0)
        rows = (3 * self.elements[:, :, None] + np.arange(3)).reshape(count, -1)
        values = (self.weights[:, :, None] * g_r[:, None, :]).reshape(count, -1)
        per_element = scipy.sparse.csr_matrix(
            (values.ravel(), rows.ravel(), np.arange(0, count * 3 * k + 1, 3 * k)),
            shape=(count, 3 * self.vertex_count)).T
        return (per_element @ scipy.sparse.diags(self.shape_coefficient) @ self.averaging).tocsr()


def strain_springs(topology: ShellTopology) -> DifferenceSprings:
    """Eq. 7: one spring per edge, rest length l, coefficient l κ̄."""
    edges = topology.edges
    weights = np.tile([1.0, -1.0], (len(edges), 1))
    return DifferenceSprings(topology.vertex_count, edges, weights, topology.edge_rest_length,
                             topology.edge_rest_length)


def bending_springs(topology: ShellTopology) -> DifferenceSprings:
    """Eq. 9: one spring per interior edge between the rest closest points q1, q2."""
    return DifferenceSprings(topology.vertex_count, topology.dihedrals, topology.bend_weights,
                             topology.bend_rest_length, topology.bend_coefficient)


# --------------------------------------------------------------------------- quadratic terms

def actuation_stiffness(topology: ShellTopology, max_pressure: float, reproducibility: float) -> np.ndarray:
    """Eq. 5's per-vertex p_max A_i / ε_r: force p_max A_i at distance ε_r."""
    return max_pressure * topology.vertex_area / reproducibility


def capped_targets(x, targets, reproducibility: float) -> np.ndarray:
    """Eq. 6: each coordinate of the target moved to within ε_r of the current position."""
    x = np.asarray(x, dtype=np.float64)
    return x + np.clip(np.asarray(targets, dtype=np.float64) - x, -reproducibility, reproducibility)


class DiagonalQuadratic:
    """½ Σ_i k_i ‖x_i − t_i‖²: actuation (Eq. 5, k_i = p_max A_i/ε_r, t the target) and the
    sum of inertia and damping (Eq. 3 + 10, k_i = m_i/Δt² + ν m_i/Δt with t their weighted
    mean ``inertia_target``)."""

    def __init__(self, vertex_stiffness, targets):
        self.vertex_stiffness = np.asarray(vertex_stiffness, dtype=np.float64)
        self.vertex_count = len(self.vertex_stiffness)
        self.targets = _positions(targets, self.vertex_count)

    def energy(self, x) -> float:
        d = _positions(x, self.vertex_count) - self.targets
        return float(0.5 * (self.vertex_stiffness * (d * d).sum(1)).sum())

    def gradient(self, x) -> np.ndarray:
        d = _positions(x, self.vertex_count) - self.targets
        return (self.vertex_stiffness[:, None] * d).reshape(-1)

    def hessian(self, x=None, project=True) -> scipy.sparse.csr_matrix:
        return scipy.sparse.diags(np.repeat(self.vertex_stiffness, 3)).tocsr()


def inertia_terms(mass, time_step: float, damping: float, inertial_estimate, previous):
    """(k_i, t_i) for inertia + damping as one DiagonalQuadratic: ½ m/Δt² ‖x − x̃‖² +
    ½ ν m/Δt ‖x − xⁿ‖² equals ½ k ‖x − t‖² up to a constant."""
    mass = np.asarray(mass, dtype=np.float64)
    inertia, damp = mass / time_step ** 2, damping * mass / time_step
    stiffness = inertia + damp
    safe = np.where(stiffness > 0, stiffness, 1.0)
    target = (inertia[:, None] * np.asarray(inertial_estimate) + damp[:, None] * np.asarray(previous)) / safe[:, None]
    return stiffness, target


# --------------------------------------------------------------------------- tier 3: convenience

class SpringEnergy:
    """One DifferenceSprings bound to a stiffness field and, for the forward solve, lagged
    positions: the common energy API of tests and solvers."""

    def __init__(self, springs: DifferenceSprings, stiffness, lagged_positions=None):
        self.springs = springs
        self.stiffness = np.asarray(stiffness, dtype=np.float64)
        self.directions = None if lagged_positions is None else springs.directions(lagged_positions)

    def energy(self, x) -> float:
        return float(self.springs.evaluate(x, self.stiffness, self.directions)[0])

    def gradient(self, x) -> np.ndarray:
        return self.springs.evaluate(x, self.stiffness, self.directions)[1].reshape(-1)

    def hessian(self, x, project=True) -> scipy.sparse.csr_matrix:
        return self.springs.hessian(x, self.stiffness, self.directions, project)


def _positions(x, vertex_count: int) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.size != 3 * vertex_count:
        raise ValueError(f"x: expected {vertex_count} vertices, found shape {x.shape}")
    return np.ascontiguousarray(x.reshape(vertex_count, 3))
