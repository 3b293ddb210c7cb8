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
must stay simulated).

Everything here is in face units (positions divided by the face height, scale.py), so the
thresholds hold for any face size.
"""
from __future__ import annotations


import numpy as np
from numba import njit, prange

from solver.geometry.bvh import TriangleBVH
from solver.geometry.mesh_ops import as_query_points, as_triangle_mesh, vertex_normals

# Depth never falls below this (face units, ~0.5 mm on a 25 cm face): a vertex no key pushes in
# still gives a little, so contact there is not perfectly rigid.
MIN_DEPTH = 0.002
# A thin feature is thinner than this (face units; 22 mm on ICT's 32 cm face height) and pushed in
# by the keys less than THIN_MAX_KEY_DEPTH (2 mm on ICT): the ears and the nose, which "show minimal
# normal-direction deformation" (§4.4). Measured on ICT at 4k: nose tip 0.045-0.065, ear flap
# 0.015-0.04, lips 0.03-0.04 but pushed in 0.011-0.016 by the keys, nose wings 0.02-0.05 but
# pushed in by noseSneer, cheeks 0.10-0.3, forehead 0.55 (the whole head).
THIN_THICKNESS = 0.07
THIN_MAX_KEY_DEPTH = 0.006
# A key is jaw-intensive when its motion field (all deltas as one vector) has at least this cosine
# with the jaw opening's: then more than half its motion (cos² ≥ 0.5) is the jaw opening.
JAW_SIMILARITY = 0.7
JAW_NAME_PREFIXES = ("jaw", "mouthClose")
JAW_OPENING_NAMES = ("jawOpen", "JawOpen", "jaw_open", "mouthOpen")
# Eyelid support: a vertex a blink key moves by this share of that key's largest motion.
EYELID_SHARE = 0.3
_BLINK_KEYS = ("eyeBlink_L", "eyeBlink_R")
_OTHER_LID_KEYS = ("eyeWide_L", "eyeWide_R", "eyeSquint_L", "eyeSquint_R")

# Shape diameter (Shapira et al. 2008): one ray along the negative normal and rings of rays at
# these angles from it; the estimate is the median of the hits, misses counting as infinitely thick.
_CONE_ANGLES_DEG = (20.0, 40.0)
_RAYS_PER_RING = 6
# Rays start this far (face units) inside the surface so they do not hit their own triangles.
_RAY_START = 1e-5
# Rays through a shared edge or corner (symmetric meshes) must not slip between its triangles.
_BARYCENTRIC_SLACK = 1e-9


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
    bvh = TriangleBVH(vertices, triangles)
    lengths = np.full(len(origins), np.inf)
    _first_hits(origins, np.ascontiguousarray(directions.reshape(-1, 3)), bvh.corners, bvh.node_first_child,
                bvh.node_start, bvh.node_stop, bvh.node_lower, bvh.node_upper, bvh.traversal_stack_size, lengths)
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


@njit(cache=True)
def _ray_box(ox, oy, oz, ix, iy, iz, lower, upper, node, best):
    """Entry distance of the ray into a node's box, or inf when it misses or enters beyond `best`."""
    near, far = 0.0, best
    for axis in range(3):
        o = ox if axis == 0 else (oy if axis == 1 else oz)
        inv = ix if axis == 0 else (iy if axis == 1 else iz)
        t0 = (lower[node, axis] - o) * inv
        t1 = (upper[node, axis] - o) * inv
        if t0 > t1:
            t0, t1 = t1, t0
        if t0 > near:
            near = t0
        if t1 < far:
            far = t1
        if near > far:
            return np.inf
    return near


@njit(cache=True, parallel=True)
def _first_hits(origins, directions, corners, first_child, node_start, node_stop, lower, upper, stack_size, lengths):
    """lengths[i] = distance along ray i to the first triangle it meets (Möller–Trumbore), BVH-culled."""
    for ray in prange(origins.shape[0]):
        ox, oy, oz = origins[ray, 0], origins[ray, 1], origins[ray, 2]
        dx, dy, dz = directions[ray, 0], directions[ray, 1], directions[ray, 2]
        ix = 1.0 / dx if dx != 0.0 else 1e300
        iy = 1.0 / dy if dy != 0.0 else 1e300
        iz = 1.0 / dz if dz != 0.0 else 1e300
        best = np.inf
        stack = np.empty(stack_size, np.int64)
        top = 0
        if first_child.shape[0] > 0:
            stack[0] = 0
            top = 1
        while top > 0:
            top -= 1
            node = stack[top]
            if _ray_box(ox, oy, oz, ix, iy, iz, lower, upper, node, best) == np.inf:
                continue
            child = first_child[node]
            if child >= 0:
                stack[top] = child
                stack[top + 1] = child + 1
                top += 2
                continue
            for slot in range(node_start[node], node_stop[node]):
                ax, ay, az = corners[slot, 0, 0], corners[slot, 0, 1], corners[slot, 0, 2]
                e1x, e1y, e1z = corners[slot, 1, 0] - ax, corners[slot, 1, 1] - ay, corners[slot, 1, 2] - az
                e2x, e2y, e2z = corners[slot, 2, 0] - ax, corners[slot, 2, 1] - ay, corners[slot, 2, 2] - az
                px, py, pz = dy * e2z - dz * e2y, dz * e2x - dx * e2z, dx * e2y - dy * e2x
                det = e1x * px + e1y * py + e1z * pz
                if abs(det) < 1e-300:
                    continue
                inv = 1.0 / det
                sx, sy, sz = ox - ax, oy - ay, oz - az
                u = (sx * px + sy * py + sz * pz) * inv
                if u < -_BARYCENTRIC_SLACK or u > 1.0 + _BARYCENTRIC_SLACK:
                    continue
                qx, qy, qz = sy * e1z - sz * e1y, sz * e1x - sx * e1z, sx * e1y - sy * e1x
                v = (dx * qx + dy * qy + dz * qz) * inv
                if v < -_BARYCENTRIC_SLACK or u + v > 1.0 + _BARYCENTRIC_SLACK:
                    continue
                t = (e2x * qx + e2y * qy + e2z * qz) * inv
                if t > 0.0 and t < best:
                    best = t
        lengths[ray] = best


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
    return lids


def _grow(selected: np.ndarray, triangles: np.ndarray, count: int) -> np.ndarray:
    """The selection and every vertex sharing a triangle with it (one ring)."""
    touching = selected[triangles].any(axis=1)
    grown = selected.copy()
    grown[triangles[touching].ravel()] = True
    return grown
