"""The skin filter: what the simulation changes about the rig, shown only as finely as the tet
mesh can resolve it (issue 37, docs/performance.md).

The displayed skin of shape-key animation is the embedded simulation plus the fit's detail
residual (inverse/blend.py). Where the rig is played as it was fitted, one key at weight 1, that
is the rig's own shape; between and across keys it deviates from the plain rig frame
r = rest + Σ wₖ Δₖ by whatever the physics does differently. That deviation is carried by
tets 5–11 mm across, piecewise linear, with kinks at every tet face, yet it is shown on skin
triangles of a millimetre or less: at ICT's lip line a 1.5 mm deviation that turns within one
tet folds the sub-millimetre triangles over. Features finer than the tets are discretisation
error, not physics, so the deviation is low-passed on the skin surface before display:

    shown = r + u,   (M + τ² L M⁻¹ L) u = M (s − r),   τ = width² / 2

with L the cotangent Laplacian and M the lumped (barycentric) vertex areas of the rest skin: a
thin-plate smoothing that passes a mode of wavelength λ by 1 / (1 + (2π² width² / λ²)²). It is
geodesic, so the two lips (joined only around the mouth's inside) and the eyelids are smoothed
apart. A deviation of zero stays zero — a key played at weight 1 is shown exactly as the rig has
it — and a constant deviation passes unchanged (L 1 = 0).

A plate, not the membrane M + τ L, because broad deviations are physics the artist asked for and
must pass: a paralysed smile is the rig's smile missing on one side, a deviation as broad as the
key. At the demo head's mouth corner the membrane at 0.8 × the tet spacing kept 82 % of it (the
palsied corner moved 4.0 mm where the healthy one moved 8.2), the plate at 0.6 × keeps 97 %
(ICT: 88 % and 94 %); its roll-off is steeper, so the tet-face kinks still go.

Nothing filtered may end up inside a collider the simulation kept the skin out of. The smoothing
pulls the skin back toward the rig, and the rig's lips sink into the teeth and into each other,
so after each pass the filtered skin is tested against the collision scene:

1. up to PUSH_ROUNDS times, each vertex found deeper than the contact tolerance has twice the push
   onto its collider's tangent plane added to its deviation, and the whole is smoothed again — the
   push is spread like any deviation, so the lip bulges out smoothly;
2. what is still inside is pinned onto the tangent plane (a large weight in M) and the rest smoothed
   again, up to PIN_ROUNDS times;
3. a vertex inside after that is shown as simulated, where contact held it out.

Measured on ICT's lips closed over an open jaw (bench/performance.py, 55 frames with teeth and lip
contact, membrane at 0.8 ×): pins alone 109 creased edges at worst and folds in 21 frames, pushes
first 92 and 17 (pinning to the simulated skin instead keeps its crumple).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np
import scipy.sparse as sparse
from scipy.sparse.linalg import factorized

from ..collisions.contacts import BonePose

# The kernel's width as a share of the tet spacing at the mouth (the finest in the model): a
# tet-face kink is smoothed over about one tet. ICT (5.1 mm between the lips): 3.1 mm.
WIDTH_PER_MOUTH_SPACING = 0.6
PUSH_ROUNDS, PUSH_GAIN = 6, 2.0
PIN_WEIGHT = 1e6           # a pinned vertex's area weight, times its own
PIN_ROUNDS = 4

# keep_out(positions (V,3)) -> (offending (V,) bool, positions (V,3) with those moved out)
KeepOut = Callable[[np.ndarray], Tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class FilteredSkin:
    skin: np.ndarray           # (V,3) the skin to show
    pinned: int                # vertices pinned onto a collider's plane (pushes did not clear them)
    unfiltered: int            # vertices shown as simulated because pinning did not clear them either

    @property
    def held_by_colliders(self) -> int:
        """Vertices a collider kept from being filtered freely (RESULT.npz `filter_pinned`)."""
        return self.pinned + self.unfiltered


class SkinFilter:
    """The surface low-pass of the module docstring on one skin mesh, factorised once."""

    def __init__(self, rest_skin: np.ndarray, triangles: np.ndarray, width_m: float):
        if not (np.isfinite(width_m) and width_m > 0.0):
            raise ValueError(f"the skin filter's width must be a positive length in metres, got {width_m}")
        rest_skin = np.asarray(rest_skin, dtype=np.float64)
        triangles = np.asarray(triangles, dtype=np.int64)
        self.width_m = float(width_m)
        self.vertex_count = len(rest_skin)
        laplacian, self._areas = _cotangent_laplacian(rest_skin, triangles)
        tau = 0.5 * self.width_m ** 2
        self._plate = (tau ** 2 * (laplacian @ sparse.diags(1.0 / self._areas) @ laplacian)).tocsc()
        self._solve = factorized((sparse.diags(self._areas) + self._plate).tocsc())

    @staticmethod
    def for_model(model: dict, width_m: Optional[float] = None) -> "SkinFilter":
        """The filter of a model's skin; width from its mouth lattice spacing unless given."""
        return SkinFilter(model["skin_vertices"], model["skin_triangles"],
                          default_width(model) if width_m is None else width_m)

    def smooth(self, deviation: np.ndarray, pinned: Optional[np.ndarray] = None) -> np.ndarray:
        """(V,3) the low-passed deviation; pinned vertices (V,) bool keep theirs."""
        deviation = np.asarray(deviation, dtype=np.float64)
        if pinned is None or not pinned.any():
            solve, weights = self._solve, self._areas
        else:
            weights = self._areas * np.where(pinned, PIN_WEIGHT, 1.0)
            solve = factorized((sparse.diags(weights) + self._plate).tocsc())
        right = weights[:, None] * deviation
        return np.stack([solve(np.ascontiguousarray(right[:, axis])) for axis in range(3)], axis=1)

    def apply(self, skin: np.ndarray, rig: np.ndarray, keep_out: Optional[KeepOut] = None) -> FilteredSkin:
        """The skin to show for simulated skin `skin` and plain rig frame `rig` (both (V,3), same
        space). `keep_out(positions) -> ((V,) bool, (V,3))`: the vertices a collider holds deeper
        than its tolerance, and positions with those moved out onto its surface (module docstring)."""
        skin, rig = np.asarray(skin, dtype=np.float64), np.asarray(rig, dtype=np.float64)
        held = skin - rig                       # the deviation to smooth, or to hold where pinned
        shown = rig + self.smooth(held)
        if keep_out is None:
            return FilteredSkin(shown, 0, 0)
        for _ in range(PUSH_ROUNDS):
            offending, moved = keep_out(shown)
            if not offending.any():
                return FilteredSkin(shown, 0, 0)
            held[offending] += PUSH_GAIN * (moved[offending] - shown[offending])
            shown = rig + self.smooth(held)
        pinned = np.zeros(self.vertex_count, dtype=bool)
        for _ in range(PIN_ROUNDS):
            offending, moved = keep_out(shown)
            if not offending.any():
                return FilteredSkin(shown, int(pinned.sum()), 0)
            pinned |= offending
            held[offending] = moved[offending] - rig[offending]
            shown = rig + self.smooth(held, pinned)
            shown[pinned] = rig[pinned] + held[pinned]      # the weight makes them all but exact; make them exact
        offending, _ = keep_out(shown)
        shown[offending] = skin[offending]      # still inside: the simulated skin, which contact kept out
        return FilteredSkin(shown, int(pinned.sum()), int(offending.sum()))


    def apply_in_scene(self, skin: np.ndarray, rig: np.ndarray, collisions, pose: BonePose,
                       tolerance: float) -> FilteredSkin:
        """`apply` kept out of a collision scene's colliders at `pose` (none when `collisions` is None)."""
        keep_out = None if collisions is None else collision_keep_out(collisions, pose, tolerance)
        return self.apply(skin, rig, keep_out)


