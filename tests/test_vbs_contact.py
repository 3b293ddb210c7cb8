"""Contact for volumetric blendshapes (solver/volumetric_blendshapes/contact.py): the penalty in
the Projective Dynamics matrix keeps the skin out of a collider, moves only what the contact
touches, lets go when the key does, and works through `animate --actuation
volumetric-blendshapes --colliders`, the real command line."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from test_volumetric_blendshapes import block_fit, small_block

from solver.collisions.scene import CollisionScene
from solver.collisions.sdf import SphereCollider
from solver.volumetric_blendshapes.animate import VolumetricBlendshapePlayer

TOP = 0.03          # the block's top face (y), 4 × 3 × 3 cm, pinned at y = 0
LIFT = 0.003        # the key lifts the top by this much


def lift_key(skin):
    """Every skin vertex raised in proportion to its height: the top face by LIFT."""
    delta = np.zeros_like(skin)
    delta[:, 1] = LIFT * skin[:, 1] / TOP
    return delta


@pytest.fixture(scope="module")
def block():
    model = small_block()
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    # A ball 1 mm above the middle of the top face: the key pushes the top up to 2 mm into it.
    ball = SphereCollider(name="ball", centre=np.array([0.02, TOP + 0.031, 0.015]), radius=0.03)
    scene = CollisionScene(model, teeth=False, lips=False, colliders=[ball])
    players = {held: VolumetricBlendshapePlayer(model, ["lift"], lift_key(skin)[None], np.zeros((1, 5)),
                                                scene=scene if held else None)
               for held in (False, True)}
    return model, scene, players


def test_the_skin_is_held_out_of_the_collider_and_only_there(block):
    model, scene, players = block
    plain, _ = players[False].frame([1.0])
    held, report = players[True].frame([1.0])
    assert report.converged
    skin_plain, skin_held = (players[True].skin_matrix @ x for x in (plain, held))
    assert scene.measure(skin_plain, players[True].pose).max_depth_m > 1.2e-3
    # The simulation itself holds the skin: what is left inside is the penalty's give (force / 2w).
    assert scene.measure(skin_held, players[True].pose).max_depth_m < 0.1e-3
    assert players[True].contact.last_touching > 0
    shown, deepest = players[True].displayed_skin(held)
    assert deepest <= 5e-5 and np.abs(shown - skin_held).max() < 0.1e-3
    # The push is felt most under the ball and fades away from it (a point load on a slab: 1/r).
    change = np.linalg.norm(skin_held - skin_plain, axis=1)
    far = np.linalg.norm(np.asarray(model["skin_vertices"]) - np.array([0.02, TOP, 0.015]), axis=1) > 0.015
    assert change[far].max() < 0.5 * change.max()
    assert np.linalg.det(players[True].mesh.deformation_gradients(held)).min() > 0.0


def test_the_contact_lets_go_when_the_key_does(block):
    model, scene, players = block
    for weight in (1.0, 0.0):
        plain, _ = players[False].frame([weight])
        held, report = players[True].frame([weight])
    assert report.converged and players[True].contact.last_touching == 0
    assert np.abs(held - plain).max() < 1e-5
    assert np.abs(held - np.asarray(model["rest_positions"])).max() < 1e-5


def test_the_shown_skin_is_filtered_against_the_rig_and_kept_out(block):
    from solver.physics.contact_response import DEFAULT_CONTACT_TOLERANCE
    from solver.physics.skin_filter import SkinFilter
    model, scene, players = block
    player = players[True]
    skin_filter = SkinFilter.for_model(model)
    x, _ = player.frame([1.0])
    raw = player.shown_skin(x, [1.0])
    shown = player.shown_skin(x, [1.0], skin_filter=skin_filter)
    rig = np.asarray(model["skin_vertices"]) + lift_key(np.asarray(model["skin_vertices"]))
    # The written skin is the Phace path's filter on the displayed skin against the plain rig frame,
    # kept out of the same scene; where the ball presses, the deviation from the rig stays.
    expected = skin_filter.apply_in_scene(raw.skin, rig, scene, player.pose, DEFAULT_CONTACT_TOLERANCE)
    assert np.array_equal(shown.skin, expected.skin) and shown.pinned == expected.held_by_colliders
    assert shown.depth_m <= DEFAULT_CONTACT_TOLERANCE
    pressed = np.linalg.norm(raw.skin - rig, axis=1).max()
    assert pressed > 1e-3 and np.linalg.norm(shown.skin - rig, axis=1).max() > 0.8 * pressed
    # Away from the ball the filter changes little (the dent spreads by about the filter's width).
    far = np.linalg.norm(rig - np.array([0.02, TOP, 0.015]), axis=1) > 0.015
    assert np.linalg.norm(shown.skin[far] - raw.skin[far], axis=1).max() < 0.1 * pressed


def _pushes(seed, count=40):
    """An LCP shaped like the contact's: S = (n_u · n_v) B_u A⁻¹ B_vᵀ (a Hadamard product of two
    positive semi-definite matrices, the Green's part of low rank, so nearly singular; unit
    normals facing every way, as two pressed lips' do) plus a small compliance, gaps both ways."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((count, 6))
    normals = rng.standard_normal((count, 3))
    normals /= np.linalg.norm(normals, axis=1)[:, None]
    coupling = (normals @ normals.T) * (basis @ basis.T + 1e-3 * np.eye(count))
    return coupling, np.full(count, 1e-4), rng.uniform(-1.0, 1.0, count)


