"""Takes in the scene: the Takes list of the Bake panel mirrors the object's take folders
(take_folders.py), and one take at a time is shown on the object — its cache on our Mesh Cache
modifier, or its frames as shape keys when it was baked to shape keys.

Nothing of the user's is touched: showing a take replaces only what an earlier Face Physics bake
made (bake.remove_previous_bake)."""
from __future__ import annotations

import bpy

from . import bake, job_runner, storage, timeline_markers
from .pc2_cache import map_pc2_frames
from .stepwise import drain
from .take_folders import (Take, TakeError, delete_take, find_take, list_takes, rename_take,
                           saved_frames, saved_records, settings_summary)


def folder_of(obj):
    return storage.takes_folder(obj)


def refresh(obj, select: str = "") -> None:
    """Fill the Takes list from disk, selecting `select`, else keeping the selection on the same
    take when it is still there."""
    settings = obj.face_physics
    selected = select or (settings.takes[settings.take_index].name if 0 <= settings.take_index < len(settings.takes)
                          else "")
    settings.takes.clear()
    for take in list_takes(folder_of(obj)) if bpy.data.filepath else []:
        if take.status == "running" and not _is_running(take):
            # Its bake ended without telling the take: Blender quit or crashed, or another
            # file was opened mid-bake. Its finished frames are kept for a resume.
            take.status, take.frames_done = "cancelled", saved_frames(take)
            take.save()
        item = settings.takes.add()
        item.name, item.status, item.target, item.created = take.name, take.status, take.target, take.created
        item.frames, item.frames_done = take.frames, take.frames_done
        item.first_frame, item.last_frame = take.first_frame, take.last_frame
        item.seconds_per_frame, item.warnings = take.seconds_per_frame, "\n".join(take.warnings)
        item.action, item.resumable = take.action, take.resumable
        item.settings = settings_summary(take.settings)
    names = [item.name for item in settings.takes]
    wanted = selected if selected in names else settings.shown_take
    settings.take_index = names.index(wanted) if wanted in names else max(len(names) - 1, 0)


def _is_running(take: Take) -> bool:
    job = job_runner.current_job()
    return job is not None and job.take is not None and job.take.folder == take.folder


def selected_take(obj) -> Take:
    settings = obj.face_physics
    if not 0 <= settings.take_index < len(settings.takes):
        raise TakeError("no take is selected in the Takes list")
    return find_take(folder_of(obj), settings.takes[settings.take_index].name)


def show(obj, take: Take) -> int:
    """Show the take on the object as it was baked (its target): a finished take's cache or
    shape keys, or the frames a running, cancelled or failed one has so far (always as a cache:
    its frames are still coming, or it will be resumed; an earlier shape-key bake stays under
    it until a finished take replaces it). Returns the frames shown."""
    return drain(show_steps(obj, take))


def show_steps(obj, take: Take):
    """`show` as steps (stepwise.py): shape keys are made a frame a step."""
    settings = obj.face_physics
    if take.status == "finished" and take.target != 'PC2':
        # The take's cache, in the object's units, memory-mapped: RESULT.npz is compressed, and
        # reading a long one whole would stall Blender.
        frames = yield from bake.bake_shape_keys_steps(obj, map_pc2_frames(take.cache), take.first_frame,
                                                       new_action=take.target == 'ACTION')
    elif take.status == "finished":
        yield from bake.bind_point_cache_steps(obj, take.cache, take.first_frame)
        frames = take.frames
    else:               # frames still coming, or to be resumed: shown over whatever was baked before
        bake.show_cache(obj, take.cache, take.first_frame)
        frames = take.frames_done
    settings.shown_take = take.name
    _mark_troubled_frames(take)
    obj.update_tag()
    return frames


def _mark_troubled_frames(take: Take) -> None:
    """Timeline markers on the shown take's unconverged, penetrating or inverted frames
    (timeline_markers.py); a take still running gets them when it is shown finished."""
    scene = bpy.context.scene
    if take.status == "finished":
        timeline_markers.mark_bake(scene, take.folder, take.first_frame)
        return
    records = saved_records(take)
    if "converged" in records:
        timeline_markers.mark_result(scene, records, take.first_frame)
    else:
        timeline_markers.clear_markers(scene)


def rename(obj, take: Take, new_name: str) -> Take:
    old = take.name
    take = rename_take(take, new_name)
    modifier = obj.modifiers.get(storage.CACHE_MODIFIER_NAME)
    if obj.face_physics.shown_take == old:
        obj.face_physics.shown_take = take.name
        if modifier is not None and obj.face_physics.baked_target == 'PC2':
            modifier.filepath = storage.relative(take.cache)
    refresh(obj)
    return take


def free(obj, take: Take) -> None:
    """Delete the take; if the object shows it, what the bake put on the object goes too."""
    if obj.face_physics.shown_take == take.name:
        bake.remove_previous_bake(obj)
        obj.face_physics.shown_take = ""
    delete_take(take)
    refresh(obj)


def shape_key_actions(obj) -> list:
    """Actions that animate shape keys of this mesh (by data path), the user's own only."""
    key = obj.data.shape_keys
    if key is None:
        return []
    names = {block.name for block in key.key_blocks}
    found = []
    for action in bpy.data.actions:
        if action.name.startswith(storage.BAKE_ACTION_PREFIX):
            continue
        paths = {fcurve.data_path for fcurves in bake.action_fcurve_collections(action) for fcurve in fcurves}
        if any(path.startswith('key_blocks["') and path.split('"')[1] in names for path in paths):
            found.append(action)
    return found


def refresh_action_list(obj) -> None:
    settings = obj.face_physics
    ticked = {item.name: item.selected for item in settings.bake_actions}
    settings.bake_actions.clear()
    for action in shape_key_actions(obj):
        item = settings.bake_actions.add()
        item.name, item.selected = action.name, ticked.get(action.name, True)
