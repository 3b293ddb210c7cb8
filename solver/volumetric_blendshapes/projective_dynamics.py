"""Projective Dynamics [BML*14] for the volumetric-blendshape energy (paper 002 §3.4), and a
Newton solver on the very same energy to check it against.

Every term is c_t ||F_t(x) − P_t||² with P_t a projection of F_t (or a constant target), plus an
optional skin attachment k Σ_v ||B_v x − s_v||² (deformation transfer onto shape keys, Eq. 6).
The global step's matrix A = Σ_t 2 c_t G_t G_tᵀ + 2k BᵀB (one scalar N×N matrix shared by the
three axes) does not depend on x, the targets or the attachment positions, so it is assembled
and factorised once per model and weight set; each iteration is a per-tet projection (local
step) and one back-substitution for the three axes (global step). Bone nodes are fixed: their
rows leave the system and their positions move to the right-hand side.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse

from ..physics.cholesky import SparseCholesky
from .element_kernels import weighted_projections
from .energies import TetMesh, TetProjectiveTerm


@dataclass
class SolveReport:
    iterations: int
    converged: bool
    seconds: float
    last_step_m: float          # the largest node move of the last iteration


class Attachment:
    """k Σ_v ||B_v x − s_v||²: skin vertices (barycentric rows B (V,N), scalar) pulled to s (V,3)."""

    def __init__(self, barycentric: scipy.sparse.csr_matrix, stiffness: float):
        self.matrix = scipy.sparse.csr_matrix(barycentric)
        self.stiffness = float(stiffness)
        self.positions: Optional[np.ndarray] = None

    def energy(self, x) -> float:
        offset = self.matrix @ np.asarray(x).reshape(-1, 3) - self.positions
        return float(self.stiffness * np.sum(offset ** 2))

    def gradient(self, x) -> np.ndarray:
        offset = self.matrix @ np.asarray(x).reshape(-1, 3) - self.positions
        return (2.0 * self.stiffness * (self.matrix.T @ offset)).reshape(-1)

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        scalar = 2.0 * self.stiffness * (self.matrix.T @ self.matrix)
        return scipy.sparse.kron(scalar, scipy.sparse.identity(3), format="csr")


def barycentric_matrix(model: dict) -> scipy.sparse.csr_matrix:
    """B (V,N): the model's skin vertices from its tet nodes (skin_embedding_tet / _weights)."""
    nodes = np.asarray(model["tets"], dtype=np.int64)[np.asarray(model["skin_embedding_tet"], dtype=np.int64)]
    weights = np.asarray(model["skin_embedding_weights"], dtype=np.float64)
    rows = np.repeat(np.arange(len(nodes)), 4)
    return scipy.sparse.csr_matrix((weights.ravel(), (rows, nodes.ravel())),
                                   shape=(len(nodes), len(model["rest_positions"])))


def model_fixed_nodes(model: dict) -> np.ndarray:
    """The bone nodes held fixed (paper 002 §3.2: they are no degrees of freedom): pinned and sliding."""
    return np.unique(np.concatenate([np.asarray(model["pin_nodes"], np.int64), np.asarray(model["slide_nodes"], np.int64)]))


