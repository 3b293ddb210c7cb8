"""A sphere pressed into the shell's skin, one panel per place (docs/shell.md, bench/shell_poke.py).

Each panel shows the skin the user sees (the rig's mesh after warp, detail and the fine contact
pass) across the contact (looking along the skin, so the dent is in profile) and from in front
of it at an angle, coloured by how far it moved from rest (viridis up to the push depth), with
the sphere as a translucent veil; any skin vertex left inside the sphere deeper than its coarse
vertices allow would be drawn red.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib import colormaps

from .raster import Camera, MeshLayer, add_title, render_meshes, side_by_side

SKIN_TOO_DEEP = (0.9, 0.1, 0.1)
SPHERE_COLOUR = (0.35, 0.55, 0.9)
_PANEL = 380


def poke_panel(skin, rest, triangles, too_deep, sphere_vertices, sphere_triangles, centre, radius: float,
               push: float, normal, up) -> np.ndarray:
    """(H, W, 3) uint8: the profile and angled views of one push along the skin's outward
    `normal`. Positions in metres; `too_deep` (V,) bool marks skin vertices deeper in the
    sphere than allowed."""
    moved = np.linalg.norm(np.asarray(skin) - np.asarray(rest), axis=1)
    colours = colormaps["viridis"](np.clip(moved / push, 0.0, 1.0))[:, :3]
    colours[np.asarray(too_deep, bool)] = SKIN_TOO_DEEP
    layers = [MeshLayer(np.asarray(skin), triangles, colours, colour_per_vertex=True),
              MeshLayer(np.asarray(sphere_vertices), sphere_triangles, SPHERE_COLOUR, opacity=0.3)]
    normal = np.asarray(normal, dtype=float) / np.linalg.norm(normal)
    across = np.cross(normal, up)
    across /= np.linalg.norm(across)
    views = []
    for direction in (across, -normal + 0.8 * across):
        direction = direction / np.linalg.norm(direction)
        view_up = np.asarray(up, dtype=float) - (np.asarray(up) @ direction) * direction
        camera = Camera(direction, view_up / np.linalg.norm(view_up), np.asarray(centre) - 0.8 * radius * normal,
                        3.0 * radius, _PANEL, _PANEL)
        views.append(render_meshes(camera, layers))
    return side_by_side(views, ["along the skin", "in front, at an angle"])


def poke_sheet(panels: Sequence[tuple[str, np.ndarray]], title: str) -> np.ndarray:
    """The panels (caption, image) side by side under a title."""
    if not panels:
        raise ValueError("no push to picture")
    return add_title(side_by_side([image for _, image in panels], [caption for caption, _ in panels]), title)
