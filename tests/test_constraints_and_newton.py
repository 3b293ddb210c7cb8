"""Bone transforms, the pin/slide reduction x = P q + c, the CHOLMOD Newton solver and IPOPT.

The objectives here (a quadratic, a mass-spring truss under gravity, a double well) are small
test problems for the solvers, not shipped energies: each assembles its Hessian on a pattern
fixed at construction, as the real energies do.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from solver.physics import linear_solver, newton
from solver.physics.bones import (bone_transforms, jaw_transform, rigid_transform, rotation_about_x,
                                  rotation_about_y)
from solver.physics.constraints import BoneConstraints
from solver.physics.ipopt_solve import solve_with_ipopt, tangent_plane_inequalities
from baselines.spsolve_newton import solve_reference_spsolve
from solver.physics.newton import NewtonSolver

GRAVITY = np.array([0.0, 0.0, -9.81])
SPACING = 0.01                   # m between grid nodes
SPRING_STIFFNESS = 20.0          # N/m
NODE_MASS = 1e-3                 # kg


# ----------------------------------------------------------------------------- test problems

class FixedPatternAssembly:
    """Sums (row, col, value) triplets into a CSR matrix whose pattern is fixed at construction."""

    def __init__(self, rows, cols, size):
        keys, self.slot = np.unique(np.asarray(rows) * size + np.asarray(cols), return_inverse=True)
        self.indices = (keys % size).astype(np.int32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(keys // size, minlength=size))]).astype(np.int32)
        self.size = size

    def matrix(self, values):
        data = np.bincount(self.slot, weights=values, minlength=len(self.indices))
        return sp.csr_matrix((data, self.indices, self.indptr), shape=(self.size, self.size))


def block_grid(shape=(5, 5, 4)):
    """Grid nodes SPACING apart and truss edges joining every pair of corners of each cell,
    which makes the spring network rigid."""
    index = np.arange(np.prod(shape)).reshape(shape)
    nodes = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), axis=-1).reshape(-1, 3) * SPACING

    def cell_corner(corner):
        return index[tuple(slice(c, n - 1 + c) for c, n in zip(corner, shape))].ravel()

    edges = [np.stack([cell_corner(a), cell_corner(b)], axis=1)
             for a, b in itertools.combinations(list(np.ndindex(2, 2, 2)), 2)]
    return nodes, np.unique(np.sort(np.concatenate(edges), axis=1), axis=0)


class SpringNetwork:
    """E = Σ ½ k (ℓ − L)² − Σ m g · x over a truss, with the exact Hessian: it is indefinite
    where compressed springs buckle sideways, which the solver's diagonal shift handles, and
    being exact it gives Newton's quadratic convergence (a clamped, projected Hessian would
    converge only linearly near the answer)."""

    def __init__(self, rest, edges):
        self.edges = edges
        self.rest_lengths = np.linalg.norm(rest[edges[:, 1]] - rest[edges[:, 0]], axis=1)
        self.node_count = len(rest)
        dofs = (3 * edges[:, :, None] + np.arange(3)).reshape(-1, 6)
        diagonal = np.arange(3 * self.node_count)
        self.assembly = FixedPatternAssembly(
            np.concatenate([np.repeat(dofs, 6, axis=1).ravel(), diagonal]),
            np.concatenate([np.tile(dofs, (1, 6)).ravel(), diagonal]), 3 * self.node_count)
        self.gravity_force = np.tile(NODE_MASS * GRAVITY, self.node_count)

    def _springs(self, x):
        positions = x.reshape(-1, 3)
        delta = positions[self.edges[:, 1]] - positions[self.edges[:, 0]]
        length = np.linalg.norm(delta, axis=1)
        return length, delta / length[:, None]

    def energy(self, x):
        length, _ = self._springs(x)
        return 0.5 * SPRING_STIFFNESS * np.sum((length - self.rest_lengths) ** 2) - self.gravity_force @ x

    def gradient(self, x):
        length, unit = self._springs(x)
        force = (SPRING_STIFFNESS * (length - self.rest_lengths))[:, None] * unit
        gradient = np.zeros((self.node_count, 3))
        np.add.at(gradient, self.edges[:, 1], force)
        np.add.at(gradient, self.edges[:, 0], -force)
        return gradient.ravel() - self.gravity_force

    def hessian(self, x):
        length, unit = self._springs(x)
        transverse = 1.0 - self.rest_lengths / length
        outer = unit[:, :, None] * unit[:, None, :]
        block = SPRING_STIFFNESS * (transverse[:, None, None] * (np.eye(3) - outer) + outer)
        element = np.block([[block, -block], [-block, block]])
        return self.assembly.matrix(np.concatenate([element.ravel(), np.zeros(3 * self.node_count)]))


class Quadratic:
    """E = ½ (x − target)ᵀ K (x − target) with a fixed SPD K."""

    def __init__(self, stiffness, target):
        self.stiffness, self.target = stiffness, target

    def energy(self, x):
        return 0.5 * (x - self.target) @ (self.stiffness @ (x - self.target))

    def gradient(self, x):
        return self.stiffness @ (x - self.target)

    def hessian(self, x):
        return self.stiffness


class DoubleWell:
    """E = Σ ((x − rest)² − s²)² per coordinate: negative curvature near rest, minima at ±s."""

    def __init__(self, rest, width=0.002):
        self.rest, self.width = rest.ravel(), width
        self.assembly = FixedPatternAssembly(np.arange(self.rest.size), np.arange(self.rest.size), self.rest.size)

    def energy(self, x):
        return np.sum(((x - self.rest) ** 2 - self.width ** 2) ** 2)

    def gradient(self, x):
        u = x - self.rest
        return 4.0 * u * (u ** 2 - self.width ** 2)

    def hessian(self, x):
        u = x - self.rest
        return self.assembly.matrix(12.0 * u ** 2 - 4.0 * self.width ** 2)


def grid_model(shape=(5, 5, 4)):
    """The grid as a model: the bottom layer pinned (skull for x < 2 cells, jaw beyond), the
    front face (y = 0) sliding on the skull and the back face sliding on the jaw."""
    nodes, edges = block_grid(shape)
    cell = np.rint(nodes / SPACING).astype(int)
    pinned = np.flatnonzero(cell[:, 2] == 0)
    front = np.flatnonzero((cell[:, 1] == 0) & (cell[:, 2] > 0))
    back = np.flatnonzero((cell[:, 1] == shape[1] - 1) & (cell[:, 2] > 0))
    model = {
        "rest_positions": nodes,
        "pin_nodes": pinned, "pin_bone": (cell[pinned, 0] >= 2).astype(np.int64),
        "slide_nodes": np.concatenate([front, back]),
        "slide_bone": np.concatenate([np.zeros(len(front), np.int64), np.ones(len(back), np.int64)]),
        # from the bone into the tissue: the front bone lies at y < 0, the back one beyond the grid
        "slide_normals": np.concatenate([np.tile([0.0, 1.0, 0.0], (len(front), 1)),
                                         np.tile([0.0, -1.0, 0.0], (len(back), 1))]),
    }
    return model, edges


def demo_jaw_frame():
    """A jaw frame in the demo head's axes (Blender: +X left, +Z up, face toward −Y)."""
    frame = np.eye(4)
    frame[:3, :3] = np.column_stack([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    frame[:3, 3] = [0.0, -0.002, -0.045]
    return frame


HEAD_POSE = rigid_transform(rotation_about_y(0.15) @ rotation_about_x(-0.1), [0.01, -0.02, 0.005])
JAW_PARAMETERS = np.array([0.08, 0.02, 0.0, -0.001, 0.002])


@pytest.fixture(scope="module")
def grid():
    model, edges = grid_model()
    constraints = BoneConstraints(model)
    skull, jaw = bone_transforms(HEAD_POSE, demo_jaw_frame(), JAW_PARAMETERS)
    return model, edges, constraints, skull, jaw


def apply(transform, points):
    return points @ transform[:3, :3].T + transform[:3, 3]


# ----------------------------------------------------------------------------- bones

def test_jaw_transform_at_zero_is_identity():
    np.testing.assert_allclose(jaw_transform(demo_jaw_frame(), np.zeros(5)), np.eye(4), atol=1e-15)
    skull, jaw = bone_transforms(HEAD_POSE, demo_jaw_frame(), np.zeros(5))
    np.testing.assert_allclose(skull, HEAD_POSE)
    np.testing.assert_allclose(jaw, HEAD_POSE, atol=1e-15)


def test_jaw_parameters_signs_and_rigidity():
    frame = demo_jaw_frame()
    origin, left, up, forward = frame[:3, 3], frame[:3, 0], frame[:3, 1], frame[:3, 2]
    chin = origin + 0.09 * forward - 0.07 * up
    opened = apply(jaw_transform(frame, [0.2, 0, 0, 0, 0]), chin)
    assert (opened - chin) @ up < -0.01                 # positive b[0] opens: the chin drops
    turned = apply(jaw_transform(frame, [0, 0.1, 0, 0, 0]), chin)
    assert (turned - chin) @ left > 0.005               # positive b[1] turns the chin to the left
    np.testing.assert_allclose(apply(jaw_transform(frame, [0.3, 0.1, 0, 0, 0]), origin), origin, atol=1e-15)
    moved = apply(jaw_transform(frame, [0, 0, 0.001, 0.002, 0.003]), chin)
    np.testing.assert_allclose(moved - chin, 0.001 * left + 0.002 * up + 0.003 * forward, atol=1e-15)
    rotation = jaw_transform(frame, [0.3, -0.2, 0.01, 0.0, 0.0])[:3, :3]
    np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-14)
    assert np.linalg.det(rotation) == pytest.approx(1.0)


def test_jaw_follows_the_head():
    frame = demo_jaw_frame()
    skull, jaw = bone_transforms(HEAD_POSE, frame, JAW_PARAMETERS)
    np.testing.assert_allclose(jaw, HEAD_POSE @ jaw_transform(frame, JAW_PARAMETERS))


# ----------------------------------------------------------------------------- reduction

def test_reduction_pins_and_slides_for_random_q(grid):
    model, _, constraints, skull, jaw = grid
    P, c = constraints.reduction(skull, jaw)
    n_pin, n_slide = len(model["pin_nodes"]), len(model["slide_nodes"])
    assert P.shape == (3 * len(model["rest_positions"]), constraints.reduced_size)
    assert constraints.reduced_size == 3 * (len(model["rest_positions"]) - n_pin - n_slide) + 2 * n_slide

    rng = np.random.default_rng(3)
    positions = constraints.x_from_q(rng.normal(scale=0.01, size=constraints.reduced_size)).reshape(-1, 3)
    bones = np.stack([skull, jaw])
    for bone in (0, 1):
        pinned = model["pin_nodes"][model["pin_bone"] == bone]
        np.testing.assert_allclose(positions[pinned], apply(bones[bone], model["rest_positions"][pinned]),
                                   rtol=0, atol=1e-15)
        sliding = model["slide_bone"] == bone
        anchors = apply(bones[bone], model["rest_positions"][model["slide_nodes"][sliding]])
        normals = model["slide_normals"][sliding] @ bones[bone][:3, :3].T
        offsets = positions[model["slide_nodes"][sliding]] - anchors
        assert np.abs(np.einsum("ij,ij->i", offsets, normals)).max() < 1e-15
        assert np.linalg.norm(offsets, axis=1).min() > 0.0      # they do move within the plane
    planes = constraints.sliding_planes()
    np.testing.assert_allclose(planes[1][model["slide_bone"] == 1],
                               model["slide_normals"][model["slide_bone"] == 1] @ jaw[:3, :3].T)


def test_q_from_x_projects_onto_the_constraints(grid):
    _, _, constraints, skull, jaw = grid
    constraints.reduction(skull, jaw)
    q = np.random.default_rng(4).normal(scale=0.01, size=constraints.reduced_size)
    np.testing.assert_allclose(constraints.q_from_x(constraints.x_from_q(q)), q, atol=1e-15)
    # A configuration from before the bones moved lands on the new planes and pins.
    rest_q = constraints.q_from_x(constraints.rest_positions)
    projected = constraints.x_from_q(rest_q).reshape(-1, 3)
    anchors, normals = constraints.sliding_planes()
    assert np.abs(np.einsum("ij,ij->i", projected[constraints.slide_nodes] - anchors, normals)).max() < 1e-15


def test_patterns_are_fixed_across_frames(grid):
    model, edges, constraints, skull, jaw = grid
    springs = SpringNetwork(model["rest_positions"], edges)
    hessian = springs.hessian(model["rest_positions"].ravel() + 1e-3)
    frames = [(np.eye(4), np.eye(4)), (skull, jaw),
              # quarter turns make some basis components exactly zero: the pattern must not notice
              (rigid_transform(rotation_about_x(np.pi / 2), [0, 0, 0]), rigid_transform(rotation_about_y(np.pi / 2), [0, 0, 0]))]
    patterns, reduced_patterns = [], []
    for frame in frames:
        P, _ = constraints.reduction(*frame)
        reduced = constraints.reduce_hessian(hessian)
        np.testing.assert_allclose(reduced.toarray(), (P.T @ hessian @ P).toarray(), rtol=0, atol=1e-12)
        patterns.append((P.indptr.copy(), P.indices.copy()))
        reduced_patterns.append((reduced.indptr.copy(), reduced.indices.copy()))
    for pattern, reduced_pattern in zip(patterns[1:], reduced_patterns[1:]):
        for array, first in zip(pattern + reduced_pattern, patterns[0] + reduced_patterns[0]):
            np.testing.assert_array_equal(array, first)
    assert (P.data == 0.0).any()        # the explicit zeros stayed in the pattern


# ----------------------------------------------------------------------------- Newton

def test_newton_solves_a_quadratic_in_one_step(grid):
    model, edges, constraints, skull, jaw = grid
    rest = model["rest_positions"].ravel()
    stiffness = (SpringNetwork(model["rest_positions"], edges).hessian(rest)
                 + sp.identity(rest.size, format="csr")).tocsr()
    target = rest + np.random.default_rng(5).normal(scale=0.002, size=rest.size)
    result = NewtonSolver(Quadratic(stiffness, target), constraints, tolerance=1e-10).solve(rest, skull, jaw)
    P, c = constraints.P, constraints.c
    expected = sp.linalg.spsolve((P.T @ stiffness @ P).tocsc(), P.T @ (stiffness @ (target - c)))
    assert result.converged and result.iterations == 1, result.reason
    np.testing.assert_allclose(result.q, expected, rtol=0, atol=1e-12)


def test_newton_converges_on_springs_with_monotone_energy(grid, monkeypatch):
    model, edges, constraints, skull, jaw = grid
    analyses = []
    real_cholesky = linear_solver.SparseCholesky
    monkeypatch.setattr(linear_solver, "SparseCholesky", lambda *args, **kw: analyses.append(1) or real_cholesky(*args, **kw))

    solver = NewtonSolver(SpringNetwork(model["rest_positions"], edges), constraints, tolerance=1e-8)
    x = model["rest_positions"].ravel()
    for head_turn in (0.0, 0.1, 0.2):       # three frames, bones moving, warm-started
        frame_skull, frame_jaw = bone_transforms(HEAD_POSE @ rigid_transform(rotation_about_x(head_turn), [0, 0, 0]),
                                                 demo_jaw_frame(), JAW_PARAMETERS * (1 + head_turn))
        result = solver.solve(x, frame_skull, frame_jaw)
        assert result.converged, result.reason
        assert result.iterations >= 2
        assert np.all(np.diff(result.energies) <= 0.0)
        assert result.residuals[-1] <= result.threshold
        assert len(result.residuals) == len(result.energies) == result.iterations + 1
        x = result.x
    assert len(analyses) == 1 and solver.symbolic_analyses == 1

    sagged = result.x.reshape(-1, 3) - apply(frame_skull, model["rest_positions"])
    assert sagged[:, 2].min() < -0.001               # gravity did something
    anchors, normals = constraints.sliding_planes()
    offsets = result.x.reshape(-1, 3)[model["slide_nodes"]] - anchors
    assert np.abs(np.einsum("ij,ij->i", offsets, normals)).max() < 1e-15

    warm = solver.solve(result.x, frame_skull, frame_jaw, force_scale=result.force_scale)
    assert warm.converged and warm.iterations <= 1, warm.reason
    assert len(analyses) == 1


def test_unconverged_frame_is_reported(grid):
    model, edges, constraints, skull, jaw = grid
    result = NewtonSolver(SpringNetwork(model["rest_positions"], edges), constraints, max_iterations=1).solve(
        model["rest_positions"].ravel(), skull, jaw)
    assert not result.converged
    assert result.iterations == 1
    assert "no convergence in 1 iterations" in result.reason and result.out_of_iterations
    assert result.residuals[-1] > result.threshold


def test_indefinite_hessian_is_shifted_and_recorded(grid):
    model, _, constraints, skull, jaw = grid
    constraints.reduction(np.eye(4), np.eye(4))
    objective = DoubleWell(model["rest_positions"])
    start = constraints.x_from_q(constraints.q_from_x(model["rest_positions"].ravel() + 0.0002))
    result = NewtonSolver(objective, constraints, tolerance=1e-9).solve(start)
    assert result.converged, result.reason
    assert result.shifts[0] > 0.0                       # negative curvature at the start
    assert result.shifts[-1] == 0.0                     # plain Newton near the minimum
    assert np.all(np.diff(result.energies) <= 0.0)


def test_a_solve_whose_residual_stays_above_its_lowest_is_stopped_as_stalled(grid):
    """From near the double well's hill top the residual grows for two steps while the energy
    falls (the solve leaves for a minimum): a limit of two steps without progress stops it
    there, unconverged and `stalled`; a limit of three lets it converge."""
    model, _, constraints, _, _ = grid
    constraints.reduction(np.eye(4), np.eye(4))
    start = constraints.x_from_q(constraints.q_from_x(model["rest_positions"].ravel() + 0.0002))
    solver = NewtonSolver(DoubleWell(model["rest_positions"]), constraints, tolerance=1e-9)
    free = solver.solve(start)
    assert free.converged and not free.stalled
    assert free.residuals[1] > free.residuals[0] and free.residuals[2] > free.residuals[1]
    solver.max_steps_without_progress = 2
    stalled = solver.solve(start)
    assert not stalled.converged and stalled.stalled and stalled.iterations == 2
    assert stalled.reason.startswith("stalled") and not stalled.out_of_iterations
    assert np.all(np.diff(stalled.energies) <= 0.0)
    solver.max_steps_without_progress = 3
    assert solver.solve(start).iterations == free.iterations


def test_spsolve_baseline_gives_the_same_answer(grid):
    model, edges, constraints, skull, jaw = grid
    springs = SpringNetwork(model["rest_positions"], edges)
    rest = model["rest_positions"].ravel()
    cholmod_result = NewtonSolver(springs, constraints, tolerance=1e-9).solve(rest, skull, jaw)
    baseline = solve_reference_spsolve(springs, constraints, rest, skull, jaw, tolerance=1e-9)
    assert cholmod_result.converged and baseline.converged
    # Not the same steps: CHOLMOD starts its shifts from the last one that worked, spsolve from 0.
    assert abs(baseline.iterations - cholmod_result.iterations) <= 2
    np.testing.assert_allclose(baseline.x, cholmod_result.x, rtol=0, atol=1e-10)


def test_later_frames_reuse_the_factor_through_preconditioned_cg(grid):
    """Warm-started frames solve their Newton steps by CG preconditioned with the first
    frame's factor, to the same answer as fresh factorisations at every step."""
    model, edges, constraints, _, _ = grid
    springs = SpringNetwork(model["rest_positions"], edges)
    solver = NewtonSolver(springs, constraints, tolerance=1e-10)
    x = model["rest_positions"].ravel()
    for head_turn in (0.0, 0.05, 0.1):
        frame_skull, frame_jaw = bone_transforms(HEAD_POSE @ rigid_transform(rotation_about_x(head_turn), [0, 0, 0]),
                                                 demo_jaw_frame(), JAW_PARAMETERS * (1 + head_turn))
        result = solver.solve(x, frame_skull, frame_jaw)
        exact = solve_reference_spsolve(springs, constraints, x, frame_skull, frame_jaw, tolerance=1e-10)
        assert result.converged and exact.converged, result.reason
        np.testing.assert_allclose(result.x, exact.x, rtol=0, atol=1e-9)
        assert np.all(np.diff(result.energies) <= 0.0)
        x = result.x
    assert result.krylov_iterations > 0
    assert result.factorisations < result.iterations


def test_preconditioned_cg_solves_and_refuses_what_it_cannot():
    rng = np.random.default_rng(7)
    basis = np.linalg.qr(rng.normal(size=(30, 30)))[0]
    spd = sp.csr_matrix(basis @ np.diag(np.linspace(1.0, 50.0, 30)) @ basis.T)
    rhs = rng.normal(size=30)
    jacobi = 1.0 / spd.diagonal()
    solution, iterations = linear_solver.preconditioned_conjugate_gradients(spd, rhs, lambda r: jacobi * r, 1e-10, 100)
    assert np.linalg.norm(spd @ solution - rhs) <= 1e-10 * np.linalg.norm(rhs)
    assert 1 <= iterations <= 30
    assert linear_solver.preconditioned_conjugate_gradients(spd, rhs, lambda r: jacobi * r, 1e-10, 2) == (None, 2)
    indefinite = sp.csr_matrix(basis @ np.diag(np.linspace(-5.0, 50.0, 30)) @ basis.T)
    direction, _ = linear_solver.preconditioned_conjugate_gradients(indefinite, rhs, lambda r: r, 1e-10, 100)
    assert direction is None                   # negative curvature met: the caller factorises


def test_a_krylov_solve_says_how_it_ended_and_keeps_the_factor():
    """krylov_solve never factorises: it solves the shifted matrix by CG on the kept factor, or
    says why not (no factor yet, negative curvature, too many iterations); the factor stays."""
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.normal(size=(20, 20)))[0]
    spd = sp.csc_matrix(basis @ np.diag(np.linspace(1.0, 10.0, 20)) @ basis.T)
    rhs = rng.normal(size=20)
    solver = linear_solver.CholmodLinearSolver()
    assert solver.krylov_solve(spd, rhs, 1e-8) == (None, linear_solver.NO_FACTOR)
    solver.factorise(spd)
    nearby = sp.csc_matrix(basis @ np.diag(np.linspace(1.0, 12.0, 20)) @ basis.T)
    direction, outcome = solver.krylov_solve(nearby, rhs, 1e-10, shift=0.5)
    assert outcome == linear_solver.SOLVED
    np.testing.assert_allclose((nearby.toarray() + 0.5 * np.eye(20)) @ direction, rhs, atol=1e-8)
    indefinite = sp.csc_matrix(basis @ np.diag(np.linspace(-1.0, 10.0, 20)) @ basis.T)
    assert solver.krylov_solve(indefinite, rhs, 1e-10, shift=0.01) == (None, linear_solver.NEGATIVE_CURVATURE)
    distant = sp.csc_matrix(basis @ np.diag(np.geomspace(1e-3, 1e3, 20)) @ basis.T)
    assert solver.krylov_solve(distant, rhs, 1e-12) == (None, linear_solver.TOO_MANY_ITERATIONS)
    assert solver.factorisations == 1 and solver._has_numeric_factor
    np.testing.assert_allclose(spd @ solver.factor_copy().solve(rhs), rhs, atol=1e-10)


