"""The shell's file (SHELL.npz) and its stiffness fit (paper 001 §4): round trip and clear errors,
the adjoint gradient against finite differences of the loss, shapes replaying within ε_r after a
fit, the detail corrections, and on ICT the fitted maps' regions."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from surface_sheets import grid_sheet

from solver.npz_files import read_npz, write_npz_atomically
from solver.shell.settings import ShellSettings
from solver.shell.shell_file import ShellFormatError, ShellModel, load_shell, save_shell


def small_shell_model(shapes: int = 2) -> ShellModel:
    """A 4 × 4 coarse sheet over a 5 × 5 fine sheet of 0.2 m (face height 0.2 m)."""
    coarse, coarse_triangles = grid_sheet(4, 1.0 / 3.0)
    fine, _ = grid_sheet(5, 0.05)
    rng = np.random.default_rng(3)
    n, v = len(coarse), len(fine)
    return ShellModel(
        face_height_m=0.2, coarse_rest=coarse, coarse_triangles=coarse_triangles,
        coarse_from_fine=scipy.sparse.random(n, v, density=0.2, random_state=1, format="csr"),
        fine_from_coarse=scipy.sparse.random(v, n, density=0.2, random_state=2, format="csr"),
        shape_names=tuple(f"key{k}" for k in range(shapes)),
        coarse_deltas=rng.normal(scale=0.01, size=(shapes, n, 3)),
        strain_stiffness=np.full(n, 2.0), bending_stiffness=np.full(n, 0.5),
        max_depth=np.full(n, 0.05), prescribed=np.arange(n) < 2, fine_rest_m=fine,
        detail=scipy.sparse.random(shapes, 3 * v, density=0.1, random_state=3, format="csr"),
        fine_strain_stiffness=np.full(v, 2.0), fine_bending_stiffness=np.full(v, 0.5),
        settings=ShellSettings(triangles=500))


def test_shell_file_round_trip(tmp_path):
    model = small_shell_model()
    save_shell(tmp_path / "shell.npz", model)
    loaded = load_shell(tmp_path / "shell.npz")
    assert loaded.shape_names == model.shape_names and loaded.settings == model.settings
    assert loaded.face_height_m == model.face_height_m
    for name in ("coarse_rest", "coarse_triangles", "coarse_deltas", "strain_stiffness", "bending_stiffness",
                 "max_depth", "prescribed", "fine_rest_m", "fine_strain_stiffness", "fine_bending_stiffness"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    for name in ("coarse_from_fine", "fine_from_coarse", "detail"):
        assert (getattr(loaded, name) != getattr(model, name)).nnz == 0
    np.testing.assert_allclose(loaded.to_metres(loaded.to_face_units([0.1, 0.2])), [0.1, 0.2])
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("change, words", [
    (lambda a: a.pop("strain_stiffness"), "strain_stiffness: missing"),
    (lambda a: a.update(coarse_deltas=a["coarse_deltas"][:, :3]), "coarse_deltas: expected shape"),
    (lambda a: a.update(format_version=np.array(99)), "Update the solver"),
    (lambda a: a.update(detail_indptr=a["detail_indptr"][:-1]), "detail: the CSR arrays"),
    (lambda a: a.update(settings_json=np.array('{"nonsense": 1}')), "settings_json"),
    (lambda a: a.update(bending_stiffness=-a["bending_stiffness"]), "bending_stiffness: stiffness must be positive"),
    (lambda a: a.update(coarse_triangles=a["coarse_triangles"] + 100), "coarse_triangles: vertex index"),
])
def test_shell_file_errors_name_the_key(tmp_path, change, words):
    save_shell(tmp_path / "shell.npz", small_shell_model())
    arrays = read_npz(tmp_path / "shell.npz")
    change(arrays)
    write_npz_atomically(tmp_path / "bad.npz", arrays)
    with pytest.raises(ShellFormatError, match=words):
        load_shell(tmp_path / "bad.npz")


def test_shell_file_refuses_missing_and_pickled(tmp_path):
    with pytest.raises(ShellFormatError, match="no such file"):
        load_shell(tmp_path / "none.npz")
    np.savez(tmp_path / "pickled.npz", format_version=np.array([object()], dtype=object))
    with pytest.raises(ShellFormatError, match="never unpickled"):
        load_shell(tmp_path / "pickled.npz")


# --------------------------------------------------------------------------- the fit on a sheet

from solver.shell.regions import face_regions, region_means  # noqa: E402
from solver.shell.stiffness_fit import QuasiStaticProblem, fit_stiffness  # noqa: E402
from solver.shell.topology import ShellTopology  # noqa: E402


def bump_sheet(m: int = 12):
    """A unit sheet (m × m vertices) and three shapes, each a Gaussian bump with some shear."""
    rest, triangles = grid_sheet(m, 1.0 / (m - 1))
    topology = ShellTopology.from_triangles(rest, triangles)
    x, y = rest[:, 0], rest[:, 1]
    targets = []
    for cx, cy, height in ((0.3, 0.4, 0.08), (0.7, 0.6, -0.06), (0.5, 0.5, 0.05)):
        bump = height * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / 0.02)
        targets.append(rest + np.stack([0.3 * bump, np.zeros_like(bump), bump], axis=1))
    return topology, np.array(targets)


def test_adjoint_gradient_matches_finite_differences():
    topology, targets = bump_sheet()
    problem = QuasiStaticProblem(topology, targets, newton_tolerance=1e-11)
    rng = np.random.default_rng(0)
    theta = np.log(0.02) + rng.normal(scale=0.3, size=2 * topology.vertex_count)
    loss, gradient, status = problem.evaluate(theta)
    assert status == "ok" and problem.max_deviation() < 1e-2
    problem.accept()
    h = 1e-5
    for _ in range(3):
        direction = rng.normal(size=len(theta))
        plus = problem.evaluate(theta + h * direction, want_gradient=False)[0]
        minus = problem.evaluate(theta - h * direction, want_gradient=False)[0]
        assert (plus - minus) / (2 * h) == pytest.approx(gradient @ direction, rel=1e-4)


def test_shapes_replay_within_tolerance_after_a_fit():
    topology, targets = bump_sheet()
    settings = ShellSettings()
    result = fit_stiffness(topology, targets, settings=settings)
    assert result.converged and result.iterations > 5
    # The stiffness rose from 1e-4 until the barrier held the shapes.
    assert result.strain_stiffness.min() > 1.0 and result.bending_stiffness.min() > 1.0
    deviation = np.linalg.norm(result.equilibria - targets, axis=2).max()
    assert deviation < settings.reproducibility and deviation == pytest.approx(result.max_deviation)
    # An independent solve at the fitted stiffness, from the targets, finds the same equilibria.
    check = QuasiStaticProblem(topology, targets, settings=settings, newton_tolerance=1e-9, iteration_cap=200)
    theta = np.log(np.concatenate([result.strain_stiffness, result.bending_stiffness]))
    assert check.evaluate(theta, want_gradient=False)[2] == "ok"
    check.accept()
    assert check.max_deviation() < settings.reproducibility


# --------------------------------------------------------------------------- ICT

from ict_data import ict_available, load_ict_rig  # noqa: E402

ICT_TRIANGLES = 4000     # the resolution: a fit of about 6 min here (bench/shell_fit.py)


@pytest.fixture(scope="module")
def ict_shell():
    if not ict_available():
        pytest.skip("ICT FaceKit data not in ../shared/data")
    from solver.shell.pipeline import build_shell
    rig = load_ict_rig()
    shell, summary = build_shell(rig, settings=ShellSettings(triangles=ICT_TRIANGLES))
    return rig, shell, summary


def test_ict_shapes_replay_within_tolerance(ict_shell, tmp_path):
    rig, shell, summary = ict_shell
    assert summary["max_deviation"] < shell.settings.reproducibility
    assert summary["fitted_shapes"] == len(rig.shape_key_names) == 53
    save_shell(tmp_path / "ict.npz", shell)
    loaded = load_shell(tmp_path / "ict.npz")
    assert loaded.detail.shape == (53, 3 * len(rig.vertices)) and loaded.prescribed.any()


def test_ict_stiffness_higher_on_nose_and_forehead_than_cheeks_and_lips(ict_shell):
    rig, shell, _ = ict_shell
    regions = face_regions(shell, rig)
    assert all(mask.sum() >= 4 for mask in regions.values()), {k: int(m.sum()) for k, m in regions.items()}
    for stiffness in (shell.strain_stiffness, shell.bending_stiffness):
        mean = region_means(stiffness, regions)
        assert min(mean["nose"], mean["forehead"]) > max(mean["cheeks"], mean["lips"]), mean


PERFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "performance_dev.npz"


def test_ict_performance_replays_without_crumpled_lips(ict_shell):
    """The mission's bar on the fitted 4k shell: 200 frames of a captured performance (ARKit
    weights matched by name) crease at most a few edges beyond the plain rig and fold at most one
    (the lip corners' own tight fold; docs/shell.md section 4). With the plain barycentric warp the
    same replay creased 75 and folded 13: a crumpled lower-lip corner."""
    if not PERFORMANCE.is_file():
        pytest.skip("performance_dev.npz not in ../shared/data")
    from solver.geometry.bends import SkinBends
    from solver.rig import triangulate
    from solver.shell.forward import ShellSimulator
    rig, shell, _ = ict_shell
    with np.load(PERFORMANCE, allow_pickle=False) as data:
        columns = {str(name): index for index, name in enumerate(data["names"])}
        weights = np.asarray(data["weights"], dtype=np.float64)[:200]
        fps = float(data["fps"])
    matched = np.zeros((len(weights), len(shell.shape_names)))
    for index, name in enumerate(shell.shape_names):
        if name in columns:
            matched[:, index] = weights[:, columns[name]]
    names = [str(name) for name in rig.vertex_group_names]
    region = np.asarray(rig.vertex_group_weights[names.index("face_region")]) > 0.5
    bends = SkinBends(triangulate(rig.faces), len(rig.vertices), region=region)
    deltas = np.stack([rig.shape_key(name) for name in shell.shape_names])
    sim = ShellSimulator(shell)
    sim.reset(matched[0])
    creased, folded, deviation = [], [], []
    for frame in matched:
        sim.step(frame, dt=1.0 / fps)
        plain = rig.vertices + np.tensordot(frame, deltas, axes=1)
        skin = sim.fine_positions_m()
        count = bends.count(skin, plain, rest=rig.vertices)
        creased.append(count.creased)
        folded.append(count.folded)
        deviation.append(np.linalg.norm(skin - plain, axis=1)[region].max())
    assert max(creased) <= 6 and max(folded) <= 1, (max(creased), max(folded))
    assert max(deviation) < 0.01 * shell.face_height_m          # paper 001: 1.8–3.4 % of the face height


# --------------------------------------------------------------------------- request, job, command line

def test_shell_fit_job_and_command_line_check_their_fields(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from solver.jobs import JobError, read_job
    from solver.requests.shell_fit import ShellFitRequest
    (tmp_path / "rig.npz").write_bytes(b"checked when the job runs")
    job = {"schema_version": 1, "command": "shell-fit", "inputs": {"rig": "rig.npz"},
           "outputs": {"shell": "shell.npz"}, "settings": {"triangles": 10}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    with pytest.raises(JobError, match="settings.triangles: expected a whole number in \\[500, 20000\\]"):
        read_job(tmp_path)
    job["settings"] = {"triangles": 3000}
    (tmp_path / "job.json").write_text(json.dumps(job))
    request = read_job(tmp_path)["request"]
    assert isinstance(request, ShellFitRequest) and request.triangles == 3000
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "solver", "shell-fit", str(tmp_path / "none.npz"), "-o",
                           str(tmp_path / "shell.npz")], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "RIG" in done.stderr and "no such file" in done.stderr
