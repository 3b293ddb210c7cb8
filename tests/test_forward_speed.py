"""The forward frame's shortcuts (issue 41) against the solver without them: the predicted start
(a frame starts from the last two frames' motion continued), the fused energy + gradient +
Hessian pass Newton evaluates its points with, and the rest force summed over the muscle tets
alone. Each must land where the plain solver lands: within 0.01 mm for the predicted start (a
different start reaches the same equilibrium within the solver's tolerance), to the bit for the
other two where their sums allow it."""
from __future__ import annotations

import numpy as np
import pytest

from solver.physics import newton
from solver.physics.simulator import FaceSimulator, SimulationSettings

FRAMES = 8


def _smile_ramp(model, frames: int):
    """A smooth smile ramp with the jaw opening, as (activation, jaw) per frame."""
    from solver.physics.activation import tet_activations
    names = [str(name) for name in model["muscle_names"]]
    for strength in np.linspace(0.1, 1.0, frames):
        contraction = np.ones(len(names))
        for column, name in enumerate(names):
            if name.startswith(("zygomaticus", "levator_anguli", "risorius")):
                contraction[column] = 1.0 + 0.6 * strength
        jaw = np.zeros(5)
        jaw[0] = 0.12 * strength
        yield tet_activations(model, contraction), jaw


def _play(model, predict: bool, frames=FRAMES):
    simulator = FaceSimulator(model, SimulationSettings(gravity=True, predict_start=predict))
    results = [simulator.step(activation, jaw) for activation, jaw in _smile_ramp(model, frames)]
    positions = np.array([result.positions for result in results])
    return simulator, results, positions


def test_predicted_starts_land_within_a_hundredth_of_a_millimetre_of_the_plain_solver(small_demo_model):
    """The previous solver (every frame started at the last one's positions) against the predicted
    start on a smooth ramp: every node of every frame within 0.01 mm, every frame converged, and
    fewer Newton iterations in all."""
    _, plain, plain_positions = _play(small_demo_model, predict=False)
    _, predicted, predicted_positions = _play(small_demo_model, predict=True)
    assert all(result.converged for result in plain + predicted)
    distance = np.linalg.norm(predicted_positions - plain_positions, axis=2).max()
    assert distance < 1e-5, f"predicted frames {distance * 1e3:.4f} mm from the plain solver's"
    assert sum(r.iterations for r in predicted) < sum(r.iterations for r in plain)


def test_an_overshooting_prediction_is_refused(small_demo_model):
    """A predicted start whose energy is above the plain start's is not taken: the solve is the
    plain one, to the bit."""
    simulator = FaceSimulator(small_demo_model, SimulationSettings(gravity=True, predict_start=False))
    activation, jaw = next(_smile_ramp(small_demo_model, 2))
    simulator.objective.material = simulator.material_for(activation)
    start = simulator.positions.copy()
    solver = newton.NewtonSolver(simulator.objective, simulator.constraints, tolerance=1e-5)
    plain = solver.solve(start)
    assert plain.force_scale > 0.0
    overshoot = start + 0.01 * np.sin(np.arange(start.size))      # 1 cm of noise: far uphill
    solver = newton.NewtonSolver(simulator.objective, simulator.constraints, tolerance=1e-5)
    refused = solver.solve(start, predicted_start=overshoot, force_scale=plain.force_scale)
    assert plain.converged and not plain.predicted and not refused.predicted
    np.testing.assert_array_equal(refused.x, plain.x)
    solver = newton.NewtonSolver(simulator.objective, simulator.constraints, tolerance=1e-5)
    taken = solver.solve(start, predicted_start=plain.x, force_scale=plain.force_scale)
    assert taken.predicted and taken.iterations == 0


def test_the_fused_pass_equals_the_separate_ones(small_demo_model):
    """energy_gradient_hessian gives the bits energy_and_gradient and hessian give apart, with the
    volume floor and gravity in: Newton's iterates do not depend on which it called."""
    simulator, _, positions = _play(small_demo_model, predict=False, frames=3)
    objective = simulator.objective
    x = positions[-1].reshape(-1) + 1e-4 * np.cos(np.arange(positions[-1].size))
    energy, gradient, hessian = objective.energy_gradient_hessian(x)
    separate_energy, separate_gradient = objective.energy_and_gradient(x)
    assert energy == separate_energy
    np.testing.assert_array_equal(gradient, separate_gradient)
    np.testing.assert_array_equal(hessian.data, objective.hessian(x).data)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_rest_force_over_the_muscle_tets_matches_the_full_pass(small_demo_model, threads):
    """The activation's pull at rest, from the neutral sum kept and a pass over the muscle tets,
    against a pass over every tet (the force scale of each frame)."""
    import numba
    saved = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        simulator = FaceSimulator(small_demo_model, SimulationSettings())
        rest = np.asarray(small_demo_model["rest_positions"], dtype=np.float64).reshape(-1)
        for activation, _ in _smile_ramp(small_demo_model, 3):
            material = simulator.material_for(activation)
            full = simulator.elasticity.gradient(rest, material)
            np.testing.assert_allclose(simulator._rest_gradient(material), full, rtol=0, atol=1e-12 * np.abs(full).max())
    finally:
        numba.set_num_threads(saved)


def test_a_resumed_bake_continues_the_predicted_motion(small_demo_model):
    """Without collisions, frames 0–3, then a new simulator resumed from the snapshot and the
    kept factor: frames 4–7 to the bits of the uninterrupted run (the snapshot carries where the
    last frame started, so the resumed prediction is the same)."""
    model, cut = small_demo_model, 4
    frames = list(_smile_ramp(model, FRAMES))
    settings = SimulationSettings(gravity=True, predict_start=True, oversolve_guard=0.2,
                                  stale_factor_krylov_iterations=6)
    whole = FaceSimulator(model, settings)
    expected = [whole.step(*frame).positions for frame in frames]
    first = FaceSimulator(model, settings)
    for frame in frames[:cut]:
        first.step(*frame)
    resumed = FaceSimulator(model, settings)
    resumed.resume(first.snapshot(), first.solver.linear_solver.kept_factor())
    for frame, wanted in zip(frames[cut:], expected[cut:]):
        np.testing.assert_array_equal(resumed.step(*frame).positions, wanted)
