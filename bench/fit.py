"""Inverse physics on the ICT face: seconds per shape key, iterations and fit error; reduced vs IPOPT.

Two parts, both on the same model:

1. Per shape, on one core (BLAS and numba single-threaded), each requested method in the same
   run: the reduced-space Gauss–Newton fit (solver/inverse/fit.py) and the full-space IPOPT fit
   of the paper (baselines/full_space.py); `reduced-last-start` is the reduced fit with its
   trial solves started from the last equilibrium rather than its first-order prediction
   (FitSettings.predicted_start). Prints seconds, outer/IPOPT iterations and the
   error on the face region (mean / 95th percentile / max mm).
2. With --all-jobs N: every shape key of the rig through `fit_shapes` with N worker processes
   (what `python -m solver fit --jobs N` runs), its wall time, a per-shape table, how many
   shapes meet the issue's targets (eye-look shapes excluded), the per-shape seconds summed and
   their median, which shapes started from their mirror partner's fit (shapes.fit_shapes), and
   optionally FIT.npz and the error heat-map picture.
3. With --still-muscles-picture PATH: which muscles the fit holds at rest for a few shapes
   (FitSettings.hold_still_muscles), drawn over each shape's motion; no fitting needed.

    .venv/bin/python bench/fit.py [--target-tets 35000] [--model MODEL.npz]
        [--shapes jawOpen,mouthSmile_L,browInnerUp] [--methods reduced,ipopt]
        [--all-jobs 2] [--fit-output FIT.npz] [--picture errors.png]
        [--still-muscles-picture still.png]

Anchor: about 3 minutes per shape in paper 000 §7 (IPOPT, 35,626 tets). Target: ≤ 30 s per
shape on one core. Accuracy targets (physics only, eye-look shapes excluded): mean ≤ 1.0 mm and
95th percentile ≤ 2.5 mm for every shape.
"""
from __future__ import annotations

import os

# One core for the per-shape figures; must be set before numpy, numba or CHOLMOD load.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.inverse.fit import MILLIMETRE, STILL_MUSCLE_MOTION, FitSettings, ShapeFitter  # noqa: E402
from solver.inverse.fit_file import save_fit  # noqa: E402
from solver.inverse.shapes import CONTEXT_SHAPES, describe_start, face_region, fit_shapes  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.model_file import load_model, save_model  # noqa: E402
from tests.ict_data import ICT_PATH, ict_available, load_ict_rig  # noqa: E402

MEAN_TARGET_MM, PERCENTILE_TARGET_MM = 1.0, 2.5
DEFAULT_SHAPES = "jawOpen,mouthSmile_L,browInnerUp,mouthPucker,eyeBlink_L"


def _fitters(model, rig, methods):
    region, _ = face_region(model, rig)
    reduced = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region)
    fitters = {}
    for method in methods:
        if method == "reduced":
            fitters[method] = reduced
        elif method == "reduced-last-start":
            # The trial solves started from the last equilibrium instead of its prediction.
            fitters[method] = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region,
                                          FitSettings(predicted_start=False))
        elif method == "ipopt":
            from baselines.full_space import FullSpaceFitter
            fitters[method] = FullSpaceFitter(reduced)
        else:
            raise SystemExit(f"unknown method {method!r}: use reduced, reduced-last-start and/or ipopt")
    return fitters


def per_shape(model, rig, shapes, methods):
    names = [str(n) for n in rig.shape_key_names]
    fitters = _fitters(model, rig, methods)
    print(f"\nper shape, one core ({', '.join(methods)}):")
    print(f"{'shape':<18}{'method':<9}{'seconds':>9}{'iterations':>12}   error mean / 95th / max mm")
    rows = []
    for shape in shapes:
        delta = rig.shape_key_deltas[names.index(shape)]
        context = CONTEXT_SHAPES.get(shape)
        if context in names:            # fitted where it is used, as `fit` does (shapes.py)
            delta = delta + rig.shape_key_deltas[names.index(context)]
            print(f"  ({shape} is fitted on top of {context}: the error is that of {context} + {shape})")
        for method, fitter in fitters.items():
            fit = fitter.fit(shape, delta)
            rows.append({"shape": shape, "method": method, "seconds": fit.seconds, "iterations": fit.iterations,
                         "error_mm": [float(e) for e in fit.error_mm], "status": fit.status})
            mean, p95, worst = fit.error_mm
            print(f"{shape:<18}{method:<9}{fit.seconds:>9.1f}{fit.iterations:>12}   {mean:.3f} / {p95:.3f} / {worst:.2f}"
                  + ("" if fit.status == "fitted" else f"   ({fit.status})"), flush=True)
    for method in methods:
        fitted = [r for r in rows if r["method"] == method and r["status"] == "fitted"]
        if fitted:
            print(f"{method}: {np.mean([r['seconds'] for r in fitted]):.1f} s per fitted shape on average")
    return rows


