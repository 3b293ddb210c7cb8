"""The shell's geometry (issue 40): isotropic remeshing, the rig ↔ coarse maps, maximum depth and
eyelids. Synthetic meshes check the rules exactly; the ICT face (skipped without ../shared) checks
the behaviour on a real rig."""
from __future__ import annotations

import numpy as np
import pytest

from solver.geometry.closest_point import ClosestPointTree
from solver.geometry.mesh_ops import icosphere, vertex_normals
from solver.shell import depth
from solver.shell.remesh import boundary_loops, mesh_quality, remesh_isotropic, remesh_skin, weld_coincident
from solver.shell.transfer import RigTransfer, smoothed_warp, smoothing_radius
from tests.ict_data import ict_available, load_ict_rig

# --------------------------------------------------------------------------- a sheet with a slit and two holes

_CELLS = 40
_SLIT = (slice(12, 28), slice(19, 21))          # cells x 12..27, y 19..20: a 0.4 × 0.05 slit at y = 0.5
_EYES = [(slice(8, 12), slice(28, 32)), (slice(28, 32), slice(28, 32))]


def _holed_sheet(bend: float = 0.0):
    """A unit square of 40×40 cells with a mouth-like slit and two eye holes, optionally bent."""
    coordinates = np.linspace(0.0, 1.0, _CELLS + 1)
    x, y = np.meshgrid(coordinates, coordinates, indexing="ij")
    vertices = np.column_stack([x.ravel(), y.ravel(), bend * np.sin(np.pi * x.ravel())])
    keep = np.ones((_CELLS, _CELLS), bool)
    for hole in [_SLIT, *_EYES]:
        keep[hole] = False
    triangles = []
    for i, j in zip(*np.nonzero(keep)):
        a, b = i * (_CELLS + 1) + j, (i + 1) * (_CELLS + 1) + j
        triangles += [(a, b, b + 1), (a, b + 1, a + 1)]
    triangles = np.array(triangles)
    used = np.unique(triangles)
    index = np.full(len(vertices), -1)
    index[used] = np.arange(len(used))
    return vertices[used], index[triangles]


@pytest.fixture(scope="module")
def sheet():
    vertices, triangles = _holed_sheet()
    return vertices, triangles, remesh_isotropic(vertices, triangles, 600)


def test_remesh_hits_the_count_and_keeps_every_boundary_loop_open(sheet):
    vertices, triangles, result = sheet
    assert abs(len(result.triangles) - 600) <= 1
    assert len(boundary_loops(result.triangles, len(result.vertices))) == len(boundary_loops(triangles, len(vertices))) == 4
    quality = mesh_quality(result.vertices, result.triangles, vertices, triangles)
    assert quality["min_angle_deg"] > 15.0 and quality["mean_min_angle_deg"] > 45.0
    # The slit (0.05 tall, less than the target edge length of ~0.07) is not bridged: no interior
    # edge crosses its middle line (boundary chords may cut its corners), and it stays as long.
    from solver.shell.remesh import half_edge_twins
    twin = half_edge_twins(result.triangles, len(result.vertices))
    interior = np.flatnonzero(twin > np.arange(len(twin)))
    a = result.vertices[result.triangles.ravel()[interior]]
    b = result.vertices[result.triangles[:, [1, 2, 0]].ravel()[interior]]
    crosses = (a[:, 1] - 0.5) * (b[:, 1] - 0.5) < 0
    t = (0.5 - a[crosses, 1]) / (b[crosses, 1] - a[crosses, 1])
    crossing_x = a[crosses, 0] + t * (b[crosses, 0] - a[crosses, 0])
    assert not np.any((crossing_x > 0.3) & (crossing_x < 0.7))
    slit = [loop for loop in boundary_loops(result.triangles, len(result.vertices))
            if np.all(np.abs(result.vertices[loop, 1] - 0.5) <= 0.025 + 1e-12)]
    assert len(slit) == 1
    assert np.ptp(result.vertices[slit[0], 0]) > 0.37


def test_remesh_keeps_boundary_vertices_on_the_original_boundary(sheet):
    vertices, triangles, result = sheet
    segments = np.concatenate([np.column_stack([loop, np.roll(loop, -1), np.roll(loop, -1)])
                               for loop in boundary_loops(triangles, len(vertices))])
    on_boundary = np.unique(np.concatenate(boundary_loops(result.triangles, len(result.vertices))))
    distance = ClosestPointTree(vertices, segments).query(result.vertices[on_boundary]).distance
    assert distance.max() < 1e-12


