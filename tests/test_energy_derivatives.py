"""Derivative tests shared by every registered energy (ipc-toolkit style), plus element-level
checks of the co-rotated kernels and the properties specific to the co-rotated energy."""
import dataclasses
import itertools
import zlib

import numpy as np
import pytest
import scipy.sparse

from solver.physics.corotated import (
    CorotatedElasticity,
    TetMaterial,
    corotated_element_energies,
    corotated_element_gradients,
    corotated_element_hessians,
    corotated_energy,
)
from energy_registry import REGISTERED_ENERGIES, random_activations, random_rotations
from solver.physics.simple_energies import STANDARD_GRAVITY, GravityEnergy, InertiaEnergy

EDGE = 0.01                         # m: test meshes have 1 cm edges, like a face model's tets
STEP = 1e-6 * EDGE                  # central-difference step in positions
DERIVATIVE_TOLERANCE = 1e-5         # relative error of finite-difference derivatives
PSD_TOLERANCE = 1e-8                # smallest eigenvalue ≥ −PSD_TOLERANCE · largest |eigenvalue|
INVARIANCE_TOLERANCE = 1e-10


# ---------------------------------------------------------------------------
# Meshes and configurations


def single_tet():
    return EDGE * np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]]), np.array([[0, 1, 2, 3]])


def cube_of_tets(cells=2):
    """A cube of cells³ voxels, each split into the 6 tets of the Kuhn triangulation (conforming)."""
    axis = np.arange(cells + 1)
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), axis=-1).reshape(-1, 3)
    index = lambda corner: (corner[..., 0] * (cells + 1) + corner[..., 1]) * (cells + 1) + corner[..., 2]  # noqa: E731
    tets = []
    for origin in itertools.product(range(cells), repeat=3):
        for order in itertools.permutations(range(3)):
            corner = np.array(origin)
            path = [corner.copy()]
            for axis_index in order:
                corner[axis_index] += 1
                path.append(corner.copy())
            tets.append(index(np.array(path)))
    tets = np.array(tets)
    positions = EDGE * grid.astype(float)
    edges = positions[tets[:, 1:]] - positions[tets[:, :1]]
    negative = np.linalg.det(edges) < 0
    tets[negative] = tets[negative][:, [0, 2, 1, 3]]
    return positions, tets


MESHES = {"single_tet": single_tet(), "cube_2x2x2": cube_of_tets(2)}


def deformation_gradient_determinants(rest_positions, tets, x):
    return np.linalg.det(CorotatedElasticity(rest_positions, tets).deformation_gradients(x))


def deformed(rest_positions, tets, configuration, rng):
    """Positions for one of the test configurations: a rigid motion of a linear map A of the
    rest shape plus per-node noise. 'inverted' reflects every tet (det F ≈ −0.6),
    'near_degenerate' flattens every tet (det F ≈ 1e-3)."""
    rotation = random_rotations(rng, 1)[0]
    if configuration == "random":
        linear, noise = np.eye(3) + 0.2 * rng.standard_normal((3, 3)), 0.1
    elif configuration == "inverted":
        linear, noise = np.diag([1.1, 0.9, -0.6]), 0.03
    elif configuration == "near_degenerate":
        linear, noise = np.diag([1.1, 0.9, 1e-3]), 1e-5
    else:
        raise ValueError(configuration)
    x = rest_positions @ (rotation @ linear).T + EDGE * rng.uniform(-1, 1, 3)
    x += noise * EDGE * rng.standard_normal(x.shape)
    determinants = deformation_gradient_determinants(rest_positions, tets, x)
    if configuration == "inverted":
        assert (determinants < 0).all()
    if configuration == "near_degenerate":
        assert (np.abs(determinants) > 1e-4).all() and (np.abs(determinants) < 1e-2).all()
    return x.reshape(-1)


def finite_difference(function, x, step=STEP):
    """Central differences of a scalar or vector function, one column per coordinate of x."""
    columns = []
    for k in range(len(x)):
        offset = np.zeros_like(x)
        offset[k] = step
        columns.append((np.asarray(function(x + offset)) - np.asarray(function(x - offset))) / (2 * step))
    return np.array(columns).T


