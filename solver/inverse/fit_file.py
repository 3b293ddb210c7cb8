"""FIT.npz: the activations and jaw pose fitted to each shape key (docs/inverse-physics.md, "FIT.npz").

Written atomically, read without unpickling, validated against the model it belongs to.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..npz_files import NpzReadError, read_npz, write_npz_atomically
from ..physics.activation import active_tet_indices
from ..physics.active_stiffening import STIFFENING_AT_FULL

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "shape_key_names", "activations", "jaw", "fit_error_mm", "status",
                 "detail_residual", "neutral_activations", "tet_count", "skin_vertex_count")


class FitFormatError(ValueError):
    """FIT.npz is missing, damaged, or does not belong to the model it is used with."""


def shape_contexts(fit) -> list[str]:
    """Per shape of a fit (FIT.npz arrays), the shape it was fitted on top of (`fit_context`:
    jawOpen for mouthClose), '' for the others and in fits made before the key existed."""
    if "fit_context" in fit:
        return [str(context) for context in fit["fit_context"]]
    return [""] * len(fit["shape_key_names"])


def save_fit(path, arrays: dict) -> None:
    """Write a fit made by this solver: it records the muscle stiffening it was fitted with."""
    arrays = dict(arrays, format_version=np.array(FORMAT_VERSION), muscle_stiffening=np.array(STIFFENING_AT_FULL))
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing:
        raise FitFormatError(f"cannot write a fit without {', '.join(missing)}")
    write_npz_atomically(Path(path), arrays)


def fitted_stiffening(fit) -> float:
    """The muscles' stiffening at full contraction a fit was made with (1: before muscles
    stiffened as they contract, physics/active_stiffening.py)."""
    return float(fit["muscle_stiffening"]) if "muscle_stiffening" in fit else 1.0


def fit_energy_warning(fit) -> str:
    """'' when the fit was made with this solver's muscle model, else what to tell the user."""
    fitted = fitted_stiffening(fit)
    if fitted == STIFFENING_AT_FULL:
        return ""
    return (f"this fit was made with muscles {fitted:g} times stiffer at full contraction, this solver's are "
            f"{STIFFENING_AT_FULL:g}: its shape keys play back less exactly than they were fitted; fit the "
            "shapes again")


# Files a user may hand over as a fit by mistake, known by keys a fit lacks.
_OTHER_FILES = {"shape-key weights (WEIGHTS.npz)": ("names", "weights"),
                "a model (MODEL.npz)": ("tets", "rest_positions"), "a face rig (RIG.npz)": ("vertices", "faces"),
                "muscle contractions (ACTIVATIONS.npz)": ("muscle_contraction",)}


def load_fit(path, model=None) -> dict:
    """The arrays of FIT.npz; with `model`, checked to belong to it (tet, active tet and skin counts)."""
    path = Path(path)
    if not path.exists():
        raise FitFormatError(f"{path}: no such file; make it with `python -m solver fit MODEL.npz RIG.npz -o {path}`")
    try:
        fit = read_npz(path)
    except NpzReadError as error:
        raise FitFormatError(f"{error}: not a readable fit file, or a damaged one; fit the shapes again") from None
    missing = [key for key in REQUIRED_KEYS if key not in fit]
    other_kind = next((kind for kind, keys in _OTHER_FILES.items() if set(keys) <= set(fit)), None)
    if missing and other_kind:
        raise FitFormatError(f"{path}: this is {other_kind}, not a fit (FIT.npz from `python -m solver fit`); "
                             f"give the fit in its place")
    if missing:
        raise FitFormatError(f"{path}: missing {', '.join(missing)}; fit the shapes again with this solver")
    if int(fit["format_version"]) > FORMAT_VERSION:
        raise FitFormatError(f"{path}: format version {int(fit['format_version'])} is newer than this solver's "
                             f"{FORMAT_VERSION}; update the solver")
    names = fit["shape_key_names"]
    count = len(names)
    activations = fit["activations"]
    if activations.ndim != 3 or activations.shape[0] != count or activations.shape[2] != 6:
        raise FitFormatError(f"{path}: activations must be (K, A, 6) with K = {count} shape keys; "
                             f"found {activations.shape}")
    active_count = activations.shape[1]
    expected = {"jaw": (count, 5), "fit_error_mm": (count, 3), "status": (count,),
                "neutral_activations": (active_count, 6)}
    for key, shape in expected.items():
        if fit[key].shape != shape:
            raise FitFormatError(f"{path}: {key} must have shape {shape}, found {fit[key].shape}")
    residual = fit["detail_residual"]
    if residual.ndim != 3 or residual.shape[0] != count or residual.shape[2] != 3:
        raise FitFormatError(f"{path}: detail_residual must be (K, V, 3); found {residual.shape}")
    deltas = fit.get("shape_key_deltas")
    if deltas is not None and (deltas.shape != residual.shape or deltas.dtype.kind != "f"
                               or not np.all(np.isfinite(deltas))):
        raise FitFormatError(f"{path}: shape_key_deltas must be finite (K, V, 3) like detail_residual "
                             f"{residual.shape}; found {deltas.shape} {deltas.dtype}; fit the shapes again")
    held = fit.get("muscles_held")
    if held is not None and (held.dtype != bool or held.ndim != 2 or held.shape[0] != count):
        raise FitFormatError(f"{path}: muscles_held must be (K, m) booleans with K = {count}; "
                             f"found {held.shape} {held.dtype}")
    for key in ("activations", "jaw", "detail_residual", "neutral_activations"):
        if not np.all(np.isfinite(fit[key])):
            raise FitFormatError(f"{path}: {key} contains NaN or infinite values; fit the shapes again")
    if model is not None:
        model_counts = (len(model["tets"]), len(active_tet_indices(model)), len(model["skin_vertices"]))
        fit_counts = (int(fit["tet_count"]), active_count, residual.shape[1])
        if model_counts != fit_counts:
            raise FitFormatError(
                f"{path} was fitted on another model ({fit_counts[0]} tets, {fit_counts[1]} muscle tets, "
                f"{fit_counts[2]} skin vertices; this model has {model_counts[0]}, {model_counts[1]}, "
                f"{model_counts[2]}); fit the shapes again on this model")
        if held is not None and held.shape[1] != len(model["muscle_names"]):
            raise FitFormatError(f"{path}: muscles_held has {held.shape[1]} muscles, the model "
                                 f"{len(model['muscle_names'])}; fit the shapes again on this model")
    return fit