def test_remesh_projects_onto_the_surface_and_is_deterministic():
    vertices, triangles = _holed_sheet(bend=0.3)
    first = remesh_isotropic(vertices, triangles, 900)
    second = remesh_isotropic(vertices, triangles, 900)
    assert np.array_equal(first.triangles, second.triangles) and np.array_equal(first.vertices, second.vertices)
    distance = ClosestPointTree(vertices, triangles).query(first.vertices).distance
    assert distance.max() < 1e-9


def test_remesh_of_a_sphere_stays_close_and_can_refine():
    vertices, triangles = icosphere(3)                  # 1280 triangles
    for wanted in (300, 3000):
        result = remesh_isotropic(vertices, triangles, wanted)
        quality = mesh_quality(result.vertices, result.triangles, vertices, triangles)
        assert abs(quality["triangles"] - wanted) <= 1
        assert boundary_loops(result.triangles, len(result.vertices)) == []
        assert quality["hausdorff"] < 0.03 and quality["min_angle_deg"] > 20.0


def test_weld_merges_coincident_seams_and_remesh_rejects_non_manifold_input():
    vertices, triangles = _holed_sheet()
    # Cut the sheet in two along x = 0.5 by duplicating that column's vertices for one side.
    on_seam = np.isclose(vertices[:, 0], 0.5)
    right = vertices[triangles].mean(axis=1)[:, 0] > 0.5
    copies = np.flatnonzero(on_seam)
    index = np.arange(len(vertices))
    index[copies] = len(vertices) + np.arange(len(copies))
    split_vertices = np.vstack([vertices, vertices[copies]])
    split_triangles = np.where(right[:, None], index[triangles], triangles)
    # Two pieces, each with its outer loop (the slit, cut through, opens into it) and one eye.
    assert len(boundary_loops(split_triangles, len(split_vertices))) == 4
    assert len(remesh_isotropic(split_vertices, split_triangles, 300).triangles) > 0
    welded, welded_triangles, welded_index = weld_coincident(split_vertices, split_triangles, 1e-9)
    assert len(welded) == len(vertices) and np.array_equal(welded[welded_index], split_vertices)
    loops = boundary_loops(welded_triangles, len(welded))
    assert len(loops) == 4 and sorted(map(len, loops)) == sorted(map(len, boundary_loops(triangles, len(vertices))))
    doubled = np.vstack([triangles, triangles[:1]])
    with pytest.raises(ValueError, match="non-manifold"):
        remesh_isotropic(vertices, doubled, 100)


# --------------------------------------------------------------------------- transfer

def test_transfer_rows_sum_to_one_and_carry_linear_fields_exactly(sheet):
    vertices, triangles = _holed_sheet(bend=0.3)
    coarse = remesh_isotropic(vertices, triangles, 500)
    transfer = RigTransfer.build(vertices, triangles, coarse.vertices, coarse.triangles)
    for matrix, shape in ((transfer.coarse_from_fine, (len(coarse.vertices), len(vertices))),
                          (transfer.fine_from_coarse, (len(vertices), len(coarse.vertices)))):
        assert matrix.shape == shape
        assert np.allclose(np.asarray(matrix.sum(axis=1)).ravel(), 1.0)
        assert np.diff(matrix.indptr).max() <= 3 and matrix.data.min() >= 0.0
    linear = np.array([[0.3, -0.2, 0.5], [0.1, 0.4, -0.3], [-0.6, 0.2, 0.1]])
    field = lambda points: points @ linear.T + np.array([0.01, -0.02, 0.03])
    # Exact at the points the weights name: the coarse vertices themselves (they lie on the fine
    # surface) and the fine vertices' closest points on the coarse surface.
    assert np.allclose(transfer.coarse_positions(field(vertices)), field(coarse.vertices), atol=1e-12)
    closest_on_coarse = transfer.fine_from_coarse @ coarse.vertices
    assert np.allclose(transfer.fine_from_coarse @ field(coarse.vertices), field(closest_on_coarse), atol=1e-12)
    assert np.array_equal(transfer.warp(vertices, np.zeros_like(coarse.vertices)), vertices)
    keys = np.stack([field(vertices), 2 * field(vertices)])
    assert np.allclose(transfer.coarse_deltas(keys)[1], 2 * field(coarse.vertices), atol=1e-12)


