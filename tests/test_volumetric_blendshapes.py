"""Volumetric blendshapes (solver/volumetric_blendshapes/): blending, Projective Dynamics against
Newton on the same energy, and shape keys reproduced. The energies' derivatives are checked by
tests/test_energy_derivatives.py through tests/energy_registry.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

from solver.physics.cholesky import SparseCholesky
from solver.volumetric_blendshapes.element_kernels import (polar_rotation, projections, rotation_variant_svd,
                                                          unit_volume_singular_values, weighted_projections)
from solver.volumetric_blendshapes.energies import TetMesh, VolumetricBlendshapeEnergy
from solver.volumetric_blendshapes.projective_dynamics import ProjectiveDynamics, model_fixed_nodes, newton_solve
from solver.volumetric_blendshapes.targets import (VolumetricBlendshapes, quaternion_to_rotation,
                                                  rotation_to_quaternion, transfer_shape_targets)
from tests.block_models import bcc_block, block_model
from tests.energy_registry import random_rotations


def small_block():
    """A 4 × 3 × 3 cm BCC block (spacing 1 cm) pinned on its y = 0 face, as a skull under flesh."""
    nodes, tets = bcc_block((0.04, 0.03, 0.03), 0.01)
    base = np.flatnonzero(nodes[:, 1] < 1e-9)
    model = block_model(nodes, tets, pin_nodes=base)
    info = json.loads(str(model["build_info"]))
    model["build_info"] = np.array(json.dumps({**info, "lattice_spacing_m": 0.01}))   # the skin filter's width
    return model


def smooth_shape(skin, amplitude, phase):
    """A smooth skin displacement (V,3) growing with height y, like an expression on a face."""
    height = skin[:, 1] / 0.03
    return amplitude * height[:, None] * np.stack([np.sin(40 * skin[:, 2] + phase), 0.5 * np.cos(30 * skin[:, 0] + phase),
                                                   0.3 * np.sin(50 * skin[:, 0] + phase)], axis=1)


def test_quaternions_round_trip_and_blending_reproduces_each_shape():
    rng = np.random.default_rng(1)
    rotations = random_rotations(rng, 200)
    assert np.abs(quaternion_to_rotation(rotation_to_quaternion(rotations)) - rotations).max() < 1e-12
    targets = np.eye(3) + 0.3 * rng.standard_normal((3, 50, 3, 3))
    targets[np.linalg.det(targets) < 0] *= -1.0          # keep the examples uninverted, as transferred shapes are
    shapes = VolumetricBlendshapes.from_targets(["a", "b", "c"], targets)
    assert np.abs(shapes.blend([0, 0, 0]) - np.eye(3)).max() < 1e-12
    for k in range(3):
        assert np.abs(shapes.blend(np.eye(3)[k]) - targets[k]).max() < 1e-10
    # The blend of two shapes keeps rotations rotations: the rotation part of F* is orthonormal.
    halfway = shapes.blend([0.5, 0.5, 0.0])
    rotation = polar_rotation(halfway)
    assert np.abs(rotation @ rotation.transpose(0, 2, 1) - np.eye(3)).max() < 1e-12


def test_rotation_variant_svd_reconstructs_with_proper_rotations():
    rng = np.random.default_rng(7)
    F = np.eye(3) + 0.6 * rng.standard_normal((500, 3, 3))
    F[0], F[1] = np.eye(3), np.diag([2.0, 1e-9, 1.0])               # repeated and nearly zero singular values
    U, sigma, V = rotation_variant_svd(F)
    assert np.abs(np.einsum("mik,mk,mjk->mij", U, sigma, V) - F).max() < 1e-13
    assert np.abs(np.linalg.det(U) - 1.0).max() < 1e-12 and np.abs(np.linalg.det(V) - 1.0).max() < 1e-12
    assert np.all(sigma[:, 0] >= sigma[:, 1]) and np.all(sigma[:, 1] >= np.abs(sigma[:, 2]) - 1e-15)
    assert np.all(np.sign(sigma[:, 2]) == np.sign(np.linalg.det(F)))


def test_unit_volume_projection_is_the_closest_unit_determinant():
    rng = np.random.default_rng(2)
    F = np.eye(3) + 0.6 * rng.standard_normal((3000, 3, 3))      # many inverted, some past the fold
    _, sigma, _ = rotation_variant_svd(F)
    # Π σ just above 1 with a small σ_min: the root sits next to the fold of the path, where
    # Newton alone creeps (the compiled search falls back to bisection there).
    sigma = np.concatenate([sigma, [[2.42388417, 1.48138364, 0.58890976], [1.0, 1.0, 1.0], [3.0, 2.0, 1e-6]]])
    s, nu = unit_volume_singular_values(sigma)
    assert np.abs(np.prod(s, axis=1) - 1.0).max() < 1e-12
    assert np.all(s > 0.0)
    # Stationarity of ||s − σ||² on Π s = 1: s_i − σ_i + ν / s_i = 0 with one ν per tet.
    assert np.abs(s - sigma + nu[:, None] / s).max() < 1e-9
    assert np.abs(s[-2] - 1.0).max() < 1e-15
    # No point of the unit-determinant set near s is closer to σ (random feasible perturbations).
    for _ in range(20):
        trial = s * np.exp(0.05 * rng.standard_normal(s.shape))
        trial /= np.cbrt(np.prod(trial, axis=1))[:, None]
        assert np.all(np.sum((trial - sigma) ** 2, axis=1) >= np.sum((s - sigma) ** 2, axis=1) - 1e-14)


def test_the_local_step_shares_one_svd_between_arap_and_volume():
    rng = np.random.default_rng(4)
    F = np.eye(3) + 0.3 * rng.standard_normal((400, 3, 3))
    a, b = rng.uniform(0.0, 2.0, 400), rng.uniform(0.0, 2.0, 400)
    together = weighted_projections(F, a, b)
    apart = a[:, None, None] * projections("arap", F) + b[:, None, None] * projections("volume", F)
    assert np.abs(together - apart).max() < 1e-13
    # ARAP's projection is the polar rotation, checked against LAPACK's SVD.
    W, _, Zt = np.linalg.svd(F)
    D = np.ones((400, 3))
    D[:, 2] = np.sign(np.linalg.det(W @ Zt))
    assert np.abs(projections("arap", F) - np.einsum("mik,mk,mkj->mij", W, D, Zt)).max() < 1e-12


def test_projective_dynamics_reaches_newtons_equilibrium():
    model = small_block()
    mesh = TetMesh(model["rest_positions"], model["tets"])
    rng = np.random.default_rng(3)
    # Targets from a smooth bend plus per-tet noise, so that no x meets them all: a real compromise.
    centres = mesh.rest_positions[mesh.tets].mean(axis=1)
    angle = 8.0 * centres[:, 1]
    bend = np.zeros((len(mesh.tets), 3, 3))
    bend[:, 0, 0] = bend[:, 1, 1] = np.cos(angle)
    bend[:, 0, 1], bend[:, 1, 0] = -np.sin(angle), np.sin(angle)
    bend[:, 2, 2] = 1.0
    targets = bend @ (np.eye(3) + 0.1 * rng.standard_normal((len(mesh.tets), 3, 3)))
    energy = VolumetricBlendshapeEnergy(mesh, targets, target_weight=1.0, mu=0.3, lam=0.5)
    fixed = model_fixed_nodes(model)
    pd = ProjectiveDynamics(mesh, energy.terms, fixed)
    x_pd, pd_report = pd.solve(mesh.rest_positions, iterations=5000, tolerance_m=1e-11)
    x_newton, newton_report = newton_solve(energy.terms, mesh.rest_positions, fixed)
    assert pd_report.converged and newton_report.converged
    assert np.abs(x_pd[fixed] - mesh.rest_positions[fixed]).max() == 0.0
    assert np.abs(x_pd - x_newton).max() < 1e-5
    gradient = energy.gradient(x_pd).reshape(-1, 3)
    gradient[fixed] = 0.0
    assert np.abs(x_pd - mesh.rest_positions).max() > 1e-3        # it moved: the test is not trivial
    assert np.linalg.norm(gradient) < 1e-6 * np.linalg.norm(energy.gradient(mesh.rest_positions))


def test_global_matrix_is_factorised_once_and_reused():
    model = small_block()
    mesh = TetMesh(model["rest_positions"], model["tets"])
    energy = VolumetricBlendshapeEnergy(mesh, np.broadcast_to(np.eye(3), (len(mesh.tets), 3, 3)))
    pd = ProjectiveDynamics(mesh, energy.terms, model_fixed_nodes(model))
    factor = pd.cholesky.current
    x, report = pd.solve(mesh.rest_positions)
    assert report.converged and report.iterations == 1            # identity targets: the rest is the solution
    assert np.abs(x - mesh.rest_positions).max() < 1e-12
    assert pd.cholesky.current is factor and isinstance(pd.cholesky, SparseCholesky)


def test_volumetric_blendshapes_reproduce_the_shape_keys():
    model = small_block()
    skin = np.asarray(model["skin_vertices"])
    deltas = np.stack([smooth_shape(skin, 0.003, 0.0), smooth_shape(skin, 0.002, 1.3)])
    targets, transferred = transfer_shape_targets(model, deltas)
    shapes = VolumetricBlendshapes.from_targets(["one", "two"], targets)
    mesh = TetMesh(model["rest_positions"], model["tets"])
    fixed = model_fixed_nodes(model)
    energy = VolumetricBlendshapeEnergy(mesh, shapes.blend([1.0, 0.0]), target_weight=1.0, mu=1e-3, lam=1e-3)
    pd = ProjectiveDynamics(mesh, energy.terms, fixed)
    embedding_tets = np.asarray(model["tets"])[model["skin_embedding_tet"]]
    weights = np.asarray(model["skin_embedding_weights"])
    for k in range(2):
        energy.set_targets(shapes.blend(np.eye(2)[k]))
        pd.terms = energy.terms
        x, report = pd.solve(mesh.rest_positions, iterations=2000, tolerance_m=1e-10)
        assert report.converged
        played = np.einsum("vk,vkd->vd", weights, x[embedding_tets])
        # The targets are the transferred tets' own F, so the solve returns the transferred mesh,
        # whose skin reached the key up to the transfer's elastic compromise.
        assert np.abs(x - transferred[k]).max() < 1e-5
        assert np.abs(played - (skin + deltas[k])).max() < 0.01 * np.abs(deltas[k]).max()


# ---------------------------------------------------------------------------
# animate --actuation volumetric-blendshapes, through the real command line


def block_fit(model, deltas, names):
    """A FIT.npz for the block (no muscle tets) carrying the keys' deltas, as `solver fit` writes them."""
    count, skin_count = len(names), len(model["skin_vertices"])
    return {"shape_key_names": np.array(names), "activations": np.zeros((count, 0, 6)), "jaw": np.zeros((count, 5)),
            "fit_error_mm": np.zeros((count, 3)), "status": np.array(["converged"] * count),
            "detail_residual": np.zeros((count, skin_count, 3)), "neutral_activations": np.zeros((0, 6)),
            "tet_count": np.array(len(model["tets"])), "skin_vertex_count": np.array(skin_count),
            "shape_key_deltas": deltas.astype(np.float64)}


