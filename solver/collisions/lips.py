"""The upper and lower lip surfaces, their projection regions, and lip–lip detection.

Finding the lips (``find_lip_surfaces``) from the model dict alone, in the head frame
(x left, y up, z forward) around the mouth corners' midpoint, with w the mouth width:

1. The lip box: skin vertices within LIP_BOX_SIDEWAYS·w sideways of the mouth centre,
   LIP_BOX_VERTICAL·w above or below the mouth line, and no more than LIP_BOX_BEHIND·w
   behind the mouth corners (keeps the inner lip surface, drops the deeper mouth socket).
2. The mouth line y(x): where the slit finder of the model builder
   (``mouth_cut.find_mouth_slit``) finds the walls of the slit, the mid-height of the walls
   in sideways bins; elsewhere it is interpolated linearly through the mouth corners and the
   mid-point of the lip landmarks. Vertices on a wall take that wall's lip; the others are
   upper when above the line.
3. Each lip's surface is the skin triangles with all three corners on that lip.

Explicit vertex index arrays replace steps 1–2 when passed as ``lip_vertices``;
``lip_vertices_from_groups`` reads them from the Blender vertex groups ``FP_lip_upper`` and
``FP_lip_lower`` of a rig.

Projection regions: the triangles of one lip that face the other lip, i.e. whose normal is
within acos(REGION_MIN_FACING) of the vertical direction towards it (down for the upper lip,
up for the lower), and, for the automatic lips, within REGION_VERTICAL_REACH·w of the mouth
line. Paper 000 paints these by hand; the facing test picks the same band (the red of the
lip and the slit walls) without touching the skin under the nose or over the chin.

Detection (``LipCollider``): a vertex of one lip penetrates the other when it lies behind
the other lip's region (pseudo-normal sign, see ``detection``) within the max-depth band
MAX_DEPTH·w (paper 001 §3.1 limits contact depth the same way), so no far part of the face
ever counts as inside. The plane normal is the region's pseudo-normal at the projection, so
it always faces the other lip (a push direction p − x can tilt away near the region's
edges on the inner, sloping lip). Vertices within CORNER_REACH·w of a mouth corner are not tested:
the lips are joined there and "behind the other lip" has no meaning. For the skin shown (not
the simulation) the contact also fades in beyond that: out to CORNER_FADE_REACH·w a vertex may
lie up to CORNER_FADE_DEPTH·w deep, the allowance falling smoothly (smoothstep) to zero
(``LipSurfaces.corner_allowance``, the scene's shown allowance). Kept out at full strength right
where the untested zone ends, the shown lip next to the corner was pinned out while the corner
followed the rig, and the step between them folded the sub-millimetre triangles there
(docs/performance.md). The lips deform, so
each detection refits the region's hierarchy to the current skin positions, and the facing
rule is applied again to the plane: its normal must still lie within acos(REGION_MIN_FACING)
of the direction towards the other lip (carried by the skull). Where a lip has rolled in, its
region faces back into the mouth, and a plane there would push the other lip after it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..geometry import triangle_normals_areas
from ..model_builder.landmarks import HeadFrame, Landmarks
from ..model_builder.mouth_cut import UPPER, find_mouth_slit
from ..model_file import model_head_axes, model_landmarks
from .contacts import BonePose, ContactPlanes
from .detection import SurfaceQuery, candidates_in_box, patch_hits

LIP_BOX_SIDEWAYS = 0.6
LIP_BOX_VERTICAL = 0.3
LIP_BOX_BEHIND = 0.25
# The slit finder looks for walls this close (× w); lips farther apart than that are split
# by the landmark line alone.
SLIT_MAX_GAP = 0.08
WALL_REACH = 0.03
SLIT_BINS = 16
REGION_MIN_FACING = 0.3
REGION_VERTICAL_REACH = 0.15
CORNER_REACH = 0.1
CORNER_FADE_REACH = 0.2
CORNER_FADE_DEPTH = 0.05
MAX_DEPTH = 0.15
# On the open border of a region only points within 45° of straight behind it count.
BORDER_CONE_COS = math.cos(math.radians(45.0))
# Average adult mouth width, to express the face's scale for the slit finder.
AVERAGE_MOUTH_WIDTH = 0.05


class LipSurfaceError(ValueError):
    """The lips could not be found (missing landmarks or an empty lip)."""


@dataclass
class LipSurfaces:
    """Both lips as skin-vertex index sets and skin-index triangles (rest pose)."""
    upper_vertices: np.ndarray
    lower_vertices: np.ndarray
    upper_triangles: np.ndarray     # (t,3) skin vertex indices
    lower_triangles: np.ndarray
    upper_region: np.ndarray        # (r,3) triangles of the upper lip facing the lower lip
    lower_region: np.ndarray
    upper_tested: np.ndarray        # vertices tested against the other lip (corners left out)
    lower_tested: np.ndarray
    max_depth: float                # metres
    source: str                     # "slit walls", "landmarks" or "vertex groups"
    corner_allowance: np.ndarray    # (V,) metres a skin vertex may lie inside the other lip


def _landmarks(model):
    landmarks = model_landmarks(model)
    needed = ("mouth_corner_L", "mouth_corner_R", "upper_lip", "lower_lip")
    missing = [n for n in needed if n not in landmarks]
    if missing:
        raise LipSurfaceError(f"the model lacks the landmarks {missing} needed to find the lips; "
                              "pass lip_vertices=(upper, lower) instead")
    return landmarks


def _frame(model):
    return HeadFrame(origin=np.asarray(model["head_origin"], dtype=np.float64), axes=model_head_axes(model))


def _face_scale(model, mouth_width):
    try:
        return float(json.loads(str(model["build_info"]))["face_scale"])
    except (KeyError, ValueError, TypeError):
        return mouth_width / AVERAGE_MOUTH_WIDTH


class _MouthLine:
    """Height of the mouth line (head-frame y) as a function of the sideways coordinate x."""

    def __init__(self, x, y):
        order = np.argsort(x)
        self.x, self.y = x[order], y[order]

    def __call__(self, x):
        return np.interp(x, self.x, self.y)


def find_lip_surfaces(model: dict, lip_vertices: Optional[tuple] = None) -> LipSurfaces:
    """Upper and lower lips of the model's skin (see the module docstring)."""
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    triangles = np.asarray(model["skin_triangles"], dtype=np.int64)
    marks = _landmarks(model)
    frame = _frame(model)
    corner_l, corner_r = marks["mouth_corner_L"], marks["mouth_corner_R"]
    width = float(np.linalg.norm(corner_l - corner_r))
    if not width > 0:
        raise LipSurfaceError("the mouth corner landmarks coincide")
    centre = 0.5 * (corner_l + corner_r)
    local = (skin - centre) @ frame.axes.T
    corners_local = (np.array([corner_r, corner_l]) - centre) @ frame.axes.T
    middle_local = (0.5 * (marks["upper_lip"] + marks["lower_lip"]) - centre) @ frame.axes.T
    line = _MouthLine(np.array([corners_local[0, 0], middle_local[0], corners_local[1, 0]]),
                      np.array([corners_local[0, 1], middle_local[1], corners_local[1, 1]]))

    if lip_vertices is not None:
        upper, lower = (np.unique(np.asarray(v, dtype=np.int64)) for v in lip_vertices)
        if upper.size == 0 or lower.size == 0 or min(upper.min(), lower.min()) < 0 \
                or max(upper.max(), lower.max()) >= len(skin):
            raise LipSurfaceError(f"lip_vertices must be two non-empty arrays of skin vertex indices "
                                  f"in [0, {len(skin) - 1}]")
        if np.intersect1d(upper, lower).size:
            raise LipSurfaceError("lip_vertices: a vertex cannot be on both lips")
        side = np.zeros(len(skin), np.int64)
        side[upper], side[lower] = 1, -1
        source, reach_limited = "vertex groups", False
    else:
        landmarks = Landmarks(frame=frame, position={k: marks[k] for k in ("mouth_corner_L", "mouth_corner_R")},
                              scale=_face_scale(model, width))
        slit = find_mouth_slit(skin, triangles, landmarks, max_gap=SLIT_MAX_GAP * width)
        source = "landmarks"
        if slit is not None:
            line, source = _line_from_walls(slit, centre, frame, corners_local, width) or (line, source)
        offset = local[:, 1] - line(local[:, 0])
        in_box = ((np.abs(local[:, 0]) < LIP_BOX_SIDEWAYS * width)
                  & (np.abs(offset) < LIP_BOX_VERTICAL * width)
                  & (local[:, 2] > -LIP_BOX_BEHIND * width))
        side = np.where(offset > 0, 1, -1) * in_box
        if slit is not None:
            wall_side, _ = slit.side_of(skin[in_box], WALL_REACH * width)
            on_wall = wall_side != 0
            boxed = np.flatnonzero(in_box)
            side[boxed[on_wall]] = np.where(wall_side[on_wall] == UPPER, 1, -1)
        reach_limited = True

    corner_distance = np.minimum(np.linalg.norm(skin - corner_l, axis=1), np.linalg.norm(skin - corner_r, axis=1))
    away_from_corners = corner_distance > CORNER_REACH * width
    normals, areas = triangle_normals_areas(skin, triangles)
    up = frame.up
    centroid_offset = np.abs(((skin[triangles].mean(1) - centre) @ frame.axes.T)[:, 1]
                             - line(((skin[triangles].mean(1) - centre) @ frame.axes.T)[:, 0]))
    lips = {}
    for label, sign in (("upper", 1), ("lower", -1)):
        on_lip = side[triangles] == sign
        lip_triangles = triangles[on_lip.all(1)]
        facing = (normals @ (-sign * up) > REGION_MIN_FACING) & (areas > 0) & on_lip.all(1)
        if reach_limited:
            facing &= centroid_offset < REGION_VERTICAL_REACH * width
        vertices = np.unique(lip_triangles)
        if len(lip_triangles) == 0 or not facing.any():
            raise LipSurfaceError(f"found no {label} lip surface facing the other lip "
                                  f"({len(lip_triangles)} lip triangles); pass lip_vertices=(upper, lower)")
        lips[label] = (vertices, lip_triangles, triangles[facing], vertices[away_from_corners[vertices]])
    return LipSurfaces(
        upper_vertices=lips["upper"][0], lower_vertices=lips["lower"][0],
        upper_triangles=lips["upper"][1], lower_triangles=lips["lower"][1],
        upper_region=lips["upper"][2], lower_region=lips["lower"][2],
        upper_tested=lips["upper"][3], lower_tested=lips["lower"][3],
        max_depth=MAX_DEPTH * width, source=source,
        corner_allowance=corner_fade(corner_distance, width),
    )


