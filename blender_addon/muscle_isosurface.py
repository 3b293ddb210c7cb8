"""Each muscle as a smooth closed surface: an isosurface of its fraction field on the model's own
tet mesh, in numpy alone (the add-on cannot use scipy).

The solver gives every tet the fraction of it each muscle fills (`muscle_fraction`, (M, m)).
The boundary of the tets a muscle owns is a staircase of tet faces that breaks into pieces
wherever a muscle is a single tet thick. Here each muscle's fractions become a field on the
tet nodes instead (the volume-weighted mean over the tets at a node, then one Laplacian step
over the tet edges), and the surface is where that field crosses a level, found by marching
tetrahedra: the field is linear in each tet, so the surface is one flat triangle or quad per
tet the level cuts, with one vertex per cut edge shared by the tets around it (so the surface
is connected), closed off with the part of the model's own boundary where the field is above
the level (a muscle attached to the skull, or cut by the model's edge), and oriented outward
(against the field's gradient). The surface is then split once and lightly Taubin-smoothed
(surface_smoothing.py), which takes out the tet-scale facets, and each muscle is scaled back
to the volume it enclosed before.

The level is the one whose surface encloses the muscle's own volume (Σ fraction × tet volume;
`volume_above` gives that volume for any level exactly, so a bisection finds it without
meshing), kept between LOWEST_LEVEL and HIGHEST_LEVEL × the muscle's peak node value. A muscle
one or two tets thick, whose node values stay low, meets the upper bound: it is drawn thicker
than its volume — at most a few times on the 20,000-tet demo head — but as one piece, where a
higher level would break it into beads.
"""
from __future__ import annotations

import numpy as np

from .surface_smoothing import subdivide, taubin_smooth

# Laplacian steps on the node field over the tet edges, each moving a node this share of the
# way to its neighbours' mean: rounds the corners of a muscle a tet or two wide.
FIELD_STEPS = 1
FIELD_STEP_SHARE = 0.5
# The level encloses the muscle's own volume, within these shares of its peak node value.
LOWEST_LEVEL = 0.2
HIGHEST_LEVEL = 0.6
LEVEL_BISECTIONS = 12
# The isosurface is split once (each triangle into four) and smoothed by this many Taubin λ|μ
# pairs: a muscle one tet thick is a tube only three or four triangles round, which smoothing
# alone cannot round. On the 20,000-tet demo head the mean dihedral angle is 35° as marched,
# 27° after 8 pairs, 17° split once and after 10 pairs (35,000 triangles, 0.3 s).
SURFACE_PASSES = 10
SUBDIVISIONS = 1

_TET_EDGES = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])
# A tet's faces, each ordered to face away from the fourth corner in a positively oriented tet.
_TET_FACES = np.array([[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]])


def tet_volumes(positions, tets) -> np.ndarray:
    corners = positions[tets]
    edges = corners[:, 1:] - corners[:, :1]
    return np.abs(np.einsum("ij,ij->i", np.cross(edges[:, 0], edges[:, 1]), edges[:, 2])) / 6.0


def _node_sum(tets, per_tet: np.ndarray, count: int) -> np.ndarray:
    """Each node's sum of `per_tet` over the tets it is a corner of."""
    return np.bincount(tets.reshape(-1), weights=np.repeat(per_tet, 4), minlength=count)


def _row_keys(rows: np.ndarray, count: int) -> np.ndarray:
    """One int64 per row of sorted node indices (< count), equal for equal rows."""
    key = np.zeros(len(rows), dtype=np.int64)
    for column in range(rows.shape[1]):
        key = key * count + rows[:, column]
    return key