class ProjectiveDynamics:
    """Local/global minimisation of Σ terms (+ attachment) with `fixed_nodes` held where x0 puts them."""

    def __init__(self, mesh: TetMesh, terms: list[TetProjectiveTerm], fixed_nodes, attachment: Optional[Attachment] = None):
        self.mesh, self.terms, self.attachment = mesh, terms, attachment
        count = mesh.node_count
        self.fixed = np.zeros(count, dtype=bool)
        self.fixed[np.asarray(fixed_nodes, dtype=np.int64)] = True
        self.free = np.flatnonzero(~self.fixed)
        G = mesh.shape_gradients
        weight = sum(term.coefficient for term in terms)
        blocks = 2.0 * weight[:, None, None] * np.einsum("maj,mbj->mab", G, G)
        rows = np.repeat(mesh.tets, 4, axis=1).ravel()
        columns = np.tile(mesh.tets, (1, 4)).ravel()
        matrix = scipy.sparse.csr_matrix((blocks.ravel(), (rows, columns)), shape=(count, count))
        if attachment is not None:
            matrix = matrix + 2.0 * attachment.stiffness * (attachment.matrix.T @ attachment.matrix)
        matrix = scipy.sparse.csr_matrix(matrix)
        self.matrix = matrix
        self._free_matrix = matrix[self.free][:, self.free].tocsc()
        self._coupling = matrix[self.free][:, np.flatnonzero(self.fixed)].tocsr()
        started = time.perf_counter()
        self.cholesky = SparseCholesky(self._free_matrix)       # analysed once
        self.cholesky.factorise(self._free_matrix)              # factorised once
        self.factorisation_seconds = time.perf_counter() - started

    def energy(self, x) -> float:
        total = sum(term.energy(x) for term in self.terms)
        return total + (self.attachment.energy(x) if self.attachment is not None else 0.0)

    def _right_hand_side(self, x: np.ndarray) -> np.ndarray:
        """2 Σ_t c_t P_t(x) G_tᵀ per node: the ARAP and volume projections share one SVD per tet
        (element_kernels.weighted_projections), the targets are constants."""
        weights = {"arap": np.zeros(len(self.mesh.tets)), "volume": np.zeros(len(self.mesh.tets))}
        for term in self.terms:
            if term.kind in weights:
                weights[term.kind] += term.coefficient
        projected = weighted_projections(self.mesh.deformation_gradients(x), weights["arap"], weights["volume"])
        for term in self.terms:
            if term.kind == "target":
                projected += term.coefficient[:, None, None] * term.target
        rhs = 2.0 * self.mesh.stress_to_nodes(projected)
        if self.attachment is not None:
            rhs += 2.0 * self.attachment.stiffness * (self.attachment.matrix.T @ self.attachment.positions)
        return rhs

    def _constrained_solve(self, rhs: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The global step with linear constraints C y = d on the free nodes' coordinates y (node-major),
        by the Schur complement of the KKT system (paper 002 Eq. 10): C A⁻¹ Cᵀ λ = C A⁻¹ b − d,
        then y = A⁻¹ (b − Cᵀ λ). A⁻¹ is the one factorisation; C has few rows, S is small and dense."""
        unconstrained = self.cholesky.solve(rhs)
        if len(rows) == 0:
            return unconstrained
        count = len(rows)
        # A is the same scalar matrix for x, y and z: A⁻¹ Cᵀ is one solve with 3k right-hand sides.
        columns = rows.reshape(count, -1, 3).transpose(1, 2, 0).reshape(len(rhs), 3 * count)
        solved = self.cholesky.solve(columns).reshape(len(rhs), 3, count)          # A⁻¹ Cᵀ per axis
        schur = rows @ solved.transpose(2, 0, 1).reshape(count, -1).T              # C A⁻¹ Cᵀ (k,k)
        multipliers = np.linalg.solve(schur, rows @ unconstrained.reshape(-1) - values)
        return unconstrained - np.einsum("nak,k->na", solved, multipliers)

    def solve(self, x0, iterations: int = 500, tolerance_m: float = 1e-9,
              constraints=None, contact=None) -> tuple[np.ndarray, SolveReport]:
        """Iterate from x0 (N,3) (whose fixed nodes stay) until no node moves by tolerance_m.

        constraints: optional callable x (N,3) → (C (k, 3·free), d (k,)), linear equality rows on
        the free nodes' coordinates (node-major, in `self.free` order), re-evaluated every iteration
        as collision detection is (paper 002 §3.5: the active contacts of the current x).
        contact: optional contact.CompliantContact, which corrects each global step's solution
        (`correct(solution, x)`) to the contacts found at it."""
        started = time.perf_counter()
        x = np.array(x0, dtype=np.float64).reshape(-1, 3)
        fixed_positions = x[self.fixed]
        step = np.inf
        for iteration in range(1, iterations + 1):
            rhs = self._right_hand_side(x)[self.free] - self._coupling @ fixed_positions
            if constraints is None:
                moved = self.cholesky.solve(rhs)
                if contact is not None:
                    moved = contact.correct(moved, x)
            else:
                rows, values = constraints(x)
                moved = self._constrained_solve(rhs, np.asarray(rows, dtype=np.float64).reshape(len(values), -1),
                                                np.asarray(values, dtype=np.float64))
            step = float(np.abs(moved - x[self.free]).max(initial=0.0))
            x[self.free] = moved
            if step < tolerance_m:
                return x, SolveReport(iteration, True, time.perf_counter() - started, step)
        return x, SolveReport(iterations, False, time.perf_counter() - started, step)


def newton_solve(terms: list, x0, fixed_nodes, iterations: int = 100, tolerance_m: float = 1e-12):
    """Projected Newton with backtracking on Σ terms (the common energy API), fixed nodes held:
    the reference PD is tested against, and the timing beside PD's (bench/pd.py)."""
    started = time.perf_counter()
    x = np.array(x0, dtype=np.float64).reshape(-1)
    free_nodes = np.setdiff1d(np.arange(len(x) // 3), np.asarray(fixed_nodes, dtype=np.int64))
    free = (3 * free_nodes[:, None] + np.arange(3)).ravel()

    def energy(y):
        return sum(term.energy(y) for term in terms)

    value = energy(x)
    step_size = np.inf
    for iteration in range(1, iterations + 1):
        gradient = sum(term.gradient(x) for term in terms)[free]
        hessian = sum(term.hessian(x, project=True) for term in terms).tocsr()[free][:, free]
        hessian = (hessian + 1e-12 * abs(hessian.diagonal()).max() * scipy.sparse.identity(len(free))).tocsc()
        factor = SparseCholesky(hessian)
        factor.factorise(hessian)
        direction = -factor.solve(gradient)
        alpha = 1.0
        while alpha > 1e-10:
            trial = x.copy()
            trial[free] += alpha * direction
            trial_value = energy(trial)
            if trial_value <= value + 1e-4 * alpha * (gradient @ direction):
                break
            alpha *= 0.5
        x, value = trial, trial_value
        step_size = float(np.abs(alpha * direction).max(initial=0.0))
        if step_size < tolerance_m:
            return x.reshape(-1, 3), SolveReport(iteration, True, time.perf_counter() - started, step_size)
    return x.reshape(-1, 3), SolveReport(iterations, False, time.perf_counter() - started, step_size)
