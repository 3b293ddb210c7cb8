"""Whether an Esc press cancels a running job (no bpy).

A bake of a thousand frames is easy to lose to one stray Esc. A job younger than
CONFIRM_AFTER_S stops on the first press, as before; an older one asks first: the first press
only arms the guard (the status bar says to press again), and a second press within
CONFIRM_WINDOW_S cancels. A press after the window has passed arms it again.
"""
from __future__ import annotations

from typing import Optional

CONFIRM_AFTER_S = 10.0
CONFIRM_WINDOW_S = 3.0


class CancelGuard:
    def __init__(self):
        self._armed_at: Optional[float] = None

    def press(self, job_elapsed_s: float, now: float) -> bool:
        """True when this Esc press should cancel the job (module docstring)."""
        if job_elapsed_s <= CONFIRM_AFTER_S or self.armed(now):
            self._armed_at = None
            return True
        self._armed_at = now
        return False

    def armed(self, now: float) -> bool:
        """Whether a first press is waiting for its confirmation."""
        return self._armed_at is not None and now - self._armed_at <= CONFIRM_WINDOW_S

    @staticmethod
    def prompt(job_elapsed_s: float) -> str:
        return f"running {job_elapsed_s:.0f} s: press Esc again within {CONFIRM_WINDOW_S:.0f} s to cancel"
