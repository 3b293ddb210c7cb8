"""One running solver job at a time, shared by the operators and the panels.

`Job` wraps a `SolverProcess`: `update()` turns the messages that arrived into the progress
shown in the panel and status bar, and once the child has exited decides the outcome. Only
then, and only on success, does the operator apply anything to the scene — so a cancel or a
crash leaves the scene exactly as it was.
"""
from __future__ import annotations

import os
import time
from typing import Callable, List, Optional

import bpy

from . import job_files, preferences
from .solver_process import SolverProcess

POLL_SECONDS = 0.1
_current: Optional["Job"] = None


def current_job() -> Optional["Job"]:
    return _current


def stop_current_job() -> None:
    """Cancel the running job, if any, wait until its process group has ended (killed after the
    grace period) and forget it. Opening another .blend, quitting Blender or disabling the
    add-on calls this: no solver or fit worker outlives the file it was started for, and the
    next file does not inherit a stale "a job is running"."""
    job = _current
    if job is None:
        return
    job.cancel()
    job.process.wait()
    job.close()


class Job:
    def __init__(self, description: str, command: List[str], job_dir=None, keep_folder: bool = False):
        """`keep_folder`: the folder outlives the job (a take's; else only with FACE_PHYSICS_KEEP_JOBS)."""
        global _current
        self.description = description
        self.job_dir = job_dir
        self.keep_folder = keep_folder or bool(os.environ.get("FACE_PHYSICS_KEEP_JOBS"))
        self.errors: List[str] = []
        self.warnings: List[str] = []
        self.result: Optional[dict] = None
        self.status: Optional[str] = None          # from the `done` message
        self.fraction = 0.0
        self.message = "starting the solver"
        # Per finished shape of a fit: {"shape", "error_mm", "status", "context", "start"}; shown while the
        # fit runs and kept out of the scene until it succeeds.
        self.finished_shapes: List[dict] = []
        self.plan = None                           # where the result goes, fixed at the start (workflow.BakePlan)
        self.take = None                           # a bake's take (take_folders.Take)
        self.frames_done = 0                       # a bake's solved frames of frames_total, as reported
        self.frames_total = 0
        self.frame_seconds: List[float] = []       # seconds of each frame solved in this run
        self.frames_shown = 0                      # frames the viewport was last told about (workflow.follow_bake)
        self.outcome: Optional[str] = None         # 'FINISHED' | 'CANCELLED' | 'FAILED'
        self.started = time.monotonic()
        self.process = SolverProcess(command, env=preferences.solver_child_environment())
        _current = self
        self._publish()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def _publish(self) -> None:
        state = bpy.context.window_manager.face_physics_job
        state.running = self.outcome is None
        state.description = self.description
        state.progress = self.fraction
        state.message = self.message
        if self.outcome == 'FAILED':
            state.last_error = self.error_message()
        elif self.outcome is None:
            state.last_error = ""

    def update(self) -> Optional[str]:
        """Read new messages; return the outcome once the job has ended, else None."""
        for message in self.process.poll():
            kind = message.get("type")
            if kind == "progress":
                self.message = str(message.get("message", ""))
                if isinstance(message.get("fraction"), (int, float)):
                    self.fraction = float(message["fraction"])
                self._count_frame(message)
                if isinstance(message.get("shape"), str) and isinstance(message.get("error_mm"), list):
                    self.finished_shapes.append({key: message.get(key) for key in
                                                 ("shape", "error_mm", "status", "context", "start")})
            elif kind == "warning":
                self.warnings.append(str(message.get("message", "")))
            elif kind == "error":
                self.errors.append(str(message.get("message", "")))
            elif kind == "result":
                self.result = message
            elif kind == "cancelled":
                self.message = str(message.get("message", "cancelled"))
            elif kind == "done":
                self.status = message.get("status")
        if self.outcome is None and self.process.finished:
            self.outcome = self._decide_outcome()
            self.message = {"FINISHED": "done", "CANCELLED": "cancelled", "FAILED": "failed"}[self.outcome]
        self._publish()
        return self.outcome

    def _count_frame(self, message: dict) -> None:
        frame, frames = message.get("frame"), message.get("frames")
        if isinstance(frame, int) and isinstance(frames, int) and frames > 0:
            self.frames_done, self.frames_total = frame, frames
            if isinstance(message.get("seconds"), (int, float)):
                self.frame_seconds.append(float(message["seconds"]))

    @property
    def seconds_per_frame(self) -> float:
        """Median over the frames solved so far in this run (robust to the slow first frame)."""
        if not self.frame_seconds:
            return 0.0
        ordered = sorted(self.frame_seconds)
        return ordered[len(ordered) // 2]

    @property
    def seconds_left(self) -> float:
        return self.seconds_per_frame * max(self.frames_total - self.frames_done, 0)

    def progress_text(self) -> str:
        """A bake's frames, seconds per frame and time left; any other job's own message."""
        if not self.frames_total:
            return f"{self.message} ({self.fraction:.0%})"
        text = f"frame {self.frames_done}/{self.frames_total}"
        if self.frame_seconds:
            left = self.seconds_left
            text += f", {self.seconds_per_frame:.2f} s/frame, " + (f"{left / 60:.0f} min left" if left >= 90
                                                                    else f"{left:.0f} s left")
        return text

    def _decide_outcome(self) -> str:
        if self.process.cancel_requested or self.status == "cancelled":
            return 'CANCELLED'
        if self.process.returncode == 0 and self.status == "ok" and self.result is not None:
            return 'FINISHED'
        return 'FAILED'

    def error_message(self) -> str:
        if self.errors:
            return self.errors[-1]
        tail = self.process.stderr_tail().strip().splitlines()
        last = tail[-1] if tail else "no message"
        if "No module named" in last:
            return (f"the solver Python cannot run the solver ({last}); press Install solver or choose another "
                    f"Python in the Face Physics preferences")
        return f"the solver exited with status {self.process.returncode}: {last}"

    def cancel(self) -> None:
        self.process.cancel()

    def wait(self, on_update: Callable[["Job"], None] = lambda job: None) -> str:
        """Block until the job ends (background mode and farm bakes, where no UI can freeze)."""
        while self.update() is None:
            on_update(self)
            time.sleep(POLL_SECONDS)
        return self.outcome

    def close(self) -> None:
        """Forget the job; delete its folder unless asked to keep it for debugging."""
        global _current
        if _current is self:
            _current = None
        bpy.context.window_manager.face_physics_job.running = False
        if self.job_dir is not None and not self.keep_folder:
            job_files.remove_job_folder(self.job_dir)
