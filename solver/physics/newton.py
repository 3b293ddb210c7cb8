"""Newton's method on the reduced unknowns q of x = P q + c, factorised with CHOLMOD.

The objective is anything with

    energy(x) -> float,  gradient(x) -> (3N,),  hessian(x) -> 3N × 3N CSR with a fixed pattern,

called with x as the node-major (3N,) vector (docs/physics.md); the integrator plugs in the
elastic + gravity + inertia sum. Each iteration solves (Pᵀ H P) d = −Pᵀ ∇E and backtracks
along d until the energy decreases enough (Armijo), so the energy history never increases.

The linear solves — a kept CHOLMOD factor reused as the preconditioner of conjugate gradients
(each step an inexact Newton step), diagonal shifts for an indefinite Hessian, the factor
updated by a switching low-rank term — are linear_solver.py's. An objective that also offers
``projected_hessian(x)`` (each element's Hessian with its negative eigenvalues clamped,
positive semi-definite by construction) has its exact Hessian shifted by at most
MAX_EXACT_SHIFT_RELATIVE of the mean diagonal; where that is not enough — a compressed,
strongly activated lip buckling sideways — the step is taken on the projected Hessian, on
which only the indefinite elements lose curvature (and which is shifted in turn only if it is
singular, a rigid mode left unconstrained). After a projected step the exact Hessian is tried
again by CG on the kept (projected) factor, not by a factorisation: negative curvature there
means a factorisation would fail, and a failed one overwrites the kept factor, so each
projected step used to cost two factorisations (docs/physics.md, "Indefinite Hessians").

Why not the shift alone: it damps every direction whose curvature is below β. On ICT's lip
animation (frame 5: pressed lips to pucker and jaw forward in one frame) the exact Hessian had
one negative eigenvalue (−1.8 against a mean diagonal of 81, on ~200 lip nodes) and a shift of
8-80 for 40 iterations, so the soft modes (eigenvalues from 0.09) moved by 1 % of their Newton
step per iteration: 50 iterations without convergence; measured in docs/physics.md.

Convergence: ‖Pᵀ∇E‖_∞ ≤ tolerance × force_scale, where force_scale is the caller's measure of
the loads (e.g. the gravity and activation force magnitude), by default the residual at the
start. A solve that stops without meeting it returns converged=False and says why.

Stall limit (optional, off by default): a caller that only wants the equilibrium *near* its
start — inverse physics, whose trial points are first-order predictions — can stop a solve
whose residual has stayed above its lowest value for a number of steps. The energy still falls
there, but along an unstable mode: the tissue is snapping through to another equilibrium. On
ICT fits such solves ran 28–47 steps, their residual above its lowest for 11–35 of them in a
row (docs/benchmarks.md, "Snap-through trials").
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import scipy.sparse as sp
from .constraints import BoneConstraints
from .linear_solver import (NEGATIVE_CURVATURE, CholmodLinearSolver, HessianNotPositiveDefinite, LowRankTerm,
                            shift_sequence)

DEFAULT_TOLERANCE = 1e-6
DEFAULT_MAX_ITERATIONS = 50
ARMIJO_FRACTION = 1e-4          # accept a step that achieves this fraction of the predicted decrease
MAX_STEP_HALVINGS = 40          # 2⁻⁴⁰ ≈ 1e-12 of the Newton step: below that nothing is gained
# The largest shift of an exact Hessian, relative to its mean diagonal, before an objective with a
# projected Hessian gets a projected step instead: on ICT's lip frames the mild indefiniteness near
# an equilibrium takes 0.1-1 % and leaves Newton nearly exact; the lip buckling of frame 5 needed
# 10-100 times the mean diagonal (docs/physics.md, "Indefinite Hessians").
MAX_EXACT_SHIFT_RELATIVE = 1e-2
# Between no shift and that largest one, an objective with a projected Hessian tries only shifts
# from this one up. In three ICT fits (mouthSmile_L, jawOpen, cheekPuff_L) 51 exact Hessians
# were not definite: 34 needed the projection, 11 a shift of 1e-2, 5 of 1e-3, 1 of 1e-4 and none
# a smaller one, while each attempt at 1e-8 … 1e-5 was a failed factorisation of ~0.11 s
# (docs/physics.md, "Indefinite Hessians").
MIN_EXACT_SHIFT_RELATIVE = 1e-3
# A start this close to its projection onto the constraints, relative to its largest coordinate, is
# taken as lying on them (a few ulps: the projection's own rounding).
ROUND_OFF = 4.0 * np.finfo(np.float64).eps
MAX_FORCING = 0.1               # loosest relative accuracy of an inexact Newton step
# A step whose linear model ends below this share of the residual to reach is expected to be the
# last: its trial point is evaluated without the Hessian (newton_minimise's `oversolve_guard`).
EXPECTED_LAST_STEP = 0.5


class Objective(Protocol):
    def energy(self, x: np.ndarray) -> float: ...

    def gradient(self, x: np.ndarray) -> np.ndarray: ...

    def hessian(self, x: np.ndarray) -> sp.csr_matrix: ...

    # Optional: projected_hessian(x) (a positive semi-definite stand-in, same pattern, used
    # where hessian(x) is indefinite), hessian_low_rank(x) (see LowRankTerm) and
    # energy_and_gradient(x) (both in one pass; the line search then evaluates its trial
    # points with it, and the accepted one's gradient is not computed again).


@dataclass
class NewtonResult:
    x: np.ndarray                   # (3N,) final configuration (the start if nothing was accepted)
    q: np.ndarray                   # (n,) its reduced coordinates
    converged: bool
    reason: str                     # why the solve stopped, converged or not
    iterations: int                 # Newton steps taken
    force_scale: float
    threshold: float                # tolerance × force_scale, the residual to reach
    residuals: list[float] = field(default_factory=list)   # ‖Pᵀ∇E‖_∞ at the start and after each step
    energies: list[float] = field(default_factory=list)    # E at the start and after each step
    shifts: list[float] = field(default_factory=list)      # diagonal shift β used by each step (0: none)
    factorisations: int = 0         # numeric Cholesky factorisations (shift retries included)
    krylov_iterations: int = 0      # preconditioned CG iterations that replaced factorisations
    seconds: float = 0.0
    out_of_iterations: bool = False  # stopped by max_iterations while still descending
    projected_steps: int = 0        # steps taken on the projected Hessian (the exact one was indefinite)
    stalled: bool = False           # stopped by max_steps_without_progress
    region_iterations: int = 0      # iterations of the before_step relaxations (newton_minimise)
    region_work: float = 0.0        # the same, in whole-mesh iterations' worth (each weighted by its share of the tets)
    predicted: bool = False         # started from the predicted start (newton_minimise)


def _reduced_low_rank(objective, constraints: BoneConstraints, x: np.ndarray) -> LowRankTerm | None:
    """The objective's switching Hessian part (``hessian_low_rank``, on x) on the reduced
    unknowns: Pᵀ C. None when the objective has none."""
    full = getattr(objective, "hessian_low_rank", lambda x: None)(x)
    if full is None:
        return None
    return LowRankTerm((constraints.P.T @ full.columns).tocsc(), full.keys)


def _energy_and_gradient(objective, x) -> tuple[float, np.ndarray]:
    """(E(x), ∇E(x)), in one pass when the objective offers it."""
    fused = getattr(objective, "energy_and_gradient", None)
    if fused is not None:
        energy, gradient = fused(x)
        return float(energy), gradient
    return float(objective.energy(x)), objective.gradient(x)


def _full_evaluation(objective, x) -> tuple[float, np.ndarray, sp.spmatrix | None]:
    """(E, ∇E, ∇²E or None) at a point Newton may step from: with the Hessian in the same pass
    when the objective offers ``energy_gradient_hessian`` (the next step needs it unless the
    point turns out converged), else E and ∇E alone and the Hessian later, when it is needed.
    On ICT the fused pass costs about what E + ∇E and the Hessian's pass cost apart less one
    SVD pass: each Newton iteration after the first saves a pass (docs/benchmarks.md)."""
    fused = getattr(objective, "energy_gradient_hessian", None)
    if fused is not None:
        energy, gradient, hessian = fused(x)
        return float(energy), gradient, hessian
    return (*_energy_and_gradient(objective, x), None)


def _line_search_evaluation(objective, x, full_step: bool,
                            with_hessian: bool = True) -> tuple[float, np.ndarray | None, sp.spmatrix | None]:
    """E at a line-search trial point, with ∇E (and, `with_hessian`, ∇²E) when they come in the
    same pass and the step is the full one (nearly always the accepted one; a halved step rarely
    is, and the rest would cost more of the pass for nothing). Those are None otherwise."""
    if full_step and with_hessian and hasattr(objective, "energy_gradient_hessian"):
        return _full_evaluation(objective, x)
    if full_step and hasattr(objective, "energy_and_gradient"):
        return (*_energy_and_gradient(objective, x), None)
    return float(objective.energy(x)), None, None


def _onto_constraints(constraints: BoneConstraints, x0) -> tuple[np.ndarray, np.ndarray]:
    """(q, x): the reduced coordinates of x0 projected onto the constraints, and the configuration
    they give. When x0 already lies on them to round-off (where an earlier solve of the same
    frame ended: the next contact round's start) x is x0 itself, bit for bit, so that a pass
    the objective kept at those bits serves again (frame_objective.FrameObjective); projecting
    such a point moved its sliding nodes' coordinates by an ulp or so."""
    x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
    q = constraints.q_from_x(x0)
    x = constraints.x_from_q(q)
    size = float(np.abs(x0).max(initial=0.0))
    if np.abs(x - x0).max(initial=0.0) <= ROUND_OFF * size:
        return q, x0.copy()
    return q, x


def _modelled_start(constraints: BoneConstraints, x0, x, energy, gradient, hessian) -> tuple[float, float]:
    """(E, ‖Pᵀ∇E‖_∞) at x0 projected onto the constraints, from the quadratic model at x (E, ∇E
    and ∇²E there): exact for a quadratic energy, off by O(‖x0 − x‖³) and O(‖x0 − x‖²) otherwise."""
    step = constraints.x_from_q(constraints.q_from_x(x0)) - x
    curvature = hessian @ step
    modelled_energy = energy + float(gradient @ step) + 0.5 * float(step @ curvature)
    return modelled_energy, _max_norm(constraints.reduce_gradient(gradient + curvature))


def _max_norm(vector: np.ndarray) -> float:
    return float(np.abs(vector).max()) if vector.size else 0.0


def _newton_direction(objective, constraints: BoneConstraints, linear_solver, x, reduced_gradient, forcing,
                      result: NewtonResult, exact_refused: bool,
                      hessian: sp.spmatrix | None = None) -> tuple[np.ndarray, float, bool]:
    """(d, β, refused) of one step: on the exact Hessian, shifted by at most
    MAX_EXACT_SHIFT_RELATIVE of its mean diagonal; where that is not enough and the objective
    has a projected Hessian, on that one (counted in result.projected_steps; refused = True, and
    the next step tries the exact Hessian only at the largest shift before projecting again).
    `hessian`: objective.hessian(x) when the caller has it already (the fused evaluation)."""
    low_rank = _reduced_low_rank(objective, constraints, x)
    exact = constraints.reduce_hessian(objective.hessian(x) if hessian is None else hessian)
    projected_hessian = getattr(objective, "projected_hessian", None)
    if projected_hessian is None:
        return (*linear_solver.solve(exact, -reduced_gradient, forcing, low_rank), False)
    largest = MAX_EXACT_SHIFT_RELATIVE * float(np.abs(exact.diagonal()).mean())

    def projected_step():
        result.projected_steps += 1
        return (*linear_solver.solve(constraints.reduce_hessian(projected_hessian(x)), -reduced_gradient, forcing,
                                     low_rank), True)

    if exact_refused and forcing > 0.0 and hasattr(linear_solver, "krylov_solve"):
        # The last step was projected, so the kept factor is the projected Hessian's: CG on the
        # exact one at the largest shift, preconditioned by it, either solves the step or meets
        # negative curvature within a few products. Negative curvature sends the step to the
        # projected Hessian straight away. A factorisation of the exact Hessian would have failed
        # there, and taken the kept factor with it: each projected step cost two factorisations
        # (ICT fits: 70 in a 37-step solve, 30 steps projected; docs/benchmarks.md).
        direction, outcome = linear_solver.krylov_solve(exact, -reduced_gradient, forcing, low_rank, shift=largest)
        if direction is not None:
            return direction, largest, False
        if outcome == NEGATIVE_CURVATURE:
            return projected_step()
        forcing_exact = 0.0           # CG did not do it; do not run it again before factorising
    else:
        forcing_exact = forcing
    last_shift = getattr(linear_solver, "last_shift", 0.0)
    # Below `largest` by more than rounding: MIN × 10ⁿ may land a hair under it, and trying
    # the same shift twice is one more failed factorisation.
    shifts = [] if exact_refused else [shift for shift in shift_sequence(exact, last_shift, MIN_EXACT_SHIFT_RELATIVE)
                                       if shift < largest * (1.0 - 1e-12)]
    try:
        return (*linear_solver.solve(exact, -reduced_gradient, forcing_exact, low_rank, shifts=(*shifts, largest)),
                False)
    except HessianNotPositiveDefinite:
        return projected_step()


def newton_minimise(objective: Objective, constraints: BoneConstraints, linear_solver, x0: np.ndarray, *,
                    tolerance: float = DEFAULT_TOLERANCE, max_iterations: int = DEFAULT_MAX_ITERATIONS,
                    force_scale: float | None = None, max_forcing: float = MAX_FORCING,
                    max_steps_without_progress: int | None = None,
                    before_step: Callable[[np.ndarray], tuple[np.ndarray | None, int, float]] | None = None,
                    predicted_start: np.ndarray | None = None, start_energy: float | None = None,
                    oversolve_guard: float | None = None, force_scale_floor: float | None = None) -> NewtonResult:
    """Minimise the objective over q in the constraints' current frame, starting from x0
    projected onto the constraints. ``linear_solver`` is a CholmodLinearSolver (production)
    or baselines.spsolve_newton.SpsolveLinearSolver (the baseline). `max_forcing`: the loosest relative accuracy of a step
    (0: every step solved exactly, by a fresh factorisation). `max_steps_without_progress`:
    stop, unconverged and `stalled`, once the residual has stayed above its lowest value for
    this many steps (None: never) — the energy still falls, but the solve is travelling away
    from where it started, to another equilibrium (a snap-through). `before_step(x) -> (x', n,
    work)`: called before each step with the current configuration; n, the iterations it took of
    its own, is added to ``region_iterations`` and `work`, their worth in whole-mesh iterations, to
    ``region_work``; unless x' is None the step starts from x' (which must lower the energy: the
    contact region's relaxation, contact_region.py). `predicted_start`: where the
    solution is expected (e.g. extrapolated from earlier frames); the solve starts there instead
    of at x0 when, projected onto the constraints, its energy is finite and below x0's
    (`start_energy`, E at x0 projected, when the caller has it): a prediction that overshoots
    starts no closer. ``predicted`` in the result says which start was taken.
    `force_scale_floor` (instead of `force_scale`): the scale is the larger of it and the residual
    at x0, from the pass Newton makes there anyway. With a predicted start and no `start_energy`,
    E and the residual at x0 first come from the prediction's own pass, its second-order model
    E + ∇E·d + ½ dᵀ∇²E d and Pᵀ(∇E + ∇²E d), d = x0 − prediction (_modelled_start). When both
    residuals are within the floor, the floor is the scale whichever start is taken, and x0 is
    evaluated only if the model makes it the start: a wrong call costs Newton iterations, and a
    residual the model underestimates only tightens the threshold. Otherwise (the first frame
    after a rest, a jump, a start whose force sets the scale) x0 is evaluated exactly first. On
    ICT's smooth take the pass at x0 was a quarter of each frame's passes; on performance frames
    the model's residual at x0 was within 1 % of the exact one where |d| < 0.5 mm, and up to 6×
    off (too high) on frames that jumped 1.4 mm or more.
    `oversolve_guard` γ (None: off): an inexact step is solved no more accurately than its linear
    model needs to bring the residual to γ × the threshold, η ≥ γ · threshold / residual
    (Eisenstat & Walker's safeguard against oversolving: the forcing η = residual / force_scale
    alone asks the last step for far more than the tolerance; ICT frames ended 30–2,500 times
    under it, at 4–12 CG iterations for that step). A step whose model ends under
    EXPECTED_LAST_STEP × the threshold is expected to be the last, and its trial point is
    evaluated without the Hessian (which only a further step would need)."""
    start_time = time.perf_counter()
    factorisations_before = getattr(linear_solver, "factorisations", 0)
    krylov_before = getattr(linear_solver, "krylov_iterations", 0)
    predicted = False
    start_residual = None               # ‖Pᵀ∇E‖_∞ at x0 when x0 was evaluated
    if predicted_start is not None:
        q, x = _onto_constraints(constraints, predicted_start)
        energy, gradient, hessian = _full_evaluation(objective, x)
        usable = bool(np.isfinite(energy) and np.isfinite(gradient).all())
        modelled = None
        if start_energy is None and usable and hessian is not None and force_scale_floor is not None \
                and _max_norm(constraints.reduce_gradient(gradient)) <= force_scale_floor:
            modelled = _modelled_start(constraints, x0, x, energy, gradient, hessian)
        if modelled is not None and modelled[1] <= force_scale_floor:
            start_energy = modelled[0]
        elif start_energy is None:
            start_energy, start_gradient = _energy_and_gradient(objective, constraints.x_from_q(constraints.q_from_x(x0)))
            start_residual = _max_norm(constraints.reduce_gradient(start_gradient))
        predicted = usable and energy < start_energy
    if not predicted:
        q, x = _onto_constraints(constraints, x0)
        energy, gradient, hessian = _full_evaluation(objective, x)
    reduced_gradient = constraints.reduce_gradient(gradient)
    residual = _max_norm(reduced_gradient)
    if force_scale_floor is not None:
        scale = max(float(force_scale_floor), residual if start_residual is None else start_residual)
    else:
        scale = residual if force_scale is None else float(force_scale)
    threshold = tolerance * scale
    result = NewtonResult(x=x, q=q, converged=False, reason="", iterations=0, force_scale=scale,
                          threshold=threshold, residuals=[residual], energies=[energy], predicted=predicted)

    def finish(converged: bool, reason: str) -> NewtonResult:
        result.x, result.q, result.converged, result.reason = x, q, converged, reason
        result.seconds = time.perf_counter() - start_time
        result.factorisations = getattr(linear_solver, "factorisations", 0) - factorisations_before
        result.krylov_iterations = getattr(linear_solver, "krylov_iterations", 0) - krylov_before
        return result

    if not (np.isfinite(energy) and np.isfinite(residual)):
        return finish(False, "the starting configuration has a non-finite energy or gradient (inverted elements?)")
    exact_refused = False
    lowest_residual, steps_above_lowest = residual, 0

    while True:
        if residual <= threshold:
            return finish(True, f"residual {residual:.3g} ≤ {threshold:.3g} after {result.iterations} iterations")
        if max_steps_without_progress is not None and steps_above_lowest >= max_steps_without_progress:
            result.stalled = True
            return finish(False, f"stalled: the residual stayed above its lowest {lowest_residual:.3g} for "
                                 f"{steps_above_lowest} Newton steps (now {residual:.3g} > {threshold:.3g})")
        if result.iterations >= max_iterations:
            result.out_of_iterations = True
            return finish(False, f"no convergence in {max_iterations} iterations: residual {residual:.3g} "
                                 f"> {threshold:.3g}")
        if before_step is not None:
            relaxed, relaxation_iterations, relaxation_work = before_step(x)
            result.region_iterations += relaxation_iterations
            result.region_work += relaxation_work
            if relaxed is not None:
                q = constraints.q_from_x(relaxed)
                x = constraints.x_from_q(q)
                energy, gradient, hessian = _full_evaluation(objective, x)
                reduced_gradient = constraints.reduce_gradient(gradient)
                residual = _max_norm(reduced_gradient)
                if residual <= threshold:
                    continue
        forcing = min(max_forcing, residual / scale) if scale > 0.0 else 0.0
        expect_last = False
        if oversolve_guard is not None and forcing > 0.0:
            forcing = min(max_forcing, max(forcing, oversolve_guard * threshold / residual))
            expect_last = forcing * residual <= EXPECTED_LAST_STEP * threshold
        try:
            direction, shift, exact_refused = _newton_direction(
                objective, constraints, linear_solver, x, reduced_gradient, forcing, result, exact_refused, hessian)
        except HessianNotPositiveDefinite as error:
            return finish(False, str(error))

        slope = float(reduced_gradient @ direction)       # < 0: a descent direction
        step = 1.0
        for _ in range(MAX_STEP_HALVINGS + 1):
            trial_q = q + step * direction
            trial_x = constraints.x_from_q(trial_q)
            trial_energy, trial_gradient, trial_hessian = _line_search_evaluation(
                objective, trial_x, full_step=step == 1.0, with_hessian=not expect_last)
            if np.isfinite(trial_energy) and trial_energy <= energy + ARMIJO_FRACTION * step * slope:
                break
            step *= 0.5
        else:
            return finish(False, f"the line search found no sufficient energy decrease along the Newton direction "
                                 f"(residual {residual:.3g} > {threshold:.3g}): the tolerance may be below the "
                                 f"energy's round-off, or the energy is not smooth here")

        q, x, energy, hessian = trial_q, trial_x, trial_energy, trial_hessian
        reduced_gradient = constraints.reduce_gradient(
            trial_gradient if trial_gradient is not None else objective.gradient(x))
        residual = _max_norm(reduced_gradient)
        result.iterations += 1
        result.energies.append(energy)
        result.residuals.append(residual)
        result.shifts.append(shift)
        if residual < lowest_residual:
            lowest_residual, steps_above_lowest = residual, 0
        else:
            steps_above_lowest += 1
        if not np.isfinite(residual):
            return finish(False, "the gradient became non-finite")


class NewtonSolver:
    """Quasi-static / implicit-step Newton solver on CHOLMOD, kept for a whole animation so the
    symbolic analysis is shared by every iteration of every frame."""

    def __init__(self, objective: Objective, constraints: BoneConstraints,
                 tolerance: float = DEFAULT_TOLERANCE, max_iterations: int = DEFAULT_MAX_ITERATIONS):
        self.objective = objective
        self.constraints = constraints
        self.tolerance = tolerance
        self.max_iterations = max_iterations
        self.max_steps_without_progress: int | None = None     # see newton_minimise
        self.oversolve_guard: float | None = None               # see newton_minimise
        self._linear_solver = CholmodLinearSolver()

    @property
    def linear_solver(self) -> CholmodLinearSolver:
        """The CHOLMOD solver whose factor the Newton steps keep (inverse physics factorises
        the equilibrium Hessian with it, which also refreshes the preconditioner)."""
        return self._linear_solver

    @property
    def symbolic_analyses(self) -> int:
        """How many CHOLMOD symbolic analyses this solver has done (1 while the pattern holds)."""
        return self._linear_solver.symbolic_analyses

    def solve(self, x0: np.ndarray, skull_transform: np.ndarray | None = None,
              jaw_transform: np.ndarray | None = None, force_scale: float | None = None,
              max_forcing: float = MAX_FORCING, tolerance: float | None = None,
              before_step: Callable[[np.ndarray], tuple[np.ndarray | None, int, float]] | None = None,
              predicted_start: np.ndarray | None = None, start_energy: float | None = None,
              force_scale_floor: float | None = None) -> NewtonResult:
        """Solve one frame, warm-started from x0 ((3N,) or (N, 3)): with the bone transforms
        given the constraints move to that frame first, otherwise their current frame is used.
        `tolerance`: this solve's, instead of the solver's; `before_step`, `predicted_start`,
        `start_energy`, `force_scale_floor`: see newton_minimise."""
        self.constraints.use_frame(skull_transform, jaw_transform)
        return newton_minimise(self.objective, self.constraints, self._linear_solver, x0,
                               tolerance=self.tolerance if tolerance is None else tolerance,
                               max_iterations=self.max_iterations,
                               force_scale=force_scale, max_forcing=max_forcing,
                               max_steps_without_progress=self.max_steps_without_progress,
                               before_step=before_step, predicted_start=predicted_start,
                               start_energy=start_energy, oversolve_guard=self.oversolve_guard,
                               force_scale_floor=force_scale_floor)
