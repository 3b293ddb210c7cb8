"""Collision detection (solver/collisions): kernels against brute force, teeth proxies, lips,
mesh-collider files and the scene, on random meshes, the demo head and (when present) ICT."""
from __future__ import annotations

import numpy as np
import pytest

from ict_data import ict_available, load_ict_rig
from solver.collisions import (
    BonePose, CollisionScene, ContactPlanes, MeshCollider, MeshColliderError, load_mesh_collider,
)
from solver.collisions.detection import (SurfaceQuery, closed_penetrations, inside_closed, patch_hits,
                                        patch_penetrations)
from solver.collisions.lips import barycentric_weights
from solver.collisions.lips import find_lip_surfaces, lip_vertices_from_groups
from solver.collisions.teeth import TeethCollider, TeethProxy, landmark_arch_proxy, teeth_proxies
from solver.collisions.teeth_shadow import (EDGE_CLEARANCE, ForwardRays, TeethShadow, cross_section_profile,
                                           forward_spans, interval_bounds)
from solver.geometry import ClosestPointTree, TriangleBVH, WindingNumberTree, icosphere, vertex_normals

IDENTITY = BonePose(skull=np.eye(4), jaw=np.eye(4), frame=0)


# ---------------------------------------------------------------------------
# Reference implementations and meshes


def brute_closest(points, vertices, triangles):
    """(distance (p,), closest (p,3)) over all triangles: plane projection when it falls inside
    the triangle, else the nearest point of the three edges."""
    a, b, c = (vertices[triangles[:, k]] for k in range(3))
    normal = np.cross(b - a, c - a)
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    offset = points[:, None] - a[None]
    height = np.einsum("ptk,tk->pt", offset, normal)
    projected = points[:, None] - height[..., None] * normal[None]
    inside = np.ones(height.shape, bool)
    for start, stop in ((a, b), (b, c), (c, a)):
        inside &= np.einsum("ptk,tk->pt", np.cross(stop - start, projected - start[None]), normal) >= 0
    best = np.where(inside[..., None], projected, np.nan)
    best_distance = np.where(inside, np.abs(height), np.inf)
    for start, stop in ((a, b), (b, c), (c, a)):
        edge = stop - start
        t = np.clip(np.einsum("ptk,tk->pt", points[:, None] - start[None], edge) / np.einsum("tk,tk->t", edge, edge),
                    0.0, 1.0)
        on_edge = start[None] + t[..., None] * edge[None]
        distance = np.linalg.norm(points[:, None] - on_edge, axis=2)
        closer = distance < best_distance
        best_distance = np.where(closer, distance, best_distance)
        best = np.where(closer[..., None], on_edge, best)
    pick = np.argmin(best_distance, axis=1)
    rows = np.arange(len(points))
    return best_distance[rows, pick], best[rows, pick]


def lumpy_sphere(seed, subdivisions=3, radius=1.0, noise=0.15):
    """Closed, outward-oriented star-shaped mesh: an icosphere with smooth random radial bumps."""
    rng = np.random.default_rng(seed)
    vertices, triangles = icosphere(subdivisions)
    directions = rng.normal(size=(4, 3))
    bumps = sum(np.cos(3.0 * vertices @ d + rng.uniform(0, 6)) for d in directions) / 4
    return vertices * radius * (1.0 + noise * bumps)[:, None], triangles


def edge_uses(triangles):
    directed = np.stack([triangles, np.roll(triangles, -1, axis=1)], axis=-1).reshape(-1, 2)
    _, undirected = np.unique(np.sort(directed, axis=1), axis=0, return_counts=True)
    _, directed_counts = np.unique(directed, axis=0, return_counts=True)
    return undirected, directed_counts


def signed_volume(vertices, triangles):
    corners = vertices[triangles]
    return np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6.0


def head_axes(model):
    axes = np.asarray(model["head_frame"])
    return axes[1], axes[2]


# ---------------------------------------------------------------------------
# Kernels against brute force


@pytest.mark.parametrize("seed", [0, 1])
def test_closest_points_and_inside_test_match_brute_force_and_winding_numbers(seed):
    vertices, triangles = lumpy_sphere(seed)
    rng = np.random.default_rng(100 + seed)
    points = rng.uniform(-1.4, 1.4, size=(400, 3))
    surface = SurfaceQuery(vertices, triangles)
    assert surface.is_closed
    hit = surface.query(points)
    distance, closest = brute_closest(points, vertices, triangles)
    np.testing.assert_allclose(hit.distance, distance, atol=1e-12)
    np.testing.assert_allclose(hit.closest, closest, atol=1e-9)
    np.testing.assert_allclose(np.linalg.norm(hit.normal, axis=1), 1.0, atol=1e-12)

    inside, _ = inside_closed(surface, points)
    winding = WindingNumberTree(vertices, triangles).query(points)
    clear = distance > 1e-3
    np.testing.assert_array_equal(inside[clear], winding[clear] > 0.5)
    # Points right at vertices and edges are where a face normal alone misclassifies.
    on_features = np.concatenate([vertices, vertices[triangles[:, :2]].mean(1)])
    normals = np.concatenate([vertices, vertices[triangles[:, :2]].mean(1)])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    assert inside_closed(surface, on_features - 1e-6 * normals)[0].all()
    assert not inside_closed(surface, on_features + 1e-6 * normals)[0].any()


