"""The built-in procedural demo head: a complete FaceRig made from formulas.

The demo head is the default input of the product demo and of most tests, so it is built
deterministically (no randomness, no files) from closed-form shapes in a fraction of a
second, and it is geometrically clean: one edge-manifold, consistently wound skin that is
open only at the neck cut, closed outward-wound bones and teeth strictly inside it.

Conventions (Blender's): metres, Z up, the face looks toward -Y, the subject's left is +X
(ARKit ``_L`` keys move the +X side). The head is centred near the origin: crown at
z = +0.112, chin at z = -0.111, neck cut at z = -0.21.

How it is built
---------------
* Skin: a grid of rings (rows, crown to neck cut) x meridians (columns). Each ring is a
  superellipse whose size and height come from a few anatomical key rows (brow, eyes,
  mouth, chin, throat, ...) splined along the front profile; the crown is closed by a quad
  patch. Face features (nose, lips, brow ridge, eyes, cheeks, chin) are smooth bumps added
  on top. The mouth is one grid row split between the mouth corners into an upper and a
  lower lip edge, continued inward by a pouch (the oral cavity) that closes behind the
  teeth, so the lips touch but are different vertices.
* Bones: a skull proxy (cranium + maxilla, flat palate above the mouth pouch), a U-shaped
  mandible swept from condyle to condyle, and two tooth arches that bite at the lip line.
* Shape keys: ARKit expressions as smooth, compactly supported displacement fields, so
  every delta is exactly zero far from the region it moves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline, PchipInterpolator
from scipy.sparse import coo_matrix
from scipy.sparse.linalg import spsolve

from .rig import FaceRig

# ----------------------------------------------------------------------------- anatomy
# Every length is in metres. Left-side (+X) positions; the right side is the mirror image.

MOUTH_Z = -0.067                 # lip contact line at the midline
MOUTH_HALF_WIDTH = 0.025         # target mouth-corner |x|; the nearest grid column wins
LIP_GAP = 0.0002                 # upper/lower lip vertices are this far apart at the slit
CONDYLE = np.array([0.0715, -0.002, -0.045])   # centre of the left mandibular condyle
JAW_OPEN_DEGREES = 14.0          # jawOpen rotation about the condyle axis
TEETH_BITE_GAP = 0.0006          # upper and lower teeth stop this far apart
TEETH_HEIGHT = 0.014             # crown + root proxy height of each tooth arch
PALATE_Z = -0.0555               # flat underside of the skull proxy, above the mouth pouch

SKIN_COLUMNS = 88                # meridians; a multiple of 4 so the crown cap is all quads
COLUMN_FOCUS = 0.6               # 0: even meridians; larger packs more of them into the face
SKULL_COLUMNS = 48


# ----------------------------------------------------------------------------- small math

def _smoothstep(edge0, edge1, x):
    """0 below edge0, 1 above edge1 (either order), C1 cubic in between."""
    t = np.clip((np.asarray(x, dtype=float) - edge0) / (edge1 - edge0), 0.0, 1.0)
    return t * t * (3.0 - 2.0 * t)


def _bump(points, centre, radii, power=3.0):
    """(1 - d^2)^power of the ellipsoidal distance d: smooth, exactly 0 for d >= 1.

    Works for any number of coordinates (2-D height fields use (x, z) points)."""
    d2 = np.sum(((np.asarray(points) - centre) / radii) ** 2, axis=-1)
    return np.where(d2 < 1.0, np.clip(1.0 - d2, 0.0, 1.0) ** power, 0.0)


def _smooth_max(a, b, softness):
    """max(a, b) with the crease rounded over `softness`; equals max when they differ a lot."""
    return 0.5 * (a + b + np.sqrt((a - b) ** 2 + softness ** 2)) - 0.5 * softness


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _turn(points, pivot, angle, axes):
    """Displacement of rotating each point by its own angle about the axis through pivot
    normal to the plane of coordinate `axes` (i, j), from i toward j; exactly zero where
    the angle is zero."""
    i, j = axes
    rel = points - pivot
    c1, s = np.cos(angle) - 1.0, np.sin(angle)
    delta = np.zeros_like(points)
    delta[..., i] = c1 * rel[..., i] - s * rel[..., j]
    delta[..., j] = s * rel[..., i] + c1 * rel[..., j]
    return delta


def _turn_about_x(points, pivot, angle):
    """Rotation about the X-parallel axis through pivot; positive angle swings the front (-Y)
    downward, the way a jaw opens."""
    return _turn(points, pivot, angle, (1, 2))


def _rotate_about_x(points, pivot, angle):
    return points + _turn_about_x(points, pivot, angle)


def _rotate_about_z(points, pivot, angle):
    return points + _turn(points, pivot, angle, (0, 1))


# ----------------------------------------------------------------------------- ring stacks
# A ring stack is a surface of rings, each a horizontal superellipse
#   |x / half_width|^n + |(y - y_centre) / depth|^n = 1
# whose depth is the front depth for y < y_centre and the back depth behind. A ring may tilt:
# its height is given at the front midline, the side and the back and blends between them
# with a three-term Fourier series, so the under-chin ring can sit low in front and high at
# the nape. Rings are listed top to bottom as key rows and splined along the arc length of
# the front profile, which keeps the sampling of the face independent of the key rows.

_KEY_FIELDS = ("z_front", "y_front", "z_side", "x_side", "z_back", "y_back", "y_centre",
               "n_front", "n_back")


@dataclass(frozen=True)
class _RingStack:
    """Key rows of a ring-stack surface and the spline through them."""
    keys: np.ndarray          # (K, 9) in the order of _KEY_FIELDS
    arc: np.ndarray           # (K,) front-profile arc length of each key row

    @classmethod
    def from_rows(cls, rows) -> "_RingStack":
        keys = np.asarray(rows, dtype=float)
        step = np.hypot(np.diff(keys[:, 1]), np.diff(keys[:, 0]))
        return cls(keys, np.concatenate([[0.0], np.cumsum(step)]))

    def params(self, s):
        return CubicSpline(self.arc, self.keys, axis=0)(np.clip(s, 0.0, self.arc[-1]))

    def points(self, s, phi):
        """Surface points at arc length s and meridian angle phi (broadcast together).

        phi = 0 is the front midline (-Y), phi = +pi/2 the subject's left side (+X)."""
        p = self.params(np.asarray(s, dtype=float))
        z_f, y_f, z_s, x_s, z_b, y_b, y_c, n_f, n_b = np.moveaxis(p, -1, 0)
        c, s_ = np.cos(phi), np.sin(phi)
        depth = np.where(c > 0.0, y_c - y_f, y_b - y_c)
        n = n_b + (n_f - n_b) * 0.5 * (1.0 + c)
        # Radius of the superellipse along direction phi, written so a ring of size zero
        # (the crown pole) gives 0 instead of 0/0.
        num = x_s * depth
        den = ((depth * np.abs(s_)) ** n + (x_s * np.abs(c)) ** n) ** (1.0 / n)
        rho = np.where(num > 0.0, num / np.maximum(den, 1e-300), 0.0)
        # Fourier blend through the three given heights: f(0)=front, f(90)=side, f(180)=back.
        c1 = 0.5 * (z_f - z_b)
        c0 = 0.5 * (0.5 * (z_f + z_b) + z_s)
        c2 = 0.5 * (0.5 * (z_f + z_b) - z_s)
        z = c0 + c1 * c + c2 * np.cos(2.0 * phi)
        return np.stack(np.broadcast_arrays(rho * s_, y_c - rho * c, z), axis=-1)


