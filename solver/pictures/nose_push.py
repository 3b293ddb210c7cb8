"""The nose push of bench/nose_push.py, both actuation models side by side (paper 000 Fig. 10).

A slab of tets through the nose tip, 3 mm either side of the mid-sagittal plane, seen from the
side (forward to the right, up up, millimetres from the nose tip): each tet a dot at its pushed
centroid, coloured by its rotation against the unpushed pose (top row) and by its volume ratio
det F (bottom row); the collider plane is the dashed line. Drawn with matplotlib's Agg canvas,
headless.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

SLAB_M, WINDOW_M = 0.003, 0.045


def picture_nose_push(mesh, pushed: dict, nose_tip, head_axes, plane: float, path, subtitle: str) -> Path:
    """`pushed`: {model name: (node positions (N, 3), measures of bench/nose_push.push_measures)};
    `head_axes` rows left, up, forward; `plane` the collider's offset along forward (m)."""
    left, up, forward = np.asarray(head_axes, dtype=np.float64)
    figure = Figure(figsize=(4.6 * len(pushed), 8.4), dpi=100)
    FigureCanvasAgg(figure)
    panels = figure.subplots(2, len(pushed), squeeze=False)
    for column, (name, (positions, measures)) in enumerate(pushed.items()):
        centroids = np.asarray(positions)[mesh.tets].mean(axis=1) - nose_tip
        across, height, ahead = centroids @ left, centroids @ up, centroids @ forward
        shown = (np.abs(across) < SLAB_M) & (np.abs(height) < WINDOW_M) & (ahead > -WINDOW_M)
        for row, (values, colours, low, high, label) in enumerate((
                (measures["angle"], "magma", 0.0, 25.0, "rotation against the unpushed pose (°)"),
                (measures["determinant"], "coolwarm_r", 0.7, 1.3, "volume ratio det F"))):
            panel = panels[row, column]
            dots = panel.scatter(1e3 * ahead[shown], 1e3 * height[shown], c=values[shown], cmap=colours, vmin=low,
                                 vmax=high, s=7, linewidths=0)
            panel.axvline(1e3 * (plane - float(nose_tip @ forward)), color="0.2", lw=1.0, ls="--")
            panel.set_aspect("equal")
            panel.set_xlim(-1e3 * WINDOW_M, 6.0)
            panel.set_ylim(-1e3 * WINDOW_M, 1e3 * WINDOW_M)
            panel.set_xlabel("forward from the nose tip (mm)")
            panel.set_ylabel("up (mm)")
            figure.colorbar(dots, ax=panel, shrink=0.8, label=label)
            if row == 0:
                rotation = f"rotation mean {measures['angle_mean']:.2f}°, max {measures['angle_max']:.1f}°"
                panel.set_title(f"{name}\n{rotation}", fontsize=9)
            else:
                panel.set_title(f"volume lost {measures['volume_lost_percent']:.2f} %, {measures['inverted']} inverted",
                                fontsize=9)
    figure.suptitle(f"nose push, mid-sagittal slab of tets ±{SLAB_M * 1e3:g} mm — {subtitle}", fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 0.96))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
