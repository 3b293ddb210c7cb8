"""The input files of `python -m solver animate`: ACTIVATIONS.npz and MAPS.npz (issue 3).

Both are `.npz` archives read with allow_pickle=False and validated against the model they
drive; every problem raises `AnimationInputError` whose message starts with the offending key
(or the file) and says how to fix it. Unknown keys are refused too, so a misspelt optional
key (`head_transform`, `paralyzed_muscles`) cannot be silently ignored.

ACTIVATIONS.npz, T frames:
  muscle_contraction (T, m)   contraction γ in [0.5, 10] per muscle along its fibre (1 = rest, > 1 contracts)
  muscle_names (m,) str       optional: the muscle of each column; default the model's muscle_names
                              order. Model muscles not listed stay at rest (γ = 1)
  activations (T, A, 6)       instead of muscle_contraction: raw activation 6-vectors
                              (xx, yy, zz, yz, xz, xy) of the model's A active tets
                              (`activation.active_tet_indices`), each a positive-definite S with
                              eigenvalues in [0.1, 3.16] (those of γ in range)
  jaw (T, 5)                  jaw parameters b: rotations about the hinge x and the vertical y axis
                              (radians), translation x, y, z (metres), in the jaw frame
  head_transforms (T, 4, 4)   optional rigid skull transform per frame [[R, t], [0 0 0 1]];
                              default identity
  fps ()                      optional frame rate, default 24

MAPS.npz, every key optional; per-rig-vertex arrays have the model's skin vertex count V and
hold painted weights in [0, 1], which the solver alone turns into material (maps.py):
  fat (V,)                    where fat grows or shrinks with the fat scale
  stiffness (V,)              where the tissue is stiffer or softer; needs stiffness_range
  stiffness_range (2,)        multipliers of μ and λ at weight 0 and 1, each in [0.01, 100]
                              (1 = unchanged): low + w (high − low)
  density (V,)                where the tissue is heavier or lighter; needs density_range
  density_range (2,)          multipliers of the density (1 = 1000 kg/m³) at weight 0 and 1
  paralysis (V,)              share of the activation lost (1 = passive)
  paralysed_muscles () or (k,) str   model muscle names that cannot activate
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np

from ..npz_files import NpzReadError, write_npz_atomically
from ..npz_files import read_npz as read_npz_arrays
from .activation import active_tet_indices, tet_activations, tet_activations_from_vectors
from .maps import NUMBERS, PAINTED_MULTIPLIER_LIMITS

DEFAULT_FPS = 24.0
ACTIVATION_KEYS = ("muscle_contraction", "muscle_names", "activations", "jaw", "head_transforms", "fps")
MAP_ARRAY_KEYS = ("fat", "stiffness", "density", "paralysis")
# The multipliers of μ and λ (stiffness) and of the density at painted weight 0 and 1.
MAP_RANGE_KEYS = {"stiffness": "stiffness_range", "density": "density_range"}
MAP_NUMBER_KEYS = MAP_ARRAY_KEYS + tuple(MAP_RANGE_KEYS.values())
MAP_KEYS = MAP_NUMBER_KEYS + ("paralysed_muscles",)
JAW_PARAMETERS = 5
# γ is the fibre's length ratio (1 = rest, 2 = shortened to half, 0.5 = stretched to twice its
# length): the range reaches past anything muscle does. Beyond it the solve stops converging in
# reasonable time (demo head, 3k tets, 2 frames with every muscle at γ: 0.5 7 s, 10 53 s, 0.25
# 73 s, 0.1 and 1e6 no frame in 300 s).
MUSCLE_CONTRACTION_RANGE = tuple(NUMBERS["muscle_contraction_range"])     # settings.json
# The same bound for raw activation matrices: the eigenvalues γ⁻¹ and √γ of a contraction in range.
ACTIVATION_EIGENVALUE_RANGE = (1.0 / MUSCLE_CONTRACTION_RANGE[1], MUSCLE_CONTRACTION_RANGE[1] ** 0.5)
RIGID_TOLERANCE = 1e-6


class AnimationInputError(ValueError):
    """An ACTIVATIONS.npz or MAPS.npz file is unreadable or does not fit the model; the message
    starts with the key (or the file) and says how to fix it."""


@dataclass(frozen=True)
class ActivationInput:
    """The validated content of ACTIVATIONS.npz. Exactly one of `muscle_contraction` (columns in
    the model's muscle order, named by `muscle_names`) and `activations` is set."""
    jaw: np.ndarray                                   # (T, 5)
    head_transforms: np.ndarray                       # (T, 4, 4), identity when the file has none
    muscle_contraction: Optional[np.ndarray] = None   # (T, m) γ
    muscle_names: Optional[np.ndarray] = None         # (m,) str, the columns of muscle_contraction
    activations: Optional[np.ndarray] = None          # (T, A, 6), or made frame by frame (inverse/blend.py)
    fps: float = DEFAULT_FPS

    @property
    def frame_count(self) -> int:
        return len(self.jaw)

    def tet_activations(self, model, frame: int) -> np.ndarray:
        """Activation matrices (M, 3, 3) of every tet at `frame` (before any paralysis)."""
        if self.muscle_contraction is not None:
            return tet_activations(model, self.muscle_contraction[frame])
        return tet_activations_from_vectors(self.activations[frame], active_tet_indices(model), len(model["tets"]))


@dataclass(frozen=True)
class MapsInput:
    """The validated content of MAPS.npz: painted per-skin-vertex weights in [0, 1] (None where
    absent), the stiffness and density multipliers at weight 0 and 1, and muscles paralysed by
    name. Weights become materials in the solver only (animate.overrides_from_maps)."""
    fat: Optional[np.ndarray] = None
    stiffness: Optional[np.ndarray] = None
    density: Optional[np.ndarray] = None
    paralysis: Optional[np.ndarray] = None
    stiffness_range: Optional[Tuple[float, float]] = None
    density_range: Optional[Tuple[float, float]] = None
    paralysed_muscles: Tuple[str, ...] = field(default_factory=tuple)


def read_npz(path, accepted_keys, what) -> dict:
    try:
        arrays = read_npz_arrays(path)
    except NpzReadError as error:
        raise AnimationInputError(f"{error}: not a readable {what} file. Write it with numpy.savez: numeric and "
                                  f"str arrays only, no Python objects.") from None
    unknown = sorted(set(arrays) - set(accepted_keys))
    if unknown:
        raise AnimationInputError(f"{unknown[0]}: not one of the keys of {what}.npz "
                                  f"({', '.join(accepted_keys)}). Rename or remove it.")
    return arrays


def numeric_array(arrays, key, shape, fix) -> np.ndarray:
    """arrays[key] as float64 with the expected shape (None = any size) and finite entries."""
    value = arrays[key]
    if value.dtype.kind not in "fiu":
        raise AnimationInputError(f"{key}: expected numbers, found dtype {value.dtype}. {fix}")
    if value.ndim != len(shape) or any(want is not None and want != got for want, got in zip(shape, value.shape)):
        sizes = ["any" if size is None else str(size) for size in shape]
        expected = "(" + ", ".join(sizes) + ("," if len(shape) == 1 else "") + ")"
        raise AnimationInputError(f"{key}: expected shape {expected}, found {value.shape}. {fix}")
    value = value.astype(np.float64)
    if not np.all(np.isfinite(value)):
        raise AnimationInputError(f"{key}: contains NaN or infinite values. {fix}")
    return value


def _names(arrays, key, allow_scalar=False) -> list:
    value = arrays[key]
    if value.dtype.kind != "U" or not (value.ndim == 1 or (allow_scalar and value.ndim == 0)):
        raise AnimationInputError(f"{key}: expected a 1-D array of str names, found dtype {value.dtype} and "
                                  f"shape {value.shape}. Store e.g. np.array(['zygomaticus_major_L']).")
    names = [str(name) for name in np.atleast_1d(value)]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise AnimationInputError(f"{key}: {repeated[0]!r} is listed twice. List each muscle once.")
    return names


def _check_known_muscles(key, names, model):
    model_names = [str(name) for name in model["muscle_names"]]
    for name in names:
        if name not in model_names:
            raise AnimationInputError(f"{key}: unknown muscle {name!r}. The model's muscles are "
                                      f"{', '.join(model_names)}.")


def _contraction_columns(arrays, model, frame_count) -> Tuple[np.ndarray, np.ndarray]:
    """muscle_contraction reordered into the model's muscle order, absent muscles at rest."""
    model_names = [str(name) for name in model["muscle_names"]]
    fix = f"Give one contraction γ in [0.5, 10] per muscle for each of the {frame_count} frames of jaw (1 = rest)."
    if "muscle_names" in arrays:
        names = _names(arrays, "muscle_names")
        _check_known_muscles("muscle_names", names, model)
    else:
        names = model_names
    contraction = numeric_array(arrays, "muscle_contraction", (frame_count, len(names)),
                           fix + ("" if "muscle_names" in arrays else
                                  f" Without muscle_names the columns are the model's {len(names)} muscles, in order."))
    low, high = MUSCLE_CONTRACTION_RANGE
    if np.any(contraction < low) or np.any(contraction > high):
        raise AnimationInputError(f"muscle_contraction: values must be in [{low:g}, {high:g}], found "
                                  f"{contraction.min():g} … {contraction.max():g}. γ is the fibre's length ratio: "
                                  f"1 = rest, 2 = shortened to half, 0.5 = stretched to twice its length.")
    in_model_order = np.ones((frame_count, len(model_names)))
    in_model_order[:, [model_names.index(name) for name in names]] = contraction
    return in_model_order, np.asarray(model_names)


def _raw_activations(arrays, model, frame_count) -> np.ndarray:
    active_count = len(active_tet_indices(model))
    activations = numeric_array(arrays, "activations", (frame_count, active_count, 6),
                           f"Give for each of the {frame_count} frames of jaw one 6-vector (xx, yy, zz, yz, xz, xy) "
                           f"per active tet: the model has {active_count} (muscle fraction > 0, by tet index).")
    check_positive_definite(activations, "activations")
    low, high = ACTIVATION_EIGENVALUE_RANGE
    outside = below_eigenvalue(activations, low) | below_eigenvalue(-activations, -high)
    if np.any(outside):
        frame, tet = np.argwhere(outside)[0]
        raise AnimationInputError(f"activations: frame {frame}, active tet {tet} has an eigenvalue outside "
                                  f"[{low:g}, {high:g}], past any muscle's contraction (γ in "
                                  f"[{MUSCLE_CONTRACTION_RANGE[0]:g}, {MUSCLE_CONTRACTION_RANGE[1]:g}]). "
                                  f"The neutral activation is (1, 1, 1, 0, 0, 0).")
    return activations


def below_eigenvalue(activations, floor: float = 0.0) -> np.ndarray:
    """(...) bool: where S (..., 6) has an eigenvalue at or below `floor`, i.e. S − floor·I is
    not positive definite."""
    xx, yy, zz, yz, xz, xy = np.moveaxis(np.asarray(activations, dtype=np.float64), -1, 0)
    xx, yy, zz = xx - floor, yy - floor, zz - floor
    # Sylvester's criterion: a matrix is positive definite iff its leading principal minors are positive.
    determinant = xx * (yy * zz - yz * yz) - xy * (xy * zz - yz * xz) + xz * (xy * yz - yy * xz)
    return (xx <= 0.0) | (xx * yy - xy * xy <= 0.0) | (determinant <= 0.0)


def check_positive_definite(activations, what: str, fix: str = "") -> None:
    """Raise AnimationInputError naming the first frame and active tet whose S (T, A, 6) is not
    positive definite."""
    refuse_not_positive_definite(below_eigenvalue(activations), what, fix)


def refuse_not_positive_definite(not_positive_definite, what: str, fix: str = "", first_frame: int = 0) -> None:
    """Raise AnimationInputError naming the first (frame, active tet) of the (T, A) mask, if any;
    the mask's rows are frames first_frame, first_frame + 1, …"""
    if np.any(not_positive_definite):
        frame, tet = np.argwhere(not_positive_definite)[0]
        raise AnimationInputError(f"{what}: frame {first_frame + frame}, active tet {tet} is not positive definite; an "
                                  f"activation stretches and squeezes but cannot flip or flatten tissue. "
                                  + (fix or "The neutral activation is (1, 1, 1, 0, 0, 0)."))


def read_head_transforms(arrays, frame_count) -> np.ndarray:
    if "head_transforms" not in arrays:
        return np.tile(np.eye(4), (frame_count, 1, 1))
    transforms = numeric_array(arrays, "head_transforms", (frame_count, 4, 4),
                          f"Give one 4×4 rigid transform [[R, t], [0 0 0 1]] for each of the {frame_count} "
                          f"frames of jaw.")
    if np.max(np.abs(transforms[:, 3] - [0.0, 0.0, 0.0, 1.0])) > RIGID_TOLERANCE:
        raise AnimationInputError("head_transforms: the last row of every transform must be (0, 0, 0, 1).")
    rotations = transforms[:, :3, :3]
    orthonormality = np.max(np.abs(np.einsum("tki,tkj->tij", rotations, rotations) - np.eye(3)), axis=(1, 2))
    if np.any(orthonormality > RIGID_TOLERANCE) or np.any(np.linalg.det(rotations) <= 0.0):
        frame = int(np.argmax((orthonormality > RIGID_TOLERANCE) | (np.linalg.det(rotations) <= 0.0)))
        raise AnimationInputError(f"head_transforms: frame {frame} is not rigid (its 3×3 block must be a "
                                  f"rotation: orthonormal, det +1, no scale or shear).")
    return transforms


def load_activations(path, model) -> ActivationInput:
    """Read and validate ACTIVATIONS.npz for `model` (a dict of model arrays)."""
    arrays = read_npz(path, ACTIVATION_KEYS, "ACTIVATIONS")
    if "jaw" not in arrays:
        raise AnimationInputError("jaw: missing. Give the 5 jaw parameters per frame; zeros (T, 5) keep the jaw "
                                  "closed and at rest.")
    if ("muscle_contraction" in arrays) == ("activations" in arrays):
        raise AnimationInputError("muscle_contraction: give exactly one of muscle_contraction (T, m) and raw "
                                  "activations (T, A, 6); the file has " +
                                  ("both." if "activations" in arrays else "neither."))
    if "muscle_names" in arrays and "activations" in arrays:
        raise AnimationInputError("muscle_names: names the columns of muscle_contraction, which this file does "
                                  "not have; remove it.")
    jaw = numeric_array(arrays, "jaw", (None, JAW_PARAMETERS),
                   "Give per frame the hinge and vertical rotations (radians) and x, y, z translation (metres).")
    frame_count = len(jaw)
    if frame_count == 0:
        raise AnimationInputError("jaw: has no frames; an animation needs at least one.")
    fps = DEFAULT_FPS
    if "fps" in arrays:
        fps_value = numeric_array(arrays, "fps", (), "Store the frame rate as one number, e.g. np.float64(24).")
        if fps_value <= 0.0:
            raise AnimationInputError(f"fps: must be > 0, found {float(fps_value):g}.")
        fps = float(fps_value)
    contraction = names = activations = None
    if "muscle_contraction" in arrays:
        contraction, names = _contraction_columns(arrays, model, frame_count)
    else:
        activations = _raw_activations(arrays, model, frame_count)
    return ActivationInput(jaw=jaw, head_transforms=read_head_transforms(arrays, frame_count),
                           muscle_contraction=contraction, muscle_names=names, activations=activations, fps=fps)


def load_maps(path, model) -> MapsInput:
    """Read and validate MAPS.npz for `model`: every painted map one weight in [0, 1] per skin
    vertex; a stiffness or density map with its (2,) range of multipliers."""
    arrays = read_npz(path, MAP_KEYS, "MAPS")
    vertex_count = len(model["skin_vertices"])
    maps = {}
    for key in MAP_ARRAY_KEYS:
        if key not in arrays:
            continue
        values = numeric_array(arrays, key, (vertex_count,),
                               f"Give one painted weight per rig vertex: the model has {vertex_count} skin vertices.")
        if np.any(values < 0.0) or np.any(values > 1.0):
            raise AnimationInputError(f"{key}: painted weights must be in [0, 1], found {values.min():g} … "
                                      f"{values.max():g}.")
        maps[key] = values
    low, high = PAINTED_MULTIPLIER_LIMITS
    for key, range_key in MAP_RANGE_KEYS.items():
        if (key in arrays) != (range_key in arrays):
            raise AnimationInputError(
                f"{range_key}: give it with {key} and only then — the {key} multipliers at painted weight 0 "
                f"and 1, e.g. np.array([1.0, 3.0])." if key in arrays else
                f"{range_key}: given without a {key} map; add the painted {key} weights or remove it.")
        if range_key in arrays:
            values = numeric_array(arrays, range_key, (2,), "Give two multipliers: at painted weight 0 and at 1.")
            if np.any(values < low) or np.any(values > high):
                raise AnimationInputError(f"{range_key}: multipliers must be in [{low:g}, {high:g}], found "
                                          f"{values[0]:g}, {values[1]:g}.")
            maps[range_key] = (float(values[0]), float(values[1]))
    paralysed = ()
    if "paralysed_muscles" in arrays:
        paralysed = tuple(_names(arrays, "paralysed_muscles", allow_scalar=True))
        _check_known_muscles("paralysed_muscles", paralysed, model)
    return MapsInput(paralysed_muscles=paralysed, **maps)


def save_activations(path, activation_input: ActivationInput) -> None:
    """Write ACTIVATIONS.npz atomically (for tests and tools; `load_activations` validates)."""
    arrays = {"jaw": activation_input.jaw, "head_transforms": activation_input.head_transforms,
              "fps": np.float64(activation_input.fps)}
    if activation_input.muscle_contraction is not None:
        arrays["muscle_contraction"] = activation_input.muscle_contraction
        if activation_input.muscle_names is not None:
            arrays["muscle_names"] = np.asarray(activation_input.muscle_names, dtype=str)
    if activation_input.activations is not None:
        arrays["activations"] = activation_input.activations
    write_npz_atomically(path, {key: np.asarray(value) for key, value in arrays.items()})


def save_maps(path, maps_input: MapsInput) -> None:
    """Write MAPS.npz atomically (for tests and tools; `load_maps` validates)."""
    arrays = {key: np.asarray(getattr(maps_input, key), dtype=np.float64)
              for key in MAP_NUMBER_KEYS if getattr(maps_input, key) is not None}
    if maps_input.paralysed_muscles:
        arrays["paralysed_muscles"] = np.asarray(maps_input.paralysed_muscles, dtype=str)
    write_npz_atomically(path, arrays)
