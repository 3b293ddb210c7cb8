"""Preferred contraction directions Q_i from a Laplace solve (paper 000 §5, after Choi et al. 2013).

For every muscle, a harmonic field u is solved on the tets it occupies, with u = 0 where
the muscle starts and u = 1 where it ends (from the atlas path parameter); its gradient
gives the fibre direction in each tet. Q_i's first column is that direction, the second
the skin normal made orthogonal to it, the third completes a right-handed frame. A tet
shared by several muscles takes the direction of the muscle that fills most of it.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

END_ZONE = 0.12
VANISHING_GRADIENT = 1e-3     # relative to the muscle's median gradient


def shape_gradients(nodes, tets):
    """(M,4,3) gradients of the linear shape functions and (M,) rest volumes."""
    corners = nodes[tets]
    edges = (corners[:, 1:] - corners[:, :1]).transpose(0, 2, 1)   # columns x1-x0, x2-x0, x3-x0
    inverse = np.linalg.inv(edges)                                   # rows: gradients of N1..N3
    gradients = np.concatenate([-inverse.sum(1, keepdims=True), inverse], axis=1)
    volumes = np.linalg.det(edges) / 6.0
    return gradients, volumes


def _harmonic_direction(nodes, tets, gradients, volumes, param):
    """Unit gradient (k,3) of the harmonic field on these tets, or None if it is ill-posed."""
    used, local = np.unique(tets, return_inverse=True)
    local = local.reshape(tets.shape)
    stiffness = np.einsum("mid,mjd,m->mij", gradients, gradients, volumes)
    rows = np.repeat(local, 4, axis=1).ravel()
    cols = np.tile(local, (1, 4)).ravel()
    matrix = sp.csr_matrix((stiffness.ravel(), (rows, cols)), shape=(len(used), len(used)))
    start = np.unique(local[param < END_ZONE])
    end = np.unique(local[param > 1 - END_ZONE])
    end = np.setdiff1d(end, start)
    if len(start) == 0 or len(end) == 0:
        return None
    value = np.full(len(used), np.nan)
    value[start], value[end] = 0.0, 1.0
    free = np.isnan(value)
    known = ~free
    if free.any():
        rhs = -matrix[free][:, known] @ value[known]
        system = matrix[free][:, free] + sp.identity(int(free.sum())) * 1e-12 * matrix.diagonal().mean()
        value[free] = spla.spsolve(system.tocsc(), rhs)
    gradient = np.einsum("mid,mi->md", gradients, value[local])
    norm = np.linalg.norm(gradient, axis=1, keepdims=True)
    # A tet whose nodes all sit in one end zone has no gradient; it is left to the caller.
    flat = norm < VANISHING_GRADIENT * np.median(norm)
    return np.where(flat, np.nan, gradient / np.maximum(norm, 1e-300))


def path_tangents(muscle, points):
    """Unit tangent (k,3) of the muscle's atlas path segment nearest to each point."""
    best = np.full(len(points), np.inf)
    tangent = np.zeros((len(points), 3))
    for path in muscle.paths:
        for a, b in zip(path.points[:-1], path.points[1:]):
            segment = b - a
            length2 = max(segment @ segment, 1e-24)
            t = np.clip((points - a) @ segment / length2, 0.0, 1.0)
            distance = np.linalg.norm(points - (a + t[:, None] * segment), axis=1)
            if segment @ segment < 1e-24:
                continue          # two knots projected onto the same skin point
            closer = distance < best
            best[closer] = distance[closer]
            tangent[closer] = segment / np.sqrt(length2)
    return tangent


def contraction_frames(nodes, tets, fraction, mean_param, muscles, skin_normal_at):
    """(M,3,3) rotations Q_i (columns: fibre, skin-normal-ish, their cross) and a per-muscle report."""
    gradients, volumes = shape_gradients(nodes, tets)
    dominant = np.argmax(fraction, axis=1)
    direction = np.full((len(tets), 3), np.nan)
    report = {}
    for index, muscle in enumerate(muscles):
        support = np.flatnonzero(fraction[:, index] > 0)
        if len(support) == 0:
            report[muscle.name] = "empty"
            continue
        field = _harmonic_direction(nodes, tets[support], gradients[support], volumes[support],
                                    mean_param[support, index])
        mine = dominant[support] == index
        along_path = path_tangents(muscle, nodes[tets[support]].mean(1))
        if field is None:
            # Too few tets to separate the ends: the atlas path gives the direction.
            field = along_path
            report[muscle.name] = "atlas path direction (too few tets for a Laplace solve)"
        else:
            flat = ~np.isfinite(field).all(1)
            field[flat] = along_path[flat]
            report[muscle.name] = "laplace" + (f" ({int(flat.sum())} end-zone tets along the path)" if flat.any() else "")
        direction[support[mine]] = field[mine]
    centroids = nodes[tets].mean(1)
    normal = skin_normal_at(centroids)
    missing = ~np.isfinite(direction).all(1) | (np.linalg.norm(np.nan_to_num(direction), axis=1) < 1e-12)
    # Passive tets (and any tet whose field vanished) get a frame too, so Q is always a rotation.
    direction[missing] = _perpendicular(normal[missing])
    first = direction / np.linalg.norm(direction, axis=1, keepdims=True)
    second = normal - (normal * first).sum(1, keepdims=True) * first
    parallel = np.linalg.norm(second, axis=1) < 1e-6
    second[parallel] = _perpendicular(first[parallel])
    second /= np.linalg.norm(second, axis=1, keepdims=True)
    third = np.cross(first, second)
    return np.stack([first, second, third], axis=2), report


def _perpendicular(vectors):
    """A unit vector perpendicular to each row (crossed with the axis it is least aligned with)."""
    axis = np.eye(3)[np.argmin(np.abs(vectors), axis=1)]
    result = np.cross(vectors, axis)
    return result / np.maximum(np.linalg.norm(result, axis=1, keepdims=True), 1e-300)
