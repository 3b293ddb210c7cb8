"""The add-on's bpy-free modules: point caches, pre-flight checks, head motion, the child
process bridge, and the rule that the add-on never imports numba or scipy."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blender_addon import head_motion, job_files, pc2_cache, preflight, solver_environment  # noqa: E402
from blender_addon.cancel_guard import CONFIRM_AFTER_S, CONFIRM_WINDOW_S, CancelGuard  # noqa: E402
from blender_addon.solver_process import SolverProcess  # noqa: E402
from solver.pc2 import read_pc2  # noqa: E402


def test_pc2_written_by_the_addon_reads_back_with_the_solver_reader(tmp_path):
    frames = np.random.default_rng(0).normal(size=(4, 10, 3))
    path = tmp_path / "bake.pc2"
    assert pc2_cache.write_pc2(path, frames, 10, start_frame=7) == 4
    positions, start, rate = read_pc2(path)
    np.testing.assert_allclose(positions, frames, atol=1e-6)
    assert (start, rate) == (7.0, 1.0)
    assert pc2_cache.read_pc2_header(path)["samples"] == 4


def test_a_failed_pc2_bake_keeps_the_previous_cache(tmp_path):
    path = tmp_path / "bake.pc2"
    pc2_cache.write_pc2(path, np.zeros((2, 5, 3)), 5, start_frame=1)
    good = path.read_bytes()

    def frames_then_failure():
        yield np.ones((5, 3))
        yield np.full((5, 3), np.nan)

    with pytest.raises(ValueError, match="finite"):
        pc2_cache.write_pc2(path, frames_then_failure(), 5, start_frame=1)
    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["bake.pc2"]


def test_preflight_reports_degenerate_faces_nans_units_names_topology_and_modifiers():
    vertices = np.array([[0, 0, 0], [0.1, 0, 0], [0, 0.1, 0], [0.05, 0.05, 0.0]], dtype=float)
    good = np.array([[0, 1, 2]])
    assert preflight.check_geometry(vertices, good) == []
    assert "degenerate" in preflight.check_geometry(vertices, np.array([[0, 1, 1]]))[0].message
    assert "NaN" in preflight.check_geometry(vertices * np.nan, good)[0].message
    assert "far from a head in metres" in preflight.check_geometry(vertices * 100, good)[0].message
    names = preflight.check_shape_key_names(["jawOpen", "mouthSmileLeft", "smile_big"], {})
    assert len(names) == 1 and "smile_big" in names[0].message and names[0].severity == preflight.WARNING
    assert preflight.check_shape_key_names(["smile_big"], {"smile_big": "mouthSmile_L"}) == []
    assert preflight.solver_shape_key_name("mouthSmileLeft", {}) == "mouthSmile_L"
    # These move towards a side; they are not left/right pairs and keep their names.
    assert [preflight.solver_shape_key_name(name, {}) for name in ("jawLeft", "mouthRight")] == ["jawLeft",
                                                                                                  "mouthRight"]
    assert preflight.check_shape_key_names(["jawLeft", "jawRight", "mouthLeft", "mouthRight"], {}) == []
    signature = preflight.topology_signature(4, good)
    assert preflight.check_topology(signature, signature) == []
    assert "changed since" in preflight.check_topology(preflight.topology_signature(5, good), signature)[0].message
    assert preflight.check_modifiers_before_cache([("Armature", "ARMATURE")]) == []
    assert "Subdivision" in preflight.check_modifiers_before_cache([("Subdivision", "SUBSURF")])[0].message


def test_head_transforms_are_rigid_and_relative_to_the_skin():
    def transform(angle, translation, scale=1.0):
        c, s = np.cos(angle), np.sin(angle)
        matrix = np.eye(4)
        matrix[:3, :3] = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) * scale
        matrix[:3, 3] = translation
        return matrix

    skin = [transform(0.3, [1, 2, 3], 2.0)] * 2
    head = [transform(0.0, [0, 0, 0]), transform(0.2, [0.5, 0, 0])]
    result = head_motion.head_transforms_in_rig_frame(skin, head, metres_per_unit=2.0)
    np.testing.assert_allclose(result[0], np.eye(4), atol=1e-12)
    rotation = result[1][:3, :3]
    np.testing.assert_allclose(rotation @ rotation.T, np.eye(3), atol=1e-12)
    assert np.isclose(np.arccos((np.trace(rotation) - 1) / 2), 0.2)
    # Moving the skin and the head together is no motion at all for the solver.
    np.testing.assert_allclose(head_motion.head_transforms_in_rig_frame(head, head, 1.0)[1], np.eye(4), atol=1e-12)


def test_solver_process_reads_messages_without_blocking_and_cancels(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent("""
        import json, signal, sys, time
        def stop(*_):
            print(json.dumps({"type": "cancelled", "message": "bye"}), flush=True)
            print(json.dumps({"type": "done", "status": "cancelled", "exit_code": 3}), flush=True)
            sys.exit(3)
        signal.signal(signal.SIGTERM, stop)
        print("not json", flush=True)
        print(json.dumps({"type": "progress", "message": "one", "fraction": 0.5}), flush=True)
        print("a warning on stderr", file=sys.stderr, flush=True)
        time.sleep(60)
    """))
    process = SolverProcess([sys.executable, str(script)])
    deadline = time.monotonic() + 20
    messages = []
    while not messages and time.monotonic() < deadline:
        messages += process.poll()       # returns at once, empty or not
        time.sleep(0.01)
    assert messages == [{"type": "progress", "message": "one", "fraction": 0.5}]
    started = time.monotonic()
    process.cancel()
    assert time.monotonic() - started < 2.5
    process.wait(10)
    assert process.returncode == 3 and process.finished
    assert [m["type"] for m in process.poll()] == ["cancelled", "done"]
    assert "not json" in process.stderr_tail() and "a warning on stderr" in process.stderr_tail()


def test_a_child_that_ignores_cancel_is_killed_with_the_processes_it_started(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import json, signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pid_file)!r}, "w").write(str(worker.pid))
        print(json.dumps({{"type": "progress", "message": "working", "fraction": 0.0}}), flush=True)
        time.sleep(120)
    """))
    process = SolverProcess([sys.executable, str(script)])
    deadline = time.monotonic() + 20
    while not process.poll() and time.monotonic() < deadline:
        time.sleep(0.01)
    worker = int(pid_file.read_text())
    process.cancel()
    process.wait(10)
    assert process.returncode == -9
    deadline = time.monotonic() + 5
    while Path(f"/proc/{worker}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)      # killed, then reaped by init
    state = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0] \
        if Path(f"/proc/{worker}").exists() else "gone"
    assert state in ("gone", "Z"), "the worker outlived its cancelled parent"