def unique_tet_edges(tets) -> np.ndarray:
    """(E, 2) node pairs of the tet mesh's edges, each once, smaller node first."""
    tets = np.asarray(tets, dtype=np.int64)
    count = int(tets.max()) + 1
    keys = np.unique(_row_keys(np.sort(tets[:, _TET_EDGES].reshape(-1, 2), axis=1), count))
    return np.stack([keys // count, keys % count], axis=1)


def node_fields(positions, tets, fraction, steps: int = FIELD_STEPS,
                share: float = FIELD_STEP_SHARE, muscles=None) -> np.ndarray:
    """(N, len(muscles)) each muscle's fraction at the nodes (all muscles unless `muscles` says
    which): the volume-weighted mean over the tets at a node, then `steps` Laplacian steps over
    the tet edges. One bincount per muscle and step: a dense (tets × muscles) scatter took
    ten times as long on the 35,600-tet ICT head."""
    count = len(positions)
    tets = np.asarray(tets, dtype=np.int64)
    muscles = np.arange(fraction.shape[1]) if muscles is None else muscles
    volume = tet_volumes(positions, tets)
    weight = _node_sum(tets, volume, count)
    weight[weight == 0] = 1.0
    if steps:
        edges = unique_tet_edges(tets)
        ends = np.concatenate([edges[:, 0], edges[:, 1]])
        others = np.concatenate([edges[:, 1], edges[:, 0]])
        degree = np.maximum(np.bincount(ends, minlength=count), 1).astype(np.float64)
    field = np.empty((count, len(muscles)))
    by_muscle = np.ascontiguousarray(np.asarray(fraction)[:, muscles].T)
    for column, muscle_fraction in enumerate(by_muscle):
        values = _node_sum(tets, volume * muscle_fraction, count) / weight
        for _ in range(steps):
            values += share * (np.bincount(ends, weights=values[others], minlength=count) / degree - values)
        field[:, column] = values
    return field


def boundary_faces(positions, tets) -> np.ndarray:
    """(F, 3) the faces of the tet mesh that belong to one tet only, ordered to face outward."""
    tets = np.asarray(tets)
    faces = tets[:, _TET_FACES].reshape(-1, 3)
    count = len(positions)
    if count ** 3 < 2 ** 62:
        _, first, counts = np.unique(_row_keys(np.sort(faces, axis=1), count), return_index=True,
                                     return_counts=True)
    else:
        _, first, counts = np.unique(np.sort(faces, axis=1), axis=0, return_index=True, return_counts=True)
    outer = first[counts == 1]
    faces, opposite = faces[outer], tets.reshape(-1)[outer]    # face k of a tet is opposite its corner k
    corners = positions[faces]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    backwards = np.einsum("ij,ij->i", normal, corners[:, 0] - positions[opposite]) < 0
    faces[backwards] = faces[backwards][:, ::-1]
    return faces


def volume_above(sorted_corner_values: np.ndarray, volumes: np.ndarray, level: float) -> float:
    """The volume of the tets where the field (linear in each tet, its corner values (T, 4)
    sorted v0 ≤ v1 ≤ v2 ≤ v3 along each row) exceeds `level`: exact, from the share of each tet
    below the level (a corner tet at either end, and between v1 and v2 three tets cut out of
    the prism the level leaves; every division is by a gap across the level)."""
    v0, v1, v2, v3 = sorted_corner_values.T
    below = np.where(v3 <= level, 1.0, 0.0)
    first = (v0 <= level) & (level < v1)
    middle = (v1 <= level) & (level < v2)
    last = (v2 <= level) & (level < v3)
    with np.errstate(divide="ignore", invalid="ignore"):
        below[first] = ((level - v0) ** 3 / ((v1 - v0) * (v2 - v0) * (v3 - v0)))[first]
        a, b = (level - v0) / (v2 - v0), (level - v0) / (v3 - v0)
        c, d = (level - v1) / (v2 - v1), (level - v1) / (v3 - v1)
        below[middle] = (a * b + a * d * (1 - b) + c * d * (1 - a))[middle]
        below[last] = (1.0 - (v3 - level) ** 3 / ((v3 - v0) * (v3 - v1) * (v3 - v2)))[last]
    return float(np.dot(volumes, 1.0 - below))


def iso_level(corner_values: np.ndarray, volumes: np.ndarray, target_volume: float) -> float:
    """The level a muscle's surface is drawn at: the one enclosing `target_volume` (the muscle's
    Σ fraction × tet volume), found by bisection, kept within [LOWEST, HIGHEST] × the muscle's
    peak node value, so a thin muscle keeps a body and a broad faint one keeps its core."""
    peak = float(corner_values.max(initial=0.0))
    low, high = LOWEST_LEVEL * peak, HIGHEST_LEVEL * peak
    # Tets wholly below the lowest level never count: leave them out of every evaluation.
    reaching = corner_values.max(axis=1) > low
    corner_values, volumes = np.sort(corner_values[reaching], axis=1), volumes[reaching]
    if volume_above(corner_values, volumes, high) >= target_volume:
        return high
    if volume_above(corner_values, volumes, low) <= target_volume:
        return low
    for _ in range(LEVEL_BISECTIONS):
        level = 0.5 * (low + high)
        if volume_above(corner_values, volumes, level) > target_volume:
            low = level
        else:
            high = level
    return 0.5 * (low + high)


def marching_tets(positions, tets, values, level, outer_faces=None):
    """(vertices (V,3), triangles (T,3)) of the surface where the node `values` (linear in each
    tet) cross `level`, oriented outward (towards lower values): one vertex per cut edge,
    shared by every triangle through it. With `outer_faces` (the mesh's boundary faces, facing
    outward) the region above the level is closed off where it reaches the mesh's boundary."""
    positions = np.asarray(positions, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    inside = values > level
    corner_inside = inside[np.asarray(tets)]
    count = corner_inside.sum(axis=1)
    cut = (count > 0) & (count < 4)
    tets, corner_inside, count = np.asarray(tets)[cut], corner_inside[cut], count[cut]
    # Corners sorted inside first: with one inside it is column 0; with three, the one outside is column 3.
    order = np.argsort(~corner_inside, axis=1, kind="stable")
    a, b, c, d = (np.take_along_axis(tets, order, axis=1)[:, k] for k in range(4))
    one, two, three = count == 1, count == 2, count == 3
    # Each surface corner is a cut edge, written (inside node, outside node).
    corner_edges = [
        np.stack([np.stack([a, b], 1), np.stack([a, c], 1), np.stack([a, d], 1)], 1)[one],
        np.stack([np.stack([a, d], 1), np.stack([b, d], 1), np.stack([c, d], 1)], 1)[three],
        np.stack([np.stack([a, c], 1), np.stack([a, d], 1), np.stack([b, d], 1)], 1)[two],
        np.stack([np.stack([a, c], 1), np.stack([b, d], 1), np.stack([b, c], 1)], 1)[two],
    ]
    source_tets = np.concatenate([tets[one], tets[three], tets[two], tets[two]])
    source_inside = np.concatenate([corner_inside[one], corner_inside[three], corner_inside[two],
                                    corner_inside[two]])
    triangle_edges = np.concatenate(corner_edges).reshape(-1, 3, 2)

    cap_edges, cap_codes = _caps(outer_faces, inside)
    all_edges = np.concatenate([triangle_edges.reshape(-1, 2), cap_edges.reshape(-1, 2)])
    keys = np.minimum(all_edges[:, 0], all_edges[:, 1]) * len(values) + np.maximum(all_edges[:, 0], all_edges[:, 1])
    _, first, vertex_of = np.unique(keys, return_index=True, return_inverse=True)
    inner, outer = all_edges[first, 0], all_edges[first, 1]
    t = (level - values[inner]) / (values[outer] - values[inner])
    edge_points = positions[inner] + t[:, None] * (positions[outer] - positions[inner])
    triangles = vertex_of[: 3 * len(triangle_edges)].reshape(-1, 3)

    # Outward: from the inside corners of the source tet towards its outside corners.
    weights = np.where(source_inside, 1.0 / np.maximum(source_inside.sum(1, keepdims=True), 1),
                       -1.0 / np.maximum((~source_inside).sum(1, keepdims=True), 1))
    outward = -np.einsum("ij,ijk->ik", weights, positions[source_tets])
    p = edge_points[triangles]
    normal = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    flip = np.einsum("ij,ij->i", normal, outward) < 0
    triangles[flip] = triangles[flip][:, ::-1]

    if len(cap_codes) == 0:
        return edge_points, triangles
    # Cap corners: a code ≥ 0 is a node, −1 − k the k-th cut edge of the caps.
    cap_vertex = vertex_of[3 * len(triangle_edges):]
    used_nodes, node_vertex = np.unique(cap_codes[cap_codes >= 0], return_inverse=True)
    cap_triangles = np.empty(cap_codes.shape, dtype=np.int64)
    is_node = cap_codes >= 0
    cap_triangles[is_node] = len(edge_points) + node_vertex
    cap_triangles[~is_node] = cap_vertex[-1 - cap_codes[~is_node]]
    return (np.concatenate([edge_points, positions[used_nodes]]),
            np.concatenate([triangles, cap_triangles]))


def _caps(outer_faces, inside):
    """The cut edges (K, 2) and the triangles (C, 3) of the boundary faces' part above the level
    (marching triangles on each outward face, keeping its orientation). A triangle corner is a
    node ≥ 0, or −1 − k for the k-th cut edge."""
    empty = np.zeros((0, 2), dtype=np.int64), np.zeros((0, 3), dtype=np.int64)
    if outer_faces is None or len(outer_faces) == 0:
        return empty
    face_inside = inside[outer_faces]
    count = face_inside.sum(axis=1)
    faces, face_inside, count = outer_faces[count > 0], face_inside[count > 0], count[count > 0]
    if len(faces) == 0:
        return empty
    # Rotate each face (keeping its orientation) so its odd corner out comes first:
    # the one inside when one is, the one outside when two are.
    odd = np.where(count == 1, np.argmax(face_inside, axis=1), np.argmin(face_inside, axis=1))
    rotated = np.take_along_axis(faces, (odd[:, None] + np.arange(3)) % 3, axis=1)
    x, y, z = rotated.T
    full, one, two = count == 3, count == 1, count == 2
    # One inside (x): triangle x, xy, xz. Two inside (y, z; x outside): quad y, z, zx, xy.
    edges = np.concatenate([np.stack([x, y], 1)[one], np.stack([x, z], 1)[one],
                            np.stack([z, x], 1)[two], np.stack([y, x], 1)[two]])
    n1, n2 = int(one.sum()), int(two.sum())
    xy1, xz1 = -1 - np.arange(n1), -1 - (n1 + np.arange(n1))
    zx2, yx2 = -1 - (2 * n1 + np.arange(n2)), -1 - (2 * n1 + n2 + np.arange(n2))
    triangles = np.concatenate([
        faces[full],
        np.stack([x[one], xy1, xz1], 1),
        np.stack([y[two], z[two], zx2], 1),
        np.stack([y[two], zx2, yx2], 1),
    ])
    return edges, triangles


class _RowsByNode:
    """Which rows of a (K, c) node-index array (tets, or faces) touch given nodes: the rows
    sorted by node once, so each muscle's look-up costs its own size, not the mesh's."""

    def __init__(self, rows: np.ndarray):
        self.width = rows.shape[1]
        self.order = np.argsort(rows.reshape(-1), kind="stable")
        counts = np.bincount(rows.reshape(-1))
        self.counts = counts
        self.starts = np.concatenate([[0], np.cumsum(counts)[:-1]])

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        nodes = nodes[nodes < len(self.counts)]
        counts = self.counts[nodes]
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        # Positions start..start+count-1 of every node, in one vector.
        shift = np.repeat(self.starts[nodes] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        return np.unique(self.order[shift + np.arange(total)] // self.width)


def muscle_isosurfaces(positions, tets, fraction, smooth: bool = True):
    """(vertices (V,3), triangles (T,3), muscle index per triangle): every muscle that fills any
    tet as a closed outward surface of its own vertices, split and Taubin-smoothed unless
    `smooth` is False (then as marched)."""
    positions = np.asarray(positions, dtype=np.float64)
    tets = np.asarray(tets, dtype=np.int64)
    fraction = np.asarray(fraction, dtype=np.float64)
    present = np.flatnonzero(fraction.max(axis=0, initial=0.0) > 0)
    volumes = tet_volumes(positions, tets)
    muscle_volumes = volumes @ fraction
    field = node_fields(positions, tets, fraction, muscles=present)
    outer_faces = boundary_faces(positions, tets)
    tets_at = _RowsByNode(tets)
    faces_at = _RowsByNode(outer_faces)
    vertices, triangles, labels, offset = [], [], [], 0
    for column, muscle in enumerate(present):
        values = field[:, column]
        # Only the tets around the muscle: its field is zero a few tets away from it.
        support = tets_at.rows(np.flatnonzero(values > 0))
        corner_values = values[tets[support]]
        level = iso_level(corner_values, volumes[support], float(muscle_volumes[muscle]))
        above = np.flatnonzero(values > level)
        faces_near = outer_faces[faces_at.rows(above)]
        points, local = marching_tets(positions, tets[tets_at.rows(above)], values, level, faces_near)
        if len(local) == 0:
            continue
        vertices.append(points)
        triangles.append(local + offset)
        labels.append(np.full(len(local), muscle))
        offset += len(points)
    if not triangles:
        return positions[:0], np.zeros((0, 3), dtype=np.int64), np.zeros(0, dtype=np.int64)
    vertices, triangles, labels = np.concatenate(vertices), np.concatenate(triangles), np.concatenate(labels)
    if smooth:
        for _ in range(SUBDIVISIONS):
            vertices, triangles = subdivide(vertices, triangles)
            labels = np.tile(labels, 4)
        vertices = smooth_keeping_volumes(vertices, triangles, labels)
    return vertices, triangles, labels


def volumes_by_label(vertices, triangles, labels, count: int) -> np.ndarray:
    """The volume each label's closed outward surface encloses (divergence theorem)."""
    corners = vertices[triangles]
    signed = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])) / 6.0
    return np.bincount(labels, weights=signed, minlength=count)


def smooth_keeping_volumes(vertices, triangles, labels, passes: int = SURFACE_PASSES) -> np.ndarray:
    """Taubin-smoothed vertices, each label's surface then scaled about its centre back to the
    volume it enclosed (the surfaces share no vertices, so one pass smooths them all)."""
    count = int(labels.max()) + 1
    before = volumes_by_label(vertices, triangles, labels, count)
    smoothed = taubin_smooth(vertices, triangles, passes)
    after = volumes_by_label(smoothed, triangles, labels, count)
    vertex_label = np.zeros(len(vertices), dtype=np.int64)
    vertex_label[triangles.ravel()] = np.repeat(labels, 3)
    ratio = np.where((before > 0) & (after > 0), before / np.where(after > 0, after, 1.0), 1.0) ** (1.0 / 3.0)
    centre = np.stack([np.bincount(vertex_label, weights=smoothed[:, axis], minlength=count)
                       for axis in range(3)], axis=1)
    centre /= np.maximum(np.bincount(vertex_label, minlength=count), 1)[:, None]
    return centre[vertex_label] + (smoothed - centre[vertex_label]) * ratio[vertex_label, None]
