"""The 1-DoF fibre model of muscle activation, fitted to a shape key — the baseline of paper 000 Fig. 9.

In the fibre model each muscle m has one unknown, its contraction γ_m, and every tet of it takes
the volume-preserving S = Q D(γ_m) Qᵀ along its fibre frame Q (D(γ) = diag(γ⁻¹, √γ, √γ)); a tet
shared by several muscles blends them as the forward model does. Phace's 6-DoF model lets every
tet take any symmetric S. Fitting both to the same shapes with the same fitting term shows what
the extra freedom buys (the issue asks for this comparison as a test).

Method: Gauss–Newton with Levenberg–Marquardt damping over θ = (log γ (m), b / JAW_SCALE (5)).
With m + 5 ≈ 40 unknowns the Jacobian of the skin is formed explicitly, one column per
unknown, each one solve with the equilibrium factor (equilibrium.Linearisation.skin_product);
log γ keeps every contraction positive. No regularisers: the fibre model is already the
strongest prior there is, and the comparison is about what each model can reach.
"""
from __future__ import annotations

import time

import numpy as np

from solver.geometry import vertex_normals
from solver.physics.activation import contraction_log_derivatives, vector_from_symmetric
from solver.inverse.fit import JAW_SCALE, NEUTRAL_SHAPE_MOTION, ShapeFit, ShapeFitter, face_errors_mm

# The search stays within γ ∈ [1/4, 4]: beyond it a fibre contracts or stretches past anything a
# facial muscle does, and the forward solve struggles.
LOG_CONTRACTION_LIMIT = np.log(4.0)


class FibreFitter:
    """Fits per-muscle contractions and the jaw; reuses a ShapeFitter's model, solver and weights."""

    def __init__(self, shape_fitter: ShapeFitter, max_iterations: int = 30, relative_decrease: float = 1e-3):
        self.base = shape_fitter
        self.max_iterations = max_iterations
        self.relative_decrease = relative_decrease
        membership = shape_fitter.membership
        weights = membership.weights
        total = weights.sum(axis=1, keepdims=True)
        self.share = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)    # (A, m)
        self.frames = membership.frames

    def activations(self, log_contraction) -> np.ndarray:
        """(A, 6) blended fibre activations for per-muscle log γ."""
        gamma = np.exp(log_contraction)
        diagonal = np.stack([1.0 / gamma, np.sqrt(gamma), np.sqrt(gamma)], axis=1)            # (m, 3)
        tet_diagonal = self.share @ diagonal                                                   # (A, 3): linear in D
        q = self.frames
        return vector_from_symmetric(np.einsum("aij,aj,akj->aik", q, tet_diagonal, q))

    def activation_derivatives(self, log_contraction) -> np.ndarray:
        """(m, A, 6): ∂a/∂(log γ_m)."""
        return contraction_log_derivatives(self.frames, self.share, log_contraction)

    def fit(self, name: str, delta) -> ShapeFit:
        base = self.base
        started = time.perf_counter()
        target = base.rest_skin + np.asarray(delta, dtype=np.float64)
        muscle_count = self.share.shape[1]
        motion = np.linalg.norm(np.asarray(delta), axis=1).max()
        if motion < NEUTRAL_SHAPE_MOTION:
            # The fibre model holds no muscle (ShapeFit.held_muscles stays None, as for its fits).
            return base.motionless_fit(name, target, motion, started, held_muscles=None,
                                       contractions=np.ones(muscle_count))
        normals = vertex_normals(target, base.triangles)
        log_contraction = np.zeros(muscle_count)
        state = base.rest_state
        weighted, value = base._fit_residual(state.skin, target, normals)
        history = [value]
        damping = 1e-3
        iterations = 0
        for iterations in range(1, self.max_iterations + 1):
            linear = base.face.linearise(state)
            # One column per muscle's log γ, then one per scaled jaw parameter: all in one solve.
            per_muscle = self.activation_derivatives(log_contraction).reshape(muscle_count, -1).T     # (6A, m)
            d_activations = np.hstack([per_muscle, np.zeros((per_muscle.shape[0], len(JAW_SCALE)))])
            d_jaw = np.hstack([np.zeros((len(JAW_SCALE), muscle_count)), np.diag(JAW_SCALE)])
            jacobian = linear.skin_products(d_activations, d_jaw)                                # (3V, m+5)
            weighted_jacobian = base._apply_fit_weights(jacobian, normals)
            normal_matrix = jacobian.T @ weighted_jacobian
            gradient = jacobian.T @ weighted.ravel()
            scale = np.maximum(np.diag(normal_matrix), 1e-12 * np.diag(normal_matrix).max())
            accepted = False
            while not accepted and damping < 1e8:
                step = np.linalg.solve(normal_matrix + damping * np.diag(scale), -gradient)
                trial_log = np.clip(log_contraction + step[:muscle_count], -LOG_CONTRACTION_LIMIT, LOG_CONTRACTION_LIMIT)
                trial_jaw = state.jaw + step[muscle_count:] * JAW_SCALE
                trial = base.face.solve(self.activations(trial_log), trial_jaw, start=state.x)
                trial_weighted, trial_value = base._fit_residual(trial.skin, target, normals)
                predicted = -(gradient @ step) - 0.5 * step @ normal_matrix @ step
                actual = value - trial_value
                if trial.converged and actual > 0:
                    accepted = True
                    ratio = actual / predicted if predicted > 0 else 0.0
                    damping *= 0.3 if ratio > 0.75 else (1.0 if ratio > 0.25 else 4.0)
                    log_contraction, state, weighted, value = trial_log, trial, trial_weighted, trial_value
                    history.append(value)
                else:
                    damping *= 10.0
            if not accepted or actual < self.relative_decrease * history[-2]:
                break
        return ShapeFit(name=name, activations=state.activations, jaw=state.jaw, skin=state.skin.copy(),
                        error_mm=face_errors_mm(state.skin, target, base.face_region), status="fitted",
                        iterations=iterations, seconds=time.perf_counter() - started,
                        objective_history=history, contractions=np.exp(log_contraction))
