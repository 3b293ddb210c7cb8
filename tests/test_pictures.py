"""The headless picture maker: rasteriser behaviour and every picture of a small model.

The model is a tetrahedralised box of tissue (Z up, face towards -Y, like a Blender
character) with a box-shaped hole where the bone is: the skin is the outer boundary, the
bone surface the hole's boundary (upper half skull, lower half jaw), and the front slab
holds two paired muscles and a mouth muscle.
"""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from PIL import Image

from solver.pictures.raster import (Camera, MeshLayer, SpriteLayer, add_legend, distinct_colours, pair_base_name,
                                    render_meshes, symmetric_pair_colour)
from solver.pictures.views import (model_centre, mouth_offset, picture_attachments, picture_bones,
                                   picture_cross_section, picture_muscles, picture_sheet, picture_skin,
                                   tet_boundary_faces)

SPACING = 0.015                      # metres between grid nodes
CELLS = (8, 6, 10)                   # cubes along x (subject's left), y (back), z (up)
BONE_CELLS = ((2, 6), (2, 5), (3, 8))  # half-open cube ranges of the hole the bone fills
MUSCLE_NAMES = np.array(["m_L", "m_R", "orbicularis_oris"])
HEAD_FRAME = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])  # left, up, forward


# --------------------------------------------------------------------------- synthetic model

