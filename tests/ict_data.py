"""Test-only: the ICT FaceKit generic face from ../shared/data, converted to a FaceRig.

The data set is reference material beside the project, not part of it: tests that
use it must ``pytest.skip`` when ``ict_available()`` is False.

What the conversion keeps:
* skin = the parts face, head_neck, mouth_socket, eye_socket_left and
  eye_socket_right, which are the contiguous vertices 0-14061, with the faces
  lying wholly on them (all quads);
* teeth_upper / teeth_lower as the upper / lower teeth meshes, re-indexed;
* the 53 ARKit expressions as shape keys restricted to the skin (the teeth
  deltas are dropped: teeth move rigidly with the skull and the jaw);
* the Multi-PIE 68 landmarks on the skin (all 68 are), named mp68_00..mp68_67;
* ICT's own `narrow_face` part (vertices 0-6705: the front of the face without ears, scalp,
  neck and the insides of the mouth and eye sockets) as the vertex group `face_region`, the
  region inverse physics reports its fit error on.
Centimetres become metres.

Degenerate faces: the skin and both teeth meshes were checked and have no face
that repeats a vertex and no triangle (quads split along corners 0-2) under
1e-14 m^2; the smallest skin triangle is about 4.6e-9 m^2. So nothing is dropped,
and the result passes validate_rig unchanged.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Tuple

import numpy as np

from solver.rig import FaceRig, validate_rig

ICT_PATH = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "ict_facekit_generic.npz"

_CM_TO_M = 0.01
_SKIN_PARTS = ("face", "head_neck", "mouth_socket", "eye_socket_left", "eye_socket_right")

_converted_rig: Optional[FaceRig] = None


def ict_available() -> bool:
    return ICT_PATH.is_file()


def load_ict_rig() -> FaceRig:
    """The converted ICT rig, shared by every caller: its arrays are read-only.

    Derive variants with dataclasses.replace and copies of the arrays you change.
    """
    global _converted_rig
    if _converted_rig is None:
        if not ict_available():
            raise FileNotFoundError(f"ICT FaceKit data not found at {ICT_PATH} (it lives in ../shared/data "
                                    "beside the project; tests using it should skip)")
        _converted_rig = _convert(ICT_PATH)
    return _converted_rig


def _convert(path: Path) -> FaceRig:
    with np.load(path, allow_pickle=False) as data:
        neutral_m = data["neutral_cm"] * _CM_TO_M
        faces = data["faces"].astype(np.int64)
        parts = {str(name): (int(start), int(stop))
                 for name, (start, stop) in zip(data["part_names"], data["part_vertex_ranges"])}
        skin_count = _skin_vertex_count(parts)
        shape_key_deltas = data["expression_deltas_cm"][:, :skin_count].astype(np.float64) * _CM_TO_M
        shape_key_names = data["expression_names"].astype(str)
        multipie68 = data["landmarks_multipie68"].astype(np.int64)
        narrow_face = parts["narrow_face"]

    upper_teeth_vertices, upper_teeth_faces = _part_mesh(neutral_m, faces, parts["teeth_upper"])
    lower_teeth_vertices, lower_teeth_faces = _part_mesh(neutral_m, faces, parts["teeth_lower"])
    on_skin = multipie68 < skin_count
    face_region = np.zeros((1, skin_count))
    face_region[0, narrow_face[0]:narrow_face[1]] = 1.0
    rig = FaceRig(
        vertices=neutral_m[:skin_count],
        faces=faces[_faces_within(faces, 0, skin_count)],
        shape_key_names=shape_key_names,
        shape_key_deltas=shape_key_deltas,
        upper_teeth_vertices=upper_teeth_vertices,
        upper_teeth_faces=upper_teeth_faces,
        lower_teeth_vertices=lower_teeth_vertices,
        lower_teeth_faces=lower_teeth_faces,
        landmark_names=np.array([f"mp68_{i:02d}" for i in np.flatnonzero(on_skin)], dtype=str),
        landmark_vertices=multipie68[on_skin],
        vertex_group_names=np.array(["face_region"]),
        vertex_group_weights=face_region,
    )
    validate_rig(rig)
    for value in vars(rig).values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return rig


def _skin_vertex_count(parts: dict) -> int:
    """End of the skin range; the parts must tile 0..N without gaps, as the skin is sliced as a prefix."""
    ranges = sorted(parts[name] for name in _SKIN_PARTS)
    expected_start = 0
    for start, stop in ranges:
        if start != expected_start:
            raise ValueError(f"ICT skin parts {_SKIN_PARTS} no longer tile a prefix of the vertices: {ranges}")
        expected_start = stop
    return expected_start


def _faces_within(faces: np.ndarray, start: int, stop: int) -> np.ndarray:
    corners = np.where(faces == -1, start, faces)  # -1 pads triangles in the quad array
    return ((corners >= start) & (corners < stop)).all(axis=1)


def _part_mesh(vertices: np.ndarray, faces: np.ndarray, vertex_range: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
    start, stop = vertex_range
    part_faces = faces[_faces_within(faces, start, stop)]
    return vertices[start:stop], np.where(part_faces == -1, -1, part_faces - start)
