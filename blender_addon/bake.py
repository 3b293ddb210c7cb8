"""Putting a finished simulation onto the skin object: a Mesh Cache on a `.pc2`, or one shape
key per frame keyed in the shape keys' action or in a new action. A bake first removes only
what an earlier Face Physics bake made (our modifier, our `FP bake` shape keys, their F-curves,
our action — giving back the action it displaced); the user's data is never touched.

Shape-key targets play *with* the user's own shape keys (relative keys add up), and when the
shape keys drove the simulation they are animated over the baked range. So each baked key
holds the simulated face minus what the user's keys add on its frame: played together, the
mesh shows exactly the simulation, as the Mesh Cache (which overwrites) does."""
from __future__ import annotations

import os
from pathlib import Path

import bpy
import numpy as np

from . import pc2_cache
from .stepwise import drain
from .storage import BAKE_ACTION_PREFIX, BAKE_KEY_PREFIX, CACHE_MODIFIER_NAME, cache_path, relative


def action_fcurve_collections(action) -> list:
    """The F-curve collections of an action (legacy, and 4.4+ layered with channel bags)."""
    if hasattr(action, "fcurves") and not getattr(action, "is_action_layered", False):
        return [action.fcurves]
    collections = []
    for layer in action.layers:
        for strip in layer.strips:
            for channelbag in getattr(strip, "channelbags", []):
                collections.append(channelbag.fcurves)
    return collections


def _fcurve_collections(key):
    """The F-curve collections of the shape-key datablock's action."""
    animation = key.animation_data
    if animation is None or animation.action is None:
        return []
    return action_fcurve_collections(animation.action)


def remove_previous_bake(obj) -> None:
    drain(remove_previous_bake_steps(obj))


def remove_previous_bake_steps(obj):
    """Remove what the previous Face Physics bake put on the object, as steps (stepwise.py): a
    shape-key bake goes a key (and its F-curve) a step, so replacing a long one does not stall."""
    modifier = obj.modifiers.get(CACHE_MODIFIER_NAME)
    if modifier is not None:
        obj.modifiers.remove(modifier)
    key = obj.data.shape_keys
    if key is None:
        return
    ours = [block.name for block in key.key_blocks if block.name.startswith(BAKE_KEY_PREFIX)]
    for position, name in enumerate(ours):
        for fcurves in _fcurve_collections(key):
            fcurve = fcurves.find(f'key_blocks["{name}"].value')
            if fcurve is not None:
                fcurves.remove(fcurve)
        obj.shape_key_remove(key.key_blocks[name])
        yield (position + 1) / len(ours), f"removing the previous bake's key {name}"
    settings = obj.face_physics
    if settings.baked_target == 'ACTION' and key.animation_data is not None:
        baked_action = key.animation_data.action
        key.animation_data.action = settings.previous_key_action
        settings.previous_key_action = None
        if baked_action is not None and baked_action.name.startswith(BAKE_ACTION_PREFIX) and baked_action.users == 0:
            bpy.data.actions.remove(baked_action)
    settings.baked_target = ""


def _move_modifier_first(obj, modifier) -> None:
    index = list(obj.modifiers).index(modifier)
    if index:
        obj.modifiers.move(index, 0)


def bind_point_cache(obj, path, first_frame: int) -> None:
    drain(bind_point_cache_steps(obj, path, first_frame))


def bind_point_cache_steps(obj, path, first_frame: int):
    """Show the `.pc2` at `path` on the object with our Mesh Cache modifier, first in the stack,
    replacing what an earlier bake made (its keys a step each: stepwise.py)."""
    yield from remove_previous_bake_steps(obj)
    show_cache(obj, path, first_frame)
    obj.face_physics.baked_target = 'PC2'


def show_cache(obj, path, first_frame: int) -> None:
    """Point our Mesh Cache modifier (made if missing, first in the stack) at `path`, leaving
    an earlier shape-key bake in place under it (the cache overwrites what the keys make). The
    cache may still be growing — a bake in progress: Blender reads it on every evaluation, so new
    frames show as they arrive — and this costs the same whatever was baked before."""
    modifier = obj.modifiers.get(CACHE_MODIFIER_NAME) or obj.modifiers.new(CACHE_MODIFIER_NAME, 'MESH_CACHE')
    modifier.cache_format = 'PC2'
    modifier.filepath = relative(Path(path))
    modifier.deform_mode = 'OVERWRITE'
    modifier.time_mode = 'FRAME'
    modifier.play_mode = 'SCENE'
    modifier.frame_start = float(first_frame)
    modifier.frame_scale = 1.0
    modifier.forward_axis, modifier.up_axis = 'POS_Y', 'POS_Z'   # no axis conversion: the cache is local
    _move_modifier_first(obj, modifier)