def _whole_block_exchanges_settle(coupling, compliance, gaps, passes=50):
    active, force = gaps < 0.0, np.zeros(len(gaps))
    for _ in range(passes):
        force[:] = 0.0
        if active.any():
            force[active] = np.linalg.solve(coupling[np.ix_(active, active)] + np.diag(compliance[active]),
                                            -gaps[active])
        wrong = (active & (force < 0.0)) | (~active & (gaps + coupling @ force < -1e-6))
        if not wrong.any():
            return True
        active ^= wrong
    return False


@pytest.mark.parametrize("seed", [1, 4, 5, 6, 8, 11, 12])
def test_the_pushes_solve_the_complementarity_problem_where_block_exchanges_cycle(seed):
    from solver.volumetric_blendshapes.contact import push_forces
    coupling, compliance, gaps = _pushes(seed)
    if seed < 10:       # these cycle when whole blocks change sides every pass (ICT's pressed lips did)
        assert not _whole_block_exchanges_settle(coupling, compliance, gaps)
    force, settled = push_forces(coupling, compliance, gaps)
    after = gaps + (coupling + np.diag(compliance)) @ force
    scale = np.abs(gaps).max()
    assert settled and force.min() >= 0.0 and after.min() > -1e-9 * scale
    assert np.abs(force * after).max() < 1e-9 * scale * np.abs(force).max()


def _box_mesh(low, high):
    corners = np.array([[x, y, z] for x in (low[0], high[0]) for y in (low[1], high[1]) for z in (low[2], high[2])])
    faces = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                      [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    return corners, faces


def test_animate_keeps_the_skin_out_of_a_prop_through_the_command_line(tmp_path):
    from solver.inverse.fit_file import save_fit
    from solver.model_file import save_model
    from solver.npz_files import read_npz, write_npz_atomically
    model = small_block()
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", block_fit(model, lift_key(skin)[None], ["lift"]))
    write_npz_atomically(tmp_path / "weights.npz", {"names": np.array(["lift"]), "weights": np.array([[0.0], [1.0]]),
                                                    "fps": np.array(24.0)})
    vertices, faces = _box_mesh((0.012, TOP + 0.001, 0.008), (0.028, TOP + 0.02, 0.022))
    write_npz_atomically(tmp_path / "prop.npz", {"vertices": vertices, "faces": faces,
                                                 "transforms": np.eye(4)[None]})
    completed = subprocess.run([sys.executable, "-m", "solver", "animate", str(tmp_path / "model.npz"),
                                str(tmp_path / "fit.npz"), str(tmp_path / "weights.npz"), "-o",
                                str(tmp_path / "result.npz"), "--actuation", "volumetric-blendshapes",
                                "--collider", str(tmp_path / "prop.npz")],
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr
    result = read_npz(tmp_path / "result.npz")
    assert result["converged"].all() and result["contacts"][1] > 0 and result["contacts"][0] == 0
    assert result["penetration_depth_max"].max() <= 5e-5
    lifted = result["skin_positions"][1]
    under = ((skin[:, 0] > 0.013) & (skin[:, 0] < 0.027) & (skin[:, 2] > 0.009) & (skin[:, 2] < 0.021)
             & (skin[:, 1] > TOP - 1e-9))
    assert under.any() and lifted[under, 1].max() <= TOP + 0.001 + 5e-5
    assert lifted[skin[:, 1] > TOP - 1e-9, 1].max() > TOP + 0.002          # elsewhere the top still rises


def test_the_request_takes_contact_but_not_ipopt_with_volumetric_blendshapes(tmp_path):
    from solver.inverse.fit_file import save_fit
    from solver.model_file import save_model
    from solver.npz_files import write_npz_atomically
    from solver.requests.animate import AnimateRequest
    from solver.requests.fields import RequestError
    model = small_block()
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", block_fit(model, np.zeros((1, len(model["skin_vertices"]), 3)), ["one"]))
    write_npz_atomically(tmp_path / "weights.npz", {"names": np.array(["one"]), "weights": np.ones((1, 1))})
    common = dict(model=tmp_path / "model.npz", output=tmp_path / "r.npz", fit=tmp_path / "fit.npz",
                  weights=tmp_path / "weights.npz", actuation="volumetric-blendshapes")
    assert AnimateRequest(**common, collisions=("teeth", "lips")).collisions == ("teeth", "lips")
    with pytest.raises(RequestError, match="contact_solver"):
        AnimateRequest(**common, collisions=("teeth",), contact_solver="ipopt")
