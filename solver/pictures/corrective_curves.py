"""The corrective rig against the full simulation, per frame (bench/correctives_acceptance.py's
report; as paper 002 Fig. 12–13).

Two panels sharing the frame axis: the mean distance of the corrected and of the plain linear
rig to the simulated skin over the face region, and the lip vertices deeper than 0.1 mm in the
teeth for the simulation, the corrected and the linear rig. Drawn with matplotlib's Agg canvas,
headless.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_LINEAR, _CORRECTED, _SIMULATED = "0.55", "tab:blue", "tab:green"


def picture_corrective_curves(report: dict, path) -> Path:
    """Write the curves of `report` (per-frame lists `corrected_mean_mm`, `linear_mean_mm`,
    `simulated_lips_in_teeth`, `corrected_lips_in_teeth`, `linear_lips_in_teeth`; `keys`,
    `commit`) to `path` (PNG)."""
    figure = Figure(figsize=(11, 6), dpi=100)
    FigureCanvasAgg(figure)
    distance, lips = figure.subplots(2, 1, sharex=True)
    frames = np.arange(len(report["corrected_mean_mm"]))
    linear, corrected = np.asarray(report["linear_mean_mm"]), np.asarray(report["corrected_mean_mm"])
    distance.plot(frames, linear, color=_LINEAR, lw=1.4, label=f"linear rig (mean {linear.mean():.2f} mm)")
    distance.plot(frames, corrected, color=_CORRECTED, lw=1.4,
                  label=f"corrected rig (mean {corrected.mean():.2f} mm, {1 - corrected.mean() / linear.mean():.0%} "
                        f"lower)")
    distance.set_ylabel("mean distance to the\nsimulated skin, face (mm)")
    distance.set_ylim(bottom=0.0)
    distance.legend(fontsize=8, loc="upper right")
    for label, colour in (("linear", _LINEAR), ("corrected", _CORRECTED), ("simulated", _SIMULATED)):
        counts = np.asarray(report[f"{label}_lips_in_teeth"])
        lips.plot(frames, counts, color=colour, lw=1.4 if label != "simulated" else 1.0,
                  label=f"{label} (mean {counts.mean():.1f}, max {counts.max()})")
    lips.set_ylabel("lip vertices\n> 0.1 mm in the teeth")
    lips.set_xlabel("frame (30 fps)")
    lips.legend(fontsize=8, loc="upper right")
    for panel in (distance, lips):
        panel.grid(alpha=0.3)
    figure.suptitle(f"corrective rig against the full simulation — {len(frames)} frames of "
                    f"{', '.join(report['keys'])}; commit {report.get('commit', '?')}", fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 0.96))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