def test_region_projection_is_the_closest_point_of_the_region():
    vertices, triangles = lumpy_sphere(3)
    centroids = vertices[triangles].mean(1)
    region_triangles = triangles[centroids[:, 2] > 0.2]          # the top cap
    volume, region = SurfaceQuery(vertices, triangles), SurfaceQuery(vertices, region_triangles)
    points = np.random.default_rng(4).uniform(-1.0, 1.0, size=(500, 3))
    found = closed_penetrations(volume, region, points)
    inside = WindingNumberTree(vertices, triangles).query(points) > 0.5
    assert set(found.index) == set(np.flatnonzero(inside))
    distance, closest = brute_closest(points[found.index], vertices, region_triangles)
    np.testing.assert_allclose(found.point, closest, atol=1e-9)
    np.testing.assert_allclose(found.depth, distance, rtol=1e-9, atol=1e-12)
    # The plane keeps the point on its wrong side and passes through the projection.
    assert (np.einsum("ij,ij->i", found.normal, points[found.index] - found.point) <= 1e-12).all()


def test_refit_gives_the_same_results_as_a_rebuild():
    vertices, triangles = lumpy_sphere(5)
    moved, _ = lumpy_sphere(6)
    moved = moved * [1.1, 0.9, 1.0] + [0.05, -0.02, 0.1]
    points = np.random.default_rng(7).uniform(-1.4, 1.4, size=(300, 3))

    refitted = SurfaceQuery(vertices, triangles)
    refitted.refit(moved)
    rebuilt = SurfaceQuery(moved, triangles)
    first, second = refitted.query(points), rebuilt.query(points)
    np.testing.assert_allclose(first.distance, second.distance, atol=1e-14)
    np.testing.assert_allclose(first.closest, second.closest, atol=1e-12)
    np.testing.assert_allclose(first.normal, second.normal, atol=1e-12)

    bvh = TriangleBVH(vertices, triangles)
    bvh.refit(moved)
    np.testing.assert_allclose(ClosestPointTree.from_bvh(bvh).query(points).distance,
                               ClosestPointTree(moved, triangles).query(points).distance, atol=1e-14)
    # The compiled refit of SurfaceQuery and the numpy refit of the tree agree on the boxes.
    np.testing.assert_allclose(refitted.bvh.node_lower, bvh.node_lower)
    np.testing.assert_allclose(refitted.bvh.node_upper, bvh.node_upper)


def test_open_patch_counts_points_behind_it_and_not_beside_its_border():
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, 9), np.linspace(-1, 1, 9), indexing="ij"), -1).reshape(-1, 2)
    vertices = np.column_stack([grid, np.zeros(len(grid))])
    index = np.arange(81).reshape(9, 9)
    quads = np.stack([index[:-1, :-1], index[1:, :-1], index[1:, 1:], index[:-1, 1:]], -1).reshape(-1, 4)
    triangles = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])     # normals +z
    patch = SurfaceQuery(vertices, triangles)
    points = np.array([[0.2, 0.3, -0.1], [0.2, 0.3, 0.1], [0.5, 0.5, -0.5], [1.3, 0.0, -0.05], [0.99, 0.0, -0.2]])
    found = patch_penetrations(patch, points, max_depth=0.4, border_cone_cos=np.cos(np.radians(45)))
    np.testing.assert_array_equal(found.index, [0, 4])      # [2] is deeper than the band, [3] beside the border
    np.testing.assert_allclose(found.normal, [[0, 0, 1], [0, 0, 1]], atol=1e-12)
    np.testing.assert_allclose(found.depth, [0.1, 0.2], atol=1e-12)


def test_predictive_margin_adds_the_points_just_outside_with_depth_zero():
    """closed_penetrations with a margin: the inside points as without it, plus the outside
    points whose closest region point is less than the margin away (brute force), in front of
    their plane, depth 0. Outside points nearer another part of the surface than the region get
    no plane (it would lie across the volume)."""
    vertices, triangles = lumpy_sphere(3)
    centroids = vertices[triangles].mean(1)
    region_triangles = triangles[centroids[:, 2] > 0.2]
    volume, region = SurfaceQuery(vertices, triangles), SurfaceQuery(vertices, region_triangles)
    points = np.random.default_rng(11).uniform(-1.3, 1.3, size=(3000, 3))
    margin = 0.08
    plain = closed_penetrations(volume, region, points, surface_normals=True)
    found = closed_penetrations(volume, region, points, surface_normals=True, margin=margin)
    inside = WindingNumberTree(vertices, triangles).query(points) > 0.5
    region_distance, _ = brute_closest(points, vertices, region_triangles)
    volume_distance, _ = brute_closest(points, vertices, triangles)
    extra = np.setdiff1d(found.index, plain.index)
    assert len(extra) > 20
    assert not inside[extra].any()
    assert (region_distance[extra] < margin + 1e-12).all() and (volume_distance[extra] < margin + 1e-12).all()
    in_both = np.isin(found.index, plain.index)
    np.testing.assert_array_equal(found.index[in_both], plain.index)
    np.testing.assert_allclose(found.depth[in_both], plain.depth)
    assert (found.depth[~in_both] == 0.0).all()
    assert (np.einsum("ij,ij->i", found.normal[~in_both], points[extra] - found.point[~in_both]) >= 0.0).all()
    # Every outside point near the region and in front of its tangent plane is there.
    hit = region.query(points)
    in_front = np.einsum("ij,ij->i", hit.normal, points - hit.closest) >= 0.0
    expected = np.flatnonzero(~inside & (region_distance < margin) & (volume_distance < margin) & in_front
                              & (region_distance > 1e-9))
    assert set(expected) <= set(extra)


