"""Creases and folds of a deformed skin, measured against a reference shape of the same mesh.

An interior edge (shared by exactly two triangles) bends by the angle between its two
triangles' normals: 0 on a flat sheet, 180° where the skin folds back onto itself. A
simulated frame is compared edge by edge with a reference of the same frame (the plain
blendshape rig, rest + Σ wₖ Δₖ): the rig's own wrinkles and lip corners are not the
solver's fault, so only the bend *beyond* the reference's counts.

* creased: bent more than CREASE_DEGREES (30°) beyond the reference — a visible ridge;
* folded: bent more than FOLD_DEGREES (90°) beyond it — skin turned over onto itself.

A triangle the reference itself squashes to a sliver (below SLIVER_SHARE of its rest area: ICT's
lip line has rest triangles of 0.03 mm² that jawOpen + mouthClose flattens to 0.0009 mm², 6 µm
high) has no meaningful normal: any smooth motion of a quarter millimetre turns it over. Such
folds still count; `count(…, rest=…)` also says how many of them lie on slivers.

Triangles must be consistently oriented (a manifold face mesh is); an edge whose two
triangles disagree would read as bent by 180° at rest, so it is left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
from numba import njit

from .mesh_ops import as_triangle_mesh, triangle_normals_areas

CREASE_DEGREES = 30.0
FOLD_DEGREES = 90.0
SLIVER_SHARE = 0.05


@dataclass(frozen=True)
class BendCount:
    """One frame's creases and folds against its reference."""
    creased: int                # edges bent > CREASE_DEGREES beyond the reference
    folded: int                 # edges bent > FOLD_DEGREES beyond the reference
    worst_excess_degrees: float
    worst_edge: int             # index into SkinBends.edges (-1 when there are no edges)
    folded_on_slivers: int = 0  # of the folded, those next to a triangle the reference squashes to a sliver


