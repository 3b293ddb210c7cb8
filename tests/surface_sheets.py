"""Test-only: a flat triangulated sheet, the hand-made skin that crease and filter tests bend."""
from __future__ import annotations

import numpy as np


def grid_sheet(n: int, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """An n × n vertex grid in the xy-plane (x = column · spacing, y = row · spacing), each quad
    split along its first diagonal, normals +z: (vertices (n², 3), triangles (2 (n−1)², 3))."""
    ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    vertices = np.stack([xs.ravel() * spacing, ys.ravel() * spacing, np.zeros(n * n)], axis=1)
    corner = (np.arange(n - 1)[:, None] * n + np.arange(n - 1)[None, :]).ravel()
    a, b, c, d = corner, corner + 1, corner + 1 + n, corner + n
    triangles = np.stack([np.stack([a, b, c], axis=1), np.stack([a, c, d], axis=1)], axis=1).reshape(-1, 3)
    return vertices, triangles


def slot_wall(vertices: np.ndarray, x: float = 0.02, height: float = 0.003):
    """A wall at z = `height` along the one-vertex-wide column of the sheet at `x`: a collider a
    smoothed push cannot clear, so the skin filter has to pin there. Returns (slot (V,) bool,
    keep_out) in the skin filter's keep_out form."""
    slot = np.isclose(vertices[:, 0], x)

    def keep_out(positions):
        offending = slot & (positions[:, 2] < height - 1e-9)
        moved = positions.copy()
        moved[offending, 2] = height
        return offending, moved
    return slot, keep_out
