"""The interactive shell's coarse meshes side by side, coloured by maximum depth (docs/shell.md).

Each panel is one coarse shell (say 2k, 4k and 8k triangles) seen from the front and from three
quarters. Every triangle is drawn slightly shrunk towards its centroid over a dark copy of the
mesh set just behind it, so the gaps show the edges: the picture is about triangle size and
shape as much as about the depth map. Colours: the maximum depth δ (face units) on a viridis
scale up to ``DEPTH_LIMIT``, thin features (δ_thin) in magenta, prescribed eyelids grey-blue.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib import colormaps

from .raster import Camera, MeshLayer, add_legend, add_title, render_meshes, side_by_side

DEPTH_LIMIT = 0.02               # face units: the keys' depths lie below this; δ_thin = 0.05 is shown apart
THIN_COLOUR = (0.85, 0.15, 0.65)
EYELID_COLOUR = (0.55, 0.62, 0.78)
EDGE_COLOUR = (0.12, 0.12, 0.14)
_SHRINK = 0.88                   # each triangle drawn at this share of its size round its centroid
_PANEL_HEIGHT = 460


def shell_mesh_colours(max_depth: np.ndarray, thin: np.ndarray, eyelids: np.ndarray) -> np.ndarray:
    """(n,3) RGB per coarse vertex."""
    colours = colormaps["viridis"](np.clip(np.asarray(max_depth) / DEPTH_LIMIT, 0.0, 1.0))[:, :3]
    colours[np.asarray(thin, bool)] = THIN_COLOUR
    colours[np.asarray(eyelids, bool)] = EYELID_COLOUR
    return colours


def _layers(vertices, triangles, colours, view_direction, depth_offset):
    corners = vertices[triangles]                                            # (m,3,3)
    centroids = corners.mean(axis=1, keepdims=True)
    shrunk = (centroids + _SHRINK * (corners - centroids)).reshape(-1, 3)
    backing = vertices + depth_offset * np.asarray(view_direction)
    face_colours = colours[triangles].reshape(-1, 3)
    return [MeshLayer(backing, triangles, EDGE_COLOUR),
            MeshLayer(shrunk, np.arange(len(shrunk)).reshape(-1, 3), face_colours, colour_per_vertex=True)]


def _view(vertices, triangles, colours, camera: Camera) -> np.ndarray:
    offset = 0.004 * camera.extent
    return render_meshes(camera, _layers(vertices, triangles, colours, camera.view_direction, offset))


def coarse_mesh_sheet(meshes: Sequence[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                      up, forward, framing: np.ndarray, title: str) -> np.ndarray:
    """The picture as an (H, W, 3) uint8 image. `meshes`: (caption, vertices, triangles, max_depth,
    thin, eyelids) per panel; `up`, `forward` the head's axes; `framing` the points each view fits."""
    if not meshes:
        raise ValueError("no mesh to picture")
    framing = np.asarray(framing, dtype=float)
    centre = 0.5 * (framing.min(axis=0) + framing.max(axis=0))
    panels, captions = [], []
    for caption, vertices, triangles, max_depth, thin, eyelids in meshes:
        vertices = np.asarray(vertices, dtype=float)
        colours = shell_mesh_colours(max_depth, thin, eyelids)
        views = []
        for make in (Camera.front, Camera.three_quarter):
            camera = make(centre, 1.0, up, forward, int(_PANEL_HEIGHT * 0.8), _PANEL_HEIGHT).framed(framing, 0.04)
            views.append(_view(vertices, np.asarray(triangles), colours, camera))
        panels.append(np.vstack(views))
        captions.append(caption)
    image = side_by_side(panels, captions)
    legend = [(f"δ = {value:.3f}" + (" or more" if value == DEPTH_LIMIT else ""),
               tuple(colormaps["viridis"](value / DEPTH_LIMIT)[:3]))
              for value in np.linspace(0.0, DEPTH_LIMIT, 5)]
    legend += [("thin feature: δ_thin", THIN_COLOUR), ("eyelid (prescribed)", EYELID_COLOUR)]
    return add_title(add_legend(image, legend, title="max depth (face units)"), title)