def test_fit_and_animate_job_folders_pass_the_solvers_validation(tmp_path):
    from solver.jobs import read_job
    model = tmp_path / "model.npz"
    np.savez(model, placeholder=np.zeros(1))
    fit_dir = tmp_path / "fit"
    fit_dir.mkdir()
    job_files.write_fit_job(fit_dir, model, {"vertices": np.zeros((4, 3)), "faces": np.array([[0, 1, 2]])},
                            ["mouthSmile_L"], processes=2, previous_fit=model)
    job = read_job(fit_dir)
    assert job["command"] == "fit" and job["settings"] == {"shapes": ["mouthSmile_L"], "jobs": 2}
    assert sorted(job["inputs"]) == ["model", "previous_fit", "rig"]

    animate_dir = tmp_path / "animate"
    animate_dir.mkdir()
    sphere = {"vertices": np.zeros((4, 3)), "faces": np.array([[0, 1, 2]]), "transforms": np.eye(4)[None]}
    job_files.write_animate_job(animate_dir, model, None, None,
                                {"detail": False, "collisions": ["lips"], "fat_softening": 0.25},
                                fit_path=model, weights={"names": np.array(["jawOpen"]), "weights": np.zeros((1, 1))},
                                colliders=[("Hand.L", sphere), ("Hand.L", sphere)],
                                lip_vertices={"upper": np.array([1, 2]), "lower": np.array([3])})
    job = read_job(animate_dir)
    assert [path.name for path in job["inputs"]["colliders"]] == ["collider_0_Hand_L.npz", "collider_1_Hand_L.npz"]
    assert sorted(job["inputs"]) == ["colliders", "fit", "lip_vertices", "model", "weights"]
    assert job["settings"]["detail"] is False and job["settings"]["fat_softening"] == 0.25
    with np.load(job["inputs"]["lip_vertices"], allow_pickle=False) as lips:
        assert lips["upper"].tolist() == [1, 2] and lips["lower"].tolist() == [3]


def test_the_fit_summary_is_read_without_the_solver(tmp_path):
    path = tmp_path / "fit.npz"
    np.savez(path, shape_key_names=np.array(["jawOpen", "mouthClose"]), fit_error_mm=np.array([[1, 2, 3], [4, 5, 6.]]),
             status=np.array(["fitted", "fitted"]), fit_context=np.array(["", "jawOpen"]), tet_count=np.array(10),
             skin_vertex_count=np.array(4), fit_start=np.array(["neutral", "mirror:jawOpen"]))
    summary = job_files.read_fit_summary(path)
    assert summary["tets"] == 10 and summary["shapes"][1] == {"name": "mouthClose", "error_mm": (4.0, 5.0, 6.0),
                                                              "status": "fitted", "context": "jawOpen",
                                                              "start": "mirror:jawOpen"}
    assert job_files.read_fit_shape_names(path) == ["jawOpen", "mouthClose"]


