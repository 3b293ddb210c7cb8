"""How deep the shell may be pushed, and which vertices it does not simulate (paper 001 §4.4).

Maximum depth. A coarse vertex may be pushed against its rest normal by at most δ_i: the
largest displacement along the negative rest normal that any shape key makes there (the keys'
coarse deltas), floored at ``MIN_DEPTH``. Fleshy regions that the keys push in (cheeks, lips)
get deep limits, the forehead over bone a shallow one. Jaw-intensive keys are left out, since
opening the jaw would soften the whole mandible region (`jaw_intensive_keys` says how they are
recognised). Thin features (ears, the nose), which the keys barely move along their normals, are
found by a shape-diameter estimate (`shape_diameter`: rays cast inward in a cone round the
negative normal against the rig's own skin, where ears and nostrils are resolved) together with
that small key depth, and get the fixed δ_thin of Table 4 — deeper than the keys would give, so
an ear or a nose tip can be pressed flat. The lips are as thin as the nose tip by the shape
diameter (the mouth is hollow behind them) but the keys push them in far, which tells them apart.

Eyelids. The shell prescribes them instead of simulating them (§4.4): `eyelid_vertices` are
the coarse vertices eyeBlink_L/R move by a good share of their largest motion, plus those that
eyeWide/eyeSquint move likewise within a ring of them (eyeSquint also lifts the cheek, which
must stay simulated). Where the eyes are holes in the mesh, only lid vertices within a few rings
of those holes' rims are kept.

Everything here is in face units (positions divided by the face height, scale.py), so the
thresholds hold for any face size.
"""
from __future__ import annotations

import numpy as np

from solver.geometry.mesh_ops import as_query_points, as_triangle_mesh, vertex_normals
from solver.geometry.rays import first_ray_hits

from .remesh import boundary_loops

# Depth never falls below this (face units, ~0.5 mm on a 25 cm face): a vertex no key pushes in
# still gives a little, so contact there is not perfectly rigid.
MIN_DEPTH = 0.002
# A thin feature is thinner than this (face units; 18 mm on ICT's 32 cm face height) and pushed in
# by the keys less than THIN_MAX_KEY_DEPTH (2 mm on ICT): the ears and the nose, which "show minimal
# normal-direction deformation" (§4.4). Measured on ICT at 8k: ear 0.026-0.041, nose tip
# 0.042-0.053, nose wings about the same; lips 0.036-0.046 but pushed in 0.011-0.016 by the keys;
# cheeks by the mouth 0.04-0.17 (median 0.1), forehead 0.4 (the whole head).
THIN_THICKNESS = 0.055
THIN_MAX_KEY_DEPTH = 0.006
# A key is jaw-intensive when its motion field (all deltas as one vector) has at least this cosine
# with the jaw opening's: then more than half its motion (cos² ≥ 0.5) is the jaw opening.
JAW_SIMILARITY = 0.7
JAW_NAME_PREFIXES = ("jaw", "mouthClose")
JAW_OPENING_NAMES = ("jawOpen", "JawOpen", "jaw_open", "mouthOpen")
# Eyelid support: a vertex a blink key moves by this share of that key's largest motion.
EYELID_SHARE = 0.3
_BLINK_KEYS = ("eyeBlink_L", "eyeBlink_R")
EYE_HOLE_RINGS = 3
_OTHER_LID_KEYS = ("eyeWide_L", "eyeWide_R", "eyeSquint_L", "eyeSquint_R")

# Shape diameter (Shapira et al. 2008): one ray along the negative normal and rings of rays at
# these angles from it; the estimate is the median of the hits, misses counting as infinitely thick.
# The wide cone is what tells a protruding feature from flesh over a cavity: its slanted rays
# leave a nose tip through its sides within ~0.05, but run on inside a cheek (0.1 and more).
_CONE_ANGLES_DEG = (45.0, 70.0)
_RAYS_PER_RING = 6
# Rays start this far (face units) inside the surface so they do not hit their own triangles.
_RAY_START = 1e-5


def jaw_intensive_keys(shape_names, coarse_deltas) -> np.ndarray:
    """(K,) bool: keys named jaw* or mouthClose*, and keys whose motion (all vertices' deltas as
    one vector) points the way of the jaw opening's, cosine ≥ JAW_SIMILARITY. On ICT that adds
    none: mouthLowerDown_L/R, the nearest, have 0.60 and stay in (they move the lip, not the jaw);
    every other key is below 0.1."""
    names = [str(name) for name in shape_names]
    deltas = np.asarray(coarse_deltas, dtype=np.float64)
    if deltas.ndim != 3 or len(deltas) != len(names):
        raise ValueError(f"coarse_deltas must be (K, n, 3) with K = {len(names)} names, got {deltas.shape}")
    jaw = np.array([name.startswith(JAW_NAME_PREFIXES) for name in names], dtype=bool)
    opening = [i for i, name in enumerate(names) if name in JAW_OPENING_NAMES]
    if opening:
        reference = deltas[opening[0]].ravel()
        flat = deltas.reshape(len(deltas), -1)
        norms = np.linalg.norm(flat, axis=1) * np.linalg.norm(reference)
        similarity = np.where(norms > 0, flat @ reference / np.where(norms > 0, norms, 1.0), 0.0)
        jaw |= similarity >= JAW_SIMILARITY
    return jaw