def _cranium_rows(inset, polar_degrees, n_front_at_equator):
    """Key rows on the upper half of an egg-shaped cranium, shrunk by `inset` (the skull
    proxy is the same egg 6 mm smaller)."""
    y_c, z_c = 0.004, 0.020
    side, front, back, top = 0.079 - inset, 0.099 - inset, 0.097 - inset, 0.092 - inset
    rows = []
    for a in np.radians(polar_degrees):
        sa, ca = np.sin(a), np.cos(a)
        z = z_c + top * ca
        n_front = 2.0 + (n_front_at_equator - 2.0) * sa ** 2
        rows.append((z, y_c - front * sa, z, side * sa, z, y_c + back * sa, y_c, n_front, 2.0))
    return rows


# Below the brow: (z_front, y_front, z_side, x_side, z_back, y_back, y_centre, n_front, n_back)
_SKIN_FACE_ROWS = {
    "eyes":       (0.000, -0.093, 0.000, 0.0800, 0.000, 0.100, 0.004, 2.2, 2.0),
    "cheekbones": (-0.025, -0.094, -0.025, 0.0810, -0.022, 0.094, 0.004, 2.2, 2.0),
    "nose_base":  (-0.045, -0.094, -0.045, 0.0815, -0.038, 0.086, 0.004, 2.1, 2.0),
    "mouth":      (MOUTH_Z, -0.093, -0.065, 0.0770, -0.052, 0.077, 0.006, 2.0, 2.0),
    "chin":       (-0.097, -0.090, -0.086, 0.0680, -0.068, 0.068, 0.008, 1.9, 2.0),
    "menton":     (-0.111, -0.077, -0.097, 0.0630, -0.084, 0.064, 0.010, 2.0, 2.0),
    "underchin":  (-0.119, -0.056, -0.104, 0.0570, -0.099, 0.062, 0.012, 2.0, 2.0),
    "throat":     (-0.127, -0.045, -0.115, 0.0550, -0.115, 0.061, 0.012, 2.0, 2.0),
    "neck":       (-0.160, -0.042, -0.160, 0.0545, -0.160, 0.061, 0.012, 2.0, 2.0),
    "cut":        (-0.210, -0.045, -0.210, 0.0560, -0.210, 0.063, 0.012, 2.0, 2.0),
}
_CRANIUM_DEGREES = np.arange(0.0, 91.0, 10.0)
_CAP_DEGREES = 40.0              # the crown cap covers the cranium above this polar angle


def _skin_stack() -> _RingStack:
    return _RingStack.from_rows(_cranium_rows(0.0, _CRANIUM_DEGREES, 2.2)
                                + list(_SKIN_FACE_ROWS.values()))


def _key_arc(stack: _RingStack, name: str) -> float:
    return float(stack.arc[len(_CRANIUM_DEGREES) + list(_SKIN_FACE_ROWS).index(name)])


def _row_arcs(start, end, spacing_at):
    """Arc positions from start to end (both included) whose spacing follows spacing_at(s)."""
    s = np.linspace(start, end, 2000)
    density = 1.0 / spacing_at(s)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(s))])
    count = max(int(round(cdf[-1])), 1)
    return np.interp(np.linspace(0.0, cdf[-1], count + 1), cdf, s)


def _column_angles(count, focus):
    """Meridian angles, symmetric about the front midline, denser on the face."""
    u = 2.0 * np.pi * np.arange(count) / count
    return u - focus * np.sin(u)


# ----------------------------------------------------------------------------- quad patches

def _disk_patch(boundary_angles, rings=2):
    """An all-quad disk whose boundary has len(boundary_angles) vertices (a multiple of 4).

    An inner square grid is joined to the boundary through `rings` intermediate rings, so
    the four irregular (valence-3) vertices sit at the corners of the inner square with
    ~120 degree angles instead of flattened on the rim. Interior positions are the Tutte
    (uniform harmonic) embedding with the boundary pinned on the unit circle at the given
    angles, which never folds for a convex boundary. Coordinates are (sin a, -cos a) so
    angle 0 is the front (-Y) and angles grow toward +X, like the ring stacks.

    Returns (uv (P,2), quads (Q,4), boundary vertex ids in angle order); quads run
    counter-clockwise seen from +Z.
    """
    count = len(boundary_angles)
    m = count // 4
    grid = np.arange((m + 1) ** 2).reshape(m + 1, m + 1)       # grid[b, a]: a -> +X, b -> +Y
    quads = [np.stack([grid[:-1, :-1], grid[:-1, 1:], grid[1:, 1:], grid[1:, :-1]], -1).reshape(-1, 4)]
    # Square boundary counter-clockwise, starting at the middle of the front (-Y) side.
    loop = np.concatenate([grid[0, :-1], grid[:-1, -1], grid[-1, :0:-1], grid[:0:-1, 0]])
    loop = np.roll(loop, -(m // 2))
    next_id = (m + 1) ** 2
    inner = loop
    for _ in range(rings + 1):
        outer = np.arange(next_id, next_id + count)
        next_id += count
        quads.append(np.stack([inner, outer, np.roll(outer, -1), np.roll(inner, -1)], -1))
        inner = outer
    quads = np.concatenate(quads)
    boundary = inner

    uv = np.zeros((next_id, 2))
    uv[boundary] = np.stack([np.sin(boundary_angles), -np.cos(boundary_angles)], -1)
    edges = _directed_edges(quads)
    adjacency = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])),
                           shape=(next_id, next_id)).tocsr()
    adjacency = ((adjacency + adjacency.T) > 0).astype(float)
    free = np.ones(next_id, dtype=bool)
    free[boundary] = False
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    laplacian = (coo_matrix((degree, (np.arange(next_id), np.arange(next_id)))) - adjacency).tocsr()
    rhs = adjacency[free][:, boundary] @ uv[boundary]
    uv[free] = spsolve(laplacian[free][:, free].tocsc(), rhs)
    # Make every quad counter-clockwise in the plane (the rings above are built clockwise).
    a, b, c = uv[quads[:, 0]], uv[quads[:, 1]], uv[quads[:, 2]]
    clockwise = np.cross(b - a, c - a) < 0.0
    quads[clockwise] = quads[clockwise][:, ::-1]
    return uv, quads, boundary


def _grid_quads(ids):
    """Quads of a (rows, columns) id grid whose columns wrap around; wound so the normal is
    (down the rows) x (along the columns)."""
    nxt = np.roll(ids, -1, axis=1)
    return np.stack([ids[:-1], ids[1:], nxt[1:], nxt[:-1]], -1).reshape(-1, 4)


def _directed_edges(faces):
    """(E,2) directed edges of a face array whose triangles are padded with -1."""
    faces = np.asarray(faces)
    nxt = np.roll(faces, -1, axis=1)
    if faces.shape[1] == 4:   # a padded triangle's last edge closes back to its first vertex
        nxt[:, 2] = np.where(faces[:, 3] < 0, faces[:, 0], nxt[:, 2])
    edges = np.stack([faces, nxt], -1).reshape(-1, 2)
    return edges[(edges >= 0).all(axis=1)]


def _flip_to_match(patch_faces, reference_faces):
    """Flip a patch if it walks an edge it shares with the reference in the same direction
    (two consistently wound neighbours walk a shared edge in opposite directions)."""
    def keys(faces):
        e = _directed_edges(faces).astype(np.int64)
        return e[:, 0] * (1 << 32) + e[:, 1]
    if np.intersect1d(keys(patch_faces), keys(reference_faces)).size:
        return patch_faces[:, ::-1].copy()
    return patch_faces


def _reverse_faces(faces):
    """Reverse the winding of quads and of -1-padded triangles (the pad stays last)."""
    faces = np.asarray(faces)
    out = faces[:, ::-1].copy()
    if faces.shape[1] == 4:
        tri = faces[:, 3] < 0
        out[tri] = np.stack([faces[tri, 2], faces[tri, 1], faces[tri, 0], faces[tri, 3]], -1)
    return out


