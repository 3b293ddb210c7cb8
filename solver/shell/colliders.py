"""Colliders of the interactive shell (paper 001 §3.1 "Constraints"): props given in metres,
applied to the coarse shell in face units as positional corrections after each elastic solve.

Sphere, capsule and box are analytic: the same signed distances as solver/collisions/sdf.py
(negative inside, closest surface point), compiled here so that a sub-step's projection of a
few thousand vertices costs microseconds rather than the ~20 µs a NumPy call costs per shape
(tests/test_shell_forward.py checks they agree with sdf.py). A mesh prop is a closed triangle
mesh (validated as animate's MESH.npz colliders are, solver/collisions/mesh_collider.py) with a
signed distance grid precomputed in its own frame; the grid only culls — the few vertices it
finds within a cell of the surface are projected exactly with the collisions package's
closest-point query and pseudo-normal sign.

Each collider is mutable (the Poke tool moves its sphere every frame): the simulator reads the
placement at the start of each frame and interpolates the translation over the sub-steps from
the previous frame's (Algorithm 1, "Update colliders"), so a fast prop does not jump through
the shell.

``packed(scale)`` gives an analytic collider as a kind code and 16 numbers in face units
(metres × scale), the form the compiled projection reads.

The skin the user sees is the rig's mesh warped by the coarse shell (Eq. 14), and a fine vertex
between coarse ones that sit on a prop's surface lies inside it (the chord of a curved contact;
on ICT at 4k, 2–3 mm under a 25 mm sphere). `press_out_fine` moves the fine vertices out as well,
but only as far as their coarse vertices are out: where the bone (max depth) left the coarse
shell inside the prop, the fine skin may stay as deep as its coarse vertices, read through the
same warp.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

SPHERE, CAPSULE, BOX = 0, 1, 2
PACKED_SIZE = 16
MESH_GRID_CELLS = 48


def _vector(value, name, size=3) -> np.ndarray:
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if array.shape != (size,) or not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: expected {size} finite numbers, found {value!r}")
    return array


def _positive(value, name) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name}: expected a positive length in metres, found {value!r}")
    return value


@dataclass
class SphereCollider:
    centre_m: np.ndarray
    radius_m: float

    def __post_init__(self):
        self.centre_m = _vector(self.centre_m, "SphereCollider.centre_m")
        self.radius_m = _positive(self.radius_m, "SphereCollider.radius_m")

    def packed(self, scale: float):
        values = np.zeros(PACKED_SIZE)
        values[:3] = self.centre_m * scale
        values[3] = self.radius_m * scale
        return SPHERE, values


@dataclass
class CapsuleCollider:
    start_m: np.ndarray
    end_m: np.ndarray
    radius_m: float

    def __post_init__(self):
        self.start_m = _vector(self.start_m, "CapsuleCollider.start_m")
        self.end_m = _vector(self.end_m, "CapsuleCollider.end_m")
        self.radius_m = _positive(self.radius_m, "CapsuleCollider.radius_m")

    def packed(self, scale: float):
        values = np.zeros(PACKED_SIZE)
        values[:3] = self.start_m * scale
        values[3] = self.radius_m * scale
        values[4:7] = self.end_m * scale
        return CAPSULE, values


@dataclass
class BoxCollider:
    centre_m: np.ndarray
    axes: np.ndarray           # 3×3, columns the box's local x, y, z in world coordinates
    half_size_m: np.ndarray    # (3,) half edge lengths

    def __post_init__(self):
        self.centre_m = _vector(self.centre_m, "BoxCollider.centre_m")
        axes = np.asarray(self.axes, dtype=np.float64)
        if axes.shape != (3, 3) or not np.allclose(axes.T @ axes, np.eye(3), atol=1e-9):
            raise ValueError("BoxCollider.axes: expected a 3×3 orthonormal matrix (columns the box's axes)")
        self.axes = axes
        self.half_size_m = _vector(self.half_size_m, "BoxCollider.half_size_m")
        if not (self.half_size_m > 0).all():
            raise ValueError(f"BoxCollider.half_size_m: expected positive half sizes, found {self.half_size_m}")

    def packed(self, scale: float):
        values = np.zeros(PACKED_SIZE)
        values[:3] = self.centre_m * scale
        values[4:13] = self.axes.ravel()          # row-major: values[4 + 3 r + c] = axes[r, c]
        values[13:16] = self.half_size_m * scale
        return BOX, values


class MeshCollider:
    """A closed prop mesh (metres, its own frame) placed by a rigid 4×4 `transform`; a signed
    distance grid over its box culls the shell's vertices before the exact projection."""

    def __init__(self, vertices_m, triangles, transform=None, cells: int = MESH_GRID_CELLS,
                 source: str = "mesh collider"):
        from ..collisions.detection import SurfaceQuery
        from ..collisions.mesh_collider import validate_collider_mesh
        transform = np.eye(4) if transform is None else np.asarray(transform, dtype=np.float64)
        vertices, faces, transforms = validate_collider_mesh(np.asarray(vertices_m), np.asarray(triangles),
                                                             transform, source)
        if vertices.ndim == 3:
            if len(vertices) > 1:
                raise ValueError(f"{source}: the shell takes rigid props only (one shape, moved by its transform); "
                                 f"this one has {len(vertices)} shapes. Fix: export it without per-frame shapes")
            vertices = vertices[0]
        self.vertices_m, self.triangles = vertices, faces
        self.transforms = transforms                  # (T,4,4) frame by frame; `transform` is the current one
        self.transform = transforms[0].copy()
        self.surface = SurfaceQuery(vertices, faces)
        lower, upper = self.surface.lower, self.surface.upper
        cell = float((upper - lower).max()) / cells
        pad = 2.0 * cell
        self.grid_lower = lower - pad
        self.grid_shape = np.ceil((upper - lower + 2 * pad) / cell).astype(np.int64) + 1
        self.grid_cell = cell
        axes = [self.grid_lower[k] + cell * np.arange(self.grid_shape[k]) for k in range(3)]
        nodes = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
        hit = self.surface.query(nodes)
        sign = np.where(hit.signed_side(nodes) < 0.0, -1.0, 1.0)
        self.grid = np.ascontiguousarray((sign * hit.distance).reshape(tuple(self.grid_shape)))

    def at_frame(self, frame: int) -> "MeshCollider":
        """Place the prop by its transform of `frame` (the last one past the end); returns self."""
        self.transform = self.transforms[min(max(int(frame), 0), len(self.transforms) - 1)].copy()
        return self

    def signed_distance_m(self, points_m) -> np.ndarray:
        """Grid estimate of the signed distance (m) of world points; +inf outside the grid."""
        points = np.ascontiguousarray(points_m, dtype=np.float64).reshape(-1, 3)
        local = (points - self.transform[:3, 3]) @ self.transform[:3, :3]
        return _grid_values(local, self.grid, self.grid_lower, self.grid_cell)

    def project(self, positions, scale: float, transform=None, allowed=None):
        """Move the penetrating rows of `positions` (face units = metres × scale) to the prop's
        surface in place, or with `allowed` (per row, face units) to that depth inside it;
        returns (moved indices, their corrections)."""
        moved, depth, closest = self._inside(positions, scale, transform)
        if allowed is not None:
            keep = depth > allowed[moved]
            moved, depth, closest = moved[keep], depth[keep], closest[keep]
            closest = positions[moved] + (closest - positions[moved]) * (1.0 - allowed[moved] / depth)[:, None]
        correction = closest - positions[moved]
        positions[moved] = closest
        return moved, correction

    def penetration(self, positions, scale: float, transform=None) -> np.ndarray:
        """(n,) how deep each row of `positions` (face units) is inside the prop, 0 outside."""
        moved, depth, _ = self._inside(positions, scale, transform)
        out = np.zeros(len(positions))
        out[moved] = depth
        return out

    def _inside(self, positions, scale: float, transform):
        """The rows inside the prop, their depths and closest surface points (face units)."""
        transform = self.transform if transform is None else transform
        rotation, translation = transform[:3, :3], transform[:3, 3]
        local = (positions / scale - translation) @ rotation
        near = _grid_cull(local, self.grid, self.grid_lower, self.grid_cell, 1.8 * self.grid_cell)
        if len(near) == 0:
            return near, np.zeros(0), np.zeros((0, 3))
        hit = self.surface.query(local[near])
        inside = (hit.triangle >= 0) & (hit.signed_side(local[near]) < 0.0)
        closest = (hit.closest[inside] @ rotation.T + translation) * scale
        return near[inside], np.asarray(hit.distance, dtype=np.float64)[inside] * scale, closest


