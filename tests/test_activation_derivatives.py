"""Derivatives of the co-rotated energy with respect to the activations (issue 4):
solver/physics/activation_derivatives.py against central differences of the forward energy and
forces of solver/physics/corotated.py, on single elements and on small tet meshes."""
import dataclasses
import zlib

import numpy as np
import pytest
import scipy.sparse

from block_models import bcc_block, block_model
from solver.physics.activation import (
    active_tet_indices,
    symmetric_from_vector,
    tet_activations,
    vector_from_symmetric,
)
from solver.physics.active_stiffening import active_stiffening
from solver.physics.activation_derivatives import (
    ActivationCoupling,
    activation_element_gradients,
    activation_element_mixed_blocks,
    activation_gradient,
    force_jacobian,
    force_jacobian_product,
    force_jacobian_transpose_product,
)
from solver.physics.corotated import (
    CorotatedElasticity,
    TetMaterial,
    corotated_element_energies,
    corotated_element_gradients,
)
from energy_registry import random_activations, random_rotations

EDGE = 0.01                 # m, the test meshes' edge length
ACTIVATION_STEP = 1e-6      # central-difference step in a (a ≈ 1)
TOLERANCE = 1e-6            # relative error of the finite-difference checks
PAIR_SUM_FLOOR = 0.02       # elements closer than this to a kink of R(F S) are not differenced


# ---------------------------------------------------------------------------
# Element test set


def signed_singular_values(G):
    """σ̂ of the rotation-variant SVD (σ1 ≥ σ2 ≥ |σ3|, σ3 < 0 for det G < 0), by numpy."""
    sigma = np.linalg.svd(G, compute_uv=False)
    sigma[..., 2] *= np.sign(np.linalg.det(G))
    return sigma


def far_activations(rng, count):
    """Symmetric S far from I: large stretches, and every third one indefinite (det S < 0)."""
    rotations = random_rotations(rng, count)
    eigenvalues = np.exp(0.6 * rng.standard_normal((count, 3)))
    eigenvalues[::3, 2] *= -1.0
    S = (rotations * eigenvalues[:, None, :]) @ rotations.transpose(0, 2, 1)
    return 0.5 * (S + S.transpose(0, 2, 1))


def element_test_set(rng, per_kind=30):
    """F near identity, large, inverted and nearly flat, each with S = I, S near I and S far
    from I (including det S < 0); weights, μ, λ random. Elements whose F S lies within
    PAIR_SUM_FLOOR of a kink of the polar rotation (σ̂_i + σ̂_j ≈ 0, e.g. σ̂_2 ≈ −σ̂_3) are
    dropped: there R(F S) is not differentiable and central differences mean nothing."""
    stretches = np.concatenate([
        np.exp(0.1 * rng.standard_normal((per_kind, 3))),
        np.exp(0.5 * rng.standard_normal((per_kind, 3))),
        np.exp(0.3 * rng.standard_normal((per_kind, 3))) * [1, 1, -1],
        np.column_stack([np.exp(0.2 * rng.standard_normal((per_kind, 2))), 1e-3 * rng.uniform(0.5, 2.0, per_kind)]),
    ])
    F = (random_rotations(rng, len(stretches)) * stretches[:, None, :]) @ random_rotations(rng, len(stretches)).transpose(0, 2, 1)
    F = np.concatenate([F, F, F])
    count = len(F)
    third = count // 3
    S = np.concatenate([np.broadcast_to(np.eye(3), (third, 3, 3)), random_activations(rng, third, spread=0.1),
                        far_activations(rng, third)])
    sigma = signed_singular_values(F @ S)
    pair_sum = np.minimum.reduce([sigma[:, 0] + sigma[:, 1], sigma[:, 0] + sigma[:, 2], sigma[:, 1] + sigma[:, 2]])
    keep = pair_sum > PAIR_SUM_FLOOR * np.abs(sigma).max(axis=1)
    assert keep.mean() > 0.8
    return dict(F=F[keep], S=S[keep], active_weight=rng.uniform(0.1, 2.0, keep.sum()),
                mu=rng.uniform(0.5, 2.0, keep.sum()), lam=rng.uniform(1.0, 10.0, keep.sum()))


def forward(function, parameters, S, passive_weight):
    return function(parameters["F"], S, passive_weight, parameters["active_weight"], parameters["mu"], parameters["lam"])


