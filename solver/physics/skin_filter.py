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

    shown = r + u,   (M₀ + τ² L M⁻¹ L) u = M₀ (s − r),   τ = width² / 2

a thin-plate smoothing that passes a mode of wavelength λ by 1 / (1 + (2π² width² / λ²)²).
M₀ is the lumped (barycentric) vertex area of the rest skin, the weight of the data; L and M,
the cotangent Laplacian and lumped areas of the plate, are measured on the plain rig frame r,
the surface the artist sees. Measured on the rest skin instead, a deviation that is smooth there
turns within the few triangles a pressed mouth corner squashes to a tenth of their width, and
folds them: on ICT's four hardest windows 35 of 220 frames had folds, all within 3 mm of the
mouth corners, with deviations of 0.2–3 mm; measured on the rig frame, 10 (docs/performance.md).
A triangle squashed below SQUASHED_AREA_FLOOR of its rest area counts as that large, which keeps
its stiffness finite and the plate positive semi-definite (a triangle's part is the Gram matrix of
its edges over four times its area). The pattern of the matrix is the mesh's; CHOLMOD analyses it
once per filter and factorises each frame's values once (~0.06 s on ICT's 14,062 skin vertices);
the pins and the fold guard below add low-rank terms, which update copies of that factor where
the back end can (scikit-sparse) and are factorised afresh where it cannot (cholespy).

The smoothing is geodesic, so the two lips (joined only around the mouth's inside) and the eyelids
are smoothed apart. A deviation of zero stays zero — a key played at weight 1 is shown exactly as
the rig has it — and a constant deviation passes unchanged (L 1 = 0).

A plate, not the membrane M + τ L, because broad deviations are physics the artist asked for and
must pass: a paralysed smile is the rig's smile missing on one side, a deviation as broad as the
key. At the demo head's mouth corner the membrane at 0.8 × the tet spacing kept 82 % of it (the
palsied corner moved 4.0 mm where the healthy one moved 8.2), the plate at 0.6 × keeps 96 %
(ICT: 88 % and 95 %; the plate measured on the rig frame of the full smile); its roll-off is
steeper, so the tet-face kinks still go.

Nothing filtered may end up inside a collider the simulation kept the skin out of. The smoothing
pulls the skin back toward the rig, and the rig's lips sink into the teeth and into each other,
so after each pass the filtered skin is tested against the collision scene:

1. up to PUSH_ROUNDS times, each vertex found deeper than the contact tolerance has twice the push
   onto its collider's tangent plane added to its deviation, and the whole is smoothed again — the
   push is spread like any deviation, so the lip bulges out smoothly;
2. what is still inside is pinned onto the tangent plane (a large weight in M₀) and the rest smoothed
   again, up to PIN_ROUNDS times;
3. a vertex inside after that is shown as simulated, where contact held it out.

Measured on ICT's lips closed over an open jaw (bench/performance.py, 55 frames with teeth and lip
contact, membrane at 0.8 ×): pins alone 109 creased edges at worst and folds in 21 frames, pushes
first 92 and 17 (pinning to the simulated skin instead keeps its crumple).