@njit(cache=True)
def _trilinear(point, grid, lower, cell):
    shape = grid.shape
    index = np.empty(3, np.int64)
    frac = np.empty(3)
    for axis in range(3):
        t = (point[axis] - lower[axis]) / cell
        if not (t >= 0.0 and t <= shape[axis] - 1):
            return np.inf
        i = min(int(t), shape[axis] - 2)
        index[axis] = i
        frac[axis] = t - i
    value = 0.0
    for corner in range(8):
        a, b, c = corner & 1, (corner >> 1) & 1, (corner >> 2) & 1
        weight = ((frac[0] if a else 1.0 - frac[0]) * (frac[1] if b else 1.0 - frac[1])
                  * (frac[2] if c else 1.0 - frac[2]))
        value += weight * grid[index[0] + a, index[1] + b, index[2] + c]
    return value


@njit(cache=True)
def _grid_values(points, grid, lower, cell):
    out = np.empty(points.shape[0])
    for p in range(points.shape[0]):
        out[p] = _trilinear(points[p], grid, lower, cell)
    return out


@njit(cache=True)
def _grid_cull(points, grid, lower, cell, reach):
    """Indices of the points whose grid distance is below `reach` (the signed distance is
    1-Lipschitz, so its trilinear estimate errs by less than a cell diagonal)."""
    keep = np.empty(points.shape[0], np.int64)
    count = 0
    for p in range(points.shape[0]):
        if _trilinear(points[p], grid, lower, cell) < reach:
            keep[count] = p
            count += 1
    return keep[:count].copy()


