"""Fit one shape key in full space with IPOPT, as Phace does (paper 000 §5, Eq. 4).

The reduced method (fit.py) eliminates the equilibrium by Newton solves; here it stays a
constraint and the node positions are unknowns next to the activations and the jaw:

    min over z = (u, a, β):  f(z) = f_fit(B x) + R_act(a; γ) + R_sparse(a)
    subject to               D r(z) = 0,   r = P(b)ᵀ ∇E(x, a)            (static equilibrium)
                             every principal minor of S(a_i) − μI ≥ 0   (each active tet i)
    with  x = P(b) q + c(b),  q = q_rest + ℓ u,  b = JAW_SCALE ∘ β

f_fit, R_act, R_sparse, the weights and γ are ShapeFitter's own (fit.py), so both methods
minimise the same function. q are the reduced node coordinates of the bone constraints
(free nodes 3, sliding nodes 2, pinned nodes 0), measured from the neutral equilibrium in
ℓ = 1 mm; the jaw is scaled as in fit.py, so every unknown is of order one. E has exactly the
terms of the quasi-static forward solve (elasticity with its volume floor, and gravity;
StaticFace has no wind or inertia), so r = 0 is the equilibrium `StaticFace.solve` finds.

Derivatives. With H = ∇²E, K = Pᵀ H P (exact, not PSD-projected: it is a Jacobian, not a
model of curvature), C = ∂∇E/∂a (activation_derivatives.ActivationCoupling) and ẋ_k, Ṗ_k the
derivatives of x and P in b_k at fixed q (central differences of the closed-form bone
transform, as in equilibrium.py):

    ∂r/∂u = ℓ K,   ∂r/∂a = Pᵀ C,   ∂r/∂β_k = JAW_SCALE_k (Ṗ_kᵀ ∇E + Pᵀ H ẋ_k).

Hessian of the Lagrangian: Gauss–Newton, as in Phace. Third derivatives of E are dropped, so
the equilibrium rows contribute nothing (the second derivatives of r in b that come from the
bone motion, Ṗᵀ H ẋ and the like, are dropped with them). What remains is

    ∇²L ≈ σ [ Jₓᵀ Bᵀ W̃ B Jₓ + ∇²R_act + blockdiag ∇²R_sparse + δ I_(a,β) ] + [Σ λ_g ∇²g_PD]₊
    Jₓ = ∂x/∂(u, a, β) = [ℓ P, 0, ẋ diag(JAW_SCALE)],

W̃ the per-vertex 3×3 weights ω_v (I + ρ n_v n_vᵀ) of f_fit (exact in u, where f_fit is
quadratic), stored on the elastic Hessian's pattern (a skin vertex couples only its tet's
nodes), so Pᵀ Bᵀ W̃ B P has K's pattern. ∇²R_act is its constant diagonal. R_sparse's exact
Hessian, per muscle a diagonal minus a rank-one term coupling all its tets, is dense over a
muscle; its per-tet 6×6 diagonal blocks are kept: principal blocks of a PSD matrix, hence
PSD, and sparse. [·]₊ is the PSD part, per tet, of the curvature of the positive-definiteness
constraints: their negative curvature would make IPOPT shift the whole Hessian (inertia
correction) on every iteration a tet sits on the boundary.

δ is a Levenberg–Marquardt damping of the activations and the jaw, as ShapeFitter's. Gauss–
Newton leaves out λᵀ∇²r, which in the directions the regularisers barely constrain is larger
than what is kept; undamped, IPOPT's full steps overshoot there (up to 5 in activation units
on browInnerUp) into regions where the linearised equilibrium is far off, and its filter line
search answers with long runs of tiny steps (300 iterations and more for one shape on the
3,000-tet demo head). δ shrinks after a whole step that kept the equilibrium and lowered f,
and grows after a step that IPOPT had to cut below half or that left the equilibrium more than
0.1 mm off (`FullSpaceProblem.intermediate`). For the same reason IPOPT's second-order
corrections are off: they restore the equilibrium along the same model, and produced cycles
of alternating objective increases and decreases.

Positive definiteness. ShapeFitter keeps every S(a) with eigenvalues ≥ μ = MIN_ACTIVATION_-
EIGENVALUE, and its fits end on that boundary, so the full-space problem has the same feasible
set. Box bounds cannot express it without excluding real activations (Gershgorin would need
S_ii ≥ μ + Σ|S_ij|, while a contracted oblique fibre has off-diagonals of ~0.5), so it is the
exact characterisation of S − μI ⪰ 0: all its principal minors ≥ 0 — the three diagonal
entries (bounds a_xx, a_yy, a_zz ≥ μ, which IPOPT never violates), the three 2×2 minors and
the determinant (inequality constraints, 4 per tet); together they also bound the
off-diagonals. The leading minors alone (Sylvester) are not enough on the boundary: with
a_xx at its bound they admit indefinite S, and a first version that used them ended a 15k-tet
fit with an eigenvalue of 0.02.

Scaling. The equilibrium rows are forces in N, on nodes whose stiffness K_ii varies a
hundredfold across the mesh (2–300 N/m on the demo head), so each row is divided by ℓ K_ii at
the neutral equilibrium (D = diag(ℓ K_rest)⁻¹): the scaled residual of a row is about the
displacement, in mm, that would balance it, and the u-block of the Jacobian has a unit
diagonal. The objective is scaled by 1 / f(z₀), so IPOPT's tolerances are relative
to how far the shape is from the neutral face.

Local–global (paper §5). γ is fixed in each IPOPT solve (the global step); between solves the
local step sets γ = ActivationPrior.best_contractions(a) (Brent on the sextic), and the rounds
stop when one lowers f by less than FitSettings.relative_decrease. Like ShapeFitter's outer
loop, a round also stops when it stalls: near the optimum damped Gauss–Newton converges only
linearly, so a round ends when the best iterate within 1e-3 mm of equilibrium has improved by
less than 1 % over 10 iterations, and that iterate is the round's result. Later rounds
warm-start IPOPT from the previous one. The fit is reported at the *true* equilibrium of the
fitted (a, b), re-solved by Newton from IPOPT's positions, since IPOPT satisfies r = 0 only
to its tolerance.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import cyipopt
import numpy as np
import scipy.sparse as sp

from solver.geometry import vertex_normals
from solver.physics.activation import NEUTRAL_ACTIVATION, symmetric_from_vector, vector_from_symmetric
from solver.physics.activation_derivatives import ActivationCoupling
from solver.physics.bones import bone_transforms
from solver.physics.constraints import BoneConstraints
from solver.physics.frame_objective import tissue_volume_floor
from solver.inverse.equilibrium import JAW_DIFFERENCE_STEP, JAW_PARAMETER_COUNT
from solver.inverse.fit import (JAW_SCALE, MILLIMETRE, MIN_ACTIVATION_EIGENVALUE, NEUTRAL_SHAPE_MOTION, ShapeFit, ShapeFitter,
                  face_errors_mm)
from solver.inverse.regularizers import ACTIVATION_METRIC, neutral_activations

LENGTH_UNIT = MILLIMETRE            # ℓ: node displacements are unknowns in mm
DAMPING_DECREASE, DAMPING_INCREASE = 3.0, 4.0
# The principal minors of S − μI constrained per tet besides its diagonal (a bound), and the
# activation entries (xx, yy, zz, yz, xz, xy = 0…5) each depends on.
MINOR_ENTRIES = (np.array([0, 1, 5]), np.array([1, 2, 3]), np.array([0, 2, 4]), np.arange(6))
MINORS_PER_TET = len(MINOR_ENTRIES)
# (row, column) pairs of a 6×6 per-tet block's lower triangle, row-major.
_BLOCK_ROWS, _BLOCK_COLUMNS = np.tril_indices(6)


@dataclass
class FullSpaceSettings:
    max_rounds: int = 8                  # local–global rounds (one IPOPT solve each)
    max_iterations: int = 200            # IPOPT iterations per round
    # On the scaled problem (f(z₀) = 1, equilibrium rows in mm of displacement): a relative
    # optimality of 1e-6 and an equilibrium off by at most 1e-6 mm per row.
    tolerance: float = 1e-6
    constraint_tolerance: float = 1e-6
    # Damping δ of the (a, β) block, in units of f (mm²) per unit² of the scaled unknowns like
    # ShapeFitter's, and the equilibrium residual (mm) after a whole step below which δ shrinks
    # and above which it grows.
    initial_damping: float = 1e-2
    damping_range: tuple = (1e-6, 1e2)
    step_violation: tuple = (1e-3, 1e-1)
    stall_feasibility: float = 1e-3      # mm: iterates this close to equilibrium count as results
    stall_decrease: float = 1e-2
    stall_iterations: int = 10
    warm_start: bool = True
    print_level: int = 0
    ipopt_options: dict = field(default_factory=dict)    # passed to IPOPT last, overriding the above


@dataclass
class FullSpaceFit(ShapeFit):
    ipopt_iterations: list = field(default_factory=list)    # per round
    ipopt_status: list = field(default_factory=list)        # IPOPT's message per round
    equilibrium_gap_mm: float = 0.0      # max skin distance between IPOPT's x and the re-solved equilibrium
    ipopt_seconds: float = 0.0


class _Point:
    """Everything about one z, computed lazily in three levels: the state (x, ∇E) for f and r;
    the jaw motion (ẋ, Ṗᵀ∇E) for ∇f; the linearisation (K, C, ∂r/∂b) for the Jacobian."""

    def __init__(self, z, activations, jaw, transforms, P, c, q, x, material, gradient):
        self.z, self.activations, self.jaw, self.transforms = z, activations, jaw, transforms
        self.P, self.c, self.q, self.x, self.material, self.gradient = P, c, q, x, material, gradient
        self.jaw_motion = None              # (3N, 5) ẋ
        self.jaw_force_change = None        # (n, 5) Ṗᵀ ∇E
        self.hessian = None                 # (3N × 3N) H
        self.reduced_hessian = None         # K (CSC, fixed pattern)
        self.coupling = None


class FullSpaceProblem:
    """The NLP of one shape key for fixed contractions γ, as cyipopt callbacks.

    Also usable on its own: `objective`, `gradient`, `constraints`, and `jacobian_matrix` /
    `hessian_matrix` (scipy sparse, assembled from the IPOPT structures) at any z."""

    def __init__(self, fitter: "FullSpaceFitter", target, normals, contractions):
        shape_fitter = fitter.shape_fitter
        self.shape_fitter = shape_fitter
        self.target = np.asarray(target, dtype=np.float64)
        self.normals = np.asarray(normals, dtype=np.float64)
        self.contractions = np.asarray(contractions, dtype=np.float64)
        self.layout = layout = fitter.layout
        self.size, self.constraint_count = layout.size, layout.constraint_count
        self.fit_hessian = layout.fit_hessian_in_pattern(self.normals)       # Bᵀ W̃ B on H's pattern
        # The tets of the muscles held at rest (ShapeFitter.held_tets): fixed at S = I by their bounds.
        self.held_tets = np.zeros(layout.active_count, dtype=bool)
        self._point: _Point | None = None
        self.configure(FullSpaceSettings(), 1.0)
        self._iterate = None
        self.reset_progress()

    def configure(self, settings: FullSpaceSettings, objective_scale: float = 1.0):
        """Damping and stall test from the settings; f(z₀) as the objective's scale."""
        self.objective_scale = objective_scale
        self.damping = settings.initial_damping
        self.damping_range = settings.damping_range
        self.violation_range = settings.step_violation
        self.stall_feasibility = settings.stall_feasibility
        self.stall_decrease, self.stall_iterations = settings.stall_decrease, settings.stall_iterations
        self._previous_objective = np.inf

    def reset_progress(self):
        """Forget the best iterate and the iteration count (before each IPOPT solve)."""
        self.best_value, self.best_z, self.best_values, self.iterations = np.inf, None, [], 0

    def best_of(self, solution):
        """IPOPT's solution, or the best near-equilibrium iterate seen if that is better; None
        if neither is within stall_feasibility of equilibrium."""
        candidates = [self.best_z] if self.best_z is not None else []
        if np.abs(self.constraints(solution)[:self.layout.reduced_size]).max() <= self.stall_feasibility:
            candidates.append(np.array(solution))
        return min(candidates, key=self.objective) if candidates else None

    def positions(self, z) -> np.ndarray:
        """x (3N,) of z."""
        return self._at(z).x.copy()

    # ------------------------------------------------------------------ points

    def start_point(self) -> np.ndarray:
        """The neutral equilibrium: u = 0, a = I, β = 0."""
        z = np.zeros(self.size)
        z[self.layout.activation_slice] = neutral_activations(self.layout.active_count).ravel()
        return z

    def split(self, z):
        """(u (n,) in mm, activations (A, 6), jaw parameters b (5,) in rad and m) of z."""
        layout = self.layout
        return (z[layout.displacement_slice], z[layout.activation_slice].reshape(-1, 6),
                z[layout.jaw_slice] * JAW_SCALE)

    def _at(self, z) -> _Point:
        z = np.asarray(z, dtype=np.float64)
        if self._point is not None and np.array_equal(self._point.z, z):
            return self._point
        layout = self.layout
        u, activations, jaw = self.split(z)
        transforms = layout.bone_transforms(jaw)
        P, c = layout.constraints.reduction(*transforms)
        q = layout.rest_q + LENGTH_UNIT * u
        x = P @ q + c
        material = layout.face.material(activations)
        gradient = layout.tissue_gradient(x, material) - layout.constant_force
        self._point = _Point(z.copy(), activations.copy(), jaw, transforms, P, c, q, x, material, gradient)
        return self._point

    def _with_jaw_motion(self, point: _Point) -> _Point:
        if point.jaw_motion is None:
            layout = self.layout
            point.jaw_motion = np.empty((point.x.size, JAW_PARAMETER_COUNT))
            point.jaw_force_change = np.empty((layout.reduced_size, JAW_PARAMETER_COUNT))
            for k in range(JAW_PARAMETER_COUNT):
                step = np.zeros(JAW_PARAMETER_COUNT)
                step[k] = JAW_DIFFERENCE_STEP
                P_plus, c_plus = layout.constraints.reduction(*layout.bone_transforms(point.jaw + step))
                P_minus, c_minus = layout.constraints.reduction(*layout.bone_transforms(point.jaw - step))
                dP = (P_plus - P_minus) / (2.0 * JAW_DIFFERENCE_STEP)
                point.jaw_motion[:, k] = dP @ point.q + (c_plus - c_minus) / (2.0 * JAW_DIFFERENCE_STEP)
                point.jaw_force_change[:, k] = dP.T @ point.gradient
            layout.constraints.reduction(*point.transforms)     # reduce_hessian reads the current frame
        return point

    def _linearised(self, point: _Point) -> _Point:
        self._with_jaw_motion(point)
        if point.reduced_hessian is None:
            layout = self.layout
            layout.constraints.reduction(*point.transforms)
            point.hessian = layout.tissue_hessian(point.x, point.material)
            point.reduced_hessian = layout.reduce(point.hessian)
            point.coupling = ActivationCoupling(layout.elasticity, point.material, point.x)
            if not np.array_equal(point.coupling.active_tets, layout.face.active_tets):
                raise ValueError("the material's active tets differ from the model's muscle tets")
        return point

    # ------------------------------------------------------------------ objective

    def _skin_residual(self, point):
        skin = (self.layout.embedding @ point.x).reshape(-1, 3)
        return self.shape_fitter._fit_residual(skin, self.target, self.normals)

    def objective(self, z) -> float:
        point = self._at(z)
        _, fit_value = self._skin_residual(point)
        return fit_value + self.shape_fitter._regularisation(point.activations, self.contractions)

    def gradient(self, z) -> np.ndarray:
        point = self._with_jaw_motion(self._at(z))
        layout, fitter = self.layout, self.shape_fitter
        weighted, _ = self._skin_residual(point)
        node_force = layout.embedding.T @ weighted.ravel()            # ∇ₓ f_fit
        regulariser = (fitter.prior.gradient(point.activations, self.contractions)
                       + fitter.sparsity.gradient(point.activations))
        return np.concatenate([LENGTH_UNIT * (point.P.T @ node_force), regulariser.ravel(),
                               JAW_SCALE * (point.jaw_motion.T @ node_force)])

    # ------------------------------------------------------------------ constraints

    def constraints(self, z) -> np.ndarray:
        point = self._at(z)
        layout = self.layout
        equilibrium = layout.row_scale * (point.P.T @ point.gradient)
        return np.concatenate([equilibrium, _shifted_minors(point.activations).ravel()])

    def constraint_bounds(self):
        layout = self.layout
        lower = np.zeros(self.constraint_count)
        upper = np.concatenate([np.zeros(layout.reduced_size), np.full(MINORS_PER_TET * layout.active_count, np.inf)])
        return lower, upper

    def variable_bounds(self):
        layout = self.layout
        lower, upper = np.full(self.size, -np.inf), np.full(self.size, np.inf)
        diagonal = layout.activation_slice.start + 6 * np.arange(layout.active_count)[:, None] + np.arange(3)
        lower[diagonal.ravel()] = MIN_ACTIVATION_EIGENVALUE
        held = (layout.activation_slice.start + 6 * np.flatnonzero(self.held_tets)[:, None] + np.arange(6)).ravel()
        lower[held] = upper[held] = np.tile(NEUTRAL_ACTIVATION, int(self.held_tets.sum()))
        return lower, upper

    def jacobianstructure(self):
        return self.layout.jacobian_rows, self.layout.jacobian_columns

    def jacobian(self, z) -> np.ndarray:
        point = self._linearised(self._at(z))
        # IPOPT evaluates the Jacobian at each accepted iterate before reporting it to
        # `intermediate` (the Hessian comes after), so this is the iterate being reported.
        self._iterate = point.z
        layout = self.layout
        reduced = point.reduced_hessian
        layout.check_reduced_pattern(reduced)
        stiffness = LENGTH_UNIT * layout.row_scale[layout.stiffness_rows] * reduced.data
        activation = layout.row_scale[layout.coupling_rows] * layout.coupling_values(point.coupling)
        # ∂r/∂b_k = Ṗ_kᵀ ∇E + Pᵀ H ẋ_k
        jaw = point.jaw_force_change + point.P.T @ (point.hessian @ point.jaw_motion)
        jaw = (layout.row_scale[:, None] * jaw * JAW_SCALE).ravel()
        return np.concatenate([stiffness, activation, jaw, _shifted_minor_gradients(point.activations).ravel()])

    def jacobian_matrix(self, z) -> sp.csr_matrix:
        rows, columns = self.jacobianstructure()
        return sp.csr_matrix((self.jacobian(z), (rows, columns)), shape=(self.constraint_count, self.size))

    # ------------------------------------------------------------------ Hessian of the Lagrangian

    def hessianstructure(self):
        return self.layout.hessian_rows, self.layout.hessian_columns

    def hessian(self, z, multipliers, objective_factor) -> np.ndarray:
        point = self._with_jaw_motion(self._at(z))
        layout, fitter = self.layout, self.shape_fitter
        layout.constraints.reduction(*point.transforms)
        fit_reduced = layout.reduce(self.fit_hessian)
        layout.check_reduced_pattern(fit_reduced)
        displacement = LENGTH_UNIT ** 2 * fit_reduced.data[layout.lower_entries]
        fit_jaw_motion = self.fit_hessian @ point.jaw_motion                        # (3N, 5) G ẋ
        jaw_displacement = (LENGTH_UNIT * JAW_SCALE[:, None]) * (point.P.T @ fit_jaw_motion).T     # (5, n)
        jaw_jaw = JAW_SCALE[:, None] * (point.jaw_motion.T @ fit_jaw_motion) * JAW_SCALE[None, :]
        jaw_jaw = jaw_jaw[np.tril_indices(JAW_PARAMETER_COUNT)]

        blocks = objective_factor * _sparsity_blocks(fitter.sparsity, point.activations)
        blocks[:, np.arange(6), np.arange(6)] += objective_factor * (fitter.prior.hessian_diagonal() + self.damping)
        jaw_jaw[np.cumsum(np.arange(1, JAW_PARAMETER_COUNT + 1)) - 1] += self.damping
        minor_multipliers = np.reshape(multipliers[layout.reduced_size:], (-1, MINORS_PER_TET))
        blocks += _shifted_minor_curvature(point.activations, minor_multipliers)
        return np.concatenate([objective_factor * displacement, blocks[:, _BLOCK_ROWS, _BLOCK_COLUMNS].ravel(),
                               objective_factor * jaw_displacement.ravel(), objective_factor * jaw_jaw])

    def hessian_matrix(self, z, multipliers=None, objective_factor=1.0) -> sp.csr_matrix:
        """The full symmetric matrix (both triangles) of the Lagrangian Hessian."""
        multipliers = np.zeros(self.constraint_count) if multipliers is None else multipliers
        rows, columns = self.hessianstructure()
        lower = sp.csr_matrix((self.hessian(z, multipliers, objective_factor), (rows, columns)),
                              shape=(self.size, self.size))
        return (lower + sp.tril(lower, k=-1).T).tocsr()

    def intermediate(self, algorithm_mode, iteration, objective_value, primal_infeasibility, dual_infeasibility,
                     barrier, step_norm, regularisation, dual_step, primal_step, line_search_trials):
        """IPOPT's report after each iteration: adapt δ, keep the best iterate, stop on a stall."""
        self.iterations = int(iteration)
        if iteration > 0:
            if primal_step < 0.5 or primal_infeasibility > self.violation_range[1]:
                self.damping = min(self.damping * DAMPING_INCREASE, self.damping_range[1])
            elif (primal_step >= 0.99 and primal_infeasibility <= self.violation_range[0]
                  and objective_value < self._previous_objective):
                self.damping = max(self.damping / DAMPING_DECREASE, self.damping_range[0])
        self._previous_objective = objective_value
        if algorithm_mode != 0 or self._iterate is None:      # the restoration phase has its own objective
            return True
        near_equilibrium = primal_infeasibility <= self.stall_feasibility
        if near_equilibrium and objective_value < self.best_value:
            self.best_value, self.best_z = objective_value, self._iterate
        self.best_values.append(self.best_value)
        if not near_equilibrium or len(self.best_values) <= self.stall_iterations:
            return True             # away from equilibrium IPOPT is still at work
        earlier = self.best_values[-1 - self.stall_iterations]
        return not (np.isfinite(earlier) and earlier - self.best_value < self.stall_decrease * earlier)


