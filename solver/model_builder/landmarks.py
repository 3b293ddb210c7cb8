"""Head frame and facial landmarks, inferred from ARKit shape keys.

Rigs arrive in any axis convention (Blender: Z up, face toward -Y; ICT: Y up, face
toward +Z), so orientation is read from what the shape keys do, not from the axes:
the subject's left is where mouthSmile_L pulls, up is where browInnerUp lifts and
opposite to where jawOpen drops the chin. Landmark names supplied in the rig
(same vocabulary as LANDMARK_NAMES) override the inferred ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..geometry.rays import first_ray_hits
from ..rig import rig_triangles
from .errors import ModelBuildError

LANDMARK_NAMES = (
    "mouth_corner_L", "mouth_corner_R", "upper_lip", "lower_lip", "chin", "menton",
    "nose_tip", "nasion", "ala_L", "ala_R", "brow_inner_L", "brow_inner_R",
    "brow_outer_L", "brow_outer_R", "upper_lid_L", "upper_lid_R", "eye_L", "eye_R",
    "cheekbone_L", "cheekbone_R", "gonion_L", "gonion_R", "forehead", "crown",
    "occiput", "neck_front",
)


@dataclass
class HeadFrame:
    """Orthonormal anatomical frame: rows of `axes` are left, up, forward (world coords)."""
    origin: np.ndarray
    axes: np.ndarray

    @property
    def left(self):
        return self.axes[0]

    @property
    def up(self):
        return self.axes[1]

    @property
    def forward(self):
        return self.axes[2]

    def local(self, points):
        """World → frame coordinates (x = left, y = up, z = forward)."""
        return (np.asarray(points) - self.origin) @ self.axes.T

    def world(self, local_points):
        return np.asarray(local_points) @ self.axes + self.origin


@dataclass
class Landmarks:
    frame: HeadFrame
    vertex: dict = field(default_factory=dict)      # name -> skin vertex index
    position: dict = field(default_factory=dict)    # name -> (3,) world position
    source: dict = field(default_factory=dict)      # name -> how it was found
    scale: float = 1.0                               # head size relative to an average adult

    def __getitem__(self, name):
        return self.position[name]


def _find_key(rig, *candidates):
    for name in candidates:
        if rig.has_shape_key(name):
            return rig.shape_key(name)
    return None


def _peak_region(deltas, fraction=0.8, mask=None):
    """Indices of the vertices moving at least `fraction` of the peak displacement."""
    magnitude = np.linalg.norm(deltas, axis=1)
    if mask is not None:
        magnitude = np.where(mask, magnitude, 0.0)
    peak = magnitude.max()
    if peak <= 0:
        return np.zeros(0, dtype=np.int64), magnitude
    return np.flatnonzero(magnitude >= fraction * peak), magnitude


def _weighted_peak(vertices, deltas, mask=None, fraction=0.8):
    """Skin vertex nearest to the displacement-weighted centroid of a shape key's peak."""
    idx, magnitude = _peak_region(deltas, fraction, mask)
    if idx.size == 0:
        return None
    centre = (vertices[idx] * magnitude[idx, None]).sum(0) / magnitude[idx].sum()
    candidates = idx if mask is None else np.flatnonzero(mask)
    return int(candidates[np.argmin(np.linalg.norm(vertices[candidates] - centre, axis=1))])


def _unit(v):
    n = np.linalg.norm(v)
    if n < 1e-12:
        raise ModelBuildError("degenerate direction while inferring the head frame")
    return v / n


def _supplied_landmarks(rig):
    if rig.landmark_names is None:
        return {}
    # Eye centres lie inside the head, so they are always derived from the lids.
    return {str(n): int(i) for n, i in zip(rig.landmark_names, rig.landmark_vertices)
            if str(n) in LANDMARK_NAMES and not str(n).startswith("eye_")}


