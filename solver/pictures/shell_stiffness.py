"""Picture of a shell's fitted stiffness maps (paper 001 Fig. 5): the rig's face drawn from the
front twice, coloured by the strain and by the bending stiffness carried to its vertices
(ShellModel.fine_*_stiffness), on one logarithmic colour scale with a legend of decades."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps

from .raster import Camera, MeshLayer, add_legend, add_title, render_meshes, save_png, side_by_side

_COLOUR_MAP = "viridis"


def stiffness_picture(shell, fine_triangles, up, forward, path, size: int = 640, note: str = "") -> Path:
    """Write the two maps of `shell` (a ShellModel) on its fine mesh to `path` (PNG); `up` and
    `forward` are the head's directions (e.g. solver.model_builder.landmarks.infer_head_frame);
    `note` (e.g. the commit) ends the title."""
    vertices = shell.fine_rest_m
    maps = {"strain": shell.fine_strain_stiffness, "bending": shell.fine_bending_stiffness}
    logs = {name: np.log10(np.maximum(values, 1e-12)) for name, values in maps.items()}
    low = np.floor(min(values.min() for values in logs.values()))
    high = np.ceil(max(values.max() for values in logs.values()) - 1e-6)
    colour_map = colormaps[_COLOUR_MAP]
    # The face only: vertices in front of the head's centre, where the shape keys act.
    depth = vertices @ np.asarray(forward, dtype=float)
    front = vertices[depth > np.percentile(depth, 45)]
    camera = Camera.front(front.mean(axis=0), 1.0, up, forward, width=size, height=size).framed(front)
    images = []
    for name, values in logs.items():
        colours = colour_map((values - low) / max(high - low, 1e-9))[:, :3]
        images.append(render_meshes(camera, [MeshLayer(vertices, fine_triangles, colours, 1.0, True)]))
    sheet = side_by_side(images, [f"{name} stiffness" for name in maps])
    decades = np.arange(low, high + 0.5)
    entries = [(f"{10.0 ** d:g} N/m", tuple(colour_map((d - low) / max(high - low, 1e-9))[:3])) for d in decades]
    sheet = add_legend(sheet, entries, "at unit face height")
    return save_png(add_title(sheet, f"Fitted shell stiffness ({shell.coarse_triangles.shape[0]} coarse triangles, "
                                     f"{len(shell.shape_names)} shape keys{'; ' + note if note else ''})"), path)
