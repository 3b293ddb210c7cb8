"""The fat preview: the neutral face with the Fat panel's settings, simulated for one
quasi-static frame, shown on an object of its own beside the skin.

The preview object `<skin> FP fat preview` is a child of the skin carrying a copy of the skin's
faces with the simulated vertices; each preview replaces the previous one, and the skin's own
mesh, shape keys and vertex groups are never touched. It sits one skin-width to the skin's +X
side, so the neutral and the fattened face can be compared side by side.
"""
from __future__ import annotations

import bpy
import numpy as np

from .child_objects import attach_child, find_child, remove_child

PREVIEW_TAG = "face_physics_fat_preview_of"
PREVIEW_SUFFIX = " FP fat preview"
# The gap between the skin and its preview, as a fraction of the skin's width.
SIDE_GAP = 0.1


def preview_name(obj) -> str:
    return f"{obj.name}{PREVIEW_SUFFIX}"


def find_preview(obj):
    return find_child(obj, PREVIEW_TAG)


def _polygons(mesh) -> list:
    """The mesh's faces as vertex-index tuples, n-gons included."""
    loops = np.empty(len(mesh.loops), dtype=np.int32)
    mesh.loops.foreach_get("vertex_index", loops)
    starts = np.empty(len(mesh.polygons), dtype=np.int32)
    mesh.polygons.foreach_get("loop_start", starts)
    sizes = np.empty(len(mesh.polygons), dtype=np.int32)
    mesh.polygons.foreach_get("loop_total", sizes)
    return [tuple(loops[start:start + size]) for start, size in zip(starts.tolist(), sizes.tolist())]


def show_preview(obj, local_positions: np.ndarray):
    """Replace the skin's preview object by one whose vertices are `local_positions` (V, 3),
    in the skin's local units."""
    remove_preview(obj)
    source = obj.data
    if local_positions.shape != (len(source.vertices), 3):
        raise ValueError(f"the preview has {local_positions.shape[0]} vertices but '{obj.name}' has "
                         f"{len(source.vertices)}; build the model again")
    mesh = bpy.data.meshes.new(preview_name(obj))
    mesh.from_pydata(local_positions.tolist(), [], _polygons(source))
    smooth = np.empty(len(source.polygons), dtype=bool)
    source.polygons.foreach_get("use_smooth", smooth)
    mesh.polygons.foreach_set("use_smooth", smooth)
    mesh.update()
    preview = attach_child(obj, bpy.data.objects.new(preview_name(obj), mesh), PREVIEW_TAG)
    width = float(np.ptp(local_positions[:, 0])) if len(local_positions) else 0.0
    preview.location = ((1.0 + SIDE_GAP) * width, 0.0, 0.0)
    return preview


def remove_preview(obj) -> None:
    remove_child(obj, PREVIEW_TAG)