def test_solver_environment_puts_the_solver_source_on_the_path():
    assert solver_environment.solver_source_dir() == ROOT
    env = solver_environment.solver_environment({"PYTHONPATH": "/elsewhere", "PYTHONHOME": "/blender"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/elsewhere"] and "PYTHONHOME" not in env
    assert "bpy" not in solver_environment.solver_requirements("numpy==1\nbpy==5.0.1  # tests\nscipy==2\n")
    text = "numpy==1\nscikit-sparse==0.4.16\ncholespy==2.2.0\ncyipopt==1.7.0\npytest==9\nbpy==5.0.1\n"
    assert solver_environment.solver_requirements(text).split() == [
        "numpy==1", "scikit-sparse==0.4.16", "cholespy==2.2.0", "cyipopt==1.7.0"]
    assert solver_environment.solver_requirements(text, portable=True).split() == ["numpy==1", "cholespy==2.2.0"]
    assert solver_environment.resolve_solver_python("/no/such/python", None) is None
    assert solver_environment.resolve_solver_python(sys.executable, None) == Path(sys.executable)


def test_without_a_preference_the_solver_runs_on_this_python_when_it_has_the_portable_packages(tmp_path):
    """Blender's own Python with the extension's unpacked wheels is the default solver Python;
    the wheels folder goes on the child's path after the solver source."""
    assert solver_environment.portable_packages_found()          # this venv has them all
    assert solver_environment.resolve_solver_python("", tmp_path / "no-venv") == Path(sys.executable)
    wheels = solver_environment.wheels_site_packages(tmp_path / "extensions")
    assert wheels.parts[-5:] == ("extensions", ".local", "lib", "python%d.%d" % sys.version_info[:2], "site-packages")
    env = solver_environment.solver_environment({"PYTHONPATH": "/elsewhere"}, wheel_dirs=[wheels])
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), str(wheels), "/elsewhere"]
    probe = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        sys.path[:] = [p for p in sys.path if "site-packages" not in p]
        sys.path.insert(0, sys.argv[1])
        sys.path.insert(0, sys.argv[2])
        from blender_addon import solver_environment
        print(solver_environment.portable_packages_found(), solver_environment.resolve_solver_python("", None))
    """), str(ROOT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == ["False", "None"], probe.stderr     # no packages, no venv: the message


def test_the_addon_never_imports_numba_or_scipy():
    code = textwrap.dedent("""
        import sys, bpy, addon_utils
        sys.path.insert(0, sys.argv[1])
        addon_utils.enable("blender_addon", default_set=True, handle_error=None)
        import blender_addon.cli, blender_addon.bake, blender_addon.muscle_overlay, blender_addon.rig_import
        import blender_addon.install_solver, blender_addon.demo, blender_addon.demo_pictures
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "scipy", "solver")))
    """)
    pytest.importorskip("bpy")
    run = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_solver_never_imports_bpy():
    run = subprocess.run([sys.executable, "-c", "import sys, solver.jobs, solver.cli; "
                          "print('bpy' in sys.modules)"], cwd=ROOT, capture_output=True, text=True)
    assert run.stdout.strip() == "False", run.stderr


def test_esc_cancels_a_young_job_at_once_and_an_old_one_only_when_pressed_again():
    guard = CancelGuard()
    assert guard.press(job_elapsed_s=CONFIRM_AFTER_S - 1, now=100.0)          # a young job: at once
    old = CONFIRM_AFTER_S + 30
    assert not guard.press(old, now=200.0) and guard.armed(200.0)             # first press only arms
    assert "press Esc again within 3 s" in CancelGuard.prompt(old)
    assert guard.press(old, now=200.0 + CONFIRM_WINDOW_S - 0.5)                # confirmed in time
    assert not guard.armed(203.0)
    assert not guard.press(old, now=300.0)                                     # armed again...
    assert not guard.press(old, now=300.0 + CONFIRM_WINDOW_S + 1)              # ...too late: re-armed
    assert guard.press(old, now=300.0 + CONFIRM_WINDOW_S + 2)


def test_a_map_follows_its_renamed_group_and_not_a_deleted_one():
    from blender_addon.map_groups import followed_name
    assert followed_name("cheek", ["cheek", "chin"], ["cheek", "chin"]) == "cheek"
    assert followed_name("cheek", ["cheek", "chin"], ["fat cheek", "chin"]) == "fat cheek"      # renamed
    assert followed_name("cheek", ["cheek", "chin"], ["chin"]) == ""                            # deleted
    assert followed_name("cheek", ["cheek", "chin"], ["chin", "jaw"]) == ""        # deleted, another added
    assert followed_name("cheek", [], ["fat cheek"]) == ""                          # nothing recorded


def test_a_stepper_spreads_steps_over_ticks_and_ends_one_where_asked():
    import time
    from blender_addon.stepwise import END_TICK, Stepper, drain

    def steps(seconds, flagged):
        for index, pause in enumerate(seconds):
            time.sleep(pause)
            yield (index + 1) / len(seconds), f"step {index}", *([END_TICK] if index in flagged else [])
        return "done"

    stepper = Stepper(steps([0.001] * 10, flagged={2}))
    assert not stepper.advance(budget_s=1.0) and stepper.message == "step 2"     # ended where asked
    assert stepper.advance(budget_s=1.0) and stepper.result == "done" and stepper.fraction == 1.0
    slow = Stepper(steps([0.02] * 10, flagged=set()))
    started = time.perf_counter()
    slow.advance(budget_s=0.05)                  # a third 20 ms step would overrun: two are taken
    assert slow.message == "step 1" and time.perf_counter() - started < 0.06
    assert drain(steps([0.0] * 3, flagged={0})) == "done"
