"""How closely the interactive shell replays its rig (issue 40's acceptance, paper 001 §5.2).

1. Every shape key held for --hold frames from rest: the coarse shell's largest distance to its
   coarse target (must stay within ε_r) and the full-resolution skin's largest distance to the
   rig's shape, after warp + detail (Eq. 14).
2. A blended animation (the first --frames frames of a captured performance, ARKit weights,
   matched to the rig's shape keys by name): per frame the largest distance of the shell's skin
   to the plain rig's, in mm and in % of the face height (paper 001 Fig. 8: 1.8–3.4 %).

    .venv/bin/python bench/shell_replay.py SHELL.npz RIG.npz [--weights ../shared/data/performance_dev.npz]

Prints the figures, the mesh sizes and the commit; --json writes them, --plot draws the per-frame
deviation (PNG, headless).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_info import commit  # noqa: E402

DEFAULT_WEIGHTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "performance_dev.npz"


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shell", type=Path)
    parser.add_argument("rig", type=Path)
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--hold", type=int, default=30, help="frames each shape key is held (30 fps)")
    parser.add_argument("--region", default="face_region",
                        help="vertex group the deviation is measured on (all skin when the rig lacks it)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--closeups", type=Path,
                        help="PNG of mouth close-ups, plain rig beside shell, at the frames with the most creases")
    return parser.parse_args()


def region_mask(rig, name: str) -> np.ndarray:
    names = [str(n) for n in (rig.vertex_group_names if rig.vertex_group_names is not None else [])]
    if name in names:
        return np.asarray(rig.vertex_group_weights[names.index(name)]) > 0.5
    return np.ones(len(rig.vertices), dtype=bool)


def replay_shapes(simulator, shell, rig, hold: int, mask):
    rows = []
    for index, name in enumerate(shell.shape_names):
        weights = np.zeros(len(shell.shape_names))
        weights[index] = 1.0
        simulator.reset()
        for _ in range(hold):
            simulator.step(weights, dt=1.0 / 30.0)
        target = shell.coarse_rest + shell.coarse_deltas[index]
        coarse = np.linalg.norm(simulator.coarse_positions - target, axis=1).max()
        fine = np.linalg.norm(simulator.fine_positions_m() - (rig.vertices + rig.shape_key(name)), axis=1)[mask].max()
        rows.append({"shape": name, "coarse_face_units": float(coarse), "fine_mm": float(1e3 * fine)})
    return rows


def performance_weights(path: Path, shell, frames: int):
    with np.load(path, allow_pickle=False) as data:
        names = [str(n) for n in data["names"]]
        weights = np.asarray(data["weights"], dtype=np.float64)
        fps = float(data["fps"])
    columns = {name: column for column, name in enumerate(names)}
    matched = np.zeros((min(frames, len(weights)), len(shell.shape_names)))
    for index, name in enumerate(shell.shape_names):
        if name in columns:
            matched[:, index] = weights[:len(matched), columns[name]]
    return matched, fps, sum(name in columns for name in shell.shape_names)


def replay_animation(simulator, shell, rig, weights, fps: float, mask):
    """Per frame: the largest distance to the plain rig (m) and the edges creased / folded beyond
    the plain rig's own bends (solver/geometry/bends.py, as bench/performance.py counts them)."""
    from solver.geometry.bends import SkinBends
    from solver.rig import triangulate
    bends = SkinBends(triangulate(rig.faces), len(rig.vertices), region=mask)
    deltas = np.stack([rig.shape_key(name) for name in shell.shape_names])
    simulator.reset(weights[0])
    rows, skins = [], []
    for frame in weights:
        simulator.step(frame, dt=1.0 / fps)
        plain = rig.vertices + np.tensordot(frame, deltas, axes=1)
        skin = simulator.fine_positions_m()
        skins.append(skin.astype(np.float32))
        bend = bends.count(skin, plain, rest=rig.vertices)
        rows.append((np.linalg.norm(skin - plain, axis=1)[mask].max(), bend.creased, bend.folded))
    return np.array(rows), np.array(skins), bends


