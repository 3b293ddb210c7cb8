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


def register():
    from . import operators, panels, preferences, properties
    import bpy
    properties.register()
    for cls in preferences.CLASSES + operators.CLASSES + panels.CLASSES:
        bpy.utils.register_class(cls)
        _registered.append(cls)


def unregister():
    import bpy
    from . import job_runner, properties
    job = job_runner.current_job()
    if job is not None:
        job.cancel()
        job.close()
    while _registered:
        bpy.utils.unregister_class(_registered.pop())
    properties.unregister()
