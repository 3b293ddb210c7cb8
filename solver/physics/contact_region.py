"""The tissue around a contact round's planes relaxed before each whole-mesh Newton step, the
rest of the mesh held: a Newton solve on a few thousand tets of their own.

Why: a contact round starts with planes whose vertices are up to millimetres inside the teeth
or the other lip, pushed by a penalty a hundred times stiffer than the tissue. Solved over the
whole mesh from there, a round of ICT's lip animation took 8–16 Newton iterations where the same
load step without collisions takes 3–6: the residual started at 10–100 × the force scale and
hovered while vertices crossed their planes' kinks (docs/collisions.md). Each of those
iterations costs a pass over all 35,768 tets and a solve with the whole mesh's factor, though
what they settle lies within a few tet rings of the planes. So before each whole-mesh step
(newton.newton_minimise's ``before_step``) the same energy is minimised over the nodes within
``rings`` tet rings of the planes' tets, every other node held where it is: a Newton solve on
~3,000 tets with its own pattern and CHOLMOD factor (on ICT ~25 ms an iteration, against ~250 ms
for the whole mesh). The whole-mesh step then only has to carry what the region cannot: the
rest of the face's answer to the activations. This is nonlinear elimination (Cai & Keyes,
nonlinearly preconditioned Newton for localised nonlinearities). Relaxed once per round, before
the whole-mesh solve only, ICT's 7-frame lip animation took 181 whole-mesh iterations (146
without collisions); before each step, 109 (docs/collisions.md).

Safety: with the held nodes fixed the region's energy differs from the whole mesh's by a
constant, so a relaxation only lowers the energy the step starts from; one that does not
converge is thrown away and the step starts where it would have.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from typing import Optional

import numpy as np
import scipy.sparse as sp

from .constraints import BoneConstraints
from .skin_embedding import SkinEmbedding
from .corotated import CorotatedElasticity
from .newton import DEFAULT_MAX_ITERATIONS, MAX_FORCING, NewtonResult, NewtonSolver

# Tet rings around the planes' tets. ICT's 7-frame lip animation, frames 1-6 with collisions, one
# core, relaxed once per round: 2 rings (2,700-3,600 tets) 74-76 s, 181 whole-mesh iterations; 4
# rings 71.9 s, 131; 6 rings 83.4 s, 120. Its smooth version: 2 rings 97.2 s, 4 rings 104.0 s
# (docs/collisions.md).
DEFAULT_REGION_RINGS = 2
KEPT_SUB_MESHES = 8                 # sub-meshes kept for reuse, the most recently used
SKULL = 0


@dataclass(frozen=True)
class Region:
    """A sub-mesh: ``tets`` (m,) the global tets with a free node, ``nodes`` (n,) their nodes in
    increasing order, ``held`` (n,) the ones outside the region (fixed), and the skin embedding
    on it (vertices off the sub-mesh have tet and nodes −1)."""
    tets: np.ndarray
    nodes: np.ndarray
    held: np.ndarray
    embedding: SkinEmbedding

    @cached_property
    def dofs(self) -> np.ndarray:
        """(3n,) the global coordinates of the sub-mesh's nodes, node-major."""
        return (3 * self.nodes[:, None] + np.arange(3)).reshape(-1)

    @cached_property
    def free_nodes(self) -> np.ndarray:
        """The global indices of the nodes the relaxation moves (the sub-mesh's, less the held)."""
        return self.nodes[~self.held]


@dataclass
class _SubMesh:
    region: Region
    elasticity: CorotatedElasticity
    constraints: Optional[BoneConstraints] = None    # made at the first relaxation, then re-pinned


@dataclass
class RegionRelaxation:
    x: np.ndarray               # (3N,) the whole mesh with the region relaxed (the start if not converged)
    result: NewtonResult        # the region's Newton solve
    tet_count: int
    seconds: float


