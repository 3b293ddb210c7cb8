"""Implicit description of the soft tissue: inside the skin, outside every bone.

The tissue is  {p : skin_field(p) < 0  and  bone_field(p) < 0}, i.e. the level set
``max(skin, bone) < 0`` of two signed, distance-like fields (Lipschitz ~1, metres):

* `SkinField` — minus/plus the distance to the skin, the sign from the generalized
  winding number, so the open skin (neck cut, eye holes, throat) needs no hole filling:
  across a hole the winding number drops smoothly and the 0.5 level caps it.
* `SuppliedBones` — user-supplied closed skull / jaw meshes (positive inside).
* estimated bones — none supplied: bone starts at a forensic soft-tissue depth under the
  outer skin (paper 002 §3.1, De Greef et al. 2006) and a mucosa-thin lining under the
  cavity surfaces (mouth, eye sockets); the mandible is the part of it under skin that
  follows the jaw in jawOpen, none under the floor of the mouth, and the skull keeps clear of
  it by a layer of soft tissue that grows with how far the jaw travels there.
* Teeth sockets: the tissue within a few mm of supplied teeth belongs to their bone
  (gums hold teeth), which also attaches the teeth to skull or jaw.

Every field also projects points onto its zero level, which the tet mesher uses to snap
boundary nodes onto the skin and bone surfaces.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from ..rig import triangulate
from ..geometry import ClosestPointTree, TriangleBVH, WindingNumberTree, vertex_normals

SKULL, JAW = 0, 1
BONE_NAMES = ("skull", "jaw")
# Label of estimated bone that is soft tissue after all (the floor of the mouth); never on a node.
_NO_BONE = 2

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
# The estimated skull keeps clear of the estimated mandible by a layer of soft tissue (the
# parotid, the pterygoids, the pharynx wall, the floor of the mouth): JAW_CLEARANCE_MM where
# the jaw barely moves (at the hinge), plus JAW_CLEARANCE_PER_TRAVEL × how far the jaw bone
# there travels when it opens by JAW_DESIGN_OPENING_DEG. Without it the two parts of one
# estimated solid touch, and the opening jaw drives jaw-pinned tissue into skull-pinned tissue:
# ICT's passive face opened 14° inverted 77 tets there. With 1.0 × the travel none at 14° and 14
# at 20°; with 1.5 × none at 20°, but the skin lost bone it needs: ICT's jawOpen fitted 0.47 /
# 2.02 mm (mean / 95th) instead of 0.30 / 0.95 mm (docs/model-builder.md §2).
JAW_CLEARANCE_MM = 5.0
JAW_CLEARANCE_PER_TRAVEL = 1.0
JAW_DESIGN_OPENING_DEG = 20.0
# The mandible's lower border, as a line in the head's midsagittal plane: from this far under
# the chin point (pogonion) back to the jaw angles (gonions). More than the margin below it and
# more than MOUTH_FLOOR_BEHIND_CHIN behind the chin point lies the floor of the mouth, where an
# estimated mandible has no bone.
MOUTH_FLOOR_CHIN_DROP = 0.020
MOUTH_FLOOR_MARGIN = 0.005
MOUTH_FLOOR_BEHIND_CHIN = 0.020
# Voxel size of the distance maps that separate the two bones.
SEPARATION_VOXEL_MM = 2.5
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

    def negative(self, points):
        """(p,) bool: evaluate(points)[0] < 0, without the distances: inside, and not on the skin
        (there the value is -0.0)."""
        on_skin = np.isfinite(self.closest.query(points, max_distance=0.0).distance)
        return self.inside(points) & ~on_skin

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


class EstimatedBoneSurfaces:
    """The surfaces an estimated solid measures from: the outer skin, the cavity lining and
    supplied teeth, as closest-point trees, with the last query's hits remembered.

    Both estimated solids of a build (without and with the minimum tissue depth) differ only
    in depths, and both sample the same separation grid (about a million points on the ICT
    face), so the grid's hits are remembered and the second solid reuses them (the same
    queries, so the same numbers); `forget` frees them once both are built.
    """

    def __init__(self, skin_vertices, triangles, outer_vertex, teeth=(), alveolar_reach=0.0):
        self.teeth = list(teeth)          # (label, ClosestPointTree) of supplied teeth
        self.alveolar_reach = alveolar_reach
        outer_tri = outer_vertex[triangles].all(axis=1)
        self.outer_triangles = triangles[outer_tri]
        self.outer = ClosestPointTree(skin_vertices, self.outer_triangles)
        self.cavity_triangles = triangles[~outer_tri]
        self.cavity = ClosestPointTree(skin_vertices, self.cavity_triangles) if len(self.cavity_triangles) else None
        self._last = None

    def query(self, points, remember=False):
        """(outer hit, cavity hit or None, (teeth, points) distances within the alveolar reach or None);
        with `remember`, kept for the next remembered query of the same points."""
        if remember and self._last is not None and np.array_equal(self._last[0], points):
            return self._last[1]
        hits = (self.outer.query(points),
                None if self.cavity is None else self.cavity.query(points),
                np.stack([tree.query(points, max_distance=self.alveolar_reach).distance
                          for _, tree in self.teeth]) if self.teeth else None)
        if remember:
            self._last = (np.array(points, copy=True), hits)
        return hits

    def forget(self):
        self._last = None


class _EstimatedCranioMandible:
    """Bone below a depth field under the outer skin and a lining under cavities, one solid.

    Labelled jaw where the nearer skin follows the jaw (or near supplied lower teeth), skull
    elsewhere, and no bone where jaw-labelled bone would lie under the mouth floor (the
    predicate ``mouth_floor(points)``). `_SeparatedCranioMandible` makes two bones of it.
    """

    def __init__(self, surfaces: EstimatedBoneSurfaces, depth, jaw_weight, lining, mouth_floor=None):
        self.surfaces = surfaces
        self.depth = depth
        self.jaw_weight = jaw_weight
        self.lining = lining
        self.mouth_floor = mouth_floor

    def _interpolate(self, per_vertex, triangles, hit):
        return (per_vertex[triangles[hit.triangle_index]] * hit.barycentric).sum(axis=1)

    def evaluate(self, points, remember=False):
        surfaces = self.surfaces
        outer_hit, cavity_hit, teeth_distances = surfaces.query(points, remember)
        depth_here = self._interpolate(self.depth, surfaces.outer_triangles, outer_hit)
        value = outer_hit.distance - depth_here
        direction = points - outer_hit.closest
        direction /= np.maximum(outer_hit.distance, 1e-12)[:, None]
        projection = outer_hit.closest + direction * depth_here[:, None]
        jaw = self._interpolate(self.jaw_weight, surfaces.outer_triangles, outer_hit)
        if cavity_hit is not None:
            cavity_value = cavity_hit.distance - self.lining
            nearer_cavity = cavity_value < value
            value = np.where(nearer_cavity, cavity_value, value)
            offset = points - cavity_hit.closest
            offset /= np.maximum(cavity_hit.distance, 1e-12)[:, None]
            projection[nearer_cavity] = (cavity_hit.closest + offset * self.lining)[nearer_cavity]
            # Deep points are labelled by whichever surface is nearer: bone behind the lower
            # mouth lining follows the jaw, bone above the palate does not.
            cavity_jaw = self._interpolate(self.jaw_weight, surfaces.cavity_triangles, cavity_hit)
            jaw = np.where(cavity_hit.distance < outer_hit.distance, cavity_jaw, jaw)
        label = np.where(jaw > 0.5, JAW, SKULL).astype(np.int8)
        if self.mouth_floor is not None:
            label[(label == JAW) & self.mouth_floor(points)] = _NO_BONE
        if teeth_distances is not None:
            # The alveolar bone holding supplied teeth belongs to their bone, whatever the
            # skin above it does in jawOpen (the lining behind the molars barely moves).
            nearest = np.argmin(teeth_distances, axis=0)
            near_teeth = np.isfinite(teeth_distances.min(axis=0))
            teeth_label = np.array([teeth_label for teeth_label, _ in surfaces.teeth], dtype=np.int8)[nearest]
            label = np.where(near_teeth, teeth_label, label)
        return value, projection, label


class _DistanceMap:
    """Distance from any point to a set of voxels, trilinear between voxel centres, and the
    unit direction from the nearest voxel of the set to the point."""

    def __init__(self, inside, low, voxel):
        self.low, self.voxel = low, voxel
        self.empty = not inside.any()
        if self.empty:
            return
        distance, index = ndimage.distance_transform_edt(~inside, sampling=voxel, return_indices=True)
        # A set's surface lies half a voxel beyond the centres of its outermost voxels.
        self.distance = distance - 0.5 * voxel
        self.nearest = low + voxel * np.moveaxis(index, 0, -1).astype(np.float64)

    def query(self, points):
        """(distance, direction away from the set, nearest voxel centre) per point."""
        if self.empty:
            return np.full(len(points), np.inf), np.zeros_like(points), np.full_like(points, np.inf)
        coordinates = (points - self.low) / self.voxel
        distance = ndimage.map_coordinates(self.distance, coordinates.T, order=1, mode="nearest")
        cell = np.clip(np.rint(coordinates).astype(int), 0, np.array(self.distance.shape) - 1)
        nearest = self.nearest[cell[:, 0], cell[:, 1], cell[:, 2]]
        away = points - nearest
        away /= np.maximum(np.linalg.norm(away, axis=1), 1e-12)[:, None]
        return distance, away, nearest


class _SeparatedCranioMandible:
    """The estimated solid split into two bones with soft tissue between them.

    The solid's labels say which part follows the jaw; here the jaw part ends where the solid
    turns skull, and the skull part keeps clear of the jaw part by the clearance (base plus
    per_travel × how far the nearest jaw bone travels when the jaw opens by the design angle
    about the hinge), so the tissue between them has room to shear when the jaw moves. The two
    bones are a union of signed distance-like fields from voxel distance maps.
    """

    def __init__(self, solid, low, high, voxel, hinge_origin, hinge_axis, opening_rad, base, per_travel):
        self.solid = solid
        self.hinge_origin, self.hinge_axis = hinge_origin, hinge_axis
        self.opening_rad, self.base, self.per_travel = opening_rad, base, per_travel
        low = np.asarray(low, dtype=np.float64)
        shape = np.maximum(np.ceil((np.asarray(high) - low) / voxel).astype(int) + 1, 2)
        axes = [low[k] + voxel * np.arange(shape[k]) for k in range(3)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
        value, _, label = solid.evaluate(grid, remember=True)
        jaw = ((value > 0) & (label == JAW)).reshape(shape)
        skull = ((value > 0) & (label == SKULL)).reshape(shape)
        self.to_jaw = _DistanceMap(jaw, low, voxel)
        # The jaw ends where the solid stops being jaw: at the skull part or the mouth floor.
        self.to_not_jaw = _DistanceMap((value > 0).reshape(shape) & ~jaw, low, voxel)
        distance, _, nearest = self.to_jaw.query(grid)
        clear_of_jaw = self._clear_of_jaw(distance, nearest).reshape(shape) >= 0
        self.to_carved_skull = _DistanceMap(skull & clear_of_jaw, low, voxel)

    def _clearance(self, jaw_point):
        travel = self.opening_rad * np.linalg.norm(np.cross(jaw_point - self.hinge_origin, self.hinge_axis), axis=-1)
        return self.base + self.per_travel * travel

    def _clear_of_jaw(self, to_jaw, jaw_nearest):
        """How far beyond the clearance a point at distance `to_jaw` from its nearest jaw voxel
        lies (inf without a jaw)."""
        return to_jaw if self.to_jaw.empty else to_jaw - self._clearance(jaw_nearest)

    def evaluate(self, points):
        points = np.asarray(points, dtype=np.float64)
        value, projection, label = self.solid.evaluate(points)
        is_jaw, is_skull = label == JAW, label == SKULL
        to_jaw, from_jaw, jaw_nearest = self.to_jaw.query(points)
        to_not_jaw, from_not_jaw, _ = self.to_not_jaw.query(points)
        to_carved, from_carved, _ = self.to_carved_skull.query(points)
        # Each bone is the solid where it carries its label, cut where the label changes, and
        # minus the distance to that bone's voxels elsewhere; projections follow the term that
        # decides the value (points - value × direction away from the nearer bone or boundary).
        jaw_value = np.where(is_jaw, np.minimum(value, to_not_jaw), -to_jaw)
        jaw_projection = np.where((is_jaw & (to_not_jaw < value))[:, None],
                                  points - to_not_jaw[:, None] * from_not_jaw,
                                  np.where(is_jaw[:, None], projection, points - to_jaw[:, None] * from_jaw))
        clear = self._clear_of_jaw(to_jaw, jaw_nearest)
        skull_value = np.where(is_skull, np.minimum(value, clear), -to_carved)
        skull_projection = np.where((is_skull & (clear < value))[:, None], points - clear[:, None] * from_jaw,
                                    np.where(is_skull[:, None], projection, points - to_carved[:, None] * from_carved))
        jaw_wins = jaw_value >= skull_value
        return (np.where(jaw_wins, jaw_value, skull_value),
                np.where(jaw_wins[:, None], jaw_projection, skull_projection),
                np.where(jaw_wins, JAW, SKULL).astype(np.int8))


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


def build_bone_field(rig, skin: SkinField, landmarks, jaw, cavity, min_tissue_depth,
                     surfaces: EstimatedBoneSurfaces | None = None) -> tuple[BoneField, dict]:
    """Bones from the rig when supplied, otherwise estimated; plus sockets for supplied teeth.

    `surfaces` (from `estimated_bone_surfaces`) lets two builds share their queries.
    """
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
        surfaces = surfaces or estimated_bone_surfaces(rig, skin, landmarks, cavity)
        estimated = _EstimatedCranioMandible(
            surfaces, depth, jaw.skin_weight, max(CAVITY_LINING_MM * 1e-3 * landmarks.scale, min_tissue_depth),
            mouth_floor=lambda points: under_mouth_floor(landmarks.frame.local(points), landmarks))
        unit = 1e-3 * landmarks.scale
        bones.add(_SeparatedCranioMandible(
            estimated, skin.vertices.min(axis=0) - 5 * unit, skin.vertices.max(axis=0) + 5 * unit,
            SEPARATION_VOXEL_MM * unit, jaw.frame[:3, 3], jaw.frame[:3, 0], np.radians(JAW_DESIGN_OPENING_DEG),
            JAW_CLEARANCE_MM * unit, JAW_CLEARANCE_PER_TRAVEL))
        info["bones"] = (f"estimated from forensic soft-tissue depth; the skull kept clear of the jaw by "
                         f"{JAW_CLEARANCE_MM:g} mm + {JAW_CLEARANCE_PER_TRAVEL:g} × its travel at "
                         f"{JAW_DESIGN_OPENING_DEG:g}° opening")
        info["skin_depth_mm"] = [float(depth[outer].min() * 1e3), float(depth[outer].max() * 1e3)]
    for label, verts, faces in _teeth(rig):
        crown_direction = landmarks.frame.up if label == JAW else -landmarks.frame.up
        bones.add(_Socket(label, verts, triangulate(faces, verts), TEETH_SOCKET_MM * 1e-3 * landmarks.scale,
                          crown_direction))
    return bones, info


def estimated_bone_surfaces(rig, skin: SkinField, landmarks, cavity) -> EstimatedBoneSurfaces | None:
    """The surfaces estimated bones are measured from; None when the rig supplies a skull."""
    if rig.skull_vertices is not None:
        return None
    return EstimatedBoneSurfaces(
        skin.vertices, skin.triangles, ~cavity,
        teeth=[(label, ClosestPointTree(v, triangulate(f, v))) for label, v, f in _teeth(rig)],
        alveolar_reach=ALVEOLAR_REACH_MM * 1e-3 * landmarks.scale)


def _teeth(rig):
    """(bone label, vertices, faces) of each supplied teeth arch: upper with the skull, lower with the jaw."""
    pairs = ((SKULL, rig.upper_teeth_vertices, rig.upper_teeth_faces),
             (JAW, rig.lower_teeth_vertices, rig.lower_teeth_faces))
    return [(label, verts, faces) for label, verts, faces in pairs if verts is not None]


def under_mouth_floor(local, landmarks) -> np.ndarray:
    """(N,) bool for head-frame points (N,3): below the mandible's lower border and behind the
    chin (see MOUTH_FLOOR_CHIN_DROP)."""
    frame, s = landmarks.frame, landmarks.scale
    chin = frame.local(landmarks["chin"][None])[0]
    angle = jaw_angle(landmarks)
    border_front = np.array([chin[1] - MOUTH_FLOOR_CHIN_DROP * s, chin[2]])          # (up, forward)
    slope = (angle[1] - border_front[0]) / min(angle[2] - border_front[1], -1e-6)
    border_up = border_front[0] + slope * (local[:, 2] - border_front[1])
    return (local[:, 1] < border_up - MOUTH_FLOOR_MARGIN * s) & (local[:, 2] < chin[2] - MOUTH_FLOOR_BEHIND_CHIN * s)


def jaw_angle(landmarks) -> np.ndarray:
    """Head-frame position of the jaw angles: the mean of the two gonions (x near 0)."""
    return np.mean([landmarks.frame.local(landmarks[f"gonion_{k}"][None])[0] for k in "LR"], axis=0)
