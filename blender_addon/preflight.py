"""Pre-flight checks on exported arrays, before anything is sent to the solver (no bpy).

Each check returns `Finding`s: an `error` stops the job (the solver would refuse the input
or the bake would not line up with the mesh), a `warning` is shown and the job goes on.
Open or non-manifold skins are normal for faces and are not reported.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

ERROR, WARNING = "ERROR", "WARNING"

ARKIT_SHAPE_KEYS = (
    "browDownLeft", "browDownRight", "browInnerUp", "browOuterUpLeft", "browOuterUpRight",
    "cheekPuff", "cheekSquintLeft", "cheekSquintRight",
    "eyeBlinkLeft", "eyeBlinkRight", "eyeLookDownLeft", "eyeLookDownRight", "eyeLookInLeft", "eyeLookInRight",
    "eyeLookOutLeft", "eyeLookOutRight", "eyeLookUpLeft", "eyeLookUpRight", "eyeSquintLeft", "eyeSquintRight",
    "eyeWideLeft", "eyeWideRight",
    "jawForward", "jawLeft", "jawOpen", "jawRight",
    "mouthClose", "mouthDimpleLeft", "mouthDimpleRight", "mouthFrownLeft", "mouthFrownRight", "mouthFunnel",
    "mouthLeft", "mouthLowerDownLeft", "mouthLowerDownRight", "mouthPressLeft", "mouthPressRight", "mouthPucker",
    "mouthRight", "mouthRollLower", "mouthRollUpper", "mouthShrugLower", "mouthShrugUpper", "mouthSmileLeft",
    "mouthSmileRight", "mouthStretchLeft", "mouthStretchRight", "mouthUpperUpLeft", "mouthUpperUpRight",
    "noseSneerLeft", "noseSneerRight", "tongueOut",
)


# These move the jaw or the mouth towards a side; they are one shape each, not a left/right pair.
DIRECTION_SHAPE_KEYS = frozenset({"jawLeft", "jawRight", "mouthLeft", "mouthRight"})


def _solver_spelling(name: str) -> str:
    if name in DIRECTION_SHAPE_KEYS:
        return name
    for long, short in (("Left", "_L"), ("Right", "_R")):
        if name.endswith(long):
            return name[: -len(long)] + short
    return name


# The solver spells sides `_L`/`_R` (as ICT FaceKit does): mouthSmile_L. Apple's spelling
# (mouthSmileLeft) is recognised too and renamed on export.
SOLVER_SHAPE_KEYS = frozenset(_solver_spelling(name) for name in ARKIT_SHAPE_KEYS)
_APPLE_TO_SOLVER = {name: _solver_spelling(name) for name in ARKIT_SHAPE_KEYS}


def solver_shape_key_name(name: str, mapping: dict) -> str:
    """The name a shape key is exported under: the user's mapping first, then ARKit spellings."""
    if mapping.get(name):
        return mapping[name]
    return _APPLE_TO_SOLVER.get(name, name)
_METRE_DIAGONAL_RANGE = (0.03, 1.5)
_MIN_TRIANGLE_AREA_M2 = 1e-14
TOPOLOGY_CHANGING_MODIFIERS = frozenset({
    "ARRAY", "BEVEL", "BOOLEAN", "BUILD", "DECIMATE", "EDGE_SPLIT", "MASK", "MIRROR", "MULTIRES", "NODES",
    "REMESH", "SCREW", "SKIN", "SOLIDIFY", "SUBSURF", "TRIANGULATE", "WELD", "WIREFRAME", "VOLUME_TO_MESH",
})


@dataclass(frozen=True)
class Finding:
    severity: str
    message: str


def topology_signature(vertex_count: int, faces: np.ndarray) -> str:
    """A fingerprint of the vertex count and face indices: a model built for one topology
    cannot drive another (the bake addresses vertices by index)."""
    digest = hashlib.sha256(np.int64(vertex_count).tobytes())
    digest.update(np.ascontiguousarray(faces, dtype=np.int64).tobytes())
    return digest.hexdigest()[:32]


def check_geometry(vertices: np.ndarray, triangles: np.ndarray) -> List[Finding]:
    """NaNs, degenerate faces, and a size far from a head in metres (`vertices` already in metres)."""
    findings = []
    if not np.all(np.isfinite(vertices)):
        bad = int((~np.isfinite(vertices).all(axis=1)).sum())
        return [Finding(ERROR, f"{bad} vertices have NaN or infinite coordinates; fix the mesh before building")]
    corners = vertices[triangles]
    areas = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    repeated = (triangles[:, 0] == triangles[:, 1]) | (triangles[:, 1] == triangles[:, 2]) | \
               (triangles[:, 0] == triangles[:, 2])
    degenerate = int(((areas < _MIN_TRIANGLE_AREA_M2) | repeated).sum())
    if degenerate:
        findings.append(Finding(ERROR, f"{degenerate} degenerate (zero-area) triangles; use Mesh ▸ Clean Up ▸ "
                                       f"Merge by Distance and Degenerate Dissolve"))
    diagonal = float(np.linalg.norm(vertices.max(axis=0) - vertices.min(axis=0)))
    low, high = _METRE_DIAGONAL_RANGE
    if diagonal > high:
        findings.append(Finding(ERROR, f"the skin is {diagonal:.3g} m across — far from a head in metres. Set the "
                                       f"scene's Unit Scale or the object's scale so one unit is what you mean"))
    elif diagonal < low:
        findings.append(Finding(ERROR, f"the skin is only {diagonal * 1000:.3g} mm across — far too small for a "
                                       f"head; check the scene's Unit Scale and the object's scale"))
    return findings


def check_shape_key_names(names: Sequence[str], mapping: dict) -> List[Finding]:
    """Shape keys the solver will not recognise; the user maps them in the name-mapping list."""
    unknown = [name for name in names if solver_shape_key_name(name, mapping) not in SOLVER_SHAPE_KEYS]
    if not unknown:
        return []
    shown = ", ".join(unknown[:6]) + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
    return [Finding(WARNING, f"{len(unknown)} shape keys are not ARKit names ({shown}); the solver ignores them "
                             f"unless you map them to ARKit names in the Model panel's name mapping list")]


def check_topology(signature_now: str, signature_at_build: str) -> List[Finding]:
    if signature_at_build and signature_now != signature_at_build:
        return [Finding(ERROR, "the mesh's vertices or faces changed since the model was built; build again")]
    return []


def check_modifiers_before_cache(modifier_types_before_cache: Sequence[tuple]) -> List[Finding]:
    """`(name, type)` of the modifiers that run before the Mesh Cache modifier."""
    changing = [name for name, kind in modifier_types_before_cache if kind in TOPOLOGY_CHANGING_MODIFIERS]
    if changing:
        return [Finding(ERROR, f"modifiers before the Face Physics cache may change the vertex count "
                               f"({', '.join(changing)}); move the cache modifier above them")]
    return []
