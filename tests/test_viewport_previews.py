"""The viewport previews' bpy-free rules: surface smoothing of the muscle overlay, the map and
fit-error colours, and the timeline markers of a bake's troubled frames."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from blender_addon import surface_smoothing, timeline_markers, viewport_previews  # noqa: E402
from solver.physics.maps import painted_multiplier  # noqa: E402


def _voxel_block(size=4):
    """The boundary of a size³ block of unit cubes split into six tets each (Kuhn): a box whose
    edges and corners are 90° creases, like the staircase of a muscle's tet faces."""
    grid = np.stack(np.meshgrid(*[np.arange(size + 1)] * 3, indexing="ij"), -1).reshape(-1, 3).astype(float)
    index = np.arange(len(grid)).reshape([size + 1] * 3)
    tets = []
    for i, j, k in np.ndindex(size, size, size):
        c = [index[i + a, j + b, k + d] for a, b, d in
             ((0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1))]
        for tet in ((0, 1, 2, 6), (0, 2, 3, 6), (0, 3, 7, 6), (0, 7, 4, 6), (0, 4, 5, 6), (0, 5, 1, 6)):
            tets.append([c[n] for n in tet])
    tets = np.array(tets)
    volume = np.einsum("ij,ij->i", grid[tets[:, 1]] - grid[tets[:, 0]],
                       np.cross(grid[tets[:, 2]] - grid[tets[:, 0]], grid[tets[:, 3]] - grid[tets[:, 0]]))
    tets[volume < 0] = tets[volume < 0][:, [0, 2, 1, 3]]
    faces = tets[:, [[1, 2, 3], [0, 3, 2], [0, 1, 3], [0, 2, 1]]].reshape(-1, 3)
    _, first, counts = np.unique(np.sort(faces, 1), axis=0, return_index=True, return_counts=True)
    boundary = faces[first[counts == 1]]
    used, remapped = np.unique(boundary, return_inverse=True)
    return grid[used], remapped.reshape(-1, 3)


def test_taubin_smoothing_rounds_the_creases_and_keeps_the_volume():
    from blender_addon import muscle_isosurface
    vertices, triangles = _voxel_block()
    assert surface_smoothing.enclosed_volume(vertices, triangles) == pytest.approx(64.0)
    finer_vertices, finer = surface_smoothing.subdivide(vertices, triangles)
    assert len(finer) == 4 * len(triangles) and len(finer_vertices) == len(vertices) + len(
        surface_smoothing.unique_edges(triangles))
    assert surface_smoothing.enclosed_volume(finer_vertices, finer) == pytest.approx(64.0, rel=1e-12)
    assert len(surface_smoothing.dihedral_angles(finer_vertices, finer)) == len(finer) * 3 // 2, "still closed"
    smoothed = muscle_isosurface.smooth_keeping_volumes(vertices, triangles, np.zeros(len(triangles), dtype=np.int64))
    raw_angles = surface_smoothing.dihedral_angles(vertices, triangles)
    smooth_angles = surface_smoothing.dihedral_angles(smoothed, triangles)
    assert np.degrees(raw_angles.max()) == pytest.approx(90.0)
    assert smooth_angles.max() < 0.8 * raw_angles.max()        # measured 68° after the overlay's 8 passes
    assert surface_smoothing.enclosed_volume(smoothed, triangles) == pytest.approx(64.0, rel=1e-9)
    # Taubin alone (no volume rescaling) shrinks the block by little; plain Laplacian steps by much more.
    taubin = surface_smoothing.taubin_smooth(vertices, triangles)
    laplacian = surface_smoothing.taubin_smooth(vertices, triangles, lam=0.5, mu=0.0)
    assert surface_smoothing.enclosed_volume(taubin, triangles) > 0.8 * 64.0
    assert surface_smoothing.enclosed_volume(laplacian, triangles) < 0.5 * 64.0


def test_map_values_are_the_solvers_multipliers_on_the_panels_scale():
    weights = np.array([0.0, 0.25, 0.5, 1.0, 1.3, -0.2])
    values, low, high = viewport_previews.map_values(weights, (5.7, 0.7))
    np.testing.assert_allclose(values, painted_multiplier(np.clip(weights, 0, 1), (5.7, 0.7)))
    assert (low, high) == (0.7, 5.7)
    colours = viewport_previews.preview_colours(values, low, high)
    assert colours.shape == (6, 4) and np.all(colours[:, 3] == 1.0)
    # Weight 0 is the high end here (×5.7: yellow), weight 1 the low end (×0.7: violet).
    np.testing.assert_allclose(colours[0], viewport_previews.preview_colours([1.0], 0.0, 1.0)[0])
    np.testing.assert_allclose(colours[3], viewport_previews.preview_colours([0.0], 0.0, 1.0)[0])
    paralysis, low, high = viewport_previews.map_values(weights, None)
    assert (low, high) == (0.0, 1.0) and paralysis.max() == 1.0 and paralysis.min() == 0.0
    grey = viewport_previews.preview_colours([0.5, 0.5], 0.0, 1.0, defined=[True, False])
    assert not np.allclose(grey[0], grey[1]) and np.allclose(grey[1, 0], grey[1, 1], atol=0.02)


def test_markers_name_each_troubled_frame_at_its_scene_frame():
    result = {"converged": np.array([True, False, True, True, False]),
              "penetration_depth_max": np.array([0.0, 0.0, 4.2e-4, 5e-5, 0.0]),
              "inverted_tets": np.array([0, 0, 0, 0, 3])}
    assert timeline_markers.result_markers(result, first_frame=10) == [
        (11, "FP unconverged"), (12, "FP penetration 0.42 mm"), (14, "FP unconverged, inverted 3")]
    assert timeline_markers.result_markers({"converged": np.ones(3, bool)}, 1) == []


class _Markers(list):
    def new(self, name, frame):
        marker = type("Marker", (), {"name": name, "frame": frame})()
        self.append(marker)
        return marker


def test_marking_a_bake_replaces_only_the_markers_of_the_previous_bake():
    scene = type("Scene", (), {})()
    scene.timeline_markers = _Markers()
    scene.timeline_markers.new("F_01 user", 3)
    scene.timeline_markers.new("FP unconverged", 7)
    timeline_markers.mark_result(scene, {"converged": np.array([False, True])}, first_frame=20)
    assert [(m.name, m.frame) for m in scene.timeline_markers] == [("F_01 user", 3), ("FP unconverged", 20)]