def _with_eigenvalues_at_least(activations, smallest) -> np.ndarray:
    """The activations with each S's eigenvalues raised to `smallest` where below: IPOPT meets
    the minor constraints only to its tolerance (1e-6 for a converged round, 1e-3 for a stalled
    one), ShapeFitter's results meet the bound exactly."""
    eigenvalues, eigenvectors = np.linalg.eigh(symmetric_from_vector(activations))
    below = eigenvalues.min(axis=1) < smallest
    result = np.array(activations, dtype=np.float64)
    clamped = np.einsum("aik,ak,ajk->aij", eigenvectors[below], np.maximum(eigenvalues[below], smallest),
                        eigenvectors[below])
    result[below] = vector_from_symmetric(clamped)
    return result


def _sparsity_blocks(sparsity, activations) -> np.ndarray:
    """(A, 6, 6) per-tet diagonal blocks of ∇²R_sparse = Σ_m [W_m/ρ_m − (W_m d)(W_m d)ᵀ/ρ_m³]
    (regularizers.GroupSparsity): principal blocks of a PSD matrix, hence PSD."""
    offset, norms = sparsity._norms(activations)
    weighted_offset = ACTIVATION_METRIC * offset
    diagonal = sparsity.weights @ (1.0 / norms)
    rank_one = (sparsity.weights ** 2) @ (1.0 / norms ** 3)
    blocks = -rank_one[:, None, None] * np.einsum("ak,al->akl", weighted_offset, weighted_offset)
    blocks[:, np.arange(6), np.arange(6)] += diagonal[:, None] * ACTIVATION_METRIC
    return sparsity.strength * blocks