def test_the_clearance_grid_keeps_every_point_the_contact_margin_reaches():
    """The grid drops points by cell without a tree walk: every point inside or within the
    contact's predictive margin must survive it, so the grid reaches at least that far (else the
    detection walks every point in the box)."""
    from solver.collisions.detection import CLEARANCE_REACH, ClearanceGrid
    from solver.physics.contact_response import DEFAULT_CONTACT_MARGIN
    assert CLEARANCE_REACH >= DEFAULT_CONTACT_MARGIN
    vertices, triangles = lumpy_sphere(4, subdivisions=3)
    vertices = 0.01 * vertices                      # a 2 cm lump, tooth-sized, in metres
    volume = SurfaceQuery(vertices, triangles)
    grid = ClearanceGrid(volume, 2e-3)
    points = np.random.default_rng(12).uniform(-0.02, 0.02, size=(5000, 3))
    kept = grid.uncleared(points, DEFAULT_CONTACT_MARGIN)
    assert len(kept) < 0.6 * len(points)            # the grid does drop the far points
    distance = volume.query(points).distance        # the tree's closest points (brute-force tested above)
    inside = WindingNumberTree(vertices, triangles).query(points) > 0.5
    near = np.flatnonzero(inside | (distance <= DEFAULT_CONTACT_MARGIN))
    assert len(near) > 300 and set(near) <= set(kept)


def test_patch_hits_name_the_triangle_and_the_margin_adds_points_in_front():
    grid = np.stack(np.meshgrid(np.linspace(-1, 1, 9), np.linspace(-1, 1, 9), indexing="ij"), -1).reshape(-1, 2)
    vertices = np.column_stack([grid, 0.1 * np.sin(2 * grid[:, 0])])
    index = np.arange(81).reshape(9, 9)
    quads = np.stack([index[:-1, :-1], index[1:, :-1], index[1:, 1:], index[:-1, 1:]], -1).reshape(-1, 4)
    triangles = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    patch = SurfaceQuery(vertices, triangles)
    rng = np.random.default_rng(5)
    points = np.column_stack([rng.uniform(-0.9, 0.9, (400, 2)), rng.uniform(-0.4, 0.4, 400)])
    found, triangle = patch_hits(patch, points, 0.3, np.cos(np.radians(45)), surface_normals=True, margin=0.05)
    distance, closest = brute_closest(points[found.index], vertices, triangles)
    np.testing.assert_allclose(found.point, closest, atol=1e-9)
    # The plane point lies on the named triangle, with barycentric weights that rebuild it.
    weights = barycentric_weights(found.point, vertices[triangles[triangle]])
    np.testing.assert_allclose(np.einsum("ck,ckd->cd", weights, vertices[triangles[triangle]]), found.point, atol=1e-12)
    assert (weights >= 0.0).all()
    side = np.einsum("ij,ij->i", found.normal, points[found.index] - found.point)
    behind, in_front = side < 0.0, side >= 0.0
    assert behind.any() and in_front.any()
    assert (distance[in_front] < 0.05).all() and (found.depth[in_front] == 0.0).all()
    assert (distance[behind] <= 0.3 + 1e-12).all()
    np.testing.assert_array_equal(found.index[behind], patch_penetrations(patch, points, 0.3, np.cos(np.radians(45)),
                                                                          surface_normals=True).index)


# ---------------------------------------------------------------------------
# Teeth proxies


def assert_closed_manifold_outward(vertices, triangles):
    undirected, directed = edge_uses(triangles)
    assert (undirected == 2).all() and (directed == 1).all()
    assert signed_volume(vertices, triangles) > 0
    corners = vertices[triangles]
    assert np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1).min() > 0


def check_teeth_proxies(model):
    proxies = teeth_proxies(model)
    up, forward = head_axes(model)
    for proxy in proxies:
        assert_closed_manifold_outward(proxy.vertices, proxy.triangles)
        teeth = np.asarray(model[f"{proxy.name}_vertices"])
        winding = WindingNumberTree(proxy.vertices, proxy.triangles).query(teeth)
        assert (winding > 0.5).all(), f"{proxy.name}: {(winding <= 0.5).sum()} teeth vertices outside the proxy"
        assert proxy.source == "teeth mesh"
        # The region faces out of the arch: the front teeth's region faces forward.
        normals = np.cross(*(np.diff(proxy.vertices[proxy.triangles[proxy.region]], axis=1).transpose(1, 0, 2)))
        normals /= np.linalg.norm(normals, axis=1, keepdims=True)
        centroids = proxy.vertices[proxy.triangles[proxy.region]].mean(1)
        lateral = np.cross(up, forward)
        front = np.abs((centroids - teeth.mean(0)) @ lateral) < 0.005
        assert front.any() and (normals[front] @ forward).mean() > 0.5
    return proxies


def test_teeth_proxies_of_the_demo_head_are_closed_and_contain_the_teeth(small_demo_model):
    proxies = check_teeth_proxies(small_demo_model)
    assert all(p.triangle_count < 40000 for p in proxies)


def test_landmark_arch_is_a_closed_proxy_behind_the_lips(small_demo_model):
    model = {k: v for k, v in small_demo_model.items() if "teeth" not in k}
    up, forward = head_axes(model)
    lips = dict(zip(model["landmark_names"], model["landmark_positions"]))
    for upper in (True, False):
        vertices, triangles = landmark_arch_proxy(model, upper=upper)
        assert_closed_manifold_outward(vertices, triangles)
        assert (vertices @ forward).max() < lips["upper_lip"] @ forward - 0.005
    scene = CollisionScene(model, lips=False)
    assert [c.proxy.source for c in scene.teeth] == ["landmark arch", "landmark arch"]
    # The arches cast their shadows too, and the neutral face is clear of everything.
    assert [shadow.name for shadow in scene.shadows] == ["upper_teeth_shadow", "lower_teeth_shadow"]
    assert all(len(shadow.tested_vertices) for shadow in scene.shadows)
    assert scene.detect(model["skin_vertices"], IDENTITY).count == 0