def relative_error(approximate, exact, scale=None):
    scale = np.linalg.norm(exact) if scale is None else scale
    return np.linalg.norm(approximate - exact) / scale


# ---------------------------------------------------------------------------
# Every registered energy


CASES = [
    pytest.param(energy, mesh, configuration, id=f"{energy}-{mesh}-{configuration}")
    for energy in REGISTERED_ENERGIES
    for mesh in MESHES
    for configuration in ("random", "inverted", "near_degenerate")
]


@pytest.mark.parametrize("energy_name, mesh_name, configuration", CASES)
def test_derivatives(energy_name, mesh_name, configuration):
    rng = np.random.default_rng(zlib.crc32(f"{energy_name}-{mesh_name}-{configuration}".encode()))
    rest_positions, tets = MESHES[mesh_name]
    registered = REGISTERED_ENERGIES[energy_name](rest_positions, tets, rng)
    term = registered.term
    x = deformed(rest_positions, tets, configuration, rng)

    gradient = term.gradient(x)
    assert gradient.shape == x.shape
    assert np.linalg.norm(gradient) > 0.0
    assert relative_error(finite_difference(term.energy, x), gradient) < DERIVATIVE_TOLERANCE

    hessian = term.hessian(x, project=False)
    assert scipy.sparse.issparse(hessian) and hessian.shape == (len(x), len(x))
    hessian = hessian.toarray()
    # Gravity's Hessian is zero: measure its error against the gradient's scale instead.
    hessian_scale = max(np.linalg.norm(hessian), np.linalg.norm(gradient) / EDGE)
    assert relative_error(finite_difference(term.gradient, x), hessian, hessian_scale) < DERIVATIVE_TOLERANCE
    assert np.abs(hessian - hessian.T).max() <= 1e-12 * hessian_scale

    if registered.rigid_motion_invariant and configuration != "random":
        # Inverted and flattened tets have negative curvature, so the PSD check below has work to do.
        assert np.linalg.eigvalsh(hessian).min() < 0.0

    projected = term.hessian(x, project=True).toarray()
    assert np.abs(projected - projected.T).max() <= 1e-12 * hessian_scale
    eigenvalues = np.linalg.eigvalsh(projected)
    assert eigenvalues.min() >= -PSD_TOLERANCE * max(np.abs(eigenvalues).max(), 1e-300)


@pytest.mark.parametrize("energy_name", list(REGISTERED_ENERGIES))
@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_rigid_motions(energy_name, mesh_name):
    rng = np.random.default_rng(zlib.crc32(f"{energy_name}-{mesh_name}".encode()))
    rest_positions, tets = MESHES[mesh_name]
    registered = REGISTERED_ENERGIES[energy_name](rest_positions, tets, rng)
    if not registered.rigid_motion_invariant:
        pytest.skip(f"{energy_name} is not an internal energy")
    term = registered.term
    x = deformed(rest_positions, tets, "random", rng).reshape(-1, 3)
    energy, gradient = term.energy(x), term.gradient(x).reshape(-1, 3)
    for rotation in random_rotations(rng, 3):
        moved = x @ rotation.T + rng.standard_normal(3) * EDGE
        assert abs(term.energy(moved) - energy) <= INVARIANCE_TOLERANCE * abs(energy)
        # Forces rotate with the body: ∇E(x Rᵀ + t) = ∇E(x) Rᵀ per node.
        assert relative_error(term.gradient(moved).reshape(-1, 3), gradient @ rotation.T) < INVARIANCE_TOLERANCE

    if registered.rest_is_equilibrium:
        for rotation in [np.eye(3), *random_rotations(rng, 3)]:
            moved = rest_positions @ rotation.T + rng.standard_normal(3) * EDGE
            assert abs(term.energy(moved)) <= INVARIANCE_TOLERANCE * abs(energy)
            assert np.linalg.norm(term.gradient(moved)) <= INVARIANCE_TOLERANCE * np.linalg.norm(gradient)


# ---------------------------------------------------------------------------
# Element-level kernels on stacked deformation gradients