def infer_head_frame(rig) -> HeadFrame:
    vertices = rig.vertices
    supplied = _supplied_landmarks(rig)
    smile_l = _find_key(rig, "mouthSmile_L", "mouthStretch_L", "mouthDimple_L")
    smile_r = _find_key(rig, "mouthSmile_R", "mouthStretch_R", "mouthDimple_R")
    if "mouth_corner_L" in supplied and "mouth_corner_R" in supplied:
        corner_l, corner_r = vertices[supplied["mouth_corner_L"]], vertices[supplied["mouth_corner_R"]]
    elif smile_l is not None and smile_r is not None:
        corner_l = vertices[_weighted_peak(vertices, smile_l)]
        corner_r = vertices[_weighted_peak(vertices, smile_r)]
    else:
        raise ModelBuildError(
            "cannot tell left from right: the rig needs the ARKit shape keys mouthSmile_L and "
            "mouthSmile_R (or mouthStretch_L/R, mouthDimple_L/R, or landmarks mouth_corner_L/_R). "
            "Rename your shape keys to ARKit names or add landmarks.")
    left = _unit(corner_l - corner_r)

    # Brow raises and lid closes move skin almost exactly along the vertical; jawOpen swings
    # the chin down *and back* (~45 degrees off), so it only decides when neither exists.
    up_votes = []
    for key, sign in (("browInnerUp", 1), ("browInnerUp_L", 1), ("browInnerUp_R", 1),
                      ("eyeBlink_L", -1), ("eyeBlink_R", -1)):
        deltas = _find_key(rig, key)
        if deltas is not None and np.abs(deltas).max() > 0:
            idx, magnitude = _peak_region(deltas, 0.5)
            up_votes.append(sign * _unit((deltas[idx] * magnitude[idx, None]).sum(0)))
    jaw_open = _find_key(rig, "jawOpen")
    if not up_votes and jaw_open is not None:
        idx, magnitude = _peak_region(jaw_open, 0.5)
        up_votes.append(-_unit((jaw_open[idx] * magnitude[idx, None]).sum(0)))
    if not up_votes:
        raise ModelBuildError(
            "cannot tell up from down: the rig needs one of the ARKit shape keys browInnerUp, "
            "eyeBlink_L/R or jawOpen.")
    up = sum(up_votes)
    up = _unit(up - left * (left @ up))
    forward = np.cross(left, up)
    # The face is where the mouth corners are; forward must point out of it, not into the head.
    centroid = vertices.mean(0)
    if ((corner_l + corner_r) / 2 - centroid) @ forward < 0:
        raise ModelBuildError(
            "the shape keys disagree about orientation (mouthSmile_L moves the subject's right "
            "side?). Check that _L shape keys move the character's left side.")
    origin = (corner_l + corner_r) / 2
    return HeadFrame(origin=origin, axes=np.stack([left, up, forward]))


