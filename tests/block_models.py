"""Test-only: complete model dicts (docs/model-format.md) for a single tet, a cube or a block.

`block_model(nodes, tets, ...)` turns any positively oriented tet mesh into a dict that
`solver.model_file.validate_model` accepts and `FaceSimulator` runs: masses at 1000 kg/m³,
one muscle (`"block_muscle"`) whose fraction and frame are given by the caller, the pins and
sliding nodes the caller asks for (on the skull, bone label 0), and the mesh boundary as the
skin, each skin vertex embedded in a tet it is a node of (one-hot barycentric weights).

Frames: the head frame is the identity (rows left = +x, up = +y, forward = +z), so gravity
pulls along −y; the jaw frame sits at the midpoint of two "condyles" placed beside the block.
Nothing here is a face: there are no landmarks, bone surfaces or teeth.

`single_tet(edge)` is one right-corner tet; `bcc_block(size, spacing)` a block meshed with the
project's own BCC lattice (`solver.model_builder.tetmesh.bcc_lattice`), e.g. a cube of 2×2×2
lattice cells (the lattice needs at least two cells along each axis to have tets).
"""
from __future__ import annotations

import json

import numpy as np

from solver.model_builder.tetmesh import bcc_lattice, boundary_faces, signed_volumes
from solver.model_file import FORMAT_VERSION, validate_model

TISSUE_DENSITY = 1000.0          # kg/m³, as the model builder
BLOCK_MUSCLE = "block_muscle"


def single_tet(edge: float = 0.01):
    """Nodes (4,3) and tets (1,4) of the right-corner tet with legs `edge` along x, y, z."""
    nodes = edge * np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    return nodes, np.array([[0, 1, 2, 3]], dtype=np.int64)


def bcc_block(size=(0.02, 0.02, 0.02), spacing: float = 0.01, origin=(0.0, 0.0, 0.0)):
    """Nodes and positively oriented tets of a BCC lattice filling [origin, origin + size]."""
    lower = np.asarray(origin, dtype=np.float64)
    upper = lower + np.asarray(size, dtype=np.float64)
    nodes, tets = bcc_lattice(lower, upper, spacing)
    used = np.unique(tets)                         # the lattice has no unused nodes, but be safe
    remap = np.full(len(nodes), -1, dtype=np.int64)
    remap[used] = np.arange(len(used))
    return nodes[used], remap[tets].astype(np.int64)


def _per_tet(value, count, name):
    array = np.broadcast_to(np.asarray(value, dtype=np.float64), (count,)).copy()
    if np.any(array < 0.0) or np.any(array > 1.0):
        raise ValueError(f"{name} must lie in [0, 1]")
    return array