def element_test_set(rng, count_per_kind=40):
    """Deformation gradients near identity, large, inverted and nearly flat; random activations
    on two thirds of them (a third keeps S = I, the isotropic path); passive tissue, muscle or
    both."""
    rotations = random_rotations(rng, 4 * count_per_kind)
    stretches = np.concatenate([
        np.exp(0.1 * rng.standard_normal((count_per_kind, 3))),
        np.exp(0.5 * rng.standard_normal((count_per_kind, 3))),
        np.exp(0.3 * rng.standard_normal((count_per_kind, 3))) * [1, 1, -1],
        np.column_stack([np.exp(0.2 * rng.standard_normal((count_per_kind, 2))),
                         1e-3 * rng.uniform(0.5, 2.0, count_per_kind)]),
    ])
    right = random_rotations(rng, len(stretches))
    F = (rotations * stretches[:, None, :]) @ right.transpose(0, 2, 1)
    activation = random_activations(rng, len(F))
    activation[::3] = np.eye(3)
    count = len(F)
    tissue = rng.integers(0, 3, count)  # 0 passive only, 1 muscle only, 2 both
    return dict(F=F, S=activation, passive_weight=rng.uniform(0.1, 2.0, count) * (tissue != 1),
                active_weight=rng.uniform(0.1, 2.0, count) * (tissue != 0),
                mu=rng.uniform(0.5, 2.0, count), lam=rng.uniform(1.0, 10.0, count))


def perturbed_elementwise(function, parameters, step=1e-7):
    """Central differences with respect to every F[a, b] at once (elements are independent):
    (M, 9, …) in the row-major flattening F[a, b] → 3a + b."""
    columns = []
    for flat_index in range(9):
        offset = np.zeros((3, 3))
        offset.flat[flat_index] = step
        plus = function(**dict(parameters, F=parameters["F"] + offset))
        minus = function(**dict(parameters, F=parameters["F"] - offset))
        columns.append((plus - minus) / (2 * step))
    return np.stack(columns, axis=1)


def test_element_kernels_match_finite_differences():
    parameters = element_test_set(np.random.default_rng(7))
    gradients = corotated_element_gradients(**parameters)
    finite_gradients = perturbed_elementwise(corotated_element_energies, parameters)
    scale = np.linalg.norm(gradients.reshape(len(gradients), -1), axis=1) + 1e-12
    assert (np.linalg.norm(finite_gradients - gradients.reshape(-1, 9), axis=1) / scale).max() < DERIVATIVE_TOLERANCE

    hessians = corotated_element_hessians(**parameters)
    finite_hessians = perturbed_elementwise(
        lambda **p: corotated_element_gradients(**p).reshape(-1, 9), parameters).transpose(0, 2, 1)
    scale = np.linalg.norm(hessians, axis=(1, 2))
    assert (np.linalg.norm(finite_hessians - hessians, axis=(1, 2)) / scale).max() < DERIVATIVE_TOLERANCE
    assert np.abs(hessians - hessians.transpose(0, 2, 1)).max() <= 1e-12 * scale.max()


def test_element_projection_clamps_negative_eigenvalues():
    parameters = element_test_set(np.random.default_rng(8))
    exact = corotated_element_hessians(**parameters)
    projected = corotated_element_hessians(**parameters, project=True)
    eigenvalues, eigenvectors = np.linalg.eigh(exact)
    expected = (eigenvectors * np.maximum(eigenvalues, 0.0)[:, None, :]) @ eigenvectors.transpose(0, 2, 1)
    scale = np.abs(eigenvalues).max(axis=1)
    assert (np.abs(projected - expected).max(axis=(1, 2)) / scale).max() < 1e-10
    assert (eigenvalues.min(axis=1) < -1e-3 * scale).any(), "the test set should have indefinite elements"
    assert (np.linalg.eigvalsh(projected).min(axis=1) >= -PSD_TOLERANCE * scale).all()


