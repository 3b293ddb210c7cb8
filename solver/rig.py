"""The face-rig format: what the add-on exports and every solver command reads.

A rig is an ``.npz`` holding a skin mesh in metres, its shape keys as deltas, and
optional teeth, bones, vertex groups and landmarks. See docs/face-rig-format.md.

Only numpy and the standard library are imported here, so the Blender add-on can
validate a rig before handing it to the solver process.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Dict, Optional, Union

import numpy as np

from .npz_files import NpzReadError, read_npz, write_npz_atomically

FORMAT_VERSION = 1

# A face this small cannot carry a stable normal or stiffness; it is a modelling error.
MIN_TRIANGLE_AREA_M2 = 1e-14

# A human head spans roughly 0.2-0.6 m corner to corner; exported in centimetres it
# reads as 20-60 "m", in millimetres as 200-600. The bounds leave room for anything
# from a face patch to a full bust in the right unit, and place the cm/mm split where
# both readings would mean a skin of 0.15-1.5 m.
_CENTIMETRES_ABOVE_M = 1.5
_MILLIMETRES_ABOVE_M = 150.0
_TOO_SMALL_BELOW_M = 0.03

_MIN_SKIN_VERTICES = 4
_MIN_MESH_VERTICES = 3
_QUAD_PADDING = -1


class RigFormatError(ValueError):
    """A face-rig file or object breaks the format; the message names the key and the fix."""


@dataclass
class FaceRig:
    vertices: np.ndarray                 # (V,3) float64, metres
    faces: np.ndarray                    # (F,3) or (F,4) int32/int64; -1 pads triangles in a quad array
    shape_key_names: np.ndarray          # (K,) str
    shape_key_deltas: np.ndarray         # (K,V,3) float, metres, shape minus neutral
    upper_teeth_vertices: Optional[np.ndarray] = None
    upper_teeth_faces: Optional[np.ndarray] = None
    lower_teeth_vertices: Optional[np.ndarray] = None
    lower_teeth_faces: Optional[np.ndarray] = None
    skull_vertices: Optional[np.ndarray] = None
    skull_faces: Optional[np.ndarray] = None
    jaw_vertices: Optional[np.ndarray] = None
    jaw_faces: Optional[np.ndarray] = None
    vertex_group_names: Optional[np.ndarray] = None   # (G,) str
    vertex_group_weights: Optional[np.ndarray] = None  # (G,V) float in [0,1]
    landmark_names: Optional[np.ndarray] = None        # (L,) str
    landmark_vertices: Optional[np.ndarray] = None     # (L,) int, skin vertex indices

    def shape_key(self, name: str) -> np.ndarray:
        names = [str(n) for n in self.shape_key_names]
        if name not in names:
            raise KeyError(name)
        return self.shape_key_deltas[names.index(name)]

    def has_shape_key(self, name: str) -> bool:
        return name in {str(n) for n in self.shape_key_names}


_RIG_KEYS = tuple(field.name for field in dataclasses.fields(FaceRig))
_REQUIRED_KEYS = ("vertices", "faces", "shape_key_names", "shape_key_deltas")
_OPTIONAL_MESHES = (
    ("upper_teeth_vertices", "upper_teeth_faces"),
    ("lower_teeth_vertices", "lower_teeth_faces"),
    ("skull_vertices", "skull_faces"),
    ("jaw_vertices", "jaw_faces"),
)
_OPTIONAL_PAIRS = _OPTIONAL_MESHES + (
    ("vertex_group_names", "vertex_group_weights"),
    ("landmark_names", "landmark_vertices"),
)
_NAME_KEYS = frozenset({"shape_key_names", "vertex_group_names", "landmark_names"})
_INDEX_KEYS = frozenset({"faces", "landmark_vertices"} | {faces for _, faces in _OPTIONAL_MESHES})
_REAL_KEYS = frozenset(_RIG_KEYS) - _NAME_KEYS - _INDEX_KEYS

_REAL_KINDS = "fiu"
_INDEX_KINDS = "iu"
_FORMAT_DOC = "see docs/face-rig-format.md"

PathLike = Union[str, os.PathLike]


def _error(key: str, problem: str, fix: str) -> RigFormatError:
    return RigFormatError(f"{key}: {problem}. Fix: {fix}.")


# --------------------------------------------------------------------------- validation

def validate_rig(rig: FaceRig) -> None:
    """Raise RigFormatError for the first way ``rig`` breaks the format; return None if it is valid."""
    arrays = _present_arrays(rig)
    _check_presence(arrays)
    for key, array in arrays.items():
        _check_dtype(key, array)

    _check_mesh("vertices", "faces", arrays, min_vertices=_MIN_SKIN_VERTICES, is_skin=True)
    skin_vertex_count = arrays["vertices"].shape[0]
    _check_shape_keys(arrays, skin_vertex_count)
    for vertices_key, faces_key in _OPTIONAL_MESHES:
        if vertices_key in arrays:
            _check_mesh(vertices_key, faces_key, arrays, min_vertices=_MIN_MESH_VERTICES, is_skin=False)
    if "vertex_group_names" in arrays:
        _check_vertex_groups(arrays, skin_vertex_count)
    if "landmark_names" in arrays:
        _check_landmarks(arrays, skin_vertex_count)


def _present_arrays(rig: FaceRig) -> Dict[str, np.ndarray]:
    # np.asarray lets a rig built from plain lists be checked instead of crashing on .shape.
    return {key: np.asarray(getattr(rig, key)) for key in _RIG_KEYS if getattr(rig, key) is not None}


def _check_presence(arrays: Dict[str, np.ndarray]) -> None:
    for key in _REQUIRED_KEYS:
        if key not in arrays:
            raise _error(key, "required key is missing",
                         f"export it (every rig needs {', '.join(_REQUIRED_KEYS)}; K may be 0); {_FORMAT_DOC}")
    for first, second in _OPTIONAL_PAIRS:
        if (first in arrays) != (second in arrays):
            given, absent = (first, second) if first in arrays else (second, first)
            raise _error(absent, f"{given} is given without {absent}; they come as a pair",
                         f"write both {first} and {second}, or neither")


def _check_dtype(key: str, array: np.ndarray) -> None:
    kind = array.dtype.kind
    if key in _NAME_KEYS:
        # An empty name list carries no text, so its dtype (often float from np.array([])) is harmless.
        if array.size and kind != "U":
            raise _error(key, f"names must be strings, got dtype {array.dtype}",
                         "store them as np.array(names, dtype=str)")
    elif key in _INDEX_KEYS:
        if kind not in _INDEX_KINDS:
            raise _error(key, f"vertex indices must be integers, got dtype {array.dtype}",
                         "store whole-number indices with .astype(np.int64)")
    elif kind not in _REAL_KINDS:
        raise _error(key, f"values must be real numbers, got dtype {array.dtype}",
                     "store floating-point values (np.float64), lengths in metres")


def _check_finite(key: str, array: np.ndarray) -> None:
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _error(key, f"{int(bad.sum())} values are NaN or infinite; first at index {first}",
                     "fix the export so every value is a finite number")


def _check_vertex_array(key: str, vertices: np.ndarray, min_vertices: int) -> None:
    if vertices.ndim != 2 or vertices.shape[1] != 3:
        raise _error(key, f"expected shape (N, 3), got {vertices.shape}",
                     "write one row of x, y, z per vertex")
    if vertices.shape[0] < min_vertices:
        raise _error(key, f"has {vertices.shape[0]} vertices; the mesh needs at least {min_vertices}",
                     "export the whole mesh, not a selection of a few vertices")
    _check_finite(key, vertices)


def _check_units(key: str, vertices: np.ndarray, is_skin: bool) -> None:
    diagonal = float(np.linalg.norm(vertices.max(axis=0) - vertices.min(axis=0)))
    if diagonal > _MILLIMETRES_ABOVE_M:
        raise _error(key, f"bounding-box diagonal is {diagonal:.3g} m, which looks like millimetres — "
                          "export in metres or apply scale 0.001",
                     "in Blender apply the object's scale and export with unit scale 1 (metres)")
    if diagonal > _CENTIMETRES_ABOVE_M:
        raise _error(key, f"bounding-box diagonal is {diagonal:.3g} m, which looks like centimetres — "
                          "export in metres or apply scale 0.01",
                     "in Blender apply the object's scale and export with unit scale 1 (metres)")
    if is_skin and diagonal < _TOO_SMALL_BELOW_M:
        raise _error(key, f"bounding-box diagonal is {diagonal:.3g} m, too small for a face "
                          f"(expected {_TOO_SMALL_BELOW_M}-{_CENTIMETRES_ABOVE_M} m)",
                     "export in metres; a scale was probably applied twice")


def _check_mesh(vertices_key: str, faces_key: str, arrays: Dict[str, np.ndarray],
                min_vertices: int, is_skin: bool) -> None:
    vertices, faces = arrays[vertices_key], arrays[faces_key]
    _check_vertex_array(vertices_key, vertices, min_vertices)
    _check_units(vertices_key, vertices, is_skin)

    if faces.ndim != 2 or faces.shape[1] not in (3, 4):
        raise _error(faces_key, f"expected shape (F, 3) or (F, 4), got {faces.shape}",
                     "write one row of vertex indices per triangle or quad")
    if faces.shape[0] == 0:
        raise _error(faces_key, "has no faces", f"export the polygons of {vertices_key}")

    faces = faces.astype(np.int64, copy=False)
    used = _used_corners(faces)
    _report_faces(faces_key, (faces < 0) & used, "hold negative vertex indices",
                  f"only {_QUAD_PADDING} in the 4th column (a triangle padded in a quad array) may be negative")
    _report_faces(faces_key, (faces >= vertices.shape[0]) & used,
                  f"index past the last vertex of {vertices_key} ({vertices.shape[0]} vertices)",
                  f"faces must index into {vertices_key}, counting from 0")

    repeated = np.zeros(faces.shape[0], dtype=bool)
    for a in range(faces.shape[1]):
        for b in range(a + 1, faces.shape[1]):
            repeated |= (faces[:, a] == faces[:, b]) & used[:, a] & used[:, b]
    _report_faces(faces_key, repeated, "use the same vertex twice",
                  "remove degenerate faces (Blender: Mesh > Clean Up > Merge by Distance)")

    _report_faces(faces_key, _smallest_triangle_areas(vertices, faces) < MIN_TRIANGLE_AREA_M2,
                  f"have zero area (a triangle, or a half of a quad split along corners 0-2, "
                  f"under {MIN_TRIANGLE_AREA_M2:g} m^2)",
                  "remove degenerate faces (Blender: Mesh > Clean Up > Degenerate Dissolve)")


def _used_corners(faces: np.ndarray) -> np.ndarray:
    """Which entries of ``faces`` name a vertex, i.e. everything but the -1 padding of quad arrays."""
    used = np.ones(faces.shape, dtype=bool)
    if faces.shape[1] == 4:
        used[:, 3] = faces[:, 3] != _QUAD_PADDING
    return used


def _report_faces(key: str, bad: np.ndarray, problem: str, fix: str) -> None:
    bad_rows = bad if bad.ndim == 1 else bad.any(axis=1)
    if bad_rows.any():
        first = int(np.flatnonzero(bad_rows)[0])
        raise _error(key, f"{int(bad_rows.sum())} faces {problem}; first is face {first}", fix)


def _smallest_triangle_areas(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """Per face, the smaller area of its triangles (0,1,2) and (0,2,3), the split triangulate() uses.

    A quad can have plenty of area while one of its halves is a sliver, and the solver sees the halves.
    """
    def area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return 0.5 * np.linalg.norm(np.cross(vertices[b] - vertices[a], vertices[c] - vertices[a]), axis=1)

    first_half = area(faces[:, 0], faces[:, 1], faces[:, 2])
    if faces.shape[1] == 3:
        return first_half
    is_quad = faces[:, 3] != _QUAD_PADDING
    # Padding rows point their 4th corner at corner 0 so the lookup stays in range; their area is ignored.
    second_half = area(faces[:, 0], faces[:, 2], np.where(is_quad, faces[:, 3], faces[:, 0]))
    return np.where(is_quad, np.minimum(first_half, second_half), first_half)


def _check_names(key: str, names: np.ndarray) -> None:
    if names.ndim != 1:
        raise _error(key, f"expected a 1-D array of names, got shape {names.shape}",
                     "write one name per entry")
    if names.size == 0:
        return
    blank = np.char.strip(names) == ""
    if blank.any():
        raise _error(key, f"{int(blank.sum())} names are empty or whitespace; first is entry {int(np.argmax(blank))}",
                     "give every entry a non-empty name")
    unique, counts = np.unique(names, return_counts=True)
    if (counts > 1).any():
        duplicates = ", ".join(f"'{name}' ({count}x)" for name, count in zip(unique[counts > 1], counts[counts > 1]))
        raise _error(key, f"duplicate names: {duplicates}", "names must be unique; rename or remove the duplicates")


def _check_shape_keys(arrays: Dict[str, np.ndarray], vertex_count: int) -> None:
    names, deltas = arrays["shape_key_names"], arrays["shape_key_deltas"]
    _check_names("shape_key_names", names)
    expected = (names.shape[0], vertex_count, 3)
    if deltas.shape != expected:
        raise _error("shape_key_deltas", f"expected shape (K, V, 3) = {expected} (K shape_key_names, "
                                         f"V vertices), got {deltas.shape}",
                     "write one (V, 3) block of shape-minus-neutral offsets per shape key, "
                     "for every skin vertex")
    _check_finite("shape_key_deltas", deltas)


def _check_vertex_groups(arrays: Dict[str, np.ndarray], vertex_count: int) -> None:
    names, weights = arrays["vertex_group_names"], arrays["vertex_group_weights"]
    _check_names("vertex_group_names", names)
    expected = (names.shape[0], vertex_count)
    if weights.shape != expected:
        raise _error("vertex_group_weights", f"expected shape (G, V) = {expected} (G vertex_group_names, "
                                             f"V vertices), got {weights.shape}",
                     "write one weight per skin vertex for every group, 0 where a vertex is not in it")
    _check_finite("vertex_group_weights", weights)
    outside = (weights < 0.0) | (weights > 1.0)
    if outside.any():
        group, vertex = (int(i) for i in np.argwhere(outside)[0])
        raise _error("vertex_group_weights",
                     f"{int(outside.sum())} weights lie outside [0, 1]; first is group '{names[group]}' "
                     f"vertex {vertex} = {weights[group, vertex]:g}",
                     "clamp the weights to [0, 1]")


def _check_landmarks(arrays: Dict[str, np.ndarray], vertex_count: int) -> None:
    names, indices = arrays["landmark_names"], arrays["landmark_vertices"]
    _check_names("landmark_names", names)
    if indices.ndim != 1:
        raise _error("landmark_vertices", f"expected a 1-D array of skin vertex indices, got shape {indices.shape}",
                     "write one vertex index per landmark")
    if indices.shape[0] != names.shape[0]:
        raise _error("landmark_vertices", f"has {indices.shape[0]} indices but landmark_names has "
                                          f"{names.shape[0]} names",
                     "write exactly one vertex index per landmark name")
    outside = (indices < 0) | (indices >= vertex_count)
    if outside.any():
        first = int(np.argmax(outside))
        raise _error("landmark_vertices",
                     f"{int(outside.sum())} indices are not skin vertices (0..{vertex_count - 1}); "
                     f"first is '{names[first]}' = {int(indices[first])}",
                     "landmarks must index into vertices (the skin), counting from 0")


# --------------------------------------------------------------------------- files

def load_rig(path: PathLike) -> FaceRig:
    """Read and validate a rig ``.npz``; raise RigFormatError naming the path on any problem."""
    path = os.fspath(path)
    arrays = _read_npz(path)
    try:
        _check_format_version(arrays.pop("format_version", None))
        # Required keys absent from the file stay None so validate_rig reports them by name.
        fields = dict.fromkeys(_REQUIRED_KEYS)
        fields.update({key: _normalised(key, array) for key, array in arrays.items()})
        rig = FaceRig(**fields)
        validate_rig(rig)
    except RigFormatError as error:
        raise RigFormatError(f"{path}: {error}") from None
    return rig


def save_rig(path: PathLike, rig: FaceRig) -> None:
    """Validate ``rig`` and write it to ``path``, replacing any old file only once the new one is complete."""
    validate_rig(rig)
    arrays = {key: _normalised(key, array) for key, array in _present_arrays(rig).items()}
    arrays["format_version"] = np.array(FORMAT_VERSION, dtype=np.int64)
    write_npz_atomically(path, arrays)


def _read_npz(path: str) -> Dict[str, np.ndarray]:
    try:
        # Unknown keys are skipped unread: newer exporters may add data this solver does not use.
        return read_npz(path, keys=set(_RIG_KEYS) | {"format_version"})
    except NpzReadError as error:
        raise RigFormatError(f"{error}; export the rig again with the add-on or save_rig") from None


def _check_format_version(version: Optional[np.ndarray]) -> None:
    # Files written before the key existed are version 1 by definition.
    if version is None:
        return
    if version.ndim != 0 or version.dtype.kind not in _INDEX_KINDS or int(version) < 1:
        raise _error("format_version", f"expected a positive integer scalar, got {version!r}",
                     f"write format_version = {FORMAT_VERSION} or leave it out")
    if int(version) > FORMAT_VERSION:
        raise _error("format_version", f"the file is format version {int(version)} but this solver reads "
                                       f"up to version {FORMAT_VERSION}",
                     "update the Face Physics solver")


def _normalised(key: str, array: np.ndarray) -> np.ndarray:
    """Convert to the dtypes the solver works in, leaving unconvertible arrays for validation to reject."""
    kind = array.dtype.kind
    if key in _NAME_KEYS:
        if array.size == 0:
            return array.astype(str)
        if kind == "S":
            try:
                return np.char.decode(array, "utf-8")
            except UnicodeDecodeError:
                raise _error(key, "byte-string names are not valid UTF-8",
                             "store them as np.array(names, dtype=str)") from None
        return array
    if key in _INDEX_KEYS:
        return array.astype(np.int64, copy=False) if kind in _INDEX_KINDS else array
    return array.astype(np.float64, copy=False) if kind in _REAL_KINDS else array


# --------------------------------------------------------------------------- triangles

def triangulate(faces: np.ndarray, vertices: Optional[np.ndarray] = None) -> np.ndarray:
    """Triangles (T,3) int64 of a face array, in face order.

    Quads split into two triangles: along their shorter diagonal when `vertices` are given
    (better-shaped triangles, and the same split on both sides of a mirror-symmetric face),
    otherwise into (0,1,2) and (0,2,3). Quad-array rows padded with -1 give one triangle;
    an (F,3) array passes through.
    """
    faces = np.asarray(faces)
    if faces.ndim != 2 or faces.shape[1] not in (3, 4):
        raise _error("faces", f"expected shape (F, 3) or (F, 4), got {faces.shape}",
                     "pass one row of vertex indices per triangle or quad")
    faces = faces.astype(np.int64, copy=False)
    if faces.shape[1] == 3:
        return faces.copy()
    is_quad = faces[:, 3] != _QUAD_PADDING
    first_split = np.stack([faces[:, [0, 1, 2]], faces[:, [0, 2, 3]]], axis=1)
    if vertices is not None:
        corners = np.asarray(vertices)[np.where(is_quad[:, None], faces, faces[:, :1])]
        diagonal_02 = np.linalg.norm(corners[:, 2] - corners[:, 0], axis=1)
        diagonal_13 = np.linalg.norm(corners[:, 3] - corners[:, 1], axis=1)
        other_split = np.stack([faces[:, [0, 1, 3]], faces[:, [1, 2, 3]]], axis=1)
        # validate_rig checks the (0,1,2)/(0,2,3) halves, so the other split is only taken
        # when its own halves are not degenerate either.
        other_corners = np.asarray(vertices)[np.where(is_quad[:, None, None], other_split, other_split[:, :1])]
        other_area = 0.5 * np.linalg.norm(np.cross(other_corners[:, :, 1] - other_corners[:, :, 0],
                                                   other_corners[:, :, 2] - other_corners[:, :, 0]), axis=2)
        use_other = is_quad & (diagonal_13 < diagonal_02 * (1 - 1e-9)) & (other_area.min(axis=1) >= MIN_TRIANGLE_AREA_M2)
        first_split = np.where(use_other[:, None, None], other_split, first_split)
    halves = first_split.reshape(-1, 3)
    keep = np.stack([np.ones(faces.shape[0], dtype=bool), is_quad], axis=1).reshape(-1)
    return halves[keep]


def rig_triangles(rig: FaceRig) -> np.ndarray:
    """The skin's triangles, (T,3) int64, quads split along their shorter diagonal."""
    return triangulate(rig.faces, rig.vertices)
