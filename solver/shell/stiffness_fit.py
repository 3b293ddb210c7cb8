"""Stiffness reconstruction of paper 001 §4: per-vertex strain and bending stiffness under which
every shape key's quasi-static equilibrium stays within ε_r of its target.

Inner problem, per shape b (§4.2): minimise Ψ_b(x) = actuation toward the target (Eq. 5, no cap:
§3.1 says the fit does not need it) + strain springs (Eq. 7) + bending springs (Eq. 9) with the
*current* directions (x̂ = x). Newton with project-on-demand: the exact Hessian is factorised,
and only when it is not positive definite the PSD-projected one; a sparse Cholesky whose symbolic
analysis is done once per shape and only refilled; an energy backtracking line search. Each
shape starts from its equilibrium at the previous accepted stiffness (warm start).

§4.3's dimensionality reduction: a shape is solved only on the vertices it moves (and two rings
around them); the rest stay at their targets, as do the prescribed eyelid vertices.

Outer problem: L-BFGS on θ = log κ (history 10, steps capped at 0.5 in log space, start at
κ = 1e-4), loss Eq. 16–19 (fit_losses.py), gradient by the adjoint method (Eq. 20): one solve per
shape with the converged Hessian's factor. The backtracking line search accepts a step only when
(1) every vertex of every shape is strictly within ε_r, (2) every Newton solve converged within
its iteration cap and (3) the Armijo condition holds; a failed search resets the history.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import scipy.sparse
from numba import njit

from ..physics.cholesky import NotPositiveDefinite, SparseCholesky
from . import fit_losses
from .energies import DifferenceSprings, actuation_stiffness, bending_springs, strain_springs
from .settings import ShellSettings
from .topology import ShellTopology

FIT_NEWTON_TOLERANCE_SHARE = 1e-4   # of ε_sim (see QuasiStaticProblem)
NEWTON_ITERATION_CAP = 30       # §5.1 check (2): more than this and the step is refused
NEWTON_STEP_TOLERANCE = 1e-7    # face units (1e-5 of ε_r): a Newton step this short ends the solve
MOVING_SHARE_OF_TOLERANCE = 0.01  # a shape moves a vertex when its target is this share of ε_r away
REGION_RINGS = 2                # and solves two rings of neighbours with it (§4.3)
_ARMIJO = 1e-4
_MAX_BACKTRACKS = 12
_MAX_EXTRAPOLATION = 64  # longest multiple of a projected Newton step tried (ShapeSystem.solve)
_MAX_HOLDS = 8          # shapes whose regions one line search may hold (fit_stiffness)
STALL_ITERATIONS = 5    # see fit_stiffness's stopping test
HOLD_SHARE = 0.01       # of the largest barrier sensitivity: what a hold holds
BUCKLE_SHARE = 0.1      # of the largest move of a solve that ran out of iterations: what it holds


@dataclass
class FitResult:
    strain_stiffness: np.ndarray      # (n,)
    bending_stiffness: np.ndarray     # (n,)
    equilibria: np.ndarray            # (K, n, 3) quasi-static positions at the fitted stiffness
    loss: float
    iterations: int                   # accepted L-BFGS steps
    evaluations: int                  # loss evaluations (each solves every shape)
    newton_solves: int                # factorisations over all shapes and evaluations
    seconds: float
    max_deviation: float              # largest ‖x − x^t‖ over shapes and vertices, face units
    stop_reason: str                  # "tolerance", "no feasible descent" (on the barrier) or "iteration limit"
    history: list = field(default_factory=list)   # (iteration, loss, max deviation) per accepted step

    @property
    def converged(self) -> bool:
        return self.stop_reason != "iteration limit"


# --------------------------------------------------------------------------- Hessian assembly

@njit(cache=True)
def _scatter_blocks(elements, weights, blocks, local, base, data):
    """data[...] += w_k w_l blocks[e] for every element pair (k, l) of free vertices."""
    for e in range(elements.shape[0]):
        for k in range(elements.shape[1]):
            if local[elements[e, k]] < 0:
                continue
            for l in range(elements.shape[1]):
                if local[elements[e, l]] < 0:
                    continue
                w = weights[e, k] * weights[e, l]
                for a in range(3):
                    p = base[e, k, l, a]
                    for b in range(3):
                        data[p + b] += w * blocks[e, a, b]


@njit(cache=True)
def _element_adjoint(elements, weights, x, adjoint, rest_length, shape_coefficient, out):
    """Per element c_e/κ̄_e · (Σ_k w_k λ_k) · (‖r‖ − L) r̂: λᵀ ∂g/∂κ̄_e (current directions)."""
    for e in range(elements.shape[0]):
        r0 = r1 = r2 = 0.0
        l0 = l1 = l2 = 0.0
        for k in range(elements.shape[1]):
            v = elements[e, k]
            w = weights[e, k]
            r0 += w * x[v, 0]
            r1 += w * x[v, 1]
            r2 += w * x[v, 2]
            l0 += w * adjoint[v, 0]
            l1 += w * adjoint[v, 1]
            l2 += w * adjoint[v, 2]
        length = np.sqrt(r0 * r0 + r1 * r1 + r2 * r2)
        if length <= 1e-14:
            out[e] = 0.0
            continue
        scale = (length - rest_length[e]) / length
        out[e] = shape_coefficient[e] * scale * (l0 * r0 + l1 * r1 + l2 * r2)


class _LocalSprings:
    """The springs touching a shape's free vertices, with their scatter positions in its matrix."""

    def __init__(self, springs: DifferenceSprings, free_mask: np.ndarray):
        keep = free_mask[springs.elements].any(axis=1)
        self.springs = DifferenceSprings(springs.vertex_count, springs.elements[keep], springs.weights[keep],
                                         springs.rest_length[keep], springs.shape_coefficient[keep])


