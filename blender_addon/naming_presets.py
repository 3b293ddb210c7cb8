"""Shape-key naming presets: tables from other face rigs' shape-key names to ARKit names, and
the tolerant matching that fills the Model panel's name-mapping rows from them (no bpy).

Each table maps a convention's own name to Apple's ARKit spelling (mouthSmileLeft); the rows get
the solver's spelling (mouthSmile_L), the one `preflight.solver_shape_key_name` checks. Every
convention also accepts ARKit's own names (so eyeBlinkL is eyeBlink_L in any of them). A name
matches a table entry when both are equal after `matching_key`: case, separators (`_ - . space`),
a `Left`/`Right` side word versus `L`/`R`, and a rig's prefix (`CTRL_expressions_`, a mesh name
before `__` or `.`) do not count. A table only names shapes that are one ARKit shape: where a
convention splits one ARKit shape into parts (MetaHuman's browRaiseInL and browRaiseInR for
browInnerUp), none of the parts is mapped and the ARKit name is reported missing, for the artist
to decide.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from .preflight import ARKIT_SHAPE_KEYS, SOLVER_SHAPE_KEYS, solver_shape_key_name

# Faceit (the Blender add-on) names its ARKit target shape keys exactly as Apple does
# (eyeBlinkLeft, mouthSmileRight, …). Unsure: that is its ARKit expression set as we know it; the
# documentation search found no Faceit page to confirm it, and Faceit lets the user rename its
# targets, which no table can follow. What this preset adds over the built-in recognition of Apple's
# spelling is the tolerance: EyeBlinkLeft (Unity/Unreal enum case), eye_blink_left, EYE-BLINK-L.
FACEIT: Dict[str, str] = {name: name for name in ARKIT_SHAPE_KEYS}

# MetaHuman control curves (Epic's MetaHuman standards list of control curves, read through the
# docs search), as shape keys exported from a MetaHuman face or named after its curves, with or
# without the rig's `CTRL_expressions_` prefix. The sides are the face's own (L = the subject's
# left), as in ARKit. Only curves that are one ARKit shape are here. Left out on purpose:
# browInnerUp (browRaiseInL/R), cheekPuff (mouthCheekBlowL/R), mouthFunnel (four mouthFunnelUL…DR
# quarters), mouthPucker (four mouthLipsPurse… quarters), mouthClose (four mouthLipsTogether…),
# mouthRoll*/mouthShrug* (split per side / per lip).
METAHUMAN: Dict[str, str] = {
    "browDownL": "browDownLeft", "browDownR": "browDownRight",
    "browRaiseOuterL": "browOuterUpLeft", "browRaiseOuterR": "browOuterUpRight",
    "eyeBlinkL": "eyeBlinkLeft", "eyeBlinkR": "eyeBlinkRight",
    "eyeWidenL": "eyeWideLeft", "eyeWidenR": "eyeWideRight",
    "eyeSquintInnerL": "eyeSquintLeft", "eyeSquintInnerR": "eyeSquintRight",
    "eyeCheekRaiseL": "cheekSquintLeft", "eyeCheekRaiseR": "cheekSquintRight",
    "eyeLookUpL": "eyeLookUpLeft", "eyeLookUpR": "eyeLookUpRight",
    "eyeLookDownL": "eyeLookDownLeft", "eyeLookDownR": "eyeLookDownRight",
    # Unsure: taken as the subject's directions, so the left eye looking left looks out.
    "eyeLookLeftL": "eyeLookOutLeft", "eyeLookRightL": "eyeLookInLeft",
    "eyeLookLeftR": "eyeLookInRight", "eyeLookRightR": "eyeLookOutRight",
    "noseWrinkleL": "noseSneerLeft", "noseWrinkleR": "noseSneerRight",
    "mouthLeft": "mouthLeft", "mouthRight": "mouthRight",
    "mouthUpperLipRaiseL": "mouthUpperUpLeft", "mouthUpperLipRaiseR": "mouthUpperUpRight",
    "mouthLowerLipDepressL": "mouthLowerDownLeft", "mouthLowerLipDepressR": "mouthLowerDownRight",
    "mouthCornerPullL": "mouthSmileLeft", "mouthCornerPullR": "mouthSmileRight",
    "mouthCornerDepressL": "mouthFrownLeft", "mouthCornerDepressR": "mouthFrownRight",
    "mouthStretchL": "mouthStretchLeft", "mouthStretchR": "mouthStretchRight",
    "mouthDimpleL": "mouthDimpleLeft", "mouthDimpleR": "mouthDimpleRight",
    # Unsure: these curves were past the part of Epic's list the search returned; the names are
    # the ones MetaHuman rigs are commonly seen with.
    "mouthPressL": "mouthPressLeft", "mouthPressR": "mouthPressRight",
    "jawOpen": "jawOpen", "jawLeft": "jawLeft", "jawRight": "jawRight", "jawFwd": "jawForward",
    "tongueOut": "tongueOut",
}

# ICT FaceKit's expressions (the names in its generic face model, as in ../shared/data): ARKit's
# shapes with `_L`/`_R` sides. ICT splits browInnerUp and cheekPuff into sides (browInnerUp_L/_R,
# cheekPuff_L/_R), which are left unmapped (see above), and has no tongueOut.
ICT_FACEKIT: Dict[str, str] = {
    "browDown_L": "browDownLeft", "browDown_R": "browDownRight",
    "browOuterUp_L": "browOuterUpLeft", "browOuterUp_R": "browOuterUpRight",
    "cheekSquint_L": "cheekSquintLeft", "cheekSquint_R": "cheekSquintRight",
    "eyeBlink_L": "eyeBlinkLeft", "eyeBlink_R": "eyeBlinkRight",
    "eyeLookDown_L": "eyeLookDownLeft", "eyeLookDown_R": "eyeLookDownRight",
    "eyeLookIn_L": "eyeLookInLeft", "eyeLookIn_R": "eyeLookInRight",
    "eyeLookOut_L": "eyeLookOutLeft", "eyeLookOut_R": "eyeLookOutRight",
    "eyeLookUp_L": "eyeLookUpLeft", "eyeLookUp_R": "eyeLookUpRight",
    "eyeSquint_L": "eyeSquintLeft", "eyeSquint_R": "eyeSquintRight",
    "eyeWide_L": "eyeWideLeft", "eyeWide_R": "eyeWideRight",
    "jawForward": "jawForward", "jawLeft": "jawLeft", "jawOpen": "jawOpen", "jawRight": "jawRight",
    "mouthClose": "mouthClose",
    "mouthDimple_L": "mouthDimpleLeft", "mouthDimple_R": "mouthDimpleRight",
    "mouthFrown_L": "mouthFrownLeft", "mouthFrown_R": "mouthFrownRight",
    "mouthFunnel": "mouthFunnel", "mouthLeft": "mouthLeft",
    "mouthLowerDown_L": "mouthLowerDownLeft", "mouthLowerDown_R": "mouthLowerDownRight",
    "mouthPress_L": "mouthPressLeft", "mouthPress_R": "mouthPressRight",
    "mouthPucker": "mouthPucker", "mouthRight": "mouthRight",
    "mouthRollLower": "mouthRollLower", "mouthRollUpper": "mouthRollUpper",
    "mouthShrugLower": "mouthShrugLower", "mouthShrugUpper": "mouthShrugUpper",
    "mouthSmile_L": "mouthSmileLeft", "mouthSmile_R": "mouthSmileRight",
    "mouthStretch_L": "mouthStretchLeft", "mouthStretch_R": "mouthStretchRight",
    "mouthUpperUp_L": "mouthUpperUpLeft", "mouthUpperUp_R": "mouthUpperUpRight",
    "noseSneer_L": "noseSneerLeft", "noseSneer_R": "noseSneerRight",
}

# (identifier, label, description, table): the operator's enum is made from this.
CONVENTIONS: Tuple[Tuple[str, str, str, Dict[str, str]], ...] = (
    ('FACEIT', "Faceit", "ARKit names as Faceit makes them (eyeBlinkLeft), in any case or separators", FACEIT),
    ('METAHUMAN', "MetaHuman-style", "MetaHuman control-curve names (eyeBlinkL, mouthCornerPullL, "
                                     "CTRL_expressions_browDownL)", METAHUMAN),
    ('ICT', "ICT FaceKit", "ICT FaceKit expression names (eyeBlink_L, mouthSmile_R)", ICT_FACEKIT),
)
TABLES: Dict[str, Dict[str, str]] = {identifier: table for identifier, _, _, table in CONVENTIONS}

# Prefixes rigs put before the expression's name; removed before matching.
_PREFIXES = ("ctrlexpressions", "expressions", "blendshape", "shapekey", "arkit")
_SEPARATORS = re.compile(r"[\s_.\-]+")


def matching_key(name: str) -> str:
    """What two names are compared by: lower case, no separators, `left`/`right` at the end as
    `l`/`r`, no rig prefix. `CTRL_expressions_eyeBlinkL`, `eye_blink_L`, `EyeBlinkLeft` → `eyeblinkl`."""
    text = name.strip()
    for splitter in ("__", ":", "."):
        # A mesh or namespace before the expression (head_lod0_mesh__eye_blink_L, Face:jawOpen),
        # but not a Blender side suffix (.L).
        head, found, tail = text.rpartition(splitter)
        if found and len(_SEPARATORS.sub("", tail)) > 1:
            text = tail
    key = _SEPARATORS.sub("", text).lower()
    for prefix in _PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix):]
            break
    for word, letter in (("left", "l"), ("right", "r")):
        if key.endswith(word) and len(key) > len(word):
            key = key[: -len(word)] + letter
    return key


def lookup(convention: str) -> Dict[str, str]:
    """matching_key → solver name: ARKit's own names in any spelling (a MetaHuman-style face often
    has mouthSmileL beside its curve names), then the convention's table, which wins."""
    names = {**FACEIT, **TABLES[convention]}
    return {matching_key(own): solver_shape_key_name(arkit, {}) for own, arkit in names.items()}