def corner_fade(corner_distance: np.ndarray, width: float) -> np.ndarray:
    """How deep (metres) a lip vertex `corner_distance` from the nearer mouth corner may lie
    inside the other lip: CORNER_FADE_DEPTH·w at CORNER_REACH·w, falling as a smoothstep to 0 at
    CORNER_FADE_REACH·w."""
    start, end = CORNER_REACH * width, CORNER_FADE_REACH * width
    t = np.clip((np.asarray(corner_distance, dtype=np.float64) - start) / (end - start), 0.0, 1.0)
    return CORNER_FADE_DEPTH * width * (1.0 - t * t * (3.0 - 2.0 * t))


def _line_from_walls(slit, centre, frame, corners_local, width):
    """Mouth line through the binned mid-heights of the slit walls and the corners, or None."""
    wall_local = (slit.vertices[slit.triangles].mean(1) - centre) @ frame.axes.T
    edges = np.linspace(corners_local[0, 0], corners_local[1, 0], SLIT_BINS + 1)
    xs, ys = [corners_local[0, 0], corners_local[1, 0]], [corners_local[0, 1], corners_local[1, 1]]
    for low, high in zip(edges[:-1], edges[1:]):
        in_bin = (wall_local[:, 0] >= low) & (wall_local[:, 0] < high)
        upper_walls = in_bin & (slit.side == UPPER)
        lower_walls = in_bin & (slit.side != UPPER)
        if upper_walls.any() and lower_walls.any():
            xs.append(0.5 * (low + high))
            ys.append(0.5 * (wall_local[upper_walls, 1].min() + wall_local[lower_walls, 1].max()))
    if len(xs) == 2:
        return None
    return _MouthLine(np.array(xs), np.array(ys)), "slit walls"