# ----------------------------------------------------------------------------- IPOPT

def test_ipopt_matches_newton_without_inequalities(grid):
    model, edges, constraints, skull, jaw = grid
    springs = SpringNetwork(model["rest_positions"], edges)
    rest = model["rest_positions"].ravel()
    newton_result = NewtonSolver(springs, constraints, tolerance=1e-10).solve(rest, skull, jaw)
    ipopt_result = solve_with_ipopt(springs, constraints, rest, skull_transform=skull, jaw_transform=jaw,
                                    tolerance=1e-10)
    assert ipopt_result.converged, ipopt_result.reason
    np.testing.assert_allclose(ipopt_result.x, newton_result.x, rtol=0, atol=1e-9)
    assert ipopt_result.energy == pytest.approx(newton_result.energies[-1], rel=1e-12, abs=1e-15)


def test_ipopt_keeps_nodes_on_the_allowed_side_of_planes(grid):
    model, edges, constraints, skull, jaw = grid
    springs = SpringNetwork(model["rest_positions"], edges)
    rest = model["rest_positions"].ravel()
    unconstrained = NewtonSolver(springs, constraints, tolerance=1e-10).solve(rest, skull, jaw)
    up = -GRAVITY / np.linalg.norm(GRAVITY)
    sag = (unconstrained.x.reshape(-1, 3) - apply(skull, model["rest_positions"])) @ up
    free_nodes = np.flatnonzero(constraints.dofs_per_node == 3)
    planes = []
    for node in (free_nodes[np.argmin(sag[free_nodes])], model["slide_nodes"][np.argmin(sag[model["slide_nodes"]])]):
        assert sag[node] < -0.0005
        # a floor half way down the node's free sag: it has to stop on it
        planes.append((node, up, unconstrained.x.reshape(-1, 3)[node] - 0.5 * sag[node] * up))
    pinned_node = model["pin_nodes"][0]
    result = solve_with_ipopt(springs, constraints, rest, planes + [(pinned_node, up, np.zeros(3))],
                              skull_transform=skull, jaw_transform=jaw, tolerance=1e-9)
    assert result.converged, result.reason
    assert list(result.inequalities.skipped_pinned_nodes) == [pinned_node]
    positions = result.x.reshape(-1, 3)
    for node, normal, point in planes:
        clearance = (positions[node] - point) @ normal
        assert -1e-8 <= clearance < 1e-6                # on the allowed side, resting on the plane
    assert result.energy > unconstrained.energies[-1]