# ---------------------------------------------------------------------------
# Scenes on the demo head


@pytest.fixture(scope="module")
def demo_scene(small_demo_model):
    return CollisionScene(small_demo_model)


def test_neutral_demo_face_has_no_contacts_and_the_lips_do_not_overlap_at_rest(small_demo_model, demo_scene):
    skin = small_demo_model["skin_vertices"]
    assert demo_scene.names == ["upper_teeth", "lower_teeth", "upper_teeth_shadow", "lower_teeth_shadow", "upper_lip",
                                "lower_lip"]
    assert demo_scene.detect(skin, IDENTITY).count == 0
    raw = CollisionScene(small_demo_model, teeth=False, rest_allowance=False)
    assert raw.detect(skin, IDENTITY).count == 0


def test_the_teeth_meet_the_lips_only(small_demo_model, demo_scene):
    """Paper 000 §4 collides the lips with the teeth; the rest of the mouth-socket lining lies on
    the gums and teeth in the rig and is not tested (docs/collisions.md, "Which skin meets the
    teeth"). The teeth test exactly the vertices of both lips; a lining vertex pushed into the
    teeth is found only with teeth_vertices="all"; the rest allowance then covers the lining
    that lies inside the padded proxies at rest."""
    lips = demo_scene.lips
    lip_set = np.union1d(lips.upper_vertices, lips.lower_vertices)
    np.testing.assert_array_equal(demo_scene.teeth_vertices, lip_set)
    for collider in demo_scene.teeth:
        np.testing.assert_array_equal(collider.tested_vertices, lip_set)
    everything = CollisionScene(small_demo_model, teeth_vertices="all")
    skin = small_demo_model["skin_vertices"]
    assert everything.detect(skin, IDENTITY).count == 0
    lining_at_rest = np.flatnonzero((everything.allowance[0] > 0) | (everything.allowance[1] > 0))
    assert len(np.setdiff1d(lining_at_rest, lip_set)) > 0, "the demo's mouth lining lies in the teeth at rest"
    # Push a lining vertex (not on a lip, outside the teeth at rest) 1 mm into the upper teeth proxy.
    proxy = demo_scene.teeth[0].proxy
    inward = proxy.vertices - 1e-3 * vertex_normals(proxy.vertices, proxy.triangles)
    point = inward[np.flatnonzero(proxy.contains(inward))[0]]
    lining = np.setdiff1d(np.flatnonzero((everything.allowance[0] == 0) & (everything.allowance[1] == 0)), lip_set)
    moved = skin.copy()
    target = lining[np.argmin(np.linalg.norm(skin[lining] - point, axis=1))]
    moved[target] = point
    assert target not in demo_scene.detect(moved, IDENTITY).vertex
    assert target in everything.detect(moved, IDENTITY).vertex
    assert CollisionScene(small_demo_model, teeth_vertices=[target]).detect(moved, IDENTITY).vertex.tolist() == [target]


def test_lip_pushed_into_the_upper_teeth_is_pushed_forward(small_demo_model, demo_scene):
    skin = small_demo_model["skin_vertices"].copy()
    up, forward = head_axes(small_demo_model)
    lateral = np.cross(up, forward)
    lips = demo_scene.lips
    centre = skin[lips.upper_vertices].mean(0)
    front = lips.upper_vertices[np.abs((skin[lips.upper_vertices] - centre) @ lateral) < 0.006]
    skin[front] -= 0.008 * forward
    contacts = demo_scene.detect(skin, IDENTITY)
    on_teeth = contacts.collider == demo_scene.names.index("upper_teeth")
    assert on_teeth.sum() > 5
    assert (contacts.normal[on_teeth] @ forward > 0).all()
    assert (contacts.violation(skin)[on_teeth] > 0).all()
    # Every plane on either proxy points out of the arch, never into the mouth.
    arch_centre = demo_scene.teeth[0].proxy.vertices.mean(0)
    radial = contacts.point - arch_centre
    radial -= np.outer(radial @ up, up)
    teeth = contacts.collider < 2
    assert (np.einsum("ij,ij->i", contacts.normal[teeth], radial[teeth]) > 0).all()


def test_lower_lip_moved_up_through_the_upper_lip_is_detected(small_demo_model, demo_scene):
    skin = small_demo_model["skin_vertices"].copy()
    up, _ = head_axes(small_demo_model)
    lips = demo_scene.lips
    skin[lips.lower_vertices] += 0.003 * up
    contacts = demo_scene.detect(skin, IDENTITY)
    through_upper = contacts.collider == demo_scene.names.index("upper_lip")
    assert through_upper.sum() > 10
    assert np.isin(contacts.vertex[through_upper], lips.lower_vertices).all()
    assert (contacts.normal[through_upper] @ up < 0).all()            # pushed back down
    assert contacts.depth[through_upper].max() < 0.0035
    measure = demo_scene.measure(skin, IDENTITY)
    assert measure.per_collider["upper_lip"] == len(np.unique(contacts.vertex[through_upper]))


