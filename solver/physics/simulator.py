"""Forward physics of a face model, frame by frame (paper 000 §4 Eq. 3, §6 "Dynamics").

Each frame minimises, over the node positions left free by the bone constraints,

    E(x) = E_pass + E_act(S)                        co-rotated tissue (corotated.py)
         + [− Σ m_j g·x_j]                          gravity, when enabled
         + [(1/2h²) (x − x̂)ᵀ M (x − x̂)]            backward-Euler inertia, x̂ = x_n + h v_n
         − f_ext·x                                  wind on the skin, held for the frame

with Newton on CHOLMOD (newton.py). Writing a constant external force as the potential
−f·x is the same as Phace's x̂ + h²M⁻¹f_ext shift of the inertia target, and also works
quasi-statically. Plasticity (fat) scales each tet's rest shape; stiffness and density maps
scale μ, λ and the lumped masses; paralysis pulls activations toward the identity.

Collisions (issue 5, contact_response.py, docs/collisions.md): given a collision scene, each time step
alternates the solve with detection. Skin vertices found inside a collider get tangent planes
n · (x_v − p) ≥ 0, enforced by an augmented Lagrangian term added to E (Newton path, default)
or as linear inequalities for IPOPT (``contact_solver="ipopt"``), until nothing penetrates by
more than ``contact_tolerance``. A step with no contact is solved exactly as without a scene.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numba
import numpy as np
import scipy.linalg

from ..collisions.contacts import BonePose
from ..geometry import triangle_normals_areas
from .activation import apply_paralysis
from .bones import bone_transforms
from .constraints import BoneConstraints
from .contact_response import (CONTACT_STIFFNESS_FACTOR, DEFAULT_CONTACT_MARGIN, DEFAULT_CONTACT_TOLERANCE,
                               DEFAULT_MAX_CONTACT_ROUNDS, ContactResponse)
from .contact_region import DEFAULT_REGION_RINGS, ContactRegion
from .corotated import STIFFNESS_UNIT_PA, CorotatedElasticity, TetMaterial
from .frame_objective import FrameObjective
from .maps import MaterialMaps
from .newton import MAX_FORCING, NewtonSolver
from .simple_energies import STANDARD_GRAVITY, GravityEnergy, InertiaEnergy
from .skin_embedding import SkinEmbedding, SkinOverBone, SlidingNodes

AIR_DENSITY = 1.2           # kg/m³
WIND_DRAG_COEFFICIENT = 1.0
# Convergence is judged on the reduced force residual relative to the forces that drive the
# frame; this floor (N) keeps "no force at all" frames from demanding a zero residual.
MIN_FORCE_SCALE = 1e-6
# A quasi-static load step before a frame's last is solved to this force residual (relative, as
# SimulationSettings.tolerance).
INTERMEDIATE_LOAD_STEP_TOLERANCE = 1e-3
# ... and its contact rounds (Newton and IPOPT paths) stop once nothing is deeper than this (m). Such a step
# is the continuation's predictor; the frame's last step enforces the contact tolerance. Where a
# vertex left inside goes is decided by its projection region (teeth: only labially), not by its
# depth, so the cap only bounds how far the next step has to push back. On ICT's lip animation
# every predictor step met 3 mm in its first round (no cap at all gave the same frames);
# stopping them at 0.2 mm took 540 Newton iterations for frames 1-6 against 342.
INTERMEDIATE_CONTACT_DEPTH = 3e-3
CONTACT_SOLVERS = ("newton", "ipopt")
# Contact-region relaxations that may fail in a row before a round's solve goes on without them
# (_solve_with_contacts).
MAX_FAILED_RELAXATIONS = 2


@dataclass
class SimulationSettings:
    mu: float = 1.0                     # in units of stiffness_unit (Phace default 1)
    lam: float = 3.0                    # in units of stiffness_unit (Phace default 3)
    stiffness_unit: float = STIFFNESS_UNIT_PA
    gravity: bool = False
    dynamic: bool = False
    fps: float = 24.0
    substeps: int = 1
    wind: Optional[Sequence[float]] = None   # wind velocity (m/s, world axes)
    # Force residual relative to the driving forces. At 1e-4 a replayed demo jawOpen stopped
    # 0.08-0.29 mm short of the equilibrium it was fitted at (the issue allows 0.1 mm); at 1e-5
    # within 0.002 mm, for 1-2 more Newton iterations (quadratic convergence near the end).
    tolerance: float = 1e-5
    max_iterations: int = 50
    # Collisions (used only when the simulator is given a collision scene):
    contact_solver: str = "newton"      # "newton": augmented Lagrangian; "ipopt": linear inequalities
    contact_tolerance: float = DEFAULT_CONTACT_TOLERANCE     # m, largest penetration / plane violation
    max_contact_rounds: int = DEFAULT_MAX_CONTACT_ROUNDS     # solve → detect rounds per time step
    contact_stiffness_factor: float = CONTACT_STIFFNESS_FACTOR   # AL κ over the local tissue stiffness
    contact_margin: float = DEFAULT_CONTACT_MARGIN    # m, predictive planes for vertices this near (0: off)
    # Newton path: before each Newton step of a contact round, the tissue within this many tet
    # rings of its planes is relaxed with the rest of the mesh held (contact_region.py; 0: off).
    contact_region_rings: int = DEFAULT_REGION_RINGS
    # Quasi-static load-step cutback (step()): Newton iterations a frame may take resolving contacts
    # (Newton path) before it is solved again in two load steps (0: never, not even when it fails),
    # and how many times the steps may be halved. ICT's lip animation: the jump from the pressed
    # lips to a pucker with the jaw thrust forward took 402 iterations in 12 rounds as one frame,
    # the other frames 27-94; with this budget that frame took 268 (100 abandoned) and the whole
    # animation 478 instead of 647 (150: 489) (docs/collisions.md).
    load_step_budget: int = 100
    max_load_halvings: int = 2
    # A quasi-static frame whose activations change by more than this (the largest change of an
    # entry of any tet's S since the last frame; the first frame starts from S = I) is solved in
    # equal load steps of at most this change, so that a jump reaches the equilibrium a ramp
    # would. Fitted ICT activations can have two: one Newton solve from the neutral face to
    # jawOpen at weight 1 (largest change 1.0) ended 3.5 mm from where ramps of 2-20 frames end
    # (docs/physics.md, "Two equilibria"). None: every frame in one step.
    max_activation_change_per_load_step: Optional[float] = 0.2
    # The volume floor (volume_floor.py): every tet squeezed below this share J₀ of its rest volume
    # pays κ φ(J), a penalty ½ (J₀ − J)² plus IPC's clamped log barrier, κ = volume_floor_stiffness
    # · λ · V. The co-rotated energy resists crushing only as λ (J − 1)², finite through J = 0:
    # blends of fitted ICT shapes inverted 1–3 tets in 3 of 40 random poses (docs/physics.md,
    # "Energy"). 0: off.
    volume_floor: float = 0.2
    volume_floor_stiffness: float = 50.0
    # Issue 41's three forward shortcuts. They act only on a simulator without a collision scene:
    # in contact rounds the oversolve guard and the factor refresh led ICT's lip frames to another
    # equilibrium 11.7 mm away, and a contact frame is not a smooth motion to extrapolate
    # (docs/benchmarks.md, "Forward physics"). The whole captured performance without collisions
    # played with and without them: docs/benchmarks.md.
    # Quasi-static frames start Newton from the last two frames' motion continued,
    # x_n + (x_n − x_{n−1}), when that has the lower energy (newton_minimise's predicted_start):
    # on a smooth animation the start is then a second-order guess, not a first-order one. ICT
    # expression ramp, 12 frames: 38 → 25 Newton iterations, frames within 0.0004 mm of those
    # started at x_n.
    predict_start: bool = True
    # Newton's last step of a frame is solved only as accurately as the tolerance needs: CG's
    # relative accuracy η ≥ this × the residual to reach / the residual (newton_minimise's
    # oversolve_guard; None: η = residual / force scale alone, which asked the last step for
    # 30–2,500 times the tolerance on ICT frames).
    oversolve_guard: Optional[float] = 0.2
    # Newton's kept factor is refreshed (a factorisation in place of CG) once a CG solve on it
    # took more than this many iterations (linear_solver.CholmodLinearSolver.stale_krylov_iterations;
    # None: only when CG fails at linear_solver.MAX_KRYLOV_ITERATIONS).
    stale_factor_krylov_iterations: Optional[int] = 6

    def __post_init__(self):
        if self.contact_solver not in CONTACT_SOLVERS:
            raise ValueError(f"contact_solver must be one of {', '.join(CONTACT_SOLVERS)}, got {self.contact_solver!r}")
        if self.load_step_budget < 0 or self.max_load_halvings < 0:
            raise ValueError("load_step_budget and max_load_halvings must be ≥ 0")
        if self.max_activation_change_per_load_step is not None and not self.max_activation_change_per_load_step > 0.0:
            raise ValueError("max_activation_change_per_load_step must be positive (or None: no load steps)")
        if not (0.0 <= self.volume_floor < 1.0 and self.volume_floor_stiffness >= 0.0):
            raise ValueError("volume_floor must be a share of the rest volume in [0, 1) (0: off) and "
                             "volume_floor_stiffness ≥ 0")
        if not (self.contact_tolerance > 0.0 and self.max_contact_rounds >= 1 and self.contact_stiffness_factor > 0.0
                and self.contact_margin >= 0.0 and self.contact_region_rings >= 0):
            raise ValueError("contact_tolerance and contact_stiffness_factor must be positive, max_contact_rounds ≥ 1, "
                             "and contact_margin and contact_region_rings ≥ 0")


# SimulationSettings(**WITHOUT_SHORTCUTS): Newton as it was before issue 41's three shortcuts (the
# inverse fit's trial solves, and benchmarks and tests comparing against that solver).
WITHOUT_SHORTCUTS = {"predict_start": False, "oversolve_guard": None, "stale_factor_krylov_iterations": None}


@dataclass
class FrameResult:
    positions: np.ndarray               # (N,3) tet nodes
    converged: bool
    iterations: int
    seconds: float
    reason: str = ""
    factorisations: int = 0             # Cholesky factorisations over the frame's substeps
    krylov_iterations: int = 0          # preconditioned CG iterations that stood in for them
    projected_steps: int = 0            # Newton steps on the projected Hessian (the exact one indefinite)
    region_iterations: int = 0          # Newton iterations of the contact region's relaxations (contact_region.py)
    load_steps: int = 1                 # quasi-static: the parts the frame was solved in (step())
    penetration_depth_max: float = 0.0  # m, deepest skin vertex inside a collider at the end (0: no scene)
    contacts: int = 0                   # contact planes pushing at the end of the frame
    collision_rounds: int = 0           # solve → detect rounds over the frame's substeps
    anchored_vertices: int = 0          # penetrating skin vertices no plane can push (contact_response.MIN_CONTACT_DRIVE)
    anchored_depth_max: float = 0.0     # m, how deep they were before the display projection moved them out
    projected_vertices: int = 0         # displayed-skin vertices the display projection moved out of a collider
    projection_max: float = 0.0         # m, the largest such move (contact_response.ContactResponse.project_displayed)
    bone_limited_vertices: int = 0      # vertices whose plane was held at skin_embedding.MAX_TISSUE_COMPRESSION
    skull_transform: np.ndarray = field(default_factory=lambda: np.eye(4))   # bones' world transforms
    jaw_transform: np.ndarray = field(default_factory=lambda: np.eye(4))     # from rest, this frame


def _max_abs(vector: np.ndarray) -> float:
    return float(np.abs(vector).max(initial=0.0))


def _interpolate_rigid(start: np.ndarray, end: np.ndarray, fraction: float) -> np.ndarray:
    """The rigid transform `fraction` of the way from `start` to `end` (4×4) along the screw
    motion between them: start · exp(fraction · log(start⁻¹ end)). A rotation about a pivot
    stays a rotation about that pivot part of the way, with no drift of the pivot."""
    relative = np.linalg.solve(start, end)
    return start @ np.real(scipy.linalg.expm(fraction * np.real(scipy.linalg.logm(relative))))


@dataclass
class _StepTotals:
    """Counts summed over a frame's steps (and abandoned attempts); the contact figures and bone
    transforms of the last step."""
    iterations: int = 0
    factorisations: int = 0
    krylov_iterations: int = 0
    projected_steps: int = 0
    region_iterations: int = 0
    rounds: int = 0
    converged: bool = True
    reasons: list = field(default_factory=list)
    load_steps: int = 1
    last: object = None
    skull: np.ndarray = field(default_factory=lambda: np.eye(4))
    jaw: np.ndarray = field(default_factory=lambda: np.eye(4))
    _SUMMED = ("iterations", "factorisations", "krylov_iterations", "projected_steps", "region_iterations")

    def add(self, result, skull, jaw_transform) -> None:
        """One solved step (a NewtonResult or ContactOutcome)."""
        for name in self._SUMMED:
            setattr(self, name, getattr(self, name) + getattr(result, name))
        self.rounds += getattr(result, "rounds", 0)
        self.converged &= bool(result.converged)
        if not result.converged:
            self.reasons.append(result.reason)
        self.last, self.skull, self.jaw = result, skull, jaw_transform

    def absorb(self, attempt: "_StepTotals") -> None:
        """A whole attempt: its counts are added, its outcome replaces the earlier one's."""
        for name in (*self._SUMMED, "rounds"):
            setattr(self, name, getattr(self, name) + getattr(attempt, name))
        self.converged, self.reasons, self.load_steps = attempt.converged, attempt.reasons, attempt.load_steps
        self.last, self.skull, self.jaw = attempt.last, attempt.skull, attempt.jaw

    def frame_result(self, positions: np.ndarray, seconds: float) -> FrameResult:
        last = self.last
        # The figure is the deepest vertex of the displayed skin, anchored vertices included
        # (after their projection; how deep they were before it is anchored_depth_max).
        return FrameResult(positions=positions, converged=self.converged, iterations=self.iterations,
                           seconds=seconds, reason="; ".join(self.reasons), factorisations=self.factorisations,
                           krylov_iterations=self.krylov_iterations, projected_steps=self.projected_steps,
                           region_iterations=self.region_iterations, load_steps=self.load_steps,
                           penetration_depth_max=getattr(last, "penetration_depth_max", 0.0),
                           contacts=getattr(last, "contacts", 0), collision_rounds=self.rounds,
                           anchored_vertices=getattr(last, "anchored_vertices", 0),
                           anchored_depth_max=getattr(last, "anchored_depth_max", 0.0),
                           projected_vertices=getattr(last, "projected_vertices", 0),
                           projection_max=getattr(last, "projection_max", 0.0),
                           bone_limited_vertices=getattr(last, "bone_limited_vertices", 0),
                           skull_transform=self.skull, jaw_transform=self.jaw)