def _shifted_entries(activations):
    """Entries of S − μI per tet: s11, s22, s33, s23, s13, s12 (the vector order of a)."""
    a = np.asarray(activations)
    return a[:, 0] - MIN_ACTIVATION_EIGENVALUE, a[:, 1] - MIN_ACTIVATION_EIGENVALUE, \
        a[:, 2] - MIN_ACTIVATION_EIGENVALUE, a[:, 3], a[:, 4], a[:, 5]


def _shifted_minors(activations) -> np.ndarray:
    """(A, 4) the principal minors of S − μI per tet beyond its diagonal: the 2×2 minors of
    (x, y), (y, z), (x, z) and the determinant."""
    s11, s22, s33, s23, s13, s12 = _shifted_entries(activations)
    determinant = s11 * s22 * s33 + 2.0 * s12 * s23 * s13 - s11 * s23 ** 2 - s22 * s13 ** 2 - s33 * s12 ** 2
    return np.stack([s11 * s22 - s12 ** 2, s22 * s33 - s23 ** 2, s11 * s33 - s13 ** 2, determinant], axis=1)


def _shifted_minor_gradients(activations) -> np.ndarray:
    """(A, 15) the gradients of `_shifted_minors` on the entries of MINOR_ENTRIES, in that order."""
    s11, s22, s33, s23, s13, s12 = _shifted_entries(activations)
    return np.stack([s22, s11, -2.0 * s12,                                         # xy: a_xx, a_yy, a_xy
                     s33, s22, -2.0 * s23,                                         # yz: a_yy, a_zz, a_yz
                     s33, s11, -2.0 * s13,                                         # xz: a_xx, a_zz, a_xz
                     s22 * s33 - s23 ** 2, s11 * s33 - s13 ** 2, s11 * s22 - s12 ** 2,
                     2.0 * (s12 * s13 - s11 * s23), 2.0 * (s12 * s23 - s22 * s13),
                     2.0 * (s23 * s13 - s33 * s12)], axis=1)


