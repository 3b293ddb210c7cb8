"""Long main-thread work cut into steps, so a modal operator can spread it over timer ticks and
Blender keeps drawing: sampling the scene before a bake, putting its frames on the object after.

A step function is a generator that yields `(fraction, message)` after each small piece of work
and returns its result (StopIteration.value); a step that knows the next one is slow (the first
`frame_set` of a range evaluates everything that changed) yields `(fraction, message, END_TICK)`
to end the tick there. `drain` runs one to the end (background mode,
scripts, the farm); `advance` runs one for about `budget_s` and says whether it finished.
No bpy here.
"""
from __future__ import annotations

import time
from typing import Generator

# Work per timer tick: half the 50 ms a stall starts to show as a stutter, leaving the rest for
# Blender's own redraw of the tick.
TICK_BUDGET_S = 0.025

Steps = Generator[tuple, None, object]
END_TICK = "end tick"


def drain(steps: Steps):
    """Run the steps to the end and return their result."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


class Stepper:
    """Runs a step function a tick at a time, remembering the last progress it reported."""

    def __init__(self, steps: Steps):
        self.steps = steps
        self.fraction, self.message = 0.0, ""
        self.done, self.result = False, None

    def advance(self, budget_s: float = TICK_BUDGET_S) -> bool:
        """Run steps (at least one) while the next, guessed to cost what the last one did, still
        fits in `budget_s`; True once they have finished."""
        started = last_step = time.perf_counter()
        while not self.done:
            try:
                self.fraction, self.message, *flag = next(self.steps)
            except StopIteration as stop:
                self.done, self.result = True, stop.value
                break
            now = time.perf_counter()
            if flag == [END_TICK] or (now - started) + (now - last_step) >= budget_s:
                break
            last_step = now
        return self.done

    def close(self) -> None:
        """Abandon the steps (their `finally` blocks run: the scene frame comes back)."""
        self.steps.close()
