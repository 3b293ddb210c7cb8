"""The skin filter (solver/physics/skin_filter.py): the rig where the simulation agrees with it,
creases finer than the kernel smoothed away, broad motion kept, colliders respected."""
from __future__ import annotations

import numpy as np
import pytest
from surface_sheets import grid_sheet, slot_wall

from solver.geometry.bends import AnySplitBends, SkinBends
from solver.physics.skin_filter import (FOLD_GUARD_DEGREES, FOLD_GUARD_ROUNDS, WIDTH_PER_MOUTH_SPACING, SkinFilter,
                                       default_width)

SPACING = 0.001          # 1 mm skin triangles, as at ICT's lips


def _sheet(n=41):
    return grid_sheet(n, SPACING)


@pytest.fixture(scope="module")
def sheet():
    vertices, triangles = _sheet()
    return vertices, triangles, SkinFilter(vertices, triangles, width_m=0.004)


def test_no_deviation_shows_the_rig_exactly_and_a_constant_one_passes(sheet):
    vertices, triangles, skin_filter = sheet
    rig = vertices + np.array([0.0, 0.0, 0.002]) * np.sin(vertices[:, :1] * 300.0)   # a wrinkled rig frame
    assert np.abs(skin_filter.apply(rig, rig).skin - rig).max() < 1e-15
    shifted = rig + np.array([0.001, -0.002, 0.0005])
    assert np.abs(skin_filter.apply(shifted, rig).skin - shifted).max() < 1e-12


def test_a_kink_finer_than_the_kernel_is_smoothed_and_broad_motion_kept(sheet):
    vertices, triangles, skin_filter = sheet
    bends = SkinBends(triangles, len(vertices))
    # A tet-face kink: 1.5 mm of push that turns within one 1 mm row, as at ICT's lip line.
    x = vertices[:, 0]
    kinked = vertices.copy()
    kinked[:, 2] = 0.0015 * np.clip((x - 0.02) / 0.001, 0.0, 1.0)
    assert bends.count(kinked, vertices).creased > 0
    shown = skin_filter.apply(kinked, vertices).skin
    assert bends.count(shown, vertices).creased == 0
    # far from the kink the push is kept
    far = x > 0.035
    assert np.abs(shown[far, 2] - 0.0015).max() < 0.0002
    # a broad bulge (20 mm across) keeps most of its height
    bulge = vertices.copy()
    bulge[:, 2] = 0.002 * np.exp(-((x - 0.02) ** 2 + (vertices[:, 1] - 0.02) ** 2) / (2 * 0.007 ** 2))
    centre = np.argmax(bulge[:, 2])
    assert skin_filter.apply(bulge, vertices).skin[centre, 2] > 0.75 * 0.002


def test_the_filter_keeps_the_skin_out_of_a_collider_smoothly(sheet):
    vertices, triangles, skin_filter = sheet
    x = vertices[:, 0]
    # the simulation held a strip of skin 1 mm out of a wall at z < 0.001 over x < 10 mm;
    # filtered alone, the strip's edge would sink back into the wall
    simulated = vertices.copy()
    simulated[x < 0.01, 2] = 0.001
    wall = (x < 0.01)

    def keep_out(positions):
        offending = wall & (positions[:, 2] < 0.001 - 1e-9)
        moved = positions.copy()
        moved[offending, 2] = 0.001
        return offending, moved

    unpinned = skin_filter.apply(simulated, vertices).skin
    assert keep_out(unpinned)[0].any()
    result = skin_filter.apply(simulated, vertices, keep_out)
    assert not keep_out(result.skin)[0].any()
    assert result.unfiltered == 0
    # pushed out smoothly: on or just above the wall (the push is smoothed too), no crease where
    # the strip meets the free sheet
    assert result.skin[wall, 2].min() >= 0.001 - 1e-9 and result.skin[wall, 2].max() < 0.001 + 0.0003
    bends = SkinBends(triangles, len(vertices))
    assert bends.count(result.skin, vertices).creased == 0