@dataclass
class NamingMatch:
    """What a convention makes of a mesh's shape-key names."""
    mapped: Dict[str, str] = field(default_factory=dict)      # shape key → solver name, a row is needed
    already: Dict[str, str] = field(default_factory=dict)     # shape key → solver name, recognised as is
    duplicates: Dict[str, str] = field(default_factory=dict)  # shape key → solver name another key took
    missing: List[str] = field(default_factory=list)          # ARKit (solver) names no shape key gives
    kept: Dict[str, str] = field(default_factory=dict)        # rows the user chose otherwise, left alone

    @property
    def matched(self) -> int:
        return len(self.mapped) + len(self.already)


def match_shape_keys(names: Iterable[str], convention: str,
                     kept: Optional[Mapping[str, str]] = None) -> NamingMatch:
    """Match `names` (the mesh's shape keys, in order) against one convention's table.

    `kept` are mapping rows that stay as they are (shape key → solver name the user chose): those
    keys are not matched, and their targets count as taken. The first shape key to claim an ARKit
    name gets it; a later one is a duplicate, never a second row for the same name."""
    by_key = lookup(convention)
    names = list(names)
    result = NamingMatch()
    # A kept row the table agrees with is simply matched again (applying a preset twice is a no-op).
    kept = {name: target for name, target in (kept or {}).items()
            if target and by_key.get(matching_key(name)) != target}
    result.kept = dict(kept)
    taken = set(kept.values())
    for name in names:          # names already right need no row and claim their target first
        if name not in kept and solver_shape_key_name(name, {}) in SOLVER_SHAPE_KEYS:
            target = solver_shape_key_name(name, {})
            if by_key.get(matching_key(name)) == target and target not in taken:
                result.already[name] = target
            taken.add(target)
    for name in names:
        if name in kept or name in result.already or solver_shape_key_name(name, {}) in SOLVER_SHAPE_KEYS:
            continue
        target = by_key.get(matching_key(name))
        if target is None:
            continue
        if target in taken:
            result.duplicates[name] = target
        else:
            result.mapped[name] = target
            taken.add(target)
    result.missing = sorted(SOLVER_SHAPE_KEYS - taken)
    return result


def summary(match: NamingMatch, label: str, shown: int = 8) -> str:
    """The one-line report of an applied preset."""
    text = f"{label}: {match.matched} shape keys matched ({len(match.mapped)} mapped, {len(match.already)} " \
           f"already ARKit)"
    if match.kept:
        text += f"; {len(match.kept)} rows you set kept"
    if match.duplicates:
        text += f"; {len(match.duplicates)} left out as duplicates ({', '.join(sorted(match.duplicates)[:3])})"
    if match.missing:
        listed = ", ".join(match.missing[:shown]) + (f" and {len(match.missing) - shown} more"
                                                    if len(match.missing) > shown else "")
        text += f"; {len(match.missing)} ARKit names still missing: {listed}"
    else:
        text += "; every ARKit name is covered"
    return text
