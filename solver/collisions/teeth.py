"""Teeth collision proxies: coarse closed shells around the upper and lower teeth.

Paper 000 collides the lips with hand-made proxies of the teeth, because the teeth meshes
are detailed (and often several open or overlapping pieces). Here the proxy is found
automatically:

1. The padded teeth volume {inside the teeth, or within `pad` of their surface} is sampled
   on the project's BCC lattice (``tetmesh.bcc_lattice``) at `spacing` (2.5 mm by default):
   signed value d − pad outside the teeth, −(d + pad) inside, with d the unsigned distance
   and inside meaning winding number > ½ (so open or overlapping teeth meshes work too).
2. Marching tetrahedra extracts the zero level: one vertex per lattice edge that changes
   sign, one or two triangles per cut tet, each turned so its normal runs from the inside
   corners to the outside ones. Because every surface vertex is shared through its lattice
   edge, the result is a closed, consistently oriented 2-manifold by construction (no node
   value is exactly zero). Each vertex is placed on the field's zero along its edge (a few
   regula-falsi steps), with the edge parameter clamped to [0.05, 0.95], which keeps every
   triangle non-degenerate.
3. Pieces with negative volume are cavities (holes between teeth enclosed by the padding);
   they are dropped, so the proxy is solid.

Every teeth vertex is checked to be inside the result; if one is not (a very thin spike),
the padding grows and the proxy is rebuilt.

4. Marching tetrahedra makes many small triangles (10–20k for a full set of teeth at
   2.5 mm), so the surface is then decimated by shortest-edge collapses (``decimate``:
   link condition, bounded edge length and normal change keep it a closed, oriented
   manifold) to about DECIMATE_TARGET_TRIANGLES; vertices that sank into the padding are
   pushed back out to it, and the faces nearest any teeth vertex left uncovered (sharp
   cusps, where the padded surface curves with radius `pad` and coarse faces cut it as
   chords) are moved out along the vertex normals until every teeth vertex is inside
   (``_cover_teeth``). If that fails (it would flip a face), the fine proxy is kept.

Proxies are cached by the content of the teeth arrays, so scenes built repeatedly for the
same model (one per animation job) do not mesh the teeth again.

Rigs without teeth get an arch swept behind the lips from the landmarks
(``landmark_arch_proxy``).

The labial projection region (``labial_region``) is described in that function.
"""
from __future__ import annotations

import hashlib
import heapq
import math
from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..geometry import ClosestPointTree, WindingNumberTree, triangle_normals_areas, vertex_normals
from ..geometry.rays import first_ray_hits
from ..model_builder.tetmesh import bcc_lattice
from ..model_file import model_head_axes, model_landmarks
from .contacts import BonePose, ContactPlanes
from .detection import (ClearanceGrid, SurfaceQuery, apply_transform, candidates_in_box, closed_penetrations,
                        inside_closed, rigid_inverse, rotate, transformed_box, unit_rows)

DEFAULT_PAD = 1.0e-3
DEFAULT_SPACING = 2.5e-3
# A surface vertex on a cut lattice edge stays this fraction of the edge away from its ends.
EDGE_PARAMETER_CLAMP = 0.05
# Regula-falsi steps that move each surface vertex onto the field's zero along its edge.
ROOT_STEPS = 3
PAD_GROWTH = 1.5
PAD_ATTEMPTS = 4
# Decimation of the marching-tetrahedra surface: at most this many triangles per proxy, no
# edge longer than DECIMATE_MAX_EDGE lattice spacings, no face turned by more than ~35°.
DECIMATE_TARGET_TRIANGLES = 4000
DECIMATE_MAX_EDGE = 2.0
DECIMATE_MIN_NORMAL_COSINE = 0.82
# Teeth vertices a coarse proxy leaves uncovered push its nearest faces out by their
# distance plus this fraction of the padding, for up to COVER_ROUNDS rounds.
COVER_MARGIN = 0.25
COVER_ROUNDS = 4
# Cell size of the grid that rejects skin points well outside a proxy without a tree walk
# (detection.ClearanceGrid, out to its CLEARANCE_REACH).
CLEARANCE_CELL = 2.0e-3
# A skin vertex that moves less than this relative to a proxy cannot have passed through it
# (the padded proxies are several millimetres thick): ``TeethCollider.crossings`` skips it.
MIN_CROSSING_MOVE = 5e-4