def activation_differences(function, parameters, passive_weight=0.0, step=ACTIVATION_STEP):
    """Central differences of a forward element function in every a_k: (M, …, 6)."""
    a = vector_from_symmetric(parameters["S"])
    columns = []
    for k in range(6):
        offset = np.zeros(6)
        offset[k] = step
        plus = forward(function, parameters, symmetric_from_vector(a + offset), passive_weight)
        minus = forward(function, parameters, symmetric_from_vector(a - offset), passive_weight)
        columns.append((plus - minus) / (2 * step))
    return np.stack(columns, axis=-1)


def per_element_error(approximate, exact):
    count = len(exact)
    difference = np.linalg.norm((approximate - exact).reshape(count, -1), axis=1)
    return difference / np.linalg.norm(exact.reshape(count, -1), axis=1)


# ---------------------------------------------------------------------------
# One element


def test_energy_identity_behind_the_formulas():
    """‖F − R(F S) S‖² = ‖F‖² − 2 Σσ̂(F S) + ‖S‖² for symmetric S (any sign of det F, det S);
    the active term is that times the muscle's stiffening k(S)."""
    parameters = element_test_set(np.random.default_rng(1))
    F, S = parameters["F"], parameters["S"]
    corotational = corotated_element_energies(F, S, 0.0, 1.0, 1.0, 0.0)
    identity = (F ** 2).sum(axis=(1, 2)) - 2 * signed_singular_values(F @ S).sum(axis=1) + (S ** 2).sum(axis=(1, 2))
    assert np.allclose(corotational, active_stiffening(S) * identity, rtol=1e-9, atol=1e-12)


def test_element_gradient_matches_finite_differences_of_the_energy():
    parameters = element_test_set(np.random.default_rng(2))
    gradients = activation_element_gradients(**parameters)
    assert gradients.shape == (len(parameters["F"]), 6)
    # The passive part does not depend on a: differencing with passive tissue gives the same.
    finite = activation_differences(corotated_element_energies, parameters, passive_weight=0.7)
    assert per_element_error(gradients, finite).max() < TOLERANCE


def test_element_mixed_block_matches_finite_differences_of_the_stress():
    parameters = element_test_set(np.random.default_rng(3))
    blocks = activation_element_mixed_blocks(**parameters)
    assert blocks.shape == (len(parameters["F"]), 9, 6)
    finite = activation_differences(
        lambda *args: corotated_element_gradients(*args).reshape(-1, 9), parameters, passive_weight=0.7)
    assert per_element_error(blocks, finite).max() < TOLERANCE


def test_element_mixed_block_is_the_derivative_of_the_activation_gradient_in_F():
    """Mixed partials commute: ∂g/∂F (differenced) = Mᵀ, with F row-major."""
    parameters = element_test_set(np.random.default_rng(4))
    blocks = activation_element_mixed_blocks(**parameters)
    step = 1e-7
    columns = []
    for flat_index in range(9):
        offset = np.zeros((3, 3))
        offset.flat[flat_index] = step
        plus = activation_element_gradients(**dict(parameters, F=parameters["F"] + offset))
        minus = activation_element_gradients(**dict(parameters, F=parameters["F"] - offset))
        columns.append((plus - minus) / (2 * step))
    finite = np.stack(columns, axis=1)                       # (M, 9, 6)
    assert per_element_error(blocks, finite).max() < TOLERANCE


def test_off_diagonal_activations_count_both_mirrored_entries():
    """A unit step in a_yz moves S_yz and S_zy together: g_yz = ∂E/∂S_yz + ∂E/∂S_zy, i.e.
    twice the derivative along the single entry of the symmetric-part gradient."""
    rng = np.random.default_rng(5)
    parameters = element_test_set(rng, per_kind=5)
    g = activation_element_gradients(**parameters)
    # Directional derivative along a random symmetric dS equals g · vec(dS) with vec = a-vector.
    dS = symmetric_from_vector(rng.standard_normal((len(g), 6)))
    step = ACTIVATION_STEP
    plus = forward(corotated_element_energies, parameters, parameters["S"] + step * dS, 0.0)
    minus = forward(corotated_element_energies, parameters, parameters["S"] - step * dS, 0.0)
    directional = (plus - minus) / (2 * step)
    assert np.allclose((g * vector_from_symmetric(dS)).sum(axis=1), directional,
                       rtol=TOLERANCE, atol=TOLERANCE * np.abs(g).max())


