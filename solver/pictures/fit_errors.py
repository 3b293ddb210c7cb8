"""Heat maps of how well the inverse-physics fit matches each shape key (FIT.npz).

For every fitted shape key, FIT.npz keeps ``detail_residual``: the target skin minus the
fitted simulated skin on the rig's vertices, so the length of each row is that vertex's
fit error. The picture shows the worst and the best fitted shapes (ranked by the mean
error over the face region, as in ``fit_error_mm``) as front views of the rest skin,
coloured by that error on one shared millimetre scale. Vertices outside the face region,
where the error is not measured, are grey. Shapes set neutral by the fitter (they move
no skin) are left out.

The rest skin is drawn rather than the target shape because FIT.npz does not store the
targets; the colours are what matters, and on the rest face they land where an artist
expects them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import IdentityTransform

from ..inverse.fit_file import shape_contexts
from .raster import BACKGROUND, Camera, MeshLayer, render_meshes, save_png
from .views import HeadAxes

# Perceptually uniform and sequential: dark blue-violet (no error) through teal and
# green to yellow (the limit and beyond), so the worst places read as the brightest.
COLOUR_MAP = "viridis"
# Outside the face region: a mid grey that no colour of the map comes close to.
OUTSIDE_REGION_COLOUR = (0.74, 0.74, 0.72)
MIN_DEFAULT_LIMIT_MM = 1.0
DEFAULT_LIMIT_PERCENTILE = 95.0

PANEL_HEIGHT = 400          # pixels of each face view
_MARGIN = 0.04              # share of the panel left free round the skin
_PAD = 16
_GAP = 20                   # between panels in a row
_TEXT_COLOUR = (0.15, 0.15, 0.15)
_DPI = 100
_COLOUR_BAR_WIDTH = 22
_COLOUR_BAR_BLOCK = 175     # colour bar, its ticks and label, and the grey swatch
_SWATCH_HEIGHT = 70         # under the colour bar


@dataclass(frozen=True, eq=False)
class FitErrorPanel:
    """One shape key in the picture.

    ``row`` is ``"worst"`` or ``"best"``; ``error_mm`` the mean, 95th percentile and max
    from FIT.npz; ``vertex_error_mm`` the (V,) per-vertex error; ``box`` the panel's
    pixels in the composed image as (top, left, bottom, right), bottom and right exclusive.
    """

    name: str
    row: str
    error_mm: tuple[float, float, float]
    vertex_error_mm: np.ndarray
    box: tuple[int, int, int, int] = (0, 0, 0, 0)


@dataclass(frozen=True, eq=False)
class FitErrorSheet:
    """The composed picture and what is where in it."""

    image: np.ndarray                # (H, W, 3) uint8
    panels: list[FitErrorPanel]      # worst row first (worst shape first), then best row (best first)
    limit_mm: float                  # the error drawn in the top colour of the map
    fitted_count: int
    neutral_count: int


def picture_fit_errors(model: dict, fit: dict, path, count: int = 3, limit_mm: Optional[float] = None) -> Path:
    """Write one PNG with the ``count`` worst and ``count`` best fitted shapes of ``fit``
    (the FIT.npz arrays) drawn on ``model``'s rest skin, coloured by per-vertex fit error.

    ``limit_mm`` is the error at the top of the colour scale (larger errors get its
    colour); by default the 95th percentile of the drawn panels' face-region errors, and
    at least 1 mm. With fewer than ``2 * count`` fitted shapes, they are shared between
    the two rows. Raises ValueError when the fit has no fitted shape or does not match
    the model's skin. Returns the path written.
    """
    return save_png(fit_error_sheet(model, fit, count, limit_mm).image, path)


def fit_error_sheet(model: dict, fit: dict, count: int = 3, limit_mm: Optional[float] = None) -> FitErrorSheet:
    """The picture of ``picture_fit_errors`` as an image, with the panels' positions."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if limit_mm is not None and not limit_mm > 0:
        raise ValueError(f"limit_mm must be positive, got {limit_mm}")
    skin_vertices = np.asarray(model["skin_vertices"], dtype=float)
    skin_triangles = np.asarray(model["skin_triangles"])
    names, status, errors, residual, region = _fit_arrays(fit, len(skin_vertices))

    neutral = np.array([text.startswith("neutral") for text in status], dtype=bool)
    fitted = np.flatnonzero(~neutral)
    if len(fitted) == 0:
        reasons = sorted(set(status))
        raise ValueError(f"no fitted shape to picture: all {len(names)} shapes in the fit are neutral "
                         f"({'; '.join(reasons[:3])}{'; …' if len(reasons) > 3 else ''})"
                         if len(names) else "no fitted shape to picture: the fit holds no shape keys")
    worst, best = _choose(fitted, errors[:, 0], count)

    # A shape fitted on top of another (shapes.CONTEXT_SHAPES) has the combined pose's error in
    # fit_error_mm, and its residual is the combined pose's less the other's: with the other in
    # the fit, the two residuals add up to the combined pose's, which the panel shows.
    context = shape_contexts(fit)
    combined = {index: residual[index] + residual[names.index(context[index])]
                for index in worst + best if context[index] in names}
    vertex_errors = {index: np.linalg.norm(combined.get(index, residual[index]), axis=1) * 1000.0
                     for index in worst + best}
    if limit_mm is None:
        in_region = np.concatenate([vertex_errors[index][region] for index in worst + best])
        limit_mm = max(MIN_DEFAULT_LIMIT_MM, float(np.percentile(in_region, DEFAULT_LIMIT_PERCENTILE)))
    captions = [f"{name} (on {context[i]})" if context[i] else name for i, name in enumerate(names)]
    panels = [FitErrorPanel(captions[index], row, tuple(float(e) for e in errors[index]), vertex_errors[index])
              for row, chosen in (("worst", worst), ("best", best)) for index in chosen]

    camera = front_camera(model, skin_vertices[region])
    colour_map = colormaps[COLOUR_MAP]
    images = []
    for panel in panels:
        colours = colour_map(np.clip(panel.vertex_error_mm / limit_mm, 0.0, 1.0))[:, :3]
        colours[~region] = OUTSIDE_REGION_COLOUR
        images.append(render_meshes(camera, [MeshLayer(skin_vertices, skin_triangles, colours,
                                                       colour_per_vertex=True)]))

    exceeded = any(panel.vertex_error_mm[region].max() > limit_mm for panel in panels)
    title = (f"Shape-key fit error: the {len(worst)} worst and {len(best)} best of {_plural(len(fitted), 'fitted shape')}"
             if best else f"Shape-key fit error: {len(worst)} of {_plural(len(fitted), 'fitted shape')}")
    subtitle = "Front view of the rest skin, coloured per vertex by the distance between target and fitted skin.\n" \
               "Shapes ranked by their mean error over the face region"
    if neutral.any():
        subtitle += f"; {_plural(int(neutral.sum()), 'neutral shape')} (moving no skin) left out"
    subtitle += "."
    if any(captions[index] != names[index] for index in worst + best):
        subtitle += "\n\"A (on B)\": A fitted on top of B; numbers and colours are those of the pose B + A."
    image, boxes = _compose(images, panels, title, subtitle, limit_mm, colour_map, exceeded)
    panels = [dataclasses.replace(panel, box=box) for panel, box in zip(panels, boxes)]
    return FitErrorSheet(image, panels, float(limit_mm), len(fitted), int(neutral.sum()))


