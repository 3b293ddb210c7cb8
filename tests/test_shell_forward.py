"""The interactive shell's forward simulation (solver/shell/forward.py, colliders.py, linear.py)
on a synthetic curved sheet with a hole and two shape keys (tests/shell_sheets.py)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from shell_sheets import sheet_shell
from solver.collisions import sdf
from solver.shell.colliders import (BoxCollider, CapsuleCollider, MeshCollider, Placement, SphereCollider,
                                    analytic_signed_distances, press_out_fine)
from solver.pc2 import read_pc2
from solver.shell import energies
from solver.shell.forward import ShellSimulator, substep_rhs
from solver.shell.linear import ConstantFactor
from solver.shell.shell_file import save_shell


def test_the_factor_solves_the_system_for_three_right_hand_sides():
    shell = sheet_shell(stiffness=1.0)
    sim = ShellSimulator(shell)
    rhs = np.random.default_rng(1).normal(size=(sim.vertex_count, 3))
    solved = sim.factor.solve(rhs)
    assert np.abs(sim.matrix @ solved - rhs).max() < 1e-10 * np.abs(rhs).max() * sim.matrix.diagonal().max()
    with pytest.raises(ValueError, match="positive definite"):
        ConstantFactor(-sp.identity(5, format="csc"))


def _energy(sim, x, x_n, v_n, target):
    """Ψ of one sub-step (forward.py's module docstring), written out term by term."""
    s, h, top = sim.settings, sim.substep_s, sim.topology
    inertial = x_n + h * v_n
    lagged = x_n + s.lag_blend * h * v_n
    capped = x_n + np.clip(target - x_n, -s.reproducibility, s.reproducibility)
    energy = 0.5 * (sim.inertia * ((x - inertial) ** 2).sum(1)).sum()
    energy += 0.5 * (sim.damping * ((x - x_n) ** 2).sum(1)).sum()
    energy += 0.5 * (sim.actuation * ((x - capped) ** 2).sum(1)).sum()
    a, b = top.edges.T
    direction = lagged[a] - lagged[b]
    d = top.edge_rest_length[:, None] * direction / np.linalg.norm(direction, axis=1, keepdims=True)
    energy += 0.5 * (sim.edge_weight * ((x[a] - x[b] - d) ** 2).sum(1)).sum()
    q_hat = np.einsum("dk,dkc->dc", top.bend_weights, lagged[top.dihedrals])
    norm = np.linalg.norm(q_hat, axis=1, keepdims=True)
    d = np.where(top.bend_rest_length[:, None] > 0, top.bend_rest_length[:, None] * q_hat / np.maximum(norm, 1e-300), 0)
    q = np.einsum("dk,dkc->dc", top.bend_weights, x[top.dihedrals])
    energy += 0.5 * (sim.bend_weight * ((q - d) ** 2).sum(1)).sum()
    return energy


def _rhs(sim, x_n, v_n, target, out):
    s = sim.settings
    substep_rhs(x_n, v_n, target, sim.substep_s, s.lag_blend, s.reproducibility, sim.inertia, sim.damping,
                sim.actuation, sim.topology.edges, sim.edge_weight, sim.topology.edge_rest_length,
                sim.topology.dihedrals, sim.topology.bend_weights, sim.bend_weight, sim.topology.bend_rest_length,
                out, np.zeros_like(out))


def test_the_fused_substep_gradient_equals_the_energies_module():
    """b = K xⁿ − ∇Ψ(xⁿ) with ∇Ψ and K from energies.py (lagged directions at x̂ of Eq. 12,
    capped targets of Eq. 6, inertia + damping), for a stiffness that varies per vertex."""
    shell = sheet_shell(cells=10)
    rng = np.random.default_rng(4)
    shell = dataclasses.replace(shell, strain_stiffness=rng.uniform(0.1, 10, len(shell.coarse_rest)),
                                bending_stiffness=rng.uniform(0.1, 10, len(shell.coarse_rest)))
    sim = ShellSimulator(shell)
    s, h = sim.settings, sim.substep_s
    x_n = sim.rest + 0.01 * rng.normal(size=sim.rest.shape)
    v_n = 0.3 * rng.normal(size=sim.rest.shape)
    target = sim.coarse_rig(np.array([1.0, 1.0])) + 0.02 * rng.normal(size=sim.rest.shape)
    lagged = x_n + s.lag_blend * h * v_n
    strain = energies.SpringEnergy(energies.strain_springs(sim.topology), shell.strain_stiffness, lagged)
    bending = energies.SpringEnergy(energies.bending_springs(sim.topology), shell.bending_stiffness, lagged)
    actuation = energies.DiagonalQuadratic(energies.actuation_stiffness(sim.topology, s.max_pressure, s.reproducibility),
                                           energies.capped_targets(x_n, target, s.reproducibility))
    inertia = energies.DiagonalQuadratic(*energies.inertia_terms(sim.mass, h, s.damping, x_n + h * v_n, x_n))
    gradient = sum(term.gradient(x_n) for term in (strain, bending, actuation, inertia)).reshape(-1, 3)
    hessian = sum(term.hessian(x_n) for term in (strain, bending, actuation, inertia))
    assert abs(hessian - sp.kron(sim.matrix, sp.identity(3))).max() < 1e-9 * abs(hessian).max()
    rhs = np.zeros_like(x_n)
    _rhs(sim, x_n, v_n, target, rhs)
    expected = sim.matrix @ x_n - gradient
    assert np.abs(rhs - expected).max() < 1e-10 * np.abs(expected).max()


def test_one_substep_minimises_the_written_out_energy():
    """x = K⁻¹ b is the minimiser: the finite-difference gradient of Ψ vanishes there, and
    K x − b is the gradient elsewhere (so b = K x^n − ∇Ψ(x^n))."""
    shell = sheet_shell(cells=8, stiffness=3.0)
    sim = ShellSimulator(shell)
    rng = np.random.default_rng(2)
    x_n = sim.rest + 0.01 * rng.normal(size=sim.rest.shape)
    v_n = 0.5 * rng.normal(size=sim.rest.shape)
    target = sim.coarse_rig(np.array([1.0, 0.5]))
    s = sim.settings
    rhs = np.zeros_like(x_n)
    _rhs(sim, x_n, v_n, target, rhs)
    probe = x_n + 0.003 * rng.normal(size=x_n.shape)
    step = 1e-6
    numeric = np.zeros(probe.size)
    for index in range(probe.size):
        bump = np.zeros(probe.size)
        bump[index] = step
        numeric[index] = (_energy(sim, probe + bump.reshape(-1, 3), x_n, v_n, target)
                          - _energy(sim, probe - bump.reshape(-1, 3), x_n, v_n, target)) / (2 * step)
    analytic = (sim.matrix @ probe - rhs).ravel()
    assert np.abs(numeric - analytic).max() < 1e-5 * np.abs(analytic).max()


def test_the_rest_pose_stays_at_rest():
    sim = ShellSimulator(sheet_shell(stiffness=1.0))
    for _ in range(20):
        sim.step(None)
    assert np.abs(sim.coarse_positions - sim.rest).max() < 1e-12
    assert np.abs(sim.fine_positions_m() - sim.fine_rest_m).max() < 1e-12


@pytest.mark.parametrize("stiffness", [0.1, 1.0])
def test_a_held_shape_key_converges_to_its_coarse_target_within_the_tolerance(stiffness):
    sim = ShellSimulator(sheet_shell(stiffness=stiffness))
    weights = np.array([1.0, 1.0])
    for _ in range(30):
        sim.step(weights)
    error = np.abs(sim.coarse_positions - sim.target).max()
    assert error < sim.settings.reproducibility
    # Settled: a further second changes nothing visible.
    before = sim.coarse_positions.copy()
    for _ in range(30):
        sim.step(weights)
    assert np.abs(sim.coarse_positions - before).max() < 1e-6


def test_the_factor_is_made_once_however_many_frames_run():
    sim = ShellSimulator(sheet_shell())
    sphere = SphereCollider([0.1, 0.1, 0.1], 0.02)
    for frame in range(10):
        sim.step([frame / 10, 0.0], colliders=[sphere], dt=1 / 30)
    assert sim.factorisations == 1


def test_thirty_fps_frames_take_whole_substeps_and_keep_the_time():
    sim = ShellSimulator(sheet_shell())
    taken = [sim.step(None, dt=1 / 30) for _ in range(30)]
    assert set(taken) <= {16, 17}
    assert abs(sum(taken) * sim.substep_s - 1.0) < sim.substep_s


def _push_sphere(max_depth, depth_into_sheet, frames=40):
    """A sphere pressed into the sheet's top (outward +z) at the middle, radius 0.1 face units."""
    shell = sheet_shell(stiffness=1.0, max_depth=max_depth, hole=False)
    sim = ShellSimulator(shell)
    radius = 0.1
    top = np.array([0.5, 0.5, 0.15])            # the sheet's surface point under the sphere
    start = top + np.array([0, 0, radius + 0.02])
    end = top + np.array([0, 0, radius - depth_into_sheet])
    sphere = SphereCollider(start * shell.face_height_m, radius * shell.face_height_m)
    for frame in range(frames):
        share = min(frame / (frames // 2), 1.0)
        sphere.centre_m = (start + share * (end - start)) * shell.face_height_m
        sim.step(None, colliders=[sphere])
    return sim, sphere, radius


def test_a_pushed_sphere_leaves_no_vertex_inside_it():
    sim, sphere, radius = _push_sphere(max_depth=0.2, depth_into_sheet=0.04)
    distance, _ = analytic_signed_distances(sim.coarse_positions, sphere, 1 / sim.face_height_m)
    assert distance.min() >= -1e-9
    # The sheet did move: the vertex under the sphere is pushed about as deep as the sphere went.
    middle = np.argmin(np.linalg.norm(sim.rest - [0.5, 0.5, 0.15], axis=1))
    assert sim.rest[middle, 2] - sim.coarse_positions[middle, 2] > 0.03
    assert sim.contact_force_n > 0


def test_no_vertex_sinks_deeper_than_its_max_depth():
    max_depth = 0.01
    sim, sphere, _ = _push_sphere(max_depth=max_depth, depth_into_sheet=0.05)
    normals = np.zeros_like(sim.rest)
    from solver.shell.forward import vertex_normals
    vertex_normals(sim.target, sim.topology.triangles, normals)
    depth = -((sim.coarse_positions - sim.target) * normals).sum(1)
    assert depth.max() <= max_depth + 1e-9
    assert depth.max() > 0.5 * max_depth


def test_prescribed_vertices_follow_the_target():
    shell = sheet_shell(prescribed=np.arange(40))
    sim = ShellSimulator(shell)
    sim.step([1.0, 0.0], dt=0.01)
    assert np.abs(sim.coarse_positions[:40] - sim.target[:40]).max() < 1e-15


def test_pulling_moves_the_grabbed_vertices_with_the_sphere():
    shell = sheet_shell(stiffness=1.0, hole=False)
    sim = ShellSimulator(shell)
    h = shell.face_height_m
    centre = np.array([0.5, 0.5, 0.15])
    grabbed = sim.grab(centre * h, 0.05 * h)
    assert grabbed > 0
    vertices = sim.grabbed_vertices
    offsets = sim.coarse_positions[vertices] - centre
    pulled = centre + np.array([0.0, 0.0, 0.05])
    sim.move_grab(pulled * h)
    for _ in range(5):
        sim.step(None)
    assert np.abs(sim.coarse_positions[vertices] - (pulled + offsets)).max() < 1e-12
    # Their neighbours come along, less far.
    neighbours = np.setdiff1d(np.unique(sim.topology.edges[np.isin(sim.topology.edges, vertices).any(1)]), vertices)
    lift = sim.coarse_positions[neighbours, 2] - sim.rest[neighbours, 2]
    assert (lift > 0.001).all() and (lift < 0.05).all()
    sim.release()
    for _ in range(60):
        sim.step(None)
    assert np.abs(sim.coarse_positions - sim.rest).max() < 0.005


def test_the_fine_mesh_is_the_warp_plus_the_weighted_detail():
    shell = sheet_shell(detail_scale=1e-3)
    sim = ShellSimulator(shell)
    weights = np.array([0.5, 0.25])
    sim.step(weights, dt=0.01)
    expected = (shell.fine_rest_m + (sim.coarse_positions - sim.rest) * shell.face_height_m
                + (weights @ shell.detail.toarray()).reshape(-1, 3))
    assert np.abs(sim.fine_positions_m() - expected).max() < 1e-14
    assert set(sim.timings) == {"coarse_rig", "simulate", "warp_detail"}


@pytest.mark.parametrize("make", [
    lambda: (SphereCollider([0.1, 0.2, 0.3], 0.15), lambda p: sdf.sphere_signed_distance(p, [0.1, 0.2, 0.3], 0.15)),
    lambda: (CapsuleCollider([0, 0, 0], [0.3, 0.1, 0.0], 0.1),
             lambda p: sdf.capsule_signed_distance(p, [0, 0, 0], [0.3, 0.1, 0.0], 0.1)),
    lambda: (BoxCollider([0.1, 0, 0], _rotation(), [0.1, 0.2, 0.05]),
             lambda p: sdf.box_signed_distance(p, [0.1, 0, 0], _rotation(), [0.1, 0.2, 0.05])),
])
def test_the_compiled_signed_distances_agree_with_the_collisions_package(make):
    collider, reference = make()
    points = np.random.default_rng(3).uniform(-0.4, 0.5, size=(500, 3))
    value, closest = analytic_signed_distances(points, collider)
    expected = reference(points)
    assert (value < 0).any() and (value > 0).any()
    assert np.abs(value - expected.value).max() < 1e-12
    assert np.abs(closest - expected.closest).max() < 1e-12


def _rotation():
    angle = 0.4
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _icosphere(radius, centre):
    t = (1 + 5 ** 0.5) / 2
    vertices = np.array([[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t],
                         [0, 1, -t], [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]], dtype=float)
    faces = np.array([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4],
                      [11, 10, 2], [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
                      [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1]])
    for _ in range(2):
        edges = {}
        new_faces = []
        vertices = list(vertices)
        for a, b, c in faces:
            middle = []
            for i, j in ((a, b), (b, c), (c, a)):
                key = (min(i, j), max(i, j))
                if key not in edges:
                    edges[key] = len(vertices)
                    vertices.append((vertices[i] + vertices[j]) / 2)
                middle.append(edges[key])
            ab, bc, ca = middle
            new_faces += [[a, ab, ca], [b, bc, ab], [c, ca, bc], [ab, bc, ca]]
        vertices, faces = np.array(vertices), np.array(new_faces)
    vertices = vertices / np.linalg.norm(vertices, axis=1, keepdims=True)
    return vertices * radius + centre, faces


def test_a_mesh_collider_pushes_the_sheet_out_like_the_sphere_it_approximates():
    shell = sheet_shell(stiffness=1.0, max_depth=0.2, hole=False)
    h = shell.face_height_m
    vertices, faces = _icosphere(0.1 * h, np.zeros(3))
    prop = MeshCollider(vertices, faces)
    sim = ShellSimulator(shell)
    top = np.array([0.5, 0.5, 0.15])
    for frame in range(30):
        transform = np.eye(4)
        transform[:3, 3] = (top + [0, 0, 0.12 - 0.06 * min(frame / 15, 1.0)]) * h
        prop.transform = transform
        sim.step(None, colliders=[prop])
    inside = prop.signed_distance_m(sim.coarse_positions * h)
    assert inside.min() > -0.01 * 0.1 * h      # within the grid's accuracy of the surface
    middle = np.argmin(np.linalg.norm(sim.rest - top, axis=1))
    assert sim.rest[middle, 2] - sim.coarse_positions[middle, 2] > 0.02


def test_the_fine_skin_is_pushed_out_only_as_far_as_its_coarse_vertices_are():
    """colliders.press_out_fine: a fine sheet warped from a coarse one, a sphere (and the mesh
    prop that approximates it) over both. Where the coarse vertices are out, the fine ones are
    moved out too; where the bone kept a coarse vertex inside, its fine neighbours may stay as
    deep as the warp reads; fine vertices already shallower do not move."""
    from solver.geometry.mesh_ops import icosphere
    from solver.shell.remesh import remesh_isotropic
    from solver.shell.transfer import RigTransfer
    from tests.test_shell_geometry import _holed_sheet
    fine_rest, fine_triangles = _holed_sheet()
    coarse = remesh_isotropic(fine_rest, fine_triangles, 150)
    warp = RigTransfer.build(fine_rest, fine_triangles, coarse.vertices, coarse.triangles).fine_from_coarse
    centre, radius = np.array([0.5, 0.25, 0.2]), 0.3
    sphere = SphereCollider(centre, radius)
    vertices, faces = icosphere(4, radius=radius)
    prop = MeshCollider(vertices + centre, faces)
    coarse_positions = coarse.vertices.copy()
    # Coarse vertices inside the sphere go to its surface, except those under its middle, which
    # stay 0.005 inside (as the max depth would keep them).
    distance, closest = analytic_signed_distances(coarse_positions, sphere)
    held = np.linalg.norm(coarse_positions[:, :2] - centre[:2], axis=1) < 0.05
    inside = distance < 0
    coarse_positions[inside] = closest[inside]
    coarse_positions[held & inside] += 0.005 * np.array([0, 0, 1.0])        # towards the centre
    assert (held & inside).any() and (inside & ~held).sum() > 10
    coarse_depth = np.maximum(-analytic_signed_distances(coarse_positions, sphere)[0], 0.0)
    allowed = warp @ coarse_depth
    warped = fine_rest + warp @ (coarse_positions - coarse.vertices)
    before = np.maximum(-analytic_signed_distances(warped, sphere)[0], 0.0)
    assert (before > allowed + 1e-3).sum() > 10           # the chords of the contact sink in
    for collider, tolerance in ((sphere, 1e-12), (prop, 1e-3)):      # the prop's facets lie inside the sphere
        fine = warped.copy()
        moved = press_out_fine(fine, coarse_positions, warp, Placement.of([collider]))
        after = np.maximum(-analytic_signed_distances(fine, sphere)[0], 0.0)
        assert moved > 10
        assert (after <= allowed + tolerance).all()
        untouched = before <= allowed
        assert np.abs(fine[untouched] - warped[untouched]).max() == 0.0
        assert after.max() > 0.002                     # round the held coarse vertices the skin stays in


# --------------------------------------------------------------------------- the two front doors

ROOT = Path(__file__).resolve().parents[1]


def _solver(*args, cwd=None):
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, args)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def _lines(output: str) -> list:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture
def shell_inputs(tmp_path):
    """SHELL.npz (the sheet), WEIGHTS.npz (12 frames ramping the bump in) and a prop MESH.npz
    (an icosphere coming down on the sheet)."""
    shell = sheet_shell(stiffness=1.0, hole=False, detail_scale=1e-3)
    save_shell(tmp_path / "shell.npz", shell)
    frames = 12
    ramp = np.linspace(0.0, 1.0, frames)
    np.savez(tmp_path / "weights.npz", names=np.array(["bump"]), weights=ramp[:, None], fps=np.array(30.0))
    h = shell.face_height_m
    vertices, faces = _icosphere(0.1 * h, np.zeros(3))
    transforms = np.tile(np.eye(4), (frames, 1, 1))
    transforms[:, :3, 3] = (np.array([0.5, 0.5, 0.15 + 0.1]) + np.outer(1 - ramp, [0, 0, 0.05])) * h
    np.savez(tmp_path / "prop.npz", vertices=vertices, faces=faces, transforms=transforms)
    return tmp_path, shell, frames


def test_shell_animate_on_the_command_line_writes_result_and_cache(shell_inputs):
    folder, shell, frames = shell_inputs
    done = _solver("shell-animate", folder / "shell.npz", folder / "weights.npz", "-o", folder / "result.npz",
                   "--collider", folder / "prop.npz")
    assert done.returncode == 0, done.stdout + done.stderr
    result = [line for line in _lines(done.stdout) if line["type"] == "result"][0]
    assert result["frames"] == frames and "penetration_depth_max_mm" in result
    with np.load(folder / "result.npz", allow_pickle=False) as arrays:
        skin = arrays["skin_positions"]
        assert skin.shape == (frames, len(shell.fine_rest_m), 3)
        assert set(arrays.files) >= {"skin_positions", "converged", "newton_iterations", "frame_seconds", "fps",
                                     "skull_transforms", "jaw_transforms", "penetration_depth_max", "contacts"}
        assert float(arrays["fps"]) == 30.0
        assert arrays["contacts"][-1] > 0
        assert arrays["penetration_depth_max"].max() < 0.01 * 0.1 * shell.face_height_m
    cache, start, rate = read_pc2(folder / "result.pc2")
    assert cache.shape == skin.shape and start == 1.0
    assert np.abs(cache - skin).max() < 1e-6
    # The first frame is the rig's own pose (no detail at weight 0): the rest.
    assert np.abs(skin[0] - shell.fine_rest_m).max() < 1e-12
    assert not (folder / ".result.partial").exists()


def test_shell_animate_as_a_job_gives_the_same_result(shell_inputs):
    folder, shell, frames = shell_inputs
    direct = _solver("shell-animate", folder / "shell.npz", folder / "weights.npz", "-o", folder / "direct.npz")
    assert direct.returncode == 0, direct.stdout + direct.stderr
    job = {"schema_version": 1, "command": "shell-animate",
           "inputs": {"shell": "shell.npz", "weights": "weights.npz", "colliders": []},
           "outputs": {"result": "job_result.npz"}, "settings": {"cache_start_frame": 5.0}}
    (folder / "job.json").write_text(json.dumps(job))
    ran = _solver("run-job", folder)
    lines = _lines(ran.stdout)
    assert ran.returncode == 0 and lines[-1] == {"type": "done", "status": "ok", "exit_code": 0}, ran.stdout
    with np.load(folder / "direct.npz") as a, np.load(folder / "job_result.npz") as b:
        assert np.array_equal(a["skin_positions"], b["skin_positions"])
    assert read_pc2(folder / "job_result.pc2")[1] == 5.0


def test_shell_animate_refuses_bad_input_with_the_field_named(shell_inputs):
    folder, _, _ = shell_inputs
    np.savez(folder / "bad_weights.npz", names=np.array(["frown"]), weights=np.ones((3, 1)))
    done = _solver("shell-animate", folder / "shell.npz", folder / "bad_weights.npz", "-o", folder / "r.npz")
    assert done.returncode == 2
    error = [line for line in _lines(done.stdout) if line["type"] == "error"][0]["message"]
    assert "WEIGHTS" in error and "frown" in error and "not in the shell" in error
    done = _solver("shell-animate", folder / "weights.npz", folder / "weights.npz", "-o", folder / "r.npz")
    assert done.returncode == 2 and "SHELL" in done.stdout
    job = {"schema_version": 1, "command": "shell-animate", "inputs": {"shell": "shell.npz", "weights": "weights.npz"},
           "outputs": {"result": "r.npz"}, "settings": {"fps": -1}}
    (folder / "job.json").write_text(json.dumps(job))
    ran = _solver("run-job", folder)
    assert ran.returncode == 2 and "settings.fps" in ran.stdout


# --------------------------------------------------------------------------- the ICT face

@pytest.fixture(scope="module")
def ict_shell():
    from ict_data import ict_available, load_ict_rig
    if not ict_available():
        pytest.skip("ICT FaceKit data not in ../shared/data")
    from shell_sheets import shell_from_rig
    rig = load_ict_rig()
    return rig, shell_from_rig(rig, 2000)


PLACES = {"cheek": ("mp68_03", "mp68_31"), "nose": ("mp68_30",), "lips": ("mp68_51",)}


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("push", [0.03, 0.10])
def test_a_sphere_pushed_into_the_ict_face_stays_out_and_no_deeper_than_the_bone(ict_shell, place, push):
    """Issue 40's acceptance on a uniform-stiffness ICT shell (2k triangles): a sphere of 0.08 face
    heights pressed `push` face heights into cheek, nose or lips. Within the max depth (δ_thin =
    0.05) no coarse vertex stays inside it, nor any vertex of the skin; pushed deeper, the bone
    (max depth) wins."""
    rig, shell = ict_shell
    names = [str(name) for name in rig.landmark_names]
    point = np.mean([rig.vertices[rig.landmark_vertices[names.index(name)]] for name in PLACES[place]], axis=0)
    sim = ShellSimulator(shell)
    normals = np.zeros_like(sim.rest)
    from solver.shell.forward import vertex_normals
    vertex_normals(sim.rest, sim.topology.triangles, normals)
    # The nearest front-facing coarse vertex (not the mouth or eye sockets' lining behind it).
    tip = rig.vertices[rig.landmark_vertices[names.index("mp68_30")]] / shell.face_height_m
    front = normals[int(np.argmin(np.linalg.norm(sim.rest - tip, axis=1)))]
    distance = np.linalg.norm(sim.rest - point / shell.face_height_m, axis=1)
    distance[normals @ front < 0.3] = np.inf
    nearest = int(np.argmin(distance))
    surface, normal = sim.rest[nearest], normals[nearest]
    # The triangles face outwards: the normal points away from the head's middle.
    assert normal @ (surface - sim.rest.mean(axis=0)) > 0
    radius = 0.08
    start, end = surface + (radius + 0.02) * normal, surface + (radius - push) * normal
    sphere = SphereCollider(start * shell.face_height_m, radius * shell.face_height_m)
    for frame in range(40):
        sphere.centre_m = (start + min(frame / 20, 1.0) * (end - start)) * shell.face_height_m
        sim.step(None, colliders=[sphere])
    depth = -((sim.coarse_positions - sim.target) * normals).sum(1)
    assert depth.max() <= sim.max_depth.max() + 1e-9
    distance, _ = analytic_signed_distances(sim.coarse_positions, sphere, 1 / shell.face_height_m)
    # The skin the user sees: no deeper in the sphere than its coarse vertices (metres).
    fine_distance, _ = analytic_signed_distances(sim.fine_positions_m(), sphere)
    allowed = sim.fine_from_coarse @ np.maximum(-distance, 0.0) * shell.face_height_m
    assert (-fine_distance <= allowed + 1e-12).all()
    if push < sim.max_depth.min():
        assert distance.min() >= -1e-9 and fine_distance.min() >= -1e-12
        assert depth[nearest] > 0.5 * push
    # Pushed past the bone, the skin may end on either side of the sphere, but never deeper.
    assert np.isfinite(sim.fine_positions_m()).all()


def test_the_compiled_frame_and_the_python_frame_agree():
    """simulate_substeps (no mesh colliders) and the sub-step loop used beside mesh colliders
    are the same algorithm: with a far-away mesh prop they give the same frames."""
    shell = sheet_shell(stiffness=1.0, prescribed=np.arange(10))
    h = shell.face_height_m
    vertices, faces = _icosphere(0.05 * h, np.zeros(3))
    placement = np.eye(4)
    placement[:3, 3] = [10.0, 0.0, 0.0]
    far = MeshCollider(vertices, faces, placement)
    runs = []
    for colliders in ([SphereCollider([0.5 * h, 0.5 * h, 0.2 * h], 0.1 * h)],
                      [SphereCollider([0.5 * h, 0.5 * h, 0.2 * h], 0.1 * h), far]):
        sim = ShellSimulator(shell)
        sim.grab(np.array([0.2, 0.2, 0.1]) * h, 0.05 * h)
        sim.move_grab(np.array([0.2, 0.2, 0.15]) * h)
        for frame in range(6):
            colliders[0].centre_m = np.array([0.5, 0.5, 0.25 - 0.01 * frame]) * h
            sim.step([frame / 6, 0.5], colliders=colliders)
        runs.append((sim.coarse_positions.copy(), sim.velocities.copy(), sim.contacts, sim.contact_force_n))
    assert np.abs(runs[0][0] - runs[1][0]).max() < 1e-12
    assert np.abs(runs[0][1] - runs[1][1]).max() < 1e-9
    assert runs[0][2] == runs[1][2] > 0
    assert abs(runs[0][3] - runs[1][3]) < 1e-9 * runs[0][3]


def test_a_fast_collider_is_swept_over_the_substeps_even_when_rebuilt_every_frame():
    """Algorithm 1 updates the colliders every sub-step: a small sphere that passes through the
    sheet within one frame still pushes it (the live session builds new colliders each frame)."""
    shell = sheet_shell(stiffness=1.0, max_depth=0.2, hole=False)
    h = shell.face_height_m
    sim = ShellSimulator(shell)
    top = np.array([0.5, 0.5, 0.15])
    sim.step(None, colliders=[SphereCollider((top + [0, 0, 0.05]) * h, 0.03 * h)])
    sim.step(None, colliders=[SphereCollider((top - [0, 0, 0.08]) * h, 0.03 * h)])
    middle = np.argmin(np.linalg.norm(sim.rest - top, axis=1))
    assert sim.rest[middle, 2] - sim.coarse_positions[middle, 2] > 0.02
    assert sim.contact_force_n > 0
