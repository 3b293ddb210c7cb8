"""Timeline markers on the baked frames the solver had trouble with: a frame that did not
converge, one where the written skin is inside a collider, one with inverted tets.

`result_markers` is the rule, on RESULT.npz's arrays alone (no bpy); `mark_result` puts its
markers on a scene after removing those an earlier Face Physics bake made — every marker
whose name starts with `PREFIX` — and never touches the user's own markers.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Mapping, Tuple

import numpy as np

from .job_files import RESULT_FILE

PREFIX = "FP "
RESULT_HEALTH_KEYS = ("converged", "penetration_depth_max", "inverted_tets")
# A skin deeper than this inside a collider is marked. The contact solver's own tolerance is
# 0.05 mm (contact_response.DEFAULT_CONTACT_TOLERANCE): anything within twice that is contact
# working as designed, not a frame to look at.
PENETRATION_MARK_MM = 0.1


def result_markers(result: Mapping[str, np.ndarray], first_frame: int) -> List[Tuple[int, str]]:
    """(scene frame, marker name) per troubled frame of a bake's RESULT.npz arrays, frame i of
    the result at scene frame `first_frame + i`: one marker per frame naming every problem,
    e.g. "FP unconverged, penetration 0.42 mm, inverted 3". Arrays a result lacks count as fine."""
    converged = np.asarray(result["converged"], dtype=bool)
    frames = len(converged)
    depth_mm = 1e3 * np.asarray(result.get("penetration_depth_max", np.zeros(frames)), dtype=np.float64)
    inverted = np.asarray(result.get("inverted_tets", np.zeros(frames)), dtype=np.int64)
    markers = []
    for index in range(frames):
        problems = []
        if not converged[index]:
            problems.append("unconverged")
        if depth_mm[index] > PENETRATION_MARK_MM:
            problems.append(f"penetration {depth_mm[index]:.2f} mm")
        if inverted[index] > 0:
            problems.append(f"inverted {int(inverted[index])}")
        if problems:
            markers.append((first_frame + index, PREFIX + ", ".join(problems)))
    return markers


def clear_markers(scene) -> None:
    """Remove the markers a Face Physics bake made (named with `PREFIX`)."""
    for marker in [marker for marker in scene.timeline_markers if marker.name.startswith(PREFIX)]:
        scene.timeline_markers.remove(marker)


def mark_result(scene, result: Mapping[str, np.ndarray], first_frame: int) -> List[Tuple[int, str]]:
    """Replace the scene's Face Physics markers by those of this bake's result; returns them."""
    clear_markers(scene)
    markers = result_markers(result, first_frame)
    for frame, name in markers:
        scene.timeline_markers.new(name, frame=frame)
    return markers


def read_result_health(job_dir) -> dict:
    """The arrays of a finished animate job's RESULT.npz that `result_markers` reads."""
    with np.load(Path(job_dir) / RESULT_FILE, allow_pickle=False) as result:
        return {key: np.array(result[key]) for key in RESULT_HEALTH_KEYS if key in result.files}


def mark_bake(scene, job_dir, first_frame: int) -> List[Tuple[int, str]]:
    """`mark_result` with a finished bake job's RESULT.npz (the bake's apply step calls this)."""
    return mark_result(scene, read_result_health(job_dir), first_frame)