UPPER_LIP_GROUP, LOWER_LIP_GROUP = "FP_lip_upper", "FP_lip_lower"


def lip_vertices_from_groups(group_names, group_weights, threshold: float = 0.5) -> Optional[tuple]:
    """(upper, lower) skin vertex indices from the vertex groups FP_lip_upper / FP_lip_lower
    (FaceRig.vertex_group_names (G,), vertex_group_weights (G,V)), or None unless both exist.
    A vertex belongs to a lip when its weight exceeds `threshold`."""
    if group_names is None or group_weights is None:
        return None
    names = [str(name) for name in group_names]
    if UPPER_LIP_GROUP not in names or LOWER_LIP_GROUP not in names:
        return None
    weights = np.asarray(group_weights)
    return (np.flatnonzero(weights[names.index(UPPER_LIP_GROUP)] > threshold),
            np.flatnonzero(weights[names.index(LOWER_LIP_GROUP)] > threshold))


class LipCollider:
    """One lip as an obstacle for the other lip's vertices (Collider protocol)."""

    def __init__(self, name: str, skin_rest, region_triangles, tested_vertices, max_depth: float,
                 towards_other=None):
        self.name = name
        # The direction (rest head frame) the region faces at rest — towards the other lip; a
        # plane must still face within acos(REGION_MIN_FACING) of it, carried by the skull.
        self.towards_other = None if towards_other is None else np.asarray(towards_other, dtype=np.float64)
        self.region_vertices, local = np.unique(np.asarray(region_triangles, dtype=np.int64), return_inverse=True)
        self.region_triangles = local.reshape(-1, 3)
        self.tested_vertices = np.asarray(tested_vertices, dtype=np.int64)
        self.max_depth = float(max_depth)
        self.region = SurfaceQuery(np.asarray(skin_rest, dtype=np.float64)[self.region_vertices],
                                   self.region_triangles)

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes:
        """Planes on the tested lip vertices behind this lip's region (and, with `margin`,
        less than `margin` in front of it). Each plane names the region triangle its point lies
        on (``partner``, ``partner_weight``): the lip is not a fixed obstacle, and the contact
        response splits the push between two lips pushed into each other."""
        skin_positions = np.ascontiguousarray(skin_positions, dtype=np.float64)
        region_positions = skin_positions[self.region_vertices]
        self.region.refit(region_positions)
        tested = skin_positions[self.tested_vertices]
        reach = max(self.max_depth, margin)
        nearby = candidates_in_box(tested, self.region.lower - reach, self.region.upper + reach)
        found, triangle = patch_hits(self.region, tested[nearby], self.max_depth, BORDER_CONE_COS,
                                     surface_normals=True, margin=margin)
        if self.towards_other is not None and len(found.index):
            # Where the lip has rolled, its region no longer faces the other lip: a plane there
            # would push the other lip back into the mouth or sideways, so none is made.
            towards = np.asarray(pose.skull, dtype=np.float64)[:3, :3] @ self.towards_other
            facing = found.normal @ towards >= REGION_MIN_FACING
            found = type(found)(*(array[facing] for array in found))
            triangle = triangle[facing]
        vertex = self.tested_vertices[nearby[found.index]]
        corners = self.region_triangles[triangle]                   # (C,3) into region_vertices
        weights = barycentric_weights(found.point, region_positions[corners])
        return ContactPlanes(vertex=vertex, point=found.point, normal=found.normal, depth=found.depth,
                             collider=np.full(len(vertex), collider_index, np.int64),
                             partner=self.region_vertices[corners], partner_weight=weights)