def _shifted_minor_curvature(activations, multipliers) -> np.ndarray:
    """(A, 6, 6) the positive semi-definite part, per tet, of Σ λ ∇²(minor) for multipliers (A, 4)."""
    s11, s22, s33, s23, s13, s12 = _shifted_entries(activations)
    blocks = np.zeros((len(s11), 6, 6))

    def add(k, l, value):
        blocks[:, k, l] += value
        if k != l:
            blocks[:, l, k] += value

    xy, yz, xz, d = multipliers.T
    for (k, l), value in {(0, 1): xy, (5, 5): -2.0 * xy, (1, 2): yz, (3, 3): -2.0 * yz, (0, 2): xz,
                          (4, 4): -2.0 * xz}.items():
        add(k, l, value)
    for (k, l), value in {(0, 1): s33, (0, 2): s22, (1, 2): s11, (0, 3): -2.0 * s23, (1, 4): -2.0 * s13,
                          (2, 5): -2.0 * s12, (3, 3): -2.0 * s11, (4, 4): -2.0 * s22, (5, 5): -2.0 * s33,
                          (3, 4): 2.0 * s12, (3, 5): 2.0 * s13, (4, 5): 2.0 * s23}.items():
        add(k, l, d * value)
    eigenvalues, eigenvectors = np.linalg.eigh(blocks)
    return np.einsum("aik,ak,ajk->aij", eigenvectors, np.clip(eigenvalues, 0.0, None), eigenvectors)


