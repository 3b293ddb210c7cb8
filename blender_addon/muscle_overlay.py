"""The muscle overlay: the model's muscles as smooth coloured surfaces in an object parented
to the skin.

Read from MODEL.npz with numpy alone. Each muscle that fills any tet is a closed surface of
its own (muscle_isosurface.py): its fraction of each tet spread to the tet nodes, the
isosurface of that field by marching tetrahedra on the model's own tets at the level that
encloses the muscle's volume (a muscle a tet or two thick is drawn somewhat thicker, so it
stays one piece), closed by the model's boundary where it reaches it, then split once and
lightly Taubin-smoothed. One material per muscle, its viewport display colour the muscle's
(left and right of a pair share the hue), so Solid view shows the colours with its default
Material colouring; the muscle chosen in the Muscles list is drawn bright and the others
dimmed and see-through (`highlight_muscle`).
"""
from __future__ import annotations

import colorsys

import bpy
import numpy as np

from .child_objects import attach_child, find_child, remove_child
from .muscle_isosurface import muscle_isosurfaces

OVERLAY_TAG = "face_physics_overlay_of"
# The muscles not chosen in the Muscles list: this much of their colour, mixed with grey, and
# this alpha (Solid view draws a material with alpha below 1 see-through).
DIMMED_SHARE = 0.35
DIMMED_ALPHA = 0.25
_GREY = np.array([0.5, 0.5, 0.5])


def find_overlay(obj):
    return find_child(obj, OVERLAY_TAG)


def muscle_surface(model_path, metres_per_unit: float, smooth: bool = True):
    """(vertices local (N,3), triangles (T,3), muscle index per triangle, muscle names): every
    muscle that fills any tet as a closed outward surface with vertices of its own — the
    isosurface of its fraction field enclosing its volume, Taubin-smoothed unless `smooth` is
    False (muscle_isosurface.py)."""
    with np.load(model_path, allow_pickle=False) as model:
        positions = model["rest_positions"] / metres_per_unit
        tets = model["tets"]
        fraction = model["muscle_fraction"].astype(np.float64)
        names = [str(name) for name in model["muscle_names"]]
    vertices, triangles, labels = muscle_isosurfaces(positions, tets, fraction, smooth=smooth)
    return vertices, triangles, labels, names


def _colour(name: str, names) -> tuple:
    bases = sorted({n.rsplit("_", 1)[0] for n in names})
    hue = bases.index(name.rsplit("_", 1)[0]) / max(1, len(bases))
    return (*colorsys.hsv_to_rgb(hue, 0.75, 0.9), 1.0)


def muscle_display_colour(name: str, names, chosen) -> tuple:
    """RGBA of muscle `name` in the overlay: its own colour when `chosen` is None or `name`,
    else dimmed towards grey and see-through."""
    colour = _colour(name, names)
    if chosen is None or chosen == name:
        return colour
    rgb = DIMMED_SHARE * np.array(colour[:3]) + (1.0 - DIMMED_SHARE) * _GREY
    return (*rgb.tolist(), DIMMED_ALPHA)


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
    present = np.unique(labels)
    for muscle in present:
        material = bpy.data.materials.new(f"{obj.name} FP {names[muscle]}")
        material["face_physics_muscle"] = names[muscle]
        mesh.materials.append(material)
    slot = np.zeros(len(names), dtype=np.int32)
    slot[present] = np.arange(len(present))
    mesh.polygons.foreach_set("material_index", slot[labels])
    mesh.polygons.foreach_set("use_smooth", np.ones(len(triangles), dtype=bool))
    mesh.update()
    overlay = bpy.data.objects.new(f"{obj.name} muscles", mesh)
    attach_child(obj, overlay, OVERLAY_TAG)
    overlay.show_in_front = True
    highlight_muscle(obj)
    return overlay


def chosen_muscle(obj):
    """The name of the muscle chosen in the Muscles list, or None."""
    muscles = obj.face_physics.muscles
    index = obj.face_physics.muscle_index
    return muscles[index].name if 0 <= index < len(muscles) else None


def highlight_muscle(obj) -> None:
    """Colour the overlay's materials for the muscle chosen in the Muscles list (a few dozen
    colour assignments: cheap enough for the list's update callback)."""
    overlay = find_overlay(obj)
    if overlay is None:
        return
    materials = [material for material in overlay.data.materials
                 if material is not None and "face_physics_muscle" in material]
    names = {material["face_physics_muscle"] for material in materials}
    # The hues come from every muscle's name, as when the overlay was made.
    palette_names = sorted(names | {muscle.name for muscle in obj.face_physics.muscles})
    chosen = chosen_muscle(obj)
    chosen = chosen if chosen in names else None
    for material in materials:
        material.diffuse_color = muscle_display_colour(material["face_physics_muscle"], palette_names, chosen)


def on_muscle_index_changed(settings, context) -> None:
    """The Muscles list's update callback: `settings` is the skin's face_physics group."""
    highlight_muscle(settings.id_data)


def remove_overlay(obj) -> None:
    overlay = find_overlay(obj)
    materials = [] if overlay is None else [material for material in overlay.data.materials if material is not None]
    remove_child(obj, OVERLAY_TAG)
    for material in materials:
        if material.users == 0:
            bpy.data.materials.remove(material)
