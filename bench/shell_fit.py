"""The shell's stiffness fit on the ICT face (paper 001 §4; target ≤ 60 s at 4k triangles): per
triangle count, the fit's seconds, L-BFGS iterations, loss evaluations, factorisations
(over every shape; solver/shell/stiffness_fit.py), the final loss, the largest shape-key
deviation after the fit (face units and mm, against ε_r = 0.01), the stiffness maps' means over
the nose, forehead, cheeks and lips (solver/shell/regions.py), the mesh size, and the whole
rig → shell seconds; and the commit.

    .venv/bin/python bench/shell_fit.py [--triangles 2000 4000] [--picture docs/images/shell/stiffness.png]

With --picture, the last count's fitted maps are drawn on the ICT face (solver/pictures/
shell_stiffness.py). Needs ../shared/data (tests/ict_data.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_info import commit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triangles", type=int, nargs="+", default=[2000, 4000])
    parser.add_argument("--picture", type=Path, default=None)
    args = parser.parse_args()
    from ict_data import ict_available, load_ict_rig
    from solver.model_builder.landmarks import infer_head_frame
    from solver.rig import rig_triangles
    from solver.shell.pipeline import build_shell
    from solver.shell.regions import face_regions, region_means
    from solver.shell.settings import ShellSettings
    if not ict_available():
        sys.exit("bench/shell_fit.py: the ICT data is not in ../shared/data")
    rig = load_ict_rig()
    print(f"ICT face: {len(rig.vertices)} skin vertices, {len(rig.shape_key_names)} shape keys; commit {commit()}")
    model = None
    for triangles in args.triangles:
        model, summary = build_shell(rig, settings=ShellSettings(triangles=triangles))
        seconds = summary["seconds"]
        print(f"{summary['coarse_triangles']:5d} triangles / {summary['coarse_vertices']} vertices: fit "
              f"{seconds['fit']:.1f} s, {summary['fit_iterations']} L-BFGS iterations, {summary['fit_evaluations']} "
              f"evaluations, {summary['newton_solves']} factorisations, "
              f"loss {summary.get('fit_loss', float('nan')):.6g} ({summary['fit_stop']}); max deviation "
              f"{summary['max_deviation']:.5f} face units = {summary['max_deviation_mm']:.2f} mm; "
              f"rig -> shell {seconds['total']:.1f} s ({seconds})")
        regions = face_regions(model, rig)
        for label, stiffness in (("strain", model.strain_stiffness), ("bending", model.bending_stiffness)):
            means = ", ".join(f"{name} {value:.3g}" for name, value in region_means(stiffness, regions).items())
            print(f"    {label} stiffness, geometric means by region (N/m): {means}")
    if args.picture is not None and model is not None:
        frame = infer_head_frame(rig)
        from solver.pictures.shell_stiffness import stiffness_picture
        args.picture.parent.mkdir(parents=True, exist_ok=True)
        stiffness_picture(model, rig_triangles(rig), frame.up, frame.axes[2], args.picture,
                          note=f"commit {commit()}")
        print(f"picture: {args.picture}")


if __name__ == "__main__":
    main()