def test_tangent_plane_inequalities_map_through_P(grid):
    model, _, constraints, skull, jaw = grid
    constraints.reduction(skull, jaw)
    rng = np.random.default_rng(6)
    nodes = np.concatenate([model["slide_nodes"][:3], np.flatnonzero(constraints.dofs_per_node == 3)[:3]])
    planes = [(node, rng.normal(size=3), rng.normal(scale=0.01, size=3)) for node in nodes]
    inequalities = tangent_plane_inequalities(constraints, planes)
    q = rng.normal(scale=0.01, size=constraints.reduced_size)
    positions = constraints.x_from_q(q).reshape(-1, 3)
    direct = [(positions[node] - point) @ normal for node, normal, point in planes]
    np.testing.assert_allclose(inequalities.matrix @ q - inequalities.lower, direct, rtol=0, atol=1e-15)


# ----------------------------------------------------------------------------- the demo head

@pytest.fixture(scope="module")
def demo_model():
    from solver.demo_head import make_demo_rig
    from solver.model_builder.builder import BuildOptions, build_model
    return build_model(make_demo_rig(), BuildOptions(target_tets=3000))


def test_reduction_on_the_demo_head(demo_model):
    constraints = BoneConstraints(demo_model)
    node_count = len(demo_model["rest_positions"])
    pins, slides = len(demo_model["pin_nodes"]), len(demo_model["slide_nodes"])
    assert pins > 0 and slides > 0
    skull, jaw = bone_transforms(np.eye(4), demo_model["jaw_frame"], [0.25, 0.0, 0.0, 0.0, 0.0])
    P, c = constraints.reduction(skull, jaw)
    assert P.shape == (3 * node_count, 3 * (node_count - pins - slides) + 2 * slides)
    assert c.shape == (3 * node_count,)
    entries_per_row = np.diff(P.indptr)
    assert (entries_per_row == 0).sum() == 3 * pins
    assert (entries_per_row == 2).sum() == 3 * slides
    assert (entries_per_row == 1).sum() == 3 * (node_count - pins - slides)

    # Opening the jaw drops the chin and the pinned mandible along the head's up axis.
    up = demo_model["head_frame"][1]
    names = list(demo_model["landmark_names"])
    chin = demo_model["landmark_positions"][names.index("chin")]
    assert (apply(jaw, chin) - chin) @ up < -0.005
    jaw_pins = demo_model["pin_nodes"][demo_model["pin_bone"] == 1]
    drop = (c.reshape(-1, 3)[jaw_pins] - demo_model["rest_positions"][jaw_pins]) @ up
    assert drop.mean() < -0.003
    skull_pins = demo_model["pin_nodes"][demo_model["pin_bone"] == 0]
    np.testing.assert_allclose(c.reshape(-1, 3)[skull_pins], demo_model["rest_positions"][skull_pins])

    # Pᵀ H P on the tet pattern equals the product and keeps its pattern as the jaw moves.
    tets = demo_model["tets"]
    dofs = (3 * tets[:, :, None] + np.arange(3)).reshape(-1, 12)
    values = np.random.default_rng(7).normal(size=(len(tets), 12, 12))
    hessian = sp.csr_matrix(((values @ values.transpose(0, 2, 1)).ravel(),
                             (np.repeat(dofs, 12, axis=1).ravel(), np.tile(dofs, (1, 12)).ravel())),
                            shape=(3 * node_count, 3 * node_count))
    reduced = constraints.reduce_hessian(hessian)
    np.testing.assert_allclose(reduced.toarray(), (P.T @ hessian @ P).toarray(), rtol=0, atol=1e-10)
    constraints.reduction(*bone_transforms(np.eye(4), demo_model["jaw_frame"], [0.1, 0.05, 0.0, 0.001, 0.0]))
    moved = constraints.reduce_hessian(hessian)
    np.testing.assert_array_equal(moved.indptr, reduced.indptr)
    np.testing.assert_array_equal(moved.indices, reduced.indices)


