"""Helper objects the add-on hangs under the skin (the muscle overlay, the fat preview): found
by a tag naming their skin, linked to the skin's collections, parented to it without moving,
not selectable, and removed together with their mesh. Never the user's own objects."""
from __future__ import annotations

import bpy


def find_child(obj, tag: str):
    """The child of `obj` whose custom property `tag` names `obj`, or None."""
    for child in obj.children:
        if child.get(tag) == obj.name:
            return child
    return None


def attach_child(obj, child, tag: str):
    """Tag `child` as `obj`'s, link it where `obj` is and parent it to `obj` in place."""
    child[tag] = obj.name
    for collection in obj.users_collection:
        collection.objects.link(child)
    child.parent = obj
    child.matrix_parent_inverse.identity()
    child.hide_select = True
    return child


def remove_child(obj, tag: str) -> None:
    """Delete `obj`'s tagged child and its mesh (when nothing else uses it)."""
    child = find_child(obj, tag)
    if child is not None:
        mesh = child.data
        bpy.data.objects.remove(child)
        if mesh.users == 0:
            bpy.data.meshes.remove(mesh)