def bake_point_cache(obj, local_frames: np.ndarray, first_frame: int, path) -> Path:
    """Write the cache at `path` (temporary file, then swap) and show it (`bind_point_cache`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pc2_cache.write_pc2(path, local_frames, local_frames.shape[1], start_frame=float(first_frame))
    bind_point_cache(obj, path, first_frame)
    return path


def _constant_interpolation(key, data_path: str) -> None:
    for fcurves in _fcurve_collections(key):
        fcurve = fcurves.find(data_path)
        if fcurve is not None:
            for point in fcurve.keyframe_points:
                point.interpolation = 'CONSTANT'


def _use_new_action(obj, key) -> None:
    """Give the shape keys a new action for the bake, remembering the one they had. The new
    action starts as a copy of the old one, so the user's own shape-key animation keeps playing
    under the bake (the baked keys are corrections on top of it)."""
    animation = key.animation_data or key.animation_data_create()
    previous = animation.action
    obj.face_physics.previous_key_action = previous
    action = previous.copy() if previous is not None else bpy.data.actions.new(f"{BAKE_ACTION_PREFIX}{obj.name}")
    action.name = f"{BAKE_ACTION_PREFIX}{obj.name}"
    animation.action = action


def _shape_key_deltas_steps(obj, key_values: dict):
    """What each of the user's relative shape keys that moves over the range adds at value 1,
    as Blender mixes them (vertex-group weight × (key − its relative key)): steps (one key
    each) returning (values (K, T), deltas (K, V, 3)); the offset on frame t is
    Σ_k values[k, t] × deltas[k]."""
    from .scene_export import coordinates, user_key_blocks, vertex_group_weights
    values, deltas = [], []
    blocks = [block for block in user_key_blocks(obj) if np.any(key_values[block.name] != 0.0)]
    for position, block in enumerate(blocks):
        delta = coordinates(block.data) - coordinates(block.relative_key.data)
        mask = vertex_group_weights(obj, block.vertex_group)
        if mask is not None:
            delta *= mask[:, None]
        values.append(key_values[block.name])
        deltas.append(delta)
        yield (position + 1) / len(blocks), f"reading shape key {block.name}"
    frames, vertices = len(next(iter(key_values.values()))), len(obj.data.vertices)
    return np.array(values).reshape(len(values), frames), np.array(deltas).reshape(len(deltas), vertices, 3)


def bake_shape_keys(obj, local_frames: np.ndarray, first_frame: int, new_action: bool = False) -> int:
    """One shape key per frame, relative to the basis, keyed 1 on its frame and 0 elsewhere;
    the keys go into the shape keys' action, or a new one of their own when `new_action`.
    Each key is the frame minus what the user's own shape keys add on that frame."""
    return drain(bake_shape_keys_steps(obj, local_frames, first_frame, new_action))


def bake_shape_keys_steps(obj, local_frames: np.ndarray, first_frame: int, new_action: bool = False):
    """`bake_shape_keys` as steps (stepwise.py): the previous bake removed, the shape keys read
    and one key made and keyed a step each, so a modal bake applies them over timer ticks.
    `local_frames` (T, V, 3) may be a memory map: a frame is read when its key is made."""
    from .scene_export import sample_key_values_steps
    yield from remove_previous_bake_steps(obj)       # first: an action bake gives the user's action back
    frames = len(local_frames)
    key_values = yield from sample_key_values_steps(bpy.context, obj, first_frame, first_frame + frames - 1)
    if obj.data.shape_keys is None:
        obj.shape_key_add(name="Basis", from_mix=False)
    key = obj.data.shape_keys
    basis = key.reference_key
    values, deltas = (yield from _shape_key_deltas_steps(obj, key_values)) if key_values and key.use_relative \
        else (np.zeros((0, frames)), np.zeros((0, len(obj.data.vertices), 3)))
    if new_action:
        _use_new_action(obj, key)
    for offset in range(frames):
        frame = first_frame + offset
        positions = np.asarray(local_frames[offset], dtype=np.float64) - np.tensordot(values[:, offset], deltas, 1)
        block = obj.shape_key_add(name=f"{BAKE_KEY_PREFIX}{frame:04d}", from_mix=False)
        block.relative_key = basis
        block.data.foreach_set("co", np.ascontiguousarray(positions, dtype=np.float32).ravel())
        block.slider_max = 1.0
        for keyed_frame, value in ((frame - 1, 0.0), (frame, 1.0), (frame + 1, 0.0)):
            block.value = value
            block.keyframe_insert("value", frame=keyed_frame)
        _constant_interpolation(key, f'key_blocks["{block.name}"].value')
        yield (offset + 1) / frames, f"shape key for frame {frame}"
    obj.data.update()
    obj.face_physics.baked_target = 'ACTION' if new_action else 'SHAPE_KEYS'
    return frames


def apply_bake(obj, target: str, skin_positions_m: np.ndarray, first_frame: int, metres_per_unit: float,
               cache=None):
    """Put simulated frames on the object as `target` says: PC2 shows `cache` (written from the
    frames unless it exists already: a take's own cache; default storage.cache_path), else
    shape keys."""
    return drain(apply_bake_steps(obj, target, skin_positions_m, first_frame, metres_per_unit, cache))


def apply_bake_steps(obj, target: str, skin_positions_m: np.ndarray, first_frame: int, metres_per_unit: float,
                     cache=None):
    """`apply_bake` as steps (stepwise.py); a cache is bound in one."""
    local = skin_positions_m / metres_per_unit
    if target == 'PC2':
        if cache is not None and os.path.isfile(cache):
            yield from bind_point_cache_steps(obj, cache, first_frame)
            return Path(cache)
        return bake_point_cache(obj, local, first_frame, cache_path(obj) if cache is None else cache)
    return (yield from bake_shape_keys_steps(obj, local, first_frame, new_action=target == 'ACTION'))