class ShapeSystem:
    """One shape's quasi-static problem on its free vertices (module docstring)."""

    def __init__(self, problem: "QuasiStaticProblem", target: np.ndarray, free_mask: np.ndarray):
        self.target = np.ascontiguousarray(target, dtype=np.float64)
        self.free = np.flatnonzero(free_mask)
        n = len(target)
        self.local = np.full(n, -1, dtype=np.int64)
        self.local[self.free] = np.arange(len(self.free))
        self.strain = _LocalSprings(problem.strain, free_mask).springs
        self.bending = _LocalSprings(problem.bending, free_mask).springs
        self.actuation = np.repeat(problem.actuation[self.free], 3)
        size = 3 * len(self.free)
        self.size = size
        # Pattern: every 3×3 block between free vertices sharing an element, and the diagonal.
        keys = [np.arange(size, dtype=np.int64) * (size + 1)]
        for springs in (self.strain, self.bending):
            rows_v = self.local[springs.elements]                                # (E, k)
            both = (rows_v[:, :, None] >= 0) & (rows_v[:, None, :] >= 0)
            i = np.broadcast_to(rows_v[:, :, None], both.shape)[both]
            j = np.broadcast_to(rows_v[:, None, :], both.shape)[both]
            a = np.arange(3)
            keys.append(((3 * i[:, None, None] + a[:, None]) * size + 3 * j[:, None, None] + a[None, :]).ravel())
        keys = np.unique(np.concatenate(keys))
        self.indices = (keys % size).astype(np.int64)
        self.indptr = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(np.bincount(keys // size, minlength=size), out=self.indptr[1:])
        self.diagonal = np.searchsorted(keys, np.arange(size, dtype=np.int64) * (size + 1))
        self.bases = []
        for springs in (self.strain, self.bending):
            rows_v = np.maximum(self.local[springs.elements], 0)
            a = np.arange(3)
            row = 3 * rows_v[:, :, None, None] + a[None, None, None, :]                # (E, k, 1, 3)
            col = 3 * rows_v[:, None, :, None]                                         # (E, 1, k, 1)
            base = np.searchsorted(keys, (row * size + col).reshape(-1)).reshape(len(rows_v), rows_v.shape[1],
                                                                                  rows_v.shape[1], 3)
            self.bases.append(np.ascontiguousarray(base, dtype=np.int64))
        pattern = scipy.sparse.csr_matrix((np.ones(len(keys)), self.indices, self.indptr), shape=(size, size))
        self.cholesky = SparseCholesky(pattern) if size else None
        self.accepted = self.target.copy()      # equilibrium at the last accepted stiffness
        self.trial = self.target.copy()
        self._factor_pending = False        # `solve` converged; `adjoint` factorises at its equilibrium
        self.newton_solves = 0

    # ------------------------------------------------------------------ energy and derivatives
    def energy_and_gradient(self, x, strain_k, bend_k):
        offset = x - self.target
        energy = 0.5 * float((self.actuation.reshape(-1, 3) * offset[self.free] ** 2).sum())
        gradient = np.zeros_like(x)
        gradient[self.free] = self.actuation.reshape(-1, 3) * offset[self.free]
        for springs, stiffness in ((self.strain, strain_k), (self.bending, bend_k)):
            e, g, _ = springs.evaluate(x, stiffness)
            energy += e
            gradient += g
        return energy, gradient[self.free].reshape(-1)

    def hessian(self, x, strain_k, bend_k, project: bool) -> scipy.sparse.csc_matrix:
        data = np.zeros(len(self.indices))
        data[self.diagonal] += self.actuation
        for springs, stiffness, base in ((self.strain, strain_k, self.bases[0]),
                                         (self.bending, bend_k, self.bases[1])):
            _, _, blocks = springs.evaluate(x, stiffness, project=project, want_hessian=True)
            _scatter_blocks(springs.elements, springs.weights, blocks, self.local, base, data)
        # The matrix is symmetric, so its CSR arrays are also its CSC arrays (what CHOLMOD takes).
        return scipy.sparse.csc_matrix((data, self.indices, self.indptr), shape=(self.size, self.size))

    def _factorise(self, x, strain_k, bend_k) -> bool:
        """Project on demand: the exact Hessian, and the PSD-projected one only if that fails.
        True when the exact one factorised."""
        self.newton_solves += 1
        try:
            self.cholesky.factorise(self.hessian(x, strain_k, bend_k, project=False))
            return True
        except NotPositiveDefinite:
            self.newton_solves += 1
            self.cholesky.factorise(self.hessian(x, strain_k, bend_k, project=True))
            return False

    # ------------------------------------------------------------------ Newton
    def solve(self, strain_k, bend_k, tolerance: float, iteration_cap: int) -> bool:
        """Equilibrium into self.trial from self.accepted; True when converged within the cap.
        The factor at the equilibrium is made only when `adjoint` asks for it: a line-search
        trial that another shape refuses never needs it."""
        x = self.accepted.copy()
        self._factor_pending = False
        if self.size == 0:
            self.trial = x
            return True
        energy, gradient = self.energy_and_gradient(x, strain_k, bend_k)
        for iteration in range(iteration_cap + 1):
            if np.abs(gradient).max() <= tolerance:
                self.trial = x
                self._factor_pending = True
                return True
            if iteration == iteration_cap:
                break
            # The exact Hessian is tried at every iterate: on a buckling path (compressed springs)
            # it is indefinite for a few iterations, then positive definite again, and from there
            # Newton converges in two or three steps where the projected one creeps on linearly.
            exact = self._factorise(x, strain_k, bend_k)
            step = -self.cholesky.solve(gradient).reshape(-1, 3)
            if np.abs(step).max() <= NEWTON_STEP_TOLERANCE:
                # Closer than the step tolerance: the gradient test alone can be out of reach in
                # floating point (summing thousands of spring forces leaves ~1e-7 of noise on stiff
                # shapes), and the Newton step is the distance to the equilibrium.
                x = x.copy()
                x[self.free] += step
                self.trial = x
                self._factor_pending = True
                return True
            slope = float(gradient @ step.reshape(-1))
            t = 1.0
            while True:
                candidate = x.copy()
                candidate[self.free] += t * step
                new_energy, new_gradient = self.energy_and_gradient(candidate, strain_k, bend_k)
                if new_energy <= energy + _ARMIJO * t * slope or t < 1e-6:
                    break
                t *= 0.5
            # A projected Hessian is stiffer than the energy along a buckling path, so its full
            # step falls short: go on doubling while the energy keeps falling (ICT 4k, shapes
            # that buckle: about a third fewer iterations, each a factorisation saved).
            while not exact and t >= 1.0 and t < _MAX_EXTRAPOLATION:
                further = x.copy()
                further[self.free] += 2.0 * t * step
                further_energy, further_gradient = self.energy_and_gradient(further, strain_k, bend_k)
                if further_energy >= new_energy or further_energy > energy + _ARMIJO * 2.0 * t * slope:
                    break
                t, candidate, new_energy, new_gradient = 2.0 * t, further, further_energy, further_gradient
            x, energy, gradient = candidate, new_energy, new_gradient
        self.trial = x
        return False

    def adjoint(self, loss_gradient_x, strain_k, bend_k):
        """λᵀ ∂g/∂κ for the strain and the bending stiffness ((n,), (n,)) with H λ = −∂L/∂x, H the
        Hessian at the equilibrium `solve` found (Eq. 20), exact unless it is indefinite there."""
        n = len(self.target)
        if self.size == 0:
            return np.zeros(n), np.zeros(n)
        if self._factor_pending:
            self._factorise(self.trial, strain_k, bend_k)
            self._factor_pending = False
        adjoint = np.zeros((n, 3))
        adjoint[self.free] = -self.cholesky.solve(loss_gradient_x[self.free].reshape(-1)).reshape(-1, 3)
        out = []
        for springs in (self.strain, self.bending):
            per_element = np.zeros(len(springs.elements))
            _element_adjoint(springs.elements, springs.weights, self.trial, adjoint, springs.rest_length,
                             springs.shape_coefficient, per_element)
            out.append(springs.averaging.T @ per_element)
        return out[0], out[1]


# --------------------------------------------------------------------------- all shapes and the loss

class QuasiStaticProblem:
    """The loss of Eq. 16 over every shape as a function of θ = (log κ^s, log κ^b), with its
    adjoint gradient."""

    def __init__(self, topology: ShellTopology, targets, prescribed=None, settings: Optional[ShellSettings] = None,
                 newton_tolerance: Optional[float] = None, iteration_cap: int = NEWTON_ITERATION_CAP,
                 reduce_regions: bool = True):
        self.topology = topology
        self.settings = settings or ShellSettings()
        self.targets = np.asarray(targets, dtype=np.float64)
        n = topology.vertex_count
        if self.targets.ndim != 3 or self.targets.shape[1:] != (n, 3):
            raise ValueError(f"targets: expected (K, {n}, 3) shape positions, found {self.targets.shape}")
        prescribed = np.zeros(n, dtype=bool) if prescribed is None else np.asarray(prescribed, dtype=bool)
        # The optimum sits on the barrier, a hair inside ε_r, so the equilibria must be far more
        # precise than ε_sim for the feasibility check to mean anything (quadratic convergence
        # makes that one Newton iteration more).
        self.newton_tolerance = (FIT_NEWTON_TOLERANCE_SHARE * self.settings.newton_tolerance
                                 if newton_tolerance is None else newton_tolerance)
        self.iteration_cap = iteration_cap
        self.strain = strain_springs(topology)
        self.bending = bending_springs(topology)
        self.actuation = actuation_stiffness(topology, self.settings.max_pressure, self.settings.reproducibility)
        adjacency = scipy.sparse.csr_matrix((np.ones(2 * len(topology.edges)),
                                             (topology.edges.ravel(), topology.edges[:, ::-1].ravel())), shape=(n, n))
        self.shapes = []
        for target in self.targets:
            if reduce_regions:
                moved = np.linalg.norm(target - topology.rest, axis=1) > (MOVING_SHARE_OF_TOLERANCE
                                                                           * self.settings.reproducibility)
                for _ in range(REGION_RINGS):
                    moved = moved | (adjacency @ moved.astype(np.float64) > 0)
            else:
                moved = np.ones(n, dtype=bool)
            self.shapes.append(ShapeSystem(self, target, moved & ~prescribed))
        self.solve_order = list(range(len(self.shapes)))
        self.evaluations = 0
        self.shape_gradients = self._trial_shape_gradients = np.zeros((2 * n, 0))

    @property
    def newton_solves(self) -> int:
        return sum(shape.newton_solves for shape in self.shapes)

    def stiffness(self, theta):
        n = self.topology.vertex_count
        return np.exp(theta[:n]), np.exp(theta[n:])

    def evaluate(self, theta, want_gradient: bool = True):
        """(loss, gradient in θ or None, status): status is "ok", "infeasible" (a vertex at or past
        ε_r) or "effort" (a Newton solve hit its cap); the loss is inf unless "ok". Equilibria go
        to each shape's `trial`; `accept()` makes them the next warm start."""
        self.evaluations += 1
        s = self.settings
        strain_k, bend_k = self.stiffness(theta)
        # Every shape must pass before any adjoint is worth solving, and a refused trial step
        # usually fails on the shape that failed the last one: those are solved first.
        barrier_values = np.zeros(len(self.shapes))
        barrier_gradients = [None] * len(self.shapes)
        for index in list(self.solve_order):
            shape = self.shapes[index]
            self.failed_shape = shape
            status = "ok"
            if not shape.solve(strain_k, bend_k, self.newton_tolerance, self.iteration_cap):
                status = "effort"
            else:
                barrier_values[index], barrier_gradients[index] = fit_losses.barrier(
                    shape.trial, shape.target, s.reproducibility, s.barrier)
                if not np.isfinite(barrier_values[index]):
                    status = "infeasible"
            if status != "ok":
                self.solve_order.remove(index)
                self.solve_order.insert(0, index)
                return np.inf, None, status
        loss = float(barrier_values.sum())
        d_strain = np.zeros_like(strain_k)
        d_bend = np.zeros_like(bend_k)
        shape_gradients = []
        if want_gradient:
            for shape, gradient_x in zip(self.shapes, barrier_gradients):
                a, b = shape.adjoint(gradient_x, strain_k, bend_k)
                d_strain += a
                d_bend += b
                # The shape's barrier gradient in log κ: its Gauss–Newton curvature g gᵀ/λ (for
                # φ = −λ log(1 − u), φ'' = φ'²/λ + λu''/(1 − u)) preconditions L-BFGS.
                shape_gradients.append(np.concatenate([strain_k * a, bend_k * b]))
        topology = self.topology
        for stiffness, target, derivative in ((strain_k, s.target_strain_stiffness, d_strain),
                                              (bend_k, s.target_bending_stiffness, d_bend)):
            value, gradient = fit_losses.target_stiffness(stiffness, topology.vertex_area, target, s.target_scaling)
            smooth, smooth_gradient = fit_losses.smoothness(stiffness, topology.edges, topology.edge_rest_length,
                                                            s.smoothness)
            loss += value + smooth
            derivative += gradient + smooth_gradient
        if not want_gradient:
            return loss, None, "ok"
        self._trial_shape_gradients = (np.array(shape_gradients).T if shape_gradients
                                       else np.zeros((2 * len(strain_k), 0)))
        # Chain rule into log space: dL/dθ = κ dL/dκ.
        return loss, np.concatenate([strain_k * d_strain, bend_k * d_bend]), "ok"

    def accept(self) -> None:
        for shape in self.shapes:
            shape.accepted = shape.trial
        self.shape_gradients = self._trial_shape_gradients

    def equilibria(self) -> np.ndarray:
        return np.stack([shape.accepted for shape in self.shapes])

    def max_deviation(self) -> float:
        return max((fit_losses.max_deviation(shape.accepted, shape.target) for shape in self.shapes), default=0.0)


# --------------------------------------------------------------------------- L-BFGS

class _InitialInverse:
    """(D + G Gᵀ/λ)⁻¹ by the Woodbury identity: D diagonal, G (2n × K) one column per shape."""

    def __init__(self, diagonal, columns, weight):
        self.inverse_diagonal = 1.0 / diagonal
        self.columns = columns
        scaled = columns * self.inverse_diagonal[:, None]
        self.scaled = scaled
        self.small = weight * np.eye(columns.shape[1]) + columns.T @ scaled

    def __call__(self, vector):
        result = self.inverse_diagonal * vector
        if self.columns.shape[1]:
            result -= self.scaled @ np.linalg.solve(self.small, self.scaled.T @ vector)
        return result


def _two_loop(gradient, history, initial):
    """−H·g of L-BFGS from the (s, y) pairs and the initial inverse Hessian `initial` (a callable)."""
    q = gradient.copy()
    alphas = []
    for s, y in reversed(history):
        rho = 1.0 / float(y @ s)
        alpha = rho * float(s @ q)
        q -= alpha * y
        alphas.append((rho, alpha))
    q = initial(q)
    for (s, y), (rho, alpha) in zip(history, reversed(alphas)):
        beta = rho * float(y @ q)
        q += (alpha - beta) * s
    return -q


def fit_stiffness(topology: ShellTopology, targets, prescribed=None, settings: Optional[ShellSettings] = None,
                  max_iterations: int = 300, newton_tolerance: Optional[float] = None,
                  reduce_regions: bool = True, log=None) -> FitResult:
    """Fit per-vertex strain and bending stiffness to the shapes' targets ((K, n, 3) face units)."""
    started = time.perf_counter()
    settings = settings or ShellSettings()
    problem = QuasiStaticProblem(topology, targets, prescribed, settings, newton_tolerance,
                                 reduce_regions=reduce_regions)
    n = topology.vertex_count
    lowest = np.log(settings.initial_stiffness)
    theta = np.full(2 * n, lowest)
    loss, gradient, status = problem.evaluate(theta)
    if status != "ok":
        raise RuntimeError(f"stiffness fit: the initial stiffness {settings.initial_stiffness} does not reproduce the "
                           f"shapes ({status}); the targets may be degenerate")
    problem.accept()
    history, log_rows = [], [(0, loss, problem.max_deviation())]
    iterations, stop_reason = 0, "iteration limit"
    cap = settings.log_step_cap
    area = np.concatenate([topology.vertex_area, topology.vertex_area]) * settings.target_scaling
    while iterations < max_iterations:
        # Initial inverse Hessian: the Gauss–Newton curvature in log space of the target term
        # (A λ κ² per vertex) and of each shape's barrier (rank one, g_b g_bᵀ/λ_r). In log space
        # a vertex's gradient scales with its κ, so a scalar initial Hessian would leave the
        # softest vertices (κ = 1e-4 at the start) behind; and without the barrier's share the
        # steps stay uniform and stall at the first vertex that reaches ε_r.
        kappa = np.exp(theta)
        # The diagonal is raised to |g_i|/cap where A κ² is smaller, so that its own step in no
        # component exceeds the cap: in log space that curvature vanishes with κ, and one soft
        # vertex's enormous step would otherwise set the scale of every other.
        diagonal = np.maximum(area * kappa * kappa, np.abs(gradient) / cap)
        initial = _InitialInverse(diagonal, problem.shape_gradients, settings.barrier)
        direction = _two_loop(gradient, history, initial)
        if float(direction @ gradient) >= 0:        # not a descent direction: forget the curvature
            history.clear()
            direction = -initial(gradient)
        # No stiffness goes below the start (1e-4, already next to nothing): a vertex whose
        # barrier share outweighs its target pull would otherwise soften without end and, the
        # largest component, set the pace of every other.
        direction[(theta <= lowest) & (direction < 0)] = 0.0
        # The cap on the step (§5.1), per stiffness: scaling the whole step down to its largest
        # component would freeze every vertex the shapes leave free whenever a few components
        # of the quasi-Newton step are large.
        direction = np.clip(direction, -cap, cap)
        slope = float(direction @ gradient)
        if slope >= 0:
            history.clear()
            direction = np.clip(-initial(gradient), -cap, cap)
            slope = float(direction @ gradient)
        t, accepted, holds = 1.0, False, 0
        for _ in range(_MAX_BACKTRACKS + _MAX_HOLDS):
            trial_theta = np.maximum(theta + t * direction, lowest)
            trial_loss, trial_gradient, status = problem.evaluate(trial_theta)
            if status == "ok" and trial_loss <= loss + _ARMIJO * float((trial_theta - theta) @ gradient):
                accepted = True
                break
            if status in ("infeasible", "effort") and holds < _MAX_HOLDS:
                # Hold the stiffening of the shape that failed and retry the same length: the
                # shapes share one step length, and backtracking alone would slow every vertex to
                # the pace of the one region in trouble. A shape that left ε_r: the stiffnesses
                # whose rise pushes it toward ε_r by a noticeable share (its barrier gradient at
                # the accepted stiffness). A shape whose Newton solve ran out of iterations (it
                # buckles: stiffer springs under compression against its actuation): the
                # vertices its unfinished solve moved by a noticeable share — the buckle, not the
                # whole region, which on ICT would freeze the nose with the cheeks.
                failed = problem.failed_shape
                sensitivity = problem.shape_gradients[:, problem.shapes.index(failed)]
                moved = np.linalg.norm(failed.trial - failed.accepted, axis=1)
                held = np.zeros(2 * n, dtype=bool)
                if status == "infeasible" and sensitivity.max(initial=0.0) > 0:
                    held = sensitivity > HOLD_SHARE * sensitivity.max()
                elif status == "effort" and moved.max(initial=0.0) > 0:
                    held[:n] = held[n:] = moved > BUCKLE_SHARE * moved.max()
                else:
                    held[failed.free] = held[n + failed.free] = True
                direction[held] = np.minimum(direction[held], 0.0)
                holds += 1
                continue
            t *= 0.5
        if not accepted:
            if not history:         # even a preconditioned gradient step fails: a (numerical) optimum
                stop_reason = "no feasible descent"
                break
            history.clear()
            continue
        problem.accept()
        s_vec, y_vec = trial_theta - theta, trial_gradient - gradient
        if float(s_vec @ y_vec) > 1e-12 * float(s_vec @ s_vec):
            history.append((s_vec, y_vec))
            del history[:-settings.lbfgs_history]
        step = float(np.abs(s_vec).max())
        theta, loss, gradient = trial_theta, trial_loss, trial_gradient
        iterations += 1
        log_rows.append((iterations, loss, problem.max_deviation()))
        if log is not None:
            log(f"stiffness fit: iteration {iterations} loss {loss:.6g} step {t:g} "
                f"max deviation {log_rows[-1][2]:.4g}")
        # Converged when a full step changes no stiffness by more than ε_opt relatively (a step
        # in log κ); or when the barrier holds (some shape past half of ε_r: before that the
        # loss creeps down the target term at the capped step) and the last STALL_ITERATIONS
        # steps together lowered the loss by less than ε_opt relatively.
        stalled = (len(log_rows) > STALL_ITERATIONS and log_rows[-1][2] > 0.5 * settings.reproducibility
                   and log_rows[-1 - STALL_ITERATIONS][1] - loss < settings.optimisation_tolerance * abs(loss))
        if (t == 1.0 and step < settings.optimisation_tolerance) or stalled:
            stop_reason = "tolerance"
            break
    strain_k, bend_k = problem.stiffness(theta)
    return FitResult(strain_stiffness=strain_k, bending_stiffness=bend_k, equilibria=problem.equilibria(),
                     loss=loss, iterations=iterations, evaluations=problem.evaluations,
                     newton_solves=problem.newton_solves, seconds=time.perf_counter() - started,
                     max_deviation=problem.max_deviation(), stop_reason=stop_reason, history=log_rows)