def test_a_shifted_factorisation_starts_the_next_one_just_below_its_shift():
    """An indefinite matrix needs a diagonal shift. The first factorisation climbs to it from 0
    tenfold; the next starts a tenth below the shift that worked and needs two tries, not the
    whole climb again. Once the matrix is definite the start falls tenfold a call back to 0."""
    indefinite = sp.csc_matrix(np.diag([1.0, 2.0, -1e-3]))
    solver = linear_solver.CholmodLinearSolver()
    first = solver.factorise(indefinite)
    climb = solver.factorisations
    assert first > 1e-3 and climb > 5
    assert solver.factorise(indefinite) == first and solver.factorisations - climb == 2
    definite = sp.csc_matrix(np.diag([1.0, 2.0, 3.0]))
    shifts = [solver.factorise(definite) for _ in range(8)]
    assert shifts[0] == pytest.approx(first / 10) and shifts[-1] == 0.0
    assert all(later <= earlier for earlier, later in zip(shifts, shifts[1:]))


def test_a_kept_factor_is_modified_by_the_low_rank_columns_that_changed():
    """A matrix A + Σ c cᵀ whose columns switch between solves: CG is preconditioned by the kept
    factor modified (CHOLMOD update/downdate) from the columns it holds to the current ones,
    which is exact when A has not changed, so CG takes one iteration; an unchanged set of
    columns modifies nothing."""
    rng = np.random.default_rng(3)
    size = 40
    # Dense, so that every matrix below has the same pattern (one symbolic analysis).
    factor_of_base = rng.normal(size=(size, size))
    base = sp.csc_matrix(factor_of_base @ factor_of_base.T + np.eye(size))

    # Ten columns of five entries each, with stiff values, as contact planes are.
    column_entries = [(rng.choice(size, 5, replace=False), 30.0 * rng.normal(size=5)) for _ in range(10)]

    def term(columns):
        keys = tuple(f"column {index}" for index in columns)
        values = np.zeros((size, len(columns)))
        for position, index in enumerate(columns):
            values[column_entries[index][0], position] = column_entries[index][1]
        return linear_solver.LowRankTerm(sp.csc_matrix(values), keys)

    first, second = term([0, 1, 2, 3]), term([2, 3, 4, 5, 6])
    solver = linear_solver.CholmodLinearSolver()
    with_first = sp.csc_matrix((base + first.columns @ first.columns.T).toarray())
    solver.factorise(with_first, first)
    with_second = sp.csc_matrix((base + second.columns @ second.columns.T).toarray())
    rhs = rng.normal(size=size)
    direction, shift = solver.solve(with_second, rhs, 1e-10, second)
    assert shift == 0.0 and solver.factorisations == 1
    assert solver.krylov_iterations == 1 and solver.low_rank_modifications == 1
    np.testing.assert_allclose(with_second @ direction, rhs, atol=1e-9 * np.abs(rhs).max())
    solver.solve(with_second, rhs, 1e-10, second)               # the same columns: nothing to modify
    assert solver.low_rank_modifications == 1 and solver.krylov_iterations == 2
    # Back to no columns: everything is downdated, still exact.
    direction, _ = solver.solve(base, rhs, 1e-10, None)
    assert solver.low_rank_modifications == 2 and solver.krylov_iterations == 3
    np.testing.assert_allclose(base @ direction, rhs, atol=1e-9 * np.abs(rhs).max())
    # A fresh factorisation holds its own columns and drops the modified copy.
    solver.factorise(with_first, first)
    direction, _ = solver.solve(with_first, rhs, 1e-10, first)
    assert solver.low_rank_modifications == 2 and solver.krylov_iterations == 4


