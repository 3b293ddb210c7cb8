"""The crease / fold metric (solver/geometry/bends.py) against folds made by hand."""
from __future__ import annotations

import numpy as np
import pytest
from surface_sheets import grid_sheet

from solver.geometry.bends import CREASE_DEGREES, FOLD_DEGREES, AnySplitBends, SkinBends


def _sheet(n=8, spacing=0.002):
    """An n × n grid of 2 mm spacing, normals +z."""
    return grid_sheet(n, spacing)


def _bent_along_x(vertices, column_x, degrees):
    """The sheet folded up by `degrees` about the line x = column_x (the part beyond it rotated)."""
    bent = vertices.copy()
    beyond = vertices[:, 0] > column_x + 1e-12
    angle = np.radians(degrees)
    local = vertices[beyond, 0] - column_x
    bent[beyond, 0] = column_x + local * np.cos(angle)
    bent[beyond, 2] = local * np.sin(angle)
    return bent


def test_interior_edges_of_a_grid():
    vertices, triangles = _sheet(n=4)
    bends = SkinBends(triangles, len(vertices))
    # 3 × 3 quads: 12 inner grid edges + 9 diagonals
    assert len(bends) == 21
    assert np.allclose(bends.angles(vertices), 0.0)


@pytest.mark.parametrize("degrees, creased, folded", [(20.0, 0, 0), (45.0, 7, 0), (120.0, 7, 7), (175.0, 7, 7)])
def test_a_hand_made_fold_is_counted_on_its_hinge(degrees, creased, folded):
    vertices, triangles = _sheet(n=8)
    bends = SkinBends(triangles, len(vertices))
    bent = _bent_along_x(vertices, column_x=3 * 0.002, degrees=degrees)
    count = bends.count(bent, vertices)
    assert (count.creased, count.folded) == (creased, folded)     # the hinge has 7 edges
    assert count.worst_excess_degrees == pytest.approx(degrees, abs=1e-6)
    hinge = bends.creased_vertices(bent, vertices, degrees=min(degrees, CREASE_DEGREES) - 1)
    assert np.allclose(vertices[hinge, 0], 3 * 0.002) or degrees < CREASE_DEGREES


def test_a_fold_the_reference_has_too_does_not_count():
    vertices, triangles = _sheet(n=8)
    bends = SkinBends(triangles, len(vertices))
    rig = _bent_along_x(vertices, 3 * 0.002, 100.0)
    assert bends.count(rig, rig).folded == 0
    # ... but folding it further does, by the difference only
    further = _bent_along_x(vertices, 3 * 0.002, 140.0)
    count = bends.count(further, rig)
    assert (count.creased, count.folded) == (7, 0)
    assert count.worst_excess_degrees == pytest.approx(40.0, abs=1e-6)


def test_a_smooth_curl_and_rigid_motion_crease_nothing():
    vertices, triangles = _sheet(n=12)
    bends = SkinBends(triangles, len(vertices))
    # wrapped onto a cylinder of radius 10 mm: 22 mm of sheet turns 126°, 11 edges' worth at once
    radius = 0.010
    angle = vertices[:, 0] / radius
    curled = np.stack([radius * np.sin(angle), vertices[:, 1], radius * (1 - np.cos(angle))], axis=1)
    assert bends.count(curled, vertices).creased == 0
    rotation = np.linalg.qr(np.random.default_rng(1).normal(size=(3, 3)))[0]
    rotation *= np.sign(np.linalg.det(rotation))
    moved = curled @ rotation.T + np.array([0.1, -0.2, 0.3])
    assert np.allclose(bends.excess(moved, curled), 0.0, atol=1e-9)


def test_a_spike_creases_and_an_overturned_vertex_folds():
    """The crumpled, spiky lip the issue shows: a vertex pushed 10 mm out of a sheet of 2 mm
    spacing creases its ring (its triangles stand at ~80° to the sheet, not yet turned over);
    a vertex dragged across its neighbour turns triangles over, a fold."""
    vertices, triangles = _sheet(n=8)
    bends = SkinBends(triangles, len(vertices))
    centre = 3 * 8 + 3
    spiky = vertices.copy()
    spiky[centre, 2] = -0.01
    count = bends.count(spiky, vertices)
    assert count.creased >= 6 and count.folded == 0 and count.worst_excess_degrees > 75.0
    overturned = vertices.copy()
    overturned[centre, 0] += 0.0035            # past its right-hand neighbour, 2 mm away
    overturned[centre, 2] = 0.0005
    count = bends.count(overturned, vertices)
    assert count.folded > 0 and count.worst_excess_degrees > FOLD_DEGREES


def test_region_and_inconsistent_triangles_are_left_out():
    vertices, triangles = _sheet(n=4)
    region = vertices[:, 0] < 0.0025           # the first two columns: one strip of quads
    assert len(SkinBends(triangles, len(vertices), region=region)) == 3 * 1 + 2   # 3 diagonals + 2 rungs
    flipped = triangles.copy()
    flipped[0] = flipped[0, ::-1]              # one triangle wound the other way
    assert len(SkinBends(flipped, len(vertices))) == 21 - 2     # its two interior edges dropped
    with pytest.raises(ValueError):
        SkinBends(triangles, len(vertices), region=np.ones(3, dtype=bool))


def test_folds_next_to_a_sliver_of_the_reference_are_told_apart():
    vertices, triangles = _sheet(n=8)
    bends = SkinBends(triangles, len(vertices))
    centre = 3 * 8 + 3
    squashed = vertices.copy()
    squashed[centre, 0] += 0.00195          # the reference all but flattens the triangles left of it
    overturned = squashed.copy()
    overturned[centre, 0] += 0.0002         # 0.2 mm further turns them over
    count = bends.count(overturned, squashed, rest=vertices)
    assert count.folded > 0 and count.folded_on_slivers == count.folded
    assert bends.count(overturned, squashed).folded_on_slivers == 0          # not asked without the rest shape


SQUARE = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])


def test_a_quad_folded_only_in_its_other_split_is_seen():
    # Corner 2 pulled inside the square: split along 0-2 the two halves lie flat, split along
    # 1-3 the half (1,2,3) turns over. A viewer may show either.
    concave = SQUARE.copy()
    concave[2] = [0.3, 0.3, 0.0]
    quad = np.array([[0, 1, 2, 3]])
    assert np.degrees(SkinBends(np.array([[0, 1, 2], [0, 2, 3]]), 4).angles(concave)).max() < 1e-9
    both = AnySplitBends(quad, 4)
    assert len(both) == 2                        # the two halves of each split, across its diagonal
    assert both.excess(concave, SQUARE).max() == pytest.approx(180.0)
    assert np.abs(both.excess(SQUARE + 0.5, SQUARE)).max() < 1e-9


def test_pairs_between_quads_cover_every_split_of_either():
    # Two quads sharing the edge 1-2: two diagonal pairs each, and 2 x 2 triangles across 1-2.
    vertices = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [2, 0, 0], [2, 1, 0]])
    quads = np.array([[0, 1, 2, 3], [1, 4, 5, 2]])
    both = AnySplitBends(quads, len(vertices))
    assert len(both) == 4 + 4
    assert np.abs(both.angles(vertices)).max() < 1e-9
    # triangles and padded quad rows contribute themselves only
    assert len(AnySplitBends(np.array([[0, 1, 2, -1], [0, 2, 3, -1]]), 4)) == 1
    assert len(AnySplitBends(np.array([[0, 1, 2], [0, 2, 3]]), 4)) == 1
    with pytest.raises(ValueError, match="faces must be"):
        AnySplitBends(np.zeros((2, 5), np.int64), 4)
