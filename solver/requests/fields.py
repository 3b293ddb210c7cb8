"""Checking one field of a request: the same rule, range and message behind every front door.

A request (animate.py, fit.py, build.py) is built from the command line (solver/cli.py) or a
job folder (solver/jobs.py) and checks each field here once. A bad value raises RequestError
naming the request's own field (``fat_scale``); each door shows it under its own name for that
field (``--fat-scale`` on the command line, ``settings.fat_scale`` in job.json), so the user sees
the spelling they typed and the same problem and fix either way.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Optional, Sequence

from .. import field_checks
from ..field_checks import FieldError


class RequestError(FieldError):
    """A request field is invalid: `field` is the request's name for it, `problem` what is wrong,
    `fix` what to do instead."""


def flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise RequestError(field, f"expected true or false, found {value!r}", "give a boolean")
    return value


def whole_number(value, field: str, low: int, high: int) -> int:
    return field_checks.whole_number(value, field, low, high, RequestError)


def number(value, field: str, low: float, high: float, meaning: str = "") -> float:
    """A finite number in [low, high]; `meaning` (e.g. "1 = unchanged") goes into the fix."""
    return field_checks.number(value, field, low, high, meaning, RequestError)


def choice(value, field: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise RequestError(field, f"expected one of {list(allowed)}, found {value!r}",
                           f"give one of {', '.join(allowed)}")
    return value


def choices(values, field: str, allowed: Sequence[str]) -> tuple:
    """A list of distinct choices (empty for none)."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise RequestError(field, f"expected a list of {', '.join(allowed)}, found {values!r}",
                           "give a list, empty for none")
    for value in values:
        choice(value, field, allowed)
    if len(set(values)) != len(values):
        raise RequestError(field, f"{list(values)} names one twice", "name each once")
    return tuple(values)


def vector3(value, field: str, largest: float, unit: str) -> tuple:
    """Three finite numbers whose length is at most `largest` (`unit` names what they are)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or len(value) != 3:
        raise RequestError(field, f"expected three numbers X, Y, Z in {unit}, found {value!r}", "give three numbers")
    for component in value:
        if isinstance(component, bool) or not isinstance(component, (int, float)) or not math.isfinite(component):
            raise RequestError(field, f"expected three finite numbers in {unit}, found {value!r}",
                               "give three finite numbers")
    length = math.sqrt(sum(float(c) ** 2 for c in value))
    if length > largest:
        raise RequestError(field, f"{length:g} {unit} is more than the {largest:g} {unit} the solver can follow",
                           f"give at most {largest:g} {unit}")
    return tuple(float(c) for c in value)


def names(values, field: str) -> tuple:
    """A list of distinct non-empty names (empty for all)."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)) \
            or not all(isinstance(name, str) and name.strip() for name in values):
        raise RequestError(field, f"expected a non-empty list of names, found {values!r}", "give a list of names")
    repeated = sorted({name for name in values if list(values).count(name) > 1})
    if repeated:
        raise RequestError(field, f"{repeated[0]!r} is listed twice", "list each name once")
    return tuple(name.strip() for name in values)


def name_pairs(values, field: str) -> tuple:
    """A list of pairs of two different names, no pair given twice (in either order)."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        raise RequestError(field, f"expected a list of pairs of names, found {values!r}",
                           "give a list such as [[\"jawOpen\", \"mouthSmile_L\"]]")
    pairs, seen = [], set()
    for pair in values:
        if isinstance(pair, str) or not isinstance(pair, (list, tuple)) or len(pair) != 2 or \
                not all(isinstance(name, str) and name.strip() for name in pair):
            raise RequestError(field, f"expected a pair of two names, found {pair!r}", "give each pair as two names")
        first, second = (name.strip() for name in pair)
        if first == second:
            raise RequestError(field, f"{first} is paired with itself", "pair two different keys (a key's own "
                                                                            "square term is always fitted)")
        if frozenset((first, second)) in seen:
            raise RequestError(field, f"{first} and {second} are paired twice", "list each pair once")
        seen.add(frozenset((first, second)))
        pairs.append((first, second))
    return tuple(pairs)


def input_file(path, field: str, what: str) -> Path:
    """An existing regular file (a directory, or nothing, is refused with what was expected)."""
    if path is None:
        raise RequestError(field, "missing", f"give the {what}")
    path = Path(path)
    if path.is_dir():
        raise RequestError(field, f"{path} is a folder, not a {what}", f"give the {what} file itself")
    if not path.is_file():
        raise RequestError(field, f"{path}: no such file", f"give the path of an existing {what}")
    return path


def output_file(path, field: str, suffix: str, inputs: Iterable[Optional[Path]],
                companions: Sequence[str] = ()) -> Path:
    """Where an output will be written, checked before any work: named `*suffix`, in an existing
    folder we can write, not a folder itself, and neither it nor its `companions` (the same
    name with these suffixes, e.g. ".pc2" beside RESULT.npz) an input of the same request —
    an output is swapped in at the end and would replace it."""
    path = Path(path)
    if path.suffix.lower() != suffix:
        raise RequestError(field, f"{path.name} does not end in {suffix}", f"name the output *{suffix}")
    folder = path.resolve().parent
    if not folder.is_dir():
        raise RequestError(field, f"the folder {folder} does not exist", "create it first, or write elsewhere")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise RequestError(field, f"the folder {folder} is not writable", "write the output somewhere you may write")
    written = [path] + [path.with_suffix(extra) for extra in companions]
    for target in written:
        if target.is_dir():
            raise RequestError(field, f"{target} is a folder", "give a file name")
        for source in inputs:
            if source is not None and _same_file(target, source):
                raise RequestError(field, f"{target.name} is also an input of this request, and writing it "
                                          f"would replace that input", "write the output to a new name")
    return path


def _same_file(first: Path, second: Path) -> bool:
    try:
        return first.exists() and Path(second).exists() and os.path.samefile(first, second)
    except OSError:
        return first.resolve() == Path(second).resolve()
