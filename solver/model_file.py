"""The volumetric face-model file (MODEL.npz): save atomically, load with validation.

Every key is documented in docs/model-format.md. Loaded with allow_pickle=False;
build information travels as a JSON string, never as a pickled object.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

FORMAT_VERSION = 1

# key -> (dtype kind, number of dimensions); shapes are cross-checked in `validate_model`.
REQUIRED_KEYS = {
    "format_version": ("i", 0),
    "rest_positions": ("f", 2), "tets": ("i", 2), "tet_rest_volume": ("f", 1), "node_mass": ("f", 1),
    "muscle_names": ("U", 1), "muscle_fraction": ("f", 2), "passive_fraction": ("f", 1),
    "muscle_direction": ("f", 3),
    "bone_names": ("U", 1), "pin_nodes": ("i", 1), "pin_bone": ("i", 1),
    "slide_nodes": ("i", 1), "slide_bone": ("i", 1), "slide_normals": ("f", 2),
    "condyles": ("f", 2), "jaw_frame": ("f", 2), "head_frame": ("f", 2), "head_origin": ("f", 1),
    "skin_vertices": ("f", 2), "skin_triangles": ("i", 2),
    "skin_embedding_tet": ("i", 1), "skin_embedding_weights": ("f", 2),
    "bone_surface_vertices": ("f", 2), "bone_surface_triangles": ("i", 2), "bone_surface_label": ("i", 1),
    "landmark_names": ("U", 1), "landmark_positions": ("f", 2),
    "build_info": ("U", 0),
}
OPTIONAL_KEYS = ("upper_teeth_vertices", "upper_teeth_triangles", "lower_teeth_vertices", "lower_teeth_triangles")


class ModelFormatError(ValueError):
    """A model file is missing, corrupt, too new, or inconsistent; the message says which key."""


def validate_model(model: dict) -> None:
    for key, (kind, ndim) in REQUIRED_KEYS.items():
        if key not in model:
            raise ModelFormatError(f"{key}: missing from the model. Rebuild it with `python -m solver build-model`.")
        value = np.asarray(model[key])
        if value.dtype.kind != kind and not (kind == "i" and value.dtype.kind == "u"):
            raise ModelFormatError(f"{key}: expected dtype kind '{kind}', found {value.dtype}.")
        if value.ndim != ndim:
            raise ModelFormatError(f"{key}: expected {ndim} dimensions, found shape {value.shape}.")
        if kind == "f" and not np.all(np.isfinite(value)):
            raise ModelFormatError(f"{key}: contains NaN or infinite values.")
    version = int(model["format_version"])
    if version > FORMAT_VERSION:
        raise ModelFormatError(f"format_version: the model is version {version}, this solver reads up to "
                               f"{FORMAT_VERSION}. Update the solver.")
    nodes, tets = model["rest_positions"], model["tets"]
    m = len(tets)
    checks = {
        "tets": tets.shape[1:] == (4,) and (tets.size == 0 or (tets.min() >= 0 and tets.max() < len(nodes))),
        "tet_rest_volume": model["tet_rest_volume"].shape == (m,),
        "node_mass": model["node_mass"].shape == (len(nodes),),
        "muscle_fraction": model["muscle_fraction"].shape == (m, len(model["muscle_names"])),
        "passive_fraction": model["passive_fraction"].shape == (m,),
        "muscle_direction": model["muscle_direction"].shape == (m, 3, 3),
        "skin_embedding_weights": model["skin_embedding_weights"].shape == (len(model["skin_vertices"]), 4),
        "skin_embedding_tet": model["skin_embedding_tet"].shape == (len(model["skin_vertices"]),)
        and (model["skin_embedding_tet"].max(initial=0) < m),
        "pin_bone": model["pin_bone"].shape == model["pin_nodes"].shape,
        "slide_normals": model["slide_normals"].shape == (len(model["slide_nodes"]), 3),
    }
    for key, ok in checks.items():
        if not ok:
            raise ModelFormatError(f"{key}: inconsistent with the rest of the model (shape or index range).")


def save_model(path, model: dict) -> None:
    validate_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".npz")
    try:
        with os.fdopen(handle, "wb") as stream:
            np.savez(stream, **model)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def load_model(path) -> dict:
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            model = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such model file. Build one with `python -m solver build-model`.") from None
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise ModelFormatError(f"{path}: not a readable model file ({error}).") from None
    validate_model(model)
    return model


def build_info(model: dict) -> dict:
    return json.loads(str(model["build_info"]))
