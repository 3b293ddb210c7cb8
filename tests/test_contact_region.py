"""The contact region relaxed before a contact round's whole-mesh solve (solver/physics/contact_region.py):
its sub-mesh, its constraints with the rest of the mesh held, and the relaxation itself, on a
tissue slab with a sphere pressed into it (real CHOLMOD). What it buys on ICT's lip animation is
measured by bench/collisions.py (docs/collisions.md)."""
from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from solver.collisions.contacts import BonePose
from solver.collisions.collider_set import ColliderSet
from solver.physics.contact import AugmentedLagrangianContact
from solver.physics.contact_region import ContactRegion
from solver.physics.simulator import MAX_FAILED_RELAXATIONS, FaceSimulator, SimulationSettings
from test_contact import identity_activations, pressing_sphere

MM = 1e3
FRAMES = 3


def pressing(centre):
    return pressing_sphere(centre, np.array([0.0, 1.0, 0.0]), 0.01, 0.002, frames=FRAMES)


def press(model, centre, rings):
    simulator = FaceSimulator(model, SimulationSettings(contact_region_rings=rings),
                              collisions=ColliderSet([pressing(centre)]))
    return simulator, [simulator.step(identity_activations(model)) for _ in range(FRAMES)]


def test_the_region_is_the_seeds_rings_and_the_tets_touching_them(slab):
    model, _ = slab
    simulator = FaceSimulator(model, collisions=ColliderSet([pressing(slab[1])]))
    tets = np.asarray(model["tets"])
    seed = tets[len(tets) // 2]
    for rings in (1, 2):
        region = ContactRegion(model, simulator.elasticity, simulator.skin_embedding, rings=rings).region(seed)
        free = np.zeros(len(model["rest_positions"]), bool)
        free[seed] = True
        for _ in range(rings):
            free[np.unique(tets[free[tets].any(axis=1)])] = True
        expected_tets = np.flatnonzero(free[tets].any(axis=1))
        np.testing.assert_array_equal(region.tets, expected_tets)
        np.testing.assert_array_equal(region.nodes, np.unique(tets[expected_tets]))
        np.testing.assert_array_equal(region.held, ~free[region.nodes])
        assert region.held.any() and (~region.held).sum() > 4
        # The embedding on the sub-mesh puts each vertex it carries where the whole mesh does.
        carried = region.embedding.vertex_tet >= 0
        assert carried.any()
        x = simulator.positions.reshape(-1, 3) + 1e-3 * np.random.default_rng(1).normal(size=(len(free), 3))
        np.testing.assert_allclose(region.embedding.skin_positions(x[region.nodes])[carried],
                                   simulator.skin_embedding.skin_positions(x)[carried], rtol=0, atol=1e-15)


def test_held_nodes_stay_where_they_are_in_any_bone_frame(slab):
    model, centre = slab
    simulator = FaceSimulator(model, collisions=ColliderSet([pressing(centre)]))
    contact_region = ContactRegion(model, simulator.elasticity, simulator.skin_embedding)
    region = contact_region.region(np.asarray(model["tets"])[10])
    skull = np.eye(4)
    skull[:3, :3] = Rotation.from_rotvec([0.1, -0.2, 0.05]).as_matrix()
    skull[:3, 3] = [0.01, -0.02, 0.005]
    x = simulator.positions + 1e-3 * np.random.default_rng(2).normal(size=simulator.positions.shape)
    constraints = contact_region.constraints(region, x, skull, np.eye(4))
    local = x.reshape(-1, 3)[region.nodes]
    projected = constraints.x_from_q(constraints.q_from_x(local.reshape(-1))).reshape(-1, 3)
    np.testing.assert_allclose(projected[region.held], local[region.held], rtol=0, atol=1e-15)
    free_unpinned = ~region.held & ~np.isin(region.nodes, model["pin_nodes"])
    assert constraints.reduced_size == 3 * free_unpinned.sum()


def test_the_relaxation_lowers_the_energy_balances_the_region_and_leaves_the_rest(slab):
    """A round's planes set as solve_newton sets them (frame 2 of the press, from frame 1's
    state): the relaxed region is in equilibrium to the round's tolerance, every node off it is
    untouched, the energy fell, and the whole-mesh solve from there reaches the equilibrium it
    reaches without the relaxation."""
    model, centre = slab
    simulator = FaceSimulator(model, SimulationSettings(contact_region_rings=0),
                              collisions=ColliderSet([pressing(centre)]))
    simulator.step(identity_activations(model))
    simulator.objective.material = simulator.material_for(identity_activations(model))
    response, pose = simulator.contact_response, BonePose(np.eye(4), np.eye(4), 2)
    constraints = simulator.constraints
    constraints.use_frame(np.eye(4), np.eye(4))
    start = constraints.x_from_q(constraints.q_from_x(simulator.positions))
    planes, anchors = response.detect(start, pose)
    assert planes.count and planes.depth.max() > 0.3e-3
    stiffness = response.stiffness_factor * response.vertex_stiffness[planes.vertex]
    objective = simulator.objective
    objective.contact = AugmentedLagrangianContact(simulator.skin_embedding, planes, 0.0, stiffness,
                                                   hessian_layout=simulator.elasticity, anchors=anchors)
    scale = simulator.force_scale(start, np.eye(4), np.eye(4))
    tolerance = simulator.settings.tolerance
    contact_region = ContactRegion(model, simulator.elasticity, simulator.skin_embedding)
    relaxed = contact_region.relax(objective, start, np.eye(4), np.eye(4), force_scale=scale, tolerance=tolerance)
    region = contact_region.region(objective.contact.nodes)
    assert relaxed.result.converged, relaxed.result.reason
    free = np.zeros(len(model["rest_positions"]), bool)
    free[region.free_nodes] = True
    moved = np.abs(relaxed.x - start).reshape(-1, 3).max(axis=1)
    assert moved[~free].max() == 0.0 and moved[free].max() > 0.1e-3
    assert objective.energy(relaxed.x) < objective.energy(start)
    residual = np.abs(objective.gradient(relaxed.x).reshape(-1, 3)[free & (constraints.dofs_per_node == 3)]).max()
    assert residual <= tolerance * scale, f"{residual:.3g} > {tolerance * scale:.3g}"
    direct = simulator.solver.solve(start, force_scale=scale)
    after = simulator.solver.solve(relaxed.x, force_scale=scale)
    assert direct.converged and after.converged
    difference = np.abs(after.x - direct.x).max()
    assert difference < 1e-3 * 1e-3, f"the two equilibria differ by {difference * MM:.5f} mm"
    objective.contact = None


def test_a_press_with_the_region_relaxed_ends_where_it_ends_without(slab):
    model, centre = slab
    (with_region, framed), (without, plain) = press(model, centre, 2), press(model, centre, 0)
    assert all(f.converged for f in framed + plain)
    assert sum(f.region_iterations for f in framed) > 0 and sum(f.region_iterations for f in plain) == 0
    assert without.contact_region is None
    difference = np.abs(with_region.skin_positions() - without.skin_positions()).max()
    assert difference < 0.01e-3, f"skin differs by {difference * MM:.4f} mm"
    assert max(f.penetration_depth_max for f in framed) <= 0.2e-3


def test_a_relaxation_that_fails_is_counted_and_not_retried_in_the_same_solve(slab):
    """Relaxations held to one iteration fail on this press; each round's whole-mesh solve then
    tries the region MAX_FAILED_RELAXATIONS times at most, counts those iterations, and goes on
    without it to the press's equilibrium without the region."""
    model, centre = slab
    simulator = FaceSimulator(model, SimulationSettings(contact_region_rings=2),
                              collisions=ColliderSet([pressing(centre)]))
    simulator.contact_region.max_iterations = 1
    framed = [simulator.step(identity_activations(model)) for _ in range(FRAMES)]
    without, plain = press(model, centre, 0)
    assert all(f.converged for f in framed + plain)
    rounds = sum(f.collision_rounds for f in framed)
    relaxed = sum(f.region_iterations for f in framed)
    assert 0 < relaxed <= MAX_FAILED_RELAXATIONS * rounds, f"{relaxed} region iterations in {rounds} rounds"
    difference = np.abs(simulator.skin_positions() - without.skin_positions()).max()
    assert difference < 0.01e-3, f"skin differs by {difference * MM:.4f} mm"


class _CountedPasses:
    """The simulator's elasticity with its fused passes counted (the real passes, only counted)."""

    def __init__(self, elasticity):
        self.elasticity, self.passes = elasticity, 0

    def __getattr__(self, name):
        return getattr(self.elasticity, name)

    def energy_gradient_hessian(self, *args, **kwargs):
        self.passes += 1
        return self.elasticity.energy_gradient_hessian(*args, **kwargs)


def test_the_next_round_starts_on_the_tissue_pass_the_last_one_ended_with(slab):
    """A contact round ends on a point whose tissue pass (E, ∇E, ∇²E) it made; the next round
    starts there with other planes. Newton keeps that start's bits (it lies on the constraints),
    and the objective serves the kept pass again: the same bits as a fresh pass, with the new
    planes' term added, and no second pass over the tets."""
    from solver.physics.newton import _onto_constraints
    model, centre = slab
    simulator = FaceSimulator(model, SimulationSettings(contact_region_rings=0),
                              collisions=ColliderSet([pressing(centre)]))
    simulator.step(identity_activations(model))
    objective = simulator.objective
    objective.material = simulator.material_for(identity_activations(model))
    response, pose = simulator.contact_response, BonePose(np.eye(4), np.eye(4), 2)
    constraints = simulator.constraints
    constraints.use_frame(np.eye(4), np.eye(4))
    off = simulator.positions + 1e-4 * np.random.default_rng(3).normal(size=simulator.positions.shape)
    q, start = _onto_constraints(constraints, off)
    np.testing.assert_array_equal(start, constraints.x_from_q(constraints.q_from_x(off)))   # projected
    again_q, again = _onto_constraints(constraints, start)
    np.testing.assert_array_equal(again, start)                                              # kept, bit for bit
    np.testing.assert_allclose(constraints.x_from_q(again_q), start, rtol=0, atol=1e-15)
    planes, anchors = response.detect(start, pose)
    stiffness = response.stiffness_factor * response.vertex_stiffness[planes.vertex]

    def term(multiplier):
        return AugmentedLagrangianContact(simulator.skin_embedding, planes, multiplier, stiffness,
                                          hessian_layout=simulator.elasticity, anchors=anchors)
    counted = _CountedPasses(simulator.elasticity)
    objective.elasticity = counted
    try:
        objective.contact = term(0.0)
        objective.energy_gradient_hessian(start)                 # the last round's end
        objective.contact = term(0.5)                            # the next round's planes
        kept = objective.energy_gradient_hessian(start)
        assert counted.passes == 1
        objective.elasticity = simulator.elasticity
        objective._kept_tissue_pass = None
        fresh = objective.energy_gradient_hessian(start)
        assert kept[0] == fresh[0]
        np.testing.assert_array_equal(kept[1], fresh[1])
        np.testing.assert_array_equal(kept[2].data, fresh[2].data)
        # Another point, or no contact term: a pass of its own, nothing kept.
        objective.elasticity = counted
        objective.energy_gradient_hessian(start + 1e-9)
        objective.contact = None
        objective.energy_gradient_hessian(start)
        assert counted.passes == 3 and objective._kept_tissue_pass is None
    finally:
        objective.elasticity, objective.contact = simulator.elasticity, None


def test_a_region_freed_again_reuses_its_sub_mesh(slab):
    """Two contact terms over the same nodes (rounds and frames of one contact) get the same
    sub-mesh object; other nodes get their own, equal to a fresh build; the oldest beyond
    KEPT_SUB_MESHES is dropped."""
    from types import SimpleNamespace

    from solver.physics.contact_region import KEPT_SUB_MESHES
    model, centre = slab
    simulator = FaceSimulator(model, collisions=ColliderSet([pressing(centre)]))
    contact_region = ContactRegion(model, simulator.elasticity, simulator.skin_embedding)
    tets = np.asarray(model["tets"])
    first, again = (SimpleNamespace(nodes=tets[10]) for _ in range(2))
    region, elasticity = contact_region.sub_mesh(first)
    assert contact_region.sub_mesh(again) == (region, elasticity) and contact_region.sub_mesh_reuses == 1
    other_region, other_elasticity = contact_region.sub_mesh(SimpleNamespace(nodes=tets[len(tets) // 2]))
    assert other_elasticity is not elasticity
    fresh = contact_region.region(tets[len(tets) // 2])
    np.testing.assert_array_equal(other_region.tets, fresh.tets)
    np.testing.assert_array_equal(other_region.held, fresh.held)
    for index in range(KEPT_SUB_MESHES):           # as many new regions as are kept push out the first
        contact_region.sub_mesh(SimpleNamespace(nodes=tets[20 + 7 * index]))
    assert contact_region.sub_mesh(SimpleNamespace(nodes=tets[10]))[1] is not elasticity


def test_the_sub_mesh_keeps_its_constraints_and_repins_the_held_nodes(slab):
    """Relaxations of one sub-mesh share one BoneConstraints (and its Pᵀ H P pattern); each
    re-pins the held nodes where x has them, exactly as constraints made afresh would."""
    from types import SimpleNamespace
    model, centre = slab
    simulator = FaceSimulator(model, collisions=ColliderSet([pressing(centre)]))
    contact_region = ContactRegion(model, simulator.elasticity, simulator.skin_embedding)
    seeds = np.asarray(model["tets"])[10]
    region, elasticity = contact_region.sub_mesh(SimpleNamespace(nodes=seeds))
    skull = np.eye(4)
    skull[:3, :3] = Rotation.from_rotvec([0.05, 0.1, -0.02]).as_matrix()
    skull[:3, 3] = [0.002, 0.01, -0.004]
    kept_before = None
    for seed in (3, 4):
        x = simulator.positions + 1e-3 * np.random.default_rng(seed).normal(size=simulator.positions.shape)
        kept = contact_region.constraints(region, x, skull, np.eye(4))
        fresh = contact_region.constraints(contact_region.region(seeds), x, skull, np.eye(4))
        assert kept is not fresh and (kept_before is None or kept is kept_before)
        np.testing.assert_array_equal(kept.c, fresh.c)
        assert (kept.P != fresh.P).nnz == 0
        hessian = elasticity.energy_gradient_hessian(x.reshape(-1, 3)[region.nodes].reshape(-1),
                                                     simulator.neutral_material.restricted_to(region.tets))[2]
        np.testing.assert_array_equal(kept.reduce_hessian(hessian).toarray(), fresh.reduce_hessian(hessian).toarray())
        reduction = kept._hessian_reduction
        kept_before = kept
    kept.reduce_hessian(hessian)
    assert kept._hessian_reduction is reduction
