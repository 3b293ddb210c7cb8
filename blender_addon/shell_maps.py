"""The interactive shell's files as the add-on sees them, without bpy: the shell-fit and
shell-animate job folders, what the add-on reads from SHELL.npz (numpy only, allow_pickle=False:
its shape names and the fitted stiffness maps on the rig's vertices) and the maps' conversion to
vertex-group weights and back.

A stiffness map spans orders of magnitude (the fit works in log space, paper 001 §4), so its
vertex-group weight is logarithmic: w = (log k − log k_low) / (log k_high − log k_low), with
(k_low, k_high) the map's range, stored on the object beside the group so that a repainted group
converts back to N/m (`stiffness_from_weights`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import job_files

SHELL_FILE = "shell.npz"
STRAIN_GROUP = "FP_shell_strain"
BENDING_GROUP = "FP_shell_bending"
DEFAULT_TRIANGLES = 4000


def write_shell_fit_job(job_dir, rig_arrays: Dict[str, np.ndarray], triangles: int) -> Path:
    """A shell-fit job: the rig the build exports → SHELL.npz."""
    job_dir = Path(job_dir)
    job_files._write_npz(job_dir / job_files.RIG_FILE, rig_arrays)
    return job_files._write_job(job_dir, "shell-fit", {"rig": job_files.RIG_FILE}, {"shell": SHELL_FILE},
                                {"triangles": int(triangles)})


def write_shell_animate_job(job_dir, shell_path, weights: Dict[str, np.ndarray],
                            colliders: Sequence[Tuple[str, Dict[str, np.ndarray]]], settings: dict) -> Path:
    """A shell-animate job (WEIGHTS.npz and MESH.npz colliders as animate takes them)."""
    job_dir = Path(job_dir)
    job_files.place_file(job_dir, shell_path, SHELL_FILE)
    job_files._write_npz(job_dir / job_files.WEIGHTS_FILE, weights)
    inputs = {"shell": SHELL_FILE, "weights": job_files.WEIGHTS_FILE}
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