# Labial region: outward normal within ~70° of the arch's outward (radial) direction.
LABIAL_MIN_COSINE = 0.35
# Biting edge: triangles facing the other jaw (normal within 60° of it) next to the labial region.
BITING_MIN_COSINE = 0.5
BITING_RINGS = 1

# Landmark arch (rigs without teeth), in units of the mouth width w (corner to corner):
# labial surface ARCH_BEHIND_LIPS behind the lip landmarks, half-width ARCH_HALF_WIDTH at
# the back, depth ARCH_DEPTH from front to back, crowns ARCH_CROWN_HEIGHT high and
# ARCH_THICKNESS thick. Typical adult values: w ≈ 50 mm, lips ≈ 12 mm thick, intermolar
# width ≈ 50 mm, arch depth ≈ 40 mm, crowns ≈ 10 mm high and 8 mm thick.
ARCH_BEHIND_LIPS = 0.25
ARCH_HALF_WIDTH = 0.55
ARCH_DEPTH = 0.85
ARCH_CROWN_HEIGHT = 0.2
ARCH_THICKNESS = 0.16


class TeethProxyError(ValueError):
    """The teeth proxy could not be built (no usable teeth geometry or landmarks)."""


@dataclass
class TeethProxy:
    """A closed proxy surface (rest pose, metres) and its labial projection region."""
    name: str
    vertices: np.ndarray          # (n,3)
    triangles: np.ndarray         # (t,3) outward oriented, closed, manifold
    region: np.ndarray            # (r,) indices of the labial projection-region triangles
    bone: str                     # "skull" or "jaw": which BonePose transform moves it
    source: str                   # "teeth mesh" or "landmark arch"

    def __post_init__(self):
        self.volume = SurfaceQuery(self.vertices, self.triangles)
        self.region_query = SurfaceQuery(self.vertices, self.triangles[self.region])
        self.in_region = np.zeros(len(self.triangles), bool)
        self.in_region[self.region] = True
        self.max_inner_depth = _deepest_inside(self.volume)
        self.clearance = ClearanceGrid(self.volume, CLEARANCE_CELL)

    @property
    def triangle_count(self) -> int:
        return len(self.triangles)

    def contains(self, points) -> np.ndarray:
        """(p,) bool: inside the proxy (rest pose)."""
        return inside_closed(self.volume, np.asarray(points, dtype=np.float64))[0]


def _deepest_inside(volume: SurfaceQuery, samples_per_axis: int = 48) -> float:
    """Upper bound on how far inside the closed surface a point can be (metres).

    The inside test only searches this far for the surface, so skin points well clear of
    the proxy are rejected after a few box tests. Grid samples miss the deepest point by at
    most half a grid diagonal, which is added.
    """
    lower, upper = volume.lower, volume.upper
    axes = [np.linspace(lower[k], upper[k], samples_per_axis) for k in range(3)]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    inside, hit = inside_closed(volume, grid)
    step = (upper - lower) / (samples_per_axis - 1)
    deepest = hit.distance[inside].max() if inside.any() else 0.0
    return float(deepest + np.linalg.norm(step))


