"""The interactive shell's files as the add-on sees them, without bpy: the shell-fit and
shell-animate job folders, what the add-on reads from SHELL.npz (numpy only, allow_pickle=False:
its shape names and the fitted stiffness maps on the rig's vertices) and the maps' conversion to
vertex-group weights and back.

A stiffness map spans orders of magnitude (the fit works in log space, paper 001 §4), so its
vertex-group weight is logarithmic: w = (log k − log k_low) / (log k_high − log k_low), with
(k_low, k_high) the map's range, stored on the object beside the group so that a repainted group
converts back to N/m (`stiffness_from_weights`).

Repainted groups go back to the solver as STIFFNESS.npz (`repainted_stiffness`: `strain`,
`bending` per rig vertex, N/m at unit face height), which shell-animate and shell-live take
instead of the fitted maps. And the strain map seeds the volumetric model's stiffness map
(`tissue_stiffness_weights`, the one place that conversion is made).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import job_files

SHELL_FILE = "shell.npz"
STIFFNESS_FILE = "stiffness.npz"
STRAIN_GROUP = "FP_shell_strain"
BENDING_GROUP = "FP_shell_bending"
DEFAULT_TRIANGLES = 4000
# The volumetric stiffness map made from the shell's strain map ("Stiffness Map from Shell").
TISSUE_GROUP = "FP_stiffness_from_shell"
# A group read back within this relative difference of the fitted map is the fitted map (its
# float32 weights round the values by about 1e-7 relative): nothing is sent, and the shell keeps
# its own fitted coarse stiffness exactly.
UNCHANGED_TOLERANCE = 1e-5


def write_shell_fit_job(job_dir, rig_arrays: Dict[str, np.ndarray], triangles: int) -> Path:
    """A shell-fit job: the rig the build exports → SHELL.npz."""
    job_dir = Path(job_dir)
    job_files._write_npz(job_dir / job_files.RIG_FILE, rig_arrays)
    return job_files._write_job(job_dir, "shell-fit", {"rig": job_files.RIG_FILE}, {"shell": SHELL_FILE},
                                {"triangles": int(triangles)})


def write_shell_animate_job(job_dir, shell_path, weights: Dict[str, np.ndarray],
                            colliders: Sequence[Tuple[str, Dict[str, np.ndarray]]], settings: dict,
                            stiffness: Optional[Dict[str, np.ndarray]] = None) -> Path:
    """A shell-animate job (WEIGHTS.npz and MESH.npz colliders as animate takes them; with
    `stiffness`, the repainted maps as STIFFNESS.npz)."""
    job_dir = Path(job_dir)
    job_files.place_file(job_dir, shell_path, SHELL_FILE)
    job_files._write_npz(job_dir / job_files.WEIGHTS_FILE, weights)
    inputs = {"shell": SHELL_FILE, "weights": job_files.WEIGHTS_FILE}
    if stiffness is not None:
        job_files._write_npz(job_dir / STIFFNESS_FILE, stiffness)
        inputs["stiffness"] = STIFFNESS_FILE
    if colliders:
        names = []
        for index, (object_name, arrays) in enumerate(colliders):
            names.append(job_files.collider_file_name(index, object_name))
            job_files._write_npz(job_dir / names[-1], arrays)
        inputs["colliders"] = names
    return job_files._write_job(job_dir, "shell-animate", inputs, {"result": job_files.RESULT_FILE}, dict(settings))


def read_shell_shape_names(shell_path) -> List[str]:
    with np.load(shell_path, allow_pickle=False) as shell:
        return [str(name) for name in shell["shape_names"]]


def read_fine_maps(shell_path) -> Tuple[np.ndarray, np.ndarray]:
    """(strain, bending) stiffness on the rig's vertices (V,), N/m at unit face height."""
    with np.load(shell_path, allow_pickle=False) as shell:
        return (np.asarray(shell["fine_strain_stiffness"], dtype=np.float64),
                np.asarray(shell["fine_bending_stiffness"], dtype=np.float64))


