"""Barycentric embedding of the rig's skin vertices in the tet mesh.

Each vertex gets the tet that contains it (or, for the few skin vertices just outside
the snapped tissue boundary, the tet it is least outside of) and four weights that sum
to one, so  x_vertex = Σ w_k x_node_k  reproduces the rest position exactly and follows
the simulated tissue afterwards.

Where the mesh is cut (the mouth slit), tets and points carry a side; a point with a side
is embedded only in tets of the same side or of none, so each lip's skin follows its lip.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

CANDIDATES = 32


def embed_points(nodes, tets, points, point_side=None, tet_side=None):
    """(P,) tet index, (P,4) weights, (P,) distance outside the chosen tet (0 when inside).

    point_side (P,) and tet_side (M,), optional: integer sides, 0 for none. A point with a side
    is embedded only in tets of its side or of none.
    """
    corners = nodes[tets]
    origin = corners[:, 0]
    edges = (corners[:, 1:] - origin[:, None]).transpose(0, 2, 1)
    inverse = np.linalg.inv(edges)
    tree = cKDTree(corners.mean(1))
    _, candidates = tree.query(points, k=min(CANDIDATES, len(tets)))
    local = np.einsum("pkij,pkj->pki", inverse[candidates], points[:, None, :] - origin[candidates])
    weights = np.concatenate([1 - local.sum(2, keepdims=True), local], axis=2)   # (P,k,4)
    worst = weights.min(2)
    if point_side is not None and tet_side is not None:
        candidate_side = np.asarray(tet_side)[candidates]
        own = np.asarray(point_side)[:, None]
        worst = np.where((own != 0) & (candidate_side != 0) & (candidate_side != own), -np.inf, worst)
    choice = np.argmax(worst, axis=1)
    rows = np.arange(len(points))
    tet = candidates[rows, choice]
    w = weights[rows, choice]
    inside_weights = np.clip(w, 0, None)
    inside_weights /= inside_weights.sum(1, keepdims=True)
    outside = np.linalg.norm(np.einsum("pk,pkd->pd", inside_weights, corners[tet]) - points, axis=1)
    return tet, w, np.where(w.min(1) >= 0, 0.0, outside)