def marching_tetrahedra(nodes, tets, values, value_of=None, root_steps=ROOT_STEPS):
    """Closed, outward-oriented triangle mesh of {values < 0} over a tet mesh (see module doc).

    With `value_of` (the field itself), each surface vertex is moved from the linear
    interpolation to the field's zero on its lattice edge by `root_steps` steps of
    regula falsi (bracket kept, so it never leaves the edge): the distance field bends
    near sharp teeth edges, where linear interpolation can land well inside the padding.
    Returns (vertices, triangles); the region must not reach the boundary of the tet mesh.
    """
    values = np.where(values == 0.0, 1e-30, values)
    inside = values < 0
    inside_count = inside[tets].sum(1)
    cut = (inside_count > 0) & (inside_count < 4)
    cut_tets, cut_count = tets[cut], inside_count[cut]
    # Corners ordered inside first; argsort is stable so the order is deterministic.
    order = np.argsort(~inside[cut_tets], axis=1, kind="stable")
    ordered = np.take_along_axis(cut_tets, order, axis=1)
    a, b, c, d = ordered.T
    edge_triples, owner = [], []
    one = cut_count == 1
    edge_triples.append(np.stack([np.stack([a, b], 1), np.stack([a, c], 1), np.stack([a, d], 1)], 1)[one])
    owner.append(np.flatnonzero(one))
    three = cut_count == 3
    edge_triples.append(np.stack([np.stack([a, d], 1), np.stack([b, d], 1), np.stack([c, d], 1)], 1)[three])
    owner.append(np.flatnonzero(three))
    two = cut_count == 2
    # Cyclic quad on the edges a-c, a-d, b-d, b-c (inside a, b; outside c, d), split in two.
    quad = np.stack([np.stack([a, c], 1), np.stack([a, d], 1), np.stack([b, d], 1), np.stack([b, c], 1)], 1)[two]
    edge_triples.append(quad[:, [0, 1, 2]])
    edge_triples.append(quad[:, [0, 2, 3]])
    owner += [np.flatnonzero(two)] * 2
    edge_triples = np.concatenate(edge_triples)          # (T,3,2) node pairs, inside node first
    owner = np.concatenate(owner)

    pairs = edge_triples.reshape(-1, 2)
    keys = np.sort(pairs, axis=1)
    unique_keys, vertex_of = np.unique(keys, axis=0, return_inverse=True)
    vertex_of = vertex_of.reshape(-1)
    first, second = unique_keys[:, 0], unique_keys[:, 1]
    parameter = values[first] / (values[first] - values[second])
    if value_of is not None:
        low, high = np.zeros(len(first)), np.ones(len(first))
        value_low, value_high = values[first], values[second]
        for _ in range(root_steps):
            value = value_of(nodes[first] + parameter[:, None] * (nodes[second] - nodes[first]))
            same_as_low = np.sign(value) == np.sign(value_low)
            low = np.where(same_as_low, parameter, low)
            value_low = np.where(same_as_low, value, value_low)
            high = np.where(same_as_low, high, parameter)
            value_high = np.where(same_as_low, value_high, value)
            span = value_low - value_high
            parameter = np.where(span != 0, low + (high - low) * value_low / np.where(span != 0, span, 1.0),
                                 0.5 * (low + high))
    parameter = np.clip(parameter, EDGE_PARAMETER_CLAMP, 1.0 - EDGE_PARAMETER_CLAMP)
    vertices = nodes[first] + parameter[:, None] * (nodes[second] - nodes[first])
    triangles = vertex_of.reshape(-1, 3)

    corners = vertices[triangles]
    normal = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    tet_corners = nodes[ordered[owner]]
    tet_inside = inside[ordered[owner]]
    inside_mean = (tet_corners * tet_inside[..., None]).sum(1) / tet_inside.sum(1, keepdims=True)
    outside_mean = (tet_corners * ~tet_inside[..., None]).sum(1) / (~tet_inside).sum(1, keepdims=True)
    flip = np.einsum("ij,ij->i", normal, outside_mean - inside_mean) < 0
    triangles[flip] = triangles[flip][:, ::-1]
    return vertices, triangles


