"""Replay every fitted shape key at weight 1 through `animate`, with the detail correction, and
measure how far the played skin lies from the shape key (issue 4: within 0.1 mm).

Every shape is its own one-frame animation at weight 1: a jump from the neutral face, as an
artist keying it in a new animation would, solved in the load steps `animate` takes for such a
jump (docs/physics.md, "Two equilibria"), by a fresh solver. One animation alternating the
neutral face and each shape (as this bench did until ICT's mouthShrugLower) carries the Newton
preconditioner from frame to frame, and where a pose has two equilibria that can decide which
one is reached (CholmodLinearSolver.forget_numeric_factor).
A shape fitted on top of another (mouthClose on jawOpen, FIT.npz `fit_context`) is played with
that one at weight 1 too and compared with the sum of both keys: that is what it means in
ARKit, and alone it need not be an activation at all (docs/inverse-physics.md, "Context shapes").
Per shape it prints the largest distance over all skin vertices and over the face region (mm)
between the played skin (simulation + detail) and the shape key, the same as `animate` shows it
through the skin filter (physics/skin_filter.py: the key plus the low-passed remainder, so
within the replay's own error), and the distance without the detail (the physics-only fit
error, for comparison with FIT.npz's `fit_error_mm`).

    .venv/bin/python bench/replay_shapes.py --model MODEL.npz --fit FIT.npz [--shapes a,b] [--json out.json]

MODEL.npz is the ICT model the fit was made on (bench/fit.py --model keeps one), FIT.npz the
fit (bench/fit.py --fit-output, or `python -m solver fit`). One core.
"""
from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.inverse.blend import blend  # noqa: E402
from solver.inverse.fit_file import load_fit, shape_contexts  # noqa: E402
from solver.inverse.shapes import face_region  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics.animate import animate  # noqa: E402
from solver.physics.simulator import SimulationSettings  # noqa: E402
from solver.physics.skin_filter import SkinFilter  # noqa: E402
from tests.ict_data import ICT_PATH, ict_available, load_ict_rig  # noqa: E402

TARGET_MM = 0.1


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--shapes", default="", help="comma-separated; default every fitted shape")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not ict_available():
        raise SystemExit(f"the ICT data is not at {ICT_PATH}")
    rig, model = load_ict_rig(), load_model(args.model)
    fit = load_fit(args.fit, model)
    rig_names = [str(n) for n in rig.shape_key_names]
    fit_names = [str(n) for n in fit["shape_key_names"]]
    shapes = [s for s in args.shapes.split(",") if s] or fit_names
    region, _ = face_region(model, rig)
    contexts = dict(zip(fit_names, shape_contexts(fit)))
    print(f"ICT face: {len(model['tets'])} tets, {len(rig.vertices)} skin vertices; one animation per shape")
    skin_filter = SkinFilter.for_model(model)
    print(f"{'shape':<18}{'with detail: all / face mm':>28}{'filtered: all mm':>18}{'without: face max mm':>22}"
          f"  converged")
    rows = {}
    started = time.perf_counter()
    for shape in shapes:
        weights = np.zeros((1, len(fit_names)))
        for played_shape in (shape, contexts[shape]):
            if played_shape:
                weights[0, fit_names.index(played_shape)] = 1.0
        played = blend(fit, weights, 24.0, np.eye(4)[None], detail=True)
        with tempfile.TemporaryDirectory() as directory:
            result = animate(model, played.activations, Path(directory) / "replay.npz", SimulationSettings(),
                             skin_detail=played.detail)
        target = rig.vertices + sum(rig.shape_key_deltas[rig_names.index(name)]
                                    for name in (shape, contexts[shape]) if name)
        with_detail = np.linalg.norm(result.skin_positions[0] - target, axis=1) * 1e3
        physics = np.linalg.norm(result.skin_positions[0] - played.detail[0] - target, axis=1) * 1e3
        # What animate shows: no collision scene here, so the filter is this one step.
        shown = skin_filter.apply(result.skin_positions[0], target).skin
        filtered = np.linalg.norm(shown - target, axis=1) * 1e3
        rows[shape] = {"max_mm": float(with_detail.max()), "face_max_mm": float(with_detail[region].max()),
                       "filtered_max_mm": float(filtered.max()),
                       "physics_face_max_mm": float(physics[region].max()),
                       "converged": bool(result.converged[0])}
        label = f"{contexts[shape]}+{shape}" if contexts[shape] else shape
        print(f"{label:<18}{with_detail.max():>18.4f} / {with_detail[region].max():.4f}{filtered.max():>18.4f}"
              f"{physics[region].max():>22.2f}"
              f"  {bool(result.converged[0])}", flush=True)
    seconds = time.perf_counter() - started
    worst = max(rows, key=lambda s: rows[s]["max_mm"])
    within = sum(row["max_mm"] <= TARGET_MM for row in rows.values())
    print(f"{within} of {len(rows)} shapes reproduced within {TARGET_MM} mm on every skin vertex; "
          f"largest {rows[worst]['max_mm']:.4f} mm ({worst}); through the skin filter largest "
          f"{max(row['filtered_max_mm'] for row in rows.values()):.4f} mm; "
          f"{sum(row['converged'] for row in rows.values())} of {len(rows)} converged; {seconds:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"seconds": seconds, "shapes": rows}, indent=1))


if __name__ == "__main__":
    main()