# ----------------------------------------------------------------------------- face relief
# Features are heights added to the smooth head. Midline features that stick out of the
# face (nose, lips, chin) are heights toward -Y over the (x, z) plane: the face is a graph
# over that plane, so pushing it along -Y can never fold it. Broad features further round
# the face (brows, eyes, cheeks) push along the surface normal.

def _curve(xs, ys):
    """Monotone (overshoot-free) interpolation through points given in any order."""
    order = np.argsort(xs)
    return PchipInterpolator(np.asarray(xs, dtype=float)[order], np.asarray(ys, dtype=float)[order])


_NOSE_RIDGE = _curve(   # protrusion of the nose ridge over the face, by height z
    [0.010, 0.004, -0.005, -0.015, -0.025, -0.031, -0.036, -0.040, -0.0435, -0.046, -0.048],
    [0.000, 0.0030, 0.009, 0.0150, 0.0210, 0.0230, 0.0200, 0.0125, 0.0050, 0.0015, 0.000])
_NOSE_HALF_WIDTH = _curve(
    [0.010, -0.005, -0.020, -0.030, -0.040, -0.048],
    [0.012, 0.0125, 0.0135, 0.0150, 0.0140, 0.0110])
_NOSE_WING = (np.array([0.0160, -0.0370]), np.array([0.0095, 0.0085]), 0.0115)  # (x,z) centre, radii, height

# Lip protrusion over the face by height above the lip line (midline values; they shrink
# toward the corners). The contact line is set back from both vermilion peaks: that roll is
# what gives the lips their volume and lets the skin curl into the mouth.
_LIP_PROFILE = _curve(
    [-0.022, -0.018, -0.014, -0.010, -0.0075, -0.0045, -0.002, -0.0008, 0.0,
     0.0008, 0.002, 0.004, 0.0065, 0.0085, 0.013, 0.018, 0.024],
    [0.000, 0.0005, 0.0030, 0.0070, 0.0090, 0.0102, 0.0096, 0.0083, 0.0065,
     0.0085, 0.0100, 0.0108, 0.0098, 0.0085, 0.0065, 0.0040, 0.000])


def _inside(values, lo, hi):
    return (values >= lo) & (values <= hi)


def _nose_height(x, z):
    ridge_z = _inside(z, -0.048, 0.010)
    ridge = np.where(ridge_z, _NOSE_RIDGE(np.clip(z, -0.048, 0.010)), 0.0)
    across = x / _NOSE_HALF_WIDTH(np.clip(z, -0.048, 0.010))
    ridge = ridge * np.clip(1.0 - across ** 2, 0.0, 1.0) ** 2
    centre, radii, height = _NOSE_WING
    wings = height * _bump(np.stack([np.abs(x), z], -1), centre, radii, power=1.5)
    return _smooth_max(ridge, wings, 0.002)


def _lip_height(u, v):
    """Lip protrusion at lateral fraction u = |x| / corner x and height v above the lip line."""
    u = np.abs(u)
    spread = 1.0 - 0.5 * np.minimum(u, 1.0) ** 2       # lips get thinner toward the corners
    vv = v / spread
    profile = np.where(_inside(vv, -0.022, 0.024), _LIP_PROFILE(np.clip(vv, -0.022, 0.024)), 0.0)
    return profile * np.clip(1.0 - u ** 4, 0.0, 1.0)


def _face_relief(p, normal):
    """Displacement that sculpts nose, chin, brows, eyes and cheeks onto the smooth head
    (the lips are added separately because they need the mouth line)."""
    x, y, z = np.moveaxis(p, -1, 0)
    ax = np.abs(x)
    xz = np.stack([x, z], -1)
    axz = np.stack([ax, z], -1)
    front = 1.0 - _smoothstep(-0.06, -0.03, y)          # height fields act on the face only
    forward = (_nose_height(x, z)
               + 0.0065 * _bump(xz, [0.0, -0.099], [0.023, 0.015], 2.0)         # chin
               + 0.0025 * _bump(xz, [0.0, -0.062], [0.038, 0.030], 2.0)         # muzzle
               - 0.0008 * _bump(xz, [0.0, -0.052], [0.0045, 0.008], 2.0))       # philtrum
    pa = np.stack([ax, y, z], -1)
    outward = (0.0035 * _bump(pa, [0.030, -0.090, 0.024], [0.030, 0.03, 0.010])     # brow ridge
               + 0.0020 * _bump(p, [0.0, -0.095, 0.018], [0.014, 0.03, 0.011])      # glabella
               - 0.0085 * _bump(pa, [0.032, -0.088, 0.002], [0.021, 0.03, 0.016], 2.0)  # socket
               + 0.0068 * _bump(pa, [0.032, -0.088, 0.001], [0.0140, 0.03, 0.0105], 1.0)  # eyeball
               - 0.0010 * _bump(pa, [0.032, -0.090, 0.0005], [0.012, 0.03, 0.0035], 2.0)  # eye slit
               + 0.0050 * _bump(pa, [0.050, -0.075, -0.020], [0.028, 0.04, 0.018])  # cheekbone
               + 0.0020 * _bump(pa, [0.042, -0.075, -0.048], [0.022, 0.04, 0.020])  # cheek
               + 0.0030 * _bump(pa, [0.064, 0.000, -0.086], [0.018, 0.025, 0.014])  # jaw angle
               - 0.0020 * _bump(pa, [0.070, -0.030, 0.030], [0.015, 0.025, 0.02])  # temple
               - 0.0012 * _nasolabial_groove(axz) * front)
    return (-forward * front)[..., None] * np.array([0.0, 1.0, 0.0]) + outward[..., None] * normal


def _nasolabial_groove(axz):
    """A shallow crease from the nose wing down to beside the mouth corner."""
    a, b = np.array([0.021, -0.040]), np.array([0.034, -0.074])
    t = np.clip(((axz - a) @ (b - a)) / ((b - a) @ (b - a)), 0.0, 1.0)
    d = np.linalg.norm(axz - (a + t[..., None] * (b - a)), axis=-1)
    along = np.sin(np.pi * t)                         # fades out at both ends
    return along * np.where(d < 0.004, (1.0 - (d / 0.004) ** 2) ** 2, 0.0)


# ----------------------------------------------------------------------------- skin

# Row spacing along the front profile: fine at the lips, coarse on the crown and neck.
# (key row or cranium polar angle in degrees, spacing in metres)
_ROW_SPACING = [(40.0, 0.0075), (70.0, 0.0065), (90.0, 0.0042), ("eyes", 0.0034),
                ("cheekbones", 0.0026), ("nose_base", 0.0023), ("mouth", 0.0014),
                ("chin", 0.0033), ("menton", 0.0042), ("underchin", 0.0060),
                ("throat", 0.0075), ("neck", 0.0130), ("cut", 0.0150)]

# The oral-cavity pouch, ring by ring behind the lip slit: depth behind the lips, roof and
# floor height above/below the lip line, extra half-width beyond the mouth corners, and
# the superellipse exponent of the ring (rounder near the lips, boxier in the cavity).
# The first rings are the inner faces of the lips; the roof and floor then stay within
# 8 mm of the lip line, so the palate and the mandible can sit 3 mm beyond them.
_POUCH_RINGS = np.array([
    # depth,  roof,   floor,  extra width, exponent
    [0.0012, 0.0005, 0.0005, 0.0003, 2.0],
    [0.0030, 0.0016, 0.0017, 0.0008, 2.0],
    [0.0055, 0.0034, 0.0036, 0.0015, 2.2],
    [0.0085, 0.0054, 0.0058, 0.0025, 2.5],
    [0.0125, 0.0070, 0.0072, 0.0035, 3.0],
    [0.0180, 0.0078, 0.0079, 0.0045, 3.5],
    [0.0250, 0.0080, 0.0080, 0.0055, 3.5],
    [0.0320, 0.0080, 0.0080, 0.0060, 3.5],
    [0.0390, 0.0078, 0.0078, 0.0060, 3.5],
    [0.0450, 0.0072, 0.0072, 0.0050, 3.0],
    [0.0500, 0.0060, 0.0060, 0.0030, 2.5],
    [0.0540, 0.0042, 0.0042, 0.0000, 2.2],
    [0.0570, 0.0022, 0.0022, -0.0040, 2.0],
])
_POUCH_END_DEPTH = 0.0585