def key_push_depth(coarse_rest, coarse_triangles, coarse_deltas, include=None) -> np.ndarray:
    """(n,) the largest displacement along the negative rest vertex normal over the included keys."""
    rest, triangles = as_triangle_mesh(coarse_rest, coarse_triangles)
    deltas = np.asarray(coarse_deltas, dtype=np.float64)
    if deltas.ndim != 3 or deltas.shape[1:] != rest.shape:
        raise ValueError(f"coarse_deltas must be (K, {len(rest)}, 3), got {deltas.shape}")
    include = np.ones(len(deltas), bool) if include is None else np.asarray(include, dtype=bool)
    normals = vertex_normals(rest, triangles)
    inward = -np.einsum("kij,ij->ki", deltas[include], normals)
    return np.maximum(inward.max(axis=0), 0.0) if len(inward) else np.zeros(len(rest))


def max_depth(coarse_rest, coarse_triangles, coarse_deltas, shape_names, fine_vertices, fine_triangles,
              thin_depth: float = 0.05, thin_thickness: float = THIN_THICKNESS,
              min_depth: float = MIN_DEPTH) -> tuple[np.ndarray, np.ndarray]:
    """(δ (n,), thin (n,) bool) in face units; `fine_*` are the rig's skin in face units (the shape
    diameter is measured on it, where ears and nostrils are resolved). `thin_depth` is δ_thin."""
    rest, triangles = as_triangle_mesh(coarse_rest, coarse_triangles)
    depth = np.maximum(key_push_depth(rest, triangles, coarse_deltas,
                                      ~jaw_intensive_keys(shape_names, coarse_deltas)), min_depth)
    thickness = shape_diameter(rest, vertex_normals(rest, triangles), fine_vertices, fine_triangles)
    thin = (thickness < thin_thickness) & (depth < THIN_MAX_KEY_DEPTH)
    depth[thin] = thin_depth
    return depth, thin


def shape_diameter(points, normals, vertices, triangles) -> np.ndarray:
    """(p,) thickness of the solid under each surface point: the median length of rays cast into
    it in a cone round −normal until they meet the mesh again (inf where most rays escape)."""
    points = as_query_points(points)
    normals = np.asarray(normals, dtype=np.float64)
    if normals.shape != points.shape:
        raise ValueError(f"normals must be {points.shape}, got {normals.shape}")
    directions = _cone_directions(-normals)                                  # (p, r, 3)
    ray_count = directions.shape[1]
    origins = np.repeat(points, ray_count, axis=0) + _RAY_START * directions.reshape(-1, 3)
    lengths, _, _ = first_ray_hits(vertices, triangles, origins, directions.reshape(-1, 3))
    return np.median(lengths.reshape(len(points), ray_count), axis=1)


def _cone_directions(axis: np.ndarray) -> np.ndarray:
    """(p, r, 3) unit ray directions: the axis and rings round it at _CONE_ANGLES_DEG."""
    axis = axis / np.maximum(np.linalg.norm(axis, axis=1, keepdims=True), 1e-300)
    helper = np.where(np.abs(axis[:, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
    first = np.cross(axis, helper)
    first /= np.linalg.norm(first, axis=1, keepdims=True)
    second = np.cross(axis, first)
    rays = [axis]
    for angle in np.radians(_CONE_ANGLES_DEG):
        for turn in 2 * np.pi * np.arange(_RAYS_PER_RING) / _RAYS_PER_RING:
            side = np.cos(turn) * first + np.sin(turn) * second
            rays.append(np.cos(angle) * axis + np.sin(angle) * side)
    return np.stack(rays, axis=1)


def eyelid_vertices(coarse_triangles, coarse_deltas, shape_names, share: float = EYELID_SHARE) -> np.ndarray:
    """(n,) bool: the vertices the eyelid keys move (see the module's docstring). Without
    eyeBlink keys nothing is prescribed."""
    names = [str(name) for name in shape_names]
    deltas = np.asarray(coarse_deltas, dtype=np.float64)
    triangles = np.asarray(coarse_triangles, dtype=np.int64)
    count = deltas.shape[1]

    def moved(name):
        motion = np.linalg.norm(deltas[names.index(name)], axis=1)
        return motion >= share * motion.max() if motion.max() > 0 else np.zeros(count, bool)

    lids = np.zeros(count, bool)
    for name in _BLINK_KEYS:
        if name in names:
            lids |= moved(name)
    if not lids.any():
        return lids
    near = _grow(lids, triangles, count)
    for name in _OTHER_LID_KEYS:
        if name in names:
            lids |= moved(name) & near
    # Where the eyes are holes in the mesh, the lids are their rims: keep what lies within
    # EYE_HOLE_RINGS rings of a boundary loop the lids touch (the neck cut or a mouth slit do not).
    eye_holes = [loop for loop in boundary_loops(triangles, count) if lids[loop].any()]
    if eye_holes:
        rims = np.zeros(count, bool)
        rims[np.concatenate(eye_holes)] = True
        for _ in range(EYE_HOLE_RINGS):
            rims = _grow(rims, triangles, count)
        lids &= rims
    return lids


def _grow(selected: np.ndarray, triangles: np.ndarray, count: int) -> np.ndarray:
    """The selection and every vertex sharing a triangle with it (one ring)."""
    touching = selected[triangles].any(axis=1)
    grown = selected.copy()
    grown[triangles[touching].ravel()] = True
    return grown