def test_width_comes_from_the_mouth_lattice_spacing(small_demo_model):
    import json
    info = json.loads(str(small_demo_model["build_info"]))
    assert default_width(small_demo_model) == pytest.approx(WIDTH_PER_MOUTH_SPACING * info["mouth_lattice_spacing_m"])
    with pytest.raises(ValueError, match="positive length"):
        SkinFilter(np.zeros((3, 3)), np.array([[0, 1, 2]]), width_m=0.0)


def test_vertices_a_push_cannot_clear_are_pinned_on_the_collider(sheet):
    """A one-vertex-wide slot in the wall: the smoothed push cannot reach into it, so the vertices
    there are pinned onto its surface, exactly."""
    vertices, triangles, skin_filter = sheet
    slot, keep_out = slot_wall(vertices)
    simulated = vertices.copy()
    simulated[slot, 2] = 0.003
    result = skin_filter.apply(simulated, vertices, keep_out)
    assert not keep_out(result.skin)[0].any()
    assert result.pinned > 0 and result.unfiltered == 0


def test_smoothing_is_measured_on_the_rig_frame_so_a_squashed_strip_stays_smooth(sheet):
    """Where the rig squashes skin (a mouth corner pressed shut), a deviation smooth on the rest
    skin turns within a few squashed triangles; measured on the rig frame it stays smooth there."""
    vertices, triangles, skin_filter = sheet
    x = vertices[:, 0]
    rig = vertices.copy()               # a 4 mm strip squashed to a tenth of its width
    strip = np.clip(x, 0.018, 0.022)
    rig[:, 0] = np.where(x < 0.018, x, np.where(x > 0.022, x - 0.0036, 0.018 + 0.1 * (strip - 0.018)))
    simulated = rig.copy()              # a 1.5 mm step across the strip, 6 mm wide on the rest skin
    simulated[:, 2] += 0.0015 * np.tanh((x - 0.02) / 0.003)
    bends = SkinBends(triangles, len(vertices))
    shown = skin_filter.apply(simulated, rig).skin
    assert bends.count(shown, rig).creased == 0
    assert bends.excess(shown, rig).max() < 10.0          # degrees
    # far from the strip the deviation is kept
    assert np.abs(shown[x > 0.035, 2] - simulated[x > 0.035, 2]).max() < 0.0002


def test_the_fold_guard_holds_a_fold_the_plate_passes_flat(sheet):
    """A deviation compressing the skin by more than its own length over 20 mm: the plate
    passes most of a mode that broad and turns a band of triangles over; the guard holds the
    deviation flat on the triangles of the folded pairs and leaves the rest as the plate has it."""
    vertices, triangles, skin_filter = sheet
    bends = SkinBends(triangles, len(vertices))
    x, y = vertices[:, 0], vertices[:, 1]
    wavelength = 0.02
    simulated = vertices.copy()
    simulated[:, 0] -= (3.0 * np.sin(2 * np.pi * (x - 0.02) / wavelength) * wavelength / (2 * np.pi)
                        * np.exp(-((y - 0.02) / 0.008) ** 2))
    plate = SkinFilter(vertices, triangles, width_m=0.004, fold_guard_rounds=0).apply(simulated, vertices)
    assert bends.count(plate.skin, vertices).folded > 10 and plate.guarded == 0
    guarded = skin_filter.apply(simulated, vertices)
    assert bends.count(guarded.skin, vertices).folded == 0
    assert guarded.guarded > 0
    # away from the fold (the sheet's rim in y) the shown skin is the plate's
    rim = np.abs(y - 0.02) > 0.017
    assert np.abs(guarded.skin[rim] - plate.skin[rim]).max() < 0.3e-3



