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
from solver.physics.bones import bone_transforms
from solver.physics.simulator import WITHOUT_SHORTCUTS, FaceSimulator, SimulationSettings

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
    """The smile ramp solved with the default shortcuts (predict) or with none (the previous solver)."""
    settings = SimulationSettings(gravity=True, **({} if predict else WITHOUT_SHORTCUTS))
    simulator = FaceSimulator(model, settings)
    results = [simulator.step(activation, jaw) for activation, jaw in _smile_ramp(model, frames)]
    positions = np.array([result.positions for result in results])
    return simulator, results, positions


def test_predicted_starts_land_within_a_hundredth_of_a_millimetre_of_the_plain_solver(small_demo_model):
    """The previous solver (every frame started at the last one's positions, no shortcut) against
    the default shortcuts on a smooth ramp: every node of every frame within 0.01 mm, every frame
    converged, and fewer Newton iterations in all."""
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


def _ramp_state(model, frames: int):
    """A simulator after `frames` frames of the default ramp, the next frame's material set and
    bones placed: (simulator, next frame's start x0, its prediction, the force scale's floor)."""
    simulator = FaceSimulator(model, SimulationSettings(gravity=True))
    ramp = list(_smile_ramp(model, frames + 1))
    for activation, jaw in ramp[:frames]:
        simulator.step(activation, jaw)
    simulator.objective.material = simulator.material_for(ramp[frames][0])
    simulator._activation_force = np.abs(simulator._rest_gradient(simulator.objective.material)).max()
    simulator.constraints.use_frame(*bone_transforms(np.eye(4), model["jaw_frame"], ramp[frames][1]))
    x0 = simulator.positions.copy()
    return simulator, x0, 2.0 * x0 - simulator._previous_frame_start, simulator._driving_force()


def test_the_modelled_start_is_a_second_order_model(small_demo_model):
    """E and the residual at x0 from the prediction's pass: the model's error falls as the cube
    (energy) and the square (residual) of the distance, so the prediction's pass can stand in for
    one at x0 on a smooth take."""
    simulator, x0, prediction, _ = _ramp_state(small_demo_model, 5)
    objective, constraints = simulator.objective, simulator.constraints
    errors = []
    for fraction in (0.25, 0.125, 0.0625):
        point = constraints.x_from_q(constraints.q_from_x(x0 + fraction * (prediction - x0)))
        energy, gradient, hessian = objective.energy_gradient_hessian(point)
        modelled_energy, modelled_residual = newton._modelled_start(constraints, x0, point, energy, gradient, hessian)
        exact_energy, exact_gradient = objective.energy_and_gradient(constraints.x_from_q(constraints.q_from_x(x0)))
        exact_residual = np.abs(constraints.reduce_gradient(exact_gradient)).max()
        errors.append((abs(modelled_energy - exact_energy), abs(modelled_residual - exact_residual)))
    (e1, r1), (e2, r2), (e3, r3) = errors
    assert e2 < e1 / 5 and e3 < e2 / 5, f"energy errors {e1:.3g}, {e2:.3g}, {e3:.3g}: not third order"
    assert r2 < r1 / 2.5 and r3 < r2 / 2.5, f"residual errors {r1:.3g}, {r2:.3g}, {r3:.3g}: not second order"


def test_a_trusted_prediction_saves_the_pass_at_the_start_and_nothing_else(small_demo_model):
    """Where the model puts the start's force within the floor, the solve from the prediction's
    pass alone reaches the bits of a solve handed E and the scale at x0 evaluated exactly, with
    no more evaluations than that solve: the pass at x0 is saved."""
    simulator, x0, prediction, floor = _ramp_state(small_demo_model, 5)
    objective, constraints = simulator.objective, simulator.constraints
    start = constraints.x_from_q(constraints.q_from_x(x0))
    exact_energy, exact_gradient = objective.energy_and_gradient(start)
    scale = max(floor, np.abs(constraints.reduce_gradient(exact_gradient)).max())
    assert scale == floor, "this frame's start force should be within the floor"
    calls = {"count": 0}
    for name in ("energy", "energy_and_gradient", "energy_gradient_hessian"):
        method = getattr(objective, name)

        def counted(*args, _method=method, **kwargs):
            calls["count"] += 1
            return _method(*args, **kwargs)
        setattr(objective, name, counted)
    kept = simulator.solver.linear_solver.kept_factor()
    results = {}
    for label, options in (("exact", dict(force_scale=scale, start_energy=exact_energy)),
                           ("modelled", dict(force_scale_floor=floor))):
        solver = newton.NewtonSolver(objective, constraints, tolerance=simulator.settings.tolerance)
        solver.linear_solver.restore_factor(kept)
        calls["count"] = 0
        results[label] = (solver.solve(x0, predicted_start=prediction, **options), calls["count"])
    (exact, exact_calls), (modelled, modelled_calls) = results["exact"], results["modelled"]
    assert exact.predicted and modelled.predicted and exact.converged and modelled.converged
    assert modelled.force_scale == exact.force_scale
    np.testing.assert_array_equal(modelled.x, exact.x)
    assert modelled_calls == exact_calls, (modelled_calls, exact_calls)
