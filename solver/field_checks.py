"""A named value checked against its range, worded once: the requests (requests/fields.py) and
the physics settings they carry (physics/maps.py `MapSettings`) raise the same problem and fix,
each with its own error type, so every front door shows one message for one mistake."""
from __future__ import annotations

import math
from typing import Callable, Type


class FieldError(ValueError):
    """A named value is invalid: `field` names it, `problem` says what is wrong, `fix` what to do."""

    def __init__(self, field: str, problem: str, fix: str):
        self.field, self.problem, self.fix = field, problem, fix
        super().__init__(f"{field}: {problem}. Fix: {fix}.")

    def shown_as(self, label: Callable[[str], str]) -> str:
        """The message with the field named as a front door spells it."""
        return f"{label(self.field)}: {self.problem}. Fix: {self.fix}."


def whole_number(value, field: str, low: int, high: int, error: Type[FieldError] = FieldError) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(field, f"expected a whole number in [{low}, {high}], found {value!r}",
                    "give an integer in that range")
    return int(value)


def number(value, field: str, low: float, high: float, meaning: str = "",
           error: Type[FieldError] = FieldError) -> float:
    """A finite number in [low, high]; `meaning` (e.g. "1 = unchanged") goes into the fix."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        raise error(field, f"expected a number in [{low:g}, {high:g}], found {value!r}",
                    "give a finite number in that range" + (f" ({meaning})" if meaning else ""))
    return float(value)
