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
* the floor of the mouth has no bone to attach to: between the two halves of the mandible there
  are only the muscles of the mouth floor and the submandibular glands hung from the hyoid, and
  an estimated mandible stops at the mandible's lower border (tissue.under_mouth_floor); a
  supplied one (the demo head) does not reach there either;
* everything else on the skull (nose bridge, orbital rims, maxilla) and the rest of the
  mandible (chin, body and angles above that line): pinned, so the jaw drives the lower face.

The cheek lining and the mouth floor were found on ICT's jawOpen (its bones are estimated from
the skin): with the cheek lining pinned to the lower gums and the mouth floor pinned to the
estimated jaw, the lining at
the height of the bite was carried 21 mm down where the key moves it 7 mm, the submandibular
skin 13 mm back where it moves 5 mm back and 8 mm out, and the fit traded those against the
chin with a jaw opened 5.6° for the key's 14° (error mean / 95th / max 0.86 / 4.70 / 13.4 mm).
With both sliding: 12.2°, 0.67 / 2.98 / 10.9 mm; the floor then slid on the skull, which put
jaw-pinned and skull-sliding nodes in one tet at its edge and inverted tets there when the jaw
opened, so it became soft tissue instead (docs/model-builder.md §5).
"""
from __future__ import annotations

import numpy as np

from .tissue import JAW, jaw_angle

PIN, SLIDE = 0, 1
# |Σ n| / Σ |n| of the area-weighted normals of a node's bone faces below which they do not
# define a tangent plane (faces on opposite sides of a thin ridge cancel).
MIN_NORMAL_COHERENCE = 0.1
LIP_GLIDE_RADIUS = 0.020     # m, for a head of landmark scale 1
CHEEK_GLIDE_BAND = 0.015    # m above and below the mouth corners' height, for landmark scale 1


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


def split_pin_slide(positions, bone_label, landmarks, condyles):
    """(N,) PIN or SLIDE per attached node on the bone of its tissue label, by the documented regions."""
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
    cheek_glide = (np.abs(local[:, 1] - mouth_y) < CHEEK_GLIDE_BAND * s) & (local[:, 2] > jaw_angle(landmarks)[2])
    slide = ((forehead_scalp | zygoma | neck | behind_ears) & (bone_label != JAW)) | lip_glide | cheek_glide
    return np.where(slide, SLIDE, PIN).astype(np.int8)
