"""Where the skin sits in the tet mesh and over the bone: the records the contact term and its
response read (contact.py, contact_response.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import scipy.sparse

from ..collisions.contacts import BonePose, ContactPlanes

# A plane may ask the tissue between a skin vertex and its bone to give at most this fraction of
# its rest depth. Beyond it a rigid prop rests on the bone (the tets there would be crushed flat
# and turned inside out, which took the headset press apart); the plane is held at that depth
# and the rest of the penetration is left to the display projection. Tissue under the lips
# (10-15 mm) never reaches it; the 1-2 mm the demo head has over its glabella does.
MAX_TISSUE_COMPRESSION = 0.5


@dataclass(frozen=True)
class SkinEmbedding:
    """Where each skin vertex sits: its tet (V,), that tet's nodes (V,4) and the barycentric
    weights (V,4), on a mesh of node_count nodes."""
    vertex_tet: np.ndarray
    nodes: np.ndarray
    weights: np.ndarray
    node_count: int

    @staticmethod
    def from_model(model: dict) -> "SkinEmbedding":
        vertex_tet = np.asarray(model["skin_embedding_tet"], dtype=np.int64)
        return SkinEmbedding(vertex_tet=vertex_tet, nodes=np.asarray(model["tets"], dtype=np.int64)[vertex_tet],
                             weights=np.asarray(model["skin_embedding_weights"], dtype=np.float64),
                             node_count=len(model["rest_positions"]))

    def skin_positions(self, x) -> np.ndarray:
        nodes = np.asarray(x, dtype=np.float64).reshape(-1, 3)
        return np.einsum("vk,vkd->vd", self.weights, nodes[self.nodes])

    def matrix(self) -> scipy.sparse.csr_matrix:
        """B (3V × 3N): skin vertex coordinates from node coordinates (barycentric, per axis)."""
        vertex_count = len(self.nodes)
        rows = (3 * np.arange(vertex_count)[:, None, None] + np.arange(3)[None, None, :]).repeat(4, axis=1)
        columns = 3 * self.nodes[:, :, None] + np.arange(3)
        values = np.broadcast_to(self.weights[:, :, None], rows.shape)
        return scipy.sparse.csr_matrix((values.ravel(), (rows.ravel(), columns.ravel())),
                                       shape=(3 * vertex_count, 3 * self.node_count))


@dataclass(frozen=True)
class SlidingNodes:
    """The model's sliding bone nodes (S,), their bone (S,) (0 skull, 1 jaw, as in BonePose) and
    unit bone normals at rest (S,3): a sliding node moves only within the plane of that normal."""
    nodes: np.ndarray
    bone: np.ndarray
    rest_normals: np.ndarray

    @staticmethod
    def from_constraints(constraints) -> "SlidingNodes":
        """The sliding nodes of a ``BoneConstraints`` (which checked and normalised them)."""
        return SlidingNodes(nodes=constraints.slide_nodes, bone=constraints.slide_bone,
                            rest_normals=constraints.slide_rest_normals)


@dataclass(frozen=True)
class SkinOverBone:
    """The tissue under each skin vertex at rest: its depth (V,) m — the distance to the
    model's bone surface, the boundary the pinned and sliding nodes lie on —, the bone (V,)
    (0 skull, 1 jaw, as in BonePose) and the unit direction from that bone point out to the
    vertex (V,3), with the rest skin (V,3)."""
    thickness: np.ndarray
    bone: np.ndarray
    outward: np.ndarray
    rest: np.ndarray

    @staticmethod
    def from_model(model: dict) -> Optional["SkinOverBone"]:
        """None when the model has no bone surface."""
        from ..geometry import ClosestPointTree
        triangles = np.asarray(model.get("bone_surface_triangles", np.zeros((0, 3))), dtype=np.int64)
        if len(triangles) == 0:
            return None
        rest = np.asarray(model["skin_vertices"], dtype=np.float64)
        hit = ClosestPointTree(np.asarray(model["bone_surface_vertices"], dtype=np.float64), triangles).query(rest)
        offset = rest - hit.closest
        outward = offset / np.maximum(hit.distance, 1e-12)[:, None]
        bone = np.asarray(model["bone_surface_label"], dtype=np.int64)[hit.triangle_index]
        return SkinOverBone(thickness=hit.distance, bone=bone, outward=outward, rest=rest)

    def compression_limit(self, planes: ContactPlanes, pose: BonePose, share: float = MAX_TISSUE_COMPRESSION
                          ) -> np.ndarray:
        """(C,) how far (m) each plane asks its vertex to go beyond the deepest the tissue gives:
        the plane's push from the vertex's rest place (carried by its bone), along the normal,
        times the normal's component towards the bone, over `share` of the rest depth; 0 where
        it asks less. Divided back by that component, so it is the distance along the normal by
        which to move the plane out of the way."""
        vertex = planes.vertex
        transforms = np.stack([np.asarray(pose.skull, dtype=np.float64), np.asarray(pose.jaw, dtype=np.float64)])
        carried = transforms[self.bone[vertex]]
        rest_place = np.einsum("cij,cj->ci", carried[:, :3, :3], self.rest[vertex]) + carried[:, :3, 3]
        towards_bone = -np.einsum("ci,cij,cj->c", planes.normal, carried[:, :3, :3], self.outward[vertex])
        push = np.einsum("cd,cd->c", planes.normal, planes.point - rest_place)
        excess = push * np.maximum(towards_bone, 0.0) - share * self.thickness[vertex]
        return np.where((excess > 0.0) & (towards_bone > 0.0), excess / np.maximum(towards_bone, 1e-12), 0.0)
