"""The quasi-static face as a function of its activations and jaw pose, and its derivatives.

Inverse physics needs the skin s(θ) = B x*(θ) of the equilibrium x*(θ) for the unknowns
θ = (a, b) — activation 6-vectors of the active tets and the 5 jaw parameters — and products
with its Jacobian. With the bone constraints x = P(b) q + c(b) the equilibrium is
r(q, a, b) = P(b)ᵀ ∇E(P(b) q + c(b), a) = 0, and by the implicit-function theorem

    dq = −K⁻¹ (∂r/∂a da + ∂r/∂b db),   K = Pᵀ H P (the reduced Hessian, SPD at a stable equilibrium)
    dx = P dq + ẋ_b db,                 ẋ_b = ∂(P q + c)/∂b at fixed q
    ∂r/∂a da = Pᵀ C da                  C = ∂∇E/∂a (activation_derivatives.ActivationCoupling)
    ∂r/∂b_k = Ṗ_kᵀ ∇E + Pᵀ H ẋ_k       (∇E ≠ 0 at pinned nodes: their reaction forces)

so one Cholesky factor of K serves every product: J v costs one solve, Jᵀ w one solve (the
adjoint). P and c are affine in the bone transform, whose derivative in b is taken by a
central difference of the closed-form jaw transform (step 1e-6, truncation error ~1e-12
relative); everything downstream of it is exact.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from ..physics.activation import tet_activations_from_vectors
from ..physics.activation_derivatives import ActivationCoupling
from ..physics.bones import bone_transforms
from ..physics.simulator import WITHOUT_SHORTCUTS, FaceSimulator, SimulationSettings
from ..physics.skin_embedding import SkinEmbedding

JAW_PARAMETER_COUNT = 5
JAW_DIFFERENCE_STEP = 1e-6


@dataclass
class Equilibrium:
    x: np.ndarray                   # (3N,) node positions
    skin: np.ndarray                # (V, 3) rig vertices
    activations: np.ndarray         # (A, 6)
    jaw: np.ndarray                 # (5,)
    converged: bool
    iterations: int
    reason: str


class StaticFace:
    """Quasi-static solves of one model for given (a, b), warm-started from the last one."""

    def __init__(self, model, active_tets, mu=1.0, lam=3.0, tolerance=1e-6, max_iterations=100):
        self.model = model
        self.active_tets = np.asarray(active_tets)
        # No load steps and no predicted start: a trial solve starts from a predicted position,
        # not from the equilibrium of the last trial, so there is no path from it to interpolate
        # along, nor a motion to continue. And Newton's steps as the fits were measured with
        # (no oversolve guard, no stale factor refresh: docs/inverse-physics.md's figures).
        self.simulator = FaceSimulator(model, SimulationSettings(mu=mu, lam=lam, tolerance=tolerance,
                                                                 max_iterations=max_iterations, load_step_budget=0,
                                                                 max_activation_change_per_load_step=None,
                                                                 **WITHOUT_SHORTCUTS))
        self.embedding = SkinEmbedding.from_model(model).matrix()
        self.tet_count = len(model["tets"])

    def tet_activations(self, activations) -> np.ndarray:
        """(M, 3, 3) every tet's S from the active tets' 6-vectors (S = I elsewhere)."""
        return tet_activations_from_vectors(activations, self.active_tets, self.tet_count)

    def material(self, activations):
        return dataclasses.replace(self.simulator.neutral_material, activation=self.tet_activations(activations))

    def solve(self, activations, jaw, start: np.ndarray | None = None,
              max_steps_without_progress: int | None = None) -> Equilibrium:
        """The equilibrium for (a, b) from `start` (default: the last solve's end). With
        `max_steps_without_progress` the solve gives up, unconverged, once its residual has
        stayed above its lowest value for that many Newton steps (newton.newton_minimise)."""
        simulator = self.simulator
        if start is not None:
            simulator.positions = np.asarray(start, dtype=np.float64).reshape(-1).copy()
        full = self.tet_activations(activations)
        newton = simulator.solver
        newton.max_steps_without_progress = max_steps_without_progress
        try:
            frame = simulator.step(full, jaw=jaw)       # quasi-static: the bones go straight to this pose
        finally:
            newton.max_steps_without_progress = None
        return self._equilibrium(frame, activations, jaw)

    def replay(self, activations, jaw) -> Equilibrium:
        """The equilibrium an animation reaches when it plays (a, b) from the neutral face: from
        rest, in the load steps FaceSimulator takes for that jump by default
        (SimulationSettings.max_activation_change_per_load_step), so that a fit stores the
        equilibrium `animate` finds, at weight 1 in one frame as along a ramp."""
        simulator = self.simulator
        simulator.return_to_rest()
        trial_settings = simulator.settings
        simulator.settings = dataclasses.replace(
            trial_settings, max_activation_change_per_load_step=SimulationSettings().max_activation_change_per_load_step)
        try:
            frame = simulator.step(self.tet_activations(activations), jaw=jaw)
        finally:
            simulator.settings = trial_settings
        return self._equilibrium(frame, activations, jaw)

    def _equilibrium(self, frame, activations, jaw) -> Equilibrium:
        x = self.simulator.positions.copy()
        return Equilibrium(x=x, skin=(self.embedding @ x).reshape(-1, 3), activations=np.array(activations),
                           jaw=np.array(jaw, dtype=np.float64), converged=frame.converged,
                           iterations=frame.iterations, reason=frame.reason)

    def linearise(self, state: Equilibrium) -> "Linearisation":
        return Linearisation(self, state)


class Linearisation:
    """Products with the Jacobian of the skin s (3V) with respect to (a (A,6), b (5,)) at an equilibrium."""

    def __init__(self, face: StaticFace, state: Equilibrium):
        simulator = face.simulator
        constraints = simulator.constraints
        objective = simulator.objective
        self.face, self.state = face, state
        material = face.material(state.activations)
        objective.material = material
        x = state.x
        skull, jaw_transform = bone_transforms(np.eye(4), face.model["jaw_frame"], state.jaw)
        P, c = constraints.reduction(skull, jaw_transform)
        self.P = P
        q = constraints.q_from_x(x)
        hessian = objective.hessian(x)
        linear_solver = simulator.solver.linear_solver
        self.shift = linear_solver.factorise(constraints.reduce_hessian(hessian))
        # Its own copy: every later solve of this face refactorises the solver's kept factor in
        # place, and the fit uses a linearisation again after a rejected trial equilibrium. With
        # the shared factor those products came from the trial's last Hessian (J v off by more
        # than its own size on the demo head; tests/test_inverse_physics.py).
        self._factor = linear_solver.factor_copy()
        self.coupling = ActivationCoupling(simulator.elasticity, material, x)
        if not np.array_equal(self.coupling.active_tets, face.active_tets):
            raise ValueError("the material's active tets differ from the model's muscle tets")
        gradient = objective.gradient(x)
        # ẋ_b and ∂r/∂b by central differences of the (affine in the transform) constraint map.
        self.jaw_position_derivative = np.empty((x.size, JAW_PARAMETER_COUNT))
        self.jaw_residual_derivative = np.empty((constraints.reduced_size, JAW_PARAMETER_COUNT))
        for k in range(JAW_PARAMETER_COUNT):
            step = np.zeros(JAW_PARAMETER_COUNT)
            step[k] = JAW_DIFFERENCE_STEP
            P_plus, c_plus = constraints.reduction(*bone_transforms(np.eye(4), face.model["jaw_frame"], state.jaw + step))
            P_minus, c_minus = constraints.reduction(*bone_transforms(np.eye(4), face.model["jaw_frame"], state.jaw - step))
            dP = (P_plus - P_minus) / (2.0 * JAW_DIFFERENCE_STEP)
            dx = dP @ q + (c_plus - c_minus) / (2.0 * JAW_DIFFERENCE_STEP)
            self.jaw_position_derivative[:, k] = dx
            self.jaw_residual_derivative[:, k] = dP.T @ gradient + P.T @ (hessian @ dx)
        constraints.reduction(skull, jaw_transform)        # back to this equilibrium's frame
        self.embedding = face.embedding

    def _solve(self, rhs):
        return self._factor.solve(rhs)

    def position_change(self, d_activations, d_jaw) -> np.ndarray:
        """dx/dθ (da, db): (3N,) first-order change of the node positions."""
        residual_change = (self.P.T @ self.coupling.force_jacobian_product(d_activations, active_only=True)
                           + self.jaw_residual_derivative @ d_jaw)
        dq = -self._solve(residual_change)
        return self.P @ dq + self.jaw_position_derivative @ d_jaw

    def skin_product(self, d_activations, d_jaw) -> np.ndarray:
        """J (da, db): (3V,) change of the skin."""
        return self.embedding @ self.position_change(d_activations, d_jaw)

    def skin_transpose_product(self, skin_vector) -> tuple[np.ndarray, np.ndarray]:
        """Jᵀ w for w (3V,): (A, 6) and (5,)."""
        node_vector = self.embedding.T @ np.asarray(skin_vector).ravel()
        adjoint = self._solve(self.P.T @ node_vector)
        d_activations = -self.coupling.force_jacobian_transpose_product(self.P @ adjoint, active_only=True)
        d_jaw = -self.jaw_residual_derivative.T @ adjoint + self.jaw_position_derivative.T @ node_vector
        return d_activations, d_jaw

    # Many directions at once: one CHOLMOD solve with k right-hand sides runs the supernodal
    # triangular solves as matrix-matrix products (on ICT's 25,684 unknowns 1.2 ms a column at
    # k = 64 against 6.6 ms for a lone vector); the fibre fit takes its whole Jacobian this way.

    @functools.cached_property
    def _force_jacobian(self):
        """C = ∂∇E/∂a as a sparse 3N × 6A matrix (column 6j + k: component k of muscle tet j)."""
        return self.coupling.force_jacobian(active_only=True)

    def skin_products(self, d_activations, d_jaw) -> np.ndarray:
        """J [θ₁ … θ_k]: (3V, k) for columns da (6A, k) (each an (A, 6) array flattened) and db (5, k)."""
        residual_change = self.P.T @ (self._force_jacobian @ d_activations) + self.jaw_residual_derivative @ d_jaw
        dq = -self._solve(residual_change)
        return self.embedding @ (self.P @ dq + self.jaw_position_derivative @ d_jaw)

    def skin_transpose_products(self, skin_vectors) -> tuple[np.ndarray, np.ndarray]:
        """Jᵀ [w₁ … w_k] for skin_vectors (3V, k): (6A, k) and (5, k)."""
        node_vectors = self.embedding.T @ skin_vectors
        adjoint = self._solve(self.P.T @ node_vectors)
        d_activations = -(self._force_jacobian.T @ (self.P @ adjoint))
        d_jaw = -self.jaw_residual_derivative.T @ adjoint + self.jaw_position_derivative.T @ node_vectors
        return d_activations, d_jaw