def all_shapes(model, rig, jobs, fit_output, picture):
    names = [str(n) for n in rig.shape_key_names]

    replays = {}

    def progress(fit, done, total):
        replays[fit.name] = [[round(float(value), 5) for value in pair] for pair in fit.replays]
        went_on = f", went on after {len(fit.replays) - 1} replay(s)" if len(fit.replays) > 1 else ""
        print(f"  [{done:>2}/{total}] {fit.name:<20} {fit.seconds:6.1f} s  {fit.iterations:>3} its  "
              f"{fit.error_mm[0]:.3f} / {fit.error_mm[1]:.3f} / {fit.error_mm[2]:.2f} mm  {fit.status}"
              f"{describe_start(fit.started_from)}{went_on}", flush=True)

    print(f"\nall {len(names)} shape keys with {jobs} worker processes:")
    started = time.perf_counter()
    arrays = fit_shapes(model, rig, names, jobs=jobs, progress=progress)
    wall = time.perf_counter() - started
    errors, status = arrays["fit_error_mm"], arrays["status"]
    judged = [i for i, n in enumerate(names) if not n.startswith("eyeLook")]
    meeting = [i for i in judged if errors[i, 0] <= MEAN_TARGET_MM and errors[i, 1] <= PERCENTILE_TARGET_MM]
    neutral = [names[i] for i in range(len(names)) if not str(status[i]).startswith("fitted")]
    seconds = np.asarray(arrays["seconds"], dtype=np.float64)
    mirrored = np.char.startswith(np.asarray(arrays["fit_start"]), "mirror:")
    print(f"total wall time {wall:.0f} s ({wall / len(names):.1f} s per shape with {jobs} jobs)")
    print(f"per shape on one core: summed {seconds.sum():.0f} s, median {np.median(seconds):.0f} s, "
          f"range {seconds.min():.0f}-{seconds.max():.0f} s, {int((seconds <= 30.0).sum())} of {len(names)} within 30 s; "
          f"{int(mirrored.sum())} started from their mirror partner's fit ({seconds[mirrored].sum():.0f} s summed)")
    print(f"neutral (not fitted): {', '.join(neutral) or 'none'}")
    print(f"meeting mean ≤ {MEAN_TARGET_MM} mm and 95th ≤ {PERCENTILE_TARGET_MM} mm: {len(meeting)} of "
          f"{len(judged)} (eye-look shapes excluded)")
    worst = sorted(judged, key=lambda i: -errors[i, 0])[:8]
    print("worst: " + ", ".join(f"{names[i]} {errors[i, 0]:.2f}/{errors[i, 1]:.2f}" for i in worst))
    if fit_output:
        save_fit(fit_output, arrays)
        print(f"wrote {fit_output}")
        if picture:
            from solver.pictures.fit_errors import picture_fit_errors
            print(f"wrote {picture_fit_errors(model, arrays, picture)}")
    return {"wall_seconds": wall, "jobs": jobs, "shapes": len(names), "meeting_targets": len(meeting),
            "judged": len(judged), "neutral": neutral,
            "per_shape": {names[i]: {"error_mm": [float(e) for e in errors[i]], "seconds": float(arrays["seconds"][i]),
                                     "iterations": int(arrays["iterations"][i]), "status": str(status[i]),
                                     "start": str(arrays["fit_start"][i]),
                                     "replays": replays.get(names[i], [])}
                          for i in range(len(names))}}


STILL_MUSCLE_SHAPES = ("mouthPucker", "mouthSmile_L", "browOuterUp_L", "jawOpen")


def still_muscles_picture(model, rig, path):
    from solver.pictures.still_muscles import picture_still_muscles
    region, _ = face_region(model, rig)
    fitter = ShapeFitter(model, model["skin_vertices"], model["skin_triangles"], region)
    names = [str(n) for n in rig.shape_key_names]
    shapes = []
    for name in STILL_MUSCLE_SHAPES:
        delta = np.asarray(rig.shape_key_deltas[names.index(name)])
        held = fitter.still_muscles(delta)
        shapes.append((name, delta, held))
        print(f"  {name}: {int(held.sum())} of {len(held)} muscles held")
    written = picture_still_muscles(model, fitter.muscle_footprints, shapes, fitter.membership.muscle_names, path,
                                    region, threshold_mm=STILL_MUSCLE_MOTION / MILLIMETRE)
    print(f"wrote {written}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-tets", type=int, default=35000)
    parser.add_argument("--model", type=Path, help="reuse a model built from the ICT rig (else build and keep it in /tmp)")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated; empty for none")
    parser.add_argument("--methods", default="reduced,ipopt")
    parser.add_argument("--all-jobs", type=int, default=0, help="also fit every shape with this many processes")
    parser.add_argument("--fit-output", type=Path)
    parser.add_argument("--picture", type=Path)
    parser.add_argument("--still-muscles-picture", type=Path)
    parser.add_argument("--json", type=Path, help="write the figures here as JSON")
    args = parser.parse_args()
    if not ict_available():
        raise SystemExit(f"the ICT data is not at {ICT_PATH}")
    rig = load_ict_rig()
    if args.model and args.model.exists():
        model = load_model(args.model)
    else:
        started = time.perf_counter()
        model = build_model(rig, BuildOptions(target_tets=args.target_tets))
        print(f"built the model in {time.perf_counter() - started:.0f} s")
        if args.model:
            save_model(args.model, model)
    info = json.loads(str(model["build_info"]))
    active = int((np.asarray(model["muscle_fraction"]).sum(1) > 0).sum())
    print(f"ICT face: {len(model['tets'])} tets ({active} with muscle), {len(model['rest_positions'])} nodes, "
          f"lattice spacing {info['lattice_spacing_m'] * 1e3:.1f} mm, {len(rig.vertices)} skin vertices")
    report = {"tets": int(len(model["tets"])), "active_tets": active, "nodes": int(len(model["rest_positions"])),
              "lattice_spacing_mm": info["lattice_spacing_m"] * 1e3}
    shapes = [s for s in args.shapes.split(",") if s]
    if shapes:
        report["per_shape"] = per_shape(model, rig, shapes, [m for m in args.methods.split(",") if m])
    if args.all_jobs:
        report["all_shapes"] = all_shapes(model, rig, args.all_jobs, args.fit_output, args.picture)
    if args.still_muscles_picture:
        still_muscles_picture(model, rig, args.still_muscles_picture)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
