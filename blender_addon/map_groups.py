"""The painted maps' vertex groups, followed through renames.

A map (fat, paralysis, stiffness, density) names its vertex group, but Blender gives a group no
lasting id: renaming it changes the only handle the add-on has, and removing one renumbers the
groups after it. So each object keeps a record of its groups' names by index, as they were the
last time the maps were resolved (`map_group_record`, JSON). A map whose group name is gone, on an
object that still has as many groups, where the group at the map's old index has a name the
record did not know, was renamed: the map follows the new name. Any other disappearance (the
group was deleted) is reported as an error at bake time, never silently baked without the map.

`resolve` runs before every export of the maps and after every depsgraph update (a rename in the
UI, handler in __init__.py), so the panels show the new name at once.
"""
from __future__ import annotations

import json
from typing import List

from .preflight import ERROR, Finding

MAP_FIELDS = {"fat_group": "Fat", "paralysis_group": "Muscles (paralysis)", "stiffness_group": "Stiffness & Mass",
              "density_group": "Stiffness & Mass"}


def _recorded(settings) -> List[str]:
    try:
        names = json.loads(settings.map_group_record or "[]")
    except ValueError:
        return []
    return [str(name) for name in names] if isinstance(names, list) else []


def followed_name(name: str, recorded: List[str], current: List[str]) -> str:
    """The name the map's group has now: `name` if it still exists, the renamed group's new name
    if the record shows it was renamed, else "" (gone)."""
    if name in current:
        return name
    if name not in recorded or len(recorded) != len(current):
        return ""
    candidate = current[recorded.index(name)]
    return candidate if candidate not in recorded else ""


def resolve(obj) -> None:
    """Make every map follow its renamed group and record the object's groups as they are now."""
    settings = obj.face_physics
    current = [group.name for group in obj.vertex_groups]
    recorded = _recorded(settings)
    for field in MAP_FIELDS:
        name = getattr(settings, field)
        if name and name not in current:
            followed = followed_name(name, recorded, current)
            if followed and getattr(settings, field) != followed:
                setattr(settings, field, followed)
    record = json.dumps(current)
    if settings.map_group_record != record:
        settings.map_group_record = record


def findings(obj) -> List[Finding]:
    """An error per map whose group is gone (after following renames)."""
    resolve(obj)
    settings = obj.face_physics
    names = {group.name for group in obj.vertex_groups}
    return [Finding(ERROR, f"the {field.split('_')[0]} map's vertex group '{getattr(settings, field)}' is gone "
                           f"(deleted?): choose the map again in the {panel} panel, or clear it")
            for field, panel in MAP_FIELDS.items() if getattr(settings, field) and getattr(settings, field) not in names]