def barycentric_weights(points, triangles) -> np.ndarray:
    """(C,3) barycentric weights of points (C,3) lying on triangles (C,3,3), clipped to the
    triangle and summing to one (the points come from a closest-point query, so they are on it)."""
    if len(points) == 0:
        return np.zeros((0, 3))
    a, b, c = triangles[:, 0], triangles[:, 1], triangles[:, 2]
    e0, e1, offset = b - a, c - a, points - a
    d00, d01, d11 = (np.einsum("ij,ij->i", e0, e0), np.einsum("ij,ij->i", e0, e1), np.einsum("ij,ij->i", e1, e1))
    d20, d21 = np.einsum("ij,ij->i", offset, e0), np.einsum("ij,ij->i", offset, e1)
    denominator = d00 * d11 - d01 * d01
    safe = np.where(np.abs(denominator) > 0.0, denominator, 1.0)
    v = np.where(np.abs(denominator) > 0.0, (d11 * d20 - d01 * d21) / safe, 1.0 / 3.0)
    w = np.where(np.abs(denominator) > 0.0, (d00 * d21 - d01 * d20) / safe, 1.0 / 3.0)
    weights = np.clip(np.column_stack([1.0 - v - w, v, w]), 0.0, 1.0)
    return weights / weights.sum(axis=1, keepdims=True)


def lip_colliders(model: dict, lip_vertices: Optional[tuple] = None) -> tuple[list[LipCollider], LipSurfaces]:
    """[upper_lip, lower_lip] colliders: the upper lip stops lower-lip vertices and vice versa."""
    lips = find_lip_surfaces(model, lip_vertices)
    skin = model["skin_vertices"]
    up = _frame(model).up
    return [LipCollider("upper_lip", skin, lips.upper_region, lips.lower_tested, lips.max_depth, towards_other=-up),
            LipCollider("lower_lip", skin, lips.lower_region, lips.upper_tested, lips.max_depth, towards_other=up)], lips
