"""The face's height, the length unit of the shell (settings.py): paper 001 normalises every face
to 1 m before using Tables 3–4, so a 20 cm face and a 2 m giant get the same behaviour."""
from __future__ import annotations

import numpy as np

# A vertex belongs to the face when some shape key moves it by this share of the largest move;
# the head, neck and ears that no key moves do not count, so a bust and a face mask agree.
MOVING_SHARE = 0.01


def face_height(vertices, shape_key_deltas) -> float:
    """The largest bounding-box extent (m) of the vertices the shape keys move; the whole skin's
    extent when there are no shape keys or none moves."""
    vertices = np.asarray(vertices, dtype=np.float64)
    deltas = np.asarray(shape_key_deltas, dtype=np.float64)
    moving = np.ones(len(vertices), dtype=bool)
    if deltas.size:
        largest = np.linalg.norm(deltas, axis=2).max(axis=0)
        if largest.max() > 0:
            moving = largest > MOVING_SHARE * largest.max()
    extent = np.ptp(vertices[moving], axis=0).max() if moving.sum() > 1 else 0.0
    if not extent > 0:
        extent = float(np.ptp(vertices, axis=0).max())
    if not extent > 0:
        raise ValueError("face_height: the skin has no extent")
    return float(extent)
