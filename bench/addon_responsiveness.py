"""How long Blender's main thread is busy at a time while the add-on bakes: the longest timer
tick of the Bake operator — sampling the scene, polling the solver and following its cache,
putting the frames on the object — during a bake of the demo head (target: < 50 ms, the stall a
user sees as a stutter).

    .venv/bin/python bench/addon_responsiveness.py [--frames 300] [--target SHAPE_KEYS] [--tets 3000]

Headless bpy has no event loop, so the bench plays the modal operator's part: it calls the Bake
operator's own tick (`job_operator.SolverJobOperator.step`, what `modal` runs on each 0.1 s
TIMER event) on a real bake with the real solver child, sleeping the rest of each 0.1 s, and
times every tick. The demo head is built, its smile muscles animated over the range, and baked
to the chosen target (SHAPE_KEYS also times making one shape key per frame; PC2 binds the take's
cache once), twice: the second bake also removes the first's keys. Prints the longest,
99th-percentile and median tick per phase, the mesh size and the commit.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bpy  # noqa: E402
import addon_utils  # noqa: E402  (importable once bpy is)

from bench_info import commit  # noqa: E402

TIMER_S = 0.1


def _scene(folder: Path, tets: int, frames: int):
    from blender_addon.rig_import import import_rig
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable("blender_addon", default_set=True, handle_error=None)
    bpy.context.preferences.addons["blender_addon"].preferences.solver_python = sys.executable
    subprocess.run([sys.executable, "-m", "solver", "demo-rig", "-o", str(folder / "head.npz")], cwd=ROOT,
                   check=True, capture_output=True, timeout=300)
    obj = import_rig(bpy.context, str(folder / "head.npz"))
    bpy.ops.wm.save_as_mainfile(filepath=str(folder / "bench.blend"))
    obj.face_physics.target_tets = tets
    assert bpy.ops.face_physics.build() == {'FINISHED'}
    for muscle in obj.face_physics.muscles:
        if muscle.name.startswith(("zygomaticus", "levator_anguli")):
            for frame, value in ((1, 0.0), (frames // 2, 1.0), (frames, 0.0)):
                muscle.activation = value
                muscle.keyframe_insert("activation", frame=frame)
    scene = bpy.context.scene
    scene.frame_start, scene.frame_end = 1, frames
    return obj


def _timed_bake(obj):
    """Tick the Bake operator's modal work to the end; (phase, seconds) per tick, and the result."""
    from blender_addon import bake_operators

    class TimedBake(bake_operators._BakeJobOperator):
        start = bake_operators.FACE_PHYSICS_OT_bake.start

        def report(self, kinds, message):
            if kinds & {'ERROR', 'WARNING'}:
                print(f"  {', '.join(sorted(kinds)).lower()}: {message}", flush=True)

    bpy.context.view_layer.objects.active = obj
    operator = TimedBake()
    ticks = []
    started = time.perf_counter()
    begun = operator._begin(bpy.context, operator.start)
    ticks.append(("prepare", time.perf_counter() - started))
    assert begun, "the bake did not start"
    result = None
    while result is None:
        phase = "prepare" if operator._job is None else "apply" if operator._stepper is not None else "solve"
        started = time.perf_counter()
        result = operator.step(bpy.context)
        spent = time.perf_counter() - started
        ticks.append((phase, spent))
        time.sleep(max(TIMER_S - spent, 0.0))
    return ticks, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--tets", type=int, default=3000)
    parser.add_argument("--target", choices=("PC2", "SHAPE_KEYS", "ACTION"), default="SHAPE_KEYS")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        obj = _scene(Path(folder), args.tets, args.frames)
        obj.face_physics.bake_target = args.target
        longest = 0.0
        for bake in ("bake", "re-bake"):            # the re-bake also removes the first one's keys
            wall = time.perf_counter()
            ticks, result = _timed_bake(obj)
            wall = time.perf_counter() - wall
            print(f"{bake}: demo head, {len(obj.data.vertices)} skin vertices, {obj.face_physics.model_tets} tets; "
                  f"{args.frames} frames to {args.target}: {result}, {wall:.0f} s wall; commit {commit()}")
            print(f"  {'phase':<8} {'ticks':>6} {'longest ms':>11} {'99th ms':>8} {'median ms':>10} {'busy s':>7}")
            for phase in ("prepare", "solve", "apply"):
                spent = np.array([seconds for name, seconds in ticks if name == phase])
                if len(spent):
                    print(f"  {phase:<8} {len(spent):>6} {1e3 * spent.max():>11.1f} "
                          f"{1e3 * np.percentile(spent, 99):>8.1f} {1e3 * np.median(spent):>10.1f} {spent.sum():>7.2f}")
            longest = max(longest, *(seconds for _, seconds in ticks))
            if result != {'FINISHED'}:
                print(f"  the {bake} did not finish; no figure")
                return 1
        print(f"longest main-thread stall: {1e3 * longest:.1f} ms (target < 50 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