def test_the_shown_lips_may_overlap_next_to_the_corners_as_the_rigs_do(small_demo_model, demo_scene):
    """Next to the corners a shown lip vertex may lie inside the other lip, CORNER_FADE_DEPTH·w at
    the untested zone's edge, smoothly less outwards, none past CORNER_FADE_REACH·w
    (lips.corner_fade): pinned apart at full strength where the untested corner ends, the shown
    skin folded there. The simulation's contact does not fade."""
    from solver.collisions import lips as lip_module
    from solver.model_file import model_landmarks
    width = 0.05
    distance = np.linspace(0.0, 0.3, 301) * width
    fade = lip_module.corner_fade(distance, width)
    start, end = lip_module.CORNER_REACH * width, lip_module.CORNER_FADE_REACH * width
    assert fade[distance <= start] == pytest.approx(lip_module.CORNER_FADE_DEPTH * width)
    assert np.all(fade[distance >= end] == 0.0)
    assert np.all(np.diff(fade) <= 0.0) and np.abs(np.diff(fade)).max() < 0.1 * lip_module.CORNER_FADE_DEPTH * width
    # in the scene, the fade is the lip colliders' shown allowance on top of the rest depth, and only theirs
    lips = demo_scene.lips
    marks = model_landmarks(small_demo_model)
    mouth = float(np.linalg.norm(marks["mouth_corner_L"] - marks["mouth_corner_R"]))
    skin = small_demo_model["skin_vertices"]
    corner = np.minimum(np.linalg.norm(skin - marks["mouth_corner_L"], axis=1),
                        np.linalg.norm(skin - marks["mouth_corner_R"], axis=1))
    np.testing.assert_allclose(lips.corner_allowance, lip_module.corner_fade(corner, mouth))
    raw = CollisionScene(small_demo_model, rest_allowance=False)
    for index, name in enumerate(raw.names):
        expected = lips.corner_allowance if name.endswith("_lip") else 0.0
        np.testing.assert_allclose(raw.shown_allowance[index], expected)
        np.testing.assert_array_equal(raw.allowance[index], 0.0)
    # a lower-lip vertex next to a corner pushed 1 mm into the upper lip: a contact for the
    # simulation, none for the shown skin
    skin = small_demo_model["skin_vertices"].copy()
    up, _ = head_axes(small_demo_model)
    faded = lips.lower_tested[lips.corner_allowance[lips.lower_tested] > 0.002]
    skin[faded] += 0.001 * up
    simulated = raw.detect(skin, IDENTITY)
    shown = raw.detect(skin, IDENTITY, shown=True)
    upper_lip = raw.names.index("upper_lip")
    assert np.isin(faded, simulated.vertex[simulated.collider == upper_lip]).any()
    assert not np.isin(faded, shown.vertex[shown.collider == upper_lip]).any()
    # the tested lip vertices nearest the corners are inside the fade
    for tested in (lips.upper_tested, lips.lower_tested):
        assert lips.corner_allowance[tested[np.argmin(corner[tested])]] > 0.0


def box_teeth(region_faces=("front", "bottom"), bone="jaw"):
    """A 20 × 10 × 5 mm box as a teeth proxy (x sideways, y up, z forward; lower teeth unless
    `bone` is "skull"): its labial region is the front face (z = 5 mm), its biting edge the
    bottom face (y = 0)."""
    corners = np.array([[x, y, z] for x in (-0.01, 0.01) for y in (0.0, 0.01) for z in (0.0, 0.005)])
    quads = {"back": (0, 2, 6, 4), "front": (1, 5, 7, 3), "bottom": (0, 4, 5, 1), "top": (2, 3, 7, 6),
             "left": (0, 1, 3, 2), "right": (4, 6, 7, 5)}
    triangles, region = [], []
    for name, (a, b, c, d) in quads.items():
        if name in region_faces:
            region += [len(triangles), len(triangles) + 1]
        triangles += [(a, b, c), (a, c, d)]
    proxy = TeethProxy(name="lower_teeth" if bone == "jaw" else "upper_teeth", vertices=corners,
                       triangles=np.array(triangles), region=np.array(region), bone=bone, source="test box")
    assert proxy.volume.is_closed and signed_volume(proxy.vertices, proxy.triangles) > 0
    return TeethCollider(proxy)


def test_a_vertex_that_went_through_the_teeth_gets_a_plane_on_the_side_it_came_from():
    teeth, mm = box_teeth(), 1e-3
    before = np.array([[0.0, 5, 10], [0.0, 2, 7], [0.0, 5, 10], [0.0, 5, 10], [0.0, 5, 5.6]]) * mm
    after = np.array([[0.0, 5, -5],             # straight through, out of the back: behind the teeth
                      [0.0, -3, 1],             # in at the front, out at the biting edge: round the edge
                      [0.0, 5, 3],              # ends inside: detection finds it there
                      [0.0, 25, -5],            # passes above the teeth
                      [0.0, 5, 5.2]]) * mm      # 0.4 mm: too short to have passed through
    crossed = teeth.crossings(before, IDENTITY, after, IDENTITY, collider_index=1)
    assert crossed.vertex.tolist() == [0]
    assert np.allclose(crossed.point, [[0.0, 5 * mm, 5 * mm]]) and np.allclose(crossed.normal, [[0.0, 0.0, 1.0]])
    assert crossed.depth == pytest.approx([10 * mm]) and crossed.collider.tolist() == [1]
    assert teeth.detect(after, IDENTITY, 1).vertex.tolist() == [2]      # the one inside; vertex 0 it cannot see
    # The teeth moving through a still vertex (a jaw thrust forward in one frame): the plane is
    # on the front face where the teeth are now.
    thrust = np.eye(4)
    thrust[2, 3] = 12 * mm
    still = np.array([[0.0, 5, 7]]) * mm
    moved = teeth.crossings(still, IDENTITY, still, BonePose(skull=np.eye(4), jaw=thrust, frame=1), collider_index=1)
    assert moved.vertex.tolist() == [0]
    assert np.allclose(moved.point, [[0.0, 5 * mm, 17 * mm]]) and moved.depth == pytest.approx([10 * mm])