@dataclass
class _Skin:
    """The skin mesh plus the per-vertex bookkeeping the shape keys need."""
    vertices: np.ndarray
    faces: np.ndarray
    lip_side: np.ndarray        # +1 upper lip side of the mouth, -1 lower, 0 corners/elsewhere
    lip_height: np.ndarray      # outer skin: height above the lip line (at that column)
    pouch_depth: np.ndarray     # pouch: depth behind the lips; outer skin: 0
    pouch_vertical: np.ndarray  # pouch: -1 (floor) .. +1 (roof); outer skin: 0
    is_pouch: np.ndarray
    corner_x: float             # |x| of the mouth corners
    corners: np.ndarray         # vertex ids of the mouth corners, +X first
    upper_slit: np.ndarray      # upper-lip slit vertices from -X to +X (corners excluded)
    lower_slit: np.ndarray      # lower-lip slit vertices, same columns


def _grid_normals(grid):
    """Outward normals of a (rows, wrapped columns, 3) point grid."""
    down = np.gradient(grid, axis=0)
    along = 0.5 * (np.roll(grid, -1, axis=1) - np.roll(grid, 1, axis=1))
    return _unit(np.cross(down, along))


def _skin_rows(stack):
    def arc_of(key):
        if isinstance(key, str):
            return _key_arc(stack, key)
        return float(np.interp(np.radians(key), np.radians(_CRANIUM_DEGREES),
                               stack.arc[:len(_CRANIUM_DEGREES)]))
    anchors = np.array([arc_of(k) for k, _ in _ROW_SPACING])
    widths = np.array([w for _, w in _ROW_SPACING])

    def spacing(s):
        return np.interp(s, anchors, widths)
    s_cap, s_mouth, s_end = arc_of(_CAP_DEGREES), arc_of("mouth"), arc_of("cut")
    upper = _row_arcs(s_cap, s_mouth, spacing)
    lower = _row_arcs(s_mouth, s_end, spacing)
    return np.concatenate([upper, lower[1:]]), len(upper) - 1, s_cap