# --------------------------------------------------------------------------- analytic, compiled

@njit(cache=True)
def analytic_signed_distance(point, kind, values, closest):
    """Signed distance of `point` to the packed analytic shape; writes its closest surface
    point into `closest` (the formulas of solver/collisions/sdf.py)."""
    if kind == SPHERE:
        ox, oy, oz = point[0] - values[0], point[1] - values[1], point[2] - values[2]
        length = math.sqrt(ox * ox + oy * oy + oz * oz)
        if length > 1e-15:
            nx, ny, nz = ox / length, oy / length, oz / length
        else:
            nx, ny, nz = 0.0, 0.0, 1.0
        r = values[3]
        closest[0], closest[1], closest[2] = values[0] + r * nx, values[1] + r * ny, values[2] + r * nz
        return length - r
    if kind == CAPSULE:
        ax, ay, az = values[4] - values[0], values[5] - values[1], values[6] - values[2]
        ll = ax * ax + ay * ay + az * az
        s = 0.0
        if ll > 0.0:
            s = ((point[0] - values[0]) * ax + (point[1] - values[1]) * ay + (point[2] - values[2]) * az) / ll
            s = min(max(s, 0.0), 1.0)
        cx, cy, cz = values[0] + s * ax, values[1] + s * ay, values[2] + s * az
        ox, oy, oz = point[0] - cx, point[1] - cy, point[2] - cz
        length = math.sqrt(ox * ox + oy * oy + oz * oz)
        if length > 1e-15:
            nx, ny, nz = ox / length, oy / length, oz / length
        else:   # on the axis: any direction perpendicular to it
            nx, ny, nz = 0.0, 0.0, 1.0
            if ll > 0.0:
                # cross(axis, e_k) for the axis component of least magnitude
                aax, aay, aaz = abs(ax), abs(ay), abs(az)
                if aax <= aay and aax <= aaz:
                    nx, ny, nz = 0.0, az, -ay
                elif aay <= aaz:
                    nx, ny, nz = -az, 0.0, ax
                else:
                    nx, ny, nz = ay, -ax, 0.0
                nl = math.sqrt(nx * nx + ny * ny + nz * nz)
                nx, ny, nz = nx / nl, ny / nl, nz / nl
        r = values[3]
        closest[0], closest[1], closest[2] = cx + r * nx, cy + r * ny, cz + r * nz
        return length - r
    # BOX: local coordinates along the columns of the axes
    local = np.empty(3)
    for c in range(3):
        local[c] = ((point[0] - values[0]) * values[4 + c] + (point[1] - values[1]) * values[7 + c]
                    + (point[2] - values[2]) * values[10 + c])
    clamped = np.empty(3)
    worst = -np.inf
    worst_axis = 0
    for c in range(3):
        half = values[13 + c]
        clamped[c] = min(max(local[c], -half), half)
        excess = abs(local[c]) - half
        if excess > worst:
            worst, worst_axis = excess, c
    if worst > 0.0:
        dx, dy, dz = local[0] - clamped[0], local[1] - clamped[1], local[2] - clamped[2]
        value = math.sqrt(dx * dx + dy * dy + dz * dz)
    else:
        value = worst
        clamped[worst_axis] = values[13 + worst_axis] if local[worst_axis] >= 0.0 else -values[13 + worst_axis]
    for r in range(3):
        closest[r] = values[r] + (values[4 + 3 * r] * clamped[0] + values[5 + 3 * r] * clamped[1]
                                  + values[6 + 3 * r] * clamped[2])
    return value


