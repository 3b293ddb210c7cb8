"""Takes on disk: every bake is a named take, a folder of its own in the object's takes folder
(`face_physics/<blend>_<object>_takes/FP_take_001/`, storage.takes_folder), never overwritten.

No bpy here, so the format is tested anywhere. A take folder is the bake's animate job folder
(job.json and its inputs, job_files.write_animate_job) plus `take.json`:

    name, created (ISO 8601, UTC), object, first_frame, last_frame, target (PC2 | SHAPE_KEYS |
    ACTION), metres_per_unit, status (running | cancelled | failed | finished), frames_done,
    frames, seconds_per_frame, warnings (list), settings (the job's simulation settings), action
    (the shape-key action it was baked from, or "")

While the solver runs, the frames grow in `.result.partial/result.pc2` (watchable: the Mesh Cache
modifier points there from the start) with the resume state beside them; a finished take holds
`result.npz` and `result.pc2` beside its inputs, less the links to the model and the fit.
`take.json` is written through a temporary file and swapped, like every file the add-on writes.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional

import numpy as np

from .job_files import write_text_atomically

TAKE_FILE = "take.json"
TAKE_PREFIX = "FP_take_"
PARTIAL_FOLDER = ".result.partial"         # solver/requests/animate.py partial_folder for result.npz
RESULT_FILE = "result.npz"
RESULT_CACHE = "result.pc2"
STATUSES = ("running", "cancelled", "failed", "finished")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,62}$")
# What a finished take drops: its links to the model and fit beside the .blend, which only a resume
# would read and which would otherwise keep every rebuilt model's bytes alive. The small inputs
# stay, so a take says exactly what was simulated.
_DROPPED = {"model.npz", "fit.npz"}


class TakeError(ValueError):
    """A take cannot be made, read, renamed or resumed (the message says why and what to do)."""


@dataclass
class Take:
    name: str
    object: str
    first_frame: int
    last_frame: int
    target: str
    metres_per_unit: float
    created: str = ""
    status: str = "running"
    frames_done: int = 0
    seconds_per_frame: float = 0.0
    warnings: List[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    action: str = ""
    folder: Optional[Path] = None           # not stored: where the take was read from

    @property
    def frames(self) -> int:
        return self.last_frame - self.first_frame + 1

    @property
    def cache(self) -> Path:
        """The cache to show: the finished one, or the frames the solver has written so far."""
        finished = self.folder / RESULT_CACHE
        return finished if self.status == "finished" or finished.is_file() else self.folder / PARTIAL_FOLDER / \
            RESULT_CACHE

    @property
    def resumable(self) -> bool:
        return self.status in ("cancelled", "failed") and (self.folder / PARTIAL_FOLDER / "state.npz").is_file()

    def save(self) -> None:
        record = {key: value for key, value in asdict(self).items() if key != "folder"}
        record["frames"] = self.frames
        write_text_atomically(self.folder / TAKE_FILE, json.dumps(record, indent=2))


def settings_summary(settings: dict) -> str:
    """One line of what a take was simulated with, for the Takes list."""
    parts = ["dynamic" + (f", {settings.get('substeps', 1)} substeps" if settings.get("substeps", 1) > 1 else "")
             if settings.get("dynamic") else "quasi-static"]
    if settings.get("actuation", "phace") != "phace":
        parts.append(settings["actuation"].replace("-", " "))
    if settings.get("collisions"):
        parts.append("+".join(settings["collisions"]) + " contact")
    parts += [name for name, on in (("gravity", settings.get("gravity")), ("wind", settings.get("wind")),
                                    ("no detail", settings.get("detail") is False),
                                    ("no skin filter", settings.get("skin_filter") is False)) if on]
    if settings.get("fat_scale", 1.0) != 1.0:
        parts.append(f"fat ×{settings['fat_scale']:g}")
    return " · ".join(parts)


def check_name(name: str) -> str:
    name = name.strip()
    if not _NAME.match(name):
        raise TakeError(f"{name!r} is not a take name: use letters, digits, spaces, '_', '-' or '.', up to 63 "
                        f"characters, starting with a letter or digit")
    return name


def new_take(takes_folder, template: Take) -> Take:
    """Create the next free `FP_take_NNN` folder (exclusively: two bakes never share one) and
    its take.json; `template` gives everything but the name, folder and date."""
    takes_folder = Path(takes_folder)
    takes_folder.mkdir(parents=True, exist_ok=True)
    taken = {take.name for take in list_takes(takes_folder)} | {path.name for path in takes_folder.iterdir()}
    number = 1
    while True:
        name = f"{TAKE_PREFIX}{number:03d}"
        if name not in taken:
            try:
                (takes_folder / name).mkdir()
                break
            except FileExistsError:
                pass
        number += 1
    take = Take(**{**{key: value for key, value in asdict(template).items() if key != "folder"},
                   "name": name, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    take.folder = takes_folder / name
    take.save()
    return take


def read_take(folder) -> Take:
    folder = Path(folder)
    try:
        record = json.loads((folder / TAKE_FILE).read_text(encoding="utf-8"))
        record.pop("frames", None)
        take = Take(**record)
    except (OSError, ValueError, TypeError) as error:
        raise TakeError(f"{folder / TAKE_FILE} cannot be read ({error})") from None
    if take.status not in STATUSES:
        raise TakeError(f"{folder / TAKE_FILE}: unknown status {take.status!r}")
    take.folder = folder
    return take


def list_takes(takes_folder) -> List[Take]:
    """The takes in the folder, oldest first (by creation date, then name); unreadable folders
    are left out (and left alone)."""
    takes_folder = Path(takes_folder)
    if not takes_folder.is_dir():
        return []
    takes = []
    for folder in sorted(takes_folder.iterdir()):
        if folder.is_dir() and (folder / TAKE_FILE).is_file():
            try:
                takes.append(read_take(folder))
            except TakeError:
                continue
    return sorted(takes, key=lambda take: (take.created, take.name))


def find_take(takes_folder, name: str) -> Take:
    for take in list_takes(takes_folder):
        if take.name == name:
            return take
    raise TakeError(f"there is no take {name!r} in {takes_folder}; press Refresh in the Takes list")


def rename_take(take: Take, new_name: str) -> Take:
    """Rename the take and its folder; refuses a name another take has (never overwrites)."""
    new_name = check_name(new_name)
    if new_name == take.name:
        return take
    target = take.folder.parent / new_name
    if target.exists() or any(other.name == new_name for other in list_takes(take.folder.parent)):
        raise TakeError(f"a take named {new_name!r} exists already; choose another name")
    os.rename(take.folder, target)
    take.folder, take.name = target, new_name
    take.save()
    return take


def delete_take(take: Take) -> None:
    shutil.rmtree(take.folder)


def finish_take(take: Take, seconds_per_frame: float, warnings: List[str]) -> None:
    """Mark a take finished and drop its links to the model and the fit (`_DROPPED`)."""
    take.status, take.frames_done = "finished", take.frames
    take.seconds_per_frame, take.warnings = float(seconds_per_frame), list(warnings)
    for name in _DROPPED:
        (take.folder / name).unlink(missing_ok=True)
    take.save()


def saved_records(take: Take) -> dict:
    """The per-frame records (RESULT.npz's per-frame arrays) of the frames a cancelled or failed
    take kept, from its resume state; {} without one."""
    state = take.folder / PARTIAL_FOLDER / "state.npz"
    try:
        with np.load(state, allow_pickle=False) as saved:
            return {name[len("record_"):]: np.array(saved[name]) for name in saved.files if name.startswith("record_")}
    except (OSError, ValueError):
        return {}


def saved_frames(take: Take) -> int:
    """Frames a resume would keep: those the resume state counts (0 without one)."""
    state = take.folder / PARTIAL_FOLDER / "state.npz"
    try:
        with np.load(state, allow_pickle=False) as saved:
            return int(saved["frames_done"])
    except (OSError, ValueError, KeyError):
        return 0
