"""Repainted shell stiffness: STIFFNESS.npz, the per-rig-vertex strain and bending stiffness the
add-on sends from its FP_shell_strain / FP_shell_bending vertex groups (docs/shell.md, "Stiffness
maps"), turned into the shell's per-coarse-vertex stiffness.

STIFFNESS.npz holds `strain` and `bending`, each (V,) float: N/m at unit face height on the rig's
V vertices, the same numbers as the shell file's `fine_strain_stiffness` / `fine_bending_stiffness`
and the add-on's groups once converted back with their stored range. Read with
allow_pickle=False; every check raises ValueError naming the array and the fix
(`StiffnessMapError`), which the requests turn into their own errors.

The coarse stiffness is the geometric mean of the rig's values round each coarse vertex's closest
point: log k_coarse = coarse_from_fine @ log k_fine. Log space because the maps are log-scale in
the fit (paper 001 §4 optimises log k) and in the painted groups: a vertex painted 10× stiffer
next to one at 1× should give about 3×, not 5.5× as an arithmetic mean (dominated by the stiff
side) would, and a constant map comes back exactly (the rows sum to one).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Tuple

import numpy as np

from ..npz_files import NpzReadError, read_npz

STIFFNESS_KEYS = ("strain", "bending")
_HOW = ("save it with numpy.savez(path, strain=..., bending=...), one positive stiffness (N/m at unit face "
        "height) per rig vertex, as the add-on writes it from the FP_shell_strain / FP_shell_bending groups")


class StiffnessMapError(ValueError):
    """A STIFFNESS.npz that cannot be used; the message names the array and what to do."""


def read_stiffness_maps(path, fine_vertex_count: int) -> Tuple[np.ndarray, np.ndarray]:
    """(strain, bending), each (V,) float64 > 0, from STIFFNESS.npz; StiffnessMapError otherwise."""
    path = Path(path)
    try:
        arrays = read_npz(path, STIFFNESS_KEYS)
    except NpzReadError as error:
        raise StiffnessMapError(f"{error}: not a readable stiffness file; {_HOW}") from None
    maps = []
    for key in STIFFNESS_KEYS:
        if key not in arrays:
            raise StiffnessMapError(f"{path.name}: {key}: missing; {_HOW}")
        values = arrays[key]
        if values.dtype.kind not in "fiu":
            raise StiffnessMapError(f"{path.name}: {key}: expected numbers, found dtype {values.dtype}; {_HOW}")
        if values.shape != (fine_vertex_count,):
            raise StiffnessMapError(f"{path.name}: {key}: expected shape ({fine_vertex_count},), one value per rig "
                                    f"vertex of the shell, found {values.shape}; export it from the rig the shell "
                                    f"was fitted on")
        values = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            raise StiffnessMapError(f"{path.name}: {key}: holds NaN or infinite values; {_HOW}")
        if not np.all(values > 0.0):
            raise StiffnessMapError(f"{path.name}: {key}: {int((values <= 0).sum())} values are zero or negative "
                                    f"(smallest {values.min():g}); a stiffness must be positive: give every vertex "
                                    f"a positive value")
        maps.append(values)
    return maps[0], maps[1]


def coarse_stiffness(model, fine_strain: np.ndarray, fine_bending: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The shell's per-coarse-vertex (strain, bending) of per-rig-vertex maps, by the geometric mean
    through `coarse_from_fine` (module docstring for why in log space)."""
    carry = model.coarse_from_fine
    return (np.exp(carry @ np.log(np.asarray(fine_strain, dtype=np.float64))),
            np.exp(carry @ np.log(np.asarray(fine_bending, dtype=np.float64))))


def with_stiffness_maps(model, fine_strain: np.ndarray, fine_bending: np.ndarray):
    """A copy of the ShellModel whose stiffness comes from the rig maps (coarse via
    `coarse_stiffness`, the fine ones kept as given). A ShellSimulator built from it factorises
    its own K, which depends on the stiffness."""
    strain, bending = coarse_stiffness(model, fine_strain, fine_bending)
    return dataclasses.replace(model, strain_stiffness=strain, bending_stiffness=bending,
                               fine_strain_stiffness=np.asarray(fine_strain, dtype=np.float64),
                               fine_bending_stiffness=np.asarray(fine_bending, dtype=np.float64))


def load_with_stiffness(model, path):
    """`model` with the stiffness of STIFFNESS.npz at `path` (None: `model` unchanged)."""
    if path is None:
        return model
    strain, bending = read_stiffness_maps(path, model.fine_vertex_count)
    return with_stiffness_maps(model, strain, bending)
