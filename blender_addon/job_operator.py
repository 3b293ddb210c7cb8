"""The operators' shared machinery: polls that say why a button is greyed out, and
`SolverJobOperator`, which runs a solver job modally (Blender never freezes) or, in background
mode, to the end in the call.

A job operator implements `start(context) -> Job | None` and `apply(context, job)`; `apply` runs
only when the job succeeded, so a cancel or a crash changes nothing but what the job's own
`ended` hook records (a bake's take keeps its frames). `tick` runs on every timer tick while the
job runs (a bake shows its frames as they arrive); `next_job` may chain another job after a
success (Bake All Actions). Esc twice within 3 s once the job has run 10 s (cancel_guard.py), or
the panel's Cancel button, stops it.
"""

import time

import bpy

from . import job_runner, preferences, solver_environment
from .cancel_guard import CancelGuard
from .job_runner import current_job
from .workflow import skin_object


def first_refusal(cls, conditions) -> bool:
    """Poll from (holds, message why not) pairs: False with the first failing one's message."""
    for holds, message in conditions:
        if not holds:
            cls.poll_message_set(message)
            return False
    return True


def solver_poll(cls, context) -> bool:
    if skin_object(context) is None:
        cls.poll_message_set("Select the skin: a mesh object")
        return False
    if current_job() is not None:
        cls.poll_message_set("A Face Physics job is running")
        return False
    if preferences.solver_python() is None:
        cls.poll_message_set(solver_environment.missing_solver_message(preferences.preferred_python()))
        return False
    return True


def built_model_poll(cls, context) -> bool:
    """The solver is available and the active skin has a built model."""
    if not solver_poll(cls, context):
        return False
    if not skin_object(context).face_physics.model_path:
        cls.poll_message_set("Build the model first (Model panel)")
        return False
    return True


class SolverJobOperator:
    """Runs `self.start(context)`'s Job modally (or blocking in background) and calls
    `self.apply(context, job)` only when it succeeded (module docstring).

    Job operators are not REGISTER operators: Blender's Redo panel (F9) and Repeat Last
    (Shift+R) call `execute()`, which waits for the job — a frozen UI for minutes. Without
    REGISTER they are never offered there; their buttons call `invoke()`, which does not wait."""
    _timer = None
    _job = None
    _cancel_guard = None

    def start(self, context):
        raise NotImplementedError

    def apply(self, context, job) -> None:
        raise NotImplementedError

    def tick(self, context, job) -> None:
        """While the job runs, on every timer tick (and every poll in background mode)."""

    def ended(self, context, job) -> None:
        """After a cancelled or failed job, before it is closed."""

    def next_job(self, context):
        """After a success: another job to run in the same operator, or None."""
        return None

    def execute(self, context):
        job = self._start_reported(context)
        result = {'CANCELLED'}
        while job is not None:
            job.wait(on_update=lambda running: self.tick(context, running))
            result = self._finish(context, job)
            job = self._next_reported(context) if result == {'FINISHED'} else None
        return result

    def invoke(self, context, event):
        if bpy.app.background or context.window is None:
            return self.execute(context)
        job = self._start_reported(context)
        if job is None:
            return {'CANCELLED'}
        self._job = job
        window_manager = context.window_manager
        self._timer = window_manager.event_timer_add(0.1, window=context.window)
        window_manager.modal_handler_add(self)
        return {'RUNNING_MODAL'}

    def modal(self, context, event):
        job = self._job
        if self._cancel_guard is None:
            self._cancel_guard = CancelGuard()
        if event.type == 'ESC' and event.value == 'PRESS' and self._cancel_guard.press(job.elapsed_s, time.monotonic()):
            job.cancel()
        if event.type in {'TIMER', 'ESC'}:
            if job.update() is not None:
                self._redraw(context)
                result = self._finish(context, job)
                following = self._next_reported(context) if result == {'FINISHED'} else None
                if following is not None:
                    self._job, self._cancel_guard = following, None
                    return {'PASS_THROUGH'}
                context.window_manager.event_timer_remove(self._timer)
                context.workspace.status_text_set(None)
                return result
            self.tick(context, job)
            hint = (CancelGuard.prompt(job.elapsed_s) if self._cancel_guard.armed(time.monotonic())
                    else "Esc to cancel")
            context.workspace.status_text_set(f"Face Physics — {job.description}: {job.progress_text()}   {hint}")
            self._redraw(context)
        return {'PASS_THROUGH'}

    def cancel(self, context):
        """Blender ends the modal run (another file opened, the window closed): the job stops
        with it, and nothing is applied."""
        if self._job is not None and self._job is job_runner.current_job():
            job_runner.stop_current_job()

    @staticmethod
    def _redraw(context):
        for area in context.screen.areas if context.screen else ():
            if area.type == 'VIEW_3D':
                area.tag_redraw()

    def _start_reported(self, context, start=None):
        try:
            return (start or self.start)(context)
        except (RuntimeError, ValueError, OSError) as error:
            self.report({'ERROR'}, str(error))
            return None

    def _next_reported(self, context):
        return self._start_reported(context, self.next_job)

    def _finish(self, context, job):
        try:
            for warning in job.warnings:
                self.report({'WARNING'}, f"solver: {warning}")
            if job.outcome in ('CANCELLED', 'FAILED'):
                self.ended(context, job)
            if job.outcome == 'CANCELLED':
                kept = f"; its {job.frames_done} solved frames are kept (Resume)" if job.take is not None and \
                    job.frames_done else "; nothing was changed"
                self.report({'WARNING'}, f"{job.description} cancelled{kept}")
                return {'CANCELLED'}
            if job.outcome == 'FAILED':
                self.report({'ERROR'}, f"{job.description} failed: {job.error_message()}")
                return {'CANCELLED'}
            try:
                self.apply(context, job)
            except (RuntimeError, ValueError, OSError, KeyError) as error:
                self.report({'ERROR'}, f"{job.description}: could not apply the result: {error}")
                return {'CANCELLED'}
            return {'FINISHED'}
        finally:
            job.close()


