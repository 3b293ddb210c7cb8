"""Implicit description of the soft tissue: inside the skin, outside every bone.

The tissue is  {p : skin_field(p) < 0  and  bone_field(p) < 0}, i.e. the level set
``max(skin, bone) < 0`` of two signed, distance-like fields (Lipschitz ~1, metres):

* `SkinField` — minus/plus the distance to the skin, the sign from the generalized
  winding number, so the open skin (neck cut, eye holes, throat) needs no hole filling:
  across a hole the winding number drops smoothly and the 0.5 level caps it.
* `SuppliedBones` — user-supplied closed skull / jaw meshes (positive inside).
* `EstimatedBones` — no bones supplied: bone starts at a forensic soft-tissue depth
  under the outer skin (paper 002 §3.1, De Greef et al. 2006) and a mucosa-thin lining
  under the cavity surfaces (mouth, eye sockets); the mandible is the part of it under
  skin that follows the jaw in jawOpen.
* Teeth sockets: the tissue within a few mm of supplied teeth belongs to their bone
  (gums hold teeth), which also attaches the teeth to skull or jaw.

Every field also projects points onto its zero level, which the tet mesher uses to snap
boundary nodes onto the skin and bone surfaces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rig import triangulate
from ..geometry import ClosestPointTree, TriangleBVH, WindingNumberTree, vertex_normals

SKULL, JAW = 0, 1
BONE_NAMES = ("skull", "jaw")

# Mean facial soft-tissue depths in millimetres, after De Greef et al. 2006 ("Large-scale
# in-vivo Caucasian facial soft tissue thickness database", the table paper 002 §3.1 uses),
# rounded; keyed by this project's landmark names. Landmarks over no bone (nose tip, lips
# beyond the teeth) carry no value and are left to interpolation from their neighbours.
FORENSIC_THICKNESS_MM = {
    "forehead": 4.3,          # mid-forehead
    "nasion": 6.6,
    "brow_inner_L": 7.2, "brow_inner_R": 7.2,          # supraorbital
    "brow_outer_L": 10.1, "brow_outer_R": 10.1,        # lateral orbit
    "cheekbone_L": 12.6, "cheekbone_R": 12.6,          # inferior malar
    "ala_L": 13.0, "ala_R": 13.0,                      # beside the nose (infraorbital region)
    "upper_lip": 12.6,        # upper lip margin
    "lower_lip": 13.5,        # lower lip margin
    "mouth_corner_L": 20.9, "mouth_corner_R": 20.9,    # occlusal line
    "chin": 11.6,             # mental eminence
    "menton": 7.5,            # beneath chin
    "gonion_L": 14.6, "gonion_R": 14.6,
    "crown": 6.0, "occiput": 6.5,                      # scalp (outside the table; typical)
}
# The neck has no bone in this model; a deep rigid core stands in for the cervical spine
# and the muscles around it, so the neck skin slides on it rather than hanging free.
NECK_CORE_DEPTH_MM = 25.0
# Mucosa and submucosa between a cavity surface (mouth, eye socket) and the bone behind it.
CAVITY_LINING_MM = 3.0
# Gum tissue held rigidly around supplied teeth.
TEETH_SOCKET_MM = 3.0
# Estimated bone this close to supplied teeth is the alveolar bone of those teeth.
ALVEOLAR_REACH_MM = 20.0
# Sample distances along a vertex normal that decide whether the vertex lines a cavity.
_CAVITY_PROBE_MM = (2.0, 4.0, 7.0, 11.0, 16.0, 22.0)


@dataclass
class SkinField:
    """Signed distance to the skin: negative inside the tissue envelope."""
    vertices: np.ndarray
    triangles: np.ndarray

    def __post_init__(self):
        bvh = TriangleBVH(self.vertices, self.triangles)
        self.winding = WindingNumberTree.from_bvh(bvh)
        self.closest = ClosestPointTree.from_bvh(bvh)

    def inside(self, points):
        return self.winding.query(points) > 0.5

    def evaluate(self, points):
        hit = self.closest.query(points)
        sign = np.where(self.inside(points), -1.0, 1.0)
        return sign * hit.distance, hit

    def outward_normal_at(self, points):
        """Unit direction (p,3) from each point toward the outside across the nearest skin."""
        hit = self.closest.query(points)
        direction = hit.closest - points
        direction[~self.inside(points)] *= -1
        return direction / np.maximum(np.linalg.norm(direction, axis=1, keepdims=True), 1e-12)


class _MeshBone:
    """One closed bone mesh as a signed field: positive inside."""

    def __init__(self, label, vertices, triangles):
        self.label = label
        bvh = TriangleBVH(vertices, triangles)
        self.winding = WindingNumberTree.from_bvh(bvh)
        self.closest = ClosestPointTree.from_bvh(bvh)

    def evaluate(self, points):
        hit = self.closest.query(points)
        sign = np.where(self.winding.query(points) > 0.5, 1.0, -1.0)
        return sign * hit.distance, hit.closest, self.label


class _Socket:
    """Gum around the root half of a teeth arch: points within `radius` of the teeth and on
    the root side of the arch's mid-height; positive inside.

    Only the root half, because gums hold the roots: around the crowns the upper and lower
    sockets would merge where the teeth bite and pin lip tissue to the wrong bone.
    """

    def __init__(self, label, vertices, triangles, radius, crown_direction):
        self.label = label
        self.closest = ClosestPointTree(vertices, triangles)
        self.radius = radius
        self.crown_direction = crown_direction
        self.mid_height = float(np.mean(vertices @ crown_direction))

    def evaluate(self, points):
        hit = self.closest.query(points)
        offset = points - hit.closest
        distance = np.maximum(hit.distance, 1e-12)
        projected = hit.closest + offset / distance[:, None] * self.radius
        value = self.radius - hit.distance
        beyond_mid = points @ self.crown_direction - self.mid_height
        cut = beyond_mid > -value
        value = np.where(cut, -beyond_mid, value)
        projected[cut] = points[cut] - np.outer(beyond_mid[cut], self.crown_direction)
        return value, projected, self.label


class _NeckCore:
    """Rigid core of the neck and the back of the lower head, for supplied skulls.

    A supplied skull usually ends at the skull base: nothing stands for the cervical spine
    and the pharynx, and the neck and the back of the lower head would hang free. Points
    deeper than the neck-core depth under the outer skin belong to the skull when they lie
    below the chin line, or behind the jaw hinge and below the eyes (in front of the hinge
    the deep tissue is the floor of the mouth and the tongue, which stay soft).
    """

    def __init__(self, skin_vertices, outer_triangles, depth, frame, below, behind, under):
        self.outer = ClosestPointTree(skin_vertices, outer_triangles)
        self.depth, self.frame = depth, frame
        self.below, self.behind, self.under = below, behind, under

    def evaluate(self, points):
        hit = self.outer.query(points)
        local = self.frame.local(points)
        deep = hit.distance - self.depth
        low = self.below - local[:, 1]
        back = np.minimum(self.behind - local[:, 2], self.under - local[:, 1])
        region = np.maximum(low, back)
        value = np.minimum(deep, region)
        direction = (points - hit.closest) / np.maximum(hit.distance, 1e-12)[:, None]
        # Project onto whichever side of the region decides the value.
        region_step = np.where((low >= back)[:, None], np.outer(low, self.frame.up),
                               np.where((self.behind - local[:, 2] <= self.under - local[:, 1])[:, None],
                                        np.outer(self.behind - local[:, 2], self.frame.forward),
                                        np.outer(self.under - local[:, 1], self.frame.up)))
        projection = np.where((deep <= region)[:, None], hit.closest + direction * self.depth, points + region_step)
        return value, projection, SKULL


class BoneField:
    """Union of labelled bone pieces; positive inside bone.

    Each piece's ``evaluate(points)`` gives (value, projection onto its zero level,
    label — a scalar or one per point); the union takes, per point, the piece with the
    largest value.
    """

    def __init__(self):
        self._pieces = []

    def add(self, piece):
        self._pieces.append(piece)

    def evaluate(self, points):
        points = np.asarray(points, dtype=np.float64)
        value = np.full(len(points), -np.inf)
        label = np.full(len(points), SKULL, dtype=np.int8)
        projection = points.copy()
        for piece in self._pieces:
            piece_value, piece_projection, piece_label = piece.evaluate(points)
            piece_label = np.broadcast_to(piece_label, len(points))
            better = piece_value > value
            value = np.where(better, piece_value, value)
            label = np.where(better, piece_label, label).astype(np.int8)
            projection[better] = piece_projection[better]
        return value, label, projection


class _EstimatedCranioMandible:
    """Bone below a depth field under the outer skin and a lining under cavities."""

    def __init__(self, skin_vertices, triangles, outer_vertex, depth, jaw_weight, lining,
                 teeth=(), alveolar_reach=0.0):
        self.teeth = list(teeth)          # (label, ClosestPointTree) of supplied teeth
        self.alveolar_reach = alveolar_reach
        outer_tri = outer_vertex[triangles].all(axis=1)
        self.triangles = triangles
        self.depth = depth
        self.jaw_weight = jaw_weight
        self.outer = ClosestPointTree(skin_vertices, triangles[outer_tri])
        self.outer_triangles = triangles[outer_tri]
        cavity_tri = triangles[~outer_tri]
        self.cavity = ClosestPointTree(skin_vertices, cavity_tri) if len(cavity_tri) else None
        self.cavity_triangles = cavity_tri
        self.lining = lining

    def _interpolate(self, per_vertex, triangles, hit):
        return (per_vertex[triangles[hit.triangle_index]] * hit.barycentric).sum(axis=1)

    def evaluate(self, points):
        outer_hit = self.outer.query(points)
        depth_here = self._interpolate(self.depth, self.outer_triangles, outer_hit)
        value = outer_hit.distance - depth_here
        direction = points - outer_hit.closest
        direction /= np.maximum(outer_hit.distance, 1e-12)[:, None]
        projection = outer_hit.closest + direction * depth_here[:, None]
        jaw = self._interpolate(self.jaw_weight, self.outer_triangles, outer_hit)
        if self.cavity is not None:
            cavity_hit = self.cavity.query(points)
            cavity_value = cavity_hit.distance - self.lining
            nearer_cavity = cavity_value < value
            value = np.where(nearer_cavity, cavity_value, value)
            offset = points - cavity_hit.closest
            offset /= np.maximum(cavity_hit.distance, 1e-12)[:, None]
            projection[nearer_cavity] = (cavity_hit.closest + offset * self.lining)[nearer_cavity]
            # Deep points are labelled by whichever surface is nearer: bone behind the lower
            # mouth lining follows the jaw, bone above the palate does not.
            cavity_jaw = self._interpolate(self.jaw_weight, self.cavity_triangles, cavity_hit)
            jaw = np.where(cavity_hit.distance < outer_hit.distance, cavity_jaw, jaw)
        label = np.where(jaw > 0.5, JAW, SKULL).astype(np.int8)
        if self.teeth:
            # The alveolar bone holding supplied teeth belongs to their bone, whatever the
            # skin above it does in jawOpen (the lining behind the molars barely moves).
            distances = np.stack([tree.query(points, max_distance=self.alveolar_reach).distance
                                  for _, tree in self.teeth])
            nearest = np.argmin(distances, axis=0)
            near_teeth = np.isfinite(distances.min(axis=0))
            teeth_label = np.array([teeth_label for teeth_label, _ in self.teeth], dtype=np.int8)[nearest]
            label = np.where(near_teeth, teeth_label, label)
        return value, projection, label


def find_cavity_lining(skin: SkinField, scale: float) -> np.ndarray:
    """(V,) bool: skin vertices lining a cavity (inner lips, mouth socket, eye sockets).

    A vertex of the outer skin looks out into open air along its normal; a cavity
    lining looks across the cavity into tissue on the other side.
    """
    normals = vertex_normals(skin.vertices, skin.triangles)
    probes = np.asarray(_CAVITY_PROBE_MM) * 1e-3 * scale
    points = (skin.vertices[:, None, :] + normals[:, None, :] * probes[None, :, None]).reshape(-1, 3)
    inside = skin.inside(points).reshape(len(skin.vertices), len(probes))
    return inside.any(axis=1)


def interpolate_depth(skin_vertices, outer, landmarks, min_depth):
    """Forensic tissue depth (V,) on the outer skin by Shepard interpolation between landmarks."""
    names = [n for n in FORENSIC_THICKNESS_MM if n in landmarks.position]
    points = np.array([landmarks.position[n] for n in names])
    values = np.array([FORENSIC_THICKNESS_MM[n] for n in names]) * 1e-3 * landmarks.scale
    local = landmarks.frame.local(skin_vertices)
    neck_start = landmarks.frame.local(landmarks.position["menton"][None])[0, 1]
    distance = np.linalg.norm(skin_vertices[:, None, :] - points[None], axis=2)
    nearest = np.argsort(distance, axis=1)[:, :4]
    d = np.take_along_axis(distance, nearest, axis=1)
    weight = 1.0 / np.maximum(d, 1e-4) ** 2
    depth = (weight * values[nearest]).sum(1) / weight.sum(1)
    # Below the chin the table ends; blend toward the rigid neck core over 3 cm.
    neck_blend = np.clip((neck_start - local[:, 1]) / (0.03 * landmarks.scale), 0.0, 1.0)
    depth = (1 - neck_blend) * depth + neck_blend * NECK_CORE_DEPTH_MM * 1e-3 * landmarks.scale
    return np.maximum(depth, min_depth)


def build_bone_field(rig, skin: SkinField, landmarks, jaw, cavity, min_tissue_depth) -> tuple[BoneField, dict]:
    """Bones from the rig when supplied, otherwise estimated; plus sockets for supplied teeth."""
    bones = BoneField()
    info = {}
    if rig.skull_vertices is not None:
        bones.add(_MeshBone(SKULL, rig.skull_vertices, triangulate(rig.skull_faces, rig.skull_vertices)))
        if rig.jaw_vertices is not None:
            bones.add(_MeshBone(JAW, rig.jaw_vertices, triangulate(rig.jaw_faces, rig.jaw_vertices)))
        frame = landmarks.frame
        menton_y = frame.local(landmarks.position["menton"][None])[0, 1]
        eye_y = frame.local(landmarks.position["eye_L"][None])[0, 1]
        hinge_z = frame.local(jaw.condyles).mean(0)[2]
        bones.add(_NeckCore(skin.vertices, skin.triangles[(~cavity)[skin.triangles].all(axis=1)],
                            NECK_CORE_DEPTH_MM * 1e-3 * landmarks.scale, frame,
                            below=menton_y - 0.03 * landmarks.scale, behind=hinge_z, under=eye_y))
        info["bones"] = "supplied skull" + (" and jaw" if rig.jaw_vertices is not None else "") + \
            ", estimated neck and skull-base core"
    else:
        outer = ~cavity
        depth = interpolate_depth(skin.vertices, outer, landmarks, min_tissue_depth)
        estimated = _EstimatedCranioMandible(
            skin.vertices, skin.triangles, outer, depth, jaw.skin_weight,
            max(CAVITY_LINING_MM * 1e-3 * landmarks.scale, min_tissue_depth),
            teeth=[(label, ClosestPointTree(v, triangulate(f, v))) for label, v, f in _teeth(rig)],
            alveolar_reach=ALVEOLAR_REACH_MM * 1e-3 * landmarks.scale)
        bones.add(estimated)
        info["bones"] = "estimated from forensic soft-tissue depth"
        info["skin_depth_mm"] = [float(depth[outer].min() * 1e3), float(depth[outer].max() * 1e3)]
    for label, verts, faces in _teeth(rig):
        crown_direction = landmarks.frame.up if label == JAW else -landmarks.frame.up
        bones.add(_Socket(label, verts, triangulate(faces, verts), TEETH_SOCKET_MM * 1e-3 * landmarks.scale,
                          crown_direction))
    return bones, info


def _teeth(rig):
    """(bone label, vertices, faces) of each supplied teeth arch: upper with the skull, lower with the jaw."""
    pairs = ((SKULL, rig.upper_teeth_vertices, rig.upper_teeth_faces),
             (JAW, rig.lower_teeth_vertices, rig.lower_teeth_faces))
    return [(label, verts, faces) for label, verts, faces in pairs if verts is not None]
