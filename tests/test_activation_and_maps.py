"""Activations, paralysis, painted maps and the animate input files (solver/physics/activation.py,
maps.py, inputs.py), on the demo head built at 4k tets once per module. Real computations, no
mocks."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from solver.demo_head import make_demo_rig
from solver.model_builder.builder import BuildOptions, build_model
from solver.physics import activation, maps
from solver.physics.inputs import (AnimationInputError, ActivationInput, MapsInput, load_activations, load_maps,
                                   save_activations, save_maps)

RNG_SEED = 20240611


@pytest.fixture(scope="module")
def model():
    return build_model(make_demo_rig(), BuildOptions(target_tets=4000))


@pytest.fixture(scope="module")
def laplacian(model):
    return maps.VolumetricLaplacian(model)


def _landmark(model, name):
    return model["landmark_positions"][list(model["landmark_names"]).index(name)]


def _tet_centroids(model):
    return model["rest_positions"][model["tets"]].mean(axis=1)


def _side_masks(model):
    """Per tet: has some _L muscle, has some _R muscle."""
    is_left = np.array([str(name).endswith("_L") for name in model["muscle_names"]])
    fraction = model["muscle_fraction"]
    return fraction[:, is_left].sum(axis=1) > 0, fraction[:, ~is_left].sum(axis=1) > 0


# --------------------------------------------------------------------------- activation matrices

def test_vector_matrix_round_trip_and_ordering():
    rng = np.random.default_rng(RNG_SEED)
    vectors = rng.normal(size=(7, 6))
    matrices = activation.symmetric_from_vector(vectors)
    assert matrices.shape == (7, 3, 3)
    np.testing.assert_array_equal(matrices, np.swapaxes(matrices, 1, 2))
    np.testing.assert_allclose(activation.vector_from_symmetric(matrices), vectors, rtol=0, atol=0)
    # ordering (xx, yy, zz, yz, xz, xy)
    s = activation.symmetric_from_vector([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    np.testing.assert_array_equal(s, [[1, 6, 5], [6, 2, 4], [5, 4, 3]])
    np.testing.assert_array_equal(activation.symmetric_from_vector(activation.NEUTRAL_ACTIVATION), np.eye(3))
    # linear, as the paper's operator S(a)
    np.testing.assert_allclose(activation.symmetric_from_vector(2.0 * vectors[0] - vectors[1]),
                               2.0 * matrices[0] - matrices[1], atol=1e-15)


def test_contraction_matrix_shortens_the_fibre_and_preserves_volume():
    frames = Rotation.random(20, random_state=RNG_SEED).as_matrix()
    gamma = np.linspace(0.6, 1.8, 20)
    s = activation.contraction_matrix(frames, gamma)
    np.testing.assert_allclose(s, np.swapaxes(s, 1, 2), atol=1e-15)
    np.testing.assert_allclose(np.linalg.det(s), 1.0, atol=1e-12)
    fibre = frames[:, :, 0]
    np.testing.assert_allclose(np.einsum("mij,mj->mi", s, fibre), fibre / gamma[:, None], atol=1e-12)
    for k in (1, 2):
        across = frames[:, :, k]
        np.testing.assert_allclose(np.einsum("mij,mj->mi", s, across), across * np.sqrt(gamma)[:, None], atol=1e-12)
    np.testing.assert_allclose(activation.contraction_matrix(frames, np.ones(20)), np.tile(np.eye(3), (20, 1, 1)),
                               atol=1e-14)
    with pytest.raises(ValueError, match="γ"):
        activation.contraction_matrix(frames, -gamma)


def test_contraction_log_derivatives_match_central_differences():
    """∂/∂(log γ_m) of the weighted blend Σ_m w[t, m] vec(Q D(γ_m) Qᵀ), which the fibre fit steps
    along and the still-muscle footprints probe (at γ = 1, R_act's preferred direction)."""
    rng = np.random.default_rng(RNG_SEED)
    frames = Rotation.random(12, random_state=RNG_SEED).as_matrix()
    weights = rng.uniform(0.0, 1.0, (12, 3)) * (rng.uniform(size=(12, 3)) > 0.3)
    log_gamma = np.array([-0.4, 0.0, 0.7])

    def blend(log_contraction):
        return sum(weights[:, m, None] * activation.vector_from_symmetric(
            activation.contraction_matrix(frames, np.full(12, np.exp(log_contraction[m])))) for m in range(3))

    derivatives = activation.contraction_log_derivatives(frames, weights, log_gamma)
    assert derivatives.shape == (3, 12, 6)
    step = 1e-6
    for m in range(3):
        offset = np.zeros(3)
        offset[m] = step
        central = (blend(log_gamma + offset) - blend(log_gamma - offset)) / (2.0 * step)
        np.testing.assert_allclose(derivatives[m], central, atol=1e-8)
    at_rest = activation.contraction_log_derivatives(frames, weights, np.zeros(3))
    preferred = activation.vector_from_symmetric(np.einsum("aik,k,ajk->aij", frames, [-1.0, 0.5, 0.5], frames))
    np.testing.assert_allclose(at_rest, weights.T[:, :, None] * preferred[None], atol=1e-14)


def test_tet_blending_extremes_and_mixture(model):
    fraction = model["muscle_fraction"].astype(np.float64)
    muscle_count = fraction.shape[1]
    gamma = np.linspace(0.7, 1.6, muscle_count)
    s = activation.tet_activations(model, gamma)
    content = fraction.sum(axis=1)
    frames = model["muscle_direction"]

    passive = content == 0
    assert passive.any()
    np.testing.assert_array_equal(s[passive], np.tile(np.eye(3), (passive.sum(), 1, 1)))

    single = (content > 0) & (fraction.max(axis=1) == content)   # one muscle, possibly part passive
    assert single.sum() > 100
    muscle = fraction[single].argmax(axis=1)
    np.testing.assert_allclose(s[single], activation.contraction_matrix(frames[single], gamma[muscle]), atol=1e-12)

    mixed = np.flatnonzero((fraction > 0).sum(axis=1) >= 2)
    assert len(mixed) > 0
    for tet in mixed:
        expected = sum(fraction[tet, m] / content[tet] * activation.contraction_matrix(frames[tet][None], gamma[[m]])[0]
                       for m in np.flatnonzero(fraction[tet]))
        np.testing.assert_allclose(s[tet], expected, atol=1e-12)

    np.testing.assert_allclose(activation.tet_activations(model, np.ones(muscle_count)),
                               np.tile(np.eye(3), (len(s), 1, 1)), atol=1e-12)


def test_raw_activation_vectors_fill_active_tets(model):
    active = activation.active_tet_indices(model)
    assert np.all(np.diff(active) > 0)
    np.testing.assert_array_equal(active, np.flatnonzero(model["muscle_fraction"].sum(axis=1) > 0))
    vectors = activation.NEUTRAL_ACTIVATION + 0.1 * np.arange(len(active))[:, None] / len(active)
    s = activation.tet_activations_from_vectors(vectors, active, len(model["tets"]))
    np.testing.assert_array_equal(s[active], activation.symmetric_from_vector(vectors))
    others = np.setdiff1d(np.arange(len(s)), active)
    np.testing.assert_array_equal(s[others], np.tile(np.eye(3), (len(others), 1, 1)))


def test_paralysing_the_left_side(model):
    muscle_count = len(model["muscle_names"])
    s = activation.tet_activations(model, np.full(muscle_count, 1.4))
    left_muscles = activation.bells_palsy_muscles(model, "L")
    assert len(left_muscles) == muscle_count // 2 and all(name.endswith("_L") for name in left_muscles)
    paralysed = activation.apply_paralysis(s, model, left_muscles)

    has_left, has_right = _side_masks(model)
    left_only, right_only = has_left & ~has_right, has_right & ~has_left
    assert left_only.sum() > 50 and right_only.sum() > 50
    np.testing.assert_array_equal(paralysed[right_only], s[right_only])
    np.testing.assert_allclose(paralysed[left_only], np.tile(np.eye(3), (left_only.sum(), 1, 1)), atol=1e-12)
    assert not np.allclose(s[left_only], np.eye(3))

    both = has_left & has_right
    fraction = model["muscle_fraction"].astype(np.float64)
    is_left = np.isin(model["muscle_names"], left_muscles)
    share = fraction[both][:, is_left].sum(axis=1) / fraction[both].sum(axis=1)
    np.testing.assert_allclose(paralysed[both], (1 - share)[:, None, None] * s[both] + share[:, None, None] * np.eye(3),
                               atol=1e-12)


def test_painted_paralysis_combines_with_muscle_paralysis(model):
    muscle_count = len(model["muscle_names"])
    s = activation.tet_activations(model, np.full(muscle_count, 1.3))
    painted = np.full(len(s), 0.25)
    half = activation.apply_paralysis(s, model, paralysis_per_tet=painted)
    np.testing.assert_allclose(half, 0.75 * s + 0.25 * np.eye(3), atol=1e-15)
    fully = activation.apply_paralysis(s, model, activation.bells_palsy_muscles(model, "R"), np.ones(len(s)))
    np.testing.assert_allclose(fully, np.tile(np.eye(3), (len(s), 1, 1)), atol=1e-12)
    has_left, has_right = _side_masks(model)
    right_only = has_right & ~has_left
    both_sources = activation.apply_paralysis(s, model, activation.bells_palsy_muscles(model, "R"), painted)
    np.testing.assert_allclose(both_sources[right_only], np.tile(np.eye(3), (right_only.sum(), 1, 1)), atol=1e-12)
    with pytest.raises(ValueError, match="unknown muscle 'frowner_L'"):
        activation.apply_paralysis(s, model, ["frowner_L"])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        activation.apply_paralysis(s, model, paralysis_per_tet=np.full(len(s), 1.5))


# --------------------------------------------------------------------------- Laplacian and diffusion

def _boundary_nodes(model):
    faces = np.sort(model["tets"][:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), axis=1)
    unique, counts = np.unique(faces, axis=0, return_counts=True)
    return np.unique(unique[counts == 1])


def test_laplacian_is_symmetric_psd_with_constants_in_its_null_space(model, laplacian):
    node_count = len(model["rest_positions"])
    for matrix in (laplacian.cotangent_stiffness, laplacian.diffusion_stiffness):
        assert abs(matrix - matrix.T).max() < 1e-15 * abs(matrix).max()
        scale = abs(matrix).max()
        assert np.abs(matrix @ np.ones(node_count)).max() < 1e-12 * scale
        eigenvalues = np.linalg.eigvalsh(matrix.toarray())
        assert eigenvalues.min() > -1e-10 * eigenvalues.max()
        assert np.sum(eigenvalues < 1e-10 * eigenvalues.max()) == 1   # the mesh is one connected piece
    off_diagonal = laplacian.diffusion_stiffness - np.diag(laplacian.diffusion_stiffness.diagonal())
    assert off_diagonal.max() <= 0.0
    assert laplacian.lumped_mass.sum() == pytest.approx(model["tet_rest_volume"].sum(), rel=1e-12)


def test_cotangent_laplacian_vanishes_on_linear_fields_inside(model, laplacian):
    """The P1 stiffness matrix applied to a linear function is zero at every interior node
    (its weak Laplacian is 0); only boundary nodes carry the normal flux."""
    interior = np.setdiff1d(np.arange(len(model["rest_positions"])), _boundary_nodes(model))
    assert len(interior) > 50          # 86 on the mouth-graded 3,000-tet model
    linear = model["rest_positions"] @ np.array([0.3, -1.2, 0.7]) + 0.05
    residual = laplacian.cotangent_stiffness @ linear
    scale = abs(laplacian.cotangent_stiffness).max() * np.abs(linear).max()
    assert np.abs(residual[interior]).max() < 1e-10 * scale
    assert np.abs(residual).max() > 1e-3 * scale


@pytest.mark.parametrize("field", ["step", "random"])
def test_diffusion_conserves_the_integral_and_is_monotone(model, laplacian, field):
    positions = model["rest_positions"]
    rng = np.random.default_rng(RNG_SEED)
    values = ((positions[:, 0] > np.median(positions[:, 0])).astype(float) if field == "step"
              else rng.random(len(positions)))
    integral = laplacian.lumped_mass @ values
    low, high = values.min(), values.max()
    roughness = values @ (laplacian.diffusion_stiffness @ values)
    for _ in range(30):
        values = laplacian.diffuse(values, 1, 0.5 * maps.DEFAULT_DIFFUSION_TIME_STEP_M2)
        assert laplacian.lumped_mass @ values == pytest.approx(integral, rel=1e-10)
        assert values.max() <= high + 1e-14 and values.min() >= low - 1e-14
        high, low = values.max(), values.min()
        smoother = values @ (laplacian.diffusion_stiffness @ values)
        assert smoother < roughness    # diffusion dissipates the Dirichlet energy: it does smooth
        roughness = smoother


def test_large_steps_are_split_into_stable_substeps(laplacian):
    values = np.random.default_rng(RNG_SEED).random(len(laplacian.lumped_mass))
    limit = laplacian.stable_time_step
    one_big = laplacian.diffuse(values, 1, 10 * limit)
    ten_small = laplacian.diffuse(values, 10, limit)
    np.testing.assert_allclose(one_big, ten_small, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="time_step"):
        laplacian.diffuse(values, 3, -1.0)
    with pytest.raises(ValueError, match="steps"):
        laplacian.diffuse(values, 2.5, limit)


def test_skin_values_reach_the_nodes_under_the_skin(model):
    skin_count = len(model["skin_vertices"])
    nodes = maps.skin_to_nodes(model, np.full(skin_count, 0.7), background=0.2)
    received_weight = model["skin_embedding_weights"] > 0.0   # negative weights are clipped away
    touched = np.unique(model["tets"][model["skin_embedding_tet"]][received_weight])
    np.testing.assert_allclose(nodes[touched], 0.7, atol=1e-12)
    untouched = np.setdiff1d(np.arange(len(nodes)), touched)
    assert len(untouched) > 0
    np.testing.assert_array_equal(nodes[untouched], 0.2)
    np.testing.assert_allclose(maps.diffuse_skin_map(model, np.full(skin_count, 0.4), background=0.4), 0.4,
                               atol=1e-12)


def _cheek_patch(model, radius=0.015):
    skin = model["skin_vertices"]
    centre = 0.5 * (_landmark(model, "cheekbone_L") + _landmark(model, "mouth_corner_L"))
    centre = skin[np.argmin(np.linalg.norm(skin - centre, axis=1))]
    return (np.linalg.norm(skin - centre, axis=1) < radius).astype(float), centre


def test_cheek_patch_diffuses_into_the_cheek_not_the_forehead(model, laplacian):
    patch, centre = _cheek_patch(model)
    assert patch.sum() > 5
    per_tet = maps.diffuse_skin_map(model, patch, laplacian=laplacian)
    assert per_tet.shape == (len(model["tets"]),)
    assert per_tet.min() >= 0.0 and per_tet.max() <= 1.0
    centroids = _tet_centroids(model)
    cheek = np.linalg.norm(centroids - centre, axis=1) < 0.02
    forehead = np.linalg.norm(centroids - _landmark(model, "forehead"), axis=1) < 0.03
    mirrored = centre * [-1, 1, 1]   # the demo head is mirror-symmetric in x
    right_cheek = np.linalg.norm(centroids - mirrored, axis=1) < 0.03
    assert cheek.sum() > 3 and forehead.sum() > 3 and right_cheek.sum() > 3
    assert per_tet[cheek].mean() > 0.1
    # 1e-5 of the painted value: on the 3,000-tet model the far-field lattice is 24 mm, so the
    # diffusion has few tets between the cheek and the forehead (it measured 1.2e-6).
    assert per_tet[forehead].max() < 1e-5
    assert per_tet[right_cheek].max() < 0.05 * per_tet[cheek].mean()
    # more steps spread further and lower the peak
    spread = maps.diffuse_skin_map(model, patch, steps=4 * maps.DEFAULT_DIFFUSION_STEPS, laplacian=laplacian)
    assert spread.max() < per_tet.max()
    assert np.count_nonzero(spread > 1e-3) > np.count_nonzero(per_tet > 1e-3)


# --------------------------------------------------------------------------- fat, stiffness, density

def test_fat_plasticity_mapping():
    fat = np.array([0.0, 0.25, 0.5, 1.0, 1.0])
    result = maps.fat_plasticity(fat, maps.MapSettings(fat_scale=1.3))
    np.testing.assert_allclose(result.plastic_scale, [1.0, 1.075, 1.15, 1.3, 1.3])
    # growth 0 → 1, 0.075 → between 1 and 0.8, 0.15 → between 0.8 and 0.5, 0.3 → 0.3
    np.testing.assert_allclose(result.mu_multiplier, [1.0, 0.85, 0.65, 0.3, 0.3])
    for scale, mu in ((1.1, 0.8), (1.2, 0.5), (1.3, 0.3), (1.5, 0.3)):
        assert maps.fat_plasticity(np.ones(1), maps.MapSettings(fat_scale=scale)).mu_multiplier[0] == pytest.approx(mu)
    slim = maps.fat_plasticity(fat, maps.MapSettings(fat_scale=0.8))
    np.testing.assert_allclose(slim.plastic_scale, [1.0, 0.95, 0.9, 0.8, 0.8])
    np.testing.assert_array_equal(slim.mu_multiplier, 1.0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        maps.fat_plasticity(np.array([0.5, 1.2]), maps.MapSettings(fat_scale=1.3))


@pytest.mark.parametrize("field, bad", [("fat_scale", 0.0), ("fat_scale", 1.6), ("fat_scale", float("nan")),
                                        ("fat_softening", -0.1), ("fat_softening", 1.5), ("fat_softening", True),
                                        ("diffusion_steps", -1), ("diffusion_steps", 2.5), ("diffusion_steps", 10 ** 9),
                                        ("diffusion_time_step_m2", 1.0), ("diffusion_time_step_m2", "3e-6")])
def test_map_settings_refuse_what_the_solver_cannot_do(field, bad):
    """One validator for every front door: the error names the setting, the range and a fix."""
    with pytest.raises(maps.MapSettingsError, match=f"^{field}: expected a .*Fix: give") as caught:
        maps.MapSettings(**{field: bad})
    assert caught.value.field == field
    with pytest.raises(maps.MapSettingsError, match="past any face"):
        maps.MapSettings(diffusion_steps=1000, diffusion_time_step_m2=1e-5)


def test_map_settings_numbers_come_from_one_file():
    """The solver's defaults, ranges and presets are those of settings.json, which the add-on
    reads too (blender_addon/solver_numbers.py)."""
    numbers = json.loads((Path(maps.__file__).with_name("settings.json")).read_text(encoding="utf-8"))
    defaults = maps.MapSettings()
    spread = numbers["settings"].pop("diffusion_spread_m")
    assert maps.MapSettings.from_spread(spread_m=spread["default"]).spread_m == pytest.approx(defaults.spread_m)
    assert tuple(spread["range"]) == maps.DIFFUSION_SPREAD_RANGE_M
    for name, entry in numbers["settings"].items():
        assert getattr(defaults, name) == entry["default"]
        low, high = entry["range"]
        for value in (low, high):
            bounded = {"diffusion_time_step_m2": {"diffusion_steps": 1},
                       "diffusion_steps": {"diffusion_time_step_m2": 1e-6}}.get(name, {})
            assert getattr(maps.MapSettings(**{name: value, **bounded}), name) == value
    assert maps.ZOMBIE_STIFFNESS_RANGE == tuple(numbers["presets"]["zombie"]["stiffness_range"])
    assert maps.PAINTED_MULTIPLIER_LIMITS == tuple(numbers["painted_multiplier_range"])


def test_a_spread_becomes_diffusion_steps_no_longer_than_the_default_step():
    """The artist's spread s (mm in the add-on) is diffusion time s²/2, in steps of at most the
    default time step; 0 keeps the maps in the tets the skin lies in."""
    default = maps.MapSettings()
    assert default.spread_m == pytest.approx(0.0077459667, rel=1e-8)
    same = maps.MapSettings.from_spread(spread_m=default.spread_m)
    assert same.diffusion_steps == default.diffusion_steps
    assert same.diffusion_time_step_m2 == pytest.approx(default.diffusion_time_step_m2, rel=1e-9)
    assert maps.MapSettings.from_spread(spread_m=0.0).diffusion_steps == 0
    for spread in (0.001, 0.012, maps.DIFFUSION_SPREAD_RANGE_M[1]):
        settings = maps.MapSettings.from_spread(1.2, 0.5, spread)
        assert settings.spread_m == pytest.approx(spread, rel=1e-12)
        assert settings.diffusion_time_step_m2 <= maps.DEFAULT_DIFFUSION_TIME_STEP_M2 * (1 + 1e-12)
        assert (settings.fat_scale, settings.fat_softening) == (1.2, 0.5)
    for bad in (-0.001, 0.06, float("nan"), "7 mm"):
        with pytest.raises(maps.MapSettingsError, match="^diffusion_spread_m: expected a number in \\[0, 0.05\\]"):
            maps.MapSettings.from_spread(spread_m=bad)


def test_fat_softening_scales_the_papers_mu_reduction():
    fat = np.array([0.0, 0.25, 0.5, 1.0])
    grow = maps.MapSettings(fat_scale=1.3)
    paper = maps.fat_plasticity(fat, grow).mu_multiplier          # [1, 0.85, 0.65, 0.3], see above
    for softening in (0.0, 0.25, 0.5, 1.0):
        result = maps.fat_plasticity(fat, maps.MapSettings(fat_scale=1.3, fat_softening=softening))
        np.testing.assert_allclose(result.mu_multiplier, 1.0 - softening * (1.0 - paper), atol=1e-15)
        np.testing.assert_array_equal(result.plastic_scale, maps.fat_plasticity(fat, grow).plastic_scale)
    np.testing.assert_array_equal(maps.fat_plasticity(fat, maps.MapSettings(1.3, 0.0)).mu_multiplier, 1.0)
    np.testing.assert_array_equal(maps.fat_plasticity(fat, maps.MapSettings(0.8, 0.5)).mu_multiplier, 1.0)  # slimming


def test_diffusion_settings_and_fat_softening_reach_the_material(model):
    from solver.physics.animate import overrides_from_maps
    patch, centre = _cheek_patch(model)
    painted = MapsInput(fat=patch)
    grow = maps.MapSettings(fat_scale=1.3)
    default = overrides_from_maps(model, painted, grow)
    np.testing.assert_array_equal(default.plastic_scale, maps.material_maps(model, fat=patch, settings=grow).plastic_scale)
    farther = maps.MapSettings(fat_scale=1.3, diffusion_steps=4 * maps.DEFAULT_DIFFUSION_STEPS,
                               diffusion_time_step_m2=2 * maps.DEFAULT_DIFFUSION_TIME_STEP_M2)
    wider = overrides_from_maps(model, painted, farther)
    expected = maps.material_maps(model, fat=patch, settings=farther)
    np.testing.assert_array_equal(wider.plastic_scale, expected.plastic_scale)
    assert np.count_nonzero(wider.plastic_scale > 1.001) > np.count_nonzero(default.plastic_scale > 1.001)
    stiff = overrides_from_maps(model, painted, maps.MapSettings(fat_scale=1.3, fat_softening=0.0))
    np.testing.assert_array_equal(stiff.plastic_scale, default.plastic_scale)
    np.testing.assert_array_equal(stiff.mu_multiplier, 1.0)
    grown = default.plastic_scale > 1.01
    half = overrides_from_maps(model, painted, maps.MapSettings(fat_scale=1.3, fat_softening=0.5))
    np.testing.assert_allclose(half.mu_multiplier, 1.0 - 0.5 * (1.0 - default.mu_multiplier), atol=1e-15)
    assert grown.any() and np.all(default.mu_multiplier[grown] < half.mu_multiplier[grown])


def test_stiffness_and_density_multipliers(model):
    tet_count = len(model["tets"])
    stiffness = np.linspace(0.5, 2.0, tet_count)
    fat_mu = np.full(tet_count, 0.8)
    lame = maps.stiffness_multiplier(stiffness, fat_mu)
    np.testing.assert_allclose(lame.mu, 0.8 * stiffness)
    np.testing.assert_allclose(lame.lam, stiffness)
    with pytest.raises(ValueError, match="> 0"):
        maps.stiffness_multiplier(np.zeros(tet_count))

    np.testing.assert_allclose(maps.density_multiplier(model), 1.0)
    np.testing.assert_allclose(maps.density_multiplier(model, np.full(tet_count, 3.0)), 3.0)
    np.testing.assert_allclose(maps.density_multiplier(model, plastic_scale=np.full(tet_count, 1.2)), 1.2 ** 3)
    density = np.linspace(1.0, 3.0, tet_count)
    growth = np.linspace(0.9, 1.3, tet_count)
    node_mass = model["node_mass"] * maps.density_multiplier(model, density, growth)
    assert node_mass.sum() == pytest.approx(1000.0 * np.sum(model["tet_rest_volume"] * density * growth ** 3),
                                            rel=1e-12)
    with pytest.raises(ValueError, match="per tet"):
        maps.density_multiplier(model, np.ones(tet_count - 1))


def test_material_maps_from_painted_skin(model):
    skin_count = len(model["skin_vertices"])
    neutral = maps.material_maps(model)
    for per_tet in (neutral.plastic_scale, neutral.mu_multiplier, neutral.lambda_multiplier,
                    neutral.node_mass_multiplier):
        np.testing.assert_array_equal(per_tet, 1.0)
    np.testing.assert_array_equal(neutral.paralysis, 0.0)

    patch, centre = _cheek_patch(model)
    material = maps.material_maps(model, fat=patch, stiffness=1.0 + patch, density=1.0 + 2.0 * patch,
                                  paralysis=np.full(skin_count, 0.5), settings=maps.MapSettings(fat_scale=1.3))
    centroids = _tet_centroids(model)
    cheek = np.linalg.norm(centroids - centre, axis=1) < 0.02
    forehead = np.linalg.norm(centroids - _landmark(model, "forehead"), axis=1) < 0.03
    assert material.plastic_scale[cheek].mean() > 1.03
    assert np.all(material.plastic_scale >= 1.0) and np.all(material.plastic_scale <= 1.3)
    np.testing.assert_allclose(material.plastic_scale[forehead], 1.0, atol=1e-5)
    assert np.all(material.mu_multiplier[cheek] < material.lambda_multiplier[cheek])   # fat softens μ only
    np.testing.assert_allclose(material.lambda_multiplier[forehead], 1.0, atol=1e-5)
    assert material.node_mass_multiplier.max() > 1.1 and material.node_mass_multiplier.min() >= 1.0 - 1e-12
    # a uniform painted paralysis is diluted into the unpainted interior, never amplified
    assert material.paralysis.min() > 0.0 and material.paralysis.max() <= 0.5 + 1e-12
    assert material.paralysis[model["skin_embedding_tet"]].mean() > 0.4


def test_painted_weights_become_multipliers_in_the_solver_only(model):
    """MAPS.npz carries painted weights and the multipliers at weight 0 and 1; the solver turns
    them into material in one place (maps.painted_multiplier), as the add-on's ranges mean."""
    from solver.physics.animate import overrides_from_maps
    patch, _ = _cheek_patch(model)
    painted = MapsInput(stiffness=patch, stiffness_range=(0.5, 3.0), density=patch, density_range=(1.0, 2.0))
    material = overrides_from_maps(model, painted)
    expected = maps.material_maps(model, stiffness=0.5 + 2.5 * patch, density=1.0 + patch)
    np.testing.assert_allclose(material.lambda_multiplier, expected.lambda_multiplier, rtol=1e-12)
    np.testing.assert_allclose(material.node_mass_multiplier, expected.node_mass_multiplier, rtol=1e-12)
    assert maps.painted_multiplier(None, (1.0, 2.0)) is None
    np.testing.assert_array_equal(maps.painted_multiplier(np.array([0.0, 0.5, 1.0]), (2.0, 1.0)), [2.0, 1.5, 1.0])


def test_zombie_preset_spans_the_papers_ranges(model):
    zombie = maps.zombie_maps(model)
    assert zombie.stiffness.min() == pytest.approx(0.7) and zombie.stiffness.max() == pytest.approx(5.7)
    assert zombie.density.min() == pytest.approx(1.0) and zombie.density.max() == pytest.approx(3.0)
    centroids = _tet_centroids(model)
    near = lambda name, radius: np.linalg.norm(centroids - _landmark(model, name), axis=1) < radius  # noqa: E731
    assert zombie.stiffness[near("upper_lip", 0.02)].mean() > 2.0
    assert zombie.density[near("cheekbone_L", 0.04) | near("cheekbone_R", 0.04)].max() > 1.5
    np.testing.assert_allclose(zombie.stiffness[near("crown", 0.03)], 1.0, atol=1e-6)
    np.testing.assert_allclose(zombie.density[near("crown", 0.03)], 1.0, atol=1e-6)


# --------------------------------------------------------------------------- input files

def _good_activation_arrays(model, frames=3):
    muscle_count = len(model["muscle_names"])
    angle = np.deg2rad(10.0)
    turn = np.eye(4)
    turn[:3, :3] = [[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]]
    turn[:3, 3] = [0.01, 0.0, -0.02]
    return {"muscle_contraction": np.full((frames, muscle_count), 1.2), "jaw": np.zeros((frames, 5)),
            "head_transforms": np.stack([np.eye(4), turn, np.eye(4)])[:frames], "fps": np.float64(30.0)}


def test_activation_file_round_trips(model, tmp_path):
    path = tmp_path / "ACTIVATIONS.npz"
    names = np.array(["zygomaticus_major_R", "zygomaticus_major_L"])
    np.savez(path, muscle_contraction=np.array([[1.5, 1.2], [1.0, 1.1]]), muscle_names=names,
             jaw=np.zeros((2, 5)))
    loaded = load_activations(path, model)
    model_names = list(model["muscle_names"])
    assert loaded.frame_count == 2 and loaded.fps == 24.0
    np.testing.assert_array_equal(loaded.muscle_names, model["muscle_names"])
    column_r, column_l = model_names.index("zygomaticus_major_R"), model_names.index("zygomaticus_major_L")
    np.testing.assert_array_equal(loaded.muscle_contraction[:, column_r], [1.5, 1.0])
    np.testing.assert_array_equal(loaded.muscle_contraction[:, column_l], [1.2, 1.1])
    others = np.setdiff1d(np.arange(len(model_names)), [column_r, column_l])
    np.testing.assert_array_equal(loaded.muscle_contraction[:, others], 1.0)
    np.testing.assert_array_equal(loaded.head_transforms, np.tile(np.eye(4), (2, 1, 1)))
    np.testing.assert_allclose(loaded.tet_activations(model, 0),
                               activation.tet_activations(model, loaded.muscle_contraction[0]))

    save_activations(tmp_path / "again.npz", loaded)
    again = load_activations(tmp_path / "again.npz", model)
    np.testing.assert_array_equal(again.muscle_contraction, loaded.muscle_contraction)

    active = activation.active_tet_indices(model)
    raw = np.tile(activation.NEUTRAL_ACTIVATION, (4, len(active), 1))
    raw[2, :, 0] = 0.8
    save_activations(tmp_path / "raw.npz", ActivationInput(jaw=np.zeros((4, 5)), activations=raw, fps=60.0,
                                                           head_transforms=np.tile(np.eye(4), (4, 1, 1))))
    loaded_raw = load_activations(tmp_path / "raw.npz", model)
    assert loaded_raw.muscle_contraction is None and loaded_raw.fps == 60.0
    frame = loaded_raw.tet_activations(model, 2)
    np.testing.assert_array_equal(frame[active, 0, 0], 0.8)

    good = _good_activation_arrays(model)
    np.savez(tmp_path / "good.npz", **good)
    loaded_good = load_activations(tmp_path / "good.npz", model)
    np.testing.assert_array_equal(loaded_good.head_transforms, good["head_transforms"])
    assert loaded_good.fps == 30.0


def _with(arrays, **changes):
    result = {key: value for key, value in arrays.items() if key not in changes or changes[key] is not None}
    result.update({key: value for key, value in changes.items() if value is not None})
    return result


def _bad_activation_cases(model):
    good = _good_activation_arrays(model)
    muscle_count = len(model["muscle_names"])
    active_count = len(activation.active_tet_indices(model))
    contraction = good["muscle_contraction"]
    without = lambda *keys: {k: v for k, v in good.items() if k not in keys}  # noqa: E731
    nan_contraction = contraction.copy()
    nan_contraction[1, 3] = np.nan
    negative = contraction.copy()
    negative[0, 0] = -1.0
    scaled = good["head_transforms"].copy()
    scaled[1, :3, :3] *= 1.1
    last_row = good["head_transforms"].copy()
    last_row[0, 3, 0] = 0.5
    mirrored = good["head_transforms"].copy()
    mirrored[2, 0, 0] = -1.0
    def neutral(frames, tets=active_count):
        return np.tile(activation.NEUTRAL_ACTIVATION, (frames, tets, 1))

    flat = neutral(3)
    flat[1, 5, 2] = 0.0
    return {
        "missing jaw": ("jaw", without("jaw")),
        "neither activation kind": ("muscle_contraction", without("muscle_contraction")),
        "both activation kinds": ("muscle_contraction",
                                  _with(good, activations=neutral(3))),
        "wrong muscle count": ("muscle_contraction", _with(good, muscle_contraction=contraction[:, :-1])),
        "T mismatch contraction": ("muscle_contraction", _with(good, muscle_contraction=contraction[:2])),
        "NaN contraction": ("muscle_contraction", _with(good, muscle_contraction=nan_contraction)),
        "negative gamma": ("muscle_contraction", _with(good, muscle_contraction=negative)),
        "zero gamma": ("muscle_contraction", _with(good, muscle_contraction=np.zeros_like(contraction))),
        "text contraction": ("muscle_contraction", _with(good, muscle_contraction=contraction.astype(str))),
        "unknown muscle name": ("muscle_names", _with(good, muscle_contraction=contraction[:, :2],
                                                      muscle_names=np.array(["frontalis_L", "frowner_R"]))),
        "repeated muscle name": ("muscle_names", _with(good, muscle_contraction=contraction[:, :2],
                                                       muscle_names=np.array(["frontalis_L", "frontalis_L"]))),
        "numeric muscle names": ("muscle_names", _with(good, muscle_contraction=contraction[:, :2],
                                                       muscle_names=np.array([1, 2]))),
        "names without contraction": ("muscle_names", _with(without("muscle_contraction"),
                                                            activations=neutral(3),
                                                            muscle_names=model["muscle_names"])),
        "activations wrong A": ("activations", _with(without("muscle_contraction"),
                                                     activations=neutral(3, active_count + 1))),
        "activations T mismatch": ("activations", _with(without("muscle_contraction"),
                                                        activations=neutral(2))),
        "activations not positive definite": ("activations", _with(without("muscle_contraction"), activations=flat)),
        "jaw wrong width": ("jaw", _with(good, jaw=np.zeros((3, 4)))),
        "jaw NaN": ("jaw", _with(good, jaw=np.full((3, 5), np.nan))),
        "jaw no frames": ("jaw", _with(good, jaw=np.zeros((0, 5)), muscle_contraction=np.ones((0, muscle_count)),
                                       head_transforms=None)),
        "head transforms T mismatch": ("head_transforms", _with(good, head_transforms=good["head_transforms"][:2])),
        "head transform with scale": ("head_transforms", _with(good, head_transforms=scaled)),
        "head transform bad last row": ("head_transforms", _with(good, head_transforms=last_row)),
        "head transform mirrored": ("head_transforms", _with(good, head_transforms=mirrored)),
        "fps negative": ("fps", _with(good, fps=np.float64(-24.0))),
        "fps not a scalar": ("fps", _with(good, fps=np.array([24.0, 25.0]))),
        "misspelt key": ("head_transform", _with(good, head_transform=good["head_transforms"])),
    }


def test_every_bad_activation_file_names_its_key(model, tmp_path):
    for label, (key, arrays) in _bad_activation_cases(model).items():
        path = tmp_path / f"{label.replace(' ', '_')}.npz"
        np.savez(path, **arrays)
        with pytest.raises(AnimationInputError) as error:
            load_activations(path, model)
        assert str(error.value).startswith(f"{key}:"), (label, str(error.value))


def test_unreadable_activation_files_name_the_file(model, tmp_path):
    missing = tmp_path / "missing.npz"
    text = tmp_path / "text.npz"
    text.write_text("not an archive")
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    objects = tmp_path / "objects.npz"
    np.savez(objects, jaw=np.array([{"open": 1}], dtype=object))
    for path in (missing, text, single, objects):
        with pytest.raises(AnimationInputError) as error:
            load_activations(path, model)
        assert str(error.value).startswith(f"{path}:"), str(error.value)


def test_maps_file_round_trips(model, tmp_path):
    skin_count = len(model["skin_vertices"])
    patch, _ = _cheek_patch(model)
    written = MapsInput(fat=patch, stiffness=np.full(skin_count, 0.5), paralysis=0.5 * patch,
                        stiffness_range=(1.0, 3.0), paralysed_muscles=("frontalis_L", "zygomaticus_major_L"))
    save_maps(tmp_path / "MAPS.npz", written)
    loaded = load_maps(tmp_path / "MAPS.npz", model)
    np.testing.assert_array_equal(loaded.fat, patch)
    np.testing.assert_array_equal(loaded.stiffness, 0.5)
    assert loaded.stiffness_range == (1.0, 3.0)
    assert loaded.density is None and loaded.density_range is None
    assert loaded.paralysed_muscles == ("frontalis_L", "zygomaticus_major_L")

    np.savez(tmp_path / "one_name.npz", paralysed_muscles=np.array("mentalis_R"))
    assert load_maps(tmp_path / "one_name.npz", model).paralysed_muscles == ("mentalis_R",)
    np.savez(tmp_path / "empty.npz")
    assert load_maps(tmp_path / "empty.npz", model) == MapsInput()


def test_every_bad_maps_file_names_its_key(model, tmp_path):
    skin_count = len(model["skin_vertices"])
    ones = np.ones(skin_count)
    with_nan = ones.copy()
    with_nan[7] = np.nan
    cases = {
        "fat above 1": ("fat", {"fat": 1.5 * ones}),
        "fat negative": ("fat", {"fat": -0.1 * ones}),
        "fat wrong length": ("fat", {"fat": ones[:-1]}),
        "fat per tet": ("fat", {"fat": np.ones((skin_count, 1))}),
        "stiffness above 1": ("stiffness", {"stiffness": 2.0 * ones, "stiffness_range": np.array([1.0, 2.0])}),
        "stiffness without its range": ("stiffness_range", {"stiffness": 0.5 * ones}),
        "a range without its map": ("density_range", {"density_range": np.array([1.0, 2.0])}),
        "stiffness range of three": ("stiffness_range", {"stiffness": ones, "stiffness_range": np.ones(3)}),
        "stiffness range zero": ("stiffness_range", {"stiffness": ones, "stiffness_range": np.array([0.0, 2.0])}),
        "density negative": ("density", {"density": -ones, "density_range": np.array([1.0, 2.0])}),
        "density NaN": ("density", {"density": with_nan, "density_range": np.array([1.0, 2.0])}),
        "paralysis above 1": ("paralysis", {"paralysis": 2.0 * ones}),
        "unknown paralysed muscle": ("paralysed_muscles", {"paralysed_muscles": np.array(["frontalis_L", "chin_L"])}),
        "numeric paralysed muscles": ("paralysed_muscles", {"paralysed_muscles": np.array([3])}),
        "misspelt key": ("paralyzed_muscles", {"paralyzed_muscles": np.array(["frontalis_L"])}),
    }
    for label, (key, arrays) in cases.items():
        path = tmp_path / f"{label.replace(' ', '_')}.npz"
        np.savez(path, **arrays)
        with pytest.raises(AnimationInputError) as error:
            load_maps(path, model)
        assert str(error.value).startswith(f"{key}:"), (label, str(error.value))
