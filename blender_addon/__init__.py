"""Face Physics: physics-based facial animation (after Phace), driven by an out-of-process solver.

bpy is imported only inside register(): the format and process modules of this package
(job_files, solver_process, pc2_cache, preflight, head_motion, solver_environment) are plain
Python + numpy and can be imported and tested without Blender.
"""

bl_info = {
    "name": "Face Physics",
    "author": "Face Physics project",
    "version": (0, 1, 0),
    "blender": (4, 2, 0),
    "location": "3D View ▸ Sidebar ▸ Face Physics",
    "description": "Volumetric face model, muscles, fat and paralysis maps, physics bakes",
    "category": "Animation",
}

_registered = []


def _stop_job_before_load(*_):
    from . import job_runner, shell_poke
    job_runner.stop_current_job()
    shell_poke.stop_session()


def _after_load(*_):
    """Settings of an older add-on converted (legacy_settings.py); the opened file's takes, read
    from disk: a take whose bake was cut off (Blender quit or crashed mid-bake) is listed as
    cancelled and resumable (takes.refresh)."""
    import bpy
    from . import legacy_settings, takes
    for obj in bpy.data.objects:
        if obj.type == 'MESH':
            for change in legacy_settings.upgrade(obj):
                print(f"Face Physics: {obj.name}: converted an older setting: {change}")
    if not bpy.data.filepath:
        return
    for obj in bpy.data.objects:
        if obj.type == 'MESH' and obj.face_physics.model_path:
            try:
                takes.refresh(obj)
            except OSError:         # an unreadable takes folder must not stop the file from opening
                continue


def _follow_renamed_map_groups(scene, depsgraph):
    """A vertex group renamed in the UI: the maps that named it follow it (map_groups.py)."""
    from . import map_groups
    for update in depsgraph.updates:
        obj = update.id.original if hasattr(update.id, "original") else update.id
        if getattr(obj, "type", None) == 'MESH' and getattr(obj, "face_physics", None) is not None and \
                obj.face_physics.map_group_record:
            map_groups.resolve(obj)


def _stop_job_at_exit():
    from . import job_runner
    try:
        job_runner.stop_current_job()
    except Exception:       # noqa: BLE001 — Blender is shutting down; the process is stopped either way
        pass


def register():
    import atexit

    import bpy
    from . import (bake_operators, corrective_operators, lip_groups, muscle_controls, operators, panels, preferences,
                   preset_operators, preview_operators, properties, shell_operators, shell_panel, shell_poke)
    properties.register()
    for cls in (preferences.CLASSES + operators.CLASSES + bake_operators.CLASSES + preview_operators.CLASSES
                + preset_operators.CLASSES + lip_groups.CLASSES + muscle_controls.CLASSES + panels.CLASSES
                + shell_panel.CLASSES + shell_operators.CLASSES + shell_poke.CLASSES + corrective_operators.CLASSES):
        bpy.utils.register_class(cls)
        _registered.append(cls)
        if cls is shell_panel.FACE_PHYSICS_PG_shell:
            shell_panel.register_properties()
    preset_operators.register_preset_folder()
    # Opening another file or quitting stops the running job and reaps its process group.
    bpy.app.handlers.load_pre.append(bpy.app.handlers.persistent(_stop_job_before_load))
    bpy.app.handlers.load_post.append(bpy.app.handlers.persistent(_after_load))
    bpy.app.handlers.depsgraph_update_post.append(bpy.app.handlers.persistent(_follow_renamed_map_groups))
    atexit.register(_stop_job_at_exit)


def unregister():
    import atexit

    import bpy
    from . import job_runner, preset_operators, properties, shell_panel, shell_poke
    job_runner.stop_current_job()
    shell_poke.stop_session()
    preset_operators.unregister_preset_folder()
    if _stop_job_before_load in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.remove(_stop_job_before_load)
    if _after_load in bpy.app.handlers.load_post:
        bpy.app.handlers.load_post.remove(_after_load)
    if _follow_renamed_map_groups in bpy.app.handlers.depsgraph_update_post:
        bpy.app.handlers.depsgraph_update_post.remove(_follow_renamed_map_groups)
    atexit.unregister(_stop_job_at_exit)
    while _registered:
        cls = _registered.pop()
        if cls is shell_panel.FACE_PHYSICS_PG_shell:
            shell_panel.unregister_properties()
        bpy.utils.unregister_class(cls)
    properties.unregister()