def test_a_solve_limited_to_given_shifts_tries_only_those():
    """Newton's exact Hessian may be shifted only a little before the projected one takes over:
    with `shifts` the solver tries exactly those, one factorisation each, and says so when none
    makes the matrix definite; the kept factor is then gone (no stale preconditioner)."""
    rhs = np.ones(3)
    solver = linear_solver.CholmodLinearSolver()
    mild = sp.csc_matrix(np.diag([1.0, 2.0, -1e-3]))
    direction, shift = solver.solve(mild, rhs, shifts=(0.0, 1e-2))
    assert shift == 1e-2 and solver.factorisations == 2
    np.testing.assert_allclose(direction, rhs / (mild.diagonal() + 1e-2))
    strong = sp.csc_matrix(np.diag([1.0, 2.0, -1.0]))
    with pytest.raises(linear_solver.HessianNotPositiveDefinite):
        solver.solve(strong, rhs, 0.1, shifts=(0.0, 1e-2))
    assert solver.factorisations == 4 and not solver._has_numeric_factor


def test_an_exact_hessian_with_a_projected_fallback_tries_no_shift_then_only_shifts_from_the_smallest():
    """Between no shift and the largest the exact Hessian may take, only shifts from
    MIN_EXACT_SHIFT_RELATIVE of its mean diagonal up are tried (smaller ones never made an ICT
    Hessian definite, each a failed factorisation); after a shifted factorisation the next
    sequence starts a tenth below that shift, without the unshifted try."""
    matrix = sp.csc_matrix(np.diag([1.0, 2.0, -3.0]))       # mean |diagonal| 2
    smallest = newton.MIN_EXACT_SHIFT_RELATIVE

    def shifts(last_shift, first_relative=smallest):
        return list(itertools.islice(linear_solver.shift_sequence(matrix, last_shift, first_relative), 3))

    assert smallest < newton.MAX_EXACT_SHIFT_RELATIVE
    assert shifts(0.0) == [0.0, 2 * smallest, pytest.approx(20 * smallest)]
    assert shifts(20 * smallest) == [pytest.approx(2 * smallest), pytest.approx(20 * smallest),
                                     pytest.approx(200 * smallest)]
    assert shifts(10 * smallest) == [0.0, 2 * smallest, pytest.approx(20 * smallest)]
    assert shifts(0.0, linear_solver.FIRST_SHIFT_RELATIVE)[:2] == [0.0, 2 * linear_solver.FIRST_SHIFT_RELATIVE]