def infer_landmarks(rig, frame: HeadFrame | None = None) -> Landmarks:
    """Every landmark in LANDMARK_NAMES, from the rig's landmarks or its shape keys."""
    frame = frame or infer_head_frame(rig)
    vertices = rig.vertices
    local = frame.local(vertices)
    x, y, z = local[:, 0], local[:, 1], local[:, 2]
    result = Landmarks(frame=frame)
    supplied = _supplied_landmarks(rig)

    def put(name, index, how, position=None):
        if name in supplied:
            index, how, position = supplied[name], "supplied", None
        if index is None:
            return
        result.vertex[name] = int(index)
        result.position[name] = vertices[int(index)].copy() if position is None else np.asarray(position, float)
        result.source[name] = how

    def by_key(name, keys, side=None, fraction=0.8):
        mask = None if side is None else (x > 0 if side == "L" else x < 0)
        for key in keys:
            deltas = _find_key(rig, key)
            if deltas is not None and np.abs(deltas).max() > 0:
                peak = _weighted_peak(vertices, deltas, mask=mask, fraction=fraction)
                if peak is not None:
                    put(name, peak, f"shape key {key}")
                    return True
        return False

    for side in "LR":
        by_key(f"mouth_corner_{side}", [f"mouthSmile_{side}", f"mouthStretch_{side}"])
        by_key(f"ala_{side}", [f"noseSneer_{side}"], side)
        by_key(f"brow_inner_{side}", [f"browInnerUp_{side}", "browInnerUp", f"browDown_{side}"], side)
        by_key(f"brow_outer_{side}", [f"browOuterUp_{side}"], side)
        by_key(f"upper_lid_{side}", [f"eyeBlink_{side}"], side)
    needed = [f"{n}_{s}" for n in ("mouth_corner", "brow_inner", "upper_lid") for s in "LR"]
    missing = [n for n in needed if n not in result.position]
    if missing:
        raise ModelBuildError(
            "cannot place facial landmarks " + ", ".join(missing) + ": the rig needs the ARKit "
            "shape keys mouthSmile_L/R, browInnerUp (or browInnerUp_L/R) and eyeBlink_L/R, or "
            "supplied landmarks with these names.")

    corners_y = (y[result.vertex["mouth_corner_L"]] + y[result.vertex["mouth_corner_R"]]) / 2
    lid_y = (y[result.vertex["upper_lid_L"]] + y[result.vertex["upper_lid_R"]]) / 2
    face_height = lid_y - corners_y                  # eyes to mouth, ~0.07 m on an adult
    result.scale = face_height / 0.07
    midline = np.abs(x) < 0.08 * face_height
    jaw_open = _find_key(rig, "jawOpen")
    jaw_motion = np.linalg.norm(jaw_open, axis=1) if jaw_open is not None else np.zeros(len(x))
    jaw_moving = jaw_motion > 0.3 * jaw_motion.max() if jaw_motion.max() > 0 else np.zeros(len(x), bool)

    def most(score, mask, name, how):
        """The best-scoring vertex, moved onto the midline when the pick is a midline landmark.

        The midline band is a few mm wide so that coarse meshes have vertices in it, which
        lets the raw pick sit off-centre; a mirror-symmetric face wants it on the midplane.
        """
        if not mask.any():
            return
        candidates = np.flatnonzero(mask)
        pick = candidates[np.argmax(score[candidates])]
        if midline[pick]:
            nearby = np.flatnonzero(midline & (np.linalg.norm(local[:, 1:] - local[pick, 1:], axis=1)
                                               < 0.1 * face_height))
            pick = nearby[np.argmin(np.abs(x[nearby]) - 1e-3 * score[nearby] / max(np.ptp(score), 1e-12))]
        put(name, pick, how)

    band = midline & (np.abs(y - corners_y) < 0.25 * face_height)
    most(z, band & ~jaw_moving, "upper_lip", "most forward midline point at mouth height, static in jawOpen")
    most(z, band & jaw_moving, "lower_lip", "most forward midline point at mouth height, moving in jawOpen")
    below_mouth = midline & (y < corners_y - 0.3 * face_height) & jaw_moving
    most(z, below_mouth & (y > corners_y - 0.9 * face_height), "chin", "most forward midline point moving in jawOpen")
    most(-y, below_mouth & (z > np.percentile(z, 40)), "menton", "lowest midline point moving in jawOpen")
    most(z, midline & (y > corners_y) & (y < lid_y), "nose_tip", "most forward midline point between mouth and eyes")
    brow_y = (y[result.vertex["brow_inner_L"]] + y[result.vertex["brow_inner_R"]]) / 2
    nasion_band = midline & (y > lid_y - 0.2 * face_height) & (y < brow_y) & (z > np.percentile(z, 60))
    most(-z, nasion_band, "nasion", "deepest midline point between the eyes")
    most(-np.abs(y - (brow_y + 0.45 * face_height)),
         midline & (z > np.percentile(z, 60)) & (y > brow_y), "forehead", "midline forehead point")
    most(y, np.ones_like(midline), "crown", "highest point")
    most(-z, midline & (np.abs(y - lid_y) < 0.3 * face_height), "occiput", "back of the head at eye height")

    triangles = rig_triangles(rig)

    def from_front(target, how):
        index, point = _surface_point(vertices, triangles, frame, target, frame.forward)
        return index, how, point

    for side, sign in (("L", 1.0), ("R", -1.0)):
        lid = result.vertex[f"upper_lid_{side}"]
        # the eye sits under the lid, a few mm behind the lid's outer surface
        result.position[f"eye_{side}"] = vertices[lid] - frame.forward * 0.012 * result.scale \
            - frame.up * 0.004 * result.scale
        result.source[f"eye_{side}"] = "behind the upper lid"
        if f"brow_outer_{side}" not in result.position:
            target = result.position[f"brow_inner_{side}"] + frame.left * sign * 0.035 * result.scale
            put(f"brow_outer_{side}", *from_front(frame.local(target[None])[0], "lateral of the inner brow"))
        cheek_target = frame.local(result.position[f"eye_{side}"][None])[0] + \
            np.array([sign * 0.015, -0.025, 0.0]) * result.scale
        put(f"cheekbone_{side}", *from_front(cheek_target, "below and lateral of the eye"))
        # The jaw angle barely moves in jawOpen (it is near the hinge), so it is placed from
        # average adult proportions relative to the mouth corners and projected on the side.
        gonion_target = np.array([sign * 0.05, -0.03, -0.065]) * result.scale
        index, point = _surface_point(vertices, triangles, frame, gonion_target, sign * frame.left)
        put(f"gonion_{side}", index, "jaw angle from proportions", point)
        if f"ala_{side}" not in result.position and "nose_tip" in result.vertex:
            target = frame.local(result.position["nose_tip"][None])[0] + np.array([sign * 0.017, -0.012, -0.015]) * result.scale
            put(f"ala_{side}", *from_front(target, "beside the nose tip"))
    neck = (y < np.percentile(y, 3))
    most(z, neck, "neck_front", "front of the neck cut")
    required = ("upper_lip", "lower_lip", "chin", "nose_tip", "nasion", "gonion_L", "gonion_R")
    missing = [n for n in required if n not in result.position]
    if missing:
        raise ModelBuildError(
            "cannot place landmarks " + ", ".join(missing) + " (needs a jawOpen shape key that "
            "moves the chin and lower lip); add them as rig landmarks.")
    return result


def _surface_point(vertices, triangles, frame, target, axis):
    """(nearest skin vertex, exact point) where a ray from outside, through `target` (frame
    coords), first meets the skin travelling against `axis`; the nearest vertex if it misses."""
    world_target = frame.world(target[None])[0]
    _, triangle, weights = first_ray_hits(vertices, triangles, (world_target + axis)[None], -axis)
    if triangle[0] < 0:
        nearest = int(np.argmin(np.linalg.norm(vertices - world_target, axis=1)))
        return nearest, vertices[nearest]
    corners = triangles[triangle[0]]
    return int(corners[np.argmax(weights[0])]), weights[0] @ vertices[corners]
