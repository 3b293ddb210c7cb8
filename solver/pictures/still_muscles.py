"""Which muscles the fit holds at rest for a shape key, and why (docs/inverse-physics.md,
"Still muscles").

Each panel is a front view of the rest skin for one shape key, coloured by how far the shape
key moves each vertex. Over it, the footprints of the muscles the fit holds for that shape
(the skin each one moves at the neutral face) are washed towards a flat grey-blue: every
vertex there moves less than the holding threshold, which is what the picture lets an artist
check at a glance. The caption names the held muscles (left/right pairs once).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from .fit_errors import COLOUR_MAP, front_camera
from .raster import BACKGROUND, MeshLayer, pair_base_name, render_meshes, save_png

HELD_COLOUR = np.array([0.55, 0.62, 0.78])      # grey-blue: no colour of the motion map is near it
HELD_WASH = 0.7                                 # share of HELD_COLOUR over the motion colour
# The motion scale tops out here: the threshold (0.5 mm) and the moving skin round it are what
# matter, and one shared scale keeps the panels comparable (jawOpen alone moves 35 mm).
MOTION_LIMIT_MM = 5.0
_PANEL_INCHES = 3.6
_DPI = 100


def still_muscle_colours(motion_mm: np.ndarray, held_footprint: np.ndarray, limit_mm: float) -> np.ndarray:
    """(V, 3) RGB per vertex: the motion map, washed towards HELD_COLOUR on `held_footprint`."""
    colours = colormaps[COLOUR_MAP](np.clip(np.asarray(motion_mm) / limit_mm, 0.0, 1.0))[:, :3]
    held = np.asarray(held_footprint, dtype=bool)
    colours[held] = (1.0 - HELD_WASH) * colours[held] + HELD_WASH * HELD_COLOUR
    return colours


def still_muscle_sheet(model: dict, footprints: np.ndarray, shapes: Sequence[tuple[str, np.ndarray, np.ndarray]],
                       muscle_names: Sequence[str], region: np.ndarray | None = None,
                       threshold_mm: float = 0.5) -> np.ndarray:
    """The picture as an (H, W, 3) uint8 image. `footprints` (V, m) bool (ShapeFitter.muscle_footprints);
    `shapes`: (name, delta (V, 3) in metres, held (m,) bool) per panel; `region` (V,) bool frames the view
    (default the whole skin); `threshold_mm` the motion below which a footprint is held (for the title)."""
    skin = np.asarray(model["skin_vertices"], dtype=float)
    triangles = np.asarray(model["skin_triangles"])
    footprints = np.asarray(footprints, dtype=bool)
    if footprints.shape != (len(skin), len(muscle_names)):
        raise ValueError(f"footprints must be (V, m) = ({len(skin)}, {len(muscle_names)}); found {footprints.shape}")
    if not shapes:
        raise ValueError("no shape to picture")
    region = np.ones(len(skin), dtype=bool) if region is None else np.asarray(region, dtype=bool)
    motions = [np.linalg.norm(np.asarray(delta, dtype=float), axis=1) * 1000.0 for _, delta, _ in shapes]
    limit_mm = MOTION_LIMIT_MM
    camera = front_camera(model, skin[region])

    figure = Figure(figsize=(_PANEL_INCHES * len(shapes) + 1.2, _PANEL_INCHES + 2.0), dpi=_DPI, facecolor=BACKGROUND)
    FigureCanvasAgg(figure)
    for index, ((name, _, held), motion) in enumerate(zip(shapes, motions)):
        held = np.asarray(held, dtype=bool)
        image = render_meshes(camera, [MeshLayer(skin, triangles, still_muscle_colours(
            motion, footprints[:, held].any(axis=1), limit_mm), colour_per_vertex=True)])
        axes = figure.add_axes([index / (len(shapes) + 0.35), 0.2, 0.98 / (len(shapes) + 0.35), 0.62])
        axes.imshow(image)
        axes.set_axis_off()
        axes.set_title(f"{name}\n{int(held.sum())} of {len(held)} muscles held", fontsize=11)
        axes.text(0.5, -0.02, _wrapped(_pair_names([muscle_names[i] for i in np.flatnonzero(held)]), 42),
                  transform=axes.transAxes, ha="center", va="top", fontsize=7)
    bar = figure.add_axes([1.0 - 0.25 / (len(shapes) + 0.35), 0.3, 0.012, 0.5])
    figure.colorbar(ScalarMappable(Normalize(0.0, limit_mm), colormaps[COLOUR_MAP]), cax=bar,
                    label=f"shape-key motion (mm; ≥ {limit_mm:g} in the top colour)")
    figure.legend(handles=[Patch(color=HELD_COLOUR, label="skin of the held muscles")], loc="lower right",
                  fontsize=9, frameon=False)
    figure.suptitle(f"Muscles held at rest: the shape key moves their skin less than {threshold_mm:g} mm", fontsize=13,
                    y=0.985)
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[:, :, :3].copy()


def picture_still_muscles(model: dict, footprints, shapes, muscle_names, path, region=None,
                          threshold_mm: float = 0.5) -> Path:
    """Write `still_muscle_sheet` as a PNG; returns the path."""
    return save_png(still_muscle_sheet(model, footprints, shapes, muscle_names, region, threshold_mm), path)


def _pair_names(names: Sequence[str]) -> str:
    """"frontalis (L, R), procerus (R)": left/right muscles named once with their sides."""
    sides: dict[str, list[str]] = {}
    for name in names:
        base = pair_base_name(name)
        side = name[len(base):].lstrip("_.") if base != name else ""
        sides.setdefault(base, []).append(side)
    return ", ".join(f"{base} ({', '.join(s for s in sorted(found) if s)})" if any(found) else base
                     for base, found in sides.items())


def _wrapped(text: str, width: int) -> str:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line]) if line else ""
