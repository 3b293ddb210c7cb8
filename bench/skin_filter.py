"""The skin filter's cost a frame (solver/physics/skin_filter.py), on frames a bake simulated.

    .venv/bin/python bench/skin_filter.py --model MODEL.npz --fit FIT.npz --weights WEIGHTS.npz \
        --result RESULT.npz [--runs 3] [--save SHOWN.npy]

RESULT.npz is `python -m solver animate MODEL FIT WEIGHTS --collisions teeth,lips --no-skin-filter`
of the same WEIGHTS: its skin is the simulated skin, its bone transforms place the colliders. Each
frame is then shown as `animate` shows it (physics/animate.py): against the plain rig frame, kept
out of the teeth and the other lip. Prints the seconds a frame (median and mean, per run), the
vertices pinned and the frames the fold guard held, the mesh size and the commit; --save writes
the shown skins (T, V, 3) of the last run, to compare two checkouts.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "bench"))

from bench_info import commit  # noqa: E402
from solver.collisions.contacts import BonePose  # noqa: E402
from solver.collisions.scene import CollisionScene  # noqa: E402
from solver.inverse.blend import load_weights  # noqa: E402
from solver.inverse.fit_file import load_fit  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics.simulator import SimulationSettings  # noqa: E402
from solver.physics.skin_filter import SkinFilter  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--weights", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True, help="animate's RESULT.npz, written with --no-skin-filter")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--save", type=Path)
    args = parser.parse_args()
    model = load_model(args.model)
    fit = load_fit(args.fit, model)
    weights, _, _, heads = load_weights(args.weights, fit)
    with np.load(args.result, allow_pickle=False) as result:
        skins, skulls, jaws = result["skin_positions"], result["skull_transforms"], result["jaw_transforms"]
    if len(skins) != len(weights):
        raise SystemExit(f"{args.result.name} has {len(skins)} frames, {args.weights.name} {len(weights)}")
    rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    deltas = np.asarray(fit["shape_key_deltas"], dtype=np.float64)
    skin_filter = SkinFilter.for_model(model)
    scene = CollisionScene(model, teeth=True, lips=True)
    tolerance = SimulationSettings().contact_tolerance
    print(f"commit {commit()}; {len(rest)} skin vertices, {len(skin_filter.triangles)} triangles, "
          f"filter width {skin_filter.width_m * 1e3:.2f} mm; {len(skins)} frames of {args.result.name}")
    for run in range(1, args.runs + 1):
        seconds, pinned, guarded, shown = [], 0, 0, np.empty_like(skins)
        for frame in range(len(skins)):
            head = heads[frame]
            rig = (rest + np.tensordot(weights[frame], deltas, axes=1)) @ head[:3, :3].T + head[:3, 3]
            started = time.perf_counter()
            filtered = skin_filter.apply_in_scene(skins[frame], rig, scene, BonePose(skulls[frame], jaws[frame], frame),
                                                  tolerance)
            seconds.append(time.perf_counter() - started)
            pinned += filtered.held_by_colliders
            guarded += filtered.guarded > 0
            shown[frame] = filtered.skin
        print(f"run {run}: median {np.median(seconds):.3f} s, mean {np.mean(seconds):.3f} s a frame; "
              f"{pinned} vertices pinned in all, fold guard on {guarded} frames")
    if args.save:
        np.save(args.save, shown)


if __name__ == "__main__":
    main()
