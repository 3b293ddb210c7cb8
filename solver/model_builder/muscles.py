"""Built-in atlas of the facial muscles, placed on a face from its landmarks.

Each muscle is one or more *paths*: polylines of control points that run from origin to
insertion (or around a sphincter), each point with a half-width across the path and a
half-thickness along the skin normal. A control point is given in head-frame
coordinates relative to landmarks, projected onto the outer skin from the front or the
side, and then sunk under the skin to a fraction of the local tissue depth, so the
same atlas fits a thin forehead and a thick cheek, any face size and any axis
convention. The underside of the chin faces down, so its knots are projected from below.
A point belongs to a muscle when it lies inside the swept ribbon.
Muscles come in left/right pairs (`_L` is the subject's left) so that one side can be
paralysed on its own; sphincters (orbicularis oris/oculi) are split into halves/rings
per side for the same reason.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..geometry.rays import first_ray_hits

FRONT, SIDE, BELOW = "front", "side", "below"
NORMAL_RADIUS_MM = 8.0


@dataclass
class MusclePath:
    points: np.ndarray        # (k,3) world control points (centre of the muscle)
    normals: np.ndarray       # (k,3) outward skin normal at each control point
    half_width: np.ndarray    # (k,)
    half_thickness: np.ndarray


@dataclass
class Muscle:
    name: str
    paths: list


def _spec():
    """The atlas: per muscle (base name, paths); each path a list of knots.

    A knot: (anchor expression, offset mm in (left, up, forward), projection, depth
    fraction, half-width mm, half-thickness mm). Offsets are for the LEFT side; the right
    side mirrors them. Anchor expressions name landmarks (mean of several with '+').
    """
    brow = "brow_inner+brow_outer"
    return {
        "frontalis": [[(brow, (0, 8, 0), FRONT, 0.45, 16, 1.2), (brow, (-3, 35, 0), FRONT, 0.45, 18, 1.2),
                       (brow, (-5, 60, 0), FRONT, 0.45, 18, 1.2)]],
        "corrugator": [[("brow_inner", (-8, -2, 0), FRONT, 0.7, 3.5, 1.8),
                        (brow, (0, 3, 0), FRONT, 0.55, 3.5, 1.5)]],
        "procerus": [[("nasion", (4, -14, 0), FRONT, 0.5, 4, 1.5), ("nasion", (4, 14, 0), FRONT, 0.5, 4, 1.5)]],
        "orbicularis_oculi": [
            [("eye", _ellipse(a, 20, 16), FRONT, 0.35, 6, 1.5) for a in np.linspace(0, 180, 7)],
            [("eye", _ellipse(a, 20, 16), FRONT, 0.35, 6, 1.5) for a in np.linspace(360, 180, 7)]],
        # The sphincter fills the lips up to the red margin, as the pars marginalis does: a ring
        # further out (26 x 12 mm, 5 mm wide) left the vermilion passive, 37-42 % of ICT's lip
        # tissue sphincter (70-73 % now), and the lips could not stretch over the open jaw for
        # mouthClose (docs/model-builder.md, section 4).
        "orbicularis_oris": [
            [("mouth", _ellipse(a, 26, 10), FRONT, 0.5, 7, 3.5) for a in np.linspace(90, -90, 9)]],
        "zygomaticus_major": [[("cheekbone", (14, -4, 0), SIDE, 0.65, 5, 2.5),
                               ("mouth_corner", (12, 8, 0), FRONT, 0.5, 5, 2.5),
                               ("mouth_corner", (3, 1, 0), FRONT, 0.45, 4, 2.0)]],
        "zygomaticus_minor": [[("cheekbone", (2, 2, 0), FRONT, 0.6, 4, 2.0),
                               ("mouth_corner", (-8, 12, 0), FRONT, 0.45, 3.5, 1.8)]],
        "levator_labii_superioris": [[("eye", (-2, -18, 0), FRONT, 0.6, 6, 2.0),
                                      ("mouth_corner", (-11, 9, 0), FRONT, 0.45, 4, 2.0)]],
        "levator_labii_superioris_alaeque_nasi": [[("nasion", (8, -6, 0), FRONT, 0.5, 3, 1.5),
                                                   ("ala", (4, 4, 0), FRONT, 0.5, 3, 1.5),
                                                   ("mouth_corner", (-13, 10, 0), FRONT, 0.45, 3, 1.5)]],
        "levator_anguli_oris": [[("eye", (-4, -30, 0), FRONT, 0.8, 4, 2.0),
                                 ("mouth_corner", (2, 5, 0), FRONT, 0.6, 3.5, 2.0)]],
        "risorius": [[("mouth_corner", (0, 2, -38), SIDE, 0.4, 4, 1.5), ("mouth_corner", (6, 1, 0), FRONT, 0.4, 3, 1.5)]],
        "buccinator": [[("mouth_corner", (0, 0, -30), SIDE, 0.85, 9, 2.5), ("mouth_corner", (8, 0, 0), FRONT, 0.8, 6, 2.5)]],
        "depressor_anguli_oris": [[("mouth_corner", (3, -3, 0), FRONT, 0.45, 4, 1.8),
                                   ("mouth_corner", (10, -28, 0), FRONT, 0.45, 8, 1.8)]],
        "depressor_labii_inferioris": [[("mouth_corner", (-10, -9, 0), FRONT, 0.5, 5, 1.8),
                                        ("mouth_corner", (-6, -28, 0), FRONT, 0.5, 6, 1.8)]],
        # From the incisive fossa, close to the bone under the lower incisors' roots, down and
        # forward into the skin of the chin, fanning out: the chin's soft tissue is mostly
        # mentalis (60-66 % of ICT's in front of the mandible; a 4 mm ribbon filled 14-20 %). The
        # tissue that lifts the lower lip over an open jaw, which mouthClose on jawOpen asks for
        # (docs/model-builder.md, section 4).
        "mentalis": [[("chin", (7, 16, 0), FRONT, 0.8, 5, 3.0), ("chin", (8, 4, 0), FRONT, 0.6, 8, 4.0),
                      ("chin", (8, -8, 0), FRONT, 0.45, 9, 4.0)]],
        "nasalis": [[("ala", (0, 4, 0), FRONT, 0.5, 4, 1.5), ("nose_tip", (5, 14, 0), FRONT, 0.5, 4, 1.5)]],
        "masseter": [[("condyle", (0, -8, 20), SIDE, 0.6, 11, 5.0), ("gonion", (0, 6, 14), SIDE, 0.6, 12, 5.0)]],
        "platysma": [[("mouth_corner", (14, -32, 0), FRONT, 0.4, 14, 1.5),
                      ("menton", (38, -50, 0), SIDE, 0.3, 18, 1.5)]],
        # The floor of the mouth (mylohyoid, with the anterior digastric on it) from behind the
        # chin back to the hyoid: the jaw openers, and the only tissue that shapes the skin under
        # the chin as the jaw drops. Without it ICT's jawOpen pulled that skin 4-5 mm too far back
        # (95th percentile 2.75 mm; 1.47 with it). Anchored on the chin point, not the menton,
        # which the demo head's jawOpen puts on the neck.
        "mylohyoid": [[("chin", (12, 0, -20), BELOW, 0.5, 12, 3.0), ("chin", (13, 0, -45), BELOW, 0.5, 13, 3.0),
                       ("chin", (14, -40, 0), FRONT, 0.5, 14, 3.0)]],
    }


def _ellipse(angle_deg, radius_x, radius_y):
    a = np.radians(angle_deg)
    return (radius_x * np.cos(a), radius_y * np.sin(a), 0.0)


MUSCLE_BASE_NAMES = tuple(_spec())


def atlas_muscle_names():
    return [f"{base}_{side}" for base in MUSCLE_BASE_NAMES for side in "LR"]


class MusclePlacer:
    """Projects atlas knots onto a particular face and sinks them into its tissue."""

    def __init__(self, skin_vertices, skin_triangles, skin_normals, outer_vertex, landmarks, anchors, tissue_depth):
        self.frame = landmarks.frame
        self.vertices = skin_vertices
        self.normals = skin_normals
        self.outer = outer_vertex
        self.triangles = skin_triangles
        self.landmarks = landmarks
        self.anchors = anchors                  # name -> world point
        self.tissue_depth = tissue_depth        # callable(points, inward directions) -> depth
        self.scale = landmarks.scale

    def _anchor(self, expression, side):
        parts = expression.split("+")
        points = []
        for part in parts:
            for name in (f"{part}_{side}", part):
                if name in self.anchors:
                    points.append(self.anchors[name])
                    break
            else:
                raise KeyError(part)
        return self.frame.local(np.mean(points, axis=0)[None])[0]

    def _project(self, target, projection, sign):
        """Where a ray from outside the face, through the target, first meets the outer skin.

        Returns (point, outward unit normal). A ray keeps the target's left/right position,
        unlike picking the most prominent vertex nearby, which drifts onto ridges (the nose).
        """
        axis = {FRONT: self.frame.forward, SIDE: sign * self.frame.left, BELOW: -self.frame.up}[projection]
        world_target = self.frame.world(target[None])[0]
        origin = world_target + axis * 0.5 * self.scale
        # Cast against the whole skin, so a ray cannot slip through the mouth slit; a ray
        # that meets a cavity lining first (or nothing) takes the nearest outer vertex.
        _, triangle, weights = first_ray_hits(self.vertices, self.triangles, origin[None], -axis)
        if triangle[0] < 0 or not self.outer[self.triangles[triangle[0]]].all():
            nearest = np.flatnonzero(self.outer)[np.argmin(
                np.linalg.norm(self.vertices[self.outer] - world_target, axis=1))]
            return self.vertices[nearest], self._smoothed_normal(self.vertices[nearest])
        point = weights[0] @ self.vertices[self.triangles[triangle[0]]]
        return point, self._smoothed_normal(point)

    def _smoothed_normal(self, point):
        """Outward normal averaged over the outer skin within NORMAL_RADIUS_MM of the point.

        A muscle is broader than the skin's detail: on a narrow ridge (the nose bridge) the
        vertex normal swings sideways and would sink the muscle across the midline.
        """
        near = self.outer & (np.linalg.norm(self.vertices - point, axis=1) < NORMAL_RADIUS_MM * 1e-3 * self.scale)
        if not near.any():
            near = self.outer & (np.arange(len(self.vertices)) == np.argmin(np.linalg.norm(self.vertices - point, axis=1)))
        normal = self.normals[near].sum(0)
        return normal / np.linalg.norm(normal)

    def place(self, side) -> list:
        sign = 1.0 if side == "L" else -1.0
        muscles = []
        for base, paths in _spec().items():
            placed = []
            for knots in paths:
                surface, fractions, widths, thicknesses = [], [], [], []
                for anchor, offset, projection, fraction, width, thickness in knots:
                    target = self._anchor(anchor, side) + np.array(offset) * 1e-3 * self.scale * [sign, 1, 1]
                    surface.append(self._project(target, projection, sign))
                    fractions.append(fraction)
                    widths.append(width)
                    thicknesses.append(thickness)
                skin_points = np.array([point for point, _ in surface])
                normals = np.array([normal for _, normal in surface])
                depth = self.tissue_depth(skin_points, -normals)
                half_thickness = np.minimum(np.array(thicknesses) * 1e-3 * self.scale, 0.4 * depth)
                centre_depth = np.maximum(np.array(fractions) * depth, half_thickness)
                placed.append(MusclePath(points=skin_points - normals * centre_depth[:, None], normals=normals,
                                         half_width=np.array(widths) * 1e-3 * self.scale,
                                         half_thickness=np.maximum(half_thickness, 0.5e-3)))
            muscles.append(Muscle(name=f"{base}_{side}", paths=placed))
        return muscles


def path_membership(path: MusclePath, points):
    """Per point: (inside score, path parameter in [0,1]); score > 0 means inside the ribbon.

    The score is 1 on the muscle's centre line and falls to 0 at its surface, so when
    muscles overlap a sample goes to the one it is most inside.
    """
    knots = path.points
    segments = len(knots) - 1
    lengths = np.linalg.norm(np.diff(knots, axis=0), axis=1)
    cumulative = np.concatenate([[0.0], np.cumsum(lengths)])
    total = max(cumulative[-1], 1e-12)
    best_score = np.full(len(points), -np.inf)
    best_param = np.zeros(len(points))
    for s in range(segments):
        a, b = knots[s], knots[s + 1]
        axis = (b - a) / max(lengths[s], 1e-12)
        t = np.clip((points - a) @ axis / max(lengths[s], 1e-12), 0.0, 1.0)
        centre = a + t[:, None] * (b - a)
        normal = (1 - t)[:, None] * path.normals[s] + t[:, None] * path.normals[s + 1]
        normal -= (normal @ axis)[:, None] * axis
        normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)
        offset = points - centre
        along = offset @ axis
        across_normal = np.einsum("ij,ij->i", offset, normal)
        lateral = np.linalg.norm(offset - along[:, None] * axis - across_normal[:, None] * normal, axis=1)
        width = (1 - t) * path.half_width[s] + t * path.half_width[s + 1]
        thickness = (1 - t) * path.half_thickness[s] + t * path.half_thickness[s + 1]
        # Beyond the ends, round caps as long as the muscle is thick.
        overshoot = np.abs(along) / thickness
        score = 1.0 - np.maximum.reduce([np.abs(across_normal) / thickness, lateral / width, overshoot])
        better = score > best_score
        best_score = np.where(better, score, best_score)
        best_param = np.where(better, (cumulative[s] + t * lengths[s]) / total, best_param)
    return best_score, best_param


def path_bounds(path: MusclePath):
    reach = max(path.half_width.max(), path.half_thickness.max())
    return path.points.min(0) - reach, path.points.max(0) + reach
