"""Importing a face-rig `.npz` as a mesh object with shape keys and vertex groups, and its
optional teeth, skull and jaw as objects set in the Model panel (numpy only on the file side:
read with allow_pickle=False). Used for the demo head and for round trips."""
from __future__ import annotations

from pathlib import Path

import bpy
import numpy as np


def import_rig(context, path) -> "bpy.types.Object":
    with np.load(path, allow_pickle=False) as rig:
        arrays = {key: rig[key] for key in rig.files}
    vertices = arrays["vertices"].astype(np.float64)
    faces = arrays["faces"].astype(np.int64)
    polygons = [[int(i) for i in face if i >= 0] for face in faces]
    mesh = bpy.data.meshes.new(Path(path).stem)
    mesh.from_pydata(vertices.tolist(), [], polygons)
    mesh.validate(clean_customdata=False)
    obj = bpy.data.objects.new(Path(path).stem, mesh)
    context.collection.objects.link(obj)
    names = [str(name) for name in arrays.get("shape_key_names", [])]
    if names:
        obj.shape_key_add(name="Basis", from_mix=False)
        for name, delta in zip(names, arrays["shape_key_deltas"]):
            block = obj.shape_key_add(name=name, from_mix=False)
            block.data.foreach_set("co", (vertices + delta).astype(np.float32).ravel())
            block.value = 0.0   # imported at rest: the neutral face
    for name, weights in zip(arrays.get("vertex_group_names", []), arrays.get("vertex_group_weights", [])):
        group = obj.vertex_groups.new(name=str(name))
        for index in np.flatnonzero(weights > 0):
            group.add([int(index)], float(weights[index]), 'REPLACE')
    context.view_layer.objects.active = obj
    obj.select_set(True)
    return obj


# Rig array prefix → (object name suffix, the Model panel field that takes it).
RIG_BONES = (("upper_teeth", "upper teeth", "teeth_object"), ("lower_teeth", "lower teeth", "lower_teeth_object"),
             ("skull", "skull", "skull_object"), ("jaw", "jaw", "jaw_object"))


def import_rig_bones(context, path, skin) -> list:
    """The rig's teeth, skull and jaw surfaces as objects parented to the skin (same local frame,
    so a later Build exports them where they were) and set in the skin's Model panel fields."""
    with np.load(path, allow_pickle=False) as rig:
        arrays = {key: rig[key] for key in rig.files}
    made = []
    for prefix, label, field in RIG_BONES:
        if f"{prefix}_vertices" not in arrays:
            continue
        mesh = bpy.data.meshes.new(f"{skin.name} {label}")
        mesh.from_pydata(arrays[f"{prefix}_vertices"].astype(np.float64).tolist(), [],
                         [[int(i) for i in face if i >= 0] for face in arrays[f"{prefix}_faces"]])
        mesh.validate(clean_customdata=False)
        bone = bpy.data.objects.new(mesh.name, mesh)
        for collection in skin.users_collection:
            collection.objects.link(bone)
        bone.parent = skin
        bone.matrix_parent_inverse.identity()
        setattr(skin.face_physics, field, bone)
        made.append(bone)
    return made
