"""Fit the activations and jaw pose behind one shape key (paper 000 §5, Eq. 4–6).

    min over θ = (a, b):  f(θ) = f_fit(s(θ)) + R_act(a; γ) + R_sparse(a)
    f_fit = ½ Σ_v ω_v [‖s_v − t_v‖² + ρ (n_v·(s_v − t_v))²] / (ℓ² Σ_v ω_v)

s(θ) the skin of the quasi-static equilibrium (equilibrium.py), t the shape key, n_v its unit
normals (the point-to-plane term of Eq. 4), ω_v 1 on the face region and smaller elsewhere,
ℓ = 1 mm so f_fit is half the weighted mean squared distance in mm².

Method — reduced space, Gauss–Newton with Levenberg–Marquardt damping. The equilibrium
constraint of Eq. 4 is eliminated: x*(θ) is solved by Newton, and the sensitivities of the
skin come from one Cholesky factor of the equilibrium Hessian per outer iteration (J v and
Jᵀ w are one triangular solve pair each). The step solves

    (Jᵀ W J + ∇²R + λ D) δ = −∇f

(R_sparse's curvature softened near rest, FitSettings.sparsity_curvature_floor) by conjugate
gradients (matrix-free: two solves per CG iteration), with λ adapted by the ratio of actual to
predicted decrease. Gauss–Newton ignores the third derivatives of E, as
Phace's Hessian of the Lagrangian does. R_act's contractions γ_m are updated before every
outer iteration in the local step (Brent, regularizers.py) — the local–global scheme of §5.
The jaw parameters are scaled (0.1 rad, 5 mm) so all unknowns are of order one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..geometry import vertex_normals
from ..physics.activation import contraction_log_derivatives, symmetric_from_vector
from .equilibrium import JAW_PARAMETER_COUNT, StaticFace
from ..physics.activation import NEUTRAL_ACTIVATION
from .regularizers import ActivationPrior, GroupSparsity, MuscleMembership, neutral_activations

MILLIMETRE = 1e-3
JAW_SCALE = np.array([0.1, 0.1, 0.005, 0.005, 0.005])     # rad, rad, m, m, m
# A shape key that moves no skin vertex farther than this is neutral (eye-look shapes move
# only the eyeballs, which are not skin).
NEUTRAL_SHAPE_MOTION = 0.5 * MILLIMETRE
# Activations keep their eigenvalues (the principal stretches the muscle asks for) within these
# bounds. Below about 0.5 the tissue is asked to flatten, beyond about 2 to double in length: no
# muscle does either, and S that extreme made the equilibrium multi-stable (a fitted jawOpen was
# not found again when replayed from rest). A step is shortened per tet to stay inside (IPOPT's
# fraction-to-boundary rule in spirit).
MIN_ACTIVATION_EIGENVALUE = 0.5
MAX_ACTIVATION_EIGENVALUE = 2.0
# A muscle whose R_sparse group norm ends below this is switched off exactly (10 ε of the
# smoothing); the switch is kept only if no skin vertex moves more than SNAP_SKIN_TOLERANCE.
IDLE_MUSCLE_NORM = 1e-3
SNAP_SKIN_TOLERANCE = 0.01 * MILLIMETRE
# Conjugate-gradient passes per step, each with the tets the bounds cut in the last one frozen.
# Two, not three: on all 53 ICT shapes the summed time fell by 18 % and the mean 95th percentile
# moved by 0.006 mm (cheekPuff_R 0.69 → 1.14 mm, mouthLeft 1.63 → 1.39; docs/benchmarks.md).
BOUND_PASSES = 2
# Still muscles. A muscle's footprint is the skin its contraction moves at the neutral face: the
# vertices it moves at least FOOTPRINT_SHARE of the most it moves any. A shape key that moves no
# vertex of that footprint farther than STILL_MUSCLE_MOTION does not ask for the muscle, and it is
# held at rest for that shape (docs/inverse-physics.md, "Still muscles").
FOOTPRINT_SHARE = 0.1
STILL_MUSCLE_MOTION = NEUTRAL_SHAPE_MOTION
# The fit stores the equilibrium replay finds from the neutral face (the best of its rounds).
# When that one fits worse than the end of the fit's path by more than this share of f, the fit
# goes on from it, for at most REPLAY_ROUNDS more rounds of a third of the iteration budget each.
# Two, not one, since the tissue has its volume floor: ICT's mouthClose on jawOpen still ended
# 40 % above its path after one (0.55 / 2.56 mm, and a new animation found a third equilibrium
# 3.6 mm away); after two it fits at 0.42 / 1.84 mm and replays within 0.001 mm. 3 %, not 1 %:
# in two runs over the 53 ICT shapes, five rounds followed a mismatch of 1.7-2.6 %; four lowered
# the stored f by 1.3-3 % (under 1.5 % of the RMS distance), one raised it; those timed took
# 14-44 s (docs/inverse-physics.md, "Replay consistency").
REPLAY_MISMATCH = 0.03
REPLAY_ROUNDS = 2


@dataclass
class FitSettings:
    point_to_plane: float = 1.0          # ρ: extra weight of the normal component
    outside_face_weight: float = 0.1     # ω outside the face region
    activation_prior: float = 0.05       # R_act strength per unit of total muscle weight
    sparsity: float = 0.05               # R_sparse strength per √(total muscle weight)
    max_iterations: int = 30
    # Stop when an iteration lowers f by less than this fraction of f or by less than
    # absolute_decrease (mm², f's unit: at an RMS distance r that moves r by about
    # absolute_decrease / r). On the ICT shapes the floor cut the summed fit time by a quarter
    # for at most 0.03 mm of mean error (docs/benchmarks.md, "Stopping floor").
    relative_decrease: float = 1e-3
    absolute_decrease: float = 2e-3
    cg_iterations: int = 60
    cg_tolerance: float = 0.05
    mu: float = 1.0
    lam: float = 3.0
    equilibrium_tolerance: float = 1e-6
    # Start each trial equilibrium from x + (dx/dθ) δ rather than from x: on six ICT shapes each
    # trial solve took 9-33 % fewer Newton iterations, the whole fit 3 % less time (docs/benchmarks.md).
    predicted_start: bool = True
    # A trial equilibrium whose Newton residual stays above its lowest value for this many steps
    # is abandoned and the step rejected like one that raised f (the damping raised as after any
    # rejection): the solve is snapping through to another equilibrium branch, far from the
    # linearisation's prediction.
    # On three ICT shapes such solves took 28-47 steps, their residual above its lowest for 11-35
    # steps in a row; ordinary ones for at most 7 (docs/benchmarks.md). None: solve to the end.
    trial_stall_steps: int | None = 8
    # Hold the muscles whose footprint the shape key leaves still at rest (FOOTPRINT_SHARE). R_sparse
    # alone switches a far muscle off only along some paths: on ICT's mouthPucker the frontalis
    # is on the threshold of its group-lasso condition at the neutral face, and two changes to
    # the iteration that left the fit's error as it was ended with it on (docs/benchmarks.md).
    hold_still_muscles: bool = True
    # The step's model takes R_sparse's curvature at ρ̂_m = max(ρ_m, floor · √Σ_i w_im), as if each
    # tet of a muscle near rest sat this far from S = I (regularizers.GroupSparsity). The exact
    # curvature W_m/ρ_m is ~1/ε there, so the first steps moved every muscle by little and the
    # next ones grew them geometrically; f and its gradient are unchanged, the LM ratio judges
    # the longer steps. On all 53 ICT shapes: summed time −9 %, mean error a little lower
    # (docs/benchmarks.md, "Softer sparsity curvature"). 0: the exact curvature.
    sparsity_curvature_floor: float = 0.3


@dataclass
class ShapeFit:
    name: str
    activations: np.ndarray              # (A, 6)
    jaw: np.ndarray                      # (5,)
    skin: np.ndarray                     # (V, 3) fitted simulation
    error_mm: np.ndarray                 # (3,) mean, 95th percentile, max over the face region
    status: str                          # "fitted" or why the shape was set neutral
    iterations: int = 0
    seconds: float = 0.0
    objective_history: list = field(default_factory=list)
    contractions: np.ndarray | None = None   # (m,) γ of the local step at the end
    context: str = ""                    # the shape this one was fitted on top of (shapes.CONTEXT_SHAPES)
    # Where the fit began: "neutral" (the neutral face), or "guess" when the guess handed to
    # ShapeFitter.fit fitted better; shapes.fit_shapes names the guess ("mirror:mouthSmile_L").
    started_from: str = "neutral"
    # Per outer iteration: objective, accepted decrease, predicted decrease, their ratio, the LM
    # damping after the step, the share of tets whose step the eigenvalue bounds shortened, the
    # Newton iterations of each trial equilibrium (all but an accepted last one rejected) and the
    # replay round (0, or 1 after going on from the replayed equilibrium).
    step_log: list = field(default_factory=list)
    # (m,) bool: the muscles held at rest because the shape leaves their footprint still
    # (FitSettings.hold_still_muscles); every muscle for a motionless shape.
    held_muscles: np.ndarray | None = None
    # Per replay round: (f at the end of the fit's path, f at the equilibrium the replay from
    # rest finds for the same (a, b)); more than one round when they differed (REPLAY_MISMATCH).
    replays: list = field(default_factory=list)


def face_errors_mm(skin, target, face_region) -> np.ndarray:
    distance = np.linalg.norm(skin - target, axis=1)[face_region] / MILLIMETRE
    return np.array([distance.mean(), np.percentile(distance, 95), distance.max()])


class ShapeFitter:
    """Fits shape keys of one rig on one model; keeps the solver state between shapes."""

    def __init__(self, model, rig_vertices, rig_triangles, face_region, settings: FitSettings | None = None):
        self.model = model
        self.settings = s = settings or FitSettings()
        self.rest_skin = np.asarray(rig_vertices, dtype=np.float64)
        self.triangles = np.asarray(rig_triangles)
        self.face_region = np.asarray(face_region, dtype=bool)
        self.membership = MuscleMembership.from_model(model)
        total_weight = self.membership.weights.sum()
        self.prior = ActivationPrior(self.membership, s.activation_prior / total_weight)
        self.sparsity = GroupSparsity(self.membership, s.sparsity / np.sqrt(total_weight))
        self.face = StaticFace(model, self.membership.tets, mu=s.mu, lam=s.lam, tolerance=s.equilibrium_tolerance)
        vertex_weight = np.where(self.face_region, 1.0, s.outside_face_weight)
        self.vertex_weight = vertex_weight / (vertex_weight.sum() * MILLIMETRE ** 2)
        self.rest_state = self.face.solve(neutral_activations(self.membership.active_count), np.zeros(5),
                                          start=np.asarray(model["rest_positions"], dtype=np.float64).ravel())
        self.muscle_footprints = self._muscle_footprints()

    # ------------------------------------------------------------------ still muscles

    def _muscle_footprints(self) -> np.ndarray:
        """(V, m) bool: the skin vertices each muscle's contraction moves at the neutral face at
        least FOOTPRINT_SHARE of the most it moves any. The contraction is R_act's preferred
        direction, d/dγ Q D(γ) Qᵀ at γ = 1 = Q diag(−1, ½, ½) Qᵀ, on the muscle's tets by their
        weights; all muscles in one solve with the neutral face's factor."""
        m = self.membership
        if m.active_count == 0 or m.weights.shape[1] == 0:
            return np.zeros((len(self.rest_skin), m.weights.shape[1]), dtype=bool)
        muscle_count = m.weights.shape[1]
        directions = contraction_log_derivatives(m.frames, m.weights, np.zeros(muscle_count))
        directions = directions.reshape(muscle_count, -1).T                                  # (6A, m)
        linear = self.face.linearise(self.rest_state)
        motion = linear.skin_products(directions, np.zeros((JAW_PARAMETER_COUNT, directions.shape[1])))
        motion = np.linalg.norm(motion.reshape(len(self.rest_skin), 3, -1), axis=1)          # (V, m)
        peak = motion.max(axis=0)
        return (motion >= FOOTPRINT_SHARE * peak) & (peak > 0.0)

    def still_muscles(self, delta) -> np.ndarray:
        """(m,) bool: the muscles whose footprint the shape key (delta (V, 3)) moves nowhere
        farther than STILL_MUSCLE_MOTION."""
        motion = np.linalg.norm(np.asarray(delta, dtype=np.float64), axis=1)
        footprint_motion = np.where(self.muscle_footprints, motion[:, None], 0.0).max(axis=0)
        return footprint_motion < STILL_MUSCLE_MOTION

    def held_muscles(self, delta) -> np.ndarray:
        """(m,) bool: the muscles a fit of this shape key holds at rest: its still muscles when
        FitSettings.hold_still_muscles is on, else none."""
        if self.settings.hold_still_muscles:
            return self.still_muscles(delta)
        return np.zeros(len(self.membership.muscle_names), dtype=bool)

    def held_tets(self, held_muscles) -> np.ndarray:
        """(A,) bool: the active tets that belong to any held muscle, so that each held muscle is
        exactly at rest (its R_sparse norm 0); a tet shared with a working muscle is held too."""
        return (self.membership.weights[:, np.asarray(held_muscles, dtype=bool)] > 0.0).any(axis=1)

    # ------------------------------------------------------------------ objective pieces

    def _fit_residual(self, skin, target, normals):
        """(V,3) W (s − t) and the value f_fit."""
        offset = skin - target
        along_normal = np.einsum("vk,vk->v", offset, normals)
        weighted = self.vertex_weight[:, None] * (offset + self.settings.point_to_plane * along_normal[:, None] * normals)
        return weighted, 0.5 * float(np.einsum("vk,vk->", offset, weighted))

    def _apply_fit_weights(self, skin_change, normals):
        """W applied to skin changes (V, 3), or (3V, k) / (V, 3, k) for k of them."""
        change = skin_change.reshape(len(normals), 3, -1)
        along_normal = np.einsum("vdk,vd->vk", change, normals)
        weighted = self.vertex_weight[:, None, None] * (
            change + self.settings.point_to_plane * along_normal[:, None, :] * normals[:, :, None])
        return weighted.reshape(skin_change.shape)

    def _regularisation(self, activations, contractions):
        return self.prior.value(activations, contractions) + self.sparsity.value(activations)

    # ------------------------------------------------------------------ fitting

    def motionless_fit(self, name, target, motion, started, fit_type=ShapeFit, **fields) -> ShapeFit:
        """The neutral face as the fit of a shape key that moves no skin vertex as far as
        NEUTRAL_SHAPE_MOTION (`motion`, its largest move; `started`, perf_counter at the fit's
        start), every muscle held; `fit_type` and `fields` for the fitters that add their own."""
        fields.setdefault("held_muscles", np.ones(len(self.membership.muscle_names), dtype=bool))
        return fit_type(name=name, activations=neutral_activations(self.membership.active_count),
                        jaw=np.zeros(JAW_PARAMETER_COUNT), skin=self.rest_state.skin.copy(),
                        error_mm=face_errors_mm(self.rest_state.skin, target, self.face_region),
                        status=f"neutral: the shape moves the skin at most {motion / MILLIMETRE:.2f} mm",
                        seconds=time.perf_counter() - started, **fields)

    def fit(self, name: str, delta, start: tuple[np.ndarray, np.ndarray] | None = None) -> ShapeFit:
        """Fit one shape key (delta (V,3) from the rest skin). `start` (activations (A,6), jaw (5,)):
        a guess to begin from instead of the neutral face, used when its objective is lower."""
        started = time.perf_counter()
        target = self.rest_skin + np.asarray(delta, dtype=np.float64)
        motion = np.linalg.norm(np.asarray(delta), axis=1).max()
        if motion < NEUTRAL_SHAPE_MOTION:
            return self.motionless_fit(name, target, motion, started)
        s = self.settings
        normals = vertex_normals(target, self.triangles)
        contractions = np.ones(len(self.membership.muscle_names))
        held_muscles = self.held_muscles(delta)
        movable = ~self.held_tets(held_muscles)
        if start is not None:
            start = (np.where(movable[:, None], start[0], NEUTRAL_ACTIVATION), start[1])
        state, started_from = self._starting_state(target, normals, contractions, start)
        descent = _Descent(damping=1e-3, contractions=contractions)
        budget = s.max_iterations
        best_replayed, best_value = None, np.inf
        for _ in range(REPLAY_ROUNDS + 1):
            state = self._descend(state, target, normals, movable, descent, budget)
            state = self._snap_idle_muscles(state)
            # Replay solves from the neutral face, not along the fit's path; the skin (and so the
            # detail residual) stored is the equilibrium that replay finds, in the load steps an
            # animation takes (StaticFace.replay).
            fitted_value = self._objective(state, target, normals, descent.contractions)
            replayed = self.face.replay(state.activations, state.jaw)
            if not replayed.converged:
                break
            replayed_value = self._objective(replayed, target, normals, descent.contractions)
            descent.replays.append((fitted_value, replayed_value))
            state = replayed
            # A later round's path can end where the ramp from rest finds a worse equilibrium
            # than an earlier round's did (ICT's mouthClose: f replayed 0.84, then 0.90, then
            # 1.03); the best replayed one is stored.
            if replayed_value < best_value:
                best_replayed, best_value = replayed, replayed_value
            # Where the fit's path and the ramp from rest end on different equilibria of the same
            # (a, b), the fit goes on from the one replay reaches: a minimum of f along the path
            # is not one over what an animation can play.
            if replayed_value <= fitted_value * (1.0 + REPLAY_MISMATCH):
                break
            budget = s.max_iterations // 3
        if best_replayed is not None:
            state = best_replayed
        contractions = self.prior.best_contractions(state.activations, descent.contractions)
        _, fit_value = self._fit_residual(state.skin, target, normals)
        descent.history.append(fit_value + self._regularisation(state.activations, contractions))
        return ShapeFit(name=name, activations=state.activations, jaw=state.jaw, skin=state.skin.copy(),
                        error_mm=face_errors_mm(state.skin, target, self.face_region), status="fitted",
                        iterations=descent.iterations, seconds=time.perf_counter() - started,
                        objective_history=descent.history, contractions=contractions,
                        step_log=descent.step_log, started_from=started_from, held_muscles=held_muscles,
                        replays=descent.replays)

    def _descend(self, state, target, normals, movable, descent: "_Descent", budget: int):
        """Levenberg–Marquardt iterations from `state` until the decrease is small, no step is
        accepted or `budget` iterations are spent; returns the last accepted equilibrium and
        updates `descent` (damping, contractions, logs) in place."""
        s = self.settings
        for _ in range(budget):
            descent.iterations += 1
            contractions = descent.contractions = self.prior.best_contractions(state.activations, descent.contractions)
            weighted, fit_value = self._fit_residual(state.skin, target, normals)
            value = fit_value + self._regularisation(state.activations, contractions)
            descent.history.append(value)
            linear = self.face.linearise(state)
            grad_a, grad_b = linear.skin_transpose_product(weighted.ravel())
            grad_a = grad_a + self.prior.gradient(state.activations, contractions) + self.sparsity.gradient(state.activations)
            grad_a = grad_a * movable[:, None]
            grad_b = grad_b * JAW_SCALE

            def gauss_newton(direction_a, direction_b, damping_now):
                change = linear.skin_product(direction_a, direction_b * JAW_SCALE).reshape(-1, 3)
                back_a, back_b = linear.skin_transpose_product(self._apply_fit_weights(change, normals).ravel())
                back_a = (back_a + self.prior.hessian_diagonal() * direction_a
                          + self.sparsity.hessian_product(state.activations, direction_a, s.sparsity_curvature_floor)
                          + damping_now * direction_a)
                back_b = back_b * JAW_SCALE + damping_now * direction_b
                return back_a, back_b

            accepted = False
            trial_iterations = []
            damping = descent.damping
            while not accepted:
                step_a, step_b, predicted, shortened_share = _step_within_bounds(
                    lambda da, db: gauss_newton(da, db, damping), grad_a, grad_b,
                    self.prior.hessian_diagonal()
                    + self.sparsity.hessian_diagonal(state.activations, s.sparsity_curvature_floor) + damping,
                    state.activations, movable, s.cg_tolerance, s.cg_iterations)
                trial = self._solve_trial(linear, state, step_a, step_b * JAW_SCALE)
                trial_iterations.append(trial.iterations)
                trial_weighted, trial_fit = self._fit_residual(trial.skin, target, normals)
                trial_value = trial_fit + self._regularisation(trial.activations, contractions)
                actual = value - trial_value
                ratio = actual / predicted if predicted > 0 else -1.0
                if trial.converged and actual > 0:
                    accepted = True
                    state = trial
                    damping = damping * (0.3 if ratio > 0.75 else (1.0 if ratio > 0.25 else 4.0))
                else:
                    damping = _damping_after_rejection(damping, grad_a, grad_b, step_a, step_b, predicted,
                                                       -actual if trial.converged else None)
                    if damping > 1e8:
                        break
            descent.damping = damping
            descent.step_log.append({"value": value, "decrease": actual, "predicted": predicted, "ratio": ratio,
                                     "damping": damping, "shortened": shortened_share, "accepted": accepted,
                                     "trial_iterations": trial_iterations, "round": len(descent.replays)})
            # A small decrease ends the fit only when the model agreed with it (ratio near one):
            # a poor ratio means the step was too long for the linearisation, and the larger
            # damping of the next iteration may still find a real decrease. A model that promises
            # almost nothing ends it too; a negative promise does not: the eigenvalue bounds cut
            # that step, and the next linearisation frees or freezes those tets.
            small = actual < max(s.relative_decrease * value, s.absolute_decrease)
            if not accepted or (small and ratio > 0.5) \
                    or 0.0 <= predicted < 0.1 * s.relative_decrease * value:
                break
        return state

    def _objective(self, state, target, normals, contractions):
        contractions = self.prior.best_contractions(state.activations, contractions)
        fit_value = self._fit_residual(state.skin, target, normals)[1]
        return fit_value + self._regularisation(state.activations, contractions)

    def _starting_state(self, target, normals, contractions, start):
        """(state, "neutral" or "guess"): the guess's equilibrium, solved from the neutral face,
        when it converges and fits better than the neutral face; else the neutral face."""
        if start is None:
            return self.rest_state, "neutral"
        guess = self.face.solve(np.asarray(start[0], dtype=np.float64), np.asarray(start[1], dtype=np.float64),
                                start=self.rest_state.x)
        if guess.converged and (self._objective(guess, target, normals, contractions)
                                < self._objective(self.rest_state, target, normals, contractions)):
            return guess, "guess"
        return self.rest_state, "neutral"

    def _solve_trial(self, linear, state, step_a, step_b):
        """The equilibrium after the step, started from its first-order prediction
        x + (dx/dθ) δ (one solve with the linearisation's factor) instead of the last
        equilibrium; from there if the solve cannot start from the prediction. Unconverged
        (the caller rejects the step) when it stalls (FitSettings.trial_stall_steps)."""
        activations, jaw = state.activations + step_a, state.jaw + step_b
        stall = self.settings.trial_stall_steps
        if self.settings.predicted_start:
            predicted = state.x + linear.position_change(step_a, step_b)
            trial = self.face.solve(activations, jaw, start=predicted, max_steps_without_progress=stall)
            # A solve that took steps and then failed (stalled) is an answer: the step is too
            # long for the linearisation. Only a prediction the solve could not start from (an
            # inverted element) is worth a second start.
            if trial.converged or trial.iterations > 0:
                return trial
        return self.face.solve(activations, jaw, start=state.x, max_steps_without_progress=stall)

    def _snap_idle_muscles(self, state):
        """Set the muscles R_sparse has all but switched off exactly to neutral.

        The smoothed group norm leaves unused muscles at ~ε instead of exactly at rest; a
        muscle whose norm is that small moves no skin, and an artist reading the fit should
        see it off. Tets shared with a working muscle keep their activation. The snapped
        state is re-solved and kept only if no skin vertex moves more than SNAP_SKIN_TOLERANCE."""
        norms = self.sparsity.muscle_norms(state.activations)
        idle = norms < IDLE_MUSCLE_NORM
        weights = self.membership.weights
        idle_share = weights[:, idle].sum(1) / np.maximum(weights.sum(1), 1e-300)
        snap = idle_share > 1.0 - 1e-9
        if not snap.any() or np.all(state.activations[snap] == NEUTRAL_ACTIVATION):
            return state
        activations = state.activations.copy()
        activations[snap] = NEUTRAL_ACTIVATION
        trial = self.face.solve(activations, state.jaw, start=state.x)
        moved = np.linalg.norm(trial.skin - state.skin, axis=1).max()
        return trial if trial.converged and moved <= SNAP_SKIN_TOLERANCE else state