def decimate(vertices, triangles, target_triangles, max_edge, min_normal_cosine=DECIMATE_MIN_NORMAL_COSINE):
    """Collapse the shortest edges of a closed manifold mesh to their midpoints until
    `target_triangles` remain, keeping it closed, manifold and consistently oriented.

    A collapse is skipped when it would break the manifold (link condition: the two ends
    share exactly the two opposite vertices; neither end has only three neighbours), make an
    edge longer than `max_edge`, or turn a surrounding triangle's normal by more than
    acos(min_normal_cosine), which keeps sharp teeth edges from being shaved off.
    Returns (vertices, triangles) compacted.
    """
    position = [list(map(float, v)) for v in vertices]
    corner = [list(map(int, t)) for t in triangles]
    alive = [True] * len(corner)
    around = [set() for _ in position]
    for index, (a, b, c) in enumerate(corner):
        around[a].add(index)
        around[b].add(index)
        around[c].add(index)
    removed = [False] * len(position)
    max_edge_squared = max_edge * max_edge

    def squared(a, b):
        pa, pb = position[a], position[b]
        return (pa[0] - pb[0]) ** 2 + (pa[1] - pb[1]) ** 2 + (pa[2] - pb[2]) ** 2

    def neighbours(vertex):
        found = set()
        for index in around[vertex]:
            found.update(corner[index])
        found.discard(vertex)
        return found

    def normal(points):
        (ax, ay, az), (bx, by, bz), (cx, cy, cz) = points
        ux, uy, uz, vx, vy, vz = bx - ax, by - ay, bz - az, cx - ax, cy - ay, cz - az
        return uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx

    heap = []
    for a, b, c in corner:
        for u, v in ((a, b), (b, c), (c, a)):
            if u < v:
                heap.append((squared(u, v), u, v))
    heapq.heapify(heap)
    count = len(corner)
    while heap and count > target_triangles:
        length, a, b = heapq.heappop(heap)
        if removed[a] or removed[b] or length != squared(a, b):
            continue
        shared = around[a] & around[b]
        if len(shared) != 2:
            continue
        ring_a, ring_b = neighbours(a), neighbours(b)
        if len(ring_a) <= 3 or len(ring_b) <= 3 or len(ring_a & ring_b) != 2:
            continue
        middle = [(position[a][k] + position[b][k]) / 2 for k in range(3)]
        if any((middle[0] - position[n][0]) ** 2 + (middle[1] - position[n][1]) ** 2
               + (middle[2] - position[n][2]) ** 2 > max_edge_squared for n in (ring_a | ring_b) - {a, b}):
            continue
        acceptable = True
        for index in (around[a] | around[b]) - shared:
            before = normal([position[v] for v in corner[index]])
            after = normal([middle if v in (a, b) else position[v] for v in corner[index]])
            dot = sum(x * y for x, y in zip(before, after))
            norms = math.sqrt(sum(x * x for x in before) * sum(x * x for x in after))
            if norms == 0.0 or dot < min_normal_cosine * norms:
                acceptable = False
                break
        if not acceptable:
            continue
        position[a] = middle
        for index in shared:
            alive[index] = False
            for v in corner[index]:
                around[v].discard(index)
        for index in around[b]:
            corner[index] = [a if v == b else v for v in corner[index]]
            around[a].add(index)
        around[b] = set()
        removed[b] = True
        count -= 2
        for n in neighbours(a):
            heapq.heappush(heap, (squared(a, n), min(a, n), max(a, n)))
    kept = np.array([t for t, live in zip(corner, alive) if live], dtype=np.int64)
    return compact_mesh(np.array(position), kept)


def solid_pieces(vertices, triangles):
    """Drop the connected pieces with negative enclosed volume (cavities); returns (vertices, triangles)."""
    count = len(vertices)
    rows = triangles[:, [0, 1, 2]].ravel()
    cols = triangles[:, [1, 2, 0]].ravel()
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(count, count))
    _, label = connected_components(graph, directed=False)
    corners = vertices[triangles]
    signed = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])) / 6.0
    piece = label[triangles[:, 0]]
    volume = np.bincount(piece, weights=signed, minlength=label.max() + 1)
    keep = volume[piece] > 0
    return compact_mesh(vertices, triangles[keep])


def compact_mesh(vertices, triangles):
    used = np.unique(triangles)
    remap = np.full(len(vertices), -1, np.int64)
    remap[used] = np.arange(len(used))
    return vertices[used], remap[triangles]


def mesh_field_volume(value_of, lower, upper, spacing):
    """Closed surface of {value_of(points) < 0} inside the box, by marching tetrahedra on a BCC lattice."""
    nodes, tets = bcc_lattice(np.asarray(lower, float), np.asarray(upper, float), spacing)
    vertices, triangles = marching_tetrahedra(nodes, tets, value_of(nodes), value_of)
    if len(triangles) == 0:
        raise TeethProxyError("the proxy volume is empty")
    return solid_pieces(vertices, triangles)