def test_element_energy_is_invariant_under_rotation_of_the_deformed_shape():
    rng = np.random.default_rng(9)
    parameters = element_test_set(rng)
    rotations = random_rotations(rng, len(parameters["F"]))
    rotated = dict(parameters, F=rotations @ parameters["F"])
    energies = corotated_element_energies(**parameters)
    assert np.allclose(corotated_element_energies(**rotated), energies, rtol=1e-10, atol=0)
    stresses = corotated_element_gradients(**parameters)
    assert np.allclose(corotated_element_gradients(**rotated), rotations @ stresses,
                       rtol=0, atol=1e-10 * np.abs(stresses).max())


def test_element_activation_is_an_equilibrium():
    """Active tissue (no passive weight) deformed to F = Q S for its activation S: zero energy,
    zero stress, and a positive semi-definite exact Hessian (a minimum)."""
    rng = np.random.default_rng(10)
    count = 50
    activation = random_activations(rng, count, volume_spread=0.0)
    assert np.allclose(np.linalg.det(activation), 1.0)
    parameters = dict(F=random_rotations(rng, count) @ activation, S=activation, passive_weight=0.0,
                      active_weight=1.0, mu=1.0, lam=3.0)
    assert np.abs(corotated_element_energies(**parameters)).max() < 1e-24
    assert np.abs(corotated_element_gradients(**parameters)).max() < 1e-12
    hessians = corotated_element_hessians(**parameters)
    assert np.linalg.eigvalsh(hessians).min() > -1e-10


def test_element_rest_and_rotations_are_equilibria_with_neutral_activation():
    rotations = random_rotations(np.random.default_rng(11), 20)
    for passive_weight, active_weight in ((1.0, 0.0), (0.0, 1.0), (0.4, 0.6)):
        parameters = dict(F=rotations, S=np.eye(3), passive_weight=passive_weight, active_weight=active_weight,
                          mu=1.0, lam=3.0)
        assert np.abs(corotated_element_energies(**parameters)).max() < 1e-24
        assert np.abs(corotated_element_gradients(**parameters)).max() < 1e-12