def map_range(values: np.ndarray) -> Tuple[float, float]:
    """(low, high) of a positive map; a constant map gets a range around its value so the
    weights stay defined."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0 or not np.all(np.isfinite(values)) or not np.all(values > 0.0):
        raise ValueError("a stiffness map must hold positive finite numbers")
    low, high = float(values.min()), float(values.max())
    if high <= low * (1.0 + 1e-9):
        low, high = low / 2.0, high * 2.0
    return low, high


def weights_from_stiffness(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Vertex-group weights in [0, 1], logarithmic between `low` and `high`."""
    span = np.log(high) - np.log(low)
    return np.clip((np.log(np.asarray(values, dtype=np.float64)) - np.log(low)) / span, 0.0, 1.0)


def stiffness_from_weights(weights: np.ndarray, low: float, high: float) -> np.ndarray:
    """The inverse of `weights_from_stiffness`: a (repainted) group back to N/m."""
    span = np.log(high) - np.log(low)
    return np.exp(np.log(low) + np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0) * span)


def shell_weight_names(shell_path) -> Optional[List[str]]:
    return read_shell_shape_names(shell_path) if shell_path and Path(shell_path).is_file() else None


def valid_range(value_range) -> bool:
    """A stored map range the weights can be read back with (0 < low < high); the default (0, 0)
    of an object never fitted is not."""
    low, high = (float(value) for value in value_range)
    return bool(np.isfinite(low) and np.isfinite(high) and 0.0 < low < high)


def repainted_stiffness(group_weights: Dict[str, Optional[np.ndarray]], ranges: Dict[str, Tuple[float, float]],
                        fitted: Tuple[np.ndarray, np.ndarray]) -> Tuple[Optional[Dict[str, np.ndarray]], str]:
    """STIFFNESS.npz arrays from the groups' weights (V,) (None: the group is missing) read back
    with their ranges, or None when neither differs from the fitted maps; and a sentence saying
    which maps the shell uses. A map whose group is missing, or whose range is unknown, is the
    fitted one (`fitted`: the shell file's fine maps)."""
    maps, said = {}, []
    changed = False
    for (key, group), fitted_values in zip((("strain", STRAIN_GROUP), ("bending", BENDING_GROUP)), fitted):
        weights = group_weights.get(group)
        if weights is None or not valid_range(ranges[group]) or len(weights) != len(fitted_values):
            maps[key] = np.asarray(fitted_values, dtype=np.float64)
            said.append(f"{group} missing or unreadable: the fitted {key} map")
            continue
        values = stiffness_from_weights(weights, *ranges[group])
        maps[key] = values
        scale = np.abs(fitted_values).max(initial=0.0)
        if np.abs(values - fitted_values).max(initial=0.0) > UNCHANGED_TOLERANCE * scale:
            changed = True
            said.append(f"the repainted {group}")
        else:
            said.append(f"{group} as fitted")
    if not changed:
        return None, "the fitted stiffness (" + "; ".join(said) + ")"
    return maps, "stiffness from " + "; ".join(said)


def tissue_stiffness_weights(strain: np.ndarray, limits: Tuple[float, float]) -> Tuple[np.ndarray, Tuple[float, float]]:
    """The shell's strain map (V,) as a volumetric stiffness map: (weights in [0, 1], the
    stiffness range (low, high)) such that the volumetric model's multiplier
    low + w (high − low) (solver/physics/maps.py `painted_multiplier`) equals the RELATIVE strain
    stiffness k / k̄, k̄ the geometric mean of the map over the rig's vertices. So tissue under
    skin that the shell found as stiff as the face's typical skin keeps its material (multiplier
    1), lips the shell found 10× softer get 0.1, and the range spans the map's own, clipped to the
    multipliers a painted map may reach (`limits`)."""
    strain = np.asarray(strain, dtype=np.float64)
    if strain.size == 0 or not np.all(np.isfinite(strain)) or not np.all(strain > 0.0):
        raise ValueError("the shell's strain map must hold positive finite numbers")
    relative = np.clip(strain / np.exp(np.log(strain).mean()), *limits)
    low, high = float(relative.min()), float(relative.max())
    if high <= low * (1.0 + 1e-9):          # a uniform map: multiplier 1 everywhere
        low, high = low, min(2.0 * low, limits[1])
    return np.clip((relative - low) / (high - low), 0.0, 1.0), (low, high)
