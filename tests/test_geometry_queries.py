"""Winding-number and closest-point queries against brute-force numpy references."""
import numpy as np
import pytest

from solver.geometry import (
    ClosestPointTree,
    TriangleBVH,
    WindingNumberTree,
    icosphere,
    triangle_normals_areas,
    vertex_normals,
    winding_numbers,
)


# ---------------------------------------------------------------------------
# Test meshes


def upper_hemisphere(rings=12, segments=32):
    """Open unit hemisphere (z >= 0), outward-oriented, with its rim exactly on z = 0."""
    polar = np.linspace(0.0, np.pi / 2, rings + 1)[1:]
    azimuth = np.linspace(0.0, 2 * np.pi, segments, endpoint=False)
    p, a = np.meshgrid(polar, azimuth, indexing="ij")
    ring_vertices = np.column_stack([
        (np.sin(p) * np.cos(a)).ravel(), (np.sin(p) * np.sin(a)).ravel(), np.cos(p).ravel(),
    ])
    vertices = np.vstack([[0.0, 0.0, 1.0], ring_vertices])
    ring = lambda r, s: 1 + r * segments + s % segments  # noqa: E731
    triangles = [[0, ring(0, s), ring(0, s + 1)] for s in range(segments)]
    for r in range(rings - 1):
        for s in range(segments):
            triangles.append([ring(r, s), ring(r + 1, s), ring(r + 1, s + 1)])
            triangles.append([ring(r, s), ring(r + 1, s + 1), ring(r, s + 1)])
    return vertices, np.array(triangles)


def random_soup(rng, triangle_count):
    """Independent random triangles in the unit cube: open, intersecting, unoriented."""
    vertices = rng.random((3 * triangle_count, 3))
    return vertices, np.arange(3 * triangle_count).reshape(-1, 3)


def perturbed_sphere(rng, subdivisions=3, amplitude=0.05):
    vertices, triangles = icosphere(subdivisions)
    return vertices * (1.0 + amplitude * rng.standard_normal((len(vertices), 1))), triangles


# ---------------------------------------------------------------------------
# Brute-force references, vectorised over all (point, triangle) pairs


def brute_force_winding(vertices, triangles, points):
    """Sum of exact solid angles (Van Oosterom–Strackee) over all triangles, / 4π."""
    corners = vertices[triangles]
    result = np.empty(len(points))
    for first in range(0, len(points), 256):
        batch = points[first:first + 256]
        rel = corners[None, :, :, :] - batch[:, None, None, :]  # (p, t, 3 corners, 3)
        a, b, c = rel[:, :, 0], rel[:, :, 1], rel[:, :, 2]
        la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (a, b, c))
        numerator = np.einsum("ptk,ptk->pt", a, np.cross(b, c))
        denominator = (
            la * lb * lc
            + np.einsum("ptk,ptk->pt", a, b) * lc
            + np.einsum("ptk,ptk->pt", a, c) * lb
            + np.einsum("ptk,ptk->pt", b, c) * la
        )
        result[first:first + 256] = (2.0 * np.arctan2(numerator, denominator)).sum(axis=1) / (4.0 * np.pi)
    return result


def segment_distances(points, start, end):
    """(p, t) distances from every point to every segment start[t]-end[t]."""
    direction = end - start
    length_squared = np.einsum("tk,tk->t", direction, direction)
    offset = points[:, None, :] - start[None, :, :]
    along = np.einsum("ptk,tk->pt", offset, direction)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(length_squared > 0.0, np.clip(along / length_squared, 0.0, 1.0), 0.0)
    return np.linalg.norm(offset - t[..., None] * direction[None], axis=-1)


def brute_force_distance(vertices, triangles, points):
    """Distance to every triangle, the minimum of the plane distance (when the foot
    of the perpendicular falls inside the triangle) and the three edge distances.
    A different method from the tree's region classification, on purpose."""
    corners = vertices[triangles]
    a, b, c = corners[:, 0], corners[:, 1], corners[:, 2]
    normal = np.cross(b - a, c - a)
    normal_length = np.linalg.norm(normal, axis=1)
    usable = normal_length > 1e-12 * np.linalg.norm(b - a, axis=1) * np.linalg.norm(c - a, axis=1)
    unit_normal = np.zeros_like(normal)
    unit_normal[usable] = normal[usable] / normal_length[usable, None]
    distance = np.minimum.reduce([
        segment_distances(points, a, b), segment_distances(points, b, c), segment_distances(points, c, a),
    ])
    height = np.einsum("ptk,tk->pt", points[:, None, :] - a[None], unit_normal)
    foot = points[:, None, :] - height[..., None] * unit_normal[None]
    inside = np.ones(height.shape, bool)
    for start, end in ((a, b), (b, c), (c, a)):
        inside &= np.einsum("ptk,tk->pt", np.cross(end - start, foot - start[None]), unit_normal) >= 0.0
    inside &= usable[None]
    distance[inside] = np.minimum(distance[inside], np.abs(height[inside]))
    return distance.min(axis=1)


