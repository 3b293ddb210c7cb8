"""CORR.npz: quadratic corrective shape keys, written atomically, read back checked (docs/correctives.md).

The corrected rig plays, per frame with shape-key weights w,

    skin = rig neutral + Σ_k w_k Δ_k                      (the user's own linear rig, untouched)
         + Σ_t  coefficient_t(w) · term_t                (the correctives)

where a term named (a, "") is a linear correction (coefficient w_a), (a, a) a key's own
quadratic corrective (w_a²) and (a, b) a pair corrective (w_a · w_b). Only numpy: the same
evaluation is what the add-on's drivers reproduce.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..npz_files import NpzReadError, read_npz, write_npz_atomically

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "key_names", "term_names", "terms", "vertex_count", "pairs",
                 "probe_deviation_mm", "pair_kept", "threshold_mm", "sample_weights", "sample_error_mm",
                 "sample_linear_error_mm", "sample_in_fit")


class CorrectivesFormatError(ValueError):
    """CORR.npz is not a corrective file this solver can play; the message says why and the fix."""


def _error(path, key: str, problem: str) -> CorrectivesFormatError:
    return CorrectivesFormatError(f"{path}: {key}: {problem}. Fix: build the correctives again with "
                                  f"`python -m solver correctives MODEL.npz FIT.npz RIG.npz -o {Path(path).name}`.")


def save_correctives(path, arrays: dict) -> None:
    arrays = dict(arrays, format_version=np.array(FORMAT_VERSION))
    check_correctives(arrays, path)
    write_npz_atomically(Path(path), arrays)


def load_correctives(path, rig_names=None, vertex_count=None) -> dict:
    """The arrays of CORR.npz, checked; with the rig's shape-key names and vertex count, checked
    to belong to that rig."""
    path = Path(path)
    if not path.is_file():
        raise CorrectivesFormatError(f"{path}: no such file. Fix: make it with `python -m solver correctives "
                                     f"MODEL.npz FIT.npz RIG.npz -o {path.name}`.")
    try:
        arrays = read_npz(path)     # allow_pickle=False (npz_files.py)
    except NpzReadError as error:
        raise CorrectivesFormatError(f"{error}. Fix: give a CORR.npz written by `python -m solver correctives`.") \
            from None
    check_correctives(arrays, path)
    if vertex_count is not None and int(arrays["vertex_count"]) != vertex_count:
        raise CorrectivesFormatError(f"{path}: made for a mesh of {int(arrays['vertex_count'])} vertices, the rig "
                                     f"has {vertex_count}. Fix: give the rig the correctives were built for, or "
                                     f"build them again for this one.")
    if rig_names is not None:
        missing = [str(name) for name in arrays["key_names"] if str(name) not in set(rig_names)]
        if missing:
            raise CorrectivesFormatError(f"{path}: shape keys {', '.join(missing)} are not in the rig. Fix: give the "
                                         f"rig the correctives were built for, or build them again.")
    return arrays


def check_correctives(arrays: dict, path="CORR.npz") -> None:
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing:
        raise _error(path, missing[0], "missing (this is not a CORR.npz, or an incomplete one)")
    if int(arrays["format_version"]) > FORMAT_VERSION:
        raise CorrectivesFormatError(f"{path}: format_version {int(arrays['format_version'])} is newer than this "
                                     f"solver reads ({FORMAT_VERSION}). Fix: update the Face Physics solver.")
    for key in ("key_names", "term_names", "pairs"):
        if arrays[key].dtype.kind != "U":
            raise _error(path, key, f"expected strings, found dtype {arrays[key].dtype}")
    keys = [str(name) for name in arrays["key_names"]]
    if arrays["key_names"].ndim != 1 or len(set(keys)) != len(keys):
        raise _error(path, "key_names", "expected a 1-D list of distinct shape-key names")
    names, terms = arrays["term_names"], arrays["terms"]
    vertices = int(arrays["vertex_count"])
    if names.ndim != 2 or names.shape[1] != 2:
        raise _error(path, "term_names", f"expected shape (N, 2), found {names.shape}")
    if terms.dtype.kind != "f" or terms.shape != (len(names), vertices, 3):
        raise _error(path, "terms", f"expected floats of shape ({len(names)}, {vertices}, 3), found "
                                    f"{terms.dtype} {terms.shape}")
    if not np.all(np.isfinite(terms)):
        raise _error(path, "terms", "holds NaN or infinite offsets")
    known = set(keys)
    for first, second in names:
        if first not in known or (second and second not in known):
            raise _error(path, "term_names", f"({first!r}, {second!r}) names a key not in key_names")
    pairs = arrays["pairs"]
    count = len(pairs)
    if pairs.ndim != 2 or (count and pairs.shape[1] != 2):
        raise _error(path, "pairs", f"expected shape (C, 2), found {pairs.shape}")
    for key in ("probe_deviation_mm", "pair_kept"):
        if arrays[key].shape != (count,):
            raise _error(path, key, f"expected one value per pair ({count}), found shape {arrays[key].shape}")
    samples = arrays["sample_weights"]
    if samples.ndim != 2 or samples.shape[1] != len(keys):
        raise _error(path, "sample_weights", f"expected shape (S, {len(keys)}), found {samples.shape}")
    for key in ("sample_error_mm", "sample_linear_error_mm", "sample_in_fit"):
        if arrays[key].shape != (len(samples),):
            raise _error(path, key, f"expected one value per sample ({len(samples)}), found {arrays[key].shape}")


def term_coefficients(term_names, key_names, weights: np.ndarray) -> np.ndarray:
    """(T, N): each term's coefficient per frame, from `weights` (T, K) in `key_names` order:
    w_a for a linear correction (a, ""), w_a · w_b for a quadratic one (a, b), a == b included."""
    column = {str(name): index for index, name in enumerate(key_names)}
    weights = np.atleast_2d(np.asarray(weights, dtype=np.float64))
    first = weights[:, [column[str(a)] for a, _ in term_names]]
    second = np.stack([weights[:, column[str(b)]] if str(b) else np.ones(len(weights)) for _, b in term_names],
                      axis=1) if len(term_names) else np.ones((len(weights), 0))
    return first * second


class CorrectedRig:
    """A rig (neutral, deltas, names) with its correctives; `frame(w)` is one frame's skin for the
    rig's weights w (K_rig,) — the per-frame cost is one (N + K_rig)-term weighted sum."""

    def __init__(self, neutral: np.ndarray, deltas: np.ndarray, rig_names, correctives: dict):
        self.neutral = np.asarray(neutral, dtype=np.float64)
        self.rig_names = [str(name) for name in rig_names]
        self.columns = [self.rig_names.index(str(name)) for name in correctives["key_names"]]
        self.term_names = correctives["term_names"]
        # One stack, linear deltas first: a frame is a single tensordot.
        self.shapes = np.concatenate([np.asarray(deltas, dtype=np.float64),
                                      np.asarray(correctives["terms"], dtype=np.float64)])
        self.key_names = correctives["key_names"]

    def coefficients(self, weights: np.ndarray) -> np.ndarray:
        weights = np.atleast_2d(weights)
        return np.concatenate([weights, term_coefficients(self.term_names, self.key_names,
                                                          weights[:, self.columns])], axis=1)

    def frame(self, weights: np.ndarray) -> np.ndarray:
        return self.neutral + np.tensordot(self.coefficients(weights)[0], self.shapes, axes=1)

    def linear_frame(self, weights: np.ndarray) -> np.ndarray:
        return self.neutral + np.tensordot(np.asarray(weights, dtype=np.float64), self.shapes[:len(self.rig_names)],
                                           axes=1)