def test_element_kernels_reject_non_finite_input():
    F = np.eye(3)[None].copy()
    F[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        corotated_element_energies(F, np.eye(3), 1.0, 0.0, 1.0, 3.0)


# ---------------------------------------------------------------------------
# The whole-mesh co-rotated energy


def random_material(rng, elasticity, activation=None):
    count = elasticity.element_count
    volume = elasticity.rest_volume / elasticity.volume_scale
    return TetMaterial(passive_weight=0.5 * volume, active_weight=0.5 * volume,
                       activation=random_activations(rng, count) if activation is None else activation,
                       mu=1000.0, lam=3000.0)


def test_single_tet_imposed_activation_is_an_equilibrium():
    rng = np.random.default_rng(12)
    rest_positions, tets = single_tet()
    elasticity = CorotatedElasticity(rest_positions, tets)
    activation = random_activations(rng, 1, volume_spread=0.0)
    material = TetMaterial(passive_weight=[0.0], active_weight=elasticity.rest_volume, activation=activation,
                           mu=1000.0, lam=3000.0)
    force_scale = 1000.0 * elasticity.rest_volume[0] / EDGE
    for rotation in [np.eye(3), random_rotations(rng, 1)[0]]:
        x = rest_positions @ (rotation @ activation[0]).T   # node 0 at the origin: F = Q S
        assert np.allclose(elasticity.deformation_gradients(x)[0], rotation @ activation[0])
        assert abs(elasticity.energy(x, material)) < 1e-12 * force_scale * EDGE
        assert np.abs(elasticity.gradient(x, material)).max() < 1e-10 * force_scale
    # Any other shape costs energy: the activation is the minimum, not just a critical point.
    x = rest_positions @ activation[0].T + 0.05 * EDGE * rng.standard_normal(rest_positions.shape)
    assert elasticity.energy(x, material) > 1e-6 * force_scale * EDGE


def test_mesh_gradient_is_zero_at_rest_with_neutral_activation():
    rest_positions, tets = cube_of_tets(2)
    elasticity = CorotatedElasticity(rest_positions, tets)
    material = random_material(np.random.default_rng(13), elasticity, activation=np.eye(3))
    force_scale = 1000.0 * elasticity.rest_volume.mean() / EDGE
    assert abs(elasticity.energy(rest_positions, material)) < 1e-20
    assert np.abs(elasticity.gradient(rest_positions, material)).max() < 1e-10 * force_scale


def test_hessian_pattern_is_fixed_and_complete():
    rng = np.random.default_rng(14)
    rest_positions, tets = cube_of_tets(2)
    elasticity = CorotatedElasticity(rest_positions, tets)
    material = random_material(rng, elasticity)
    first = elasticity.hessian(deformed(rest_positions, tets, "random", rng), material)
    second = elasticity.hessian(deformed(rest_positions, tets, "inverted", rng), material, project=False)
    for hessian in (first, second):
        assert np.shares_memory(hessian.indptr, elasticity.hessian_indptr)
        assert np.shares_memory(hessian.indices, elasticity.hessian_indices)
        assert hessian.has_canonical_format
    assert not np.shares_memory(first.data, second.data)
    # The pattern is exactly the node pairs that share a tet, as 3×3 blocks.
    node_pairs = np.zeros((len(rest_positions),) * 2, dtype=bool)
    for tet in tets:
        node_pairs[np.ix_(tet, tet)] = True
    pattern = scipy.sparse.csr_matrix((np.ones(len(first.indices)), first.indices, first.indptr),
                                      shape=first.shape).toarray() > 0
    assert np.array_equal(pattern, np.kron(node_pairs, np.ones((3, 3), dtype=bool)))
    assert np.array_equal(second.data[elasticity.diagonal_entry_positions], second.diagonal())


def test_combined_evaluation_and_convenience_call_agree():
    rng = np.random.default_rng(15)
    rest_positions, tets = cube_of_tets(2)
    elasticity = CorotatedElasticity(rest_positions, tets)
    material = random_material(rng, elasticity)
    x = deformed(rest_positions, tets, "random", rng)
    energy, gradient, hessian = elasticity.energy_gradient_hessian(x, material)
    assert energy == pytest.approx(elasticity.energy(x, material), rel=1e-14)
    assert np.allclose(gradient, elasticity.gradient(x, material), rtol=0, atol=1e-14 * np.abs(gradient).max())
    assert (hessian != elasticity.hessian(x, material)).nnz == 0
    convenience = corotated_energy(rest_positions, tets, x.reshape(-1, 3), material)
    assert convenience[0] == energy
    assert np.array_equal(convenience[1], gradient)
    assert (convenience[2] != hessian).nnz == 0
    # One tet's share, from the element kernel: the mesh energy is the sum of element energies.
    element_energies = corotated_element_energies(
        elasticity.deformation_gradients(x), material.activation, material.passive_weight,
        material.active_weight, material.mu, material.lam)
    assert energy == pytest.approx(element_energies.sum(), rel=1e-13)


def test_one_thread_in_locality_order_and_colours_on_several_assemble_the_same():
    """A worker on one thread assembles every tet in one pass sorted by its lowest node, several
    threads assemble colour by colour: the same energy, gradient and Hessian up to summation order."""
    import numba
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread here: only the one-pass order can run")
    rng = np.random.default_rng(16)
    rest_positions, tets = cube_of_tets(3)
    elasticity = CorotatedElasticity(rest_positions, tets)
    assert np.array_equal(np.sort(elasticity._locality_order), np.arange(len(tets)))
    material = random_material(rng, elasticity)
    x = deformed(rest_positions, tets, "random", rng)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = elasticity.energy_gradient_hessian(x, material, project=True)
        numba.set_num_threads(2)
        several = elasticity.energy_gradient_hessian(x, material, project=True)
    finally:
        numba.set_num_threads(threads)
    assert one[0] == pytest.approx(several[0], rel=1e-13)
    assert np.allclose(one[1], several[1], rtol=0, atol=1e-13 * np.abs(several[1]).max())
    assert abs(one[2] - several[2]).max() <= 1e-13 * abs(several[2]).max()


def test_uniform_rest_scale_scales_shape_and_volume():
    """F = D_s (s D_m)⁻¹ and V → s³ V: E_s(x) = s³ E_1(x / s), and x = s·rest is at rest."""
    rng = np.random.default_rng(16)
    rest_positions, tets = cube_of_tets(2)
    scale = 1.2
    plain = CorotatedElasticity(rest_positions, tets)
    grown = CorotatedElasticity(rest_positions, tets, rest_scale=np.full(len(tets), scale))
    assert np.allclose(grown.rest_volume, scale ** 3 * plain.rest_volume)
    material = random_material(rng, plain)
    x = deformed(rest_positions, tets, "random", rng)
    assert grown.energy(x, material) == pytest.approx(scale ** 3 * plain.energy(x / scale, material), rel=1e-12)
    neutral = dataclasses.replace(material, activation=np.broadcast_to(np.eye(3), material.activation.shape))
    force_scale = np.abs(plain.gradient(x, neutral)).max()
    assert np.abs(grown.gradient(scale * rest_positions, neutral)).max() < 1e-10 * force_scale


def test_material_from_model():
    rest_positions, tets = cube_of_tets(1)
    count = len(tets)
    volume = np.full(count, 2e-7)
    muscle_fraction = np.zeros((count, 3), dtype=np.float32)
    muscle_fraction[1:, 1] = 0.25
    muscle_fraction[1, 2] = 0.5
    model = dict(tet_rest_volume=volume, muscle_fraction=muscle_fraction,
                 passive_fraction=(1.0 - muscle_fraction.sum(axis=1)).astype(np.float32))
    material = TetMaterial.from_model(model, mu=2.0, lam=np.full(count, 5.0))
    # As in Phace: a tet with any muscle is wholly active, one without wholly passive.
    assert np.allclose(material.passive_weight + material.active_weight, volume)
    assert np.allclose(material.active_weight, np.where(muscle_fraction.sum(axis=1) > 0, volume, 0.0))
    assert material.passive_weight[0] == volume[0] and np.all(material.passive_weight[1:] == 0.0)
    assert np.array_equal(material.activation, np.broadcast_to(np.eye(3), (count, 3, 3)))
    assert np.allclose(material.mu, 2000.0) and np.allclose(material.lam, 5000.0)


def test_invalid_input_is_refused():
    rest_positions, tets = single_tet()
    with pytest.raises(ValueError, match="positively oriented"):
        CorotatedElasticity(rest_positions, tets[:, [0, 2, 1, 3]])
    with pytest.raises(ValueError, match="rest_scale"):
        CorotatedElasticity(rest_positions, tets, rest_scale=[-1.0])
    asymmetric = np.eye(3)[None].copy()
    asymmetric[0, 0, 1] = 0.1
    with pytest.raises(ValueError, match="symmetric"):
        TetMaterial([1.0], [1.0], asymmetric, 1.0, 3.0)
    elasticity = CorotatedElasticity(rest_positions, tets)
    material = TetMaterial([1.0], [0.0], np.eye(3)[None], 1.0, 3.0)
    with pytest.raises(ValueError, match="nodes"):
        elasticity.energy(rest_positions[:3], material)
    with pytest.raises(ValueError, match="NaN"):
        elasticity.energy(np.full_like(rest_positions, np.nan), material)


# ---------------------------------------------------------------------------
# Gravity and inertia


def test_gravity_and_inertia_values():
    rng = np.random.default_rng(17)
    mass = rng.uniform(1.0, 2.0, 5)
    x = rng.standard_normal((5, 3))
    gravity = GravityEnergy(mass, (0.0, 0.0, -STANDARD_GRAVITY))
    assert gravity.energy(x) == pytest.approx(9.81 * (mass * x[:, 2]).sum())
    assert gravity.hessian(x).nnz == 0
    predicted = rng.standard_normal((5, 3))
    inertia = InertiaEnergy(mass, predicted, dt=0.04)
    assert inertia.energy(predicted) == 0.0
    assert inertia.energy(x) == pytest.approx(0.5 / 0.04 ** 2 * (mass[:, None] * (x - predicted) ** 2).sum())
    assert np.allclose(inertia.hessian(x).diagonal(), np.repeat(mass, 3) / 0.04 ** 2)
