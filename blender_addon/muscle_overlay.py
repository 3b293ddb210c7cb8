"""The muscle overlay: the model's muscle tets as a coloured mesh object parented to the skin.

Read from MODEL.npz with numpy alone. A tet belongs to the muscle that fills most of it
when muscles fill at least half of it; the overlay is the boundary of each muscle's tets,
one colour per muscle (left and right of a pair share the hue).
"""
from __future__ import annotations

import colorsys

import bpy
import numpy as np

from .child_objects import attach_child, find_child, remove_child

OVERLAY_TAG = "face_physics_overlay_of"
_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]])


def find_overlay(obj):
    return find_child(obj, OVERLAY_TAG)


def muscle_surface(model_path, metres_per_unit: float):
    """(vertices local (N,3), triangles (T,3), muscle index per triangle, muscle names)."""
    with np.load(model_path, allow_pickle=False) as model:
        positions = model["rest_positions"] / metres_per_unit
        tets = model["tets"]
        fraction = model["muscle_fraction"].astype(np.float64)
        names = [str(name) for name in model["muscle_names"]]
    owner = np.argmax(fraction, axis=1)
    inside = fraction.sum(axis=1) >= 0.5
    triangles, labels = [], []
    for muscle in np.unique(owner[inside]):
        chosen = tets[inside & (owner == muscle)]
        faces = chosen[:, _TET_FACES].reshape(-1, 3)
        keys = np.sort(faces, axis=1)
        _, first, counts = np.unique(keys, axis=0, return_index=True, return_counts=True)
        boundary = faces[first[counts == 1]]
        triangles.append(boundary)
        labels.append(np.full(len(boundary), muscle))
    if not triangles:
        return positions[:0], np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64), names
    triangles = np.concatenate(triangles)
    used, remapped = np.unique(triangles, return_inverse=True)
    return positions[used], remapped.reshape(-1, 3), np.concatenate(labels), names


def _colour(name: str, names) -> tuple:
    bases = sorted({n.rsplit("_", 1)[0] for n in names})
    hue = bases.index(name.rsplit("_", 1)[0]) / max(1, len(bases))
    return (*colorsys.hsv_to_rgb(hue, 0.75, 0.9), 1.0)


def create_overlay(obj):
    remove_overlay(obj)
    settings = obj.face_physics
    vertices, triangles, labels, names = muscle_surface(bpy.path.abspath(settings.model_path),
                                                        settings.metres_per_unit)
    mesh = bpy.data.meshes.new(f"{obj.name} muscles")
    mesh.from_pydata(vertices.tolist(), [], triangles.tolist())
    colours = mesh.color_attributes.new("muscle", 'FLOAT_COLOR', 'CORNER')
    palette = np.array([_colour(name, names) for name in names], dtype=np.float32)
    colours.data.foreach_set("color", np.repeat(palette[labels], 3, axis=0).ravel())
    overlay = bpy.data.objects.new(f"{obj.name} muscles", mesh)
    attach_child(obj, overlay, OVERLAY_TAG)
    overlay.show_in_front = True
    return overlay


def remove_overlay(obj) -> None:
    remove_child(obj, OVERLAY_TAG)
