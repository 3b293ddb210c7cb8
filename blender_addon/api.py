"""Face Physics for scripts: build, fit, bake and takes, on any mesh object — no active
object, no operator context, no UI. The farm command line (cli.py) bakes through it; the
operators start the same workflow functions modally instead of waiting.

    import bpy
    from blender_addon import api          # the installed extension: bl_ext.<repo>.face_physics.api

    head = bpy.data.objects["Head"]
    api.build(head)                                        # MODEL.npz beside the saved .blend
    api.fit(head, shapes=["jawOpen", "mouthSmile_L"])      # or shapes=None: every shape key
    api.build_correctives(head, keys=["jawOpen", "mouthSmile_L"])   # driven corr_ keys added
    take = api.bake(head, first=1, last=240, target='PC2')
    for take in api.takes(head):
        print(take.name, take.status, take.frames_done, take.seconds_per_frame)
    api.show_take(head, "FP_take_001")

Every call waits for the solver (run it in `blender -b`, or accept that a UI session waits) and
raises `FacePhysicsError` with the reason — a pre-flight finding, the solver's own message, a
cancel — without changing the scene; a bake that stops keeps its solved frames in its take,
which `resume` continues. `on_progress(job)` is called while the solver runs (job_runner.Job:
`message`, `fraction`, `frames_done`, `frames_total`, `seconds_per_frame`, `finished_shapes`).
Ctrl-C stops the solver too.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import bpy

from . import takes as take_list
from . import corrective_jobs, workflow
from .job_runner import Job
from .take_folders import Take, TakeError, find_take, list_takes
from .workflow import BakePlan

TARGETS = ('PC2', 'SHAPE_KEYS', 'ACTION')


class FacePhysicsError(RuntimeError):
    """What stopped a build, fit or bake, in the words the panels use."""


class _Reports:
    """Collects what the workflow reports (in place of an operator); errors stop the call.
    `on_report(kinds, message)`, when given, hears every report as it is made."""

    def __init__(self, on_report=None):
        self.errors: List[str] = []
        self.on_report = on_report

    def report(self, kinds, message: str) -> None:
        if 'ERROR' in kinds:
            self.errors.append(message)
        if self.on_report is not None:
            self.on_report(kinds, message)


def _started(start: Callable, reports: _Reports):
    try:
        started = start()
    except (RuntimeError, ValueError, OSError, TakeError) as error:
        raise FacePhysicsError(str(error)) from None
    if started is None or (isinstance(started, tuple) and started[0] is None):
        raise FacePhysicsError("; ".join(reports.errors) or "the job did not start")
    return started


def _finished(job: Job, on_progress, ended: Callable[[Job], None] = lambda job: None) -> Job:
    """Wait for `job`; on success return it (still open: the caller applies and closes it)."""
    try:
        job.wait(on_progress or (lambda running: None))
    except KeyboardInterrupt:
        job.cancel()
        job.wait()
        ended(job)
        job.close()
        raise
    if job.outcome != 'FINISHED':
        ended(job)
        reason = "cancelled" if job.outcome == 'CANCELLED' else f"failed: {job.error_message()}"
        job.close()
        raise FacePhysicsError(f"{job.description} {reason}")
    return job


def build(obj, target_tets: Optional[int] = None, on_progress=None) -> dict:
    """Build the volumetric model of `obj` (the Model panel's Build); returns the solver's summary."""
    if target_tets is not None:
        obj.face_physics.target_tets = int(target_tets)
    reports = _Reports()
    job, built_from = _started(lambda: workflow.start_build_job(reports, bpy.context, obj), reports)
    _finished(job, on_progress)
    try:
        workflow.apply_build(reports, obj, job, built_from)
        return dict(job.result)
    finally:
        job.close()


def fit(obj, shapes: Optional[Sequence[str]] = None, processes: Optional[int] = None, on_progress=None) -> dict:
    """Fit the shape keys (all, or `shapes` in the solver's ARKit spelling); the fit is stored
    beside the .blend and the Fit list filled. Returns {shape: (mean, p95, max) mm} of this fit."""
    reports = _Reports()
    text = ",".join(shapes) if shapes else ""
    job = _started(lambda: workflow.start_fit_job(reports, bpy.context, obj, 'ALL', text, processes), reports)
    _finished(job, on_progress)
    try:
        workflow.apply_fit(obj, job)
        return {shape["shape"]: tuple(shape["error_mm"]) for shape in job.finished_shapes}
    finally:
        job.close()


def build_correctives(obj, keys: Optional[Sequence[str]] = None, threshold_mm: Optional[float] = None,
                      processes: Optional[int] = None, on_progress=None, pairs: Sequence = ()) -> list:
    """Build corrective shape keys for `keys` (solver spelling; default every fitted key) and add
    them to `obj` (Fit panel's Build Correctives); only `pairs` ((a, b), …) are probed when given.
    CORR.npz is stored beside the .blend and the solved samples kept for the next build, also
    after a failure. Returns the keys added."""
    reports = _Reports()
    threshold = corrective_jobs.DEFAULT_THRESHOLD_MM if threshold_mm is None else float(threshold_mm)
    text = ",".join(keys) if keys else ""
    job = _started(lambda: corrective_jobs.start_correctives_job(reports, bpy.context, obj, 'ALL', text, threshold,
                                                                 processes, pairs), reports)
    _finished(job, on_progress, ended=lambda ended: corrective_jobs.keep_samples(obj, ended))
    try:
        return corrective_jobs.apply_correctives(bpy.context, obj, job)
    finally:
        job.close()


def bake(obj, first: Optional[int] = None, last: Optional[int] = None, target: Optional[str] = None,
         action=None, on_progress=None, on_report=None) -> Take:
    """Bake `obj` into a new take and show it (the Bake panel's Bake): frames `first`–`last`
    (default: the panel's range), `target` one of TARGETS (default: the panel's), the shape keys
    playing `action` (a bpy Action or its name) while sampled when given. Returns the take (its
    `warnings` hold the solver's); `on_report(kinds, message)` hears the pre-flight findings."""
    settings = obj.face_physics
    plan = BakePlan.of(bpy.context, obj)
    if target is not None and target not in TARGETS:
        raise FacePhysicsError(f"target {target!r}: use one of {', '.join(TARGETS)}")
    plan = BakePlan(obj.name, plan.first_frame if first is None else int(first),
                    plan.last_frame if last is None else int(last), target or plan.target, settings.metres_per_unit)
    if isinstance(action, str):
        if bpy.data.actions.get(action) is None:
            raise FacePhysicsError(f"there is no action named {action!r}")
        action = bpy.data.actions[action]
    reports = _Reports(on_report)
    job = _started(lambda: workflow.start_bake_job(reports, bpy.context, obj, action=action, plan=plan), reports)
    return _applied_take(job, on_progress)


def resume(obj, take_name: str, on_progress=None) -> Take:
    """Continue a cancelled or failed take from its last solved frame; returns it, finished."""
    take, reports = _take(obj, take_name), _Reports()
    job = _started(lambda: workflow.resume_bake_job(reports, bpy.context, obj, take), reports)
    return _applied_take(job, on_progress)


def _applied_take(job: Job, on_progress) -> Take:
    def follow(running):
        workflow.follow_bake(running)
        if on_progress is not None:
            on_progress(running)

    _finished(job, follow, workflow.end_bake)
    try:
        workflow.apply_bake(job)
        return job.take
    finally:
        job.close()


def takes(obj) -> List[Take]:
    """The object's takes, oldest first (take_folders.Take: name, status, frames, …)."""
    from . import storage
    return list_takes(storage.takes_folder(obj))


def _take(obj, name: str) -> Take:
    from . import storage
    try:
        return find_take(storage.takes_folder(obj), name)
    except TakeError as error:
        raise FacePhysicsError(str(error)) from None


def show_take(obj, name: str) -> int:
    """Show the take on the object as it was baked; returns its frames shown."""
    return take_list.show(obj, _take(obj, name))


def rename_take(obj, name: str, new_name: str) -> Take:
    try:
        return take_list.rename(obj, _take(obj, name), new_name)
    except TakeError as error:
        raise FacePhysicsError(str(error)) from None


def free_take(obj, name: str) -> None:
    take_list.free(obj, _take(obj, name))
