"""The muscle overlay's surface without bpy: marching tetrahedra on analytic fields (a sphere
inside a tet grid and one cut by the grid's boundary), the exact volume above a level, and each
muscle of a small slab model as a closed surface enclosing its volume."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blender_addon import muscle_isosurface, surface_smoothing  # noqa: E402


def tet_grid(cells: int, low: float = -1.0, high: float = 1.0):
    """Nodes and positively oriented tets of a cube of cells³ cubes, each split into six tets
    around its main diagonal (Kuhn), so neighbouring cubes share their faces' diagonals."""
    ticks = np.linspace(low, high, cells + 1)
    nodes = np.stack(np.meshgrid(ticks, ticks, ticks, indexing="ij"), -1).reshape(-1, 3)
    index = np.arange(len(nodes)).reshape([cells + 1] * 3)
    corner = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)])
    kuhn = np.array([(0, 1, 2, 6), (0, 2, 3, 6), (0, 3, 7, 6), (0, 7, 4, 6), (0, 4, 5, 6), (0, 5, 1, 6)])
    cubes = np.array(list(np.ndindex(cells, cells, cells)))
    corners = index[tuple((cubes[:, None, :] + corner[None]).transpose(2, 0, 1))]    # (cubes, 8)
    tets = corners[:, kuhn].reshape(-1, 4)
    edges = nodes[tets[:, 1:]] - nodes[tets[:, :1]]
    backwards = np.einsum("ij,ij->i", np.cross(edges[:, 0], edges[:, 1]), edges[:, 2]) < 0
    tets[backwards] = tets[backwards][:, [0, 2, 1, 3]]
    return nodes, tets


def directed_edge_counts(triangles):
    """(edge → count, reversed edge → count) of a triangle surface's directed edges."""
    directed = np.asarray(triangles)[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2)
    forward = dict(zip(*np.unique(directed[:, 0] * 10**7 + directed[:, 1], return_counts=True)))
    backward = dict(zip(*np.unique(directed[:, 1] * 10**7 + directed[:, 0], return_counts=True)))
    return forward, backward


def assert_closed_and_consistently_oriented(triangles, manifold: bool = True):
    """Every directed edge is met by its reverse as often (a closed surface whose neighbours
    face the same way), and on a manifold once each."""
    forward, backward = directed_edge_counts(triangles)
    assert forward == backward
    if manifold:
        assert set(forward.values()) == {1}


def surface_area(vertices, triangles) -> float:
    corners = vertices[triangles]
    return 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1).sum()


@pytest.mark.parametrize("centre", [(0.0, 0.0, 0.0), (0.13, -0.07, 0.05)])
def test_marching_tets_finds_a_closed_outward_sphere_of_the_right_area_and_volume(centre):
    nodes, tets = tet_grid(12)
    radius = 0.7
    values = radius - np.linalg.norm(nodes - np.array(centre), axis=1)     # > 0 inside the sphere
    outer = muscle_isosurface.boundary_faces(nodes, tets)
    vertices, triangles = muscle_isosurface.marching_tets(nodes, tets, values, 0.0, outer)
    assert_closed_and_consistently_oriented(triangles)
    euler = len(vertices) - len(surface_smoothing.unique_edges(triangles)) + len(triangles)
    assert euler == 2, "one sphere: no holes, no handles"
    # Every vertex on the sphere up to the field's linear interpolation (cells of 1/6).
    assert np.abs(np.linalg.norm(vertices - np.array(centre), axis=1) - radius).max() < 0.02
    volume = surface_smoothing.enclosed_volume(vertices, triangles)
    assert volume == pytest.approx(4 / 3 * np.pi * radius ** 3, rel=0.03)
    assert surface_area(vertices, triangles) == pytest.approx(4 * np.pi * radius ** 2, rel=0.03)
    # The volume above the level, from the field alone, is the volume the surface encloses.
    above = muscle_isosurface.volume_above(np.sort(values[tets], axis=1),
                                           muscle_isosurface.tet_volumes(nodes, tets), 0.0)
    assert above == pytest.approx(volume, rel=1e-9)