def closeups(path: Path, rig, shell, weights, skins, bends, frames, title: str) -> None:
    """Front and side views of the mouth per frame: the plain rig (top) and the shell (bottom),
    with the vertices of edges creased beyond the rig in red."""
    from solver.model_builder.landmarks import infer_landmarks
    from solver.pictures.raster import Camera, MeshLayer, add_title, render_meshes, save_png, side_by_side
    from solver.rig import triangulate
    marks = infer_landmarks(rig)
    frame_axes = marks.frame
    mouth = 0.5 * (marks["upper_lip"] + marks["lower_lip"])
    width = float(np.linalg.norm(marks["mouth_corner_L"] - marks["mouth_corner_R"]))
    triangles = triangulate(rig.faces)
    deltas = np.stack([rig.shape_key(name) for name in shell.shape_names])
    front = Camera(-frame_axes.forward, frame_axes.up, mouth, 1.7 * width, 360, 360)
    side = Camera(frame_axes.left, frame_axes.up, mouth - 0.25 * width * frame_axes.forward, 1.5 * width, 360, 360)
    right_half = triangles[((rig.vertices[triangles].mean(1) - mouth) @ frame_axes.left) <= 0.0]
    columns = []
    for frame in frames:
        plain = rig.vertices + np.tensordot(weights[frame], deltas, axes=1)
        shown = np.asarray(skins[frame], dtype=np.float64)
        colours = np.tile([0.85, 0.72, 0.64], (len(rig.vertices), 1))
        colours[bends.creased_vertices(shown, plain)] = (0.86, 0.08, 0.06)
        plain_colours = np.tile([0.85, 0.72, 0.64], (len(rig.vertices), 1))
        views = []
        for positions, paint in ((plain, plain_colours), (shown, colours)):
            views.append(render_meshes(front, [MeshLayer(positions, triangles, paint, colour_per_vertex=True)]))
            views.append(render_meshes(side, [MeshLayer(positions, right_half, paint, colour_per_vertex=True)]))
        top = side_by_side(views[:2], ["rig front", "rig side"])
        bottom = side_by_side(views[2:], ["shell front", "shell side"])
        columns.append(add_title(np.concatenate([top, bottom], axis=0), f"frame {frame}"))
    save_png(add_title(side_by_side(columns, [""] * len(columns)), title), path)


def plot(path: Path, percent, creased, folded, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    figure = Figure(figsize=(10, 5), dpi=100)
    FigureCanvasAgg(figure)
    top, bottom = figure.subplots(2, 1, sharex=True)
    top.plot(percent, color="tab:blue", lw=1.2)
    top.set_ylabel("largest deviation\nfrom the plain rig (%)")
    bottom.plot(creased, color="tab:orange", lw=1.2, label="creased (> 30° beyond rig)")
    bottom.plot(folded, color="tab:red", lw=1.2, label="folded (> 90° beyond rig)")
    bottom.set_ylabel("edges")
    bottom.set_xlabel("frame")
    bottom.legend(fontsize=8)
    for panel in (top, bottom):
        panel.grid(alpha=0.3)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)


def main():
    args = arguments()
    from solver.rig import load_rig
    from solver.shell.forward import ShellSimulator
    from solver.shell.shell_file import load_shell
    shell = load_shell(args.shell)
    rig = load_rig(args.rig)
    mask = region_mask(rig, args.region)
    simulator = ShellSimulator(shell)
    height_mm = 1e3 * shell.face_height_m
    epsilon = shell.settings.reproducibility
    print(f"shell: {len(shell.coarse_rest)} coarse vertices, {len(shell.coarse_triangles)} triangles; rig "
          f"{len(rig.vertices)} vertices, {len(shell.shape_names)} shape keys; face height {height_mm:.1f} mm; "
          f"commit {commit()}")
    shapes = replay_shapes(simulator, shell, rig, args.hold, mask)
    worst = max(shapes, key=lambda row: row["coarse_face_units"])
    within = sum(row["coarse_face_units"] <= epsilon for row in shapes)
    print(f"shape keys held {args.hold} frames: {within} of {len(shapes)} within eps_r = {epsilon} face units "
          f"({epsilon * height_mm:.2f} mm) on the coarse shell; worst {worst['shape']} "
          f"{worst['coarse_face_units']:.4f}; full skin worst {max(r['fine_mm'] for r in shapes):.2f} mm")
    summary = {"commit": commit(), "coarse_vertices": len(shell.coarse_rest),
               "coarse_triangles": len(shell.coarse_triangles), "rig_vertices": len(rig.vertices),
               "face_height_mm": height_mm, "shapes": shapes}
    if args.weights.exists():
        weights, fps, matched = performance_weights(args.weights, shell, args.frames)
        rows, skins, bends = replay_animation(simulator, shell, rig, weights, fps, mask)
        deviations, creased, folded = rows[:, 0], rows[:, 1], rows[:, 2]
        percent = 100.0 * deviations / shell.face_height_m
        print(f"animation {args.weights.name}: {len(weights)} frames at {fps:g} fps, {matched} keys matched by name; "
              f"largest deviation from the plain rig {1e3 * deviations.max():.2f} mm = {percent.max():.2f} % of the "
              f"face height (mean over frames {percent.mean():.2f} %); creased edges beyond the rig: max "
              f"{int(creased.max())}, folded: max {int(folded.max())}")
        summary.update(animation_frames=len(weights), deviation_mm=(1e3 * deviations).tolist(),
                       max_percent=float(percent.max()), mean_percent=float(percent.mean()),
                       creased=creased.astype(int).tolist(), folded=folded.astype(int).tolist())
        if args.plot:
            plot(args.plot, percent, creased, folded,
                 f"shell replay of {args.weights.name}, {len(shell.coarse_triangles)} coarse triangles, "
                 f"commit {commit()}")
        if args.closeups:
            worst = sorted(np.argsort(-creased, kind="stable")[:1].tolist() + [int(np.argmax(percent))])
            frames = sorted(set(worst + [len(weights) // 2]))
            closeups(args.closeups, rig, shell, weights, skins, bends, frames,
                     f"mouth, plain rig (top) and shell (bottom, red: creased beyond the rig), commit {commit()}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