@dataclass
class _Descent:
    """What the Levenberg–Marquardt iterations carry from one round to the next (ShapeFitter.fit)."""
    damping: float
    contractions: np.ndarray
    iterations: int = 0
    history: list = field(default_factory=list)
    step_log: list = field(default_factory=list)
    replays: list = field(default_factory=list)


def _damping_after_rejection(damping, grad_a, grad_b, step_a, step_b, predicted, rise) -> float:
    """The LM damping for the next try after a rejected step δ: large enough that the next step is
    about the length along δ where f stops falling, and at least ten times the last damping.

    Tenfold alone was too timid when the damping was far below the model's curvature: the CG
    step barely changed (on ICT's mouthLeft the steps 10 and 100 times as damped came out longer,
    |δa| 5.9 → 7.3 → 7.1) and each cost a trial equilibrium; 2–4 rejections in a row were common.
    Along δ the model has curvature c = δᵀAδ / δᵀδ (A with the damping in), and adding
    c (1/α − 1) to the damping shortens a step dominated by that curvature to α of its length.
    α is where the parabola through f(0), its slope gᵀδ and f(δ) = f(0) + `rise` is lowest,
    within [0.1, 0.5]; a trial that did not converge (`rise` None) gives no value, α = 0.25."""
    slope = float((grad_a * step_a).sum() + grad_b @ step_b)
    length_squared = float((step_a * step_a).sum() + step_b @ step_b)
    curvature = 2.0 * (-slope - predicted) / length_squared if length_squared > 0.0 else 0.0
    if rise is None or not np.isfinite(rise) or slope >= 0.0:
        fraction = 0.25
    else:
        fraction = float(np.clip(-slope / (2.0 * (max(rise, 0.0) - slope)), 0.1, 0.5))
    return max(10.0 * damping, damping + max(curvature, 0.0) * (1.0 / fraction - 1.0))


