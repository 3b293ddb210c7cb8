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
* everything else on the skull (nose bridge, orbital rims, maxilla) and the rest of the
  mandible: pinned, so the jaw drives the lower face.
"""
from __future__ import annotations

import numpy as np

from .tissue import JAW

PIN, SLIDE = 0, 1
LIP_GLIDE_RADIUS = 0.020     # m, for a head of landmark scale 1


def bone_surface_nodes(nodes, faces, face_is_bone):
    """Nodes on bone faces and their bone normals (pointing from bone into tissue)."""
    bone_faces = faces[face_is_bone]
    normal = np.cross(nodes[bone_faces[:, 1]] - nodes[bone_faces[:, 0]],
                      nodes[bone_faces[:, 2]] - nodes[bone_faces[:, 0]])
    accumulated = np.zeros_like(nodes)
    for k in range(3):
        np.add.at(accumulated, bone_faces[:, k], -normal)     # outward of tissue = into bone
    attached = np.unique(bone_faces)
    bone_normal = accumulated[attached]
    bone_normal /= np.maximum(np.linalg.norm(bone_normal, axis=1, keepdims=True), 1e-300)
    return attached, bone_normal


def split_pin_slide(positions, bone_label, landmarks, condyles):
    """PIN or SLIDE per attached node, by the documented default regions."""
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
    slide = ((forehead_scalp | zygoma | neck | behind_ears) & (bone_label != JAW)) | lip_glide
    return np.where(slide, SLIDE, PIN).astype(np.int8)