def test_forward_rays_find_lines_through_corners_and_edges_in_whichever_cell_they_fall():
    """teeth_shadow.ForwardRays bins the projected triangles in a grid: a line through a
    triangle's corner or edge, on a cell's border or not, gets the span it gets with a single
    cell holding every triangle (the brute force), for fine and coarse cells."""
    from scipy.spatial import ConvexHull
    rng = np.random.default_rng(5)
    hull = ConvexHull(rng.normal(size=(60, 3)) * [0.012, 0.004, 0.003])
    vertices, triangles = hull.points, hull.simplices
    axes = np.linalg.qr(rng.normal(size=(3, 3)))[0].T
    corners = vertices[triangles]
    points = np.concatenate([vertices, 0.5 * (corners[:, 0] + corners[:, 1]), corners.mean(axis=1),
                             rng.uniform(-0.015, 0.015, size=(200, 3))])
    front, rear = ForwardRays(vertices, triangles, axes, cell=1.0).spans(points)
    assert np.isfinite(front).sum() > len(vertices)
    for cell in (2e-4, 1e-3, 3.7e-3):
        grid = ForwardRays(vertices, triangles, axes, cell=cell)
        assert len(grid.cell_start) - 1 == grid.shape.prod() > 1
        cell_front, cell_rear = grid.spans(points)
        np.testing.assert_array_equal(cell_front, front)
        np.testing.assert_array_equal(cell_rear, rear)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_forward_spans_and_cross_section_profiles_match_brute_force_on_a_convex_solid(seed):
    """teeth_shadow.forward_spans (where a line along the forward axis enters and leaves a
    closed mesh), cross_section_profile (the extremes of a mesh's cross-section at each
    sideways sample) and interval_bounds (their bound over each interval between samples)
    against the half-spaces of a random convex hull in a random frame: the line's interval
    inside every half-space, and a linear programme per sample and at points in between."""
    from scipy.optimize import linprog
    from scipy.spatial import ConvexHull
    rng = np.random.default_rng(seed)
    hull = ConvexHull(rng.normal(size=(40, 3)) * [0.01, 0.005, 0.004])
    vertices, triangles = hull.points, hull.simplices
    axes = np.linalg.qr(rng.normal(size=(3, 3)))[0].T                   # rows right, up, forward
    points = rng.uniform(-0.012, 0.012, size=(300, 3))
    front, rear = forward_spans(vertices, triangles, points, axes)
    normals, offsets = hull.equations[:, :3], hull.equations[:, 3]      # n·x + d ≤ 0 inside
    towards = normals @ axes[2]
    room = -(points @ normals.T + offsets)          # (P, planes): n·(p + t f) + d ≤ 0 ⇔ t (n·f) ≤ room
    upper = np.where(towards > 0, room / np.where(towards > 0, towards, 1), np.inf).min(axis=1)
    lower = np.where(towards < 0, room / np.where(towards < 0, towards, 1), -np.inf).max(axis=1)
    hit = lower < upper - 1e-9
    miss = lower > upper + 1e-9
    assert hit.sum() > 30 and miss.sum() > 30
    along = points @ axes[2]
    np.testing.assert_allclose(front[hit], along[hit] + upper[hit], atol=1e-9)
    np.testing.assert_allclose(rear[hit], along[hit] + lower[hit], atol=1e-9)
    assert np.isnan(front[miss]).all() and np.isnan(rear[miss]).all()
    for along_axis, lowest in ((1, True), (1, False), (2, False)):
        samples, extreme = cross_section_profile(vertices, triangles, axes, along_axis, lowest, spacing=1e-3)
        bounds = interval_bounds(vertices, axes, along_axis, lowest, samples, extreme)
        sign = 1.0 if lowest else -1.0

        def exact(s):
            best = linprog(sign * axes[along_axis], A_ub=normals, b_ub=-offsets, A_eq=axes[:1], b_eq=[s],
                           bounds=[(None, None)] * 3)
            assert best.status == 0
            return sign * best.fun
        for k in range(1, len(samples) - 2):
            assert extreme[k] == pytest.approx(exact(samples[k]), abs=1e-9)
            inside = [exact(s) for s in np.linspace(samples[k], samples[k + 1], 9)]
            # The bound holds everywhere in the interval and is reached there (to the grid's resolution).
            assert sign * (np.array(inside) - bounds[k]).min() >= -1e-9
            assert abs(min(inside, key=lambda value: sign * value) - bounds[k]) < 2e-4


def test_a_lip_vertex_in_the_shadow_of_the_upper_teeth_is_sent_under_their_edge():
    """TeethShadow on a box of upper teeth (20 × 10 × 5 mm, bottom edge at y = 0; x sideways, y
    up, z forward): a vertex behind the box at its height gets a plane pointing down, on the
    edge less EDGE_CLEARANCE, as deep as it is above that; vertices in front, below the edge,
    beside the box, or already behind it at rest get none. The shadow moves with the skull."""
    mm = 1e-3
    proxy = box_teeth(bone="skull").proxy
    rest = np.array([[0.0, 5, 10], [0.0, 5, 10], [0.0, 5, 10], [15.0, 5, -5], [0.0, 5, -4]]) * mm
    shadow = TeethShadow(proxy, np.eye(3), np.arange(5), rest)
    assert shadow.name == "upper_teeth_shadow" and shadow.tested_vertices.tolist() == [0, 1, 2, 3]
    assert shadow.detect(rest, IDENTITY, 2).count == 0
    moved = np.array([[0.0, 4, -3],            # behind the teeth, 4 mm above their edge
                      [0.0, -1, -3],           # behind, but under the edge
                      [0.0, 4, 8],             # in front
                      [15.0, 4, -3],           # beside the box
                      [0.0, 6, -6]]) * mm      # behind at rest already
    found = shadow.detect(moved, IDENTITY, 2)
    assert found.vertex.tolist() == [0] and found.collider.tolist() == [2]
    np.testing.assert_allclose(found.normal, [[0.0, -1.0, 0.0]])
    np.testing.assert_allclose(found.point, [[0.0, -EDGE_CLEARANCE, -3 * mm]], atol=1e-12)
    assert found.depth == pytest.approx([4 * mm + EDGE_CLEARANCE])
    turn = np.eye(4)
    turn[:3, :3] = np.linalg.qr(np.arange(1.0, 10.0).reshape(3, 3) + np.eye(3))[0]
    turn[:3, :3] *= np.sign(np.linalg.det(turn[:3, :3]))
    turn[:3, 3] = [0.01, -0.02, 0.03]
    posed = shadow.detect(moved @ turn[:3, :3].T + turn[:3, 3], BonePose(skull=turn, jaw=np.eye(4)), 2)
    assert posed.vertex.tolist() == [0] and posed.depth == pytest.approx(found.depth)
    np.testing.assert_allclose(posed.normal, found.normal @ turn[:3, :3].T, atol=1e-12)
    np.testing.assert_allclose(posed.point, found.point @ turn[:3, :3].T + turn[:3, 3], atol=1e-12)