def _build_skin() -> _Skin:
    stack = _skin_stack()
    phi = _column_angles(SKIN_COLUMNS, COLUMN_FOCUS)
    rows, slit, s_cap = _skin_rows(stack)
    n_rows, n_cols = len(rows), len(phi)

    # Tube: the head below the crown cap, features added.
    base = stack.points(rows[:, None], phi[None, :])
    grid = base + _face_relief(base, _grid_normals(base))
    corner_col = int(np.argmin(np.abs(base[slit, : n_cols // 4, 0] - MOUTH_HALF_WIDTH)))
    corner_x = float(base[slit, corner_col, 0])
    lip_height = base[..., 2] - base[slit][None, :, 2]
    u = base[..., 0] / corner_x
    grid[..., 1] -= _lip_height(u, lip_height) * (1.0 - _smoothstep(-0.06, -0.03, base[..., 1]))

    # Crown cap: a quad disk on the same surface, its rim is the first tube row.
    uv, cap_quads, rim = _disk_patch(phi)
    cap_free = np.setdiff1d(np.arange(len(uv)), rim)
    radius = np.linalg.norm(uv[cap_free], axis=1)
    cap_points = stack.points(radius * s_cap, np.arctan2(uv[cap_free, 0], -uv[cap_free, 1]))

    # Vertex numbering: cap interior, tube grid, lower-lip copies, pouch rings, pouch end.
    cap_ids = -np.ones(len(uv), dtype=np.int64)
    cap_ids[cap_free] = np.arange(len(cap_free))
    tube_ids = len(cap_free) + np.arange(n_rows * n_cols).reshape(n_rows, n_cols)
    cap_ids[rim] = tube_ids[0]
    split_cols = np.r_[np.arange(n_cols - corner_col + 1, n_cols), np.arange(0, corner_col)]
    lower_ids = tube_ids.max() + 1 + np.arange(len(split_cols))
    lower_band = tube_ids[slit:].copy()
    lower_band[0, split_cols] = lower_ids

    # Lips: the upper copy sits a hair above the lower one; they meet at the corners.
    gap = LIP_GAP * np.sqrt(np.clip(1.0 - u[slit, split_cols] ** 2, 0.0, 1.0))
    lower_points = grid[slit, split_cols].copy()
    lower_points[:, 2] -= 0.5 * gap
    grid[slit, split_cols, 2] += 0.5 * gap

    # The lip loop: upper edge from the -X corner to the +X corner, then the lower edge back.
    upper_cols = np.r_[np.arange(n_cols - corner_col, n_cols), np.arange(0, corner_col + 1)]
    loop_ids = np.r_[tube_ids[slit, upper_cols], lower_ids[::-1]]
    loop_points = np.concatenate([grid[slit, upper_cols], lower_points[::-1]])
    loop_side = np.r_[0, np.ones(len(split_cols)), 0, -np.ones(len(split_cols))]
    loop_u = np.concatenate([u[slit, upper_cols], u[slit, split_cols][::-1]])
    pouch_points, pouch_faces, pouch_depth, pouch_vertical, pouch_side = _build_pouch(
        loop_ids, loop_points, loop_side, loop_u, corner_x, first_id=lower_ids.max() + 1)

    vertices = np.concatenate([cap_points, grid.reshape(-1, 3), lower_points, pouch_points])
    tube_faces = np.concatenate([_grid_quads(tube_ids[: slit + 1]), _grid_quads(lower_band)])
    cap_faces = _flip_to_match(cap_ids[cap_quads], tube_faces)
    faces = np.concatenate([cap_faces, tube_faces, pouch_faces])

    n_outer = len(vertices) - len(pouch_points)
    # Crown-cap vertices are far above the lips; 1 m stands for "nowhere near the mouth".
    outer_height = np.concatenate([np.full(len(cap_free), 1.0), lip_height.ravel(),
                                   np.zeros(len(lower_ids))])
    on_mouth = (np.abs(u) < 1.0) & (base[..., 1] < -0.07) & (np.abs(lip_height) < 0.03)
    outer_side = np.where(on_mouth, np.sign(lip_height), 0.0).ravel()
    outer_side[tube_ids[slit, split_cols] - len(cap_free)] = 1.0
    outer_side = np.concatenate([np.zeros(len(cap_free)), outer_side, -np.ones(len(lower_ids))])
    is_pouch = np.r_[np.zeros(n_outer, dtype=bool), np.ones(len(pouch_points), dtype=bool)]
    return _Skin(
        vertices=vertices, faces=faces,
        lip_side=np.r_[outer_side, pouch_side],
        lip_height=np.r_[outer_height, np.zeros(len(pouch_points))],
        pouch_depth=np.r_[np.zeros(n_outer), pouch_depth],
        pouch_vertical=np.r_[np.zeros(n_outer), pouch_vertical],
        is_pouch=is_pouch, corner_x=corner_x,
        corners=np.array([tube_ids[slit, corner_col], tube_ids[slit, n_cols - corner_col]]),
        upper_slit=tube_ids[slit, split_cols], lower_slit=lower_ids)


def _build_pouch(loop_ids, loop_points, loop_side, loop_u, corner_x, first_id):
    """Rings hanging inward from the lip loop and closing at a single end vertex.

    Ring k's vertex q sits behind loop vertex q: the early rings follow the curve of the
    lips (they are the inner faces of the lips), the deep ones flatten into a cavity with
    a level roof and floor."""
    count = len(loop_ids)
    half = count // 2
    # Angle-even lateral positions for the deep rings: the lips' column spacing is dense in
    # the middle, which would leave the rounded ends of a cavity ring coarse.
    q = np.arange(count)
    even_u = np.where(q <= half, -np.cos(np.pi * q / half), np.cos(np.pi * (q - half) / half))
    mid = loop_points[np.argmin(np.abs(loop_points[:, 0]))]
    # The lip line (where the lips touch) as a function of the lateral fraction, read off the
    # upper edge of the loop, which runs from the -X corner (u = -1) to the +X corner.
    upper = slice(0, half + 1)

    def lip_line(lateral, axis):
        return np.interp(lateral, loop_u[upper], loop_points[upper, axis])

    points, depth, vertical = [], [], []
    for k, (d, roof, floor, extra, expo) in enumerate(_POUCH_RINGS):
        settle = min(1.0, (k + 1) / 4.0)                 # 0 at the lips -> 1 in the cavity
        flat = _smoothstep(0.0, 0.05, d)                # how much the ring forgets the lip curve
        lateral = (1.0 - settle) * loop_u + settle * even_u
        lateral = np.clip(lateral, -1.0, 1.0)
        height = (1.0 - np.abs(lateral) ** expo) ** (1.0 / expo)
        vert = loop_side * height
        ring = np.empty((count, 3))
        ring[:, 0] = (corner_x + extra) * lateral
        ring[:, 1] = (1.0 - flat) * lip_line(lateral, 1) + flat * mid[1] + d
        ring[:, 2] = ((1.0 - flat) * lip_line(lateral, 2) + flat * mid[2]
                      + np.where(vert > 0, roof, floor) * vert)
        points.append(ring)
        depth.append(np.full(count, d))
        vertical.append(vert)
    end = np.array([[0.0, mid[1] + _POUCH_END_DEPTH, mid[2]]])
    points = np.concatenate(points + [end])

    ring_ids = [loop_ids] + [first_id + k * count + q for k in range(len(_POUCH_RINGS))]
    faces = []
    for outer, inner in zip(ring_ids[:-1], ring_ids[1:]):
        faces.append(np.stack([np.roll(outer, -1), outer, inner, np.roll(inner, -1)], -1))
    end_id = first_id + len(_POUCH_RINGS) * count
    last = ring_ids[-1]
    faces.append(np.stack([np.roll(last, -1), last, np.full(count, end_id), np.full(count, -1)], -1))
    side = np.concatenate([np.tile(loop_side, len(_POUCH_RINGS)), [0.0]])
    return (points, np.concatenate(faces), np.r_[np.concatenate(depth), _POUCH_END_DEPTH],
            np.r_[np.concatenate(vertical), 0.0], side)


# ----------------------------------------------------------------------------- bones

# The skull proxy: the cranium egg 6 mm inside the skin's, the face part deeper, cut flat
# underneath at the palate, which is level with the roots of the upper teeth and lies
# above the mouth pouch and medial to the mandible's condyles.
_SKULL_FACE_ROWS = [
    (0.000, -0.082, 0.000, 0.0735, 0.000, 0.093, 0.004, 2.2, 2.0),
    (-0.025, -0.083, -0.025, 0.0700, -0.022, 0.087, 0.004, 2.2, 2.0),
    (-0.045, -0.085, -0.045, 0.0600, -0.040, 0.078, 0.004, 2.2, 2.0),
    (-0.052, -0.0862, -0.052, 0.0570, -0.050, 0.072, 0.004, 2.3, 2.0),
    (PALATE_Z, -0.0866, PALATE_Z, 0.0540, PALATE_Z, 0.069, 0.004, 2.3, 2.0),
]


def _tube_mesh(start, rings, end):
    """Closed mesh from cross-section rings (P, M, 3) between two pole points, wound outward."""
    count, size = rings.shape[:2]
    vertices = np.concatenate([start[None], rings.reshape(-1, 3), end[None]])
    ids = 1 + np.arange(count * size).reshape(count, size)
    last = len(vertices) - 1
    pad = np.full(size, -1)
    faces = np.concatenate([
        np.stack([np.zeros(size, dtype=int), ids[0], np.roll(ids[0], -1), pad], -1),
        _grid_quads(ids),
        np.stack([np.full(size, last), np.roll(ids[-1], -1), ids[-1], pad], -1)])
    if _signed_volume(vertices, faces) < 0.0:
        faces = _reverse_faces(faces)
    return vertices, faces


def _signed_volume(vertices, faces):
    tri = _triangles(faces)
    a, b, c = vertices[tri[:, 0]], vertices[tri[:, 1]], vertices[tri[:, 2]]
    return float(np.einsum("ij,ij->", a, np.cross(b, c)) / 6.0)


def _triangles(faces):
    """Split quads (and keep -1-padded triangles) into triangles."""
    faces = np.asarray(faces)
    if faces.shape[1] == 3:
        return faces
    quads = faces[:, 3] >= 0
    return np.concatenate([faces[:, :3], faces[quads][:, [0, 2, 3]]])


def _build_skull():
    stack = _RingStack.from_rows(_cranium_rows(0.006, _CRANIUM_DEGREES, 2.2) + _SKULL_FACE_ROWS)
    phi = _column_angles(SKULL_COLUMNS, 0.3)
    s_cap = float(np.interp(np.radians(_CAP_DEGREES), np.radians(_CRANIUM_DEGREES),
                            stack.arc[:len(_CRANIUM_DEGREES)]))
    rows = _row_arcs(s_cap, stack.arc[-1], lambda s: np.full_like(s, 0.006))
    grid = stack.points(rows[:, None], phi[None, :])
    ids = np.arange(grid.shape[0] * grid.shape[1]).reshape(grid.shape[:2])
    vertices = [grid.reshape(-1, 3)]
    faces = [_grid_quads(ids)]
    next_id = ids.size

    # Crown: a quad disk on the egg. Palate: a flat quad disk inside the last ring.
    for rim_row, crown in ((0, True), (-1, False)):
        uv, quads, rim = _disk_patch(phi)
        free = np.setdiff1d(np.arange(len(uv)), rim)
        radius = np.linalg.norm(uv[free], axis=1)
        angle = np.arctan2(uv[free, 0], -uv[free, 1])
        if crown:
            points = stack.points(radius * s_cap, angle)
        else:
            edge = stack.points(np.full_like(angle, stack.arc[-1]), angle)
            centre = np.array([0.0, stack.keys[-1, 6], PALATE_Z])
            points = centre + radius[:, None] * (edge - centre)
        patch_ids = -np.ones(len(uv), dtype=np.int64)
        patch_ids[free] = next_id + np.arange(len(free))
        patch_ids[rim] = ids[rim_row]
        next_id += len(free)
        vertices.append(points)
        faces.append(_flip_to_match(patch_ids[quads], faces[0]))
    return np.concatenate(vertices), np.concatenate(faces)


def _superellipse(count, exponent):
    """Unit superellipse points (cos-like, sin-like) at `count` even angles."""
    a = 2.0 * np.pi * np.arange(count) / count
    e = 2.0 / exponent
    return np.sign(np.cos(a)) * np.abs(np.cos(a)) ** e, np.sign(np.sin(a)) * np.abs(np.sin(a)) ** e


def _symmetric_curve(half_points, spacing):
    """A curve through points mirrored across x = 0, sampled evenly by arc length.

    half_points run from the midline outward (first point on x = 0). Returns arc positions
    (negative on the -X side) and points, plus the spline for evaluation."""
    half = np.asarray(half_points, dtype=float)
    mirrored = half[:0:-1] * np.r_[-1.0, np.ones(half.shape[1] - 1)]
    pts = np.concatenate([mirrored, half])
    chord = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(pts, axis=0), axis=1))])
    chord -= chord[len(half) - 1]
    spline = CubicSpline(chord, pts, axis=0)
    dense = np.linspace(chord[0], chord[-1], 4001)
    arc = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(spline(dense), axis=0), axis=1))])
    arc -= np.interp(0.0, dense, arc)
    count = int(round((arc[-1] - arc[0]) / spacing))
    wanted = np.linspace(arc[0], arc[-1], count + 1)
    param = np.interp(wanted, arc, dense)
    return wanted, spline(param), (lambda a: spline(np.interp(a, arc, dense))), (arc[0], arc[-1])