def point_triangle_distance(point, corners):
    return brute_force_distance(corners, np.array([[0, 1, 2]]), point[None])[0]


# ---------------------------------------------------------------------------
# Winding numbers


def test_winding_matches_brute_force_on_random_soups_away_from_surface():
    rng = np.random.default_rng(1)
    for triangle_count in (1, 7, 60, 400):
        vertices, triangles = random_soup(rng, triangle_count)
        points = rng.uniform(-0.5, 1.5, (3000, 3))
        diagonal = np.linalg.norm(np.ptp(vertices, axis=0))
        away = brute_force_distance(vertices, triangles, points) > 0.01 * diagonal
        expected = brute_force_winding(vertices, triangles, points)
        actual = winding_numbers(vertices, triangles, points)
        assert np.abs(actual - expected)[away].max() <= 1e-3
        # Without far-field approximation every triangle is summed exactly.
        exact = winding_numbers(vertices, triangles, points, accuracy=1e12)
        np.testing.assert_allclose(exact, expected, rtol=0, atol=1e-10)


def test_winding_matches_brute_force_on_perturbed_sphere():
    rng = np.random.default_rng(2)
    vertices, triangles = perturbed_sphere(rng, amplitude=0.02)
    points = rng.uniform(-1.6, 1.6, (4000, 3))
    diagonal = np.linalg.norm(np.ptp(vertices, axis=0))
    away = brute_force_distance(vertices, triangles, points) > 0.01 * diagonal
    error = np.abs(winding_numbers(vertices, triangles, points) - brute_force_winding(vertices, triangles, points))
    assert error[away].max() <= 1e-3


def test_far_field_error_falls_like_the_cube_of_radius_over_distance():
    # With accuracy near 0 the single triangle is always taken from its expansion,
    # whose relative error must shrink 8x per doubling of the distance (absolute 32x);
    # a wrong second-order coefficient would leave it at 16x.
    rng = np.random.default_rng(10)
    vertices = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.3, 0.8, 0.1]])
    triangles = np.array([[0, 1, 2]])
    directions = rng.standard_normal((200, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    errors = []
    for distance in (4.0, 8.0, 16.0):
        points = vertices.mean(axis=0) + distance * directions
        approximate = winding_numbers(vertices, triangles, points, accuracy=1e-3)
        errors.append(np.abs(approximate - brute_force_winding(vertices, triangles, points)).max())
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 24) & (ratios < 40))


def test_icosphere_is_one_inside_and_zero_outside():
    rng = np.random.default_rng(3)
    vertices, triangles = icosphere(3)
    directions = rng.standard_normal((2000, 3))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    # The inscribed radius of a level-3 icosphere is above 0.99.
    inside = directions * rng.uniform(0.0, 0.97, (2000, 1))
    outside = directions * rng.uniform(1.03, 5.0, (2000, 1))
    tree = WindingNumberTree(vertices, triangles)
    np.testing.assert_allclose(tree.query(inside), 1.0, atol=1e-3)
    np.testing.assert_allclose(tree.query(outside), 0.0, atol=1e-3)


def test_flipped_orientation_gives_minus_one_inside():
    vertices, triangles = icosphere(2)
    flipped = triangles[:, ::-1]
    points = np.array([[0.0, 0.0, 0.0], [0.3, -0.2, 0.5], [2.0, 0.0, 0.0]])
    np.testing.assert_allclose(winding_numbers(vertices, flipped, points), [-1.0, -1.0, 0.0], atol=1e-3)


def test_open_hemisphere_gives_one_half_at_its_centre():
    vertices, triangles = upper_hemisphere()
    np.testing.assert_allclose(winding_numbers(vertices, triangles, np.zeros((1, 3))), [0.5], atol=1e-3)