@njit(cache=True)
def project_analytic(positions, kinds, packed, mass, correction_sum):
    """Move every vertex inside an analytic shape to its surface, shape after shape, in place.
    Adds Σ mass × correction (per axis) into `correction_sum`; returns the number of moves."""
    closest = np.empty(3)
    moves = 0
    for shape in range(kinds.shape[0]):
        kind = kinds[shape]
        values = packed[shape]
        for i in range(positions.shape[0]):
            depth = analytic_signed_distance(positions[i], kind, values, closest)
            if depth < 0.0:
                for c in range(3):
                    correction_sum[c] += mass[i] * (closest[c] - positions[i, c])
                    positions[i, c] = closest[c]
                moves += 1
    return moves


@njit(cache=True)
def analytic_penetration(positions, kinds, packed, out):
    """out[i] = how deep vertex i is inside the analytic shape it is deepest in (0 outside)."""
    closest = np.empty(3)
    for i in range(positions.shape[0]):
        deepest = 0.0
        for shape in range(kinds.shape[0]):
            deepest = max(deepest, -analytic_signed_distance(positions[i], kinds[shape], packed[shape], closest))
        out[i] = deepest


@njit(cache=True)
def press_out_analytic(positions, kinds, packed, allowed):
    """Move every vertex deeper than allowed[i] inside an analytic shape back to that depth
    (towards its closest surface point), shape after shape, in place; returns the moves."""
    closest = np.empty(3)
    moves = 0
    for shape in range(kinds.shape[0]):
        for i in range(positions.shape[0]):
            depth = -analytic_signed_distance(positions[i], kinds[shape], packed[shape], closest)
            if depth > allowed[i]:
                share = 1.0 - allowed[i] / depth
                for c in range(3):
                    positions[i, c] += share * (closest[c] - positions[i, c])
                moves += 1
    return moves


@dataclass(frozen=True)
class Placement:
    """Where a frame's colliders were, in metres: the analytic ones packed (kinds (a,), packed
    (a, 16)) and the mesh props with their transforms; kept by the simulator for the fine skin."""
    kinds: np.ndarray
    packed: np.ndarray
    meshes: tuple = ()

    @classmethod
    def of(cls, colliders) -> "Placement":
        analytic = [collider.packed(1.0) for collider in colliders if not isinstance(collider, MeshCollider)]
        return cls(kinds=np.array([kind for kind, _ in analytic], dtype=np.int64),
                   packed=np.array([values for _, values in analytic], dtype=np.float64).reshape(-1, PACKED_SIZE),
                   meshes=tuple((collider, collider.transform.copy()) for collider in colliders
                                if isinstance(collider, MeshCollider)))

    def __bool__(self) -> bool:
        return bool(len(self.kinds) or self.meshes)


def press_out_fine(fine_m, coarse_m, fine_from_coarse, placement: Placement) -> int:
    """The fine skin (V, 3) metres pushed out of the colliders in place, each vertex to the
    depth its coarse vertices (n, 3) metres have, read through the warp (module docstring);
    returns how many fine vertices moved."""
    kinds, packed = placement.kinds, placement.packed
    coarse_depth = np.zeros(len(coarse_m))
    if len(kinds):
        analytic_penetration(np.ascontiguousarray(coarse_m), kinds, packed, coarse_depth)
    for mesh, transform in placement.meshes:
        coarse_depth = np.maximum(coarse_depth, mesh.penetration(coarse_m, 1.0, transform))
    allowed = fine_from_coarse @ coarse_depth
    moves = press_out_analytic(fine_m, kinds, packed, allowed) if len(kinds) else 0
    for mesh, transform in placement.meshes:
        moves += len(mesh.project(fine_m, 1.0, transform, allowed=allowed)[0])
    return moves


def analytic_signed_distances(points, collider, scale: float = 1.0):
    """(values, closest) of points (face units) against one analytic collider; the compiled
    kernel, exposed for tests and for measuring penetration after a step."""
    kind, values = collider.packed(scale)
    points = np.ascontiguousarray(points, dtype=np.float64)
    closest = np.empty_like(points)
    out = np.empty(len(points))
    for i in range(len(points)):
        out[i] = analytic_signed_distance(points[i], kind, values, closest[i])
    return out, closest


def signed_distance_m(collider, points_m) -> np.ndarray:
    """Signed distance (m) of world points to any shell collider (analytic exactly, mesh by its grid)."""
    if isinstance(collider, MeshCollider):
        return collider.signed_distance_m(points_m)
    return analytic_signed_distances(points_m, collider, 1.0)[0]


@dataclass
class Grab:
    """Pinned coarse vertices that follow a sphere's centre (the Poke tool's pull)."""
    vertices: np.ndarray                 # (k,) coarse vertex indices
    offsets: np.ndarray                  # (k,3) face units, vertex − centre at the grab
    centre: np.ndarray                   # (3,) face units, the current target centre
    previous_centre: np.ndarray = field(default=None)

    def __post_init__(self):
        if self.previous_centre is None:
            self.previous_centre = self.centre.copy()
