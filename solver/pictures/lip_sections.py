"""Sagittal sections through the lips and the teeth proxies, frame by frame (issue 5).

Where a lip ends relative to the teeth is hard to judge from a rendered face: the place that
matters is inside the mouth. Each panel cuts one frame along a sagittal plane (normal = the
subject's left) through a chosen point (bench/collision_scenarios.py takes the lip vertex
furthest in the mouth) and draws, in millimetres from that point, face to the left as in the
side view:

- the posed teeth proxies filled, their labial projection region (where a penetrating lip may
  be pushed) outlined green, the rest (the mouth and gum sides) grey;
- the skin's cut lines: at rest, the plain blendshapes, and the simulated skin (the tissue's
  own embedded skin, or whatever the caller passes);
- the marked lip vertices within ``MARK_SLAB_M`` of the plane, drawn where the last skin puts
  them.

Drawn with matplotlib's Agg canvas (no pyplot), so it runs headless.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .contact_frames import REGION_COLOUR
from .raster import BACKGROUND
from .views import TEETH_COLOUR, HeadAxes, TEETH_LINE_COLOUR, triangle_cut_segments

MARK_SLAB_M = 2.0e-3            # marked vertices this close to the cut plane are drawn
PANEL_HALF_WIDTH_M = 0.02       # each panel spans this far either side of its cut point
MARK_COLOUR = (0.75, 0.0, 0.65)
_PANEL_INCHES = 4.6


@dataclass(frozen=True, eq=False)
class LipSectionPanel:
    """One frame's section. `skins`: (label, skin (V,3) world m, RGB colour), drawn in order;
    the marked vertices are drawn at the last skin's positions. `cut_point` (3,): a world point
    on the cut plane, also the panel's centre."""
    title: str
    pose: object                                  # BonePose of the frame
    skins: Sequence[tuple]
    cut_point: np.ndarray
    marked: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    marked_label: str = "marked lip vertices"


def picture_lip_sections(model: dict, scene, panels: Sequence[LipSectionPanel], path,
                         title: Optional[str] = None) -> Path:
    """Write the panels side by side (see the module docstring) to `path` (PNG); `scene` is the
    CollisionScene whose teeth proxies are drawn. Returns the path written."""
    if not panels:
        raise ValueError("picture_lip_sections needs at least one panel")
    axes = HeadAxes.of(model)
    triangles = np.asarray(model["skin_triangles"], dtype=np.int64)
    # At least two panels wide: the legend's three columns need it.
    figure = Figure(figsize=(_PANEL_INCHES * max(len(panels), 2), _PANEL_INCHES + 1.4), dpi=100, facecolor=BACKGROUND,
                    layout="constrained")
    FigureCanvasAgg(figure)
    handles = {}
    for index, panel in enumerate(panels):
        plot = figure.add_subplot(1, len(panels), index + 1)
        _draw_panel(plot, panel, scene, axes, triangles, handles)
    figure.legend(handles=list(handles.values()), loc="outside lower center", ncol=min(len(handles), 3),
                  fontsize=10, frameon=False)
    if title:
        figure.suptitle(title, fontsize=13)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, facecolor=BACKGROUND)
    return path


def _draw_panel(plot, panel: LipSectionPanel, scene, axes: HeadAxes, triangles: np.ndarray, handles: dict) -> None:
    origin = np.asarray(panel.cut_point, dtype=float)

    def in_plane_mm(points: np.ndarray) -> np.ndarray:
        relative = np.asarray(points) - origin
        return np.stack([relative @ -axes.forward, relative @ axes.up], axis=-1) * 1e3

    def cut_lines(vertices, mesh_triangles, colour, label, width):
        segments = triangle_cut_segments(np.asarray(vertices, dtype=float), mesh_triangles, axes.left, origin)
        if len(segments):
            plot.add_collection(LineCollection(in_plane_mm(segments), colors=[colour], linewidths=width))
        handles.setdefault(label, Line2D([], [], color=colour, linewidth=2.5, label=label))

    posed = scene.posed_proxies(panel.pose)
    for collider in scene.teeth:
        vertices, proxy_triangles = posed[collider.name]
        outlines = closed_loops(triangle_cut_segments(np.asarray(vertices, dtype=float), proxy_triangles, axes.left,
                                                      origin))
        plot.add_collection(PolyCollection([in_plane_mm(loop) for loop in outlines], facecolors=[TEETH_COLOUR],
                                           edgecolors="none"))
        cut_lines(vertices, proxy_triangles[~collider.proxy.in_region], TEETH_LINE_COLOUR,
                  "teeth proxy: mouth and gum side", 1.6)
        cut_lines(vertices, proxy_triangles[collider.proxy.in_region], REGION_COLOUR,
                  "teeth proxy: labial projection region", 2.2)
    for label, skin, colour in panel.skins:
        cut_lines(skin, triangles, colour, label, 1.3)
    if len(panel.marked) and panel.skins:
        skin = np.asarray(panel.skins[-1][1])
        near = panel.marked[np.abs((skin[panel.marked] - origin) @ axes.left) <= MARK_SLAB_M]
        if len(near):
            points = in_plane_mm(skin[near])
            plot.scatter(points[:, 0], points[:, 1], s=14, color=MARK_COLOUR, zorder=5)
        handles.setdefault(panel.marked_label, Line2D([], [], color=MARK_COLOUR, marker="o", linestyle="",
                                                      label=f"{panel.marked_label} (within "
                                                            f"{MARK_SLAB_M * 1e3:.0f} mm of the cut)"))
    half = PANEL_HALF_WIDTH_M * 1e3
    plot.set_xlim(-half, half)
    plot.set_ylim(-half, half)
    plot.set_aspect("equal")
    plot.set_facecolor(BACKGROUND)
    plot.set_xlabel("face  \u2190   \u2192  back of head   (mm)", fontsize=9)
    plot.set_ylabel("down  \u2192  up   (mm)", fontsize=9)
    plot.set_title(panel.title, fontsize=10)


def closed_loops(segments: np.ndarray, decimals: int = 9) -> list[np.ndarray]:
    """Chain the (S,2,3) cut segments of a closed mesh into its cross-section's loops, each an
    (n,3) polygon whose last point repeats its first. Two segments join where their ends agree
    to `decimals` (the two triangles beside a cut edge compute its point from the edge's ends in
    either order). An open mesh gives open chains, each from one loose end to the other."""
    keys = [tuple(tuple(np.round(point, decimals)) for point in segment) for segment in segments]
    ends: dict = {}
    for index, pair in enumerate(keys):
        for key in pair:
            ends.setdefault(key, []).append(index)
    used = np.zeros(len(segments), bool)

    def walk(key) -> list:
        points = []
        while True:
            following = [index for index in ends[key] if not used[index]]
            if not following:
                return points
            index = following[0]
            used[index] = True
            end = 1 if keys[index][0] == key else 0
            points.append(segments[index][end])
            key = keys[index][end]

    loops = []
    for start in range(len(segments)):
        if not used[start]:
            used[start] = True
            ahead = walk(keys[start][1])
            behind = walk(keys[start][0])
            loops.append(np.asarray(behind[::-1] + [segments[start][0], segments[start][1]] + ahead))
    return loops