# Tooth arch centre line (x, y) from the incisors back to the last molars.
_TEETH_ARCH = [(0.0, -0.0865), (0.0095, -0.0838), (0.0170, -0.0775), (0.0215, -0.0680),
               (0.0240, -0.0570), (0.0255, -0.0460)]


def _build_teeth(upper: bool):
    """A rounded-box arch swept along the dental arch, rounded off behind the last molars."""
    arc, centre, curve, _ = _symmetric_curve(_TEETH_ARCH, 0.0015)
    tangent = _unit(np.gradient(centre, axis=0))
    outward = np.stack([tangent[:, 1], -tangent[:, 0]], -1)        # away from the tongue
    half_length = arc[-1]
    from_end = half_length - np.abs(arc)
    rounding = 0.004
    taper = np.sqrt(np.clip(1.0 - (1.0 - np.minimum(from_end / rounding, 1.0)) ** 2, 0.0, 1.0))
    thickness = np.interp(np.abs(arc), [0.0, 0.02, 0.04, half_length], [0.0032, 0.0036, 0.0045, 0.0045])
    half_height = 0.5 * TEETH_HEIGHT
    sign = 1.0 if upper else -1.0
    z_mid = MOUTH_Z + sign * (0.5 * TEETH_BITE_GAP + half_height)
    across, up = _superellipse(20, 4.0)
    rings = np.empty((len(arc) - 2, len(across), 3))
    inner = slice(1, -1)
    rings[..., :2] = (centre[inner, None, :] + (thickness * taper)[inner, None, None]
                      * across[None, :, None] * outward[inner, None, :])
    rings[..., 2] = z_mid + (half_height * taper)[inner, None] * up[None, :]
    ends = np.c_[centre[[0, -1]], [z_mid, z_mid]]
    return _tube_mesh(ends[0], rings, ends[1])


# Mandible: a plate swept along a path drawn on a vertical "curtain" that follows the jaw's
# U in top view. Curtain coordinates are (s along the U, z, n across the plate); the path
# runs from one condyle down the ramus, along the body under the lower teeth, and up the
# other ramus, so the bone is one closed tube rounded off at the condyles.
_JAW_U = [(0.0, -0.0830), (0.0125, -0.0795), (0.0200, -0.0700), (0.0245, -0.0570),
          (0.0280, -0.0450), (0.0350, -0.0300), (0.0450, -0.0120), (0.0515, 0.0040),
          (0.0545, 0.0180), (0.0555, 0.0300)]
_JAW_TOP_Z = -0.0785             # alveolar crest under the lower teeth
_CONDYLE_RADIUS = 0.0055


def _build_jaw():
    _, _, curtain, (s_min, s_max) = _symmetric_curve(_JAW_U, 0.001)
    dense_s = np.linspace(0.0, s_max, 2001)
    s_condyle = float(np.interp(CONDYLE[1], curtain(dense_s)[:, 1], dense_s))
    x_under_condyle = float(curtain(s_condyle)[0])

    # The path (s, z) on the left half, from the chin midline to the top of the condyle.
    top = CONDYLE[2] + _CONDYLE_RADIUS
    half_path = [(0.0, -0.0900), (0.030, -0.0897), (0.060, -0.0893),
                 (s_condyle - 0.022, -0.0870), (s_condyle - 0.008, -0.0800),
                 (s_condyle - 0.002, -0.0680), (s_condyle, -0.0560), (s_condyle, top)]
    path_t, path, _, _ = _symmetric_curve(half_path, 0.002)
    # Half-height of the plate (in its own plane) and half-thickness, by path length from
    # the chin; the body's top edge stays at _JAW_TOP_Z.
    length = path_t[-1]
    anchors = np.array([0.0, 0.030, 0.060, length - 0.050, length - 0.030, length - 0.018,
                        length - 0.010, length - _CONDYLE_RADIUS, length])
    half_height = np.interp(np.abs(path_t), anchors,
                            [0.0115, 0.0112, 0.0105, 0.0125, 0.0125, 0.0060, 0.0045, 0.0055, 0.0055])
    half_thick = np.interp(np.abs(path_t), anchors,
                           [0.0055, 0.0048, 0.0045, 0.0040, 0.0035, 0.0035, 0.0040, 0.0045, 0.0045])
    from_end = length - np.abs(path_t)
    taper = np.sqrt(np.clip(1.0 - (1.0 - np.minimum(from_end / _CONDYLE_RADIUS, 1.0)) ** 2, 0.0, 1.0))
    tangent = _unit(np.gradient(path, axis=0))
    in_plane = np.stack([-tangent[:, 1], tangent[:, 0]], -1)
    across, up = _superellipse(24, 2.6)

    inner = slice(1, -1)
    s_z = path[inner, None, :] + ((half_height * taper)[inner, None, None]
                                 * across[None, :, None] * in_plane[inner, None, :])
    n = (half_thick * taper)[inner, None] * up[None, :]
    rings = _curtain_to_space(curtain, s_z[..., 0], s_z[..., 1], n, x_under_condyle)
    ends = _curtain_to_space(curtain, path[[0, -1], 0], path[[0, -1], 1], np.zeros(2), x_under_condyle)
    return _tube_mesh(ends[0], rings, ends[1])


def _curtain_to_space(curtain, s, z, n, x_under_condyle):
    """Map curtain coordinates to space; the rami lean outward so the condyles sit wider
    than the angles of the jaw, as on a real mandible."""
    flat = curtain(s.ravel())
    t = _unit(curtain(s.ravel() + 1e-4) - curtain(s.ravel() - 1e-4))
    outward = np.stack([t[:, 1], -t[:, 0]], -1)          # horizontal, away from the tongue
    lean_full = (CONDYLE[0] - x_under_condyle) / float(_smoothstep(-0.076, -0.040, CONDYLE[2]))
    lean = lean_full * _smoothstep(-0.076, -0.040, z.ravel()) * np.sign(s.ravel())
    xy = flat + n.ravel()[:, None] * outward
    xy[:, 0] += lean
    return np.c_[xy, z.ravel()].reshape(s.shape + (3,))


# ----------------------------------------------------------------------------- shape keys
# Each key is a displacement field over the neutral skin built from compactly supported
# bumps, so it is exactly zero away from the region it moves. Lip-specific keys read the
# bookkeeping of the mouth: which lip a vertex belongs to, how high above the lip line it
# sits, and how deep inside the mouth pouch it hangs.

@dataclass
class _KeyContext:
    skin: _Skin
    points: np.ndarray          # neutral skin vertices
    normals: np.ndarray         # outward vertex normals
    jaw_weight: np.ndarray      # how rigidly each vertex follows the mandible, 0..1
    mouth_centre: np.ndarray    # midpoint of the lip contact line
    corner_points: np.ndarray   # (2,3) mouth corners, +X first
    lateral: np.ndarray         # x / mouth-corner x, for every vertex

    def corner(self, side):
        return self.corner_points[0 if side > 0 else 1]

    def mirror(self, side, point):
        """A left-side (+X) anatomical point moved to the requested side."""
        return np.array([side * point[0], point[1], point[2]])

    def lip_weight(self, near=0.003, far=0.016, taper=True):
        """1 on the lips and the inner lip surfaces, fading over the skin around them and
        deeper inside the mouth; 0 beyond the mouth corners (tapering toward them unless
        taper is False)."""
        skin = self.skin
        depth = np.where(skin.is_pouch, skin.pouch_depth, np.abs(skin.lip_height))
        envelope = np.clip(1.0 - np.abs(self.lateral) ** 4, 0.0, 1.0) if taper else 1.0
        return (1.0 - _smoothstep(near, far, depth)) * envelope * (skin.lip_side != 0)


