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
    from . import job_runner
    job_runner.stop_current_job()


def _stop_job_at_exit():
    from . import job_runner
    try:
        job_runner.stop_current_job()
    except Exception:       # noqa: BLE001 — Blender is shutting down; the process is stopped either way
        pass


def register():
    import atexit

    import bpy
    from . import operators, panels, preferences, preview_operators, properties
    properties.register()
    for cls in preferences.CLASSES + operators.CLASSES + preview_operators.CLASSES + panels.CLASSES:
        bpy.utils.register_class(cls)
        _registered.append(cls)
    # Opening another file or quitting stops the running job and reaps its process group.
    bpy.app.handlers.load_pre.append(bpy.app.handlers.persistent(_stop_job_before_load))
    atexit.register(_stop_job_at_exit)


def unregister():
    import atexit

    import bpy
    from . import job_runner, properties
    job_runner.stop_current_job()
    if _stop_job_before_load in bpy.app.handlers.load_pre:
        bpy.app.handlers.load_pre.remove(_stop_job_before_load)
    atexit.unregister(_stop_job_at_exit)
    while _registered:
        bpy.utils.unregister_class(_registered.pop())
    properties.unregister()