def test_overlapping_spheres_give_two_in_the_overlap():
    first_vertices, first_triangles = icosphere(3, centre=(-0.5, 0.0, 0.0))
    second_vertices, second_triangles = icosphere(3, centre=(0.5, 0.0, 0.0))
    vertices = np.vstack([first_vertices, second_vertices])
    triangles = np.vstack([first_triangles, second_triangles + len(first_vertices)])
    points = np.array([[0.0, 0.0, 0.0], [0.0, 0.3, 0.2], [-1.2, 0.0, 0.0], [1.2, 0.1, 0.0], [0.0, 1.5, 0.0]])
    np.testing.assert_allclose(winding_numbers(vertices, triangles, points), [2, 2, 1, 1, 0], atol=1e-3)


def test_winding_tree_is_reusable_and_shares_its_bvh():
    rng = np.random.default_rng(4)
    vertices, triangles = perturbed_sphere(rng, subdivisions=2)
    bvh = TriangleBVH(vertices, triangles, leaf_size=4)
    points = rng.uniform(-1.5, 1.5, (500, 3))
    tree = WindingNumberTree.from_bvh(bvh)
    first = tree.query(points)
    np.testing.assert_array_equal(tree.query(points), first)
    np.testing.assert_allclose(first, WindingNumberTree(vertices, triangles).query(points), atol=1e-3)
    assert ClosestPointTree.from_bvh(bvh).bvh is tree.bvh


def test_winding_rejects_divergent_accuracy():
    vertices, triangles = icosphere(0)
    with pytest.raises(ValueError, match="accuracy"):
        winding_numbers(vertices, triangles, np.zeros((1, 3)), accuracy=0.0)


# ---------------------------------------------------------------------------
# Closest points