class _Layout:
    """What does not change from shape to shape: sizes, the fixed sparsity structures of the
    Jacobian and of the Lagrangian Hessian, the row scaling, and the model's operators."""

    def __init__(self, shape_fitter: ShapeFitter):
        face = shape_fitter.face
        model = shape_fitter.model
        self.face = face
        self.elasticity = face.simulator.elasticity
        # The quasi-static forward solve's constant force: gravity when enabled (StaticFace has no wind).
        self.constant_force = face.simulator.gravity_force
        self.embedding = face.embedding
        self.jaw_frame = model["jaw_frame"]
        # An own copy of the bone constraints: IPOPT moves its frame with b at every evaluation,
        # which must not disturb the forward solver's.
        self.constraints = constraints = BoneConstraints(model)
        self.reduced_size = n = constraints.reduced_size
        self.active_count = A = shape_fitter.membership.active_count
        self.displacement_slice = slice(0, n)
        self.activation_slice = slice(n, n + 6 * A)
        self.jaw_slice = slice(n + 6 * A, n + 6 * A + JAW_PARAMETER_COUNT)
        self.size = n + 6 * A + JAW_PARAMETER_COUNT
        self.constraint_count = n + MINORS_PER_TET * A

        rest = shape_fitter.rest_state
        constraints.reduction(*self.bone_transforms(np.zeros(JAW_PARAMETER_COUNT)))
        self.rest_q = constraints.q_from_x(rest.x)
        # The forward solve's volume floor (SimulationSettings.volume_floor) is part of E: its
        # stiffness follows λ and the tet volumes, not the activation, so one serves every z.
        settings = face.simulator.settings
        self.volume_floor = tissue_volume_floor(self.elasticity, face.simulator.neutral_material,
                                                settings.volume_floor, settings.volume_floor_stiffness)
        rest_hessian = self.tissue_hessian(rest.x, face.material(rest.activations))
        reduced = self.reduce(rest_hessian)
        self._reduced_indptr, self._reduced_indices = reduced.indptr, reduced.indices
        self.row_scale = 1.0 / (LENGTH_UNIT * reduced.diagonal())
        self.hessian_indptr, self.hessian_indices = rest_hessian.indptr, rest_hessian.indices

        reduced_columns = np.repeat(np.arange(n), np.diff(reduced.indptr))
        reduced_rows = reduced.indices.astype(np.int64)
        self.stiffness_rows = reduced_rows
        self.lower_entries = np.flatnonzero(reduced_rows >= reduced_columns)

        # Pᵀ C: column 6j + k (a_k of active tet j) has one entry per reduced coordinate of the
        # tet's four nodes, whatever the bone pose (sliding bases rotate, their pattern does not).
        coupling = ActivationCoupling(self.elasticity, face.material(rest.activations), rest.x)
        self.coupling_nodes = np.sort(self.elasticity.tets[coupling.active_tets], axis=1)    # (A, 4)
        dofs = constraints.dofs_per_node[self.coupling_nodes]                                # (A, 4)
        component = np.arange(3)
        self.coupling_mask = np.broadcast_to(component[None, None, None, :] < dofs[:, None, :, None], (A, 6, 4, 3))
        row_grid = constraints.dof_offset[self.coupling_nodes][:, None, :, None] + component
        column_grid = n + 6 * np.arange(A)[:, None, None, None] + np.arange(6)[None, :, None, None]
        self.coupling_rows = np.broadcast_to(row_grid, (A, 6, 4, 3))[self.coupling_mask]
        coupling_columns = np.broadcast_to(column_grid, (A, 6, 4, 3))[self.coupling_mask]
        self.slide_index = constraints.slide_index_of_node[self.coupling_nodes]             # (A, 4), −1: not sliding

        jaw_rows = np.repeat(np.arange(n), JAW_PARAMETER_COUNT)
        jaw_columns = np.tile(np.arange(self.jaw_slice.start, self.jaw_slice.stop), n)
        tet_columns = n + 6 * np.arange(A)[:, None]
        minor_of_entry = np.repeat(np.arange(MINORS_PER_TET), [len(entries) for entries in MINOR_ENTRIES])
        minor_rows = (n + MINORS_PER_TET * np.arange(A)[:, None] + minor_of_entry).ravel()
        minor_columns = (tet_columns + np.concatenate(MINOR_ENTRIES)).ravel()
        self.jacobian_rows = np.concatenate([reduced_rows, self.coupling_rows, jaw_rows, minor_rows]).astype(np.int64)
        self.jacobian_columns = np.concatenate([reduced_columns, coupling_columns, jaw_columns,
                                                minor_columns]).astype(np.int64)

        block_rows = (tet_columns + _BLOCK_ROWS).ravel()
        block_columns = (tet_columns + _BLOCK_COLUMNS).ravel()
        jaw_displacement_rows = np.repeat(np.arange(self.jaw_slice.start, self.jaw_slice.stop), n)
        jaw_displacement_columns = np.tile(np.arange(n), JAW_PARAMETER_COUNT)
        jaw_lower_rows, jaw_lower_columns = np.tril_indices(JAW_PARAMETER_COUNT)
        self.hessian_rows = np.concatenate([reduced_rows[self.lower_entries], block_rows, jaw_displacement_rows,
                                            self.jaw_slice.start + jaw_lower_rows]).astype(np.int64)
        self.hessian_columns = np.concatenate([reduced_columns[self.lower_entries], block_columns,
                                               jaw_displacement_columns,
                                               self.jaw_slice.start + jaw_lower_columns]).astype(np.int64)

        # Bᵀ W̃ B lives on H's pattern (a skin vertex couples only the nodes of its own tet):
        # scatter each vertex's 12×12 block through the tet's entry positions.
        embedding_tets = np.asarray(model["skin_embedding_tet"])
        self._vertex_entry_positions = self.elasticity.element_entry_positions[embedding_tets]   # (V, 144)
        self._vertex_embedding_weights = np.asarray(model["skin_embedding_weights"], dtype=np.float64)
        self._vertex_weight = shape_fitter.vertex_weight
        self._point_to_plane = shape_fitter.settings.point_to_plane

    def tissue_gradient(self, x, material) -> np.ndarray:
        """∇E of the tissue: co-rotated elasticity plus the volume floor, as the forward solve has it."""
        gradient = self.elasticity.gradient(x, material)
        return gradient if self.volume_floor is None else gradient + self.volume_floor.gradient(x)

    def tissue_hessian(self, x, material) -> sp.csr_matrix:
        """∇²E of the tissue (exact, on the elastic pattern)."""
        hessian = self.elasticity.hessian(x, material, project=False)
        if self.volume_floor is not None:
            self.volume_floor.add_hessian_into(hessian.data, x, project=False)
        return hessian

    def bone_transforms(self, jaw):
        """(skull, jaw) world transforms with the head at rest."""
        return bone_transforms(np.eye(4), self.jaw_frame, jaw)

    def reduce(self, full_hessian) -> sp.csc_matrix:
        return self.constraints.reduce_hessian(full_hessian)

    def check_reduced_pattern(self, reduced):
        if not (np.array_equal(reduced.indptr, self._reduced_indptr)
                and np.array_equal(reduced.indices, self._reduced_indices)):
            raise RuntimeError("the reduced Hessian changed its sparsity pattern during the IPOPT solve")

    def coupling_values(self, coupling: ActivationCoupling) -> np.ndarray:
        """The entries of Pᵀ C in the fixed order of `coupling_rows`."""
        A = self.active_count
        # Each column of C holds its tet's 12 rows; in CSC with sorted rows they come node by
        # node in increasing node order, components 0, 1, 2 — the order of coupling_nodes.
        columns = coupling.force_jacobian(active_only=True).tocsc()
        columns.sort_indices()
        values = columns.data.reshape(A, 6, 4, 3)
        blocks = np.zeros((A, 4, 3, 3))                      # per tet node: its 3 × d block of P, padded
        blocks[:] = np.eye(3)
        sliding = self.slide_index >= 0
        blocks[sliding] = 0.0
        blocks[sliding, :, :2] = self.constraints.slide_basis[self.slide_index[sliding]]
        reduced = np.einsum("alcd,aklc->akld", blocks, values)
        return reduced[self.coupling_mask]

    def fit_hessian_in_pattern(self, normals) -> sp.csr_matrix:
        """G = Bᵀ W̃ B (3N × 3N) on the elastic Hessian's pattern, W̃_v = ω_v (I + ρ n_v n_vᵀ)."""
        vertex_block = self._vertex_weight[:, None, None] * (
            np.eye(3) + self._point_to_plane * np.einsum("vi,vj->vij", normals, normals))
        w = self._vertex_embedding_weights
        local = np.einsum("vi,vj,vce->vicje", w, w, vertex_block).reshape(len(w), 144)
        data = np.bincount(self._vertex_entry_positions.ravel(), weights=local.ravel(),
                           minlength=len(self.hessian_indices))
        size = 3 * self.elasticity.node_count
        return sp.csr_matrix((data, self.hessian_indices, self.hessian_indptr), shape=(size, size))


