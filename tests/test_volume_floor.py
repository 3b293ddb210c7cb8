"""The volume floor (solver/physics/volume_floor.py) beyond the checks every registered energy
gets in test_energy_derivatives.py: its element kernels, where it is zero, and the fused
paths the forward solve takes."""
import numpy as np

from solver.physics.corotated import CorotatedElasticity
from solver.physics.volume_floor import (VolumeFloor, cofactors, floor_element_energies, floor_element_gradients,
                                         floor_element_hessians)
from test_energy_derivatives import (DERIVATIVE_TOLERANCE, MESHES, deformed, perturbed_elementwise, random_rotations,
                                     relative_error)

FLOOR, STIFFNESS = 0.2, 3.0


def squeezed_deformations(rng, count=60):
    """F with det F spread over the floor's whole working range: crushed, flat, inverted."""
    volume = np.concatenate([rng.uniform(-0.8, -0.05, count // 3), rng.uniform(-1e-3, 1e-3, count // 3),
                             rng.uniform(0.02, 0.18, count - 2 * (count // 3))])
    stretches = np.exp(0.3 * rng.standard_normal((count, 3)))
    stretches[:, 2] = volume / stretches[:, :2].prod(axis=1)
    return (random_rotations(rng, count) * stretches[:, None, :]) @ random_rotations(rng, count).transpose(0, 2, 1)


def test_cofactor_is_the_derivative_of_the_determinant():
    F = squeezed_deformations(np.random.default_rng(1))
    finite = perturbed_elementwise(lambda F: np.linalg.det(F), {"F": F})
    assert relative_error(finite, cofactors(F).reshape(-1, 9)) < DERIVATIVE_TOLERANCE
    invertible = np.abs(np.linalg.det(F)) > 1e-2
    expected = np.linalg.det(F[invertible])[:, None, None] * np.linalg.inv(F[invertible]).transpose(0, 2, 1)
    assert np.allclose(cofactors(F[invertible]), expected, rtol=1e-10, atol=1e-12)


def test_element_kernels_match_finite_differences():
    parameters = {"F": squeezed_deformations(np.random.default_rng(2)), "floor": FLOOR, "stiffness": STIFFNESS}
    gradients = floor_element_gradients(**parameters).reshape(-1, 9)
    finite = perturbed_elementwise(floor_element_energies, parameters)
    scale = np.linalg.norm(gradients, axis=1) + 1e-12
    assert (np.linalg.norm(finite - gradients, axis=1) / scale).max() < DERIVATIVE_TOLERANCE

    hessians = floor_element_hessians(**parameters)
    finite = perturbed_elementwise(lambda **p: floor_element_gradients(**p).reshape(-1, 9), parameters)
    scale = np.linalg.norm(hessians, axis=(1, 2))
    assert (np.linalg.norm(finite.transpose(0, 2, 1) - hessians, axis=(1, 2)) / scale).max() < DERIVATIVE_TOLERANCE
    assert np.abs(hessians - hessians.transpose(0, 2, 1)).max() <= 1e-12 * scale.max()


def test_the_floor_leaves_the_rest_shape_and_tets_above_it_alone():
    rest_positions, tets = MESHES["cube_2x2x2"]
    floor = VolumeFloor(CorotatedElasticity(rest_positions, tets), floor=FLOOR, stiffness=STIFFNESS)
    rng = np.random.default_rng(3)
    for rotation in random_rotations(rng, 3):
        moved = rest_positions @ rotation.T + rng.standard_normal(3)
        assert floor.energy(moved) == 0.0 and not floor.gradient(moved).any()
        assert not floor.hessian(moved).data.any()
    # Squashed to 0.3 of its height every tet keeps 0.3 of its volume: still above a floor of 0.2.
    squashed = rest_positions * [1.0, 1.0, 0.3]
    assert np.allclose(floor.volume_ratios(squashed), 0.3)
    assert floor.energy(squashed) == 0.0


def test_volume_ratios_and_the_hessian_added_in_place_agree_with_the_plain_ones():
    rest_positions, tets = MESHES["cube_2x2x2"]
    elasticity = CorotatedElasticity(rest_positions, tets)
    floor = VolumeFloor(elasticity, floor=FLOOR, stiffness=np.random.default_rng(5).uniform(1.0, 2.0, len(tets)))
    x = deformed(rest_positions, tets, "inverted", np.random.default_rng(6))
    np.testing.assert_allclose(floor.volume_ratios(x), np.linalg.det(elasticity.deformation_gradients(x)),
                               rtol=1e-12)
    for project in (False, True):
        hessian = floor.hessian(x, project)
        data = np.ones(len(elasticity.hessian_indices))
        floor.add_hessian_into(data, x, project)
        np.testing.assert_allclose(data - 1.0, hessian.data, rtol=0.0, atol=1e-12 * np.abs(hessian.data).max())
    assert floor.energy(x) > 0.0
    energy, gradient = floor.energy_and_gradient(x)
    assert energy == floor.energy(x)
    np.testing.assert_array_equal(gradient, floor.gradient(x))


def test_the_barrier_holds_where_the_penalty_gave_way():
    """φ and φ′ are continuous at the floor, φ is C² where it hands over to its quadratic
    continuation, it pushes back ever harder as a tet is crushed (φ′ < 0, φ″ > 0 below J₀), and near zero volume pushes tens of
    times harder than the penalty ½ (J₀ − J)² alone, whose push never exceeds J₀."""
    from solver.physics.volume_floor import BARRIER_EXTENSION, floor_profile
    J = np.linspace(-0.5, 0.25, 30001)
    value, slope, curvature = floor_profile(J, FLOOR)
    assert not value[J >= FLOOR].any() and not slope[J >= FLOOR].any()
    below = J < FLOOR
    assert (slope[below] < 0.0).all() and (curvature[below] > 0.0).all()
    assert (np.diff(value) <= 0.0).all()
    for joint in (FLOOR, BARRIER_EXTENSION * FLOOR):
        left, right = floor_profile(np.array([joint - 1e-9, joint + 1e-9]), FLOOR)[:2]
        assert abs(left[0] - left[1]) < 1e-8 and abs(right[0] - right[1]) < 1e-6
    assert abs(floor_profile(np.array([FLOOR - 1e-6]), FLOOR)[2][0] - 1.0) < 1e-3  # the penalty's own curvature
    push_at_zero = -floor_profile(np.array([0.0]), FLOOR)[1][0]
    assert push_at_zero > 40.0 * FLOOR