def _outside_bounds(activations) -> np.ndarray:
    eigenvalues = np.linalg.eigvalsh(symmetric_from_vector(activations))
    return (eigenvalues[:, 0] < MIN_ACTIVATION_EIGENVALUE) | (eigenvalues[:, -1] > MAX_ACTIVATION_EIGENVALUE)


def _admissible_step(activations, step):
    """The step with each tet's part shortened (halving) until its S keeps every eigenvalue
    within [MIN_ACTIVATION_EIGENVALUE, MAX_ACTIVATION_EIGENVALUE]; and each tet's fraction kept.

    Per tet rather than one fraction for the whole step: a single tet at the bound would
    otherwise stop every other tet too (it stalled the ICT smile after six iterations)."""
    step = np.array(step, dtype=np.float64)
    fraction = np.ones(len(step))
    violating = np.flatnonzero(_outside_bounds(activations + step))
    for _ in range(30):
        if len(violating) == 0:
            break
        fraction[violating] *= 0.5
        violating = violating[_outside_bounds(activations[violating] + fraction[violating, None] * step[violating])]
    fraction[violating] = 0.0
    return step * fraction[:, None], fraction


def _model_decrease(model_product, grad_a, grad_b, step_a, step_b):
    """−gᵀδ − ½ δᵀAδ: what the quadratic model promises for the step δ."""
    image_a, image_b = model_product(step_a, step_b)
    return -(grad_a * step_a).sum() - grad_b @ step_b - 0.5 * ((step_a * image_a).sum() + step_b @ image_b)