class ContactRegion:
    """Relaxes the tissue around contact planes (module docstring); built once per simulator."""

    def __init__(self, model: dict, elasticity: CorotatedElasticity, embedding: SkinEmbedding,
                 rings: int = DEFAULT_REGION_RINGS, max_iterations: int = DEFAULT_MAX_ITERATIONS):
        if rings < 1:
            raise ValueError("a contact region needs at least one ring of tets")
        self.rings = int(rings)
        self.max_iterations = int(max_iterations)    # Newton iterations of one relaxation
        self.tets = np.asarray(model["tets"], dtype=np.int64)
        self.rest = np.asarray(model["rest_positions"], dtype=np.float64)
        self.node_count = len(self.rest)
        self.rest_scale = elasticity.rest_scale
        self.embedding = embedding
        tet_count = len(self.tets)
        self._incidence = sp.csr_matrix((np.ones(self.tets.size), (np.repeat(np.arange(tet_count), 4),
                                                                   self.tets.ravel())),
                                        shape=(tet_count, self.node_count))
        self._incidence_transposed = self._incidence.T.tocsr()
        self.pin_nodes = np.asarray(model["pin_nodes"], dtype=np.int64)
        self.pin_bone = np.asarray(model["pin_bone"], dtype=np.int64)
        self.slide_nodes = np.asarray(model["slide_nodes"], dtype=np.int64)
        self.slide_bone = np.asarray(model["slide_bone"], dtype=np.int64)
        self.slide_normals = np.asarray(model["slide_normals"], dtype=np.float64).reshape(-1, 3)
        # The sub-mesh of the last contact term relaxed: a round's solve keeps one term for all
        # its steps, so the region and its elasticity pattern are built once per round, not per step.
        self._sub_mesh: tuple = (None, None)
        # Sub-meshes by their free nodes: rounds and frames of one contact often free the same
        # nodes again, and a sub-mesh's elasticity (its Hessian pattern) and the structure of its
        # constraints (which nodes are pinned, its Pᵀ H P pattern) depend on nothing else.
        self._sub_meshes: "OrderedDict[bytes, _SubMesh]" = OrderedDict()
        self.sub_mesh_builds = self.sub_mesh_reuses = 0

    def free_nodes(self, seed_nodes: np.ndarray) -> np.ndarray:
        """(N,) bool: the nodes within ``rings`` tet rings of `seed_nodes`."""
        free = np.zeros(self.node_count, bool)
        free[np.asarray(seed_nodes, dtype=np.int64).ravel()] = True
        for _ in range(self.rings):
            touched = (self._incidence @ free.astype(np.float64)) > 0.0
            free |= (self._incidence_transposed @ touched.astype(np.float64)) > 0.0
        return free

    def region(self, seed_nodes: np.ndarray) -> Region:
        """The nodes within ``rings`` tet rings of `seed_nodes` are free; the tets touching them
        form the sub-mesh, whose other nodes are held."""
        return self._region_of(self.free_nodes(seed_nodes))

    def _region_of(self, free: np.ndarray) -> Region:
        tets = np.flatnonzero((self._incidence @ free.astype(np.float64)) > 0.0)
        nodes = np.unique(self.tets[tets])
        node_index = np.full(self.node_count, -1, np.int64)
        node_index[nodes] = np.arange(len(nodes))
        tet_index = np.full(len(self.tets), -1, np.int64)
        tet_index[tets] = np.arange(len(tets))
        skin = self.embedding
        on_region = tet_index[skin.vertex_tet] >= 0
        embedding = SkinEmbedding(vertex_tet=tet_index[skin.vertex_tet],
                                  nodes=np.where(on_region[:, None], node_index[skin.nodes], -1),
                                  weights=skin.weights, node_count=len(nodes))
        return Region(tets=tets, nodes=nodes, held=~free[nodes], embedding=embedding)

    def constraints(self, region: Region, x: np.ndarray, skull: np.ndarray, jaw: np.ndarray) -> BoneConstraints:
        """The sub-mesh's constraints in the frame (skull, jaw): the model's pins and sliding
        nodes among its free nodes, and every held node pinned where it is in x. BoneConstraints
        pins a node at T_bone · (its rest place), so a held node gets the skull as its bone and
        T_skull⁻¹ x as its rest place. The constraints of the current sub-mesh are made once and
        only re-pinned: their Pᵀ H P pattern took ~0.07 s a contact frame on ICT to rebuild."""
        skull = np.asarray(skull, dtype=np.float64)
        held_nodes = region.nodes[region.held]
        positions = np.asarray(x, dtype=np.float64).reshape(-1, 3)[held_nodes]
        held_rest = (positions - skull[:3, 3]) @ np.linalg.inv(skull[:3, :3]).T
        entry = self._sub_mesh[1]
        if entry is not None and entry.region is region:
            if entry.constraints is None:
                entry.constraints = self._new_constraints(region)
            constraints = entry.constraints
        else:
            constraints = self._new_constraints(region)
        constraints.repin(np.flatnonzero(region.held), held_rest)
        constraints.use_frame(skull, jaw)
        return constraints

    def _new_constraints(self, region: Region) -> BoneConstraints:
        def local(nodes):
            return np.searchsorted(region.nodes, nodes)
        free = np.zeros(self.node_count, bool)
        free[region.free_nodes] = True
        held_nodes = region.nodes[region.held]
        pins = free[self.pin_nodes]
        slides = free[self.slide_nodes]
        return BoneConstraints(dict(
            rest_positions=self.rest[region.nodes],
            pin_nodes=np.concatenate([local(self.pin_nodes[pins]), local(held_nodes)]),
            pin_bone=np.concatenate([self.pin_bone[pins], np.full(len(held_nodes), SKULL)]),
            slide_nodes=local(self.slide_nodes[slides]), slide_bone=self.slide_bone[slides],
            slide_normals=self.slide_normals[slides]))

    def sub_mesh(self, contact) -> tuple[Region, CorotatedElasticity]:
        """The region around a contact term's planes and its elasticity, built once per term."""
        term, entry = self._sub_mesh
        if term is not contact:
            free = self.free_nodes(contact.nodes)
            key = np.packbits(free).tobytes()
            if key in self._sub_meshes:
                self._sub_meshes.move_to_end(key)
                entry = self._sub_meshes[key]
                self.sub_mesh_reuses += 1
            else:
                region = self._region_of(free)
                entry = _SubMesh(region, CorotatedElasticity(self.rest[region.nodes],
                                                             np.searchsorted(region.nodes, self.tets[region.tets]),
                                                             rest_scale=self.rest_scale[region.tets]))
                self._sub_meshes[key] = entry
                if len(self._sub_meshes) > KEPT_SUB_MESHES:
                    self._sub_meshes.popitem(last=False)
                self.sub_mesh_builds += 1
            self._sub_mesh = (contact, entry)
        return entry.region, entry.elasticity

    def relax(self, objective, x: np.ndarray, skull: np.ndarray, jaw: np.ndarray, *, force_scale: float,
              tolerance: float) -> RegionRelaxation:
        """Minimise `objective` (a FrameObjective with its contact term set) over the region
        around its planes' tets, the rest of x held, to the residual the whole-mesh solve will
        be held to (`tolerance` × `force_scale`), in at most ``max_iterations``."""
        started = time.perf_counter()
        x = np.asarray(x, dtype=np.float64).reshape(-1)
        region, elasticity = self.sub_mesh(objective.contact)
        restricted = objective.restricted(region, elasticity)
        solver = NewtonSolver(restricted, self.constraints(region, x, skull, jaw), tolerance=tolerance,
                              max_iterations=self.max_iterations)
        result = solver.solve(x[region.dofs], force_scale=force_scale, max_forcing=MAX_FORCING)
        relaxed = x.copy()
        if result.converged:
            relaxed[region.dofs] = result.x
        return RegionRelaxation(x=relaxed, result=result, tet_count=len(region.tets),
                                seconds=time.perf_counter() - started)