def test_teeth_move_with_their_bones(small_demo_model, demo_scene):
    skin = small_demo_model["skin_vertices"]
    _, forward = head_axes(small_demo_model)
    jaw = np.eye(4)
    jaw[:3, 3] = 0.01 * forward                  # the lower teeth slide forward into the lower lip
    pose = BonePose(skull=np.eye(4), jaw=jaw)
    posed = demo_scene.posed_proxies(pose)
    np.testing.assert_allclose(posed["lower_teeth"][0], demo_scene.teeth[1].proxy.vertices + 0.01 * forward)
    np.testing.assert_allclose(posed["upper_teeth"][0], demo_scene.teeth[0].proxy.vertices)
    contacts = demo_scene.detect(skin, pose)
    lower = contacts.collider == demo_scene.names.index("lower_teeth")
    lateral = np.cross(head_axes(small_demo_model)[0], forward)
    front = lower & (np.abs((contacts.point - posed["lower_teeth"][0].mean(0)) @ lateral) < 0.006)
    assert front.sum() > 0 and (contacts.normal[front] @ forward > 0).all()
    assert not (contacts.collider == demo_scene.names.index("upper_teeth")).any()


def test_explicit_lip_vertices_override_the_finder(small_demo_model):
    found = find_lip_surfaces(small_demo_model)
    given = find_lip_surfaces(small_demo_model, (found.upper_vertices, found.lower_vertices))
    assert given.source == "vertex groups"
    np.testing.assert_array_equal(given.upper_vertices, found.upper_vertices)
    with pytest.raises(ValueError, match="both lips"):
        find_lip_surfaces(small_demo_model, (found.upper_vertices, found.upper_vertices[:3]))
    weights = np.zeros((3, len(small_demo_model["skin_vertices"])))
    weights[1, found.lower_vertices] = 1.0
    weights[2, found.upper_vertices] = 0.9
    upper, lower = lip_vertices_from_groups(np.array(["other", "FP_lip_lower", "FP_lip_upper"]), weights)
    np.testing.assert_array_equal(upper, found.upper_vertices)
    np.testing.assert_array_equal(lower, found.lower_vertices)
    assert lip_vertices_from_groups(np.array(["FP_lip_upper"]), weights[:1]) is None


# ---------------------------------------------------------------------------
# External mesh colliders


def sphere_collider_file(tmp_path, name="ball", **overrides):
    vertices, faces = icosphere(3, radius=0.03)
    transforms = np.stack([np.eye(4), np.eye(4)])
    transforms[1, :3, 3] = [0.0, 0.0, 0.05]
    arrays = {"vertices": vertices, "faces": faces, "transforms": transforms}
    arrays.update(overrides)
    path = tmp_path / f"{name}.npz"
    np.savez(path, **arrays)
    return path


def test_mesh_collider_pushes_points_out_of_a_moving_sphere(tmp_path):
    collider = load_mesh_collider(sphere_collider_file(tmp_path))
    assert collider.name == "ball" and collider.frame_count == 2
    rng = np.random.default_rng(8)
    points = rng.uniform(-0.04, 0.04, size=(2000, 3))
    for frame, centre in ((0, np.zeros(3)), (1, [0, 0, 0.05]), (7, [0, 0, 0.05])):   # frame 7 clamps to the last
        world = points + centre
        contacts = collider.detect(world, BonePose(np.eye(4), np.eye(4), frame=frame), collider_index=3)
        radius = np.linalg.norm(points, axis=1)
        winding = WindingNumberTree(collider.vertices, collider.faces).query(points)
        clear = np.abs(radius - 0.03) > 1e-3
        np.testing.assert_array_equal(np.isin(np.arange(len(points)), contacts.vertex)[clear], (winding > 0.5)[clear])
        assert (contacts.collider == 3).all()
        radial = points[contacts.vertex] / radius[contacts.vertex, None]
        assert (np.einsum("ij,ij->i", contacts.normal, radial) > 0.9).all()
        np.testing.assert_allclose(contacts.depth, 0.03 - radius[contacts.vertex], atol=0.03 * 0.02)