The fold guard. The plate removes kinks but passes gradients, and a deviation that changes by
a millimetre over a millimetre turns sub-millimetre triangles over where the rig squashes or
creases them: ICT's mouth corners have quads 0.3 mm across in a crevice the rest face folds
to 174°. After the passes above, every pair of triangles a viewer may show side by side —
each quad split either way (geometry/bends.py, AnySplitBends; a quad can be smooth along one
diagonal and folded along the other) — is measured against the rig frame. Where a pair bends
more than FOLD_GUARD_DEGREES beyond the rig, the skin triangles with two corners on that pair
get a membrane (their cotangent Laplacian on the rig frame, FOLD_GUARD_STIFFNESS × width²),
which holds the deviation flat across them, so they show the rig's own shape carried along;
the smoothing and the collider passes run again, with the membrane FOLD_GUARD_ESCALATION
times stiffer and the guarded triangles growing while pairs stay bent, up to
FOLD_GUARD_ROUNDS rounds. A frame where nothing bends that far is filtered exactly as before.
The round shown is the least bent (degrees beyond FOLD_GUARD_DEGREES, summed over the pairs),
not the last: where a collider pins skin inside a guarded patch, the stiffer membrane carries
the pinned deviation over the whole patch and turns it at the patch's edge, so a later round
can bend more pairs than an earlier one (ICT, the lips closed over an open jaw, 75 frames:
at most 17 creased edges shown instead of 32).
The guard is small by design: a membrane over a whole filter width (tried first) held the rig's
lips inside the teeth against the pins and doubled the creases. On ICT's 1,415-frame take it
fired on 114 frames, on 20 vertices (median; at most 129), and took the take from 7 frames with
a folded edge to none (docs/performance.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np
import scipy.sparse as sparse

from ..collisions.contacts import BonePose
from ..geometry import triangle_normals_areas
from ..geometry.bends import AnySplitBends
from .cholesky import SparseCholesky
from .plate_assembly import PlateAssembly, lumped_areas

# The kernel's width as a share of the tet spacing at the mouth (the finest in the model): a
# tet-face kink is smoothed over about one tet. ICT (5.1 mm between the lips): 3.1 mm.
WIDTH_PER_MOUTH_SPACING = 0.6
PUSH_ROUNDS, PUSH_GAIN = 6, 2.0
PIN_WEIGHT = 1e6           # a pinned vertex's area weight, times its own
PIN_ROUNDS = 4
# A triangle the rig squashes below this share of its rest area counts as this large when the
# smoothing is measured on the rig frame: its stiffness stays finite (and positive semi-definite).
SQUASHED_AREA_FLOOR = 0.05

# The fold guard: where the filtered skin still bends a pair of shown triangles this much beyond
# the rig frame, the triangles with two corners on that pair get a membrane of
# FOLD_GUARD_STIFFNESS × width², FOLD_GUARD_ESCALATION times stiffer each round while folds remain.
FOLD_GUARD_DEGREES = 45.0
FOLD_GUARD_STIFFNESS = 1.0
FOLD_GUARD_ESCALATION = 10.0
FOLD_GUARD_ROUNDS = 4

# keep_out(positions (V,3)) -> (offending (V,) bool, positions (V,3) with those moved out)
KeepOut = Callable[[np.ndarray], Tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class FilteredSkin:
    skin: np.ndarray           # (V,3) the skin to show
    pinned: int                # vertices pinned onto a collider's plane (pushes did not clear them)
    unfiltered: int            # vertices shown as simulated because pinning did not clear them either
    guarded: int = 0           # vertices on triangles the fold guard held flat

    @property
    def held_by_colliders(self) -> int:
        """Vertices a collider kept from being filtered freely (RESULT.npz `filter_pinned`)."""
        return self.pinned + self.unfiltered


class SkinFilter:
    """The surface low-pass of the module docstring on one skin mesh: its sparsity and CHOLMOD's
    symbolic analysis are made once, each rig frame only refills the values."""

    def __init__(self, rest_skin: np.ndarray, triangles: np.ndarray, width_m: float,
                 faces: Optional[np.ndarray] = None, fold_guard_rounds: int = FOLD_GUARD_ROUNDS):
        if not (np.isfinite(width_m) and width_m > 0.0):
            raise ValueError(f"the skin filter's width must be a positive length in metres, got {width_m}")
        rest_skin = np.asarray(rest_skin, dtype=np.float64)
        self.triangles = np.asarray(triangles, dtype=np.int64)
        self.width_m = float(width_m)
        self.fold_guard_rounds = int(fold_guard_rounds)      # 0: the plate and the colliders only
        self.vertex_count = len(rest_skin)
        self._tau = 0.5 * self.width_m ** 2
        self._rest_triangle_areas = triangle_normals_areas(rest_skin, self.triangles)[1]
        self._areas = lumped_areas(self._rest_triangle_areas, self.triangles, self.vertex_count)
        # The pattern of M + L M⁻¹ L (vertices two edges apart) and the plate's places in it.
        self._plate_assembly = PlateAssembly(self.triangles, self.vertex_count)
        self._pattern = self._plate_assembly.pattern
        self._pattern_keys = _keys(self._pattern.tocoo())
        # The fold guard looks at the faces as shown: each quad split either way (geometry/bends.py).
        self._shown_bends = AnySplitBends(self.triangles if faces is None else faces, self.vertex_count)
        self._cholesky = SparseCholesky(self._matrix(self._plate(rest_skin), self._areas))

    @staticmethod
    def for_model(model: dict, width_m: Optional[float] = None) -> "SkinFilter":
        """The filter of a model's skin; width from its mouth lattice spacing unless given. The
        fold guard checks the rig's own faces (`skin_faces`; the triangles in models built before)."""
        return SkinFilter(model["skin_vertices"], model["skin_triangles"],
                          default_width(model) if width_m is None else width_m, faces=model.get("skin_faces"))

    def apply(self, skin: np.ndarray, rig: np.ndarray, keep_out: Optional[KeepOut] = None) -> FilteredSkin:
        """The skin to show for simulated skin `skin` and plain rig frame `rig` (both (V,3), same
        space). `keep_out(positions) -> ((V,) bool, (V,3))`: the vertices a collider holds deeper
        than its tolerance, and positions with those moved out onto its surface (module docstring).
        Where the result still bends a pair of shown triangles FOLD_GUARD_DEGREES beyond the rig,
        the fold guard holds the deviation flat there and filters again; the least-bent round is
        shown."""
        skin, rig = np.asarray(skin, dtype=np.float64), np.asarray(rig, dtype=np.float64)
        plate = self._plate(rig)
        self._cholesky.factorise(self._matrix(plate, self._areas))
        plate_factor = self._cholesky.current
        shown = self._kept_out(skin, rig, plate, plate_factor, keep_out)
        if not self.fold_guard_rounds:
            return shown
        guarded = np.zeros(len(self.triangles), dtype=bool)
        kept, kept_guarded, least = shown, guarded, np.inf
        stiffness = FOLD_GUARD_STIFFNESS * self.width_m ** 2
        rig_bends = self._shown_bends.angles(rig)
        for round_ in range(self.fold_guard_rounds + 1):
            excess = np.degrees(self._shown_bends.angles(shown.skin) - rig_bends)
            # A stiffer membrane on a small patch moves the turn of the deviation to the patch's
            # edge, where it can bend more pairs than before: keep the least-bent round.
            overshoot = np.maximum(excess - FOLD_GUARD_DEGREES, 0.0).sum()
            if overshoot < least:
                kept, kept_guarded, least = shown, guarded, overshoot
            bent = excess > FOLD_GUARD_DEGREES
            if not bent.any() or round_ == self.fold_guard_rounds:
                break
            near = np.zeros(self.vertex_count, dtype=np.int64)
            near[np.unique(self._shown_bends.pair_vertices[bent])] = 1
            guarded = guarded | (near[self.triangles].sum(axis=1) >= 2)
            smoothing = plate + stiffness * self._membrane(rig, guarded)
            shown = self._kept_out(skin, rig, smoothing,
                                   self._guarded_factor(plate_factor, smoothing, rig, guarded, stiffness), keep_out)
            stiffness *= FOLD_GUARD_ESCALATION
        guarded_vertices = np.zeros(self.vertex_count, dtype=bool)
        guarded_vertices[self.triangles[kept_guarded].ravel()] = True
        return FilteredSkin(kept.skin, kept.pinned, kept.unfiltered, int(guarded_vertices.sum()))

    def _guarded_factor(self, plate_factor, smoothing: sparse.csc_matrix, rig: np.ndarray, guarded: np.ndarray,
                        stiffness: float):
        """The factor of diag(areas) + `smoothing` (the plate and the guard's membrane): a copy of
        the frame's plate factor updated by the membrane, a rank-3 term per guarded triangle, where
        the back end can update (ICT: tens of triangles against a 56–72 ms factorisation), else
        factorised."""
        if not plate_factor.can_modify:
            self._cholesky.factorise(self._matrix(smoothing, self._areas))
            return self._cholesky.current
        factor = plate_factor.copy()
        factor.modify(self._membrane_columns(rig, guarded, stiffness))
        return factor

    def _kept_out(self, skin: np.ndarray, rig: np.ndarray, smoothing: sparse.csc_matrix, free,
                  keep_out: Optional[KeepOut]) -> FilteredSkin:
        """The deviation smoothed with `smoothing` (the plate, and the guard's membrane; `free` its
        factor with the areas' weights), then pushed and pinned out of the colliders (module
        docstring, 1–3)."""
        pinned_factor, in_factor = None, np.zeros(self.vertex_count, dtype=bool)

        def smooth(deviation, pinned=None):
            nonlocal pinned_factor
            if pinned is None:
                return free.solve(self._areas[:, None] * deviation)
            weights = self._areas * np.where(pinned, PIN_WEIGHT, 1.0)
            if not free.can_modify:
                self._cholesky.factorise(self._matrix(smoothing, weights))
                return self._cholesky.solve(weights[:, None] * deviation)
            # Pinning raises a few diagonal entries: a rank update of a copy of the free factor,
            # by the vertices pinned since the last round, instead of a factorisation (ICT skin,
            # 14,062 vertices: 12-25 ms for 10-200 pins against 56-72 ms).
            if pinned_factor is None:
                pinned_factor = free.copy()
            new = np.flatnonzero(pinned & ~in_factor)
            if len(new):
                pinned_factor.modify(sparse.csc_matrix(
                    (np.sqrt((PIN_WEIGHT - 1.0) * self._areas[new]), (new, np.arange(len(new)))),
                    shape=(self.vertex_count, len(new))))
                in_factor[new] = True
            return pinned_factor.solve(weights[:, None] * deviation)

        held = skin - rig                       # the deviation to smooth, or to hold where pinned
        shown = rig + smooth(held)
        if keep_out is None:
            return FilteredSkin(shown, 0, 0)
        for _ in range(PUSH_ROUNDS):
            offending, moved = keep_out(shown)
            if not offending.any():
                return FilteredSkin(shown, 0, 0)
            held[offending] += PUSH_GAIN * (moved[offending] - shown[offending])
            shown = rig + smooth(held)
        pinned = np.zeros(self.vertex_count, dtype=bool)
        for _ in range(PIN_ROUNDS):
            offending, moved = keep_out(shown)
            if not offending.any():
                return FilteredSkin(shown, int(pinned.sum()), 0)
            pinned |= offending
            held[offending] = moved[offending] - rig[offending]
            shown = rig + smooth(held, pinned)
            shown[pinned] = rig[pinned] + held[pinned]      # the weight makes them all but exact; make them exact
        offending, _ = keep_out(shown)
        shown[offending] = skin[offending]      # still inside: the simulated skin, which contact kept out
        return FilteredSkin(shown, int(pinned.sum()), int(offending.sum()))

    def _membrane(self, surface: np.ndarray, guarded: np.ndarray) -> sparse.csr_matrix:
        """The cotangent Laplacian of the guarded triangles only, measured on `surface` (the rig
        frame), squashed triangles floored as in the plate."""
        return self._plate_assembly.laplacian(surface, SQUASHED_AREA_FLOOR * self._rest_triangle_areas, guarded)

    def _membrane_columns(self, surface: np.ndarray, guarded: np.ndarray, stiffness: float) -> sparse.csc_matrix:
        """C with C Cᵀ = stiffness × `_membrane(surface, guarded)`: a triangle's part is the Gram
        matrix of its edges e_i (opposite corner i) over 4 × area, so its three columns hold the
        x, y and z components of e_i √(stiffness / (4 area)) in the rows of its corners."""
        triangles = self.triangles[guarded]
        corners = surface[triangles]                                              # (G, 3, 3)
        opposite = np.roll(corners, -1, axis=1) - np.roll(corners, 1, axis=1)     # e_i = p_{i+1} − p_{i−1}
        scale = np.sqrt(stiffness / (4.0 * self._floored_areas(surface, guarded)))
        columns = 3 * np.arange(len(triangles))[:, None, None] + np.arange(3)
        return sparse.csc_matrix(((opposite * scale[:, None, None]).ravel(),
                                  (np.broadcast_to(triangles[:, :, None], opposite.shape).ravel(),
                                   np.broadcast_to(columns, opposite.shape).ravel())),
                                 shape=(self.vertex_count, 3 * len(triangles)))

    def _floored_areas(self, surface: np.ndarray, chosen=slice(None)) -> np.ndarray:
        """Areas of the `chosen` triangles on `surface`, each at least SQUASHED_AREA_FLOOR of its
        rest area (finite stiffness, positive semi-definite; module docstring)."""
        return np.maximum(triangle_normals_areas(surface, self.triangles[chosen])[1],
                          SQUASHED_AREA_FLOOR * self._rest_triangle_areas[chosen])

    def _plate(self, surface: np.ndarray) -> sparse.csc_matrix:
        """τ² L M⁻¹ L measured on `surface` (the rest skin or a rig frame), squashed triangles
        floored at SQUASHED_AREA_FLOOR of their rest area, on the fixed pattern (plate_assembly.py)."""
        values = self._plate_assembly.values(surface, SQUASHED_AREA_FLOOR * self._rest_triangle_areas, self._tau)
        return sparse.csc_matrix((values, self._pattern.indices, self._pattern.indptr), shape=self._pattern.shape)

    def _matrix(self, smoothing: sparse.csc_matrix, weights: np.ndarray) -> sparse.csc_matrix:
        """diag(weights) + `smoothing` (the plate, or the plate and the guard's membrane) with its
        values written into the fixed pattern."""
        if smoothing.nnz == self._pattern.nnz:
            # Whatever is smoothed with lies within the pattern, so as many entries (in canonical,
            # sorted order) are the pattern's own: the plate, or the plate and a membrane.
            data = smoothing.data.copy()
        else:
            values = smoothing.tocoo()
            data = np.zeros(self._pattern.nnz)
            data[np.searchsorted(self._pattern_keys, _keys(values))] = values.data
        data[self._plate_assembly.diagonal_places] += weights
        return sparse.csc_matrix((data, self._pattern.indices, self._pattern.indptr), shape=self._pattern.shape)

    def apply_in_scene(self, skin: np.ndarray, rig: np.ndarray, collisions, pose: BonePose,
                       tolerance: float) -> FilteredSkin:
        """`apply` kept out of a collision scene's colliders at `pose` (none when `collisions` is None)."""
        keep_out = None if collisions is None else collision_keep_out(collisions, pose, tolerance)
        return self.apply(skin, rig, keep_out)


def collision_keep_out(collisions, pose: BonePose, tolerance: float):
    """keep_out(positions) for SkinFilter.apply: the skin vertices a collider of the scene holds
    deeper than `tolerance` (after its shown allowance: the lips may overlap next to the mouth
    corners as the rig's do, collisions/scene.py), and the positions with each of those
    moved onto its deepest plane, `tolerance` / 2 inside the allowed side."""
    def keep_out(positions: np.ndarray):
        found = collisions.detect(positions, pose, shown=True)
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


def _keys(coo: sparse.coo_matrix) -> np.ndarray:
    """Column-major keys of a matrix's entries: sorted for a canonical CSC pattern."""
    return coo.col.astype(np.int64) * coo.shape[0] + coo.row.astype(np.int64)