def assert_consistent_closest_points(vertices, triangles, points, result):
    """Each closest point lies on its reported triangle, at the reported distance,
    and equals the barycentric combination of that triangle's corners."""
    assert np.all(result.triangle_index >= 0)
    corners = vertices[triangles[result.triangle_index]]
    np.testing.assert_allclose(result.barycentric.sum(axis=1), 1.0, atol=1e-12)
    assert result.barycentric.min() >= -1e-12
    scale = np.abs(vertices).max()
    np.testing.assert_allclose(np.einsum("pc,pck->pk", result.barycentric, corners), result.closest,
                               rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(np.linalg.norm(points - result.closest, axis=1), result.distance,
                               rtol=1e-12, atol=1e-14 * scale)
    own_triangle = np.array([point_triangle_distance(p, c) for p, c in zip(points, corners)])
    np.testing.assert_allclose(own_triangle, result.distance, rtol=1e-12, atol=1e-14 * scale)


@pytest.mark.parametrize("mesh", ["soup", "sphere"])
def test_closest_points_match_brute_force(mesh):
    rng = np.random.default_rng(5)
    if mesh == "soup":
        vertices, triangles = random_soup(rng, 300)
    else:
        vertices, triangles = perturbed_sphere(rng)
    surface_samples = vertices[triangles[rng.integers(0, len(triangles), 2000)]].mean(axis=1)
    near = surface_samples + rng.normal(scale=0.02, size=surface_samples.shape)
    far = rng.uniform(-10.0, 10.0, (1000, 3))
    points = np.vstack([near, far, rng.uniform(-1.5, 1.5, (1000, 3))])
    result = ClosestPointTree(vertices, triangles).query(points)
    # Relative 1e-12, except that two exact methods may differ by a few ulps of the
    # coordinates (~1e-16 here), which dominates for points within ~1e-4 of the surface.
    np.testing.assert_allclose(result.distance, brute_force_distance(vertices, triangles, points),
                               rtol=1e-12, atol=1e-14)
    assert_consistent_closest_points(vertices, triangles, points, result)


def test_closest_points_exactly_on_the_surface_have_zero_distance():
    rng = np.random.default_rng(6)
    vertices, triangles = perturbed_sphere(rng, subdivisions=2)
    weights = rng.dirichlet(np.ones(3), 500)
    on_faces = np.einsum("pc,pck->pk", weights, vertices[triangles[rng.integers(0, len(triangles), 500)]])
    points = np.vstack([on_faces, vertices])
    distance, closest, _, _ = ClosestPointTree(vertices, triangles).query(points)
    assert distance.max() <= 1e-14
    np.testing.assert_allclose(closest[len(on_faces):], vertices, rtol=0, atol=1e-15)


def test_max_distance_limits_the_search():
    rng = np.random.default_rng(7)
    vertices, triangles = perturbed_sphere(rng, subdivisions=2)
    points = rng.uniform(-3.0, 3.0, (2000, 3))
    tree = ClosestPointTree(vertices, triangles)
    unbounded = tree.query(points)
    bounded = tree.query(points, max_distance=0.5)
    within = unbounded.distance <= 0.5
    assert 0 < within.sum() < len(points)
    np.testing.assert_array_equal(bounded.distance[within], unbounded.distance[within])
    np.testing.assert_array_equal(bounded.triangle_index[within], unbounded.triangle_index[within])
    assert np.all(np.isinf(bounded.distance[~within]))
    assert np.all(bounded.triangle_index[~within] == -1)
    assert np.all(np.isnan(bounded.closest[~within])) and np.all(np.isnan(bounded.barycentric[~within]))
    # The bound is inclusive.
    exact_bound = tree.query(points[:1], max_distance=unbounded.distance[0])
    assert exact_bound.triangle_index[0] == unbounded.triangle_index[0]


def test_a_neighbours_triangle_as_first_bound_changes_no_bit():
    """Each point's search starts bounded by the previous point's triangle; alone, a point has
    no such bound. Grid points (ties at shared edges and corners included, and a mesh with
    repeated triangles) must give bitwise the same answer either way."""
    rng = np.random.default_rng(8)
    vertices, triangles = perturbed_sphere(rng, subdivisions=2)
    triangles = np.vstack([triangles, triangles[::7]])         # exact ties between two slots
    axis = np.linspace(-1.6, 1.6, 17)
    grid = np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3)
    points = np.vstack([grid, vertices, rng.uniform(-3.0, 3.0, (300, 3))])
    tree = ClosestPointTree(vertices, triangles)
    for max_distance in (np.inf, 0.3):
        together = tree.query(points, max_distance)
        for start in range(0, len(points), 97):
            alone = [tree.query(points[k:k + 1], max_distance) for k in range(start, min(start + 3, len(points)))]
            for offset, single in enumerate(alone):
                k = start + offset
                assert single.triangle_index[0] == together.triangle_index[k]
                assert single.distance.tobytes() == together.distance[k:k + 1].tobytes()
                assert single.barycentric.tobytes() == together.barycentric[k:k + 1].tobytes()
                assert single.closest.tobytes() == together.closest[k:k + 1].tobytes()


def test_empty_mesh_finds_nothing_and_winds_zero():
    vertices = np.zeros((0, 3))
    triangles = np.zeros((0, 3), int)
    points = np.ones((4, 3))
    result = ClosestPointTree(vertices, triangles).query(points)
    assert np.all(np.isinf(result.distance)) and np.all(result.triangle_index == -1)
    np.testing.assert_array_equal(winding_numbers(vertices, triangles, points), 0.0)


# ---------------------------------------------------------------------------
# Degenerate input


def mesh_with_degenerate_triangles():
    """A sphere plus collapsed triangles: repeated corners, a point, collinear corners."""
    vertices, triangles = icosphere(2)
    extra = np.array([[0.2, 0.1, 0.0], [0.4, 0.3, 0.0], [0.6, 0.5, 0.0], [1.5, 1.5, 1.5]])
    offset = len(vertices)
    vertices = np.vstack([vertices, extra])
    degenerate = np.array([
        [offset, offset, offset + 1],          # repeated corner: a segment
        [offset + 3, offset + 3, offset + 3],  # a single point
        [offset, offset + 1, offset + 2],      # collinear corners
        [offset + 2, offset, offset + 1],      # collinear, middle corner last
        [0, 0, 0],                             # collapsed onto a sphere vertex
    ])
    return vertices, np.vstack([triangles, degenerate]), extra


