"""The Poke tool's live loop (issue 40): can the shell, solved in a child process and talked to
over a pipe (`python -m solver shell-live`, solver/shell/live.py, through the add-on's client
blender_addon/shell_live.py), keep the viewport at ≥ 30 FPS?

    python bench/shell_live.py [--shell SHELL.npz] [--rig RIG.npz] [--triangles 4000] [--frames 300]

Per frame of 1/30 s the client sends FRAME (the shape weights, a pushing sphere moving over the
cheek) and waits for POSITIONS (every fine skin vertex, float32), as the modal Poke does with
one frame in flight. Printed: round trips per second; the median round trip split into the
solver's own time (coarse rig + simulation, warp + detail, as it reports them) and the rest —
the pipe, packing and unpacking: the cost of the child; the same frames solved in this process
for comparison; the message sizes; and, when bpy is importable, the time to write the positions
into a preview mesh of that many vertices (the add-on's share per frame). Without --shell the
shell is built from the ICT rig (or --rig) with uniform stiffness (tests/shell_sheets.py; the
stiffness does not change the cost: the factor has the same pattern).
"""
from __future__ import annotations

import os

for _name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench.bench_info import commit  # noqa: E402
from blender_addon import shell_live  # noqa: E402
from solver.shell.colliders import SphereCollider  # noqa: E402
from solver.shell.forward import ShellSimulator  # noqa: E402
from solver.shell.shell_file import load_shell, save_shell  # noqa: E402

FPS = 30.0
WARM_UP = 20


def _animation(shape_count: int, frames: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    phase, rate = rng.uniform(0, 2 * np.pi, shape_count), rng.uniform(0.3, 1.2, shape_count)
    times = np.arange(frames)[:, None] / FPS
    return np.clip(np.sin(2 * np.pi * rate * times + phase), 0.0, 1.0)


def _sphere_path(shell, frames: int):
    """A sphere of 6 % of the face height sliding over the face 2 % deep, along the front."""
    rest = shell.fine_rest_m
    height = shell.face_height_m
    radius = 0.06 * height
    front = rest[np.argsort(rest[:, 1])[: max(len(rest) // 50, 1)]].mean(axis=0)   # mean of the front-most 2 %
    sweep = np.linspace(-0.15, 0.15, frames) * height
    centres = np.tile(front, (frames, 1))
    centres[:, 0] += sweep
    centres[:, 1] += radius - 0.02 * height
    return centres, radius


def _preview_write_ms(vertex_count: int, positions: np.ndarray) -> float | None:
    try:
        import bpy
    except ImportError:
        return None
    mesh = bpy.data.meshes.new("bench preview")
    mesh.vertices.add(vertex_count)
    times = []
    for _ in range(50):
        started = time.perf_counter()
        mesh.vertices.foreach_set("co", positions.ravel())
        mesh.update()
        times.append(time.perf_counter() - started)
    bpy.data.meshes.remove(mesh)
    return 1e3 * float(np.median(times))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shell", type=Path, default=None)
    parser.add_argument("--rig", type=Path, default=None)
    parser.add_argument("--triangles", type=int, default=4000)
    parser.add_argument("--frames", type=int, default=300)
    args = parser.parse_args(argv)
    print(f"bench/shell_live.py  commit {commit()}  single-threaded solver; load average at start "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    folder = Path(tempfile.mkdtemp(prefix="shell_live_bench_"))
    if args.shell:
        path, source = args.shell, str(args.shell)
    else:
        from shell_sheets import shell_from_rig
        if args.rig is not None:
            from solver.rig import load_rig
            rig, source = load_rig(args.rig), str(args.rig)
        else:
            from ict_data import ict_available, load_ict_rig
            if not ict_available():
                print("no --shell, no --rig and no ICT data: nothing to time")
                return 1
            rig, source = load_ict_rig(), "ICT FaceKit skin"
        path = folder / "shell.npz"
        save_shell(path, shell_from_rig(rig, args.triangles))
        source += f", remeshed to {args.triangles} triangles, uniform stiffness"
    shell = load_shell(path)
    frames = args.frames + WARM_UP
    weights = _animation(len(shell.shape_names), frames)
    centres, radius = _sphere_path(shell, frames)

    # In this process: the solve alone.
    simulator = ShellSimulator(shell)
    in_process = []
    for frame in range(frames):
        started = time.perf_counter()
        simulator.step(weights[frame], [SphereCollider(centres[frame], radius)], 1.0 / FPS)
        simulator.fine_positions_m()
        if frame >= WARM_UP:
            in_process.append(time.perf_counter() - started)

    # Through the child.
    live = shell_live.LiveShell(sys.executable, path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        hello = live.wait_hello(300.0)
        round_trips, solver_s, warp_s, sizes = [], [], [], []
        started_all = None
        for frame in range(frames):
            message = shell_live.pack_frame(1.0 / FPS, weights[frame], shell_live.TOOL_PUSH, centres[frame], radius)
            if frame == WARM_UP:
                started_all = time.perf_counter()
            started = time.perf_counter()
            reply = live.request(message, timeout=60.0)
            if frame >= WARM_UP:
                round_trips.append(time.perf_counter() - started)
                solver_s.append(reply.simulate_s)
                warp_s.append(reply.warp_s)
                sizes.append(len(message))
        wall = time.perf_counter() - started_all
        reply_bytes = 4 + 1 + 40 + 12 * hello.fine_vertices
    finally:
        live.close(10.0)
    trip, solve, warp = (1e3 * float(np.median(values)) for values in (round_trips, solver_s, warp_s))
    print(f"shell: {source}: {hello.coarse_vertices} coarse vertices, {len(shell.coarse_triangles)} triangles, "
          f"{hello.fine_vertices} fine vertices, {len(shell.shape_names)} shapes; {args.frames} frames of 1/30 s "
          f"with a pushing sphere after {WARM_UP} of warm-up")
    print(f"  round trips per second (back to back): {args.frames / wall:.0f}")
    print(f"  round trip, median: {trip:.2f} ms (95th percentile {1e3 * np.percentile(round_trips, 95):.2f} ms)")
    print(f"    solver: coarse rig + simulation {solve:.2f} ms, warp + detail {warp:.2f} ms")
    print(f"    pipe, packing, unpacking: {trip - solve - warp:.2f} ms")
    print(f"  same frames in this process: {1e3 * float(np.median(in_process)):.2f} ms median")
    print(f"  messages: FRAME {int(np.median(sizes))} bytes, POSITIONS {reply_bytes} bytes")
    preview = _preview_write_ms(hello.fine_vertices, np.zeros((hello.fine_vertices, 3), np.float32))
    if preview is not None:
        print(f"  writing the positions into a {hello.fine_vertices}-vertex preview mesh (bpy foreach_set + "
              f"update): {preview:.2f} ms")
    budget = 1e3 / FPS
    print(f"  a 30-FPS frame has {budget:.1f} ms; the round trip uses {100 * trip / budget:.0f} % of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