def _grid(x_stop, z, cells_x, cells_y=6, flip=False):
    x, y = np.meshgrid(np.linspace(0.0, x_stop, cells_x + 1), np.linspace(0.0, 0.3, cells_y + 1), indexing="ij")
    vertices = np.column_stack([x.ravel(), y.ravel(), np.full(x.size, z)])
    triangles = []
    for i in range(cells_x):
        for j in range(cells_y):
            a, b = i * (cells_y + 1) + j, (i + 1) * (cells_y + 1) + j
            triangles += [(a, b, b + 1), (a, b + 1, a + 1)]
    triangles = np.array(triangles)
    return vertices, triangles[:, ::-1] if flip else triangles


def test_transfer_settles_touching_sheets_by_the_keys_motion():
    """Two 'lips' 1 mm apart; the coarse upper lip stops short (as a coarse shell cuts a lip's
    curl), so at rest the end of the fine upper lip is nearest the coarse lower lip. A key that
    opens the lower lip must not move the upper lip in the warp."""
    upper, upper_triangles = _grid(1.0, 0.0, 40)
    lower, lower_triangles = _grid(1.0, -0.001, 40, flip=True)
    fine = np.vstack([upper, lower])
    fine_triangles = np.vstack([upper_triangles, lower_triangles + len(upper)])
    coarse_upper, coarse_upper_triangles = _grid(0.8, 0.0, 8)
    coarse_lower, coarse_lower_triangles = _grid(1.0, -0.001, 10, flip=True)
    coarse = np.vstack([coarse_upper, coarse_lower])
    coarse_triangles = np.vstack([coarse_upper_triangles, coarse_lower_triangles + len(coarse_upper)])
    opening = np.zeros((1, len(fine), 3))
    opening[0, len(upper):, 2] = -0.5                  # farther than the upper lip's missing 0.2
    is_upper = np.arange(len(fine)) < len(upper)
    plain = RigTransfer.build(fine, fine_triangles, coarse, coarse_triangles)
    settled = RigTransfer.build(fine, fine_triangles, coarse, coarse_triangles, opening)
    for transfer, upper_moves in ((plain, True), (settled, False)):
        warped = transfer.warp(fine, transfer.coarse_deltas(opening)[0])
        error = np.linalg.norm(warped - (fine + opening[0]), axis=1)
        assert (error[is_upper].max() > 0.05) == upper_moves
    assert error.max() < 1e-12


def _largest_bend(vertices, triangles) -> float:
    """The largest angle (radians) between the normals of two triangles sharing an edge."""
    normals = np.cross(vertices[triangles[:, 1]] - vertices[triangles[:, 0]], vertices[triangles[:, 2]] - vertices[triangles[:, 0]])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    owner = {}
    largest = 0.0
    for index, triangle in enumerate(triangles):
        for a, b in ((triangle[0], triangle[1]), (triangle[1], triangle[2]), (triangle[2], triangle[0])):
            key = (min(a, b), max(a, b))
            if key in owner:
                largest = max(largest, float(np.arccos(np.clip(normals[owner[key]] @ normals[index], -1.0, 1.0))))
            owner[key] = index
    return largest


def test_the_smoothed_warp_spreads_the_coarse_edges_kinks_and_keeps_translations():
    """Barycentric interpolation bends the fine surface along every coarse edge; the smoothed warp
    spreads each bend over its radius (transfer.py docstring): with the fine sheet five times finer
    than the coarse one (as ICT's lips against a 4k shell), a bumpy coarse displacement bends it
    at most half as sharply, and rows still sum to one."""
    vertices, triangles = _holed_sheet()
    coarse = remesh_isotropic(vertices, triangles, 150)
    plain = RigTransfer.build(vertices, triangles, coarse.vertices, coarse.triangles).fine_from_coarse
    smooth = smoothed_warp(vertices, triangles, plain, smoothing_radius(coarse.vertices, coarse.triangles, 0.5))
    assert smooth.shape == plain.shape and smooth.data.min() >= 1e-3
    assert np.allclose(np.asarray(smooth.sum(axis=1)).ravel(), 1.0)
    assert np.diff(smooth.indptr).mean() > np.diff(plain.indptr).mean()
    shift = np.tile([0.01, -0.02, 0.03], (len(coarse.vertices), 1))
    assert np.allclose(smooth @ shift, shift[0], atol=1e-15)
    assert (smoothed_warp(vertices, triangles, plain, 0.0) != plain).nnz == 0
    bumps = np.zeros_like(coarse.vertices)
    bumps[:, 2] = 0.002 * np.random.default_rng(3).normal(size=len(coarse.vertices))
    bent_plain = _largest_bend(vertices + plain @ bumps, triangles)
    bent_smooth = _largest_bend(vertices + smooth @ bumps, triangles)
    assert bent_smooth < 0.5 * bent_plain