def padded_teeth_proxy(teeth_vertices, teeth_triangles, pad=DEFAULT_PAD, spacing=DEFAULT_SPACING):
    """(vertices, triangles, pad used) of a closed proxy containing every teeth vertex (module doc)."""
    teeth_vertices = np.asarray(teeth_vertices, dtype=np.float64)
    teeth_triangles = np.asarray(teeth_triangles, dtype=np.int64)
    if len(teeth_vertices) == 0 or len(teeth_triangles) == 0:
        raise TeethProxyError("the teeth mesh has no triangles")
    distance_tree = ClosestPointTree(teeth_vertices, teeth_triangles)
    winding_tree = WindingNumberTree.from_bvh(distance_tree.bvh)
    for _ in range(PAD_ATTEMPTS):
        reach = pad + 3.0 * spacing

        def value_of(points, pad=pad, reach=reach):
            distance = np.minimum(distance_tree.query(points, max_distance=reach).distance, reach)
            inside = winding_tree.query(points) > 0.5
            return np.where(inside, -(distance + pad), distance - pad)

        margin = pad + 2.0 * spacing
        vertices, triangles = mesh_field_volume(value_of, teeth_vertices.min(0) - margin,
                                                teeth_vertices.max(0) + margin, spacing)
        if inside_closed(SurfaceQuery(vertices, triangles), teeth_vertices)[0].all():
            coarse = _coarsened(vertices, triangles, teeth_vertices, distance_tree, winding_tree, pad, spacing)
            return (*(coarse or (vertices, triangles)), pad)
        pad *= PAD_GROWTH
    raise TeethProxyError(f"could not enclose every teeth vertex even with {pad * 1e3:.2f} mm of padding")


def _coarsened(vertices, triangles, teeth_vertices, distance_tree, winding_tree, pad, spacing):
    """The proxy decimated to about DECIMATE_TARGET_TRIANGLES, still closed and containing
    every teeth vertex, or None when that fails (the caller keeps the fine proxy)."""
    if len(triangles) <= DECIMATE_TARGET_TRIANGLES:
        return None
    coarse, coarse_triangles = decimate(vertices, triangles, DECIMATE_TARGET_TRIANGLES, DECIMATE_MAX_EDGE * spacing)
    coarse = _push_out_to_pad(coarse, coarse_triangles, distance_tree, winding_tree, pad)
    coarse = _cover_teeth(coarse, coarse_triangles, teeth_vertices, pad)
    return None if coarse is None else (coarse, coarse_triangles)


def _cover_teeth(vertices, triangles, teeth_vertices, pad, rounds=COVER_ROUNDS):
    """Vertices moved out along their normals until every teeth vertex is inside, or None.

    The padded surface has a curvature radius of `pad` at sharp cusps, which coarse faces
    cut as chords; the faces nearest each uncovered teeth vertex are moved out by its
    distance plus COVER_MARGIN × pad. None if that would flip a face."""
    for _ in range(rounds):
        inside, hit = inside_closed(SurfaceQuery(vertices, triangles), teeth_vertices)
        if inside.all():
            return vertices
        outside = ~inside
        push = np.zeros(len(vertices))
        np.maximum.at(push, triangles[hit.triangle[outside]].ravel(),
                      np.repeat(hit.distance[outside] + COVER_MARGIN * pad, 3))
        moved = vertices + push[:, None] * vertex_normals(vertices, triangles)
        if _flipped(vertices, moved, triangles).any():
            return None
        vertices = moved
    return vertices if inside_closed(SurfaceQuery(vertices, triangles), teeth_vertices)[0].all() else None


def _flipped(before, after, triangles):
    """(t,) bool: triangles whose normal turned by more than 90° between two vertex positions."""
    normal = lambda v: np.cross(*(np.diff(v[triangles], axis=1).transpose(1, 0, 2)))  # noqa: E731
    return np.einsum("ij,ij->i", normal(before), normal(after)) <= 0


def _push_out_to_pad(vertices, triangles, distance_tree, winding_tree, pad):
    """Move vertices that decimation left closer than `pad` to the teeth back out to `pad`
    (midpoints of convex stretches sink in), unless that would flip a triangle."""
    hit = distance_tree.query(vertices)
    inside_teeth = winding_tree.query(vertices) > 0.5
    offset = vertices - hit.closest
    length = np.maximum(np.linalg.norm(offset, axis=1, keepdims=True), 1e-15)
    outward = np.where(inside_teeth[:, None], -offset, offset) / length
    too_close = inside_teeth | (hit.distance < pad)
    moved = vertices.copy()
    moved[too_close] = hit.closest[too_close] + pad * outward[too_close]
    for _ in range(3):
        flipped = _flipped(vertices, moved, triangles)
        if not flipped.any():
            break
        restore = np.unique(triangles[flipped])
        moved[restore] = vertices[restore]
    return moved


