"""Pin and sliding bone constraints (paper 000 §4 "Bone attachments", Fig. 3f, Fig. 5).

Every tet node on a bone surface is attached to that bone, either pinned (moves rigidly
with it) or sliding (stays on the bone's tangent plane). Default split, by region of the
head frame — the regions where real soft tissue glides over bone slide:
* forehead and scalp (from just below the brows up, and everything behind the ears):
  slide — the brow raise of Fig. 5 moves the forehead skin over the cranium;
* the cheek over the zygoma, lateral of the eyes between the eye and mouth heights: slide;
* the neck core: slide;
* the lips over the teeth and gums, on both bones (within LIP_GLIDE_RADIUS of the upper or
  lower lip's midpoint): slide — lips are free tissue in front of the dental arches, attached
  to bone only at the fold of the gums; pinned there, ICT's upper lip was held 7–10 mm under
  its surface and mouthLeft missed by 2.7 mm at the 95th percentile (2.2 mm sliding);
* the lining of the cheeks over the teeth and gums (attached nodes within CHEEK_GLIDE_BAND of the
  mouth corners' height, in front of the jaw angles): slide — like the lips, the inside of the
  cheeks is free mucosa over the crowns, attached only at the folds above and below the gums;
* the floor of the mouth (nodes below the line from MOUTH_FLOOR_CHIN_DROP under the chin point
  to the jaw angles, and more than MOUTH_FLOOR_BEHIND_CHIN behind the chin point): jaw nodes
  there slide on the skull (the neck core) instead — between the two halves of the mandible
  there is no bone, only the muscles of the mouth floor and the submandibular glands hung from
  the hyoid, which the jaw drags but does not carry. An estimated mandible (ICT) reaches under
  the floor, a supplied one (the demo head) does not;
* everything else on the skull (nose bridge, orbital rims, maxilla) and the rest of the
  mandible (chin, body and angles above that line): pinned, so the jaw drives the lower face.

The last two were found on ICT's jawOpen (its bones are estimated from the skin): with the cheek
lining pinned to the lower gums and the mouth floor pinned to the estimated jaw, the lining at
the height of the bite was carried 21 mm down where the key moves it 7 mm, the submandibular
skin 13 mm back where it moves 5 mm back and 8 mm out, and the fit traded those against the
chin with a jaw opened 5.6° for the key's 14° (error mean / 95th / max 0.86 / 4.70 / 13.4 mm).
With both sliding: 12.2°, 0.67 / 2.98 / 10.9 mm (docs/inverse-physics.md).
"""
from __future__ import annotations

import numpy as np

from .tissue import JAW, SKULL

PIN, SLIDE = 0, 1
# |Σ n| / Σ |n| of the area-weighted normals of a node's bone faces below which they do not
# define a tangent plane (faces on opposite sides of a thin ridge cancel).
MIN_NORMAL_COHERENCE = 0.1
LIP_GLIDE_RADIUS = 0.020     # m, for a head of landmark scale 1
CHEEK_GLIDE_BAND = 0.015    # m above and below the mouth corners' height, for landmark scale 1
# The mandible's lower border, as a line in the head's midsagittal plane: from this far under
# the chin point (pogonion) back to the jaw angles (gonions); nodes more than the margin below
# it and more than MOUTH_FLOOR_BEHIND_CHIN behind the chin point lie under the mouth floor.
MOUTH_FLOOR_CHIN_DROP = 0.020
MOUTH_FLOOR_MARGIN = 0.005
MOUTH_FLOOR_BEHIND_CHIN = 0.020


def bone_surface_nodes(nodes, faces, face_is_bone):
    """Nodes on bone faces and their bone normals (pointing from bone into tissue); a zero
    normal where the bone faces around a node point every way (see MIN_NORMAL_COHERENCE)."""
    bone_faces = faces[face_is_bone]
    normal = np.cross(nodes[bone_faces[:, 1]] - nodes[bone_faces[:, 0]],
                      nodes[bone_faces[:, 2]] - nodes[bone_faces[:, 0]])
    accumulated = np.zeros_like(nodes)
    area = np.zeros(len(nodes))
    for k in range(3):
        np.add.at(accumulated, bone_faces[:, k], -normal)     # outward of tissue = into bone
        np.add.at(area, bone_faces[:, k], np.linalg.norm(normal, axis=1))
    attached = np.unique(bone_faces)
    bone_normal = accumulated[attached]
    length = np.linalg.norm(bone_normal, axis=1, keepdims=True)
    coherent = length[:, 0] >= MIN_NORMAL_COHERENCE * area[attached]
    bone_normal = np.where(coherent[:, None], bone_normal / np.maximum(length, 1e-300), 0.0)
    return attached, bone_normal


