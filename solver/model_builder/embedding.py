"""Barycentric embedding of the rig's skin vertices in the tet mesh.

Each vertex gets the tet that contains it (or, for the few skin vertices just outside
the snapped tissue boundary, the tet it is least outside of) and four weights that sum
to one, so  x_vertex = Σ w_k x_node_k  reproduces the rest position exactly and follows
the simulated tissue afterwards.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

CANDIDATES = 32


def embed_points(nodes, tets, points):
    """(P,) tet index, (P,4) weights, (P,) distance outside the chosen tet (0 when inside)."""
    corners = nodes[tets]
    origin = corners[:, 0]
    edges = (corners[:, 1:] - origin[:, None]).transpose(0, 2, 1)
    inverse = np.linalg.inv(edges)
    tree = cKDTree(corners.mean(1))
    _, candidates = tree.query(points, k=min(CANDIDATES, len(tets)))
    local = np.einsum("pkij,pkj->pki", inverse[candidates], points[:, None, :] - origin[candidates])
    weights = np.concatenate([1 - local.sum(2, keepdims=True), local], axis=2)   # (P,k,4)
    worst = weights.min(2)
    choice = np.argmax(worst, axis=1)
    rows = np.arange(len(points))
    tet = candidates[rows, choice]
    w = weights[rows, choice]
    inside_weights = np.clip(w, 0, None)
    inside_weights /= inside_weights.sum(1, keepdims=True)
    outside = np.linalg.norm(np.einsum("pk,pkd->pd", inside_weights, corners[tet]) - points, axis=1)
    return tet, w, np.where(worst[rows, choice] >= 0, 0.0, outside)