def test_scene_includes_external_colliders_by_name(tmp_path, small_demo_model):
    vertices, faces = icosphere(2, radius=0.02)
    chin_side = small_demo_model["skin_vertices"][np.argmax(small_demo_model["skin_vertices"] @ head_axes(small_demo_model)[1] * -1)]
    transform = np.eye(4)
    transform[:3, 3] = chin_side
    prop = MeshCollider("prop", vertices, faces, transform[None])
    scene = CollisionScene(small_demo_model, teeth=False, lips=False, colliders=[prop])
    assert scene.names == ["prop"]
    contacts = scene.detect(small_demo_model["skin_vertices"], IDENTITY)
    assert contacts.count > 0 and (contacts.collider == 0).all()
    assert scene.measure(small_demo_model["skin_vertices"], IDENTITY).per_collider["prop"] == contacts.count


@pytest.mark.parametrize("case, message", [
    ("open", "not closed"),
    ("nan", "NaN"),
    ("scaled", "not rigid"),
    ("mirrored", "determinant"),
    ("object", "object"),
    ("missing", "missing arrays"),
    ("degenerate", "zero area"),
    ("touching", "not manifold"),
    ("flipped_one", "consistently oriented"),
    ("float_faces", "integers"),
])
def test_mesh_collider_file_errors_say_what_is_wrong(tmp_path, case, message):
    vertices, faces = icosphere(1, radius=0.03)
    overrides = {}
    if case == "open":
        overrides["faces"] = faces[1:]
    elif case == "nan":
        overrides["vertices"] = np.where(np.arange(len(vertices))[:, None] == 5, np.nan, vertices)
    elif case == "scaled":
        overrides["transforms"] = np.diag([2.0, 1.0, 1.0, 1.0])[None]
    elif case == "mirrored":
        overrides["transforms"] = np.diag([-1.0, 1.0, 1.0, 1.0])[None]
    elif case == "object":
        overrides["vertices"] = np.array([list(v) for v in vertices], dtype=object)
    elif case == "degenerate":
        extra = np.array([vertices[faces[0, 0]], vertices[faces[0, 1]]]).mean(0)
        overrides["vertices"] = np.vstack([vertices, extra])
        split = faces.copy()
        a, b, c = faces[0]
        split[0] = [a, len(vertices), c]
        overrides["faces"] = np.vstack([split, [[len(vertices), b, c]], [[a, b, len(vertices)]]])
    elif case == "touching":
        shifted = vertices + [0.06, 0, 0]
        touch = np.argmax(vertices[:, 0])
        shifted += vertices[touch] - shifted[np.argmin(shifted[:, 0])]
        second = faces + len(vertices)
        second[second == len(vertices) + np.argmin(shifted[:, 0])] = touch
        overrides["vertices"] = np.vstack([vertices, shifted])
        overrides["faces"] = np.vstack([faces, second])
    elif case == "flipped_one":
        flipped = faces.copy()
        flipped[0] = flipped[0, ::-1]
        overrides["faces"] = flipped
    elif case == "float_faces":
        overrides["faces"] = faces.astype(float)
    path = sphere_collider_file(tmp_path, case, **overrides)
    if case == "missing":
        np.savez(path, vertices=vertices, faces=faces)
    with pytest.raises(MeshColliderError, match=message) as error:
        load_mesh_collider(path)
    assert isinstance(error.value, ValueError)


def test_inward_facing_mesh_is_turned_around(tmp_path):
    vertices, faces = icosphere(2, radius=0.03)
    collider = load_mesh_collider(sphere_collider_file(tmp_path, faces=faces[:, ::-1]))
    assert signed_volume(collider.vertices, collider.faces) > 0
    contacts = collider.detect(np.array([[0.0, 0.0, 0.02]]), IDENTITY, 0)
    assert contacts.count == 1 and contacts.normal[0, 2] > 0.9


# ---------------------------------------------------------------------------
# ICT FaceKit (skipped when the data set is not beside the project)


@pytest.fixture(scope="module")
def ict_model():
    if not ict_available():
        pytest.skip("ICT FaceKit data not available")
    from solver.model_builder.builder import BuildOptions, build_model
    return build_model(load_ict_rig(), BuildOptions(target_tets=4000))


def test_ict_teeth_proxies_and_lips(ict_model):
    check_teeth_proxies(ict_model)
    scene = CollisionScene(ict_model)
    skin = ict_model["skin_vertices"].copy()
    assert scene.detect(skin, IDENTITY).count == 0
    raw = CollisionScene(ict_model, teeth=False, rest_allowance=False)
    assert raw.detect(skin, IDENTITY).count <= 5          # the lips barely touch at rest
    up, forward = head_axes(ict_model)
    moved = skin.copy()
    moved[scene.lips.lower_vertices] += 0.003 * up
    contacts = scene.detect(moved, IDENTITY)
    through_upper = contacts.collider == scene.names.index("upper_lip")
    assert through_upper.sum() > 20 and (contacts.normal[through_upper] @ up < 0).all()
    lateral = np.cross(up, forward)
    lips = scene.lips
    centre = skin[lips.upper_vertices].mean(0)
    front = lips.upper_vertices[np.abs((skin[lips.upper_vertices] - centre) @ lateral) < 0.005]
    moved = skin.copy()
    moved[front] -= 0.006 * forward
    contacts = scene.detect(moved, IDENTITY)
    on_teeth = (contacts.collider == 0) & np.isin(contacts.vertex, front)
    assert on_teeth.sum() > 5 and (contacts.normal[on_teeth] @ forward > 0).all()


def test_contact_planes_concatenate_keeps_collider_indices():
    first = ContactPlanes(np.array([1]), np.zeros((1, 3)), np.array([[0, 0, 1.0]]), np.array([0.1]), np.array([0]))
    second = ContactPlanes(np.array([2]), np.zeros((1, 3)), np.array([[0, 1.0, 0]]), np.array([0.2]), np.array([3]))
    both = ContactPlanes.concatenate([first, ContactPlanes.empty(), second])
    np.testing.assert_array_equal(both.collider, [0, 3])