def _step_within_bounds(model_product, grad_a, grad_b, diagonal_a, activations, movable, tolerance, max_iterations):
    """The Gauss–Newton step over the `movable` tets (A,) bool that keeps every S within the
    eigenvalue bounds: (δa, δb, predicted decrease, share of the movable tets whose step the
    bounds cut).

    A step shortened per tet is no longer the model's minimiser, and once a fifth of the muscle
    tets sit at a bound its predicted decrease can turn negative: the fit used to stop there
    (ICT jawOpen after 3–7 iterations at 1.1–1.8 mm). So the tets the bounds cut are frozen and
    the step is solved again over the others — an active set rebuilt every outer iteration, so a
    tet can leave its bound later. Of the passes the one the model promises most is returned."""
    free = np.array(movable, dtype=bool)
    best = solved = None
    for _ in range(BOUND_PASSES):
        mask = free[:, None].astype(np.float64)

        def masked_product(direction_a, direction_b):
            image_a, image_b = model_product(direction_a * mask, direction_b)
            return image_a * mask, image_b

        # Later passes start from the last pass's solution over the tets still free: freezing
        # the cut tets changes the step mostly around them.
        start = None if solved is None else (solved[0] * mask, solved[1])
        step_a, step_b, predicted = _conjugate_gradients(masked_product, grad_a * mask, grad_b, diagonal_a,
                                                         tolerance, max_iterations, start=start)
        solved = (step_a, step_b)
        step_a, fraction = _admissible_step(activations, step_a)
        cut = fraction < 1.0
        if cut.any():
            predicted = _model_decrease(model_product, grad_a, grad_b, step_a, step_b)
        candidate = (step_a, step_b, predicted, float(np.mean((cut | ~free)[movable])) if movable.any() else 0.0)
        if best is None or predicted > best[2]:
            best = candidate
        if not cut.any():
            break
        free &= ~cut
    return best