def _vertex_normals(vertices, faces):
    """Area-weighted vertex normals. A quad's normal is the cross product of its diagonals,
    which (unlike splitting it into two triangles) keeps mirror-image quads mirror-exact."""
    faces = np.asarray(faces)
    quad = faces[:, 3] >= 0
    v0, v1, v2 = (vertices[faces[:, k]] for k in range(3))
    v3 = vertices[np.where(quad, faces[:, 3], faces[:, 0])]
    face_normals = np.where(quad[:, None], np.cross(v2 - v0, v3 - v1), np.cross(v1 - v0, v2 - v0))
    normals = np.zeros_like(vertices)
    for k in range(4):
        used = faces[:, k] >= 0
        np.add.at(normals, faces[used, k], face_normals[used])
    return _unit(normals)


def _signed_saturate(t):
    """Smooth odd ramp: -1 for t <= -1, +1 for t >= 1."""
    return 2.0 * _smoothstep(-1.0, 1.0, t) - 1.0


def _jaw_weight(skin: _Skin) -> np.ndarray:
    """How much of the mandible's motion each skin vertex takes (1 = rigidly attached).

    The lower face follows the jaw and the upper face does not; the dividing line runs along
    the lip slit and on from the mouth corners toward the jaw hinge. Inside the mouth the
    split is sharp (upper lip 0, lower lip 1); from each corner outward the transition
    widens like a fan, because the cheek stretches more the further it is from the corner.
    The neck below the throat and everything behind the jaw do not move at all."""
    p = skin.vertices
    dy, dz = p[:, 1] - CONDYLE[1], p[:, 2] - CONDYLE[2]
    radius = np.hypot(dy, dz)
    angle_below_forward = np.arctan2(-dz, -dy)
    # The lip line is the middle of the slit: halfway between each upper/lower vertex pair.
    line = np.concatenate([0.5 * (p[skin.upper_slit] + p[skin.lower_slit]), p[skin.corners]])
    line = line[np.argsort(line[:, 0])]
    line_angle = np.interp(p[:, 0], line[:, 0], np.arctan2(-(line[:, 2] - CONDYLE[2]),
                                                           -(line[:, 1] - CONDYLE[1])))
    below = (angle_below_forward - line_angle) * radius
    corner_y = p[skin.corners[0], 1]
    beyond = np.hypot(np.maximum(np.abs(p[:, 0]) - skin.corner_x, 0.0),
                      np.maximum(p[:, 1] - corner_y, 0.0))
    inside_mouth = (np.abs(p[:, 0]) < skin.corner_x) & (p[:, 1] < corner_y)
    lateral = np.where(inside_mouth, np.abs(p[:, 0]) - skin.corner_x, beyond)
    fan = np.arctan2(below, lateral)
    weight = 0.5 + 0.5 * _signed_saturate(fan / np.radians(30.0))
    pouch = 0.5 - 0.5 * _signed_saturate(skin.pouch_vertical / 0.5)
    weight = np.where(skin.is_pouch, pouch, weight)
    # Ease both lips into the corner over a few millimetres, so a lip moving with the jaw
    # never overtakes the corner it is attached to.
    to_corner = np.min(np.linalg.norm(p[:, None, :] - p[skin.corners][None], axis=2), axis=1)
    weight = 0.5 + (weight - 0.5) * np.clip(to_corner / 0.008, 0.0, 1.0)
    behind_jaw = _smoothstep(0.012, 0.035, p[:, 1])
    neck = 1.0 - _smoothstep(-0.18, -0.13, p[:, 2])
    return weight * (1.0 - behind_jaw) * (1.0 - neck)


def _key_context(skin: _Skin) -> _KeyContext:
    p = skin.vertices
    mid = 0.5 * (p[skin.upper_slit] + p[skin.lower_slit])
    centre = mid[np.argmin(np.abs(mid[:, 0]))]
    return _KeyContext(skin=skin, points=p, normals=_vertex_normals(p, skin.faces),
                       jaw_weight=_jaw_weight(skin), mouth_centre=centre,
                       corner_points=p[skin.corners], lateral=p[:, 0] / skin.corner_x)


def _follow_jaw(ctx: _KeyContext, moved: np.ndarray) -> np.ndarray:
    """Delta of a rigid mandible motion (moved = where every point would go), blended by
    the jaw weight."""
    return ctx.jaw_weight[:, None] * (moved - ctx.points)


def _jaw_open(ctx):
    pivot = CONDYLE
    return _follow_jaw(ctx, _rotate_about_x(ctx.points, pivot, np.radians(JAW_OPEN_DEGREES)))


def _jaw_sideways(ctx, side):
    """Lateral excursion: the jaw swings about the condyle on the side it moves toward."""
    pivot = ctx.mirror(side, CONDYLE)
    return _follow_jaw(ctx, _rotate_about_z(ctx.points, pivot, side * np.radians(3.5)))


def _jaw_forward(ctx):
    return _follow_jaw(ctx, ctx.points + np.array([0.0, -0.005, 0.0]))


def _mouth_close(ctx, jaw_open_delta):
    """Lips pressed together with the jaw open: each lip covers half of the gap jawOpen
    makes at its column, so jawOpen + mouthClose shuts the mouth."""
    skin = ctx.skin
    gap = jaw_open_delta[skin.lower_slit] - jaw_open_delta[skin.upper_slit]
    column = ctx.lateral[skin.upper_slit]
    at = np.clip(ctx.lateral, -1.0, 1.0)
    half_gap = np.stack([np.interp(at, np.r_[-1.0, column, 1.0], np.r_[0.0, gap[:, k], 0.0])
                         for k in range(3)], -1) * 0.5
    weight = ctx.lip_weight(near=0.005, far=0.020, taper=False) * skin.lip_side
    return weight[:, None] * half_gap


def _mouth_smile(ctx, side):
    corner = ctx.corner(side)
    pull = np.array([0.0035 * side, 0.0040, 0.0065])         # up, back and out: ~8.4 mm
    # Inside the mouth only the inner lip surfaces follow; the cavity roof stays clear of
    # the palate.
    inner_lips = 1.0 - _smoothstep(0.004, 0.020, ctx.skin.pouch_depth)
    delta = pull * (_bump(ctx.points, corner, [0.028, 0.030, 0.026]) * inner_lips)[:, None]
    cheek_centre = corner + np.array([0.012 * side, 0.010, 0.022])
    cheek = _bump(ctx.points, cheek_centre, [0.025, 0.030, 0.020]) * ~ctx.skin.is_pouch
    delta += cheek[:, None] * (0.0030 * ctx.normals + np.array([0.0, 0.0, 0.0020]))
    return delta


def _mouth_frown(ctx, side):
    corner = ctx.corner(side)
    pull = np.array([0.0015 * side, -0.0010, -0.0055])
    return pull * _bump(ctx.points, corner + np.array([0.0, 0.0, -0.004]),
                        [0.022, 0.025, 0.030])[:, None]


def _around_mouth(ctx, radii=(0.040, 0.035, 0.030)):
    """Smooth weight over the lips and the skin around them, fading inside the mouth."""
    weight = _bump(ctx.points, ctx.mouth_centre + np.array([0.0, 0.006, 0.0]), radii, 2.0)
    depth = ctx.skin.pouch_depth
    return weight * (1.0 - _smoothstep(0.010, 0.035, depth))