def test_degenerate_triangles_produce_no_nan():
    rng = np.random.default_rng(8)
    vertices, triangles, extra = mesh_with_degenerate_triangles()
    points = np.vstack([
        rng.uniform(-2.0, 2.0, (2000, 3)),
        vertices,                             # on every corner, degenerate ones included
        [0.5 * (extra[0] + extra[1])],        # on a degenerate segment
        [[0.3, 0.2, 0.0], [0.5, 0.4, 1e-9]],  # on and next to the collinear triangles
    ])
    winding = winding_numbers(vertices, triangles, points)
    assert np.all(np.isfinite(winding))
    result = ClosestPointTree(vertices, triangles).query(points)
    for values in result:
        assert np.all(np.isfinite(values))
    np.testing.assert_allclose(result.distance, brute_force_distance(vertices, triangles, points),
                               rtol=1e-12, atol=1e-15)
    assert_consistent_closest_points(vertices, triangles, points, result)


def test_degenerate_triangles_do_not_change_winding_away_from_them():
    rng = np.random.default_rng(9)
    vertices, triangles, _ = mesh_with_degenerate_triangles()
    sphere_only = triangles[:-5]
    points = rng.uniform(-0.5, 0.5, (500, 3)) * [1, 1, 0] + [0, 0, 0.4]
    # Summed exactly, zero-area triangles contribute nothing ...
    np.testing.assert_allclose(winding_numbers(vertices, triangles, points, accuracy=1e12),
                               winding_numbers(vertices, sphere_only, points, accuracy=1e12), atol=1e-12)
    # ... and their zero moments leave the far-field expansions intact.
    np.testing.assert_allclose(winding_numbers(vertices, triangles, points), 1.0, atol=1e-3)


def test_winding_on_the_surface_is_finite():
    vertices, triangles = icosphere(2)
    corners = vertices[triangles]
    points = np.vstack([vertices, corners.mean(axis=1), 0.5 * (corners[:, 0] + corners[:, 1])])
    assert np.all(np.isfinite(winding_numbers(vertices, triangles, points)))


def test_points_far_away_give_finite_results():
    vertices, triangles = icosphere(2)
    points = np.array([[1e6, 0.0, 0.0], [0.0, -1e9, 3e8], [1e-300, 0.0, 0.0]])
    winding = winding_numbers(vertices, triangles, points)
    np.testing.assert_allclose(winding, [0.0, 0.0, 1.0], atol=1e-3)
    result = ClosestPointTree(vertices, triangles).query(points)
    assert np.all(np.isfinite(result.distance)) and np.all(np.isfinite(result.closest))


# ---------------------------------------------------------------------------
# Normals and areas


def test_triangle_normals_areas_and_vertex_normals():
    vertices, triangles = icosphere(3)
    normals, areas = triangle_normals_areas(vertices, triangles)
    np.testing.assert_allclose(np.linalg.norm(normals, axis=1), 1.0)
    centroids = vertices[triangles].mean(axis=1)
    assert np.all(np.einsum("tk,tk->t", normals, centroids) > 0)  # outward
    assert abs(areas.sum() - 4 * np.pi) < 0.02 * 4 * np.pi
    unit = vertex_normals(vertices, triangles)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0)
    assert np.einsum("vk,vk->v", unit, vertices).min() > 0.999  # close to radial
    # On the icosahedron every vertex sees the same fan, so the normal is exactly radial.
    icosahedron_vertices, icosahedron_triangles = icosphere(0)
    np.testing.assert_allclose(vertex_normals(icosahedron_vertices, icosahedron_triangles), icosahedron_vertices,
                               atol=1e-12)
    right_triangle = np.array([[0, 0, 0], [2, 0, 0], [0, 3, 0]], float)
    normals, areas = triangle_normals_areas(right_triangle, [[0, 1, 2]])
    np.testing.assert_allclose(normals, [[0, 0, 1]])
    np.testing.assert_allclose(areas, [3.0])


def test_normals_of_degenerate_and_unused_geometry_are_zero_not_nan():
    vertices = np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0], [5, 5, 5]], float)
    normals, areas = triangle_normals_areas(vertices, [[0, 1, 2], [1, 1, 1]])
    np.testing.assert_array_equal(normals, 0.0)
    np.testing.assert_array_equal(areas, 0.0)
    np.testing.assert_array_equal(vertex_normals(vertices, [[0, 1, 2]]), 0.0)


def test_malformed_input_is_rejected():
    vertices, triangles = icosphere(0)
    with pytest.raises(ValueError, match="triangle indices"):
        ClosestPointTree(vertices, triangles + 1)
    with pytest.raises(ValueError, match="shape"):
        WindingNumberTree(vertices[:, :2], triangles)
    with pytest.raises(ValueError, match="points"):
        ClosestPointTree(vertices, triangles).query(np.zeros(3))


