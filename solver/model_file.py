"""The volumetric face-model file (MODEL.npz): save atomically, load with validation.

Every key is documented in docs/model-format.md. Loaded with allow_pickle=False;
build information travels as a JSON string, never as a pickled object.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .npz_files import NpzReadError, read_npz, write_npz_atomically

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
OPTIONAL_KEYS = ("skin_faces", "upper_teeth_vertices", "upper_teeth_triangles", "lower_teeth_vertices", "lower_teeth_triangles")


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
    if version < 1:
        raise ModelFormatError(f"format_version: {version} is not a valid version (versions start at 1).")
    if version > FORMAT_VERSION:
        raise ModelFormatError(f"format_version: the model is version {version}, this solver reads up to "
                               f"{FORMAT_VERSION}. Update the solver.")
    nodes, tets = model["rest_positions"], model["tets"]
    m = len(tets)

    def indexes(values, count):
        return values.size == 0 or (values.min() >= 0 and values.max() < count)

    checks = {
        "rest_positions": nodes.shape[1:] == (3,),
        "tets": tets.shape[1:] == (4,) and indexes(tets, len(nodes)),
        "pin_nodes": indexes(model["pin_nodes"], len(nodes)),
        "slide_nodes": indexes(model["slide_nodes"], len(nodes)),
        "skin_triangles": model["skin_triangles"].shape[1:] == (3,)
        and indexes(model["skin_triangles"], len(model["skin_vertices"])),
        "bone_surface_triangles": model["bone_surface_triangles"].shape[1:] == (3,)
        and indexes(model["bone_surface_triangles"], len(model["bone_surface_vertices"])),
        "bone_surface_label": model["bone_surface_label"].shape == (len(model["bone_surface_triangles"]),)
        and indexes(model["bone_surface_label"], len(model["bone_names"])),
        "landmark_positions": model["landmark_positions"].shape == (len(model["landmark_names"]), 3),
        "tet_rest_volume": model["tet_rest_volume"].shape == (m,),
        "node_mass": model["node_mass"].shape == (len(nodes),),
        "muscle_fraction": model["muscle_fraction"].shape == (m, len(model["muscle_names"])),
        "passive_fraction": model["passive_fraction"].shape == (m,),
        "muscle_direction": model["muscle_direction"].shape == (m, 3, 3),
        "skin_embedding_weights": model["skin_embedding_weights"].shape == (len(model["skin_vertices"]), 4),
        "skin_embedding_tet": model["skin_embedding_tet"].shape == (len(model["skin_vertices"]),)
        and indexes(model["skin_embedding_tet"], m),
        "pin_bone": model["pin_bone"].shape == model["pin_nodes"].shape
        and indexes(model["pin_bone"], len(model["bone_names"])),
        "slide_bone": model["slide_bone"].shape == model["slide_nodes"].shape
        and indexes(model["slide_bone"], len(model["bone_names"])),
        "slide_normals": model["slide_normals"].shape == (len(model["slide_nodes"]), 3),
    }
    if "skin_faces" in model:
        faces = np.asarray(model["skin_faces"])
        # (F,3) triangles or (F,4) quads whose fourth corner is -1 for a triangle
        well_shaped = faces.dtype.kind in "iu" and faces.ndim == 2 and faces.shape[1] in (3, 4)
        checks["skin_faces"] = well_shaped and indexes(faces[:, :3], len(model["skin_vertices"])) and (
            faces.shape[1] == 3 or indexes(faces[faces[:, 3] != -1, 3], len(model["skin_vertices"])))
    for key, ok in checks.items():
        if not ok:
            raise ModelFormatError(f"{key}: inconsistent with the rest of the model (shape or index range).")


def save_model(path, model: dict) -> None:
    """Validate and write atomically; uncompressed, because models are loaded far more often than written."""
    validate_model(model)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_npz_atomically(path, model, compressed=False)


def load_model(path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ModelFormatError(f"{path}: no such model file. Build one with `python -m solver build-model`.")
    try:
        model = read_npz(path)
    except NpzReadError as error:
        raise ModelFormatError(f"{error}: not a readable model file. Rebuild it.") from None
    validate_model(model)
    return model


def build_info(model: dict) -> dict:
    return json.loads(str(model["build_info"]))


def model_head_axes(model: dict) -> np.ndarray:
    """(3, 3) the head frame's rows left, up, forward (docs/model-format.md), each scaled to unit
    length."""
    axes = np.asarray(model["head_frame"], dtype=np.float64)
    return axes / np.linalg.norm(axes, axis=1, keepdims=True)


def model_landmarks(model: dict) -> dict:
    """{landmark name: world position (3,) float64} of a model."""
    positions = np.asarray(model["landmark_positions"], dtype=np.float64)
    return {str(name): positions[index] for index, name in enumerate(model["landmark_names"])}
