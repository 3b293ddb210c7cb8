"""Resumable bakes: after every frame the animation saves where it is, so a cancelled or crashed
bake continues from its last finished frame instead of from the first.

`state.npz`, beside the growing `.pc2` in the bake's partial folder (requests/animate.py), holds
the simulator's snapshot after the last finished frame (simulator.FaceSimulator.snapshot), the
per-frame records of every finished frame (`record_*`: RESULT.npz's per-frame arrays, cut to the
frames done), `frames_done`, `frames` and the request's `fingerprint`. The skin of the finished
frames is read back from the `.pc2` (float32: within 1e-8 m of the simulated skin for a face
of human size). It is written atomically after the frame's `.pc2` sample, so the cache always
holds at least the frames the state counts.

A resume is refused, with the reason, when the fingerprint (the settings and the bytes of every
input) differs: a resumed bake is the bake that was started, never a mix of two.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Dict, Iterable, Optional, Tuple

import numpy as np

from ..npz_files import write_npz_atomically

STATE_FILE = "state.npz"
FACTOR_PREFIX = "factor_"
RECORD_PREFIX = "record_"
_SNAPSHOT_KEYS = ("positions", "velocity", "skin_correction", "previous_head", "previous_jaw", "frame_index",
                  "carried_keys", "carried_multipliers", "previous_activation",
                  "previous_frame_start")


class ResumeError(ValueError):
    """The saved state cannot continue this bake (says why; the fix is a fresh bake)."""


def fingerprint(settings: dict, inputs: Iterable[Optional[Path]]) -> str:
    """sha256 of the settings (as sorted JSON) and of every input file's bytes, in order."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in inputs:
        digest.update(b"\0none" if path is None else b"\0file")
        if path is not None:
            with open(path, "rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


class Checkpoint:
    """The state file of one bake: `save` after each frame, `load` to resume.

    The Newton solver's kept factor (linear_solver.CholmodLinearSolver.kept_factor) preconditions the
    next frames; without it a resumed bake reaches equilibria a solver tolerance away from the
    uninterrupted one's (2.9 µm on the demo head). It is saved as `factor_<n>.npz`, n counting
    the factorisations, only when a new one was made (most frames reuse the last), before the
    state that names it; older ones are removed once the state no longer does."""

    def __init__(self, folder, fingerprint_hex: str, frames: int):
        self.folder = Path(folder)
        self.path = self.folder / STATE_FILE
        self.fingerprint = fingerprint_hex
        self.frames = int(frames)
        self._saved_factor = -1

    def _factor_path(self, generation: int) -> Path:
        return self.folder / f"{FACTOR_PREFIX}{generation}.npz"

    def save(self, frames_done: int, snapshot: Dict[str, np.ndarray], records: Dict[str, np.ndarray],
             factor: Optional[Tuple[int, Callable[[], Optional[dict]]]] = None) -> None:
        """`factor`: (the solver's factorisation count, a function giving its kept factor)."""
        generation = -1
        if factor is not None:
            count, kept = factor
            if count != self._saved_factor:
                arrays = kept()
                if arrays is not None:
                    write_npz_atomically(self._factor_path(count), arrays, compressed=False)
                self._saved_factor = count if arrays is not None else -1
            generation = self._saved_factor
        arrays = {**snapshot, **{RECORD_PREFIX + name: np.asarray(values)[:frames_done]
                                 for name, values in records.items()},
                  "frames_done": np.array(frames_done, np.int64), "frames": np.array(self.frames, np.int64),
                  "fingerprint": np.array(self.fingerprint), "factor_generation": np.array(generation, np.int64)}
        write_npz_atomically(self.path, arrays, compressed=False)   # per frame: speed over size
        for old in self.folder.glob(f"{FACTOR_PREFIX}*.npz"):
            if old != self._factor_path(generation):
                old.unlink(missing_ok=True)

    def load(self):
        """(frames done, simulator snapshot, per-frame records, kept factor or None) of the saved
        bake."""
        if not self.path.is_file():
            raise ResumeError(f"there is nothing to resume: {self.path} does not exist (the bake finished, "
                              f"was never started, or its partial folder was removed)")
        try:
            with np.load(self.path, allow_pickle=False) as saved:
                arrays = {name: np.array(saved[name]) for name in saved.files}
        except (OSError, ValueError) as error:
            raise ResumeError(f"{self.path} cannot be read ({error})") from None
        if str(arrays.get("fingerprint", "")) != self.fingerprint:
            raise ResumeError("the saved bake was made with other inputs or settings than this one")
        if int(arrays.get("frames", -1)) != self.frames:
            raise ResumeError(f"the saved bake has {int(arrays.get('frames', -1))} frames, this one {self.frames}")
        done = int(arrays["frames_done"])
        if not 0 <= done <= self.frames:
            raise ResumeError(f"{self.path} is damaged (frames done {done} of {self.frames})")
        snapshot = {name: arrays[name] for name in _SNAPSHOT_KEYS if name in arrays}
        records = {name[len(RECORD_PREFIX):]: values for name, values in arrays.items()
                   if name.startswith(RECORD_PREFIX)}
        generation = int(arrays.get("factor_generation", -1))
        factor = None
        if generation >= 0:
            try:
                with np.load(self._factor_path(generation), allow_pickle=False) as saved:
                    factor = {name: np.array(saved[name]) for name in saved.files}
            except (OSError, ValueError) as error:
                raise ResumeError(f"the saved solver factor {self._factor_path(generation).name} cannot be read "
                                  f"({error})") from None
            self._saved_factor = generation
        return done, snapshot, records, factor