def test_the_smoothing_radius_is_a_share_of_the_median_coarse_edge_each_counted_once():
    """A unit square fanned from its centre: four rim edges of 1 and four interior spokes of
    √½. Counted once the median is (√½ + 1) / 2; counting each triangle's edges (the spokes
    twice) would give √½."""
    vertices = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 0]], dtype=float)
    triangles = np.array([[4, 0, 1], [4, 1, 2], [4, 2, 3], [4, 3, 0]])
    median = (np.sqrt(0.5) + 1.0) / 2.0
    assert smoothing_radius(vertices, triangles, 0.5) == pytest.approx(0.5 * median)
    assert smoothing_radius(vertices * 3.0, triangles, 0.25) == pytest.approx(0.75 * median)
    assert smoothing_radius(vertices, triangles, 0.0) == 0.0


def test_the_smoothed_warp_does_not_reach_across_the_mouth_slit():
    """Distances run along the mesh's edges: a fine vertex on one lip of the slit reads nothing of
    the other lip's coarse vertices even when they are nearer than the radius in space."""
    vertices, triangles = _holed_sheet()
    coarse = remesh_isotropic(vertices, triangles, 500)
    plain = RigTransfer.build(vertices, triangles, coarse.vertices, coarse.triangles).fine_from_coarse
    smooth = smoothed_warp(vertices, triangles, plain, 0.1)      # the slit is 0.05 wide and 0.4 long
    lower_jaw = np.zeros_like(coarse.vertices)
    lower_jaw[coarse.vertices[:, 1] < 0.5, 2] = -0.1               # everything below the slit drops
    warped = smooth @ lower_jaw
    upper_lip = (vertices[:, 1] > 0.5) & (vertices[:, 1] < 0.6) & (np.abs(vertices[:, 0] - 0.5) < 0.05)
    lower_lip = (vertices[:, 1] < 0.5) & (vertices[:, 1] > 0.4) & (np.abs(vertices[:, 0] - 0.5) < 0.05)
    assert upper_lip.sum() >= 4 and lower_lip.sum() >= 4
    assert np.abs(warped[upper_lip, 2]).max() < 1e-12
    assert np.allclose(warped[lower_lip, 2], -0.1)


# --------------------------------------------------------------------------- depth

def test_shape_diameter_of_a_sphere_and_key_push_depth_of_a_plane():
    vertices, triangles = icosphere(4, radius=0.2)
    thickness = depth.shape_diameter(vertices, vertex_normals(vertices, triangles), vertices, triangles)
    assert np.allclose(thickness, 0.4 * np.cos(np.radians(45.0)), rtol=0.01)   # the 45° ring is the median
    plane, plane_triangles = _holed_sheet()
    normals = vertex_normals(plane, plane_triangles)
    push = np.zeros((3, len(plane), 3))
    push[0] = -0.01 * normals * plane[:, :1]            # pushes in by 0.01 x
    push[1] = 0.05 * normals                            # pulls out: no depth
    push[2, :, 0] = 0.2                                 # slides sideways: no depth
    found = depth.key_push_depth(plane, plane_triangles, push)
    assert np.allclose(found, 0.01 * plane[:, 0])
    assert np.allclose(depth.key_push_depth(plane, plane_triangles, push, include=[False, True, True]), 0.0)


def test_jaw_intensive_keys_by_name_and_by_motion():
    rng = np.random.default_rng(4)
    opening = rng.normal(size=(50, 3))
    deltas = np.stack([opening, 0.8 * opening + 0.2 * rng.normal(size=(50, 3)), rng.normal(size=(50, 3)),
                       rng.normal(size=(50, 3)), rng.normal(size=(50, 3))])
    names = ["jawOpen", "mouthOpenish", "smile", "jawLeft", "mouthClose"]
    assert depth.jaw_intensive_keys(names, deltas).tolist() == [True, True, False, True, True]


