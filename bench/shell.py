"""Interactive shell forward speed (issue 40): milliseconds per simulation update (Δt = 0.01 s,
5 sub-steps of 2 ms) and per 30-fps frame (16–17 sub-steps), single-threaded, split into the
coarse rig, the simulation and the warp + detail, at 2k / 4k / 8k coarse triangles.

    python bench/shell.py [--shell SHELL.npz ...] [--rig RIG.npz] [--triangles 2000 4000 8000]

With --shell it times those fitted shells. Without, it builds shells from the ICT rig (the
converted FaceKit skin, tests/ict_data.py, or --rig): the skin remeshed to each triangle count
(solver/shell/remesh.py), the rig maps of solver/shell/transfer.py, **uniform** stiffness
(1 N/m at unit face height, not fitted), max depth δ_thin everywhere, no prescribed eyelids, and
the detail of Eq. 13 (solver/shell/detail.py) taken against each key's
warped coarse target, as there is no fitted equilibrium. Anchor: paper 001 Table 2, 0.37–1.27 ms per
update in C++ on one thread; target ≤ 0.5 ms at 4k.

The animation: 53 shape-key weights as slow sinusoids with random phases, clipped to [0, 1]
(about half the keys active in a frame), 200 updates after 20 of warm-up (the JIT).
"""
from __future__ import annotations

import os

for _name in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from bench.bench_info import commit  # noqa: E402
from solver.shell.forward import ShellSimulator  # noqa: E402
from solver.shell.shell_file import ShellModel, load_shell  # noqa: E402
from shell_sheets import shell_from_rig  # noqa: E402

UPDATES = 200
WARM_UP = 20


def animation(shape_count: int, frames: int, fps: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, shape_count)
    rate = rng.uniform(0.3, 1.2, shape_count)                   # Hz
    times = np.arange(frames)[:, None] / fps
    return np.clip(np.sin(2 * np.pi * rate * times + phase), 0.0, 1.0)


def time_shell(shell: ShellModel, dt: float) -> dict:
    """Median milliseconds of each part over UPDATES steps of `dt` seconds."""
    simulator = ShellSimulator(shell)
    weights = animation(len(shell.shape_names), UPDATES + WARM_UP, 1.0 / dt)
    parts = {"coarse_rig": [], "simulate": [], "warp_detail": [], "total": []}
    for frame, frame_weights in enumerate(weights):
        started = time.perf_counter()
        simulator.step(frame_weights, dt=dt)
        simulator.fine_positions_m()
        total = time.perf_counter() - started
        if frame >= WARM_UP:
            for key in ("coarse_rig", "simulate", "warp_detail"):
                parts[key].append(simulator.timings[key])
            parts["total"].append(total)
    result = {key: 1e3 * float(np.median(values)) for key, values in parts.items()}
    # The least of the runs as well: on a shared machine the median carries other jobs' load.
    result["best"] = 1e3 * float(np.min(parts["total"]))
    result.update(vertices=simulator.vertex_count, triangles=len(simulator.topology.triangles),
                  factor_nonzeros=simulator.factor.nonzeros, fine_vertices=len(shell.fine_rest_m),
                  detail_nonzeros=int(shell.detail.nnz), shapes=len(shell.shape_names))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shell", type=Path, nargs="*", default=None, help="fitted SHELL.npz files to time")
    parser.add_argument("--rig", type=Path, default=None, help="RIG.npz to build uniform shells from (default ICT)")
    parser.add_argument("--triangles", type=int, nargs="*", default=[2000, 4000, 8000])
    args = parser.parse_args(argv)
    print(f"bench/shell.py  commit {commit()}  single-threaded (NUMBA/OMP/OPENBLAS threads = 1)")
    if args.shell:
        shells = [(str(path), load_shell(path)) for path in args.shell]
        print("shells: fitted, from the files given")
    else:
        if args.rig is not None:
            from solver.rig import load_rig
            rig, source = load_rig(args.rig), str(args.rig)
        else:
            from ict_data import ict_available, load_ict_rig
            if not ict_available():
                print("no --shell, no --rig and no ICT data (../shared/data): nothing to time")
                return 1
            rig, source = load_ict_rig(), "ICT FaceKit skin (tests/ict_data.py)"
        print(f"shells: built from {source} with UNIFORM stiffness 1 (not fitted), max depth δ_thin, "
              f"no eyelids, detail = fine delta − warped coarse delta clipped at 1e-4 face heights")
        shells = []
        for triangles in args.triangles:
            started = time.perf_counter()
            shells.append((f"{triangles} triangles", shell_from_rig(rig, triangles)))
            print(f"  built {triangles}: {time.perf_counter() - started:.1f} s")
    header = (f"{'shell':>16} {'n':>6} {'tris':>6} {'nnz L':>7} {'V':>6} {'step':>11} {'rig ms':>7} "
              f"{'sim ms':>7} {'warp ms':>8} {'total ms':>9} {'best ms':>8}")
    print("(medians over the updates; best = the least total; load average at start: "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)")
    print(header)
    for name, shell in shells:
        for label, dt in (("update 0.01 s", 0.01), ("frame 1/30 s", 1.0 / 30.0)):
            r = time_shell(shell, dt)
            print(f"{name:>16} {r['vertices']:>6} {r['triangles']:>6} {r['factor_nonzeros']:>7} "
                  f"{r['fine_vertices']:>6} {label:>11} {r['coarse_rig']:>7.3f} {r['simulate']:>7.3f} "
                  f"{r['warp_detail']:>8.3f} {r['total']:>9.3f} {r['best']:>8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
