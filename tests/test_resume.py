"""Resumable bakes, solver side: the pieces a resumed bake is made of — the simulator's
snapshot, the Newton solver's kept factor, the `.pc2` continued after its saved frames and the
state file's checks (physics/checkpoint.py). The whole path, SIGTERM included, is in
test_jobs.py; the add-on's takes in test_addon_blender.py."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solver import pc2
from solver.physics import linear_solver
from solver.physics.checkpoint import Checkpoint, ResumeError, fingerprint
from solver.physics.inputs import ActivationInput
from solver.physics.simulator import FaceSimulator, SimulationSettings
from solver.requests.animate import collision_scene


class _Quiet:
    def progress(self, *args, **fields):
        pass

    def warning(self, message):
        pass


def _smile(model, frames: int) -> ActivationInput:
    names = [str(name) for name in model["muscle_names"]]
    contraction = np.ones((frames, len(names)))
    for column, name in enumerate(names):
        if name.startswith(("zygomaticus", "levator_anguli")):
            contraction[:, column] = np.linspace(1.0, 2.0, frames)
    return ActivationInput(jaw=np.zeros((frames, 5)), head_transforms=np.tile(np.eye(4), (frames, 1, 1)),
                           muscle_contraction=contraction, muscle_names=names, fps=24.0)


def _simulator(model):
    return FaceSimulator(model, SimulationSettings(fps=24.0),
                         collisions=collision_scene(model, _Quiet(), ("teeth", "lips")))


def _run(simulator, model, activations, frames):
    skins = []
    for frame in frames:
        simulator.step(activations.tet_activations(model, frame), activations.jaw[frame],
                       activations.head_transforms[frame], frame=frame)
        skins.append(simulator.displayed_skin(None).copy())
    return np.array(skins)


def test_a_simulator_resumed_from_its_snapshot_and_factor_continues_exactly(small_demo_model):
    """Teeth and lip contact on, a smile: frames 0–4, then a new simulator resumed from the
    snapshot and the kept factor runs frames 5–9 to the bits the uninterrupted one does. Without
    the factor the next frames' inexact Newton steps are preconditioned by a fresh factor instead,
    and end a solver tolerance away (but the snapshot alone is still within 1e-5 m)."""
    model, frames, cut = small_demo_model, 10, 5
    activations = _smile(model, frames)
    whole = _run(_simulator(model), model, activations, range(frames))
    first = _simulator(model)
    _run(first, model, activations, range(cut))
    snapshot, factor = first.snapshot(), first.solver.linear_solver.kept_factor()
    assert factor is not None
    resumed = _simulator(model)
    resumed.resume(snapshot, factor)
    np.testing.assert_array_equal(_run(resumed, model, activations, range(cut, frames)), whole[cut:])
    without = _simulator(model)
    without.resume(snapshot)
    assert np.abs(_run(without, model, activations, range(cut, frames)) - whole[cut:]).max() < 1e-5


def test_a_restored_factor_solves_as_the_kept_one_did():
    rng = np.random.default_rng(7)
    base = rng.normal(size=(30, 30))
    matrix = sp.csc_matrix(base @ base.T + 30 * np.eye(30))
    values = np.zeros((30, 2))
    values[[1, 4, 9], 0], values[[2, 3], 1] = 5.0, -4.0
    term = linear_solver.LowRankTerm(sp.csc_matrix(values), (b"a\x00", b"b"))   # keys are bytes, zeros kept
    kept_solver = linear_solver.CholmodLinearSolver()
    kept_solver.factorise(matrix, term)
    matrix.data *= 2.0                          # the next assembly refills the values in place
    kept = kept_solver.kept_factor()
    restored = linear_solver.CholmodLinearSolver()
    restored.restore_factor(kept)
    rhs = rng.normal(size=30)
    assert restored._factored_term.keys == term.keys
    for solver in (kept_solver, restored):
        direction, _ = solver.krylov_solve(matrix, rhs, 1e-12, term)
        np.testing.assert_allclose(matrix @ direction, rhs, atol=1e-9)
    np.testing.assert_array_equal(kept_solver.krylov_solve(matrix, rhs, 1e-3, term)[0],
                                  restored.krylov_solve(matrix, rhs, 1e-3, term)[0])


def test_a_cache_continues_after_its_saved_frames(tmp_path):
    path = tmp_path / "bake.pc2"
    frames = np.random.default_rng(1).normal(size=(5, 4, 3)).astype(np.float32)
    with pc2.Pc2Writer(path, 4, start_frame=11.0) as writer:
        for frame in frames:
            writer.append(frame)
    with pc2.Pc2Writer.continue_after(path, 4, 3) as writer:      # frames 3 and 4 were never counted done
        writer.append(frames[4])
    read, start, _ = pc2.read_pc2(path)
    np.testing.assert_array_equal(read, frames[[0, 1, 2, 4]])
    assert start == 11.0 and path.stat().st_size == 32 + 4 * 4 * 12
    with pytest.raises(pc2.Pc2Error, match="cannot continue after frame 9"):
        pc2.Pc2Writer.continue_after(path, 4, 9)
    with pytest.raises(pc2.Pc2Error, match="of 4 points"):
        pc2.Pc2Writer.continue_after(path, 5, 2)


def test_the_state_refuses_another_bake_and_says_why(tmp_path):
    inputs = tmp_path / "weights.npz"
    np.savez(inputs, weights=np.zeros(3))
    print_ = fingerprint({"fps": 30}, [inputs, None])
    assert print_ == fingerprint({"fps": 30}, [inputs, None])
    assert print_ != fingerprint({"fps": 24}, [inputs, None])
    saved = Checkpoint(tmp_path, print_, frames=8)
    with pytest.raises(ResumeError, match="nothing to resume"):
        saved.load()
    snapshot = {"positions": np.zeros((2, 3)), "velocity": np.zeros((2, 3))}
    saved.save(3, snapshot, {"converged": np.ones(8, bool)})
    done, restored, records, factor = Checkpoint(tmp_path, print_, 8).load()
    assert done == 3 and factor is None and records["converged"].shape == (3,)
    np.testing.assert_array_equal(restored["positions"], snapshot["positions"])
    np.savez(inputs, weights=np.ones(3))       # the input changed since
    with pytest.raises(ResumeError, match="other inputs or settings"):
        Checkpoint(tmp_path, fingerprint({"fps": 30}, [inputs, None]), 8).load()
    with pytest.raises(ResumeError, match="has 8 frames, this one 9"):
        Checkpoint(tmp_path, print_, 9).load()