def test_eyelids_keep_to_the_rims_of_eye_holes():
    vertices, triangles = _holed_sheet()
    rim_distance = []
    for centre in ((0.25, 0.75), (0.75, 0.75)):
        # Distance outside the 0.1 × 0.1 square hole round `centre`.
        outside = np.maximum(np.abs(vertices[:, :2] - centre) - 0.05, 0.0)
        rim_distance.append(np.linalg.norm(outside, axis=1))
    deltas = np.zeros((3, len(vertices), 3))
    deltas[0, :, 1] = -0.01 * np.exp(-rim_distance[0] / 0.02)          # eyeBlink_L closes the left hole
    deltas[1, :, 1] = -0.01 * np.exp(-rim_distance[1] / 0.02)
    stray = np.linalg.norm(vertices[:, :2] - (0.5, 0.1), axis=1) < 0.05
    deltas[0, stray, 2] = 0.006                                         # and something far off, by 60 %
    lids = depth.eyelid_vertices(triangles, deltas, ["eyeBlink_L", "eyeBlink_R", "smile"])
    assert not lids[stray].any()
    for distance in rim_distance:
        assert lids[distance < 0.02].all() and (lids & (distance < 0.1)).sum() > 10
    assert depth.eyelid_vertices(triangles, deltas[2:], ["smile"]).sum() == 0


# --------------------------------------------------------------------------- ICT

ict = pytest.mark.skipif(not ict_available(), reason="ICT FaceKit data (../shared) not available")


@pytest.fixture(scope="module")
def ict_shell():
    from solver.rig import rig_triangles
    from solver.shell.scale import face_height

    rig = load_ict_rig()
    height = face_height(rig.vertices, rig.shape_key_deltas)
    fine, fine_triangles = rig.vertices / height, rig_triangles(rig)
    coarse = remesh_skin(fine, fine_triangles, 4000)
    fine_deltas = rig.shape_key_deltas / height
    transfer = RigTransfer.build(fine, fine_triangles, coarse.vertices, coarse.triangles, fine_deltas)
    coarse_deltas = transfer.coarse_deltas(fine_deltas)
    max_depth, thin = depth.max_depth(coarse.vertices, coarse.triangles, coarse_deltas, rig.shape_key_names,
                                      fine, fine_triangles)
    landmarks = {name: fine[vertex] for name, vertex in zip(rig.landmark_names, rig.landmark_vertices)}
    return dict(rig=rig, height=height, fine=fine, fine_triangles=fine_triangles, coarse=coarse,
                transfer=transfer, coarse_deltas=coarse_deltas, depth=max_depth, thin=thin, landmarks=landmarks)


def _near(points, centre, radius):
    return np.flatnonzero(np.linalg.norm(points - centre, axis=1) < radius)


@ict
@pytest.mark.parametrize("wanted", [2000, 8000])
def test_ict_skin_remeshes_to_any_count_with_one_open_neck(wanted):
    from solver.rig import rig_triangles

    rig = load_ict_rig()
    result = remesh_skin(rig.vertices, rig_triangles(rig), wanted)
    assert abs(len(result.triangles) - wanted) <= 1
    assert len(boundary_loops(result.triangles, len(result.vertices))) == 1       # ICT's skin is welded: the neck cut


@ict
def test_ict_coarse_shell_follows_the_face(ict_shell):
    coarse, fine, height = ict_shell["coarse"], ict_shell["fine"], ict_shell["height"]
    assert abs(len(coarse.triangles) - 4000) <= 1
    assert len(boundary_loops(coarse.triangles, len(coarse.vertices))) == 1
    region = ict_shell["rig"].vertex_group_weights[0] > 0.5                       # ICT's narrow face
    front = ict_shell["fine_triangles"][region[ict_shell["fine_triangles"]].all(axis=1)]
    to_coarse = ClosestPointTree(coarse.vertices, coarse.triangles).query(fine[np.unique(front)]).distance
    quality = mesh_quality(coarse.vertices, coarse.triangles, fine, ict_shell["fine_triangles"])
    # Millimetres: the inside of the nostrils (a cavity narrower than one coarse edge) is the
    # farthest part of the front face, 14 mm; half the face is within 0.5 mm.
    to_coarse_mm = to_coarse * height * 1000
    assert np.median(to_coarse_mm) < 1.0 and np.percentile(to_coarse_mm, 90) < 5.0 and to_coarse_mm.max() < 20.0
    assert quality["min_angle_deg"] > 10.0 and quality["mean_min_angle_deg"] > 50.0