class _TrianglePairs:
    """Pairs of triangles sharing an edge (`triangles` (T,3), `pairs` (P,2) into them) and the
    angle between each pair's normals."""
    triangles: np.ndarray
    pairs: np.ndarray

    def __len__(self) -> int:
        return len(self.pairs)

    def angles(self, positions: np.ndarray) -> np.ndarray:
        """(P,) radians: the angle between the normals of each pair's two triangles (a
        degenerate triangle's normal counts as zero)."""
        return _pair_angles(np.ascontiguousarray(positions, dtype=np.float64), self.triangles, self.pairs)

    def excess(self, positions: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """(P,) degrees each pair bends beyond the reference's bend (negative: flatter)."""
        return np.degrees(self.angles(positions) - self.angles(reference))


class SkinBends(_TrianglePairs):
    """The interior edges of a triangle mesh (optionally only triangles wholly in a vertex
    region) and their bend angles; built once per mesh, measured per frame. `edges` (E,2) are
the vertex pairs of the `pairs`: an edge's bend is its pair's angle."""

    def __init__(self, triangles: np.ndarray, vertex_count: int, region: Optional[np.ndarray] = None):
        triangles = np.asarray(triangles, dtype=np.int64)
        _, triangles = as_triangle_mesh(np.zeros((vertex_count, 3)), triangles)
        if region is not None:
            region = np.asarray(region)
            inside = region if region.dtype == bool else np.isin(np.arange(vertex_count), region)
            if inside.shape != (vertex_count,):
                raise ValueError(f"region must be a ({vertex_count},) mask or an index array")
            triangles = triangles[inside[triangles].all(axis=1)]
        self.triangles = triangles
        self.edges, self.pairs = _interior_edges(triangles)

    def count(self, positions: np.ndarray, reference: np.ndarray, rest: Optional[np.ndarray] = None) -> BendCount:
        """Creases and folds of `positions` against `reference`; with the `rest` shape also how
        many folds lie next to a sliver of the reference (module docstring)."""
        excess = self.excess(positions, reference)
        if len(excess) == 0:
            return BendCount(0, 0, 0.0, -1)
        worst = int(np.argmax(excess))
        folded = excess > FOLD_DEGREES
        on_slivers = 0 if rest is None else int((folded & self.sliver_edges(reference, rest)).sum())
        return BendCount(creased=int((excess > CREASE_DEGREES).sum()), folded=int(folded.sum()),
                         worst_excess_degrees=float(excess[worst]), worst_edge=worst, folded_on_slivers=on_slivers)

    def sliver_edges(self, reference: np.ndarray, rest: np.ndarray, share: float = SLIVER_SHARE) -> np.ndarray:
        """(E,) bool: edges with a triangle whose area in `reference` is below `share` of its rest area."""
        ratio = (triangle_normals_areas(reference, self.triangles)[1]
                 / np.maximum(triangle_normals_areas(rest, self.triangles)[1], 1e-30))
        return (ratio[self.pairs] < share).any(axis=1)

    def creased_vertices(self, positions: np.ndarray, reference: np.ndarray,
                         degrees: float = CREASE_DEGREES) -> np.ndarray:
        """Vertex indices on the edges bent more than `degrees` beyond the reference."""
        return np.unique(self.edges[self.excess(positions, reference) > degrees])


@njit(cache=True)
def _pair_angles(positions: np.ndarray, triangles: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """angles() compiled: the skin filter's fold guard measures 140,232 pairs a round on ICT's
    faces (each quad split both ways), 21 ms in numpy against 4.3 ms here."""
    normals = np.zeros((len(triangles), 3))
    u, v, n = np.empty(3), np.empty(3), np.empty(3)
    for t in range(len(triangles)):
        for k in range(3):
            u[k] = positions[triangles[t, 1], k] - positions[triangles[t, 0], k]
            v[k] = positions[triangles[t, 2], k] - positions[triangles[t, 0], k]
        n[0], n[1], n[2] = u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]
        length = np.sqrt(n[0] * n[0] + n[1] * n[1] + n[2] * n[2])
        if length > 0.0:
            for k in range(3):
                normals[t, k] = n[k] / length
    angles = np.empty(len(pairs))
    for p in range(len(pairs)):
        f, s = normals[pairs[p, 0]], normals[pairs[p, 1]]
        c0, c1, c2 = f[1] * s[2] - f[2] * s[1], f[2] * s[0] - f[0] * s[2], f[0] * s[1] - f[1] * s[0]
        angles[p] = np.arctan2(np.sqrt(c0 * c0 + c1 * c1 + c2 * c2), f[0] * s[0] + f[1] * s[1] + f[2] * s[2])
    return angles


def _interior_edges(triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(E,2) vertex pairs of the edges shared by exactly two consistently oriented triangles,
    and (E,2) those two triangles."""
    count = len(triangles)
    directed = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
    owner = np.tile(np.arange(count), 3)
    undirected = np.sort(directed, axis=1)
    keys, inverse, uses = np.unique(undirected, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = uses[inverse] == 2
    order = np.argsort(inverse[shared], kind="stable")
    rows = np.flatnonzero(shared)[order].reshape(-1, 2)            # the two uses of each shared edge
    # Consistent orientation: the two triangles run the edge in opposite directions.
    consistent = directed[rows[:, 0], 0] == directed[rows[:, 1], 1]
    rows = rows[consistent]
    return undirected[rows[:, 0]], owner[rows]


class AnySplitBends(_TrianglePairs):
    """The bends of a face mesh however its quads are split into triangles.

    A quad is shown as two triangles, split along one diagonal or the other, and which one is
    up to the program that draws it (Blender, a game engine, a metric that takes the first
    diagonal). A quad can be smooth split one way and fold split the other: ICT's mouth corners
    have quads 0.3 mm across that the rig squashes to slivers. So each quad contributes the
    four triangles of both splits, and every pair of them that some split shows side by side
    is measured: across an edge between two faces, each of the two triangles of either face
    that contain it (four pairs between two quads); inside a quad, the two halves of one split
    across its diagonal. Triangles, and quad rows padded with -1, contribute themselves. An edge
    whose pair is not consistently oriented is left out, as in SkinBends."""

    def __init__(self, faces: np.ndarray, vertex_count: int):
        faces = np.asarray(faces, dtype=np.int64)
        if faces.ndim != 2 or faces.shape[1] not in (3, 4):
            raise ValueError(f"faces must be (F,3) triangles or (F,4) quads padded with -1, got {faces.shape}")
        if faces.shape[1] == 3:
            faces = np.concatenate([faces, np.full((len(faces), 1), -1, np.int64)], axis=1)
        quad = faces[:, 3] >= 0
        halves = [faces[:, [0, 1, 2]], faces[quad][:, [0, 2, 3]], faces[quad][:, [0, 1, 3]], faces[quad][:, [1, 2, 3]]]
        face_ids = np.arange(len(faces))
        self.triangles = np.concatenate(halves)
        self.vertex_count = vertex_count
        face_of = np.concatenate([face_ids, face_ids[quad], face_ids[quad], face_ids[quad]])
        # split 0: (0,1,2) + (0,2,3); split 1: (0,1,3) + (1,2,3); a triangle is split 0.
        split_of = np.concatenate([np.zeros(len(faces) + quad.sum(), np.int64), np.ones(2 * quad.sum(), np.int64)])
        first, second = self._pairs_across_edges(self.triangles)
        same_face = face_of[first] == face_of[second]
        keep = ~same_face | (split_of[first] == split_of[second])   # one face: only one split's halves
        self.pairs = np.stack([first[keep], second[keep]], axis=1)
        # (P,6) the corners of each pair's two triangles (the shared edge's twice)
        self.pair_vertices = np.concatenate([self.triangles[self.pairs[:, 0]],
                                             self.triangles[self.pairs[:, 1]]], axis=1)

    @staticmethod
    def _pairs_across_edges(triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Every pair of triangles that run a shared edge in opposite directions."""
        directed = np.concatenate([triangles[:, [0, 1]], triangles[:, [1, 2]], triangles[:, [2, 0]]])
        owner = np.tile(np.arange(len(triangles)), 3)
        undirected = np.sort(directed, axis=1)
        key = undirected[:, 0] * (int(undirected.max(initial=0)) + 1) + undirected[:, 1]
        order = np.argsort(key, kind="stable")
        key, directed, owner = key[order], directed[order], owner[order]
        first, second = [], []
        for offset in range(1, len(key)):
            same = key[offset:] == key[:-offset]
            if not same.any():
                break               # sorted: no group is longer than `offset`
            i = np.flatnonzero(same)
            j = i + offset
            opposite = directed[i, 0] == directed[j, 1]
            first.append(owner[i[opposite]])
            second.append(owner[j[opposite]])
        if not first:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(first), np.concatenate(second)
