"""Corrective shape keys from a CORR.npz (docs/correctives.md): one relative-to-Basis shape key per
corrective term, driven by the user's own key values, so Blender plays the corrected rig

    skin = Basis + Σ_k w_k Δ_k + Σ_t coefficient_t(w) · term_t

with no solver. Term (a, "") becomes `corr_<a>` (driver `a`), (a, a) `corr_<a>__<a>` (`a*a`),
(a, b) `corr_<a>__<b>` (`a*b`). The drivers are single-property variables reading the user's
`key_blocks["…"].value` with simple expressions, which Blender evaluates without Python (so they
run with auto-run scripts off). The user's keys are never written: the corrective keys are new
key blocks, built complete before the previous corrective keys are removed, and recorded by
name in the Key's ID property `CORRECTIVES_PROPERTY` so only ours are ever removed.

numpy + bpy only (never the solver): CORR.npz is checked here with allow_pickle=False.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

from . import preflight, scene_export
from .storage import CORRECTIVES_PROPERTY, corrective_key_names

PREFIX = "corr_"
PAIR_SEPARATOR = "__"
TEMPORARY_PREFIX = "corr~new~"
MAX_NAME_BYTES = 63                                  # Blender's key-block name limit
# The corrective keys' value is the driver's output; Blender clamps it to the slider range.
SLIDER_LIMIT = 10.0
REQUIRED = ("format_version", "key_names", "term_names", "terms", "vertex_count")
FORMAT_VERSION = 1


class CorrectiveKeysError(ValueError):
    """The CORR.npz does not fit this object; the message says why and how to fix it."""


@dataclass
class CorrectiveKey:
    name: str                 # corr_<a>[__<b>]
    variables: List[str]      # Blender key-block names the driver reads (one or two)
    expression: str           # "a", "a*a" or "a*b"
    offsets: np.ndarray       # (V, 3) local units, relative to the Basis


def read_corr_file(path) -> Dict[str, np.ndarray]:
    """The arrays of CORR.npz that the keys need, checked (types, shapes, names, finite)."""
    path = Path(path)
    fix = "Fix: choose the CORR.npz written by `python -m solver correctives` (or Build Correctives)."
    if not path.is_file():
        raise CorrectiveKeysError(f"{path}: no such file. {fix}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError) as error:
        raise CorrectiveKeysError(f"{path}: not a readable .npz ({error}). {fix}") from None
    missing = [key for key in REQUIRED if key not in arrays]
    if missing:
        raise CorrectiveKeysError(f"{path}: {missing[0]} is missing, so this is not a CORR.npz. {fix}")
    if int(arrays["format_version"]) > FORMAT_VERSION:
        raise CorrectiveKeysError(f"{path}: format_version {int(arrays['format_version'])} is newer than this "
                                  f"add-on reads ({FORMAT_VERSION}). Fix: update the Face Physics add-on.")
    names, terms, keys = arrays["term_names"], arrays["terms"], arrays["key_names"]
    vertices = int(arrays["vertex_count"])
    if keys.dtype.kind != "U" or names.dtype.kind != "U" or names.ndim != 2 or names.shape[1:] != (2,):
        raise CorrectiveKeysError(f"{path}: key_names / term_names are not string lists of the CORR format. {fix}")
    if terms.dtype.kind != "f" or terms.shape != (len(names), vertices, 3) or not np.all(np.isfinite(terms)):
        raise CorrectiveKeysError(f"{path}: terms must be finite floats of shape ({len(names)}, {vertices}, 3), "
                                  f"found {terms.dtype} {terms.shape}. {fix}")
    known = {str(key) for key in keys}
    for first, second in names:
        if first not in known or (second and second not in known):
            raise CorrectiveKeysError(f"{path}: term ({first!r}, {second!r}) names a key not in key_names. {fix}")
    return arrays


def corrective_name(first: str, second: str) -> str:
    return PREFIX + first + (PAIR_SEPARATOR + second if second else "")


def our_key_names(obj) -> List[str]:
    """The corrective keys this module added to `obj` (recorded on the Key), still present."""
    return corrective_key_names(obj.data.shape_keys)


def plan_corrective_keys(obj, arrays, metres_per_unit: float, mapping: Dict[str, str]) -> List[CorrectiveKey]:
    """The keys to add, checked against the object (vertex count, shape keys), before any change."""
    mesh = obj.data
    vertices = int(arrays["vertex_count"])
    if vertices != len(mesh.vertices):
        raise CorrectiveKeysError(f"the correctives were made for a mesh of {vertices} vertices, '{obj.name}' has "
                                  f"{len(mesh.vertices)}. Fix: select the object they were built for, or build "
                                  f"them again for this mesh (Build Correctives).")
    if mesh.shape_keys is None:
        raise CorrectiveKeysError(f"'{obj.name}' has no shape keys; the correctives are driven by its keys. Fix: "
                                  f"select the rig's skin.")
    ours = set(our_key_names(obj))
    # CORR.npz names keys as exported to the solver (the name mapping applied): find each one's block.
    blocks = {}
    for block in scene_export.user_key_blocks(obj):
        if block.name not in ours:
            blocks.setdefault(preflight.solver_shape_key_name(block.name, mapping), block.name)
    missing = [str(name) for name in arrays["key_names"] if str(name) not in blocks]
    if missing:
        raise CorrectiveKeysError(f"shape keys {', '.join(missing[:6])} of the correctives are not shape keys of "
                                  f"'{obj.name}'. Fix: select the rig they were built for, restore or rename those "
                                  f"keys, or build the correctives again.")
    planned = []
    for (first, second), offsets in zip(arrays["term_names"], arrays["terms"]):
        name = corrective_name(str(first), str(second))
        if len(name.encode()) > MAX_NAME_BYTES:
            raise CorrectiveKeysError(f"the shape-key name {name!r} is longer than Blender's {MAX_NAME_BYTES} bytes. "
                                      f"Fix: map the keys to shorter names (name mapping) and build again.")
        if name in mesh.shape_keys.key_blocks and name not in ours:
            raise CorrectiveKeysError(f"'{obj.name}' already has a shape key {name!r} that Face Physics did not add. "
                                      f"Fix: rename that key, then add the correctives again.")
        variables = [blocks[str(first)]] + ([blocks[str(second)]] if second else [])
        expression = "a" if not second else ("a*a" if second == first else "a*b")
        if second == first:
            variables = variables[:1]
        planned.append(CorrectiveKey(name, variables, expression,
                                     np.asarray(offsets, dtype=np.float64) / metres_per_unit))
    return planned


def _add_driver(key, block_name: str, planned: CorrectiveKey) -> None:
    curve = key.driver_add(f'key_blocks["{_quoted(block_name)}"].value')
    driver = curve.driver
    driver.type = 'SCRIPTED'
    driver.use_self = False
    for variable_name, source in zip("ab", planned.variables):
        variable = driver.variables.new()
        variable.name = variable_name
        variable.type = 'SINGLE_PROP'
        target = variable.targets[0]
        target.id_type = 'KEY'
        target.id = key
        target.data_path = f'key_blocks["{_quoted(source)}"].value'
    driver.expression = planned.expression
    for modifier in list(curve.modifiers):     # driver_add gives a Generator modifier; none is wanted
        curve.modifiers.remove(modifier)


def _quoted(name: str) -> str:
    return name.replace("\\", "\\\\").replace('"', '\\"')


def _remove_blocks(obj, names) -> None:
    key = obj.data.shape_keys
    for name in names:
        if key.animation_data is not None:
            for curve in list(key.animation_data.drivers):
                if curve.data_path == f'key_blocks["{_quoted(name)}"].value':
                    key.animation_data.drivers.remove(curve)
        block = key.key_blocks.get(name)
        if block is not None:
            obj.shape_key_remove(block)


def add_corrective_keys(obj, planned: List[CorrectiveKey]) -> List[str]:
    """New corrective keys for `planned`, replacing only the earlier corrective keys; the user's
    keys, their values and the active key stay as they were. Returns the names added."""
    key = obj.data.shape_keys
    active = obj.active_shape_key_index
    basis = scene_export.coordinates(key.reference_key.data)
    previous = our_key_names(obj)
    made = []
    try:
        for index, corrective in enumerate(planned):
            block = obj.shape_key_add(name=f"{TEMPORARY_PREFIX}{index}", from_mix=False)
            made.append(block.name)
            block.relative_key = key.reference_key
            block.slider_min, block.slider_max = -SLIDER_LIMIT, SLIDER_LIMIT
            block.data.foreach_set("co", (basis + corrective.offsets).astype(np.float32).ravel())
    except BaseException:
        _remove_blocks(obj, made)
        raise
    # Complete: the swap. The old keys go first so the new ones can take their names.
    _remove_blocks(obj, previous)
    names = []
    for temporary, corrective in zip(made, planned):
        block = key.key_blocks[temporary]
        block.name = corrective.name
        names.append(block.name)
        _add_driver(key, block.name, corrective)
    key[CORRECTIVES_PROPERTY] = "\n".join(names)
    obj.active_shape_key_index = min(active, len(key.key_blocks) - 1)
    obj.data.update()
    return names


def remove_corrective_keys(obj) -> List[str]:
    """Remove exactly the corrective keys this module added, with their drivers."""
    key = obj.data.shape_keys
    if key is None:
        return []
    names = our_key_names(obj)
    active_name = obj.active_shape_key.name if obj.active_shape_key is not None else ""
    _remove_blocks(obj, names)
    if CORRECTIVES_PROPERTY in key:
        del key[CORRECTIVES_PROPERTY]
    if active_name in key.key_blocks:
        obj.active_shape_key_index = key.key_blocks.find(active_name)
    obj.data.update()
    return names


def add_from_file(context, obj, path) -> Tuple[List[str], float]:
    """Read CORR.npz, check it against `obj` and add its keys (offsets metres → the object's local
    units through scene_export.metres_per_unit, the one place the add-on converts units)."""
    arrays = read_corr_file(path)
    metres, findings = scene_export.metres_per_unit(context, obj)
    errors = [finding.message for finding in findings if finding.severity == preflight.ERROR]
    if errors:
        raise CorrectiveKeysError(errors[0])
    planned = plan_corrective_keys(obj, arrays, metres, scene_export.name_mapping(obj.face_physics))
    return add_corrective_keys(obj, planned), metres