def test_animate_plays_shape_keys_as_volumetric_blendshapes(tmp_path):
    import subprocess
    import sys

    from solver.inverse.fit_file import save_fit
    from solver.model_file import save_model
    from solver.npz_files import read_npz, write_npz_atomically
    from solver.physics.animate import AnimationResult
    model = small_block()
    skin = np.asarray(model["skin_vertices"])
    deltas = np.stack([smooth_shape(skin, 0.003, 0.0), smooth_shape(skin, 0.002, 1.3)])
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", block_fit(model, deltas, ["one", "two"]))
    weights = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    write_npz_atomically(tmp_path / "weights.npz", {"names": np.array(["one", "two"]), "weights": weights,
                                                    "fps": np.array(24.0)})
    completed = subprocess.run([sys.executable, "-m", "solver", "animate", str(tmp_path / "model.npz"),
                                str(tmp_path / "fit.npz"), str(tmp_path / "weights.npz"), "-o",
                                str(tmp_path / "result.npz"), "--actuation", "volumetric-blendshapes"],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    result = read_npz(tmp_path / "result.npz")
    frames = len(weights)
    expected_keys = set(AnimationResult(np.zeros((frames, 1, 3)), np.ones(frames, bool), np.zeros(frames, int),
                                        np.zeros(frames), 24.0).arrays())
    assert set(result) == expected_keys and (tmp_path / "result.pc2").exists()
    assert result["converged"].all() and (result["inverted_tets"] == 0).all()
    assert np.abs(result["skin_positions"][0] - skin).max() < 1e-6
    # Each key played alone is the key (detail carries what the tets cannot) up to the passive terms'
    # compromise (μ = λ = 1e-2 against the targets' 1): 18 µm on a 2.8 mm key when measured.
    for frame, key in ((1, 0), (2, 1)):
        assert np.abs(result["skin_positions"][frame] - (skin + deltas[key])).max() < 0.01 * np.abs(deltas[key]).max()
    halfway = result["skin_positions"][3] - skin
    assert np.abs(halfway - 0.5 * deltas.sum(axis=0)).max() < 0.1 * np.abs(deltas).max()


def test_actuation_is_checked_once_by_the_request(tmp_path):
    from solver.requests.animate import AnimateRequest
    from solver.requests.fields import RequestError
    from solver.model_file import save_model
    save_model(tmp_path / "model.npz", small_block())
    (tmp_path / "activations.npz").write_bytes(b"")
    with pytest.raises(RequestError, match="actuation"):
        AnimateRequest(model=tmp_path / "model.npz", output=tmp_path / "r.npz", activations=tmp_path / "activations.npz",
                       actuation="blendshapes")
    with pytest.raises(RequestError, match="actuation"):
        AnimateRequest(model=tmp_path / "model.npz", output=tmp_path / "r.npz", activations=tmp_path / "activations.npz",
                       actuation="volumetric-blendshapes")


def test_constraints_through_the_schur_complement_hold_and_are_optimal():
    """Top-face nodes pressed 3 mm down by equality rows (as active contacts are): PD keeps them
    exactly there, and at its equilibrium the free gradient lies in the constraints' row space
    (the KKT conditions of Eq. 10)."""
    model = small_block()
    mesh = TetMesh(model["rest_positions"], model["tets"])
    energy = VolumetricBlendshapeEnergy(mesh, np.broadcast_to(np.eye(3), (len(mesh.tets), 3, 3)), 1.0, 0.3, 0.5)
    fixed = model_fixed_nodes(model)
    pd = ProjectiveDynamics(mesh, energy.terms, fixed)
    top = np.flatnonzero((mesh.rest_positions[:, 1] > 0.03 - 1e-9) & (np.abs(mesh.rest_positions[:, 0] - 0.02) < 0.011))
    slot = {node: index for index, node in enumerate(pd.free)}
    rows = np.zeros((len(top), 3 * len(pd.free)))
    for row, node in enumerate(top):
        rows[row, 3 * slot[node] + 1] = 1.0                       # the y coordinate of the node
    values = mesh.rest_positions[top, 1] - 0.003
    x, report = pd.solve(mesh.rest_positions, iterations=3000, tolerance_m=1e-11, constraints=lambda x: (rows, values))
    assert report.converged
    assert np.abs(x[top, 1] - values).max() < 1e-12
    gradient = energy.gradient(x).reshape(-1, 3)[pd.free].reshape(-1)
    multipliers, *_ = np.linalg.lstsq(rows.T, -gradient, rcond=None)
    assert np.linalg.norm(gradient + rows.T @ multipliers) < 1e-6 * np.linalg.norm(gradient)
    assert np.linalg.norm(gradient) > 0.0
    assert (multipliers > 0.0).all()          # every pressed node pushes back up: the rows are all active


def test_a_fit_without_shape_key_deltas_is_refused_clearly(tmp_path):
    import subprocess
    import sys

    from solver.inverse.fit_file import save_fit
    from solver.model_file import save_model
    from solver.npz_files import write_npz_atomically
    model = small_block()
    fit = block_fit(model, np.zeros((1, len(model["skin_vertices"]), 3)), ["one"])
    del fit["shape_key_deltas"]
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", fit)
    write_npz_atomically(tmp_path / "weights.npz", {"names": np.array(["one"]), "weights": np.ones((1, 1))})
    completed = subprocess.run([sys.executable, "-m", "solver", "animate", str(tmp_path / "model.npz"),
                                str(tmp_path / "fit.npz"), str(tmp_path / "weights.npz"), "-o",
                                str(tmp_path / "result.npz"), "--actuation", "volumetric-blendshapes"],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode != 0
    assert "shape_key_deltas" in completed.stderr + completed.stdout and "fit the shapes again" in completed.stderr + completed.stdout
    assert not (tmp_path / "result.npz").exists() and not (tmp_path / ".result.partial").exists()