def labial_region(vertices, triangles, up, forward, toward_other_jaw):
    """Indices of the proxy triangles a penetrating lip may be pushed onto.

    * Labial/buccal surface: the outward normal lies within acos(LABIAL_MIN_COSINE) of the
      arch's radial direction, i.e. the horizontal direction from the arch centre (centre
      of the proxy's bounding box in the horizontal plane) to the triangle. This is the
      front of the incisors and the cheek side of the molars; the lingual side faces the
      centre and the gum side faces up (upper) or down (lower), so neither is included and
      a lip is never pushed behind the teeth into the mouth.
    * Biting edge: triangles facing the other jaw, and neither inwards nor backwards, that touch the labial
      surface (within BITING_RINGS rings), so a lip caught under the front edge can leave
      downwards/upwards instead of being dragged through the tooth.

    Every region triangle thus faces away from the arch centre, and the contact planes use
    the region's own normals, so no plane ever points into the mouth.
    """
    normals, areas = triangle_normals_areas(vertices, triangles)
    centroids = vertices[triangles].mean(1)
    horizontal = lambda v: v - np.outer(v @ up, up)  # noqa: E731
    box_centre = 0.5 * (vertices.min(0) + vertices.max(0))
    radial = horizontal(centroids - box_centre)
    radial /= np.maximum(np.linalg.norm(radial, axis=1, keepdims=True), 1e-12)
    labial = (np.einsum("ij,ij->i", normals, radial) > LABIAL_MIN_COSINE) & (areas > 0)
    facing_out = (np.einsum("ij,ij->i", normals, radial) > 0) & (normals @ forward >= 0)
    biting = (normals @ toward_other_jaw > BITING_MIN_COSINE) & facing_out & (areas > 0)
    chosen = labial.copy()
    for _ in range(BITING_RINGS):
        touched = np.zeros(len(vertices), bool)
        touched[triangles[chosen].ravel()] = True
        chosen |= biting & touched[triangles].any(1)
    return np.flatnonzero(chosen)


_PROXY_CACHE: dict = {}
_PROXY_CACHE_SIZE = 4


def _cache_key(model, pad, spacing):
    digest = hashlib.sha1()
    for key in ("upper_teeth_vertices", "upper_teeth_triangles", "lower_teeth_vertices", "lower_teeth_triangles",
                "head_frame", "head_origin", "landmark_positions"):
        if key in model:
            array = np.ascontiguousarray(model[key])
            digest.update(key.encode() + str(array.dtype).encode() + str(array.shape).encode() + array.tobytes())
    return digest.hexdigest(), float(pad), float(spacing)


def teeth_proxies(model: dict, pad=DEFAULT_PAD, spacing=DEFAULT_SPACING) -> list[TeethProxy]:
    """[upper, lower] proxies from the model's teeth meshes, or from the landmarks when it has none
    (cached by the arrays' content; treat the proxies as read-only)."""
    key = _cache_key(model, pad, spacing)
    if key not in _PROXY_CACHE:
        if len(_PROXY_CACHE) >= _PROXY_CACHE_SIZE:
            _PROXY_CACHE.pop(next(iter(_PROXY_CACHE)))
        _PROXY_CACHE[key] = _build_teeth_proxies(model, pad, spacing)
    return list(_PROXY_CACHE[key])


def _build_teeth_proxies(model, pad, spacing):
    _, up, forward = model_head_axes(model)
    proxies = []
    for name, bone, toward_other in (("upper_teeth", "skull", -up), ("lower_teeth", "jaw", up)):
        if f"{name}_vertices" in model and len(model[f"{name}_triangles"]):
            vertices, triangles, _ = padded_teeth_proxy(model[f"{name}_vertices"], model[f"{name}_triangles"],
                                                        pad, spacing)
            source = "teeth mesh"
        else:
            vertices, triangles = landmark_arch_proxy(model, upper=(bone == "skull"), spacing=spacing)
            source = "landmark arch"
        region = labial_region(vertices, triangles, up, forward, toward_other)
        proxies.append(TeethProxy(name=name, vertices=vertices, triangles=triangles, region=region,
                                  bone=bone, source=source))
    return proxies


def _landmark(model, name):
    landmarks = model_landmarks(model)
    if name not in landmarks:
        raise TeethProxyError(f"the model has no teeth meshes and no '{name}' landmark to place a teeth arch")
    return landmarks[name]