# --------------------------------------------------------------------------- selection

def _fit_arrays(fit: dict, vertex_count: int):
    for key in ("shape_key_names", "fit_error_mm", "status", "detail_residual"):
        if key not in fit:
            raise ValueError(f"the fit has no '{key}'; fit the shapes again with this solver")
    names = [str(name) for name in np.asarray(fit["shape_key_names"]).reshape(-1)]
    status = [str(text) for text in np.asarray(fit["status"]).reshape(-1)]
    errors = np.asarray(fit["fit_error_mm"], dtype=float).reshape(-1, 3) if len(names) else np.zeros((0, 3))
    residual = np.asarray(fit["detail_residual"], dtype=float)
    if len(status) != len(names) or len(errors) != len(names):
        raise ValueError(f"the fit has {len(names)} shape names but {len(status)} statuses and "
                         f"{len(errors)} fit errors")
    if residual.shape != (len(names), vertex_count, 3):
        raise ValueError(f"the fit's detail_residual has shape {residual.shape}, but the model has "
                         f"{vertex_count} skin vertices and the fit {len(names)} shapes: "
                         f"(K, V, 3) = ({len(names)}, {vertex_count}, 3) expected; is it the fit of this model?")
    if "face_region" in fit:
        region = np.asarray(fit["face_region"], dtype=bool).reshape(-1)
        if region.shape != (vertex_count,):
            raise ValueError(f"the fit's face_region has {len(region)} entries for {vertex_count} skin vertices")
        if not region.any():
            raise ValueError("the fit's face_region selects no skin vertex, so no fit error was measured")
    else:
        region = np.ones(vertex_count, dtype=bool)
    return names, status, errors, residual, region


