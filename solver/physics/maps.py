"""Painted maps: skin-vertex scalars diffused into the tet mesh, and what fat, stiffness, density
and paralysis maps do to the material (paper 000 §8).

A user paints a scalar per rig (skin) vertex. `diffuse_skin_map` carries it into the volume the
way Phace does: onto the tet nodes under the skin, then forward-Euler diffusion with the
volumetric Laplacian for a user-set number of steps and time step, then one value per tet.

Diffusion time is a squared length. The heat kernel of u_t = −M⁻¹L u (u_t = Δu) spreads a
point over a standard deviation √(2t) per axis. The defaults, 10 steps of 3e-6 m²
(t = 3e-5 m², √(2t) ≈ 7.7 mm), carry a painted patch 1–2 cm into the tissue: on the 35k-tet
ICT face a 3 cm cheek patch of 1s fills the tissue under it down to the bone (≈ 0.4 in the
tets just under the skin, ≈ 0.3 a centimetre deep), is ≈ 0.04 (at most 0.15) 0.5–1.5 cm
beyond the patch's edge, under 0.025 further out, and leaves the forehead at 0 (< 1e-11).
Diffusion conserves the mass-weighted integral, so a painted value is diluted into the
volume under it: paint, or choose the fat scale, with that in mind. The step is a physical
quantity independent of the mesh: a step larger than the mesh's explicit limit is split into
equal substeps (see `VolumetricLaplacian.stable_time_step`), so the same settings give the
same spread at 4k, 35k or 100k tets.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

import numpy as np
import scipy.sparse as sp

from .. import field_checks
from ..field_checks import FieldError
from ..model_file import model_landmarks

# The settings' defaults and ranges, the multiplier limits and the presets live in
# settings.json, which the Blender add-on reads too (its sliders and preset buttons).
NUMBERS = json.loads((Path(__file__).with_name("settings.json")).read_text(encoding="utf-8"))
_SETTINGS = NUMBERS["settings"]
DEFAULT_DIFFUSION_STEPS = _SETTINGS["diffusion_steps"]["default"]
DEFAULT_DIFFUSION_TIME_STEP_M2 = _SETTINGS["diffusion_time_step_m2"]["default"]
FAT_SCALE_RANGE = tuple(_SETTINGS["fat_scale"]["range"])        # Phace's fat levels stop at 30 % growth
MAX_DIFFUSION_STEPS = _SETTINGS["diffusion_steps"]["range"][1]
DIFFUSION_TIME_STEP_RANGE_M2 = tuple(_SETTINGS["diffusion_time_step_m2"]["range"])
# steps × time step: a painted point spreads by about √(2t); 1.25e-3 m² is 5 cm, past which a
# map is a constant. Each step is split into substeps stable on the mesh (≈ 3e-7 m² on ICT's
# 35k tets), so this also bounds the work: ~4,000 sparse products there. Time step 1 m² asked
# for ~480k substeps a step.
MAX_DIFFUSION_TIME_M2 = NUMBERS["max_diffusion_time_m2"]
# The artist sets the diffusion as a spread (about how far a painted point reaches, √(2t));
# it becomes steps of at most the default time step, the resolution the defaults were tuned at.
DIFFUSION_SPREAD_RANGE_M = tuple(_SETTINGS["diffusion_spread_m"]["range"])
# The multipliers a painted stiffness or density map may reach at weight 0 and 1.
PAINTED_MULTIPLIER_LIMITS = tuple(NUMBERS["painted_multiplier_range"])

# Fat softens tissue (paper 000 §8): for its three levels of fattening the paper lowers μ to
# 0.8, 0.5 and 0.3, and keeps μ = 1 for slimming. The paper does not give the scales of the
# three levels; we place them at 10 %, 20 % and 30 % local linear growth (s = 1.1, 1.2, 1.3,
# i.e. +33 %, +73 %, +120 % volume; fat-scale 1.3 on a fully fat region is the strongest
# level) and interpolate linearly in the growth s − 1 between them, holding 0.3 beyond.
FAT_GROWTH_LEVELS = (0.0, 0.1, 0.2, 0.3)
FAT_MU_MULTIPLIERS = (1.0, 0.8, 0.5, 0.3)
# How much of that softening applies (the artist's "stiffness reduction" control): the μ
# multiplier is 1 − f · (1 − m_paper), so 1 gives the paper's levels and 0 keeps grown tissue
# as stiff as before; in between it blends linearly.
DEFAULT_FAT_SOFTENING = _SETTINGS["fat_softening"]["default"]

# Zombie (paper 000 §8, Fig. 13-e): heavier cheeks for sagging flesh (density 1 → 3 g/cm³),
# stiffer tissue round the lips and eyes so muscles cannot pull the loose flesh too far, and
# softer cheeks; the paper's final μ ranges over 0.7 – 5.7.
ZOMBIE_STIFFNESS_RANGE = tuple(NUMBERS["presets"]["zombie"]["stiffness_range"])
ZOMBIE_DENSITY_MAX = NUMBERS["presets"]["zombie"]["density_range"][1]


class MapSettingsError(FieldError):
    """A map setting is out of range (the requests show it under each front door's spelling)."""


@dataclass(frozen=True)
class MapSettings:
    """How the painted maps act, checked once here for every front door: `fat_scale` S (grown
    fat is s = 1 + (S − 1) fat), `fat_softening` (how much grown fat softens, `fat_plasticity`),
    and the diffusion that carries every map into the volume (`diffusion_steps` steps of
    `diffusion_time_step_m2`)."""
    fat_scale: float = 1.0
    fat_softening: float = DEFAULT_FAT_SOFTENING
    diffusion_steps: int = DEFAULT_DIFFUSION_STEPS
    diffusion_time_step_m2: float = DEFAULT_DIFFUSION_TIME_STEP_M2

    def __post_init__(self):
        put = object.__setattr__
        put(self, "fat_scale", field_checks.number(self.fat_scale, "fat_scale", *FAT_SCALE_RANGE,
                                                   "1 = unchanged, above 1 fattens, below 1 slims", MapSettingsError))
        put(self, "fat_softening", field_checks.number(self.fat_softening, "fat_softening", 0.0, 1.0,
                                                       "1 = the paper's softening of grown fat, 0 = none",
                                                       MapSettingsError))
        put(self, "diffusion_steps", field_checks.whole_number(self.diffusion_steps, "diffusion_steps", 0,
                                                               MAX_DIFFUSION_STEPS, MapSettingsError))
        put(self, "diffusion_time_step_m2", field_checks.number(self.diffusion_time_step_m2, "diffusion_time_step_m2",
                                                                *DIFFUSION_TIME_STEP_RANGE_M2, "a squared length, m²",
                                                                MapSettingsError))
        spread = self.diffusion_steps * self.diffusion_time_step_m2
        if spread > MAX_DIFFUSION_TIME_M2:
            raise MapSettingsError("diffusion_time_step_m2",
                                   f"{self.diffusion_steps} steps of {self.diffusion_time_step_m2:g} m² spread a "
                                   f"painted point over {(2 * spread) ** 0.5 * 100:.0f} cm, past any face",
                                   f"keep steps × time step at most {MAX_DIFFUSION_TIME_M2:g} m² (5 cm)")

    @classmethod
    def from_spread(cls, fat_scale: float = 1.0, fat_softening: float = DEFAULT_FAT_SOFTENING,
                    spread_m: float = 0.0) -> "MapSettings":
        """Settings whose diffusion spreads a painted point by about `spread_m` metres: diffusion
        time t = spread² / 2 in steps of at most the default time step (0 = only the tets the
        skin lies in)."""
        spread = field_checks.number(spread_m, "diffusion_spread_m", *DIFFUSION_SPREAD_RANGE_M,
                                     "metres a painted point spreads into the tissue", MapSettingsError)
        time = 0.5 * spread * spread
        if time == 0.0:
            return cls(fat_scale, fat_softening, 0, DEFAULT_DIFFUSION_TIME_STEP_M2)
        steps = math.ceil(time / DEFAULT_DIFFUSION_TIME_STEP_M2 * (1.0 - 1e-12))
        step = time / steps
        while steps * step > MAX_DIFFUSION_TIME_M2:    # the largest spread, rounded up by a bit
            step = math.nextafter(step, 0.0)
        return cls(fat_scale, fat_softening, steps, step)

    @property
    def spread_m(self) -> float:
        """About how far a painted point spreads: √(2 · steps · time step)."""
        return math.sqrt(2.0 * self.diffusion_steps * self.diffusion_time_step_m2)


class VolumetricLaplacian:
    """P1 finite-element Laplacian of a tet mesh at rest, built once per model.

    `cotangent_stiffness` is the exact stiffness matrix K_ab = Σ_tets V ∇φ_a·∇φ_b (the 3-D
    cotangent Laplacian): symmetric, positive semi-definite, constants in its null space.
    Tets with obtuse dihedral angles give it positive off-diagonal entries, and with those the
    discrete diffusion is not monotone: a painted 0/1 patch overshoots (on the 35k-tet ICT face
    by −0.27 below 0, i.e. negative fat). `diffusion_stiffness` therefore drops those
    couplings and puts their weight back on the diagonal, so rows still sum to zero: a
    weighted graph Laplacian with non-negative weights, still symmetric, PSD and
    constant-preserving, for which forward Euler obeys the maximum principle.
    `lumped_mass` is the volume lumped onto the nodes (V/4 per tet node; a diffusion
    mass, not kilograms).
    """

    def __init__(self, model):
        positions = np.asarray(model["rest_positions"], dtype=np.float64)
        tets = np.asarray(model["tets"], dtype=np.int64)
        node_count = len(positions)
        edges = np.stack([positions[tets[:, k]] - positions[tets[:, 0]] for k in (1, 2, 3)], axis=-1)
        volumes = np.linalg.det(edges) / 6.0
        # Barycentric coordinates 1..3 of x are D_m⁻¹ (x − x0): their gradients are the rows
        # of D_m⁻¹, and φ0 = 1 − φ1 − φ2 − φ3.
        inverse = np.linalg.inv(edges)
        gradients = np.concatenate([-inverse.sum(axis=1, keepdims=True), inverse], axis=1)
        local = volumes[:, None, None] * np.einsum("tak,tbk->tab", gradients, gradients)
        rows = np.repeat(tets, 4, axis=1).ravel()
        columns = np.tile(tets, (1, 4)).ravel()
        self.cotangent_stiffness = sp.csr_matrix((local.ravel(), (rows, columns)), shape=(node_count, node_count))
        self.cotangent_stiffness.sum_duplicates()
        self.lumped_mass = np.bincount(tets.ravel(), np.repeat(volumes / 4.0, 4), minlength=node_count)

        off_diagonal = sp.triu(self.cotangent_stiffness, k=1).tocoo()
        keep = off_diagonal.data < 0.0
        weights = -off_diagonal.data[keep]
        i, j = off_diagonal.row[keep], off_diagonal.col[keep]
        degree = np.bincount(i, weights, node_count) + np.bincount(j, weights, node_count)
        self.diffusion_stiffness = sp.csr_matrix(
            (np.concatenate([-weights, -weights, degree]),
             (np.concatenate([i, j, np.arange(node_count)]), np.concatenate([j, i, np.arange(node_count)]))),
            shape=(node_count, node_count))

    @property
    def stable_time_step(self) -> float:
        """Largest forward-Euler step (m²) that keeps every update a convex combination of
        neighbour values: 1 / max_i (L_ii / M_i). At or below it the diffusion is stable and
        monotone; it shrinks with the square of the tet size (≈ 1.4e-6 m² at 4k tets on the
        demo head, ≈ 3e-7 m² at 35k on the ICT face)."""
        return 1.0 / float(np.max(self.diffusion_stiffness.diagonal() / self.lumped_mass))

    def diffuse(self, node_values, steps: int, time_step: float) -> np.ndarray:
        """`steps` forward-Euler steps u ← u − dt M⁻¹ L u of diffusion time `time_step` (m²).

        Each step larger than `stable_time_step` is split into the fewest equal substeps that
        are not, so the result approximates the same continuous diffusion for any mesh.
        Conserves Σ M_i u_i and never creates new extrema.
        """
        if int(steps) != steps or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
        if not (math.isfinite(time_step) and time_step > 0.0):
            raise ValueError(f"time_step must be a positive diffusion time in m², got {time_step!r}")
        substeps = max(1, math.ceil(time_step / self.stable_time_step * (1.0 - 1e-12)))
        substep = time_step / substeps
        rate = substep / self.lumped_mass
        values = np.array(node_values, dtype=np.float64)
        for _ in range(int(steps) * substeps):
            values -= rate * (self.diffusion_stiffness @ values)
        return values


def skin_to_nodes(model, values_per_skin_vertex, background: float = 0.0) -> np.ndarray:
    """Skin-vertex values onto tet nodes: the transpose of the barycentric embedding, normalised.

    Each skin vertex hands its value to its tet's four nodes in proportion to its barycentric
    weights; a node's value is the weighted mean of what it received, and nodes no skin vertex
    touches get `background`. Negative weights (vertices slightly outside their tet) are
    clipped first, since a vertex cannot deposit a negative share.
    """
    values = np.asarray(values_per_skin_vertex, dtype=np.float64)
    embedding_tets = np.asarray(model["skin_embedding_tet"], dtype=np.int64)
    if values.shape != embedding_tets.shape:
        raise ValueError(f"a skin map needs one value per skin vertex, shape {embedding_tets.shape}; "
                         f"got {values.shape}")
    weights = np.clip(np.asarray(model["skin_embedding_weights"], dtype=np.float64), 0.0, None)
    weights /= weights.sum(axis=1, keepdims=True)
    nodes = np.asarray(model["tets"], dtype=np.int64)[embedding_tets].ravel()
    node_count = len(model["rest_positions"])
    received = np.bincount(nodes, weights.ravel(), node_count)
    weighted_sum = np.bincount(nodes, (weights * values[:, None]).ravel(), node_count)
    return np.divide(weighted_sum, received, out=np.full(node_count, float(background)), where=received > 0.0)


def nodes_to_tets(model, node_values) -> np.ndarray:
    """Per-tet value: the mean of its four nodes (the P1 field's average over the tet)."""
    return np.asarray(node_values, dtype=np.float64)[np.asarray(model["tets"], dtype=np.int64)].mean(axis=1)


def diffuse_skin_map(model, values_per_skin_vertex, steps: int = DEFAULT_DIFFUSION_STEPS,
                     time_step: float = DEFAULT_DIFFUSION_TIME_STEP_M2, background: float = 0.0,
                     laplacian: Optional[VolumetricLaplacian] = None) -> np.ndarray:
    """A per-skin-vertex map (V,) → per-tet values (M,), diffused into the tissue (paper 000 §8).

    `background` is the map's neutral value, the one the interior starts from (0 for fat and
    paralysis, 1 for stiffness and density multipliers); diffusion blends the painted values
    with it. Pass a `laplacian` to reuse one across several maps of the same model.
    """
    laplacian = laplacian if laplacian is not None else VolumetricLaplacian(model)
    node_values = skin_to_nodes(model, values_per_skin_vertex, background)
    return nodes_to_tets(model, laplacian.diffuse(node_values, steps, time_step))


def _check_per_tet(name, values, tet_count=None, positive=False, unit_interval=False) -> np.ndarray:
    """A 1-D finite per-tet array (of `tet_count` entries when given) within the stated range."""
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or (tet_count is not None and len(values) != tet_count):
        raise ValueError(f"{name} must have one value per tet, shape ({tet_count or 'M'},); got {values.shape}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if positive and np.any(values <= 0.0):
        raise ValueError(f"{name} must be > 0 everywhere (it multiplies a material parameter)")
    if unit_interval and (np.any(values < 0.0) or np.any(values > 1.0)):
        raise ValueError(f"{name} must lie in [0, 1]")
    return values


@dataclass(frozen=True)
class FatPlasticity:
    plastic_scale: np.ndarray    # (M,) s_i: the rest shape of tet i is scaled by s_i (paper 000 §6)
    mu_multiplier: np.ndarray    # (M,) μ reduction for the added fat (1 where nothing grows)


def fat_plasticity(per_tet_fat, settings: MapSettings = MapSettings()) -> FatPlasticity:
    """Plastic scale and fat softening from a per-tet fat amount in [0, 1].

    s_i = 1 + (S − 1) · fat_i with S = settings.fat_scale: S > 1 fattens, S < 1 slims, fat = 0
    tets keep their shape. μ follows `FAT_GROWTH_LEVELS` → `FAT_MU_MULTIPLIERS` in the growth
    s_i − 1, scaled by f = settings.fat_softening: μ_i = 1 − f (1 − m(s_i − 1)); slimming keeps μ
    (the paper keeps μ = 1 for slimming).
    """
    fat = _check_per_tet("per_tet_fat", per_tet_fat, unit_interval=True)
    softening = settings.fat_softening
    plastic_scale = 1.0 + (settings.fat_scale - 1.0) * fat
    growth = np.maximum(plastic_scale - 1.0, 0.0)
    paper = np.interp(growth, FAT_GROWTH_LEVELS, FAT_MU_MULTIPLIERS)
    return FatPlasticity(plastic_scale, 1.0 - softening * (1.0 - paper))


@dataclass(frozen=True)
class StiffnessMultipliers:
    mu: np.ndarray        # (M,) multiplies μ_i
    lam: np.ndarray       # (M,) multiplies λ_i


def stiffness_multiplier(per_tet_stiffness, fat_mu_multiplier=None) -> StiffnessMultipliers:
    """Per-tet multipliers of the Lamé parameters.

    A painted stiffness map scales μ and λ together (the tissue gets stiffer at the same
    Poisson ratio, as the paper's zombie μ map); the fat softening lowers μ only, as the paper
    states it, leaving the volume term: fat stays nearly incompressible.
    """
    stiffness = _check_per_tet("per_tet_stiffness", per_tet_stiffness, positive=True)
    fat = (np.ones_like(stiffness) if fat_mu_multiplier is None
           else _check_per_tet("fat_mu_multiplier", fat_mu_multiplier, len(stiffness), positive=True))
    return StiffnessMultipliers(mu=stiffness * fat, lam=stiffness.copy())


def density_multiplier(model, per_tet_density=None, plastic_scale=None) -> np.ndarray:
    """Per-node mass multipliers (N,): `model["node_mass"] * result` is the lumped mass.

    Node mass = Σ over its tets of ρ · d_i · s_i³ V_i / 4, with d_i the per-tet density
    multiplier and s_i the plastic scale (grown tissue has mass: a tet scaled by s holds s³
    times the volume).
    """
    tet_count = len(model["tets"])
    density = (np.ones(tet_count) if per_tet_density is None
               else _check_per_tet("per_tet_density", per_tet_density, tet_count, positive=True))
    growth = (np.ones(tet_count) if plastic_scale is None
              else _check_per_tet("plastic_scale", plastic_scale, tet_count, positive=True))
    volumes = np.asarray(model["tet_rest_volume"], dtype=np.float64)
    tets = np.asarray(model["tets"], dtype=np.int64)
    node_count = len(model["rest_positions"])
    scaled = np.bincount(tets.ravel(), np.repeat(volumes * density * growth ** 3 / 4.0, 4), node_count)
    plain = np.bincount(tets.ravel(), np.repeat(volumes / 4.0, 4), node_count)
    return scaled / plain


def painted_multiplier(weights, value_range) -> Optional[np.ndarray]:
    """A painted weight map in [0, 1] as multipliers: low + w (high − low), `value_range` = (low,
    high) the multipliers at weight 0 and 1 (None without a map). Where the painted stiffness
    and density become material — the one place, for every front door."""
    if weights is None:
        return None
    low, high = value_range
    return low + np.asarray(weights, dtype=np.float64) * (high - low)


@dataclass(frozen=True)
class MaterialMaps:
    """Everything the painted maps change, ready for the energies: what FaceSimulator takes
    (None: unchanged)."""
    plastic_scale: Optional[np.ndarray] = None          # (M,) s_i
    mu_multiplier: Optional[np.ndarray] = None          # (M,)
    lambda_multiplier: Optional[np.ndarray] = None      # (M,)
    node_mass_multiplier: Optional[np.ndarray] = None   # (N,) times model["node_mass"]
    paralysis: Optional[np.ndarray] = None              # (M,) p_i in [0, 1] for activation.apply_paralysis
    paralysed_muscles: Tuple[str, ...] = ()             # muscles switched off by name


def material_maps(model, fat=None, stiffness=None, density=None, paralysis=None,
                  settings: MapSettings = MapSettings(), paralysed_muscles=()) -> MaterialMaps:
    """Diffuse the given per-skin-vertex maps (any may be None) and turn them into material.

    Fat and paralysis diffuse toward 0, stiffness and density toward 1 (unpainted tissue is
    unchanged). Diffusion conserves the mass-weighted integral and does not create extrema,
    so the per-tet values stay in the ranges the skin values were in. `settings` holds the fat
    scale and softening (`fat_plasticity`) and the diffusion of every map.
    """
    tet_count = len(model["tets"])
    painted = any(values is not None for values in (fat, stiffness, density, paralysis))
    laplacian = VolumetricLaplacian(model) if painted else None

    def per_tet(values, background):
        if values is None:
            return np.full(tet_count, float(background))
        return diffuse_skin_map(model, values, settings.diffusion_steps, settings.diffusion_time_step_m2,
                                background, laplacian)

    fat_effect = fat_plasticity(np.clip(per_tet(fat, 0.0), 0.0, 1.0), settings)
    lame = stiffness_multiplier(per_tet(stiffness, 1.0), fat_effect.mu_multiplier)
    return MaterialMaps(
        plastic_scale=fat_effect.plastic_scale,
        mu_multiplier=lame.mu,
        lambda_multiplier=lame.lam,
        node_mass_multiplier=density_multiplier(model, per_tet(density, 1.0), fat_effect.plastic_scale),
        paralysis=np.clip(per_tet(paralysis, 0.0), 0.0, 1.0),
        paralysed_muscles=tuple(paralysed_muscles),
    )


def _landmark(model, name) -> np.ndarray:
    landmarks = model_landmarks(model)
    if name not in landmarks:
        raise ValueError(f"the model has no landmark {name!r}, needed to place a preset map")
    return landmarks[name]


def _bump(points, centres, radius) -> np.ndarray:
    """Smooth bump (1 − d²/r²)² round the nearest centre: 1 at a centre, 0 beyond `radius`."""
    distance = np.min(np.linalg.norm(points[:, None, :] - np.asarray(centres)[None], axis=-1), axis=1)
    return np.clip(1.0 - (distance / radius) ** 2, 0.0, 1.0) ** 2


@dataclass(frozen=True)
class ZombieMaps:
    stiffness: np.ndarray     # (M,) multiplier of μ and λ, spanning ZOMBIE_STIFFNESS_RANGE
    density: np.ndarray       # (M,) density multiplier, spanning 1 … ZOMBIE_DENSITY_MAX


def _stretch_about_one(values, low, high) -> np.ndarray:
    """Scale the deviations from 1 (above and below separately) so the extremes become `high`
    and `low`: diffusion dilutes a painted map, the preset promises the paper's final range."""
    deviation = values - 1.0
    largest, smallest = deviation.max(), deviation.min()
    up = (high - 1.0) / largest if largest > 0.0 else 0.0
    down = (1.0 - low) / -smallest if smallest < 0.0 else 0.0
    return 1.0 + np.where(deviation > 0.0, deviation * up, deviation * down)


def zombie_maps(model, steps: int = DEFAULT_DIFFUSION_STEPS,
                time_step: float = DEFAULT_DIFFUSION_TIME_STEP_M2) -> ZombieMaps:
    """The paper's zombie preset (000 §8, Fig. 13-e) painted from the model's landmarks.

    Three skin regions, sized by the eye-to-mouth height h so any face size works, each a
    smooth bump b: the lips (within 0.3 h of the mouth corners and lip midpoints), the eyes
    (0.35 h round the upper lids) and the cheeks (0.45 h round the point halfway between
    cheekbone and mouth corner). Painted stiffness 1 + max(b_lips, b_eyes) − b_cheeks and
    density 1 + b_cheeks are diffused into the tissue (toward 1), and their deviations from 1
    stretched so the per-tet values span the paper's final ranges exactly: stiffness 0.7 – 5.7
    (stiff lips and eyes that the muscles cannot pull out of shape, soft cheeks) and density
    1 – 3 g/cm³ (heavy cheeks that sag).
    """
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    mouth_corners = [_landmark(model, "mouth_corner_L"), _landmark(model, "mouth_corner_R")]
    upper_lids = [_landmark(model, "upper_lid_L"), _landmark(model, "upper_lid_R")]
    height = np.linalg.norm(np.mean(upper_lids, axis=0) - np.mean(mouth_corners, axis=0))
    lips = mouth_corners + [_landmark(model, "upper_lip"), _landmark(model, "lower_lip")]
    cheeks = [0.5 * (_landmark(model, f"cheekbone_{side}") + corner)
              for side, corner in zip("LR", mouth_corners)]
    stiff = np.maximum(_bump(skin, lips, 0.3 * height), _bump(skin, upper_lids, 0.35 * height))
    sagging = _bump(skin, cheeks, 0.45 * height)
    laplacian = VolumetricLaplacian(model)
    stiffness = diffuse_skin_map(model, 1.0 + stiff - sagging, steps, time_step, 1.0, laplacian)
    density = diffuse_skin_map(model, 1.0 + sagging, steps, time_step, 1.0, laplacian)
    return ZombieMaps(stiffness=_stretch_about_one(stiffness, *ZOMBIE_STIFFNESS_RANGE),
                      density=_stretch_about_one(density, 1.0, ZOMBIE_DENSITY_MAX))