def test_element_activation_gradient_vanishes_at_the_activated_shape():
    """F = Q S (S positive definite, any det) minimises the active term: ∂E/∂a = 0 there, and at
    F = Q with the neutral S = I. The mixed block is not zero (the force depends on S)."""
    rng = np.random.default_rng(6)
    count = 40
    S = random_activations(rng, count)
    S[:5] = np.eye(3)
    F = random_rotations(rng, count) @ S
    parameters = dict(F=F, S=S, active_weight=1.0, mu=1.0, lam=3.0)
    assert np.abs(activation_element_gradients(**parameters)).max() < 1e-12
    assert np.abs(activation_element_mixed_blocks(**parameters)).max() > 0.1


def test_element_derivatives_are_zero_without_muscle():
    parameters = element_test_set(np.random.default_rng(7), per_kind=5)
    parameters["active_weight"] = np.zeros(len(parameters["F"]))
    assert not activation_element_gradients(**parameters).any()
    assert not activation_element_mixed_blocks(**parameters).any()


def test_element_derivatives_under_rotations():
    """A rotation Q₀ of the deformed shape (F → Q₀F): ∂E/∂a is invariant and the mixed block
    rotates with the stress, M[3a+b, k] → Σ_c Q₀[a, c] M[3c+b, k]. A rotation Q of the
    material frame ((F, S) → (F Q, Qᵀ S Q)) leaves E invariant, so g transforms as a symmetric
    tensor and M(F Q, QᵀSQ)·a(QᵀdS Q) = (M(F, S)·a(dS)) Q — off-diagonal entries included."""
    rng = np.random.default_rng(8)
    parameters = element_test_set(rng, per_kind=10)
    count = len(parameters["F"])
    g = activation_element_gradients(**parameters)
    M = activation_element_mixed_blocks(**parameters)
    scale = np.abs(M).max(axis=(1, 2))[:, None, None]

    spatial = random_rotations(rng, count)
    rotated = dict(parameters, F=spatial @ parameters["F"])
    assert np.allclose(activation_element_gradients(**rotated), g, rtol=0, atol=1e-10 * np.abs(g).max())
    expected = np.einsum("mac,mcbk->mabk", spatial, M.reshape(count, 3, 3, 6)).reshape(count, 9, 6)
    assert (np.abs(activation_element_mixed_blocks(**rotated) - expected) <= 1e-10 * scale).all()

    frame = random_rotations(rng, count)
    transformed = dict(parameters, F=parameters["F"] @ frame,
                       S=frame.transpose(0, 2, 1) @ parameters["S"] @ frame)
    dS = symmetric_from_vector(rng.standard_normal((count, 6)))
    dS_frame = vector_from_symmetric(frame.transpose(0, 2, 1) @ dS @ frame)
    dS = vector_from_symmetric(dS)
    g_frame = activation_element_gradients(**transformed)
    assert np.allclose((g_frame * dS_frame).sum(axis=1), (g * dS).sum(axis=1),
                       rtol=1e-9, atol=1e-10 * np.abs(g).max())
    stress_change = np.einsum("mpk,mk->mp", M, dS).reshape(count, 3, 3) @ frame
    stress_change_frame = np.einsum("mpk,mk->mp", activation_element_mixed_blocks(**transformed),
                                    dS_frame).reshape(count, 3, 3)
    assert (np.abs(stress_change_frame - stress_change) <= 1e-9 * scale * np.abs(dS).max()).all()


def test_element_derivatives_stay_finite_at_singular_configurations():
    """Flat, collapsed and kinked F S (σ̂_2 = −σ̂_3, a line, a point, S = 0): finite values,
    bounded by the floor of σ̂_i + σ̂_j as in corotated.py's Hessian."""
    F = np.array([np.zeros((3, 3)), np.diag([1.0, 0.0, 0.0]), np.diag([1.0, 1.0, 0.0]),
                  np.diag([1.0, 0.5, -0.5]), np.diag([2.0, -1.0, -1.0]), np.eye(3), np.eye(3)])
    S = np.array([np.eye(3), np.eye(3), np.eye(3), np.eye(3), np.eye(3), np.zeros((3, 3)),
                  np.diag([1.0, 1.0, -1.0])])
    g = activation_element_gradients(F, S, 1.0, 1.0, 3.0)
    M = activation_element_mixed_blocks(F, S, 1.0, 1.0, 3.0)
    assert np.isfinite(g).all() and np.isfinite(M).all()
    assert np.abs(M).max() < 1e9


