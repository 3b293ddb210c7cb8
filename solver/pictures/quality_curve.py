"""Curves of a performance's skin quality over its frames (bench/performance.py's report).

Four panels sharing the frame axis, clips laid end to end with a line between them:
creased edges (with the budget the issue allows), folded edges, lip vertices deeper than
0.1 mm in the teeth (simulated beside the plain rig), and seconds per frame. Drawn with
matplotlib's Agg canvas, headless.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def picture_quality_curve(report: dict, path, crease_budget: float) -> Path:
    """Write the curves of `report` ({"clips": [{"label", "rows": [per-frame dicts]}], "commit"})
    to `path` (PNG); `crease_budget` is the allowed number of creased edges, drawn as a line."""
    figure = Figure(figsize=(11, 8.5), dpi=100)
    FigureCanvasAgg(figure)
    panels = figure.subplots(4, 1, sharex=True)
    offset = 0
    for clip in report["clips"]:
        rows = clip["rows"]
        x = offset + np.arange(len(rows))
        get = lambda key: np.array([row[key] for row in rows], dtype=float)   # noqa: E731
        panels[0].plot(x, get("creased"), color="tab:orange", lw=1.2)
        panels[1].plot(x, get("folded"), color="tab:red", lw=1.2)
        panels[2].plot(x, get("rig_lips_in_teeth"), color="0.6", lw=1.2)
        panels[2].plot(x, get("lips_in_teeth"), color="tab:blue", lw=1.2)
        panels[3].plot(x, get("seconds"), color="tab:green", lw=1.2)
        unconverged = x[~get("converged").astype(bool)]
        for panel in panels:
            if offset:
                panel.axvline(offset - 0.5, color="0.3", lw=0.8, ls=":")
            for frame in unconverged:
                panel.axvline(frame, color="tab:red", lw=0.6, alpha=0.4)
        panels[0].text(offset + 1, 1.0, clip["label"], transform=panels[0].get_xaxis_transform(), va="bottom",
                       fontsize=7, rotation=0)
        offset += len(rows)
    panels[0].axhline(crease_budget, color="0.2", lw=0.8, ls="--")
    panels[0].set_ylabel("creased edges\n(> 30° beyond rig)")
    panels[1].set_ylabel("folded edges\n(> 90° beyond rig)")
    panels[2].set_ylabel("lip vertices\n> 0.1 mm in teeth")
    panels[2].legend(["plain rig", "simulated"], fontsize=8, loc="upper right")
    panels[3].set_ylabel("seconds")
    panels[3].set_xlabel("frame (clips end to end; red: not converged)")
    for panel in panels:
        panel.grid(alpha=0.3)
    summary = report.get("summary", {})
    figure.suptitle(f"performance through physics — {summary.get('frames', offset)} frames, commit "
                    f"{report.get('commit', '?')}; dashed: {crease_budget:.1f} creased edges (0.1 % of the face)",
                    fontsize=10)
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    return path