def _mouth_pucker(ctx):
    w = _around_mouth(ctx)
    rel = ctx.points - ctx.mouth_centre
    delta = np.zeros_like(ctx.points)
    delta[:, 0] = -0.30 * rel[:, 0] * w                  # corners pulled toward the midline
    delta[:, 1] = -0.0075 * w                            # lips pushed forward
    delta[:, 2] = -0.15 * rel[:, 2] * w                  # and gathered toward the lip line
    return delta


def _mouth_funnel(ctx):
    w = _around_mouth(ctx)
    rel = ctx.points - ctx.mouth_centre
    lips = ctx.lip_weight(near=0.003, far=0.015) * (1.0 - ctx.lateral ** 2).clip(0.0, 1.0)
    opening = np.where(ctx.skin.lip_side > 0, 0.0030, -0.0035) * lips * np.abs(ctx.skin.lip_side)
    delta = np.zeros_like(ctx.points)
    delta[:, 0] = -0.18 * rel[:, 0] * w
    delta[:, 1] = -0.0050 * w - 0.0015 * lips           # flared lips stick out further
    delta[:, 2] = opening
    return delta


def _mouth_roll(ctx, upper: bool):
    """A lip rolls in over its teeth: it turns about an axis running inside the lip."""
    sign = 1.0 if upper else -1.0
    # The axis runs inside the lip just behind its front surface: the front of the lip
    # turns inward while the contact line rolls back and away from the other lip.
    pivot = ctx.mouth_centre + np.array([0.0, -0.002, sign * 0.0085])
    on_lip = ctx.lip_weight(near=0.006, far=0.016) * (ctx.skin.lip_side == sign)
    return _turn_about_x(ctx.points, pivot, sign * np.radians(35.0) * on_lip)


def _brow_inner_up(ctx):
    p = ctx.points
    pa = np.c_[np.abs(p[:, 0]), p[:, 1:]]
    lift = (0.0065 * _bump(pa, [0.016, -0.092, 0.026], [0.026, 0.040, 0.030])
            + 0.0030 * _bump(p, [0.0, -0.090, 0.045], [0.050, 0.050, 0.045]))
    return np.c_[np.zeros((len(p), 2)), lift]


def _brow_down(ctx, side):
    centre = ctx.mirror(side, [0.028, -0.090, 0.024])
    pull = np.array([-0.0020 * side, -0.0010, -0.0045])
    return pull * _bump(ctx.points, centre, [0.028, 0.035, 0.020])[:, None]


def _eye_blink(ctx, side):
    """The upper lid slides down over the eyeball: points turn about the eyeball's
    horizontal axis; the lid fold closes down onto the lower lid, the lower lid stays."""
    p = ctx.points
    outer = ~ctx.skin.is_pouch
    target = ctx.mirror(side, [0.032, -0.09, 0.001])
    on_eye = np.where(outer, np.hypot(p[:, 0] - target[0], p[:, 2] - target[2]), np.inf)
    on_eye[p[:, 1] > -0.05] = np.inf
    surface = p[np.argmin(on_eye)]
    centre = np.array([target[0], surface[1] + 0.012, target[2]])
    rel = p - centre
    elevation = np.arctan2(rel[:, 2], -rel[:, 1])
    lower, margin, top = np.radians([-20.0, 12.0, 55.0])
    closed = lower + 0.1 * (margin - lower)
    new = np.where(elevation < margin,
                   lower + (elevation - lower) * (closed - lower) / (margin - lower),
                   closed + (elevation - margin) * (top - closed) / (top - margin))
    turn = np.where((elevation > lower) & (elevation < top), elevation - new, 0.0)
    envelope = (_bump(np.c_[p[:, 0], p[:, 2]], target[[0, 2]], [0.017, 0.030], 1.0)
                * (np.linalg.norm(rel, axis=1) < 0.022) * outer)
    return _turn_about_x(p, centre, turn * envelope)


def _cheek_puff(ctx):
    p = ctx.points
    skin = ctx.skin
    pa = np.c_[np.abs(p[:, 0]), p[:, 1:]]
    cheeks = 0.0075 * _bump(pa, [0.045, -0.065, -0.058], [0.030, 0.035, 0.028]) * ~skin.is_pouch
    delta = cheeks[:, None] * ctx.normals
    # The air inside pushes the pouch's side walls out with the cheeks.
    walls = (_smoothstep(0.5, 0.95, np.abs(ctx.lateral) * skin.corner_x / (skin.corner_x + 0.006))
             * _smoothstep(0.004, 0.012, skin.pouch_depth)
             * (1.0 - _smoothstep(0.040, 0.052, skin.pouch_depth)) * skin.is_pouch)
    delta[:, 0] += 0.0060 * np.sign(p[:, 0]) * walls
    delta[:, 1] -= 0.0015 * ctx.lip_weight()             # lips bulge a little too
    return delta


def _nose_sneer(ctx, side):
    wing = ctx.mirror(side, [0.016, -0.100, -0.034])
    pull = np.array([-0.0005 * side, 0.0005, 0.0035])
    delta = pull * _bump(ctx.points, wing, [0.016, 0.030, 0.022])[:, None]
    side_of_nose = ctx.mirror(side, [0.010, -0.105, -0.015])
    delta[:, 2] += 0.0015 * _bump(ctx.points, side_of_nose, [0.012, 0.030, 0.020])
    return delta


def _shape_keys(ctx: _KeyContext):
    """ARKit shape keys in a fixed order; _L moves the subject's left (+X) side."""
    jaw_open = _jaw_open(ctx)
    keys = {
        "jawOpen": jaw_open,
        "jawLeft": _jaw_sideways(ctx, +1),
        "jawRight": _jaw_sideways(ctx, -1),
        "jawForward": _jaw_forward(ctx),
        "mouthClose": _mouth_close(ctx, jaw_open),
        "mouthSmile_L": _mouth_smile(ctx, +1),
        "mouthSmile_R": _mouth_smile(ctx, -1),
        "mouthFrown_L": _mouth_frown(ctx, +1),
        "mouthFrown_R": _mouth_frown(ctx, -1),
        "mouthPucker": _mouth_pucker(ctx),
        "mouthFunnel": _mouth_funnel(ctx),
        "mouthRollLower": _mouth_roll(ctx, upper=False),
        "mouthRollUpper": _mouth_roll(ctx, upper=True),
        "browInnerUp": _brow_inner_up(ctx),
        "browDown_L": _brow_down(ctx, +1),
        "browDown_R": _brow_down(ctx, -1),
        "eyeBlink_L": _eye_blink(ctx, +1),
        "eyeBlink_R": _eye_blink(ctx, -1),
        "cheekPuff": _cheek_puff(ctx),
        "noseSneer_L": _nose_sneer(ctx, +1),
        "noseSneer_R": _nose_sneer(ctx, -1),
    }
    return list(keys), np.stack(list(keys.values()))


# ----------------------------------------------------------------------------- the rig

def make_demo_rig() -> FaceRig:
    """Build the demo head: skin with mouth pouch, skull, mandible, teeth, ARKit keys.

    Landmarks and vertex groups are left empty on purpose: the model builder has to infer
    them from the shape keys, and the demo exercises that path."""
    skin = _build_skin()
    names, deltas = _shape_keys(_key_context(skin))
    skull_v, skull_f = _build_skull()
    jaw_v, jaw_f = _build_jaw()
    upper_v, upper_f = _build_teeth(upper=True)
    lower_v, lower_f = _build_teeth(upper=False)
    return FaceRig(
        vertices=skin.vertices, faces=skin.faces.astype(np.int64),
        shape_key_names=np.array(names), shape_key_deltas=deltas,
        upper_teeth_vertices=upper_v, upper_teeth_faces=upper_f.astype(np.int64),
        lower_teeth_vertices=lower_v, lower_teeth_faces=lower_f.astype(np.int64),
        skull_vertices=skull_v, skull_faces=skull_f.astype(np.int64),
        jaw_vertices=jaw_v, jaw_faces=jaw_f.astype(np.int64))