def test_element_kernels_reject_non_finite_input():
    F = np.eye(3)[None].copy()
    F[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        activation_element_gradients(F, np.eye(3), 1.0, 1.0, 3.0)
    with pytest.raises(ValueError, match="shape"):
        activation_element_mixed_blocks(np.eye(3), np.eye(3), 1.0, 1.0, 3.0)


# ---------------------------------------------------------------------------
# Whole mesh


def deformed(rest_positions, configuration, rng):
    """A rigid motion of a linear map of the rest shape, plus noise: 'random', 'inverted' (every
    tet reflected) or 'near_degenerate' (every tet flattened to det F ≈ 1e-3)."""
    linear, noise = {"random": (np.eye(3) + 0.2 * rng.standard_normal((3, 3)), 0.1),
                     "inverted": (np.diag([1.1, 0.9, -0.6]), 0.03),
                     "near_degenerate": (np.diag([1.1, 0.9, 1e-3]), 1e-5)}[configuration]
    x = rest_positions @ (random_rotations(rng, 1)[0] @ linear).T + EDGE * rng.uniform(-1, 1, 3)
    return (x + noise * EDGE * rng.standard_normal(x.shape)).reshape(-1)


def mesh_case(rng, plastic=False, far=False):
    """The 48-tet BCC cube, a third of its tets without muscle, random activations (near I, or
    far from I with some det S < 0) and optionally a plastic rest scale."""
    rest_positions, tets = bcc_block()
    count = len(tets)
    elasticity = CorotatedElasticity(rest_positions, tets,
                                     rest_scale=rng.uniform(0.8, 1.25, count) if plastic else None)
    volume = elasticity.rest_volume / elasticity.volume_scale
    muscle = rng.uniform(0.3, 1.0, count) * (np.arange(count) % 3 != 0)
    activation = far_activations(rng, count) if far else random_activations(rng, count)
    activation[np.arange(count) % 5 == 1] = np.eye(3)    # muscle at the neutral activation
    material = TetMaterial(passive_weight=volume * (1 - muscle), active_weight=volume * muscle,
                           activation=activation, mu=1000.0 * rng.uniform(0.5, 2.0, count),
                           lam=1000.0 * rng.uniform(1.0, 10.0, count))
    return rest_positions, elasticity, material


def with_activation_vectors(material, a):
    return dataclasses.replace(material, activation=symmetric_from_vector(a))


def mesh_activation_differences(function, material, step=ACTIVATION_STEP):
    """Central differences of function(material) in every a_k of every tet: (…, 6M) tet-major."""
    a = vector_from_symmetric(material.activation)
    columns = []
    for index in range(a.size):
        offset = np.zeros(a.size)
        offset[index] = step
        plus = function(with_activation_vectors(material, a + offset.reshape(a.shape)))
        minus = function(with_activation_vectors(material, a - offset.reshape(a.shape)))
        columns.append((np.asarray(plus) - np.asarray(minus)) / (2 * step))
    return np.stack(columns, axis=-1)


MESH_CASES = [pytest.param(configuration, plastic, far, id=f"{configuration}-{'plastic' if plastic else 'plain'}-"
                           f"{'far' if far else 'near'}")
              for configuration in ("random", "inverted", "near_degenerate")
              for plastic, far in ((False, False), (True, True))]


@pytest.mark.parametrize("configuration, plastic, far", MESH_CASES)
def test_mesh_derivatives_match_finite_differences(configuration, plastic, far):
    rng = np.random.default_rng(zlib.crc32(f"{configuration}-{plastic}-{far}".encode()))
    rest_positions, elasticity, material = mesh_case(rng, plastic, far)
    x = deformed(rest_positions, configuration, rng)
    coupling = ActivationCoupling(elasticity, material, x)
    count = elasticity.element_count
    assert np.array_equal(coupling.active_tets, np.flatnonzero(material.active_weight > 0))
    inactive = np.setdiff1d(np.arange(count), coupling.active_tets)

    gradient = coupling.activation_gradient()
    assert gradient.shape == (count, 6) and not gradient[inactive].any()
    finite_gradient = mesh_activation_differences(lambda m: elasticity.energy(x, m), material).reshape(count, 6)
    assert np.linalg.norm(gradient - finite_gradient) < TOLERANCE * np.linalg.norm(gradient)

    jacobian = coupling.force_jacobian()
    assert isinstance(jacobian, scipy.sparse.csr_matrix) and jacobian.shape == (3 * elasticity.node_count, 6 * count)
    assert jacobian.nnz == 72 * coupling.active_count and jacobian.has_canonical_format
    dense = jacobian.toarray()
    finite_jacobian = mesh_activation_differences(lambda m: elasticity.gradient(x, m), material)
    assert np.linalg.norm(dense - finite_jacobian) < TOLERANCE * np.linalg.norm(dense)
    assert not dense.reshape(-1, count, 6)[:, inactive].any()

    # The products are the matrix's, and the transpose product is the adjoint.
    da = rng.standard_normal((count, 6))
    v = rng.standard_normal(3 * elasticity.node_count)
    product = coupling.force_jacobian_product(da)
    assert np.allclose(product, dense @ da.reshape(-1), rtol=0, atol=1e-12 * np.abs(product).max())
    transpose = coupling.force_jacobian_transpose_product(v)
    assert np.allclose(transpose.reshape(-1), dense.T @ v, rtol=0, atol=1e-12 * np.abs(transpose).max())
    assert v @ product == pytest.approx((transpose * da).sum(), rel=1e-12)


def test_active_only_layout_matches_the_full_layout():
    rng = np.random.default_rng(20)
    rest_positions, elasticity, material = mesh_case(rng)
    x = deformed(rest_positions, "random", rng)
    coupling = ActivationCoupling(elasticity, material, x)
    active = coupling.active_tets
    count = coupling.active_count
    assert 0 < count < elasticity.element_count
    da = rng.standard_normal((elasticity.element_count, 6))
    v = rng.standard_normal(3 * elasticity.node_count)
    assert np.array_equal(coupling.activation_gradient(active_only=True), coupling.activation_gradient()[active])
    product = coupling.force_jacobian_product(da)
    assert np.allclose(coupling.force_jacobian_product(da[active], active_only=True), product,
                       rtol=0, atol=1e-14 * np.abs(product).max())
    assert np.array_equal(coupling.force_jacobian_transpose_product(v, active_only=True),
                          coupling.force_jacobian_transpose_product(v)[active])
    reduced = coupling.force_jacobian(active_only=True)
    assert reduced.shape == (3 * elasticity.node_count, 6 * count)
    columns = (6 * active[:, None] + np.arange(6)).reshape(-1)
    assert (reduced != coupling.force_jacobian()[:, columns]).nnz == 0
    # The one-shot functions agree with the coupling.
    assert np.array_equal(activation_gradient(elasticity, material, x), coupling.activation_gradient())
    assert np.array_equal(force_jacobian_product(elasticity, material, x, da), coupling.force_jacobian_product(da))
    assert np.array_equal(force_jacobian_transpose_product(elasticity, material, x, v, active_only=True),
                          coupling.force_jacobian_transpose_product(v, active_only=True))
    assert (force_jacobian(elasticity, material, x) != coupling.force_jacobian()).nnz == 0
    # Inputs of the wrong layout are refused, not reinterpreted.
    with pytest.raises(ValueError, match="da"):
        coupling.force_jacobian_product(da[active])
    with pytest.raises(ValueError, match="v"):
        coupling.force_jacobian_transpose_product(v[:-3])


def test_mesh_force_jacobian_rotates_with_the_body():
    """x → x Q₀ᵀ + t: ∂E/∂a is unchanged and every node's force rows rotate, J → (I_N ⊗ Q₀) J."""
    rng = np.random.default_rng(21)
    rest_positions, elasticity, material = mesh_case(rng, far=True)
    x = deformed(rest_positions, "random", rng).reshape(-1, 3)
    coupling = ActivationCoupling(elasticity, material, x)
    jacobian = coupling.force_jacobian().toarray()
    gradient = coupling.activation_gradient()
    for rotation in random_rotations(rng, 2):
        moved = ActivationCoupling(elasticity, material, x @ rotation.T + EDGE * rng.standard_normal(3))
        assert np.allclose(moved.activation_gradient(), gradient, rtol=0, atol=1e-10 * np.abs(gradient).max())
        expected = np.kron(np.eye(elasticity.node_count), rotation) @ jacobian
        assert np.allclose(moved.force_jacobian().toarray(), expected, rtol=0, atol=1e-10 * np.abs(jacobian).max())


def test_block_model_with_a_muscle():
    """A real model dict: weights from TetMaterial.from_model, activations from a contraction
    of the block's muscle (tet_activations); the active set is the model's
    active_tet_indices, and directional derivatives of forward energy and force match."""
    rng = np.random.default_rng(22)
    nodes, tets = bcc_block(size=(0.03, 0.02, 0.02))
    fibre = random_rotations(rng, 1)[0]
    muscle_fraction = np.where(nodes[tets].mean(axis=1)[:, 1] > 0.01, rng.uniform(0.2, 1.0, len(tets)), 0.0)
    model = block_model(nodes, tets, muscle_fraction=muscle_fraction, muscle_direction=fibre)
    material = TetMaterial.from_model(model, activation=tet_activations(model, np.array([1.4])))
    elasticity = CorotatedElasticity(model["rest_positions"], model["tets"])
    x = model["rest_positions"] + 0.1 * EDGE * rng.standard_normal(nodes.shape)
    coupling = ActivationCoupling(elasticity, material, x)
    assert np.array_equal(coupling.active_tets, active_tet_indices(model))
    assert 0 < coupling.active_count < len(tets)

    a = vector_from_symmetric(material.activation)
    da = np.zeros_like(a)
    da[coupling.active_tets] = rng.standard_normal((coupling.active_count, 6))
    step = ACTIVATION_STEP

    def at(sign):
        return with_activation_vectors(material, a + sign * step * da)

    energy_change = (elasticity.energy(x, at(1)) - elasticity.energy(x, at(-1))) / (2 * step)
    assert (coupling.activation_gradient() * da).sum() == pytest.approx(energy_change, rel=TOLERANCE)
    force_change = (elasticity.gradient(x, at(1)) - elasticity.gradient(x, at(-1))) / (2 * step)
    product = coupling.force_jacobian_product(da)
    assert np.linalg.norm(product - force_change) < TOLERANCE * np.linalg.norm(product)
    assert np.allclose(coupling.force_jacobian(active_only=True) @ da[coupling.active_tets].reshape(-1), product,
                       rtol=0, atol=1e-12 * np.abs(product).max())


def test_equilibrium_sensitivity_is_minus_inverse_hessian_times_force_jacobian():
    """What inverse physics uses it for: with the bottom nodes of the cube pinned, the static
    equilibrium x*(a) moves by dx = −H_ff⁻¹ J_f da (J_f: the free rows), compared with
    equilibria solved by Newton at a ± h·da."""
    rng = np.random.default_rng(23)
    rest_positions, elasticity, material = mesh_case(rng)
    free = np.repeat(rest_positions[:, 2] > 1e-9, 3)
    a = vector_from_symmetric(material.activation)

    def equilibrium(material):
        x = rest_positions.reshape(-1).copy()
        for _ in range(40):
            gradient = elasticity.gradient(x, material)[free]
            if np.linalg.norm(gradient) < 1e-13:
                break
            hessian = elasticity.hessian(x, material, project=False)[free][:, free].toarray()
            x[free] -= np.linalg.solve(hessian, gradient)
        assert np.linalg.norm(elasticity.gradient(x, material)[free]) < 1e-11
        return x

    x = equilibrium(material)
    coupling = ActivationCoupling(elasticity, material, x)
    da = rng.standard_normal(a.shape)
    hessian = elasticity.hessian(x, material, project=False)[free][:, free].toarray()
    predicted = -np.linalg.solve(hessian, coupling.force_jacobian_product(da)[free])
    step = 1e-5
    plus = equilibrium(with_activation_vectors(material, a + step * da))
    minus = equilibrium(with_activation_vectors(material, a - step * da))
    measured = (plus - minus)[free] / (2 * step)
    assert np.linalg.norm(predicted - measured) < 1e-6 * np.linalg.norm(predicted)
    # Adjoint form of the same: for an objective φ(x), dφ/da = −Jᵀ H⁻¹ ∇φ (here φ = c·x).
    c = np.zeros(3 * elasticity.node_count)
    c[free] = rng.standard_normal(free.sum())
    adjoint = np.zeros_like(c)
    adjoint[free] = np.linalg.solve(hessian, c[free])
    sensitivity = -coupling.force_jacobian_transpose_product(adjoint)
    assert (sensitivity * da).sum() == pytest.approx(c[free] @ measured, rel=1e-6)


def test_coupling_refuses_bad_input():
    rng = np.random.default_rng(24)
    rest_positions, elasticity, material = mesh_case(rng)
    with pytest.raises(ValueError, match="nodes"):
        ActivationCoupling(elasticity, material, rest_positions[:-1])
    with pytest.raises(ValueError, match="NaN"):
        ActivationCoupling(elasticity, material, np.full_like(rest_positions, np.nan))
    small = TetMaterial([1.0], [1.0], np.eye(3)[None], 1.0, 3.0)
    with pytest.raises(ValueError, match="tets"):
        ActivationCoupling(elasticity, small, rest_positions)
