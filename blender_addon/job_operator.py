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

import inspect
import time

import bpy

from . import job_runner, preferences, solver_environment
from .cancel_guard import CancelGuard
from .job_runner import current_job
from .stepwise import Stepper, drain
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
        cls.poll_message_set(solver_environment.missing_solver_message(preferences.preferred_python(),
                                                                       preferences.is_extension()))
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


# What applying a result may raise: the reason becomes the operator's error report.
_APPLY_ERRORS = (RuntimeError, ValueError, OSError, KeyError)


class SolverJobOperator:
    """Runs `self.start(context)`'s Job modally (or blocking in background) and calls
    `self.apply(context, job)` only when it succeeded (module docstring).

    `start` may return the Job, None (it reported why not), or steps (stepwise.py) whose result
    is one of those: a bake samples the scene a frame a step before its solver starts. `apply`
    may likewise return steps (a bake's shape keys, a frame a step). In a window the steps run
    a timer tick at a time, about `stepwise.TICK_BUDGET_S` each, so Blender keeps drawing;
    Esc while preparing abandons the steps (nothing started, nothing kept), while applying it
    waits for the end.

    Job operators are not REGISTER operators: Blender's Redo panel (F9) and Repeat Last
    (Shift+R) call `execute()`, which waits for the job — a frozen UI for minutes. Without
    REGISTER they are never offered there; their buttons call `invoke()`, which does not wait."""
    _timer = None
    _job = None
    _cancel_guard = None
    _stepper = None          # the steps being run: preparing (no job yet) or applying (the job ended)

    def start(self, context):
        raise NotImplementedError

    def apply(self, context, job):
        raise NotImplementedError

    def tick(self, context, job) -> None:
        """While the job runs, on every timer tick (and every poll in background mode)."""

    def ended(self, context, job) -> None:
        """After a cancelled or failed job, before it is closed."""

    def next_job(self, context):
        """After a success: another job (or steps giving one) to run in the same operator, or None."""
        return None

    # ---------------------------------------------------------------- background: to the end in the call

    def execute(self, context):
        job = self._started(context, self.start)
        result = {'CANCELLED'}
        while job is not None:
            job.wait(on_update=lambda running: self.tick(context, running))
            result = self._finish(context, job)
            job = self._started(context, self.next_job) if result == {'FINISHED'} else None
        return result

    def _started(self, context, start):
        """`start`'s job, its steps run to the end; None when it did not start (reported)."""
        try:
            started = start(context)
            return drain(started) if inspect.isgenerator(started) else started
        except (RuntimeError, ValueError, OSError) as error:
            self.report({'ERROR'}, str(error))
            return None

    def _finish(self, context, job):
        try:
            refused = self._outcome_reported(context, job)
            if refused is not None:
                return refused
            try:
                applied = self.apply(context, job)
                if inspect.isgenerator(applied):
                    drain(applied)
            except _APPLY_ERRORS as error:
                self.report({'ERROR'}, f"{job.description}: could not apply the result: {error}")
                return {'CANCELLED'}
            return {'FINISHED'}
        finally:
            job.close()

    def _outcome_reported(self, context, job):
        """Report the job's warnings and, unless it succeeded, why not ({'CANCELLED'}); None
        when it succeeded."""
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
        return None

    # ---------------------------------------------------------------- modal: a timer tick at a time

    def invoke(self, context, event):
        if bpy.app.background or context.window is None:
            return self.execute(context)
        if not self._begin(context, self.start):
            return {'CANCELLED'}
        window_manager = context.window_manager
        self._timer = window_manager.event_timer_add(0.1, window=context.window)
        window_manager.modal_handler_add(self)
        return {'RUNNING_MODAL'}

    def _begin(self, context, start) -> bool:
        try:
            started = start(context)
        except (RuntimeError, ValueError, OSError) as error:
            self.report({'ERROR'}, str(error))
            return False
        if started is None:
            return False
        self._job, self._stepper, self._cancel_guard = None, None, None
        if inspect.isgenerator(started):
            self._stepper = Stepper(started)
        else:
            self._job = started
        return True

    def modal(self, context, event):
        escape = event.type == 'ESC' and event.value == 'PRESS'
        if event.type not in {'TIMER', 'ESC'}:
            return {'PASS_THROUGH'}
        result = self.step(context, escape)
        if result is None:
            self._redraw(context)
            return {'PASS_THROUGH'}
        if result == {'FINISHED'} and self._begin(context, self.next_job):
            return {'PASS_THROUGH'}
        context.window_manager.event_timer_remove(self._timer)
        self._status(context, None)
        self._redraw(context)
        return result

    def step(self, context, escape: bool = False):
        """One timer tick of the main thread's share of the job: prepare, poll the solver, or
        apply; None while there is more, else the operator's result. bench/addon_responsiveness.py
        times these ticks."""
        job, stepper = self._job, self._stepper
        if self._cancel_guard is None:
            self._cancel_guard = CancelGuard()
        if job is None:                                   # preparing
            if escape:
                stepper.close()
                self.report({'WARNING'}, "cancelled before the solver started; nothing was changed")
                return {'CANCELLED'}
            try:
                if not stepper.advance():
                    self._status(context, f"preparing: {stepper.message} ({stepper.fraction:.0%})   Esc to cancel")
                    return None
            except (RuntimeError, ValueError, OSError) as error:
                self.report({'ERROR'}, str(error))
                return {'CANCELLED'}
            self._stepper = None
            if stepper.result is None:
                return {'CANCELLED'}
            self._job = stepper.result
            return None
        if stepper is not None:                           # applying a succeeded job
            try:
                if not stepper.advance():
                    self._status(context, f"{job.description}: applying, {stepper.message} "
                                          f"({stepper.fraction:.0%})")
                    return None
            except _APPLY_ERRORS as error:
                self.report({'ERROR'}, f"{job.description}: could not apply the result: {error}")
                job.close()
                return {'CANCELLED'}
            job.close()
            return {'FINISHED'}
        if escape and self._cancel_guard.press(job.elapsed_s, time.monotonic()):
            job.cancel()
        if job.update() is None:
            self.tick(context, job)
            hint = (CancelGuard.prompt(job.elapsed_s) if self._cancel_guard.armed(time.monotonic())
                    else "Esc to cancel")
            self._status(context, f"Face Physics — {job.description}: {job.progress_text()}   {hint}")
            return None
        refused = self._outcome_reported(context, job)
        if refused is not None:
            job.close()
            return refused
        try:
            applied = self.apply(context, job)
        except _APPLY_ERRORS as error:
            self.report({'ERROR'}, f"{job.description}: could not apply the result: {error}")
            job.close()
            return {'CANCELLED'}
        if inspect.isgenerator(applied):
            self._stepper = Stepper(applied)
            return None
        job.close()
        return {'FINISHED'}

    @staticmethod
    def _status(context, text: str) -> None:
        if context.window is not None and context.workspace is not None:
            context.workspace.status_text_set(text)

    def cancel(self, context):
        """Blender ends the modal run (another file opened, the window closed): the job stops
        with it, and nothing is applied."""
        if self._stepper is not None and self._job is None:
            self._stepper.close()
        if self._job is not None and self._job is job_runner.current_job():
            job_runner.stop_current_job()

    @staticmethod
    def _redraw(context):
        for area in context.screen.areas if context.screen else ():
            if area.type == 'VIEW_3D':
                area.tag_redraw()