def _grid_tets() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nodes, tets (6 per cube, all cut along the same diagonal so neighbours conform) and
    the cube index of each tet, for the box minus the bone hole."""
    nx, ny, nz = CELLS
    ix, iy, iz = np.meshgrid(np.arange(nx + 1), np.arange(ny + 1), np.arange(nz + 1), indexing="ij")
    nodes = np.stack([ix, iy, iz], axis=-1).reshape(-1, 3) * SPACING
    nodes -= nodes.mean(axis=0)

    def node(i, j, k):
        return (i * (ny + 1) + j) * (nz + 1) + k

    tets, cubes = [], []
    for i, j, k in itertools.product(range(nx), range(ny), range(nz)):
        if all(lo <= c < hi for c, (lo, hi) in zip((i, j, k), BONE_CELLS)):
            continue
        for order in itertools.permutations(range(3)):
            corner = np.zeros(3, dtype=int)
            path = [node(i, j, k)]
            for axis in order:
                corner[axis] += 1
                path.append(node(i + corner[0], j + corner[1], k + corner[2]))
            tets.append(path)
            cubes.append((i, j, k))
    return nodes, np.array(tets), np.array(cubes)


def _boundary_triangles(tets: np.ndarray) -> np.ndarray:
    """Faces used by one tet only (unoriented), found independently of the code under test."""
    faces = np.sort(np.concatenate([tets[:, [1, 2, 3]], tets[:, [0, 2, 3]], tets[:, [0, 1, 3]], tets[:, [0, 1, 2]]]), axis=1)
    unique, counts = np.unique(faces, axis=0, return_counts=True)
    return unique[counts == 1]


def _submesh(nodes: np.ndarray, triangles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    used, reindexed = np.unique(triangles, return_inverse=True)
    return nodes[used], reindexed.reshape(-1, 3)


def _box_surface(low, high) -> tuple[np.ndarray, np.ndarray]:
    corners = np.array(list(itertools.product(*zip(low, high))), dtype=float)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    return corners, np.array([t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))])


def make_model(with_teeth: bool = True) -> dict:
    nodes, tets, cubes = _grid_tets()
    boundary = _boundary_triangles(tets)
    hole_low = np.array([lo for lo, _ in BONE_CELLS]) * SPACING + nodes.min(axis=0)
    hole_high = np.array([hi for _, hi in BONE_CELLS]) * SPACING + nodes.min(axis=0)
    face_centres = nodes[boundary].mean(axis=1)
    on_bone = np.all((face_centres > hole_low - 1e-9) & (face_centres < hole_high + 1e-9), axis=1)

    skin_vertices, skin_triangles = _submesh(nodes, boundary[~on_bone])
    bone_vertices, bone_triangles = _submesh(nodes, boundary[on_bone])
    hole_middle_height = 0.5 * (hole_low[2] + hole_high[2])
    bone_label = (bone_vertices[bone_triangles].mean(axis=1)[:, 2] < hole_middle_height).astype(np.int8)

    bone_nodes = np.unique(boundary[on_bone])
    pin_nodes = bone_nodes[nodes[bone_nodes, 2] >= hole_middle_height]
    slide_nodes = bone_nodes[nodes[bone_nodes, 2] < hole_middle_height]

    # Front slab (the two cube layers nearest the face, at -y) is muscle: m_L on the
    # subject's left (+x), m_R on the right, and a mouth band across both low down.
    tet_centres = nodes[tets].mean(axis=1)
    front = cubes[:, 1] < 2
    mouth = front & (cubes[:, 2] >= 2) & (cubes[:, 2] < 4)
    muscle_fraction = np.zeros((len(tets), len(MUSCLE_NAMES)))
    muscle_fraction[front & ~mouth & (tet_centres[:, 0] > 0), 0] = 0.9
    muscle_fraction[front & ~mouth & (tet_centres[:, 0] < 0), 1] = 0.9
    muscle_fraction[mouth, 2] = 0.7

    model = {
        "rest_positions": nodes,
        "tets": tets,
        "skin_vertices": skin_vertices,
        "skin_triangles": skin_triangles,
        "bone_surface_vertices": bone_vertices,
        "bone_surface_triangles": bone_triangles,
        "bone_surface_label": bone_label,
        "muscle_names": MUSCLE_NAMES,
        "muscle_fraction": muscle_fraction,
        "passive_fraction": 1.0 - muscle_fraction.sum(axis=1),
        "head_frame": HEAD_FRAME,
        "pin_nodes": pin_nodes,
        "slide_nodes": slide_nodes,
        "condyles": np.array([[0.025, 0.02, -0.005], [-0.025, 0.02, -0.005]]),
        "jaw_frame": np.eye(4),
    }
    if with_teeth:
        model["upper_teeth_vertices"], model["upper_teeth_triangles"] = _box_surface((-0.02, -0.035, -0.03), (0.02, -0.028, -0.022))
        model["lower_teeth_vertices"], model["lower_teeth_triangles"] = _box_surface((-0.02, -0.035, -0.04), (0.02, -0.028, -0.032))
    return model


@pytest.fixture(scope="module")
def model() -> dict:
    return make_model()


def _load_png(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def _assert_sensible_picture(path, min_width=700, max_width=2600, min_height=450, max_height=1300) -> np.ndarray:
    image = _load_png(path)
    height, width = image.shape[:2]
    assert min_width <= width <= max_width and min_height <= height <= max_height, image.shape
    assert image.std() > 12, "picture is (nearly) blank"
    return image


def _pixels_of_hue(image: np.ndarray, colour, tolerance: float = 0.035) -> int:
    """Pixels whose chromaticity (colour over its channel sum) matches ``colour``, i.e. the
    colour under any amount of shading."""
    pixels = image.reshape(-1, 3).astype(float)
    brightness = pixels.sum(axis=1)
    chroma = pixels / np.maximum(brightness, 1.0)[:, None]
    target = np.asarray(colour) / np.sum(colour)
    return int(np.sum((np.abs(chroma - target).max(axis=1) < tolerance) & (brightness > 120)))


# --------------------------------------------------------------------------- rasteriser

def test_orthographic_camera_maps_centre_to_image_centre_and_keeps_subject_left_on_the_right():
    centre = np.array([0.1, -0.2, 0.3])
    left, up, forward = HEAD_FRAME
    camera = Camera.front(centre, extent=0.4, up=up, forward=forward, width=640, height=480)
    x, y, _ = camera.project(np.stack([centre, centre + 0.1 * up, centre + 0.1 * left, centre + 0.1 * forward])).T
    assert (x[0], y[0]) == pytest.approx((320.0, 240.0))
    assert y[1] == pytest.approx(240.0 - 0.1 * 480 / 0.4)       # up is up, 1200 pixels per metre
    assert x[2] == pytest.approx(320.0 + 0.1 * 480 / 0.4)       # subject's left on the image right
    assert camera.project(centre + 0.1 * forward)[0, 2] < 0      # the face is nearer than the centre

    profile = Camera.side(centre, 0.4, up, forward)
    assert profile.project(centre + 0.1 * forward)[0, 0] < 400  # profile faces image left
    assert profile.project(centre + 0.1 * left)[0, 2] < 0       # seen from the subject's left


def _flat_triangle(x_range, depth):
    """A triangle facing a front camera (which looks along +Y) at y = depth."""
    x0, x1 = x_range
    return np.array([[x0, depth, -0.5], [x1, depth, -0.5], [0.5 * (x0 + x1), depth, 0.5]]), np.array([[0, 1, 2]])


@pytest.mark.parametrize("red_first", [True, False])
def test_depth_test_keeps_the_near_triangle_whatever_the_drawing_order(red_first):
    camera = Camera.front(np.zeros(3), 2.0, up=(0, 0, 1), forward=(0, -1, 0), width=100, height=100)
    near_red = MeshLayer(*_flat_triangle((-0.8, 0.4), -0.5), (1.0, 0.0, 0.0))
    far_blue = MeshLayer(*_flat_triangle((-0.4, 0.8), 0.5), (0.0, 0.0, 1.0))
    image = render_meshes(camera, [near_red, far_blue] if red_first else [far_blue, near_red]).astype(int)
    overlap, blue_only = image[50, 50], image[65, 78]
    assert overlap[0] > 150 and overlap[2] < 10
    assert blue_only[2] > 150 and blue_only[0] < 10


def test_veil_is_blended_over_the_opaque_scene_and_sprites_are_depth_tested():
    camera = Camera.front(np.zeros(3), 2.0, up=(0, 0, 1), forward=(0, -1, 0), width=100, height=100)
    black = MeshLayer(*_flat_triangle((-0.9, 0.9), 0.5), (0.0, 0.0, 0.0))
    white_veil = MeshLayer(*_flat_triangle((-0.9, 0.9), -0.5), (1.0, 1.0, 1.0), 0.5)
    veiled = render_meshes(camera, [black, white_veil])[50, 50]
    assert 90 < veiled.mean() < 160  # half of a shaded white over black

    hidden = SpriteLayer(np.array([[0.0, 0.9, 0.0]]), (0.0, 1.0, 0.0), 0.1)
    marker = SpriteLayer(np.array([[0.0, 0.9, 0.0]]), (0.0, 1.0, 0.0), 0.1, on_top=True)
    assert render_meshes(camera, [black], [hidden])[50, 50, 1] < 10
    assert render_meshes(camera, [black], [marker])[50, 50, 1] > 150


def test_ambiguous_colour_count_must_be_resolved():
    camera = Camera.front(np.zeros(3), 2.0, up=(0, 0, 1), forward=(0, -1, 0), width=20, height=20)
    vertices = np.array([[0, 0, 0], [1, 0, 0], [0, 0, 1.0]])
    triangles = np.array([[0, 1, 2], [0, 2, 1], [1, 2, 0]])  # three triangles, three vertices
    with pytest.raises(ValueError, match="colour_per_vertex"):
        render_meshes(camera, [MeshLayer(vertices, triangles, np.eye(3))])
    assert render_meshes(camera, [MeshLayer(vertices, triangles, np.eye(3), colour_per_vertex=True)]).std() > 0


def test_hundred_thousand_triangles_render_quickly():
    rings, segments = 224, 224
    theta, phi = np.meshgrid(np.linspace(0, np.pi, rings), np.linspace(0, 2 * np.pi, segments, endpoint=False), indexing="ij")
    vertices = np.stack([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)], axis=-1).reshape(-1, 3)
    grid = np.arange(rings * segments).reshape(rings, segments)
    a, b = grid[:-1], np.roll(grid, -1, axis=1)[:-1]
    c, d = grid[1:], np.roll(grid, -1, axis=1)[1:]
    triangles = np.concatenate([np.stack([a, c, b], -1).reshape(-1, 3), np.stack([b, c, d], -1).reshape(-1, 3)])
    assert len(triangles) > 99_000
    camera = Camera.three_quarter(np.zeros(3), 2.4, up=(0, 0, 1), forward=(0, -1, 0))
    render_meshes(camera, [(vertices, triangles, (0.8, 0.6, 0.5), 1.0)])  # compile or load the kernels
    start = time.perf_counter()
    render_meshes(camera, [(vertices, triangles, (0.8, 0.6, 0.5), 1.0)])
    # The requirement is < 1 s; the bound leaves room for a loaded test machine.
    assert time.perf_counter() - start < 3.0


def test_pair_colours_match_left_and_right_and_differ_between_muscles():
    names = ["zygomaticus_major_L", "frontalis", "zygomaticus_major_R", "levator.L", "levator.R"]
    assert pair_base_name("zygomaticus_major_L") == pair_base_name("zygomaticus_major_R") == "zygomaticus_major"
    assert symmetric_pair_colour("zygomaticus_major_L", names) == symmetric_pair_colour("zygomaticus_major_R", names)
    assert symmetric_pair_colour("levator.L", names) == symmetric_pair_colour("levator.R", names)
    assert len({symmetric_pair_colour(name, names) for name in names}) == 3

    colours = distinct_colours(40)
    gaps = np.linalg.norm(colours[:, None] - colours[None], axis=-1) + np.eye(40)
    assert colours.shape == (40, 3) and gaps.min() > 0.05


def test_legend_widens_the_image_and_keeps_it_intact():
    image = np.full((300, 400, 3), 90, dtype=np.uint8)
    composed = add_legend(image, [("skin", (0.9, 0.7, 0.6)), ("zygomaticus_major_L/R", (0.8, 0.1, 0.1))], title="Title")
    assert composed.shape[1] > 400 + 100 and composed.shape[0] > 300
    assert _pixels_of_hue(composed, (0.8, 0.1, 0.1)) > 50
    placed = np.all(composed == 90, axis=-1)  # the image is placed pixel for pixel, unresampled
    assert np.sum(placed.sum(axis=1) >= 400) == 300 and np.sum(placed.sum(axis=0) >= 300) == 400


# --------------------------------------------------------------------------- model pictures

def test_tet_boundary_faces_are_the_closed_outward_surface(model):
    faces = tet_boundary_faces(model["rest_positions"], model["tets"])
    assert len(faces) == len(model["skin_triangles"]) + len(model["bone_surface_triangles"])
    corners = model["rest_positions"][faces]
    # Divergence theorem: outward faces enclose the tissue volume (box minus bone hole).
    enclosed = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6
    hole = np.prod([hi - lo for lo, hi in BONE_CELLS])
    assert enclosed == pytest.approx((np.prod(CELLS) - hole) * SPACING ** 3)


def test_mouth_offset_finds_the_mouth_band_below_the_centre(model):
    mouth_height = (3 * SPACING) + model["rest_positions"][:, 2].min()  # middle of cube layers 2..3
    assert mouth_offset(model) == pytest.approx(mouth_height - model_centre(model)[2])


def test_skin_picture(model, tmp_path):
    image = _assert_sensible_picture(picture_skin(model, tmp_path / "skin.png"))
    assert _pixels_of_hue(image, (0.91, 0.75, 0.65)) > 20_000


def test_bones_picture_with_and_without_teeth(model, tmp_path):
    _assert_sensible_picture(picture_bones(model, tmp_path / "bones.png"))
    _assert_sensible_picture(picture_bones(make_model(with_teeth=False), tmp_path / "bones_no_teeth.png"))


def test_muscle_picture_shows_each_muscle_colour(model, tmp_path):
    image = _assert_sensible_picture(picture_muscles(model, tmp_path / "muscles.png"))
    names = list(MUSCLE_NAMES)
    paired, mouth = symmetric_pair_colour("m_L", names), symmetric_pair_colour("orbicularis_oris", names)
    assert paired != mouth
    # Far more pixels than the legend patch alone: the muscles are in the rendered views.
    # The faint skin veil over the muscles shifts their hue a little, hence the tolerance.
    assert _pixels_of_hue(image, paired, tolerance=0.06) > 5_000
    assert _pixels_of_hue(image, mouth, tolerance=0.06) > 2_000


@pytest.mark.parametrize("plane, offset", [("sagittal", 0.0), ("horizontal", -0.03), ("sagittal", 0.02)])
def test_cross_section_picture(model, tmp_path, plane, offset):
    image = _assert_sensible_picture(picture_cross_section(model, tmp_path / f"{plane}.png", plane, offset),
                                     min_width=600, max_width=1100, min_height=600, max_height=1000)
    assert _pixels_of_hue(image, (1.0, 0.96, 0.74), tolerance=0.02) > 5_000  # passive tissue


def test_cross_section_rejects_unknown_plane(model, tmp_path):
    with pytest.raises(ValueError, match="sagittal"):
        picture_cross_section(model, tmp_path / "x.png", "coronal")


def test_attachments_picture_shows_pinned_and_sliding_nodes(model, tmp_path):
    image = _assert_sensible_picture(picture_attachments(model, tmp_path / "attachments.png"))
    assert _pixels_of_hue(image, (0.86, 0.10, 0.08)) > 500
    assert _pixels_of_hue(image, (0.12, 0.65, 0.22)) > 500


def test_picture_sheet_writes_every_picture(model, tmp_path):
    paths = picture_sheet(model, tmp_path / "sheet")
    assert [path.name for path in paths] == ["skin.png", "bones.png", "muscles.png", "section_sagittal.png",
                                             "section_horizontal.png", "attachments.png"]
    for path in paths:
        assert path.is_file() and _load_png(path).std() > 12


def test_still_muscles_picture_washes_the_held_footprints_and_names_them(model, tmp_path):
    """Panels of the rest skin coloured by a shape's motion, the held muscles' footprints washed
    grey-blue; the colours are the motion map elsewhere."""
    from matplotlib import colormaps
    from solver.pictures.fit_errors import COLOUR_MAP
    from solver.pictures.still_muscles import (HELD_COLOUR, HELD_WASH, _pair_names, picture_still_muscles,
                                               still_muscle_colours)
    skin = model["skin_vertices"]
    left = skin[:, 0] > 0.0
    footprints = np.stack([left, ~left, np.abs(skin[:, 0]) < SPACING], axis=1)
    delta = np.zeros_like(skin)
    delta[~left, 2] = 0.004                          # the shape moves the right side 4 mm up
    held = np.array([True, False, False])
    colours = still_muscle_colours(np.linalg.norm(delta, axis=1) * 1000.0, footprints[:, held].any(axis=1), 4.0)
    plain = colormaps[COLOUR_MAP](np.clip(np.linalg.norm(delta, axis=1) * 250.0, 0, 1))[:, :3]
    np.testing.assert_allclose(colours[~left], plain[~left])
    np.testing.assert_allclose(colours[left], (1 - HELD_WASH) * plain[left] + HELD_WASH * HELD_COLOUR)
    path = picture_still_muscles(model, footprints, [("shape", delta, held), ("other", delta, ~held)],
                                 [str(name) for name in MUSCLE_NAMES], tmp_path / "still.png")
    image = np.asarray(Image.open(path))
    assert image.shape[1] > image.shape[0] and image.std() > 10
    assert _pair_names(["frontalis_L", "frontalis_R", "procerus_R", "orbicularis_oris"]) == \
        "frontalis (L, R), procerus (R), orbicularis_oris"
    with pytest.raises(ValueError, match="footprints"):
        picture_still_muscles(model, footprints[:, :2], [("shape", delta, held)], list(MUSCLE_NAMES), tmp_path / "x.png")


def test_cut_segments_of_closed_meshes_chain_into_one_closed_loop_each():
    from solver.geometry import icosphere
    from solver.pictures.lip_sections import closed_loops
    from solver.pictures.views import triangle_cut_segments
    vertices, triangles = icosphere(3)
    two_spheres = np.vstack([vertices, vertices + [0.0, 3.0, 0.0]])
    both = np.vstack([triangles, triangles + len(vertices)])
    segments = triangle_cut_segments(two_spheres, both, np.array([1.0, 0.0, 0.0]), np.array([0.3, 0.0, 0.0]))
    loops = closed_loops(segments)
    assert len(loops) == 2 and sum(len(loop) - 1 for loop in loops) == len(segments)
    for loop in loops:
        assert np.allclose(loop[0], loop[-1])
        y, z = loop[:, 1] - loop[:, 1].mean(), loop[:, 2]
        area = 0.5 * abs(np.sum(y * np.roll(z, -1) - np.roll(y, -1) * z))
        assert area == pytest.approx(np.pi * (1.0 - 0.3 ** 2), rel=0.03)   # the sphere's circle of radius √0.91
    # An open mesh (half the sphere's triangles) leaves the chain open.
    half = triangles[vertices[triangles].mean(axis=1)[:, 2] > 0.0]
    open_loops = closed_loops(triangle_cut_segments(vertices, half, np.array([1.0, 0.0, 0.0]),
                                                    np.array([0.3, 0.0, 0.0])))
    assert len(open_loops) == 1 and not np.allclose(open_loops[0][0], open_loops[0][-1])


def test_corrective_curves_and_nose_push_pictures_are_written_headless(tmp_path):
    """The per-frame curves of bench/correctives_acceptance.py and the side-by-side nose push of
    bench/nose_push.py, from small synthetic inputs: a PNG each, of the figure's size."""
    from solver.pictures.corrective_curves import picture_corrective_curves
    from solver.pictures.nose_push import picture_nose_push
    from solver.volumetric_blendshapes.energies import TetMesh
    frames = np.arange(30)
    report = {"keys": ["jawOpen", "mouthSmile_L"], "commit": "abc1234",
              "linear_mean_mm": list(1.0 + np.sin(frames / 5.0) ** 2), "corrected_mean_mm": list(0.3 + 0 * frames),
              "simulated_lips_in_teeth": [0] * 30, "corrected_lips_in_teeth": [1] * 30,
              "linear_lips_in_teeth": list(frames % 7)}
    with Image.open(picture_corrective_curves(report, tmp_path / "curves.png")) as image:
        assert image.size == (1100, 600)
    rest = np.array([[0, 0, 0], [0.01, 0, 0], [0, 0.01, 0], [0, 0, 0.01], [0.01, 0.01, 0.01]], dtype=float)
    mesh = TetMesh(rest, np.array([[0, 1, 2, 3], [1, 2, 3, 4]]))
    measures = {"angle": np.array([1.0, 20.0]), "determinant": np.array([0.9, 1.1]), "angle_mean": 10.5,
                "angle_max": 20.0, "volume_lost_percent": 1.0, "inverted": 0}
    pushed = {"Phace": (rest, measures), "volumetric blendshapes": (rest * 0.99, measures)}
    path = picture_nose_push(mesh, pushed, np.zeros(3), np.eye(3), -0.005, tmp_path / "nose.png", "test")
    with Image.open(path) as image:
        assert image.size == (920, 840)