class FaceSimulator:
    """Runs frames of one model with fixed maps and settings; keeps the state between frames.

    ``collisions`` (optional): the collision scene, anything with ``detect(skin_positions,
    pose) -> ContactPlanes`` and ``measure(skin_positions, pose) -> (max_depth, count)``
    (solver.collisions.scene.CollisionScene, or collisions.collider_set.ColliderSet of SDF colliders)."""

    def __init__(self, model: dict, settings: SimulationSettings | None = None,
                 overrides: MaterialMaps | None = None, collisions=None):
        self.model = model
        self.settings = settings or SimulationSettings()
        self.overrides = overrides or MaterialMaps()
        o, s = self.overrides, self.settings
        element_count, node_count = len(model["tets"]), len(model["rest_positions"])
        self.elasticity = CorotatedElasticity(model["rest_positions"], model["tets"], rest_scale=o.plastic_scale)
        mu = s.mu * (o.mu_multiplier if o.mu_multiplier is not None else np.ones(element_count))
        lam = s.lam * (o.lambda_multiplier if o.lambda_multiplier is not None else np.ones(element_count))
        self.neutral_material = TetMaterial.from_model(model, mu=mu, lam=lam, stiffness_unit=s.stiffness_unit)
        multiplier = o.node_mass_multiplier if o.node_mass_multiplier is not None else np.ones(node_count)
        self.node_mass = np.asarray(model["node_mass"], dtype=np.float64) * multiplier
        self.constraints = BoneConstraints(model)
        self.objective = FrameObjective(self.elasticity, self.node_mass)
        self._rest_gradient_parts = None        # (key, muscle tets' passes, the others' rest gradient)
        self.objective.volume_floor_share, self.objective.volume_floor_stiffness = s.volume_floor, s.volume_floor_stiffness
        self.solver = NewtonSolver(self.objective, self.constraints, tolerance=s.tolerance,
                                   max_iterations=s.max_iterations)
        # Gravity points down in the rig's rest pose: the head frame's up axis at rest.
        self.gravity_force = np.zeros(3 * node_count)
        if s.gravity:       # down the head frame's up axis; linear in x, so only its force is kept
            down = -np.asarray(model["head_frame"])[1]
            self.gravity_force = -GravityEnergy(self.node_mass, STANDARD_GRAVITY * down).gradient(
                np.zeros(3 * node_count))
        self._skin_triangles = np.asarray(model["skin_triangles"])
        self.skin_embedding = SkinEmbedding.from_model(model)
        self.collisions = collisions
        self.contact_response = None
        if collisions is not None:
            self.contact_response = ContactResponse(
                collisions, self.skin_embedding, self._node_stiffness(),
                self.constraints.dofs_per_node > 0, tolerance=s.contact_tolerance,
                max_rounds=s.max_contact_rounds, stiffness_factor=s.contact_stiffness_factor,
                hessian_layout=self.elasticity, margin=s.contact_margin,
                skin_over_bone=SkinOverBone.from_model(model), sliding=SlidingNodes.from_constraints(self.constraints))
        if self.contact_response is None:        # the shortcuts are for frames without contact (above)
            self.solver.oversolve_guard = s.oversolve_guard
            self.solver.linear_solver.stale_krylov_iterations = s.stale_factor_krylov_iterations
        self.contact_region = None
        if collisions is not None and s.contact_region_rings > 0:
            self.contact_region = ContactRegion(model, self.elasticity, self.skin_embedding,
                                                rings=s.contact_region_rings, max_iterations=s.max_iterations)
        self.return_to_rest()

    def _node_stiffness(self) -> np.ndarray:
        """(N,) each node's local stiffness (N/m): the mean diagonal of its 3×3 block of the
        rest elasticity Hessian (neutral activation, this simulator's maps). The contact
        penalty is scaled from it, so it follows the tissue's μ, λ and tet size."""
        rest = np.asarray(self.model["rest_positions"], dtype=np.float64).reshape(-1)
        hessian = self.elasticity.hessian(rest, self.neutral_material, project=True)
        return hessian.data[self.elasticity.diagonal_entry_positions].reshape(-1, 3).mean(axis=1)

    # ------------------------------------------------------------------ skin and forces

    def skin_positions(self, positions=None) -> np.ndarray:
        """(V,3) rig vertices carried by the tets through the barycentric embedding."""
        nodes = (self.positions if positions is None else np.asarray(positions)).reshape(-1, 3)
        return self.skin_embedding.skin_positions(nodes)

    def displayed_skin(self, skin_offset: Optional[np.ndarray] = None) -> np.ndarray:
        """(V,3) the skin as shown after the last step: embedded vertices + `skin_offset` (the
        offset that step was given, e.g. the shape-key detail) + the contact response's
        projection of anchored vertices (zero without a collision scene)."""
        skin = self.skin_positions() + self.skin_correction
        return skin if skin_offset is None else skin + skin_offset

    def wind_force(self, positions=None) -> np.ndarray:
        """(3N,) nodal force of the wind: pressure ½ρ|w|²·C on skin triangles facing into it,
        along the wind, spread to the skin vertices and through the embedding to the nodes."""
        node_count = self.elasticity.node_count
        if self.settings.wind is None or not np.any(self.settings.wind):
            return np.zeros(3 * node_count)
        wind = np.asarray(self.settings.wind, dtype=np.float64)
        speed = np.linalg.norm(wind)
        direction = wind / speed
        normals, areas = triangle_normals_areas(self.skin_positions(positions), self._skin_triangles)
        facing = np.clip(-(normals @ direction), 0.0, None)
        pressure = 0.5 * AIR_DENSITY * WIND_DRAG_COEFFICIENT * speed ** 2
        triangle_force = (pressure * areas * facing)[:, None] * direction
        embedding = self.skin_embedding
        vertex_force = np.zeros((len(embedding.weights), 3))
        for corner in range(3):
            np.add.at(vertex_force, self._skin_triangles[:, corner], triangle_force / 3.0)
        node_force = np.zeros((node_count, 3))
        for k in range(4):
            np.add.at(node_force, embedding.nodes[:, k], embedding.weights[:, k, None] * vertex_force)
        return node_force.reshape(-1)

    # ------------------------------------------------------------------ frames

    def material_for(self, activation: np.ndarray) -> TetMaterial:
        """The neutral material with this frame's activations, paralysis applied."""
        o = self.overrides
        if o.paralysed_muscles or o.paralysis is not None:
            activation = apply_paralysis(activation, self.model, paralysed_muscles=o.paralysed_muscles,
                                         paralysis_per_tet=o.paralysis)
        return dataclasses.replace(self.neutral_material, activation=activation)

    def _rest_gradient(self, material: TetMaterial) -> np.ndarray:
        """∂E_tissue/∂x at the rest positions with `material`, a neutral-material one but for its
        activations. Only tets with muscle (active weight > 0) feel the activation, so the sum
        over the others is the neutral one's, kept; each frame pays a pass over the muscle tets
        alone (14 % of ICT's) instead of all of them."""
        rest = np.asarray(self.model["rest_positions"], dtype=np.float64).reshape(-1)
        # Colour passes are safe on any thread count, a single pass only on one: kept per kind.
        key = (self.neutral_material, numba.get_num_threads() > 1)
        parts = self._rest_gradient_parts
        if parts is None or parts[0][0] is not key[0] or parts[0][1] != key[1]:
            muscle = self.elasticity.passes_over(self.neutral_material.active_weight > 0.0)
            without_muscle = self.elasticity.gradient(rest, self.neutral_material) \
                - self.elasticity.gradient(rest, self.neutral_material, passes=muscle)
            self._rest_gradient_parts = parts = (key, muscle, without_muscle)
        _, muscle, without_muscle = parts
        return without_muscle + self.elasticity.gradient(rest, material, passes=muscle)

    def step(self, activation: np.ndarray, jaw=np.zeros(5), head_transform=np.eye(4),
             frame: Optional[int] = None, skin_offset: Optional[np.ndarray] = None) -> FrameResult:
        """Advance one frame (1/fps s, in `substeps` backward-Euler steps when dynamic).
        `frame` is the animation frame index the colliders are placed at (default: one more
        than the last step's, from 0). `skin_offset` (V,3), with a collision scene: what will
        be added to the simulated skin for display (the shape-key detail residual); the contact
        response keeps the skin plus this offset out of the colliders (displayed_skin).

        Across the substeps the bones move steadily from the previous frame's pose to this
        one's (the head transform along the screw motion between the two, the jaw parameters
        linearly), so substeps refine the time step without turning the bone motion into a
        jump at the first substep and a stop for the rest of the frame.

        A quasi-static frame that does not converge — or, with collisions, whose solve (of the
        frame, or of one of its load steps) is still resolving contacts after
        ``load_step_budget`` Newton iterations — is solved again from the last frame's state in
        2, then 4 (``max_load_halvings``) load steps: the activations and the
        bones move in equal parts from the last frame's to this one's, each part solved to
        equilibrium. The last of those tries keeps the budget for each part, so a frame that
        converges in none ends unconverged after a bounded effort. The frame's counts include the
        abandoned attempts; ``load_steps`` says how many parts the result took. Colliders other
        than the teeth stay at this frame's place."""
        started = time.perf_counter()
        frame_start = self.positions.copy()
        head = np.asarray(head_transform, float)
        jaw = np.asarray(jaw, float)
        activation = np.asarray(activation, dtype=np.float64)
        frame_index = self.frame_index if frame is None else int(frame)
        self._skin_offset = None if skin_offset is None else np.asarray(skin_offset, dtype=np.float64).reshape(-1, 3)
        settings = self.settings
        totals = _StepTotals()
        if settings.dynamic:
            totals.absorb(self._advance(activation, head, jaw, frame_index, settings.substeps,
                                        interpolate_activation=False))
        else:
            halvings = settings.max_load_halvings if settings.load_step_budget > 0 else 0
            # The last try's parts keep the budget too, so that a frame ends, unconverged,
            # after a bounded effort (at most 1 + 2 + 4 times its parts' budgets, each
            # overrun by at most one contact round) instead of grinding through every
            # contact round; its parts go on after one fails, for the frame must end somewhere.
            budget = settings.load_step_budget or None
            parts = self._load_steps_for(activation)
            saved = self._state()
            for halving in range(halvings + 1):
                if halving:
                    self._restore(saved)
                last_try = halving == halvings
                attempt = self._advance(activation, head, jaw, frame_index, parts * 2 ** halving,
                                        interpolate_activation=True, budget=budget, abandon=not last_try)
                totals.absorb(attempt)
                if attempt.converged or last_try:
                    break
        self._previous_head, self._previous_jaw, self._previous_activation = head.copy(), jaw.copy(), activation.copy()
        self._previous_frame_start = frame_start
        self.frame_index = frame_index + 1
        return totals.frame_result(self.positions.reshape(-1, 3).copy(), time.perf_counter() - started)

    def return_to_rest(self) -> None:
        """Start over from the rest state: nodes at rest and still, the last frame's bones and
        activations neutral (the next frame's load steps and substeps start there), no display
        correction, no contact multipliers and no Newton factor carried; the next step() is frame 0."""
        self.positions = np.asarray(self.model["rest_positions"], dtype=np.float64).reshape(-1).copy()
        self.velocity = np.zeros_like(self.positions)
        self._previous_head, self._previous_jaw = np.eye(4), np.zeros(5)
        self._previous_activation: Optional[np.ndarray] = None     # (M,3,3); None: neutral (S = I)
        # Where the last frame started (x_{n−1}; None before a frame or after a rest): with the
        # positions it ended at, the motion the next frame's predicted start continues.
        self._previous_frame_start: Optional[np.ndarray] = None
        self.frame_index = 0            # the frame the next step() solves (colliders move per frame)
        # What the last step's contact response added to the displayed skin: vertices moved out
        # of the colliders (contact_response.ContactResponse.project_displayed), (V,3) m.
        self.skin_correction = np.zeros((len(self.skin_embedding.weights), 3))
        if self.contact_response is not None:
            self.contact_response.forget_carried()
        # And no Newton preconditioner carried either: from rest the solver finds what a fresh
        # one finds, so an equilibrium inverse physics stores on replay is the one a new
        # animation of that pose reaches (CholmodLinearSolver.forget_numeric_factor).
        self.solver.linear_solver.forget_numeric_factor()

    def snapshot(self) -> dict:
        """What the next step() starts from, as plain arrays (checkpoint.py saves it after every
        frame of a bake, so a cancelled or crashed bake resumes where it stopped): the nodes and
        their velocity, the last frame's bones and activations, where the last frame started (the
        predicted start continues that motion), the displayed skin's contact correction and the
        contact multipliers carried into the next frame."""
        keys, multipliers = (np.zeros(0, np.int64), np.zeros(0)) if self.contact_response is None \
            else self.contact_response.carried()
        state = {"positions": self.positions, "velocity": self.velocity, "skin_correction": self.skin_correction,
                 "previous_head": self._previous_head, "previous_jaw": self._previous_jaw,
                 "frame_index": np.array(self.frame_index, np.int64), "carried_keys": np.asarray(keys, np.int64),
                 "carried_multipliers": np.asarray(multipliers, np.float64)}
        if self._previous_activation is not None:
            state["previous_activation"] = self._previous_activation
        if self._previous_frame_start is not None:
            state["previous_frame_start"] = self._previous_frame_start
        return {name: np.array(value) for name, value in state.items()}

    def resume(self, state: dict, factor: Optional[dict] = None) -> None:
        """Continue from a `snapshot()` and, when given, the Newton solver's kept factor
        (linear_solver.CholmodLinearSolver.kept_factor), which preconditions the next frames as it did
        when the snapshot was taken."""
        self.return_to_rest()
        if np.shape(state["positions"]) != self.positions.shape or \
                np.shape(state["skin_correction"]) != self.skin_correction.shape:
            raise ValueError("the saved state does not belong to this model (node or skin vertex count differs)")
        self.positions = np.array(state["positions"], np.float64)
        self.velocity = np.array(state["velocity"], np.float64)
        self.skin_correction = np.array(state["skin_correction"], np.float64)
        self._previous_head = np.array(state["previous_head"], np.float64)
        self._previous_jaw = np.array(state["previous_jaw"], np.float64)
        previous = state.get("previous_activation")
        self._previous_activation = None if previous is None else np.array(previous, np.float64)
        previous_start = state.get("previous_frame_start")
        self._previous_frame_start = None if previous_start is None else np.array(previous_start, np.float64)
        self.frame_index = int(state["frame_index"])
        if self.contact_response is not None:
            self.contact_response.carry((np.array(state["carried_keys"], np.int64),
                                         np.array(state["carried_multipliers"], np.float64)))
        if factor is not None:
            self.solver.linear_solver.restore_factor(factor)

    def _load_steps_for(self, activation: np.ndarray) -> int:
        """The quasi-static load steps of a frame moving to these activations
        (SimulationSettings.max_activation_change_per_load_step)."""
        limit = self.settings.max_activation_change_per_load_step
        if limit is None:
            return 1
        previous = np.eye(3) if self._previous_activation is None else self._previous_activation
        change = float(np.abs(activation - previous).max(initial=0.0))
        return max(1, int(np.ceil(change / limit - 1e-9)))

    def _state(self) -> tuple:
        carried = None if self.contact_response is None else self.contact_response.carried()
        return self.positions.copy(), self.velocity.copy(), self.skin_correction.copy(), carried

    def _restore(self, state: tuple) -> None:
        positions, velocity, correction, carried = state
        self.positions, self.velocity, self.skin_correction = positions.copy(), velocity.copy(), correction.copy()
        if carried is not None:
            self.contact_response.carry(carried)

    def _advance(self, activation, head, jaw, frame_index: int, parts: int, interpolate_activation: bool,
                 budget: Optional[int] = None, abandon: bool = False) -> _StepTotals:
        """Solve the frame in `parts` steps, the bones (and, with `interpolate_activation`, the
        activations) moving in equal parts from the last frame's values; this attempt's totals.
        `budget`: Newton iterations a part's contact rounds may take; `abandon`: stop at the
        first part that does not converge (an attempt that will be retried in more parts)."""
        attempt = _StepTotals()
        previous_activation = self._previous_activation
        for part in range(1, parts + 1):
            fraction = part / parts
            last = part == parts
            part_head = head if last else _interpolate_rigid(self._previous_head, head, fraction)
            part_jaw = jaw if last else (1.0 - fraction) * self._previous_jaw + fraction * jaw
            part_activation = activation
            if interpolate_activation and not last:
                start = np.eye(3) if previous_activation is None else previous_activation
                part_activation = (1.0 - fraction) * start + fraction * activation
            if interpolate_activation or part == 1:
                self.objective.material = self.material_for(part_activation)
                # The activation's pull at rest: the force scale of every step with this material.
                self._activation_force = np.abs(self._rest_gradient(self.objective.material)).max(initial=0.0)
            skull, jaw_transform = bone_transforms(part_head, self.model["jaw_frame"], part_jaw)
            # A load step before the last is only the next one's start, close enough to stay on
            # the branch (a continuation's corrector), and its contacts close enough to keep the
            # lips on their side of the teeth; the frame's own tolerances are the last's.
            tolerance = None if last or self.settings.dynamic else \
                max(self.settings.tolerance, INTERMEDIATE_LOAD_STEP_TOLERANCE)
            # The predicted start continues the last frame's motion: only for a frame solved in one
            # part (a load-stepped or retried frame is a jump, not a smooth motion).
            predict = parts == 1 and self.settings.predict_start and not self.settings.dynamic \
                and self._previous_frame_start is not None
            result = self._solve_step(skull, jaw_transform, BonePose(skull, jaw_transform, frame_index), budget,
                                      tolerance, predict)
            attempt.add(result, skull, jaw_transform)
            correction = getattr(result, "skin_correction", None)
            self.skin_correction = np.zeros_like(self.skin_correction) if correction is None else correction
            if not result.converged and not last and abandon:
                break       # this attempt is abandoned: no use solving its later parts
        attempt.load_steps = parts
        return attempt

    def _solve_step(self, skull, jaw_transform, pose: BonePose, budget: Optional[int] = None,
                    tolerance: Optional[float] = None, predict: bool = False):
        objective = self.objective
        objective.constant_force = self.gravity_force + self.wind_force()
        previous = self.positions.copy()
        time_step = 1.0 / (self.settings.fps * self.settings.substeps)
        objective.inertia = InertiaEnergy(self.node_mass, previous + time_step * self.velocity, time_step) \
            if self.settings.dynamic else None
        if self.contact_response is None:
            # The start's out-of-balance force joins the scale inside the solve, from the pass it
            # makes at its start anyway (or from the prediction's model of it: newton_minimise).
            prediction = 2.0 * previous - self._previous_frame_start if predict else None
            result = self.solver.solve(previous, skull_transform=skull, jaw_transform=jaw_transform,
                                       force_scale_floor=self._driving_force(), tolerance=tolerance,
                                       predicted_start=prediction)
        else:
            force_scale = self.force_scale(previous, skull, jaw_transform)
            result = self._solve_with_contacts(previous, skull, jaw_transform, pose, force_scale, budget, tolerance)
        self.positions = np.asarray(result.x, dtype=np.float64).reshape(-1).copy()
        if self.settings.dynamic:
            self.velocity = (self.positions - previous) / time_step
        return result

    def _solve_with_contacts(self, previous, skull, jaw_transform, pose, force_scale, budget=None, tolerance=None):
        """One time step alternating solve and detection (contact_response.ContactResponse); detection
        starts from the previous positions moved onto this step's bone constraints. With a
        `tolerance` (a load step before the last) the solves (Newton or IPOPT) use it and the
        rounds stop at INTERMEDIATE_CONTACT_DEPTH (or the contact tolerance, if larger)."""
        def newton(x0, scale):
            # Contact rounds take inexact steps too: CG is preconditioned by the kept factor
            # modified to the planes active now (linear_solver.LowRankTerm, CHOLMOD update/downdate).
            # Solved exactly instead, ICT's 7-frame lip animation at tolerance 1e-5 took 1,188
            # Newton iterations and 2,293 factorisations (frame 5 unconverged after 20 rounds);
            # with the modified factor 336 iterations, 297 factorisations, every frame converged.
            relax = None
            contact = self.objective.contact
            if self.contact_region is not None and contact is not None and contact.count:
                # A relaxation that does not converge is thrown away. After MAX_FAILED_RELAXATIONS
                # in a row the rest of the round's solve goes without: retried before every step,
                # ICT frame 18 of a lip roll with both smiles took 370 s for 119 whole-mesh
                # iterations, most of it in relaxations that ran their 50 iterations and failed
                # (docs/collisions.md). One failure alone is no sign: after a whole-mesh step the
                # next relaxation often converges. Their iterations count, thrown away or not, and
                # toward the load-step budget in whole-mesh iterations' worth (the region's share
                # of the tets), so that a frame whose time goes into relaxations is cut back too.
                failures = 0

                def relax(x):
                    nonlocal failures
                    if failures >= MAX_FAILED_RELAXATIONS:
                        return None, 0, 0.0
                    relaxation = self.contact_region.relax(
                        self.objective, x, skull, jaw_transform, force_scale=scale,
                        tolerance=self.settings.tolerance if tolerance is None else tolerance)
                    converged = relaxation.result.converged
                    failures = 0 if converged else failures + 1
                    iterations = relaxation.result.iterations
                    return (relaxation.x if converged else None), iterations, \
                        iterations * relaxation.tet_count / len(self.elasticity.tets)
            return self.solver.solve(x0, skull_transform=skull, jaw_transform=jaw_transform, force_scale=scale,
                                     max_forcing=MAX_FORCING, tolerance=tolerance, before_step=relax)

        constraints = self.constraints
        constraints.use_frame(skull, jaw_transform)
        moved = constraints.x_from_q(constraints.q_from_x(previous))
        offset = self._skin_offset
        contact_tolerance = None if tolerance is None else \
            max(INTERMEDIATE_CONTACT_DEPTH, self.settings.contact_tolerance)
        if self.settings.contact_solver == "ipopt":
            return self.contact_response.solve_ipopt(
                self.objective, constraints, newton, previous, pose, force_scale,
                tolerance=self.settings.tolerance if tolerance is None else tolerance, detect_at=moved,
                skin_offset=offset, contact_tolerance=contact_tolerance)
        return self.contact_response.solve_newton(self.objective, newton, previous, pose, force_scale,
                                                  detect_at=moved, skin_offset=offset, iteration_budget=budget,
                                                  tolerance=contact_tolerance)

    def force_scale(self, start, skull, jaw_transform) -> float:
        """The force (N) a step from `start` with the bones at (skull, jaw_transform) measures
        its Newton residual against: the largest of the forces that drive the frame —
        activation pull at rest, gravity and wind, and the out-of-balance force the step
        starts with once the bones have moved to this frame (what a head or jaw motion, a
        released stretch or the momentum of a dynamic step put on the tissue). Without that
        last term a frame driven only by bone motion or inertia had the MIN_FORCE_SCALE floor
        as its scale, a threshold at round-off level that Newton cannot reach: converged frames
        were reported unconverged after 50 iterations. Frames without contact take the last
        term inside their Newton solve instead (force_scale_floor), from the pass it starts with."""
        constraints = self.constraints
        constraints.use_frame(skull, jaw_transform)
        projected_start = constraints.x_from_q(constraints.q_from_x(start))
        _, start_gradient = self.objective.energy_and_gradient(projected_start)     # the bits the solve starts with
        start_force = _max_abs(constraints.reduce_gradient(start_gradient))
        return max(self._driving_force(), start_force)

    def _driving_force(self) -> float:
        """The force scale's terms that do not depend on where the step starts: the activation's
        pull at rest, gravity and wind, and the MIN_FORCE_SCALE floor."""
        return max(self._activation_force, _max_abs(self.objective.constant_force), MIN_FORCE_SCALE)