def test_the_fold_guard_keeps_its_least_bent_round(sheet):
    """A 7 mm compression step folds the sheet, and a one-vertex slot wall pins skin inside the
    patch the guard holds. Escalated, the membrane carries the pinned vertices' deviation over its
    whole patch and turns it at the patch's edge, so a later round can bend more than an earlier
    one (as at ICT's mouth corners with the lips closed over an open jaw). The guard shows its
    least-bent round: more rounds never show a more bent skin, and the wall still holds."""
    vertices, triangles, _ = sheet
    x, y = vertices[:, 0], vertices[:, 1]
    simulated = vertices.copy()
    simulated[:, 0] -= 0.0068 * np.tanh((x - 0.0252) / 0.0019) * np.exp(-((y - 0.0192) / 0.0192) ** 2)
    _, keep_out = slot_wall(vertices, x=0.027, height=0.0022)
    shown_pairs = AnySplitBends(triangles, len(vertices))
    overshoots = []                     # degrees beyond the guard's threshold, summed over the pairs
    for rounds in range(FOLD_GUARD_ROUNDS + 1):
        result = SkinFilter(vertices, triangles, width_m=0.004, fold_guard_rounds=rounds).apply(
            simulated, vertices, keep_out)
        assert not keep_out(result.skin)[0].any()
        overshoots.append(np.maximum(shown_pairs.excess(result.skin, vertices) - FOLD_GUARD_DEGREES, 0.0).sum())
    assert overshoots[0] > 100.0                        # the plate alone folds the step
    assert all(later <= earlier for earlier, later in zip(overshoots, overshoots[1:]))
    assert overshoots[-1] < 0.05 * overshoots[0]


def _reference_laplacian(vertices, triangles, areas):
    """The cotangent Laplacian from triplets: ½ cot of each corner's angle (with the given area)
    on the opposite edge, zero row sums."""
    import scipy.sparse as sparse
    rows, columns, values = [], [], []
    for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        u = vertices[triangles[:, a]] - vertices[triangles[:, c]]
        v = vertices[triangles[:, b]] - vertices[triangles[:, c]]
        half_cotangent = 0.5 * np.einsum("ij,ij->i", u, v) / (2.0 * areas)
        rows += [triangles[:, a], triangles[:, b]]
        columns += [triangles[:, b], triangles[:, a]]
        values += [half_cotangent, half_cotangent]
    weights = sparse.csr_matrix((np.concatenate(values), (np.concatenate(rows), np.concatenate(columns))),
                                shape=(len(vertices), len(vertices)))
    return sparse.diags(np.asarray(weights.sum(axis=1)).ravel()) - weights


def test_the_plate_and_membrane_are_assembled_as_sparse_products_give_them():
    """The compiled plate and membrane (plate_assembly.py) against τ² L M⁻¹ L and L from
    triplets and SciPy's products, on a jittered sheet with obtuse triangles and squashed ones
    floored at their share of the rest area."""
    import scipy.sparse as sparse
    from solver.physics.plate_assembly import lumped_areas
    vertices, triangles = _sheet(9)
    rng = np.random.default_rng(3)
    skin_filter = SkinFilter(vertices, triangles, width_m=0.004)
    surface = vertices + rng.normal(0.0, 0.4 * SPACING, vertices.shape)
    surface[40:43, 0] = surface[40, 0]                       # squash a few triangles to slivers
    areas = skin_filter._floored_areas(surface)
    laplacian = _reference_laplacian(surface, triangles, areas)
    expected = (skin_filter._tau ** 2 * (laplacian @ sparse.diags(1.0 / lumped_areas(areas, triangles, len(vertices)))
                                         @ laplacian)).toarray()
    scale = np.abs(expected).max()
    plate = skin_filter._plate(surface)
    assert np.abs(plate.toarray() - expected).max() <= 1e-12 * scale
    weights = rng.uniform(1.0, 2.0, len(vertices))
    assert np.abs(skin_filter._matrix(plate, weights).toarray() - (np.diag(weights) + expected)).max() <= 1e-12 * scale
    guarded = rng.random(len(triangles)) < 0.2
    membrane = _reference_laplacian(surface, triangles[guarded], areas[guarded]).toarray()
    assert np.abs(skin_filter._membrane(surface, guarded).toarray() - membrane).max() <= 1e-12 * np.abs(membrane).max()
