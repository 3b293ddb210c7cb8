"""The interactive shell's file (SHELL.npz): the coarse shell, its fitted stiffness, the maps
between the rig and the coarse mesh and the per-shape detail, as written by `shell-fit` and read
by `shell-animate` and the live session. Every key is explained in docs/shell.md.

Units: the coarse shell is stored in face units (positions divided by `face_height_m`, so the face
is 1 unit tall and paper 001's Tables 3–4 apply unchanged); the rig's own vertices and the detail
corrections stay in metres. `ShellModel.to_face_units` / `to_metres` are the one conversion.

Loaded with allow_pickle=False; sparse matrices travel as their CSR arrays and the settings as a
JSON string, never as pickled objects. Written to a temporary file and swapped in.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse

from ..npz_files import NpzReadError, read_npz, write_npz_atomically
from .settings import ShellSettings

FORMAT_VERSION = 1
_REFIT = "Refit it with `python -m solver shell-fit RIG.npz -o SHELL.npz`."

# key -> (dtype kind, number of dimensions); shapes are cross-checked in `_validate`.
_ARRAY_KEYS = {
    "format_version": ("i", 0), "face_height_m": ("f", 0),
    "coarse_rest": ("f", 2), "coarse_triangles": ("i", 2),
    "shape_names": ("U", 1), "coarse_deltas": ("f", 3),
    "strain_stiffness": ("f", 1), "bending_stiffness": ("f", 1),
    "max_depth": ("f", 1), "prescribed": ("b", 1),
    "fine_rest": ("f", 2), "fine_strain_stiffness": ("f", 1), "fine_bending_stiffness": ("f", 1),
    "settings_json": ("U", 0),
}
_SPARSE_KEYS = ("coarse_from_fine", "fine_from_coarse", "detail")


class ShellFormatError(ValueError):
    """A shell file is missing, corrupt, too new or inconsistent; the message names the key and
    what to do."""


@dataclass(frozen=True)
class ShellModel:
    face_height_m: float
    coarse_rest: np.ndarray                       # (n, 3) face units
    coarse_triangles: np.ndarray                  # (m, 3) int64
    coarse_from_fine: scipy.sparse.csr_matrix     # (n, V): coarse deltas = B @ fine deltas
    fine_from_coarse: scipy.sparse.csr_matrix     # (V, n): the warp of Eq. 14
    shape_names: tuple
    coarse_deltas: np.ndarray                     # (K, n, 3) face units
    strain_stiffness: np.ndarray                  # (n,) N/m at unit face height
    bending_stiffness: np.ndarray                 # (n,)
    max_depth: np.ndarray                         # (n,) face units
    prescribed: np.ndarray                        # (n,) bool: eyelids
    fine_rest_m: np.ndarray                       # (V, 3) metres
    detail: scipy.sparse.csr_matrix               # (K, 3V) Eq. 13 corrections in metres, node-major
    fine_strain_stiffness: np.ndarray             # (V,)
    fine_bending_stiffness: np.ndarray            # (V,)
    settings: ShellSettings

    def __post_init__(self):
        _validate_model(self)

    @property
    def coarse_vertex_count(self) -> int:
        return len(self.coarse_rest)

    @property
    def fine_vertex_count(self) -> int:
        return len(self.fine_rest_m)

    def to_face_units(self, metres):
        return np.asarray(metres, dtype=np.float64) / self.face_height_m

    def to_metres(self, face_units):
        return np.asarray(face_units, dtype=np.float64) * self.face_height_m


def save_shell(path, model: ShellModel) -> None:
    """Write `model` to `path` atomically (uncompressed: the live session loads it often)."""
    if not isinstance(model, ShellModel):
        raise TypeError(f"save_shell: expected a ShellModel, found {type(model).__name__}")
    arrays = {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "face_height_m": np.array(float(model.face_height_m)),
        "coarse_rest": model.coarse_rest, "coarse_triangles": model.coarse_triangles,
        "shape_names": np.array(list(model.shape_names), dtype=np.str_).reshape(-1),
        "coarse_deltas": model.coarse_deltas,
        "strain_stiffness": model.strain_stiffness, "bending_stiffness": model.bending_stiffness,
        "max_depth": model.max_depth, "prescribed": model.prescribed,
        "fine_rest": model.fine_rest_m,
        "fine_strain_stiffness": model.fine_strain_stiffness,
        "fine_bending_stiffness": model.fine_bending_stiffness,
        "settings_json": np.array(json.dumps(model.settings.as_dict(), sort_keys=True)),
    }
    for name in _SPARSE_KEYS:
        matrix = getattr(model, name).tocsr()
        arrays[f"{name}_data"] = matrix.data.astype(np.float64)
        arrays[f"{name}_indices"] = matrix.indices.astype(np.int64)
        arrays[f"{name}_indptr"] = matrix.indptr.astype(np.int64)
        arrays[f"{name}_shape"] = np.array(matrix.shape, dtype=np.int64)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_npz_atomically(path, arrays, compressed=False)


def load_shell(path) -> ShellModel:
    """Read and validate a SHELL.npz; ShellFormatError naming the key and the fix otherwise."""
    path = Path(path)
    try:
        arrays = read_npz(path)
    except NpzReadError as error:
        raise ShellFormatError(f"{error}: not a readable shell file. {_REFIT}") from None
    for key, (kind, ndim) in _ARRAY_KEYS.items():
        if key not in arrays:
            raise ShellFormatError(f"{path}: {key}: missing from the shell file. {_REFIT}")
        value = arrays[key]
        if value.dtype.kind != kind and not (kind == "i" and value.dtype.kind == "u"):
            raise ShellFormatError(f"{path}: {key}: expected dtype kind '{kind}', found {value.dtype}. {_REFIT}")
        if value.ndim != ndim:
            raise ShellFormatError(f"{path}: {key}: expected {ndim} dimensions, found shape {value.shape}. {_REFIT}")
    version = int(arrays["format_version"])
    if version < 1:
        raise ShellFormatError(f"{path}: format_version: {version} is not a valid version. {_REFIT}")
    if version > FORMAT_VERSION:
        raise ShellFormatError(f"{path}: format_version: the file is version {version}, this solver reads up to "
                               f"{FORMAT_VERSION}. Update the solver.")
    try:
        settings = ShellSettings.from_dict(json.loads(str(arrays["settings_json"])))
    except (ValueError, TypeError) as error:
        raise ShellFormatError(f"{path}: settings_json: not valid shell settings ({error}). {_REFIT}") from None
    sparse = {name: _read_csr(path, arrays, name) for name in _SPARSE_KEYS}
    try:
        return ShellModel(
            face_height_m=float(arrays["face_height_m"]),
            coarse_rest=arrays["coarse_rest"], coarse_triangles=arrays["coarse_triangles"],
            coarse_from_fine=sparse["coarse_from_fine"], fine_from_coarse=sparse["fine_from_coarse"],
            shape_names=tuple(str(name) for name in arrays["shape_names"]),
            coarse_deltas=arrays["coarse_deltas"],
            strain_stiffness=arrays["strain_stiffness"], bending_stiffness=arrays["bending_stiffness"],
            max_depth=arrays["max_depth"], prescribed=arrays["prescribed"],
            fine_rest_m=arrays["fine_rest"], detail=sparse["detail"],
            fine_strain_stiffness=arrays["fine_strain_stiffness"],
            fine_bending_stiffness=arrays["fine_bending_stiffness"],
            settings=settings)
    except ShellFormatError as error:
        raise ShellFormatError(f"{path}: {error}") from None


def _read_csr(path, arrays, name) -> scipy.sparse.csr_matrix:
    parts = {}
    for part, kind, ndim in (("data", "f", 1), ("indices", "i", 1), ("indptr", "i", 1), ("shape", "i", 1)):
        key = f"{name}_{part}"
        if key not in arrays:
            raise ShellFormatError(f"{path}: {key}: missing from the shell file. {_REFIT}")
        value = arrays[key]
        if value.dtype.kind != kind and not (kind == "i" and value.dtype.kind == "u") or value.ndim != ndim:
            raise ShellFormatError(f"{path}: {key}: expected a 1-D array of kind '{kind}', found "
                                   f"{value.dtype} {value.shape}. {_REFIT}")
        parts[part] = value
    shape = parts["shape"]
    data, indices, indptr = parts["data"], parts["indices"], parts["indptr"]
    if len(shape) != 2 or (shape < 0).any():
        raise ShellFormatError(f"{path}: {name}_shape: expected two non-negative sizes, found {shape.tolist()}. {_REFIT}")
    rows, cols = int(shape[0]), int(shape[1])
    if (len(indptr) != rows + 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any() or indptr[-1] != len(data)
            or len(indices) != len(data) or (len(indices) and (indices.min() < 0 or indices.max() >= cols))):
        raise ShellFormatError(f"{path}: {name}: the CSR arrays (data, indices, indptr) do not describe a "
                               f"{rows} × {cols} matrix. {_REFIT}")
    if not np.all(np.isfinite(data)):
        raise ShellFormatError(f"{path}: {name}_data: contains NaN or infinite values. {_REFIT}")
    return scipy.sparse.csr_matrix((data.astype(np.float64), indices.astype(np.int64), indptr.astype(np.int64)),
                                   shape=(rows, cols))


def _validate_model(model: ShellModel) -> None:
    """Cross-checks of sizes and values; raises ShellFormatError naming the field. Arrays are
    converted in place of the frozen fields so every reader sees one dtype."""
    def put(name, value):
        object.__setattr__(model, name, value)

    def floats(name, shape):
        value = np.ascontiguousarray(getattr(model, name), dtype=np.float64)
        if value.shape != shape:
            raise ShellFormatError(f"{name}: expected shape {shape}, found {value.shape}. {_REFIT}")
        if not np.all(np.isfinite(value)):
            raise ShellFormatError(f"{name}: contains NaN or infinite values. {_REFIT}")
        put(name, value)
        return value

    height = float(model.face_height_m)
    if not (np.isfinite(height) and height > 0):
        raise ShellFormatError(f"face_height_m: must be a positive length in metres, found {height!r}. {_REFIT}")
    put("face_height_m", height)
    rest = np.ascontiguousarray(model.coarse_rest, dtype=np.float64)
    if rest.ndim != 2 or rest.shape[1] != 3 or len(rest) < 3:
        raise ShellFormatError(f"coarse_rest: expected (n, 3) positions with n ≥ 3, found {rest.shape}. {_REFIT}")
    n = len(rest)
    floats("coarse_rest", (n, 3))
    triangles = np.ascontiguousarray(model.coarse_triangles, dtype=np.int64)
    if triangles.ndim != 2 or triangles.shape[1] != 3 or len(triangles) == 0:
        raise ShellFormatError(f"coarse_triangles: expected (m, 3) vertex indexes, found {triangles.shape}. {_REFIT}")
    if triangles.min() < 0 or triangles.max() >= n:
        raise ShellFormatError(f"coarse_triangles: vertex index out of range 0..{n - 1}. {_REFIT}")
    put("coarse_triangles", triangles)
    fine = np.ascontiguousarray(model.fine_rest_m, dtype=np.float64)
    if fine.ndim != 2 or fine.shape[1] != 3:
        raise ShellFormatError(f"fine_rest: expected (V, 3) positions in metres, found {fine.shape}. {_REFIT}")
    v = len(fine)
    floats("fine_rest_m", (v, 3))
    names = tuple(str(name) for name in model.shape_names)
    if len(set(names)) != len(names):
        raise ShellFormatError(f"shape_names: names repeat. {_REFIT}")
    put("shape_names", names)
    k = len(names)
    floats("coarse_deltas", (k, n, 3))
    for name in ("strain_stiffness", "bending_stiffness"):
        if not (floats(name, (n,)) > 0).all():
            raise ShellFormatError(f"{name}: stiffness must be positive at every coarse vertex. {_REFIT}")
    if (floats("max_depth", (n,)) < 0).any():
        raise ShellFormatError(f"max_depth: depths must be non-negative. {_REFIT}")
    prescribed = np.asarray(model.prescribed)
    if prescribed.shape != (n,) or prescribed.dtype.kind != "b":
        raise ShellFormatError(f"prescribed: expected ({n},) booleans, found {prescribed.dtype} {prescribed.shape}. {_REFIT}")
    put("prescribed", np.ascontiguousarray(prescribed))
    for name in ("fine_strain_stiffness", "fine_bending_stiffness"):
        floats(name, (v,))
    for name, shape in (("coarse_from_fine", (n, v)), ("fine_from_coarse", (v, n)), ("detail", (k, 3 * v))):
        matrix = getattr(model, name)
        if not scipy.sparse.issparse(matrix):
            raise ShellFormatError(f"{name}: expected a sparse matrix, found {type(matrix).__name__}. {_REFIT}")
        matrix = scipy.sparse.csr_matrix(matrix, dtype=np.float64)
        if matrix.shape != shape:
            raise ShellFormatError(f"{name}: expected shape {shape}, found {matrix.shape}. {_REFIT}")
        if not np.all(np.isfinite(matrix.data)):
            raise ShellFormatError(f"{name}: contains NaN or infinite values. {_REFIT}")
        put(name, matrix)
    if not isinstance(model.settings, ShellSettings):
        raise ShellFormatError(f"settings: expected ShellSettings, found {type(model.settings).__name__}. {_REFIT}")