def _choose(fitted: np.ndarray, mean_errors: np.ndarray, count: int) -> tuple[list[int], list[int]]:
    """Indices of the worst (worst first) and best (best first) fitted shapes, no shape twice."""
    ranked = fitted[np.argsort(-mean_errors[fitted], kind="stable")]          # worst first
    worst_count = min(count, (len(ranked) + 1) // 2) if len(ranked) < 2 * count else count
    best_count = min(count, len(ranked) - worst_count)
    worst = [int(index) for index in ranked[:worst_count]]
    best = [int(index) for index in ranked[::-1][:best_count]]
    return worst, best


# --------------------------------------------------------------------------- drawing

def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def front_camera(model: dict, framing: np.ndarray) -> Camera:
    """A front view framing ``framing`` (the face region), in a panel of PANEL_HEIGHT pixels
    with the region's width-to-height ratio. The rest of the skin shows where it fits."""
    axes = HeadAxes.of(model)
    extent_left, extent_up, _ = np.ptp(axes.coordinates(framing), axis=0)
    aspect = float(np.clip(extent_left / max(extent_up, 1e-12), 0.5, 1.5))
    width = int(round(PANEL_HEIGHT * aspect))
    centre = 0.5 * (framing.min(axis=0) + framing.max(axis=0))
    return Camera.front(centre, 1.0, axes.up, axes.forward, width, PANEL_HEIGHT).framed(framing, _MARGIN)


def _compose(images: Sequence[np.ndarray], panels: Sequence[FitErrorPanel], title: str, subtitle: str,
             limit_mm: float, colour_map, exceeded: bool):
    """Lay the panels out in a worst row and a best row under a title, with captions and
    a colour bar on the right. Returns the image and each panel's (top, left, bottom, right)."""
    figure = Figure(figsize=(1, 1), dpi=_DPI, facecolor=BACKGROUND)
    FigureCanvasAgg(figure)
    renderer = figure.canvas.get_renderer()

    def text(content, **style):
        return figure.text(0, 0, content, color=_TEXT_COLOUR, transform=IdentityTransform(), **style)

    def size(artist) -> tuple[int, int]:
        box = artist.get_window_extent(renderer)
        return int(np.ceil(box.width)), int(np.ceil(box.height))

    panel_height, panel_width = images[0].shape[:2]
    rows = [[i for i, panel in enumerate(panels) if panel.row == row] for row in ("worst", "best")]
    rows = [row for row in rows if row]
    columns = max(len(row) for row in rows)
    headings = {"worst": "Worst fits (highest mean error)", "best": "Best fits (lowest mean error)"}
    if len(rows) == 1:
        headings["worst"] = "Fitted shapes (highest mean error first)"

    title_artist = text(title, fontsize=16, fontweight="bold", ha="left", va="top")
    subtitle_artist = text(subtitle, fontsize=11, ha="left", va="top")
    heading_artists = [text(headings[panels[row[0]].row], fontsize=13, fontweight="bold", ha="left", va="bottom")
                       for row in rows]
    name_artists, stats_artists = [], []
    for panel in panels:
        mean, p95, worst = panel.error_mm
        name_artists.append(text(panel.name, fontsize=13, fontweight="bold", ha="center", va="bottom"))
        stats_artists.append(text(f"mean {mean:.2f} / 95th {p95:.2f} / max {worst:.2f} mm", fontsize=11,
                                  ha="center", va="bottom"))
    for artist in name_artists + stats_artists:       # shrink a caption wider than its panel
        width = size(artist)[0]
        if width > panel_width:
            artist.set_fontsize(artist.get_fontsize() * panel_width / width)

    heading_height = max(size(artist)[1] for artist in heading_artists)
    name_height = max(size(artist)[1] for artist in name_artists)
    stats_height = max(size(artist)[1] for artist in stats_artists)
    caption_height = name_height + stats_height + 4
    row_height = heading_height + 6 + caption_height + 6 + panel_height
    title_height = size(title_artist)[1] + 6 + size(subtitle_artist)[1]

    panels_width = columns * panel_width + (columns - 1) * _GAP
    width = max(_PAD + panels_width + _PAD + _COLOUR_BAR_BLOCK,
                _PAD + max(size(title_artist)[0], size(subtitle_artist)[0]) + _PAD)
    height = _PAD + title_height + _PAD + len(rows) * row_height + (len(rows) - 1) * _PAD + _PAD
    figure.set_size_inches(width / _DPI, height / _DPI)

    # Text and images are placed in pixels from the figure's bottom left, as matplotlib does.
    title_artist.set_position((_PAD, height - _PAD))
    subtitle_artist.set_position((_PAD, height - _PAD - size(title_artist)[1] - 6))
    boxes: list[tuple[int, int, int, int]] = [(0, 0, 0, 0)] * len(panels)
    top = _PAD + title_height + _PAD                 # from the image top
    for row, heading in zip(rows, heading_artists):
        heading.set_position((_PAD, height - top - heading_height))
        caption_top = top + heading_height + 6
        panel_top = caption_top + caption_height + 6
        for column, index in enumerate(row):
            left = _PAD + column * (panel_width + _GAP)
            middle = left + 0.5 * panel_width
            name_artists[index].set_position((middle, height - caption_top - name_height))
            stats_artists[index].set_position((middle, height - caption_top - name_height - 4 - stats_height))
            figure.figimage(images[index], xo=left, yo=height - panel_top - panel_height, origin="upper")
            boxes[index] = (panel_top, left, panel_top + panel_height, left + panel_width)
        top += row_height + _PAD

    # The colour bar runs down the right of the panels from the first panel's top; the
    # grey swatch for vertices outside the face region sits under it.
    bar_top = _PAD + title_height + _PAD + heading_height + 6 + caption_height + 6   # from the image top
    bar_bottom = height - _PAD - _SWATCH_HEIGHT
    bar_left = _PAD + panels_width + _PAD + 12
    bar_axes = figure.add_axes((bar_left / width, (height - bar_bottom) / height,
                                _COLOUR_BAR_WIDTH / width, (bar_bottom - bar_top) / height))
    bar = figure.colorbar(ScalarMappable(Normalize(0.0, limit_mm), colour_map), cax=bar_axes,
                          extend="max" if exceeded else "neither")
    bar.ax.tick_params(labelsize=11, colors=_TEXT_COLOUR)
    bar.set_label("fit error (mm)" + (", clipped above" if exceeded else ""), fontsize=12, color=_TEXT_COLOUR)
    bar.outline.set_edgecolor((0.4, 0.4, 0.4))
    figure.legend([Patch(facecolor=OUTSIDE_REGION_COLOUR, edgecolor=(0.3, 0.3, 0.3), linewidth=0.6)],
                  ["outside the\nface region\n(not measured)"], loc="upper left", frameon=False, fontsize=10,
                  labelcolor=_TEXT_COLOUR, handlelength=1.4, handleheight=1.2, borderaxespad=0, borderpad=0,
                  bbox_to_anchor=(bar_left - 2, height - bar_bottom - 16), bbox_transform=IdentityTransform())

    figure.canvas.draw()
    image = np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()
    return image, boxes