def collision_keep_out(collisions, pose: BonePose, tolerance: float):
    """keep_out(positions) for SkinFilter.apply: the skin vertices a collider of the scene holds
    deeper than `tolerance` (after its rest allowance), and the positions with each of those
    moved onto its deepest plane, `tolerance` / 2 inside the allowed side."""
    def keep_out(positions: np.ndarray):
        found = collisions.detect(positions, pose)
        deep = found.depth > tolerance
        order = np.argsort(found.depth[deep])           # the deepest plane of a vertex written last
        vertex, point, normal = found.vertex[deep][order], found.point[deep][order], found.normal[deep][order]
        moved = np.array(positions, dtype=np.float64, copy=True)
        offending = np.zeros(len(positions), dtype=bool)
        offending[vertex] = True
        push = np.einsum("ij,ij->i", normal, point - positions[vertex]) + 0.5 * tolerance
        moved[vertex] = positions[vertex] + push[:, None] * normal
        return offending, moved
    return keep_out


def default_width(model: dict) -> float:
    """WIDTH_PER_MOUTH_SPACING × the model's tet spacing at the mouth (build_info; the uniform
    spacing for models built before the graded lattice)."""
    info = json.loads(str(model["build_info"])) if "build_info" in model else {}
    spacing = info.get("mouth_lattice_spacing_m") or info.get("lattice_spacing_m")
    if not spacing:
        raise ValueError("the model records no lattice spacing (build_info); give the skin filter's width")
    return WIDTH_PER_MOUTH_SPACING * float(spacing)


def _cotangent_laplacian(vertices: np.ndarray, triangles: np.ndarray) -> tuple[sparse.csr_matrix, np.ndarray]:
    """(L (V,V) positive semi-definite cotangent Laplacian, lumped areas (V,)): a third of each
    triangle's area to each corner. Negative cotangents (obtuse angles) are kept: L stays
    symmetric with zero row sums, and L M⁻¹ L positive semi-definite."""
    count = len(vertices)
    rows, columns, values = [], [], []
    for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        u = vertices[triangles[:, a]] - vertices[triangles[:, c]]
        v = vertices[triangles[:, b]] - vertices[triangles[:, c]]
        cross = np.linalg.norm(np.cross(u, v), axis=1)
        cotangent = np.einsum("ij,ij->i", u, v) / np.maximum(cross, 1e-30)
        rows += [triangles[:, a], triangles[:, b]]
        columns += [triangles[:, b], triangles[:, a]]
        values += [0.5 * cotangent, 0.5 * cotangent]
    weights = sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                                shape=(count, count))
    laplacian = sparse.diags(np.asarray(weights.sum(axis=1)).ravel()) - weights
    corners = vertices[triangles]
    area = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    areas = np.zeros(count)
    for corner in range(3):
        np.add.at(areas, triangles[:, corner], area / 3.0)
    # A vertex on no triangle has no area: give it a tiny one so it simply keeps its deviation.
    areas = np.where(areas > 0.0, areas, max(areas.max(initial=0.0), 1e-12) * 1e-6)
    return laplacian.tocsr(), areas