def _conjugate_gradients(operator, grad_a, grad_b, diagonal_a, tolerance, max_iterations, start=None):
    """Solve operator(δ) = −g by Jacobi-preconditioned CG on the pair (activations, scaled jaw),
    from δ = 0 or from `start` (δa, δb), to a residual of `tolerance` × ‖g‖ either way.

    Returns (δa, δb, predicted decrease −gᵀδ − ½ δᵀ A δ) of the quadratic model."""
    inverse_diagonal = 1.0 / diagonal_a
    residual_a, residual_b = -grad_a, -grad_b
    target = tolerance * np.sqrt((grad_a ** 2).sum() + grad_b @ grad_b)
    if start is None:
        solution_a, solution_b = np.zeros_like(grad_a), np.zeros(JAW_PARAMETER_COUNT)
    else:
        solution_a, solution_b = np.array(start[0], dtype=np.float64), np.array(start[1], dtype=np.float64)
        image_a, image_b = operator(solution_a, solution_b)
        residual_a, residual_b = residual_a - image_a, residual_b - image_b
    preconditioned_a, preconditioned_b = inverse_diagonal * residual_a, residual_b.copy()
    search_a, search_b = preconditioned_a.copy(), preconditioned_b.copy()
    alignment = (residual_a * preconditioned_a).sum() + residual_b @ preconditioned_b
    for _ in range(max_iterations):
        if np.sqrt((residual_a ** 2).sum() + residual_b @ residual_b) <= target:
            break
        image_a, image_b = operator(search_a, search_b)
        curvature = (search_a * image_a).sum() + search_b @ image_b
        if curvature <= 0.0:
            break
        step = alignment / curvature
        solution_a += step * search_a
        solution_b += step * search_b
        residual_a -= step * image_a
        residual_b -= step * image_b
        preconditioned_a, preconditioned_b = inverse_diagonal * residual_a, residual_b.copy()
        next_alignment = (residual_a * preconditioned_a).sum() + residual_b @ preconditioned_b
        search_a = preconditioned_a + (next_alignment / alignment) * search_a
        search_b = preconditioned_b + (next_alignment / alignment) * search_b
        alignment = next_alignment
    # With r = −g − Aδ the residual CG carries: −gᵀδ − ½ δᵀAδ = ½ (−gᵀδ + δᵀr). From δ = 0,
    # δᵀr = 0 up to rounding (r is orthogonal to the Krylov space δ lies in).
    predicted = 0.5 * (-(grad_a * solution_a).sum() - grad_b @ solution_b
                       + (solution_a * residual_a).sum() + solution_b @ residual_b)
    return solution_a, solution_b, predicted