def landmark_arch_proxy(model, upper: bool, spacing=DEFAULT_SPACING):
    """A teeth arch swept behind the lips, for rigs without teeth meshes (rest pose, metres).

    In the head frame (x left, y up, z forward) around the mouth centre m (mid of the lip
    landmarks) with mouth width w: the arch centreline is the parabola
    z(x) = z_front − ARCH_DEPTH·w·(x / (ARCH_HALF_WIDTH·w))², |x| ≤ ARCH_HALF_WIDTH·w, whose
    front z_front lies ARCH_BEHIND_LIPS·w behind the lips (minus half a crown thickness).
    The crowns are a band ARCH_THICKNESS·w thick around it, reaching ARCH_CROWN_HEIGHT·w up
    (upper teeth) or down (lower) from the mouth centre's height. The solid is meshed like
    the teeth proxy.
    """
    axes = model_head_axes(model)
    corner_l, corner_r = _landmark(model, "mouth_corner_L"), _landmark(model, "mouth_corner_R")
    mouth = 0.5 * (_landmark(model, "upper_lip") + _landmark(model, "lower_lip"))
    width = float(np.linalg.norm(corner_l - corner_r))
    if not width > 0:
        raise TeethProxyError("the mouth corner landmarks coincide; cannot size a teeth arch")
    half_width, depth = ARCH_HALF_WIDTH * width, ARCH_DEPTH * width
    thickness, height = ARCH_THICKNESS * width, ARCH_CROWN_HEIGHT * width
    front = -ARCH_BEHIND_LIPS * width - 0.5 * thickness
    samples = np.linspace(-half_width, half_width, 65)
    centreline = np.column_stack([samples, front - depth * (samples / half_width) ** 2])

    def value_of(points):
        local = (points - mouth) @ axes.T
        horizontal = local[:, [0, 2]]
        # Distance to the centreline polyline in the horizontal plane.
        start, stop = centreline[:-1], centreline[1:]
        segment = stop - start
        along = np.clip(np.einsum("psk,sk->ps", horizontal[:, None] - start[None], segment)
                        / np.einsum("sk,sk->s", segment, segment), 0.0, 1.0)
        nearest = start[None] + along[..., None] * segment[None]
        sideways = np.linalg.norm(horizontal[:, None] - nearest, axis=2).min(1)
        vertical = local[:, 1] if upper else -local[:, 1]
        return np.maximum(sideways - 0.5 * thickness, np.abs(vertical - 0.5 * height) - 0.5 * height)

    extent = np.array([half_width + thickness, height, depth + thickness]) + 2 * spacing
    box_local = np.array([[sx * extent[0], sy * extent[1], front + sz * extent[2]]
                          for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    box_world = box_local @ axes + mouth
    vertices, triangles = mesh_field_volume(value_of, box_world.min(0), box_world.max(0), spacing)
    return decimate(vertices, triangles, DECIMATE_TARGET_TRIANGLES, DECIMATE_MAX_EDGE * spacing)


class TeethCollider:
    """A teeth proxy moving with its bone (Collider protocol).

    Skin points are carried into the proxy's rest frame by the inverse bone transform, so
    the hierarchy is built once; planes are carried back to the world. `tested_vertices`
    (optional): the skin vertices tested against it (CollisionScene passes the lips); all
    of them when None.
    """

    def __init__(self, proxy: TeethProxy, tested_vertices=None):
        self.proxy = proxy
        self.name = proxy.name
        self.tested_vertices = None if tested_vertices is None else np.asarray(tested_vertices, dtype=np.int64)

    def transform(self, pose: BonePose) -> np.ndarray:
        return np.asarray(pose.skull if self.proxy.bone == "skull" else pose.jaw, dtype=np.float64)

    def posed(self, pose: BonePose):
        """(vertices, triangles) of the proxy in the pose's world frame."""
        transform = self.transform(pose)
        return self.proxy.vertices @ transform[:3, :3].T + transform[:3, 3], self.proxy.triangles

    def crossings(self, skin_before: np.ndarray, pose_before: BonePose, skin_after: np.ndarray,
                  pose_after: BonePose, collider_index: int) -> ContactPlanes:
        """Planes for the tested skin vertices whose path from `skin_before` (posed by
        `pose_before`) to `skin_after` (`pose_after`), seen from the proxy, entered it through
        its labial projection region and left it through the mouth side (outside the region). The plane lies on
        the triangle the path entered by (outward normal), its depth is how far behind that
        plane the vertex ended.

        Why: ``detect`` finds vertices *inside* the proxy, and a vertex that went all the way
        through is not. On ICT's lip animation the shape-key detail residual, added to the
        solved skin for display, carried lip vertices 6 mm through the upper teeth into the
        mouth; the display projection asks this for that offset (solved skin against displayed
        skin, same pose). Between two poses it also finds the teeth passing through a vertex
        (a jaw thrust forward in one frame carried the lower incisors through the upper lip
        there); the solver does not use that: planes of such depth — a whole tooth — made
        that frame fail to converge."""
        tested = (np.arange(len(skin_after)) if self.tested_vertices is None else self.tested_vertices)
        before = apply_transform(np.asarray(skin_before, dtype=np.float64)[tested],
                                 rigid_inverse(self.transform(pose_before)))
        transform = self.transform(pose_after)
        after = apply_transform(np.asarray(skin_after, dtype=np.float64)[tested], rigid_inverse(transform))
        move = after - before
        volume = self.proxy.volume
        reaches = ((np.minimum(before, after) <= volume.upper) & (np.maximum(before, after) >= volume.lower)).all(axis=1)
        candidate = np.flatnonzero(reaches & (np.linalg.norm(move, axis=1) > MIN_CROSSING_MOVE))
        if len(candidate):
            # A path that starts or ends inside is detection's: it finds the vertex there.
            candidate = candidate[~(self.proxy.contains(before[candidate]) | self.proxy.contains(after[candidate]))]
        if not len(candidate):
            return ContactPlanes.empty()
        bvh = self.proxy.volume.bvh         # the proxy's own hierarchy, built once
        fraction, triangle, _ = first_ray_hits(self.proxy.vertices, self.proxy.triangles, before[candidate],
                                               move[candidate], bvh=bvh)
        entered = (fraction <= 1.0) & (triangle >= 0)
        entered[entered] = self.proxy.in_region[triangle[entered]]
        if not entered.any():
            return ContactPlanes.empty()
        candidate, fraction, triangle = candidate[entered], fraction[entered], triangle[entered]
        # Only a path that leaves through the mouth side ended behind the teeth: one that
        # leaves through the labial region or the biting edge cut a corner of the proxy
        # between two frames (a lip rolling over the incisal edge), which a straight chord
        # does not tell from going through.
        _, exit_triangle, _ = first_ray_hits(self.proxy.vertices, self.proxy.triangles, after[candidate],
                                             -move[candidate], bvh=bvh)
        behind = (exit_triangle >= 0) & ~self.proxy.in_region[np.maximum(exit_triangle, 0)]
        if not behind.any():
            return ContactPlanes.empty()
        candidate, fraction, triangle = candidate[behind], fraction[behind], triangle[behind]
        corners = self.proxy.vertices[self.proxy.triangles[triangle]]
        normal = unit_rows(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]))
        point = before[candidate] + fraction[:, None] * move[candidate]
        depth = np.einsum("cd,cd->c", normal, point - after[candidate])
        return ContactPlanes(vertex=tested[candidate], point=apply_transform(point, transform),
                             normal=rotate(normal, transform), depth=np.maximum(depth, 0.0),
                             collider=np.full(len(candidate), collider_index, np.int64))

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes:
        transform = self.transform(pose)
        lower, upper = transformed_box(self.proxy.volume.lower, self.proxy.volume.upper, transform, pad=margin)
        tested = skin_positions if self.tested_vertices is None else skin_positions[self.tested_vertices]
        nearby = candidates_in_box(tested, lower, upper)
        if len(nearby) == 0:
            return ContactPlanes.empty()
        to_rest = rigid_inverse(transform)
        local = apply_transform(tested[nearby], to_rest)
        maybe = self.proxy.clearance.uncleared(local, margin)
        nearby, local = nearby[maybe], local[maybe]
        found = closed_penetrations(self.proxy.volume, self.proxy.region_query, local, self.proxy.max_inner_depth,
                                    surface_normals=True, margin=margin)
        vertex = nearby[found.index] if self.tested_vertices is None else self.tested_vertices[nearby[found.index]]
        return ContactPlanes(vertex=vertex, point=apply_transform(found.point, transform),
                             normal=rotate(found.normal, transform), depth=found.depth,
                             collider=np.full(len(found.index), collider_index, np.int64))