# ---------------------------------------------------------------------------
# First ray hits (solver/geometry/rays.py)


def _ray_hits_by_planes(vertices, triangles, origin, direction):
    """Brute-force reference: each triangle's plane met by a solve of [−d, e1, e2] (t, u, v) = o − a."""
    best = (np.inf, -1)
    for index, (a, b, c) in enumerate(vertices[triangles]):
        system = np.column_stack([-direction, b - a, c - a])
        if abs(np.linalg.det(system)) < 1e-14:
            continue
        t, u, v = np.linalg.solve(system, origin - a)
        if t > 0 and u >= -1e-9 and v >= -1e-9 and u + v <= 1 + 1e-9 and t < best[0]:
            best = (t, index)
    return best


def test_first_ray_hits_match_a_plane_by_plane_reference():
    from solver.geometry.rays import first_ray_hits
    rng = np.random.default_rng(4)
    vertices, triangles = icosphere(2)
    vertices = vertices + 0.02 * rng.standard_normal(vertices.shape)
    origins = rng.uniform(-2.0, 2.0, (200, 3))
    directions = rng.standard_normal((200, 3))
    distance, triangle, barycentric = first_ray_hits(vertices, triangles, origins, directions)
    for ray in range(len(origins)):
        expected_t, expected_triangle = _ray_hits_by_planes(vertices, triangles, origins[ray], directions[ray])
        assert triangle[ray] == expected_triangle
        if expected_triangle < 0:
            assert distance[ray] == np.inf and np.isnan(barycentric[ray]).all()
        else:
            assert distance[ray] == pytest.approx(expected_t, rel=1e-10)
            corners = vertices[triangles[triangle[ray]]]
            np.testing.assert_allclose(barycentric[ray] @ corners, origins[ray] + distance[ray] * directions[ray],
                                       atol=1e-10)
    assert 0 < (triangle >= 0).sum() < len(origins)
    # Through a hierarchy the caller keeps: the same bits; one built over another mesh is refused.
    kept = first_ray_hits(vertices, triangles, origins, directions, bvh=TriangleBVH(vertices, triangles))
    for ours, theirs in zip(kept, (distance, triangle, barycentric)):
        np.testing.assert_array_equal(ours, theirs)
    # Fewer rays than HIERARCHY_RAYS test every triangle without a hierarchy: the same hits.
    from solver.geometry.rays import HIERARCHY_RAYS
    few = first_ray_hits(vertices, triangles, origins[:HIERARCHY_RAYS - 1], directions[:HIERARCHY_RAYS - 1])
    for ours, theirs in zip(few, (distance, triangle, barycentric)):
        np.testing.assert_array_equal(ours, theirs[:HIERARCHY_RAYS - 1])
    with pytest.raises(ValueError, match="bvh: built over"):
        first_ray_hits(vertices, triangles, origins, directions, bvh=TriangleBVH(*icosphere(1)))


def test_first_ray_hits_one_direction_edges_and_misses():
    """A shared direction for every ray; a ray along the shared edge of two triangles still hits;
    rays parallel to the plane or pointing away miss."""
    from solver.geometry.rays import first_ray_hits
    square = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    triangles = np.array([[0, 1, 2], [0, 2, 3]])
    origins = np.array([[0.5, 0.5, 1.0], [0.25, 0.75, 2.0], [0.5, 0.5, -1.0], [2.0, 2.0, 1.0]])
    distance, triangle, _ = first_ray_hits(square, triangles, origins, np.array([0.0, 0.0, -1.0]))
    np.testing.assert_allclose(distance[:2], [1.0, 2.0])
    assert triangle[0] in (0, 1) and triangle[1] == 1 and (triangle[2:] == -1).all()
    parallel = first_ray_hits(square, triangles, [[0.5, 0.5, 0.0]], [1.0, 0.0, 0.0])
    assert parallel[1][0] == -1 and parallel[0][0] == np.inf
    # Two stacked squares: the nearer one is the hit.
    stacked = np.vstack([square, square + [0.0, 0.0, 0.5]])
    hit = first_ray_hits(stacked, np.vstack([triangles, triangles + 4]), [[0.3, 0.6, 2.0]], [0.0, 0.0, -1.0])
    assert hit[0][0] == pytest.approx(1.5) and hit[1][0] >= 2