def pin_where_no_tangent_plane(kind, bone_normal):
    """A node without a bone normal (a knife edge of bone, e.g. a gum ridge between teeth
    faces on both sides) has no plane to slide on: it is pinned."""
    return np.where(np.any(bone_normal != 0.0, axis=1), kind, PIN).astype(kind.dtype)


def bone_faces_follow_their_nodes(faces, face_label, attached, node_bone):
    """(F,) the bone label of each bone face (F,3), changed to the bone its three nodes are
    attached to where they all agree on another one: under the mouth floor the estimated jaw's
    faces carry nodes that slide on the skull, and the model's ``bone_surface_label`` (which
    moves the bone surface in pictures and gives the contact compression limit its bone) must
    say skull there too."""
    bone_of = np.full(int(max(faces.max(initial=-1), attached.max(initial=-1))) + 1, -1, dtype=np.int64)
    bone_of[attached] = node_bone
    corners = bone_of[faces]
    agreed = (corners[:, 0] >= 0) & (corners[:, 0] == corners[:, 1]) & (corners[:, 0] == corners[:, 2])
    return np.where(agreed, corners[:, 0], face_label).astype(np.asarray(face_label).dtype)


def split_pin_slide(positions, bone_label, landmarks, condyles):
    """(kind, bone) per attached node: PIN or SLIDE, and the bone it is attached to — the
    tissue's bone label, except under the mouth floor (skull) — by the documented regions."""
    frame = landmarks.frame
    local = frame.local(positions)
    s = landmarks.scale
    brow_y = np.mean([frame.local(landmarks[f"brow_inner_{k}"][None])[0, 1] for k in "LR"])
    eye = {k: frame.local(landmarks[f"eye_{k}"][None])[0] for k in "LR"}
    mouth_y = 0.0                                  # the frame's origin is between the mouth corners
    menton_y = frame.local(landmarks["menton"][None])[0, 1]
    eye_x = np.mean([abs(eye["L"][0]), abs(eye["R"][0])])
    forehead_scalp = local[:, 1] > brow_y - 0.005 * s
    zygoma = (np.abs(local[:, 0]) > eye_x + 0.008 * s) & (local[:, 1] < eye["L"][1]) & (local[:, 1] > mouth_y + 0.01 * s)
    neck = local[:, 1] < menton_y - 0.01 * s
    behind_ears = local[:, 2] < frame.local(condyles).mean(0)[2] - 0.01 * s
    lip_glide = np.zeros(len(positions), dtype=bool)
    for lip in ("upper_lip", "lower_lip"):
        lip_glide |= np.linalg.norm(positions - landmarks[lip], axis=1) < LIP_GLIDE_RADIUS * s
    cheek_glide = (np.abs(local[:, 1] - mouth_y) < CHEEK_GLIDE_BAND * s) & (local[:, 2] > _jaw_angle(landmarks)[2])
    mouth_floor = under_mouth_floor(local, landmarks) & (bone_label == JAW)
    slide = ((forehead_scalp | zygoma | neck | behind_ears) & (bone_label != JAW)) | lip_glide | cheek_glide \
        | mouth_floor
    bone = np.where(mouth_floor, SKULL, bone_label).astype(np.asarray(bone_label).dtype)
    return np.where(slide, SLIDE, PIN).astype(np.int8), bone


def under_mouth_floor(local, landmarks) -> np.ndarray:
    """(N,) bool for head-frame points (N,3): below the mandible's lower border and behind the
    chin (see the module docstring)."""
    frame, s = landmarks.frame, landmarks.scale
    chin = frame.local(landmarks["chin"][None])[0]
    angle = _jaw_angle(landmarks)
    border_front = np.array([chin[1] - MOUTH_FLOOR_CHIN_DROP * s, chin[2]])          # (up, forward)
    slope = (angle[1] - border_front[0]) / min(angle[2] - border_front[1], -1e-6)
    border_up = border_front[0] + slope * (local[:, 2] - border_front[1])
    return (local[:, 1] < border_up - MOUTH_FLOOR_MARGIN * s) & (local[:, 2] < chin[2] - MOUTH_FLOOR_BEHIND_CHIN * s)


def _jaw_angle(landmarks) -> np.ndarray:
    """Head-frame position of the jaw angles: the mean of the two gonions (x near 0)."""
    return np.mean([landmarks.frame.local(landmarks[f"gonion_{k}"][None])[0] for k in "LR"], axis=0)