def block_model(nodes, tets, *, muscle_fraction=0.0, muscle_direction=None,
                pin_nodes=(), slide_nodes=(), slide_normals=None) -> dict:
    """A complete model dict for the tet mesh (nodes (N,3) m, tets (M,4) positively oriented).

    muscle_fraction: scalar or (M,) share of each tet in the one muscle "block_muscle"; the
        rest of the tet is passive (passive_fraction = 1 − muscle_fraction). 0 = all passive,
        1 = fully active.
    muscle_direction: (3,3) or (M,3,3) rotation whose first column is the fibre (default I:
        fibres along x).
    pin_nodes: nodes pinned to the skull (they follow the head transform).
    slide_nodes, slide_normals: nodes sliding on the skull's tangent plane with these normals.
    """
    nodes = np.ascontiguousarray(nodes, dtype=np.float64)
    tets = np.ascontiguousarray(tets, dtype=np.int64)
    volumes = signed_volumes(nodes, tets)
    if np.any(volumes <= 0.0):
        raise ValueError("tets must be positively oriented")
    tet_count, node_count = len(tets), len(nodes)
    muscle = _per_tet(muscle_fraction, tet_count, "muscle_fraction")
    direction = np.eye(3) if muscle_direction is None else np.asarray(muscle_direction, dtype=np.float64)
    direction = np.broadcast_to(direction, (tet_count, 3, 3)).copy()
    node_mass = np.bincount(tets.ravel(), np.repeat(TISSUE_DENSITY * volumes / 4.0, 4), minlength=node_count)

    pin_nodes = np.asarray(pin_nodes, dtype=np.int64).reshape(-1)
    slide_nodes = np.asarray(slide_nodes, dtype=np.int64).reshape(-1)
    normals = (np.zeros((0, 3)) if slide_normals is None
               else np.asarray(slide_normals, dtype=np.float64).reshape(-1, 3))
    normals = normals / np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-300)

    # The boundary is the skin: each boundary node a skin vertex, embedded in a tet it belongs to.
    faces, _ = boundary_faces(tets)
    skin_nodes = np.unique(faces)
    skin_index = np.full(node_count, -1, dtype=np.int64)
    skin_index[skin_nodes] = np.arange(len(skin_nodes))
    owner_tet = np.full(node_count, -1, dtype=np.int64)
    owner_corner = np.zeros(node_count, dtype=np.int64)
    for corner in range(4):          # any tet will do; the last one written wins
        owner_tet[tets[:, corner]] = np.arange(tet_count)
        owner_corner[tets[:, corner]] = corner
    weights = np.zeros((len(skin_nodes), 4))
    weights[np.arange(len(skin_nodes)), owner_corner[skin_nodes]] = 1.0

    low, high = nodes.min(axis=0), nodes.max(axis=0)
    centre = 0.5 * (low + high)
    # Condyles beside the block along the left axis (x), at its centre height and depth.
    half_width = 0.5 * (high[0] - low[0]) + 0.01
    condyles = np.array([centre + [half_width, 0.0, 0.0], centre - [half_width, 0.0, 0.0]])
    jaw_frame = np.eye(4)
    jaw_frame[:3, 3] = condyles.mean(axis=0)

    model = {
        "format_version": np.int64(FORMAT_VERSION),
        "rest_positions": nodes,
        "tets": tets,
        "tet_rest_volume": volumes,
        "node_mass": node_mass,
        "muscle_names": np.array([BLOCK_MUSCLE]),
        "muscle_fraction": muscle[:, None].astype(np.float32),
        "passive_fraction": (1.0 - muscle).astype(np.float32),
        "muscle_direction": direction,
        "bone_names": np.array(["skull", "jaw"]),
        "pin_nodes": pin_nodes,
        "pin_bone": np.zeros(len(pin_nodes), dtype=np.int64),
        "slide_nodes": slide_nodes,
        "slide_bone": np.zeros(len(slide_nodes), dtype=np.int64),
        "slide_normals": normals,
        "condyles": condyles,
        "jaw_frame": jaw_frame,
        "head_frame": np.eye(3),
        "head_origin": centre,
        "skin_vertices": nodes[skin_nodes].copy(),
        "skin_triangles": skin_index[faces],
        "skin_embedding_tet": owner_tet[skin_nodes],
        "skin_embedding_weights": weights,
        "bone_surface_vertices": np.zeros((0, 3)),
        "bone_surface_triangles": np.zeros((0, 3), dtype=np.int64),
        "bone_surface_label": np.zeros(0, dtype=np.int8),
        "landmark_names": np.zeros(0, dtype="<U1"),
        "landmark_positions": np.zeros((0, 3)),
        "build_info": np.array(json.dumps({"source": "tests/block_models.py", "tet_count": tet_count,
                                           "node_count": node_count})),
    }
    validate_model(model)
    return model


def skin_node_indices(model) -> np.ndarray:
    """The tet node each skin vertex of a `block_model` sits on (its weights are one-hot)."""
    corner = np.argmax(model["skin_embedding_weights"], axis=1)
    return model["tets"][model["skin_embedding_tet"], corner]


def tet_volumes(model, positions) -> np.ndarray:
    """Signed volume (M,) of every tet of `model` at node positions (N,3) or (3N,)."""
    return signed_volumes(np.asarray(positions, dtype=np.float64).reshape(-1, 3), model["tets"])