@ict
@pytest.mark.parametrize("name, mean_mm, max_mm", [("jawOpen", 0.4, 10.0), ("mouthSmile_L", 0.3, 7.0),
                                                   ("eyeBlink_L", 0.1, 6.0), ("browInnerUp_L", 0.1, 3.0)])
def test_ict_warp_of_the_coarse_rig_reproduces_the_shape_key(ict_shell, name, mean_mm, max_mm):
    rig, fine, transfer = ict_shell["rig"], ict_shell["fine"], ict_shell["transfer"]
    key = list(rig.shape_key_names).index(name)
    warped = transfer.warp(fine, ict_shell["coarse_deltas"][key])
    error_mm = np.linalg.norm(warped - (fine + rig.shape_key_deltas[key] / ict_shell["height"]), axis=1) \
        * ict_shell["height"] * 1000
    assert error_mm.mean() < mean_mm and error_mm.max() < max_mm


@ict
def test_ict_depth_thin_nose_deep_cheeks_shallow_forehead(ict_shell):
    coarse, landmarks, max_depth, thin = ict_shell["coarse"].vertices, ict_shell["landmarks"], ict_shell["depth"], \
        ict_shell["thin"]
    nose_tip = _near(coarse, landmarks["mp68_30"], 0.03)
    assert thin[nose_tip].mean() > 0.5
    lips = np.concatenate([_near(coarse, landmarks[f"mp68_{i}"], 0.03) for i in (51, 57, 62, 66)])
    assert not thin[lips].any()
    cheeks = np.concatenate([_near(coarse, 0.5 * (landmarks[f"mp68_{a:02d}"] + landmarks[f"mp68_{b}"]), 0.06)
                             for a, b in ((2, 31), (14, 35))])
    forehead = _near(coarse, 0.5 * (landmarks["mp68_19"] + landmarks["mp68_24"]) + [0.0, 0.12, 0.0], 0.06)
    assert len(cheeks) > 10 and len(forehead) > 10
    assert max_depth[cheeks].mean() > 2 * max_depth[forehead].mean()
    assert np.median(max_depth[cheeks]) > np.median(max_depth[forehead])
    assert max_depth.min() >= depth.MIN_DEPTH and np.all(max_depth[thin] == 0.05)


@ict
def test_ict_eyelids_on_both_sides_and_nowhere_else(ict_shell):
    coarse, landmarks = ict_shell["coarse"], ict_shell["landmarks"]
    lids = depth.eyelid_vertices(coarse.triangles, ict_shell["coarse_deltas"], ict_shell["rig"].shape_key_names)
    eyes = [0.5 * (landmarks["mp68_36"] + landmarks["mp68_39"]), 0.5 * (landmarks["mp68_42"] + landmarks["mp68_45"])]
    eye_width = np.linalg.norm(landmarks["mp68_36"] - landmarks["mp68_39"])
    near_eye = [np.linalg.norm(coarse.vertices[lids] - eye, axis=1) < 0.9 * eye_width for eye in eyes]
    assert near_eye[0].sum() >= 5 and near_eye[1].sum() >= 5
    assert np.all(near_eye[0] | near_eye[1])


def test_coarse_mesh_picture_draws_every_panel():
    from solver.pictures.shell_meshes import THIN_COLOUR, coarse_mesh_sheet

    vertices, triangles = icosphere(2, radius=0.5)
    thin = vertices[:, 2] > 0.4
    image = coarse_mesh_sheet([("a", vertices, triangles, np.abs(vertices[:, 0]) * 0.04, thin, vertices[:, 1] > 0.45),
                               ("b", vertices, triangles, np.zeros(len(vertices)), thin, np.zeros(len(vertices), bool))],
                              up=(0, 1, 0), forward=(0, 0, 1), framing=vertices, title="test")
    assert image.ndim == 3 and image.shape[2] == 3 and image.shape[1] > 2 * 0.8 * 460
    magenta = np.all(np.abs(image.astype(int) - np.array(THIN_COLOUR) * 255) < 40, axis=2)
    assert magenta.sum() > 100