class FullSpaceFitter:
    """Phace's full-space inverse physics on the model, regularisers and weights of a ShapeFitter."""

    def __init__(self, shape_fitter: ShapeFitter, settings: FullSpaceSettings | None = None):
        self.shape_fitter = shape_fitter
        self.settings = settings or FullSpaceSettings()
        self.face = shape_fitter.face
        self.layout = _Layout(shape_fitter)

    def problem(self, delta, contractions=None) -> FullSpaceProblem:
        """The NLP for the target rest skin + delta, with γ (default 1: every muscle at rest)."""
        f = self.shape_fitter
        target = f.rest_skin + np.asarray(delta, dtype=np.float64)
        normals = vertex_normals(target, f.triangles)
        gamma = np.ones(len(f.membership.muscle_names)) if contractions is None else contractions
        return FullSpaceProblem(self, target, normals, gamma)

    def _ipopt(self, problem: FullSpaceProblem, warm: bool) -> cyipopt.Problem:
        s = self.settings
        lower, upper = problem.variable_bounds()
        constraint_lower, constraint_upper = problem.constraint_bounds()
        nlp = cyipopt.Problem(n=problem.size, m=problem.constraint_count, problem_obj=problem,
                              lb=lower, ub=upper, cl=constraint_lower, cu=constraint_upper)
        options = {
            "print_level": s.print_level, "sb": "yes",
            "linear_solver": "mumps",                  # what Debian's coinor-libipopt ships
            "hessian_approximation": "exact",          # our Gauss–Newton Hessian
            # The problem is scaled by hand (module docstring); IPOPT's gradient-based
            # rescaling would undo the meaning of the tolerances.
            "nlp_scaling_method": "none",
            "obj_scaling_factor": 1.0 / problem.objective_scale,
            "tol": s.tolerance, "constr_viol_tol": s.constraint_tolerance,
            "max_iter": s.max_iterations,
            # The barrier parameter follows the progress (Mehrotra-style) instead of a fixed
            # decreasing sequence: with the fixed one the first ~50 iterations of a shape went
            # to following the central path far from the optimum.
            "mu_strategy": "adaptive",
            "max_soc": 0,                              # see the module docstring
        }
        if warm:
            # The previous round's primal-dual point is near the new optimum (only γ moved):
            # start with a small barrier and keep the iterate where it is instead of pushing
            # it into the interior.
            options.update({"warm_start_init_point": "yes", "mu_init": 1e-6,
                            "warm_start_bound_push": 1e-9, "warm_start_slack_bound_push": 1e-9,
                            "warm_start_mult_bound_push": 1e-9})
        options.update(s.ipopt_options)
        for name, value in options.items():
            nlp.add_option(name, value)
        return nlp

    def fit(self, name: str, delta) -> FullSpaceFit:
        started = time.perf_counter()
        f, s = self.shape_fitter, self.settings
        delta = np.asarray(delta, dtype=np.float64)
        target = f.rest_skin + delta
        motion = np.linalg.norm(delta, axis=1).max()
        if motion < NEUTRAL_SHAPE_MOTION:
            return f.motionless_fit(name, target, motion, started, FullSpaceFit)
        problem = self.problem(delta)
        held_muscles = f.held_muscles(delta)
        problem.held_tets = f.held_tets(held_muscles)
        z = problem.start_point()
        problem.configure(s, objective_scale=max(problem.objective(z), np.finfo(float).tiny))
        contractions = problem.contractions
        warm_start = None
        history, rounds, statuses = [problem.objective(z)], [], []
        ipopt_seconds = 0.0
        for _ in range(s.max_rounds):
            contractions = f.prior.best_contractions(problem.split(z)[1], contractions)     # local step
            problem.contractions = contractions
            before = problem.objective(z)
            nlp = self._ipopt(problem, warm=warm_start is not None)
            problem.reset_progress()
            ipopt_started = time.perf_counter()
            solution, info = nlp.solve(z, *(warm_start or ()))                                  # global step
            ipopt_seconds += time.perf_counter() - ipopt_started
            rounds.append(problem.iterations)
            message = info["status_msg"]
            statuses.append(message.decode() if isinstance(message, bytes) else str(message))
            best = problem.best_of(solution)
            if best is None:
                break                       # no iterate near equilibrium: keep the last round's
            value = problem.objective(best)
            if value >= before:
                break
            z = best
            warm_start = (info["mult_g"], info["mult_x_L"], info["mult_x_U"])
            history.append(value)
            if before - value < f.settings.relative_decrease * before:
                break
        _, activations, jaw = problem.split(z)
        activations = _with_eigenvalues_at_least(activations, MIN_ACTIVATION_EIGENVALUE)
        ipopt_x = problem.positions(z)
        state = self.face.solve(activations, jaw, start=ipopt_x)
        _, fit_value = f._fit_residual(state.skin, target, problem.normals)
        history.append(fit_value + f._regularisation(state.activations, contractions))
        gap = np.linalg.norm((problem.layout.embedding @ ipopt_x).reshape(-1, 3) - state.skin, axis=1).max()
        status = "fitted" if state.converged else f"fitted, but the final equilibrium solve failed: {state.reason}"
        return FullSpaceFit(name=name, activations=state.activations, jaw=state.jaw, skin=state.skin.copy(),
                            error_mm=face_errors_mm(state.skin, target, f.face_region), status=status,
                            iterations=int(sum(rounds)), seconds=time.perf_counter() - started,
                            objective_history=history, contractions=contractions, ipopt_iterations=rounds,
                            ipopt_status=statuses, ipopt_seconds=ipopt_seconds,
                            equilibrium_gap_mm=float(gap / MILLIMETRE), held_muscles=held_muscles)