def test_where_the_field_reaches_the_meshs_boundary_the_surface_is_closed_by_it():
    nodes, tets = tet_grid(12)
    radius = 0.7
    values = radius - np.linalg.norm(nodes - np.array([0.0, 0.0, 1.0]), axis=1)   # centred on the top face
    outer = muscle_isosurface.boundary_faces(nodes, tets)
    vertices, triangles = muscle_isosurface.marching_tets(nodes, tets, values, 0.0, outer)
    assert_closed_and_consistently_oriented(triangles)
    volume = surface_smoothing.enclosed_volume(vertices, triangles)
    assert volume == pytest.approx(2 / 3 * np.pi * radius ** 3, rel=0.03)      # the half inside the grid
    on_top = np.isclose(vertices[:, 2], 1.0)
    assert np.linalg.norm(vertices[on_top, :2], axis=1).max() == pytest.approx(radius, abs=0.02)


def test_the_volume_above_a_level_is_exact_for_random_linear_fields():
    nodes, tets = tet_grid(3)
    values = np.random.default_rng(7).random(len(nodes))
    outer = muscle_isosurface.boundary_faces(nodes, tets)
    volumes = muscle_isosurface.tet_volumes(nodes, tets)
    for level in (0.1, 0.35, 0.5, 0.8):
        vertices, triangles = muscle_isosurface.marching_tets(nodes, tets, values, level, outer)
        assert_closed_and_consistently_oriented(triangles)
        assert muscle_isosurface.volume_above(np.sort(values[tets], axis=1), volumes, level) == \
            pytest.approx(surface_smoothing.enclosed_volume(vertices, triangles), rel=1e-9, abs=1e-12)
    # A tie at the corners (two corners equal) divides by no zero.
    tie = np.sort(np.array([[0.2, 0.2, 0.7, 0.7]]), axis=1)
    assert muscle_isosurface.volume_above(tie, np.ones(1), 0.2) == pytest.approx(1.0)
    assert muscle_isosurface.volume_above(tie, np.ones(1), 0.45) == pytest.approx(0.5)


def test_each_muscle_is_a_closed_smooth_surface_enclosing_its_volume():
    nodes, tets = tet_grid(10)                  # cells 0.2 wide
    centres = nodes[tets].mean(axis=1)
    fraction = np.zeros((len(tets), 5))
    fraction[:, 0] = np.linalg.norm(centres - [0.3, 0.2, 0.0], axis=1) < 0.45                # a thick blob
    slab = (np.abs(centres[:, 2] + 0.5) < 0.4) & (np.abs(centres[:, 0]) < 0.7)
    fraction[:, 1] = slab                                                                     # a slab 4 cells thick
    fraction[:, 2] = 0.5 * slab                                                               # … half filled
    fraction[:, 4] = (np.abs(centres[:, 2] - 0.7) < 0.1) & (np.abs(centres[:, 1]) < 0.5)     # a sheet one cell thick
    vertices, triangles, labels = muscle_isosurface.muscle_isosurfaces(nodes, tets, fraction)
    assert sorted(np.unique(labels)) == [0, 1, 2, 4], "every muscle that fills a tet, and no other"
    target = muscle_isosurface.tet_volumes(nodes, tets) @ fraction
    enclosed = muscle_isosurface.volumes_by_label(vertices, triangles, labels, 5)
    for muscle in (0, 1, 2, 4):
        assert_closed_and_consistently_oriented(triangles[labels == muscle])
    assert enclosed[[0, 1]] == pytest.approx(target[[0, 1]], rel=0.01)
    # Where the field never nears 1 the level stops at HIGHEST_LEVEL × its peak: a region a muscle
    # half fills is drawn bigger than half of it (but within it), a sheet one cell thick keeps a
    # body at least its own volume.
    assert target[2] < enclosed[2] <= 1.01 * target[1]
    assert target[4] <= enclosed[4] < 3.0 * target[4]
    raw_vertices, raw_triangles, _ = muscle_isosurface.muscle_isosurfaces(nodes, tets, fraction, smooth=False)
    assert surface_smoothing.dihedral_angles(vertices, triangles).mean() < \
        surface_smoothing.dihedral_angles(raw_vertices, raw_triangles).mean()
