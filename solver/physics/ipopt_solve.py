"""Minimise the objective with IPOPT (cyipopt) on the reduced unknowns q, with optional linear
inequality constraints A q ≥ b.

This is paper 000 §4's path for collision response: for every offending surface vertex the
collision pass (issue 5) supplies a tangent plane (a point on the surface and its normal) and
the vertex must stay on the allowed side. Through x = P q + c each plane is one linear row in q:

* on a node (``tangent_plane_inequalities``): n · (x_node − p) ≥ 0 ⇔ (nᵀ P_node) q ≥ nᵀ (p − c_node);
* on an embedded skin vertex x_v = Σ_k w_k x_k (``skin_plane_inequalities``, what collision
  detection hands over): (Σ_k w_k nᵀ P_k) q ≥ nᵀ (p − Σ_k w_k c_k) — the weights times the
  basis rows of P of the four nodes of the vertex's tet.

contact_response.ContactResponse.solve_ipopt alternates this solve with detection (docs/collisions.md).

IPOPT gets the exact reduced Hessian Pᵀ H P (lower triangle, on the fixed pattern of
``BoneConstraints.reduce_hessian``); the constraints are linear, so they add nothing to the
Hessian of the Lagrangian. The objective is scaled by 1 / force_scale, which makes IPOPT's
dual-infeasibility tolerance the same relative force residual that the Newton solver uses.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import cyipopt
import numpy as np
import scipy.sparse as sp

from .constraints import BoneConstraints
from .newton import Objective

DEFAULT_TOLERANCE = 1e-6
DEFAULT_MAX_ITERATIONS = 200
IPOPT_SOLVED = 0            # ApplicationReturnStatus Solve_Succeeded; "acceptable level" (1) is not converged


@dataclass
class LinearInequalities:
    """A q ≥ lower on the reduced coordinates of one frame."""
    matrix: sp.csr_matrix           # (k, n)
    lower: np.ndarray               # (k,)
    skipped_pinned_nodes: np.ndarray  # nodes whose planes were dropped: a pinned node has no unknowns to move
    kept: np.ndarray | None = None    # (k,) index of each row's plane in the caller's list

    @property
    def count(self) -> int:
        return self.matrix.shape[0]


def tangent_plane_inequalities(constraints: BoneConstraints,
                               planes: Sequence[tuple[int, np.ndarray, np.ndarray]]) -> LinearInequalities:
    """Map (node, normal, point) half-spaces n · (x_node − p) ≥ 0 through the current frame's
    x = P q + c. The normal need not be unit length (the constraint is the same half-space).

    A plane on a pinned node is dropped and listed in ``skipped_pinned_nodes``: that node
    moves with its bone, so no choice of q can change which side it is on."""
    nodes = np.array([int(node) for node, _, _ in planes], dtype=np.int64)
    normals = np.array([np.asarray(normal, dtype=float) for _, normal, _ in planes]).reshape(-1, 3)
    points = np.array([np.asarray(point, dtype=float) for _, _, point in planes]).reshape(-1, 3)
    if nodes.size and (nodes.min() < 0 or nodes.max() >= constraints.node_count):
        raise ValueError("tangent-plane inequality on a node index out of range")
    movable = constraints.dofs_per_node[nodes] > 0
    nodes, normals, points, skipped = nodes[movable], normals[movable], points[movable], nodes[~movable]

    # Row k of the result is n_kᵀ P_node: the node's three rows of P weighted by the normal.
    node_rows = 3 * nodes[:, None] + np.arange(3)
    weights = sp.csr_matrix((normals.ravel(), (np.repeat(np.arange(len(nodes)), 3), node_rows.ravel())),
                            shape=(len(nodes), 3 * constraints.node_count))
    matrix = (weights @ constraints.P).tocsr()
    anchors = constraints.c.reshape(-1, 3)[nodes]
    lower = np.einsum("ki,ki->k", normals, points - anchors)
    return LinearInequalities(matrix=matrix, lower=lower, skipped_pinned_nodes=skipped, kept=np.flatnonzero(movable))


def skin_plane_inequalities(constraints: BoneConstraints, embedding, planes) -> LinearInequalities:
    """Map contact planes n · (x_v − p) ≥ 0 on embedded skin vertices (a collisions
    ContactPlanes; embedding a skin_embedding.SkinEmbedding) through the current frame's x = P q + c.

    A plane whose vertex lies in a tet of four pinned nodes is dropped (its tet's nodes go in
    ``skipped_pinned_nodes``): no choice of q moves that vertex."""
    vertices = np.asarray(planes.vertex, dtype=np.int64)
    nodes, weights = embedding.nodes[vertices], embedding.weights[vertices]             # (C,4)
    movable = (constraints.dofs_per_node[nodes] > 0).any(axis=1) if len(vertices) else np.zeros(0, bool)
    kept = np.flatnonzero(movable)
    nodes, weights = nodes[kept], weights[kept]
    normals = np.asarray(planes.normal, dtype=float)[kept]
    points = np.asarray(planes.point, dtype=float)[kept]
    # Row c: Σ_k w_ck n_cᵀ (rows 3 node_ck … 3 node_ck + 2 of P).
    columns = (3 * nodes[:, :, None] + np.arange(3)).reshape(len(kept), -1)             # (C,12)
    values = (weights[:, :, None] * normals[:, None, :]).reshape(len(kept), -1)
    rows = np.repeat(np.arange(len(kept)), 12)
    selector = sp.csr_matrix((values.ravel(), (rows, columns.ravel())), shape=(len(kept), 3 * constraints.node_count))
    matrix = (selector @ constraints.P).tocsr()
    anchors = np.einsum("ck,ckd->cd", weights, constraints.c.reshape(-1, 3)[nodes])
    lower = np.einsum("cd,cd->c", normals, points - anchors)
    skipped = np.unique(embedding.nodes[vertices[~movable]]) if len(vertices) else np.zeros(0, np.int64)
    return LinearInequalities(matrix=matrix, lower=lower, skipped_pinned_nodes=skipped, kept=kept)


@dataclass
class IpoptResult:
    x: np.ndarray                   # (3N,)
    q: np.ndarray                   # (n,)
    converged: bool
    reason: str                     # IPOPT's status message
    status: int                     # IPOPT's ApplicationReturnStatus
    iterations: int
    energy: float
    multipliers: np.ndarray         # (k,) one per inequality (IPOPT's sign convention)
    inequalities: LinearInequalities
    force_scale: float
    seconds: float


class _ReducedProblem:
    """cyipopt callbacks for min E(P q + c) subject to A q ≥ lower."""

    def __init__(self, objective: Objective, constraints: BoneConstraints, inequalities: LinearInequalities,
                 initial_reduced_hessian: sp.csc_matrix):
        self._objective, self._constraints = objective, constraints
        jacobian = inequalities.matrix.tocoo()
        self._jacobian_structure = (jacobian.row.astype(np.int64), jacobian.col.astype(np.int64))
        self._jacobian_values = jacobian.data.copy()
        self._inequality_matrix = inequalities.matrix
        self._hessian_indptr, self._hessian_indices = initial_reduced_hessian.indptr, initial_reduced_hessian.indices
        hessian_columns = np.repeat(np.arange(initial_reduced_hessian.shape[1]),
                                    np.diff(initial_reduced_hessian.indptr))
        hessian_rows = initial_reduced_hessian.indices.astype(np.int64)
        self._lower_entries = np.flatnonzero(hessian_rows >= hessian_columns)
        self._hessian_structure = (hessian_rows[self._lower_entries], hessian_columns[self._lower_entries])
        self.iterations = 0

    def objective(self, q):
        return float(self._objective.energy(self._constraints.x_from_q(q)))

    def gradient(self, q):
        return self._constraints.reduce_gradient(self._objective.gradient(self._constraints.x_from_q(q)))

    def constraints(self, q):
        return self._inequality_matrix @ q

    def jacobianstructure(self):
        return self._jacobian_structure

    def jacobian(self, q):
        return self._jacobian_values

    def hessianstructure(self):
        return self._hessian_structure

    def hessian(self, q, multipliers, objective_factor):
        reduced = self._constraints.reduce_hessian(self._objective.hessian(self._constraints.x_from_q(q)))
        if not (np.array_equal(reduced.indptr, self._hessian_indptr)
                and np.array_equal(reduced.indices, self._hessian_indices)):
            raise RuntimeError("the objective's Hessian changed its sparsity pattern during the IPOPT solve")
        return objective_factor * reduced.data[self._lower_entries]

    def intermediate(self, algorithm_mode, iteration, *statistics):
        self.iterations = int(iteration)
        return True


def solve_with_ipopt(objective: Objective, constraints: BoneConstraints, x0: np.ndarray,
                     inequalities: LinearInequalities | Sequence[tuple[int, np.ndarray, np.ndarray]] | None = None,
                     *, skull_transform: np.ndarray | None = None, jaw_transform: np.ndarray | None = None,
                     tolerance: float = DEFAULT_TOLERANCE, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                     force_scale: float | None = None, options: dict | None = None) -> IpoptResult:
    """Minimise the objective over q with IPOPT, starting from x0 projected onto the constraints.

    ``inequalities`` is either a LinearInequalities built for the frame, or a sequence of
    (node, normal, point) tangent planes, mapped through P after moving to the frame.
    force_scale (default: the reduced residual ‖Pᵀ∇E‖_∞ at x0, or 1 if that is zero) scales
    the objective so that ``tolerance`` is relative like the Newton solver's; ``options`` are
    passed to IPOPT last and override the defaults."""
    start_time = time.perf_counter()
    constraints.use_frame(skull_transform, jaw_transform)
    if inequalities is None:
        inequalities = tangent_plane_inequalities(constraints, [])
    elif not isinstance(inequalities, LinearInequalities):
        inequalities = tangent_plane_inequalities(constraints, inequalities)

    q0 = constraints.q_from_x(x0)
    x_start = constraints.x_from_q(q0)
    if force_scale is None:
        initial_residual = float(np.abs(constraints.reduce_gradient(objective.gradient(x_start))).max(initial=0.0))
        force_scale = initial_residual if initial_residual > 0.0 else 1.0
    problem_callbacks = _ReducedProblem(objective, constraints, inequalities,
                                        constraints.reduce_hessian(objective.hessian(x_start)))
    problem = cyipopt.Problem(n=constraints.reduced_size, m=inequalities.count, problem_obj=problem_callbacks,
                              cl=inequalities.lower, cu=np.full(inequalities.count, np.inf))
    settings = {"print_level": 0, "sb": "yes", "tol": tolerance, "max_iter": max_iterations,
                "obj_scaling_factor": 1.0 / force_scale, "nlp_scaling_method": "none",
                "mu_strategy": "adaptive"}
    settings.update(options or {})
    for name, value in settings.items():
        # cyipopt accepts only Python str, int and float (not numpy scalars).
        if isinstance(value, (np.floating, np.integer)):
            value = value.item()
        problem.add_option(name, value)
    q, info = problem.solve(q0)

    status = int(info["status"])
    message = info["status_msg"]
    return IpoptResult(
        x=constraints.x_from_q(q), q=q, converged=status == IPOPT_SOLVED,
        reason=message.decode() if isinstance(message, bytes) else str(message), status=status,
        iterations=problem_callbacks.iterations, energy=float(info["obj_val"]),
        multipliers=np.asarray(info["mult_g"], dtype=float), inequalities=inequalities,
        force_scale=float(force_scale), seconds=time.perf_counter() - start_time)
