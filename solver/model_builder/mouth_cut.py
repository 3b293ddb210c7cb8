"""Cut the tet mesh open along the mouth slit, so the lips can part.

A face rig's lips usually touch or nearly touch at rest (0.1–1 mm apart). The lattice
mesher works at a few millimetres and cannot resolve that gap: the tets across it join the
upper and lower lip into one block of tissue, so the jaw can open only by tearing it, and
jawOpen cannot be fitted. Here the mesh is cut along the slit after meshing:

1. The slit walls are the skin triangles near the mouth that face another skin triangle,
   nearly vertically, across a gap thinner than the lattice spacing (the upper lip's
   underside and the lower lip's top). Each wall belongs to the lip it bounds.
2. Every tet near the walls takes the side of the wall nearest its centroid. An interior
   face between tets of different sides, close to the walls, is a cut face.
3. Each node on a cut face is split into one copy per group of its tets that stay joined
   through uncut faces. At the mouth corners the groups meet around the end of the cut, so
   the cut ends there and the lips stay attached at the corners.

The cut follows tet faces, so it is a staircase within one lattice spacing of the true
slit; skin vertices near the slit are then embedded only in tets of their own lip
(`tet_side`/`vertex_side`), so that each lip's skin follows its own tissue.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from ..geometry import ClosestPointTree, triangle_normals_areas
from ..geometry.rays import first_ray_hits
from .tetmesh import interior_faces

UPPER, LOWER = 1, -1
# A wall faces up or down: its normal within 60° of the head's vertical axis.
MIN_WALL_VERTICALITY = 0.5
# Half-size of the box around the mouth searched for walls, in units of the mouth width
# (corner to corner) sideways and of the face height (eyes to mouth, ~7 cm) up and down.
MOUTH_BOX_SIDEWAYS = 0.6
MOUTH_BOX_VERTICAL = 0.2
MOUTH_BOX_DEPTH = 0.5
# Tets and vertices farther than this many lattice spacings from the walls keep no side.
SIDE_REACH = 1.5


@dataclass
class MouthSlit:
    """The wall triangles of the mouth slit and which lip each bounds."""
    vertices: np.ndarray          # (V,3) the rig's skin vertices
    triangles: np.ndarray         # (W,3) wall triangles
    side: np.ndarray              # (W,) UPPER or LOWER
    gap: np.ndarray               # (W,) distance across the slit from each wall, m

    def __post_init__(self):
        self._tree = ClosestPointTree(self.vertices, self.triangles)

    def side_of(self, points, reach):
        """(P,) UPPER/LOWER by the nearest wall, 0 for points farther than `reach` from every wall."""
        hit = self._tree.query(np.asarray(points, dtype=np.float64), max_distance=reach)
        side = np.zeros(len(hit.distance), dtype=np.int64)
        found = hit.triangle_index >= 0
        side[found] = self.side[hit.triangle_index[found]]
        return side, hit.distance


@dataclass
class CutReport:
    wall_triangles: int
    cut_faces: int
    split_nodes: int             # nodes that received at least one copy
    added_nodes: int
    max_gap_m: float

    def as_dict(self):
        return {"wall_triangles": self.wall_triangles, "cut_faces": self.cut_faces,
                "split_nodes": self.split_nodes, "added_nodes": self.added_nodes,
                "widest_gap_mm": round(self.max_gap_m * 1e3, 3)}


def find_mouth_slit(vertices, triangles, landmarks, max_gap) -> MouthSlit | None:
    """The slit between the lips, or None when the lips are farther apart than `max_gap`
    (the mesher separates them by itself then) or the rig has no such walls."""
    frame = landmarks.frame
    corner_l = frame.local(landmarks.position["mouth_corner_L"][None])[0]
    corner_r = frame.local(landmarks.position["mouth_corner_R"][None])[0]
    centre = (corner_l + corner_r) / 2
    mouth_width = max(abs(corner_l[0] - corner_r[0]), 1e-3 * landmarks.scale)
    face_height = 0.07 * landmarks.scale
    normals, areas = triangle_normals_areas(vertices, triangles)
    local_centroids = frame.local(vertices[triangles].mean(1))
    offset = local_centroids - centre
    in_box = ((np.abs(offset[:, 0]) < MOUTH_BOX_SIDEWAYS * mouth_width)
              & (np.abs(offset[:, 1]) < MOUTH_BOX_VERTICAL * face_height)
              & (np.abs(offset[:, 2]) < MOUTH_BOX_DEPTH * face_height) & (areas > 0))
    verticality = normals @ frame.up
    box_triangles = np.flatnonzero(in_box)
    walls, sides, gaps = [], [], []
    for side, facing in ((UPPER, verticality < -MIN_WALL_VERTICALITY), (LOWER, verticality > MIN_WALL_VERTICALITY)):
        candidates = np.flatnonzero(in_box & facing)
        if len(candidates) == 0:
            continue
        # A vertical ray from the wall into the slit must meet the opposite wall, facing back, within max_gap.
        direction = -frame.up if side == UPPER else frame.up
        opposite = box_triangles[(side * verticality[box_triangles]) > MIN_WALL_VERTICALITY]
        if len(opposite) == 0:
            continue
        origins = vertices[triangles[candidates]].mean(1) + direction * 1e-7
        distance, hit, _ = first_ray_hits(vertices, triangles[opposite], origins, direction)
        across = (hit >= 0) & (distance < max_gap)
        walls.append(candidates[across])
        sides.append(np.full(int(across.sum()), side))
        gaps.append(distance[across])
    if not walls or min(len(w) for w in walls) == 0:
        return None
    return MouthSlit(vertices=np.asarray(vertices, dtype=np.float64), triangles=triangles[np.concatenate(walls)],
                     side=np.concatenate(sides), gap=np.concatenate(gaps))


def cut_along_slit(nodes, tets, slit: MouthSlit, spacing):
    """Split the mesh along the slit. Returns (nodes, tets, tet_side (M,), origin (N',), CutReport):
    origin[i] is the node of the input mesh that node i copies; tet_side is the lip of each tet
    that holds a split node, 0 for the others."""
    reach = SIDE_REACH * spacing
    centroids = nodes[tets].mean(1)
    tet_side, _ = slit.side_of(centroids, reach)
    pairs, shared = interior_faces(tets)
    face_centres = nodes[shared].mean(1)
    _, face_distance = slit.side_of(face_centres, reach)
    differ = (tet_side[pairs[:, 0]] != tet_side[pairs[:, 1]]) & (tet_side[pairs] != 0).all(1)
    cut = _without_islands(differ & (face_distance < 0.75 * spacing), pairs, len(tets))
    node_count, tet_count = len(nodes), len(tets)
    # Corner slots (tet, k) are the graph's vertices; an uncut shared face joins the slots of
    # its three nodes in the two tets. Nodes on no cut face keep one copy: all their slots are joined.
    slot = np.arange(4 * tet_count).reshape(tet_count, 4)
    slot_node = tets.ravel()
    on_cut = np.zeros(node_count, bool)
    on_cut[shared[cut].ravel()] = True
    rows, cols = [], []
    kept_pairs, kept_faces = pairs[~cut], shared[~cut]
    for column in range(3):
        node = kept_faces[:, column]
        rows.append(_slot_of(tets, slot, kept_pairs[:, 0], node))
        cols.append(_slot_of(tets, slot, kept_pairs[:, 1], node))
    first_slot = np.full(node_count, -1)
    first_slot[slot_node[::-1]] = np.arange(4 * tet_count)[::-1]
    uncut_slots = np.flatnonzero(~on_cut[slot_node])
    rows.append(uncut_slots)
    cols.append(first_slot[slot_node[uncut_slots]])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    graph = sp.coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(4 * tet_count, 4 * tet_count))
    _, component = connected_components(graph, directed=False)
    new_ids, new_index = np.unique(component, return_inverse=True)
    origin = np.empty(len(new_ids), dtype=np.int64)
    origin[new_index] = slot_node
    new_tets = new_index.reshape(tet_count, 4)
    copies = np.bincount(origin, minlength=node_count)
    # Only tets that hold a split node need their side for the embedding; elsewhere the two
    # lips' tissue is still one, and restricting the choice would only push vertices into
    # worse tets.
    on_split = (copies[origin[new_tets]] > 1).any(1)
    tet_side = np.where(on_split, tet_side, 0)
    report = CutReport(wall_triangles=len(slit.triangles), cut_faces=int(cut.sum()),
                       split_nodes=int((copies > 1).sum()), added_nodes=int(len(origin) - node_count),
                       max_gap_m=float(slit.gap.max()))
    return nodes[origin], new_tets, tet_side, origin, report


def _without_islands(cut, pairs, tet_count):
    """The cut minus the faces around tets it would set adrift.

    Near the mouth corners the nearest wall can flip between neighbouring tets, and a tet whose
    every neighbour was given the other lip ends up cut all round: a floating piece that no force
    reaches, so the skin embedded in it never moves. The lips stay joined behind the slit and at
    the corners, so every piece but the largest is such an island; its faces are glued back."""
    cut = cut.copy()
    while True:
        kept = pairs[~cut]
        graph = sp.coo_matrix((np.ones(len(kept)), (kept[:, 0], kept[:, 1])), shape=(tet_count, tet_count))
        pieces, label = connected_components(graph, directed=False)
        if pieces == 1:
            return cut
        island = label != np.argmax(np.bincount(label))
        reglued = cut & island[pairs].any(1)
        if not reglued.any():
            return cut
        cut &= ~reglued


def _slot_of(tets, slot, tet_index, node):
    """Slot of `node` within each tet of `tet_index`."""
    position = np.argmax(tets[tet_index] == node[:, None], axis=1)
    return slot[tet_index, position]
