"""Where the add-on stores what it makes, and the names it gives to what it adds to the user's
object, in one place: the model, fit and cache files live in `face_physics/` beside the saved
.blend (each bake a take folder of its own: take_folders.py); the bake's shape keys, action and cache modifier are found again by these names (and
never the user's own)."""
from __future__ import annotations

from pathlib import Path

import bpy

CACHE_MODIFIER_NAME = "Face Physics cache"
BAKE_KEY_PREFIX = "FP bake "
CORRECTIVES_PROPERTY = "face_physics_correctives"   # on the Key: the corrective keys we added, one per line


def corrective_key_names(key) -> list:
    """The corrective shape keys the add-on added to this Key (corrective_keys.py), still present."""
    if key is None:
        return []
    recorded = str(key.get(CORRECTIVES_PROPERTY, "")).split("\n")
    return [name for name in recorded if name and name in key.key_blocks]
BAKE_ACTION_PREFIX = "FP bake "
CACHE_FOLDER = "face_physics"


def cache_path(obj) -> Path:
    """Where the object's cache lives: `face_physics/` beside the saved .blend."""
    blend = bpy.data.filepath
    if not blend:
        raise RuntimeError("save the .blend first: the model and caches are stored next to it in face_physics/")
    stem = bpy.path.clean_name(Path(blend).stem)
    return Path(blend).parent / CACHE_FOLDER / f"{stem}_{bpy.path.clean_name(obj.name)}.pc2"


def takes_folder(obj) -> Path:
    """The object's takes (take_folders.py): `face_physics/<blend>_<object>_takes/`."""
    return cache_path(obj).with_name(cache_path(obj).stem + "_takes")


def model_path(obj) -> Path:
    return cache_path(obj).with_name(cache_path(obj).stem + "_model.npz")


def fit_path(obj) -> Path:
    return cache_path(obj).with_name(cache_path(obj).stem + "_fit.npz")


def correctives_path(obj) -> Path:
    """The object's CORR.npz (Build Correctives): `face_physics/<blend>_<object>_correctives.npz`."""
    return cache_path(obj).with_name(cache_path(obj).stem + "_correctives.npz")


def correctives_samples_path(obj) -> Path:
    """The simulated samples behind it, kept so a rebuild solves only what is missing."""
    return cache_path(obj).with_name("." + cache_path(obj).stem + "_correctives.samples")


def relative(path: Path) -> str:
    return bpy.path.relpath(str(path))
