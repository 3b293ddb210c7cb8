"""Teeth, lip and prop contact for volumetric blendshapes: compliant constraints through the
Schur complement of the Projective Dynamics global step (paper 002 §3.5, Eq. 10).

Detection is the Phace path's (physics/contact_response.py ``ContactResponse.detect`` on the
embedded skin, in the world the colliders live in): the same planes, the lips meeting half-way
with reaction planes on the other lip, no push where the vertex's tet cannot carry it, the bone's
compression limit, and predictive planes for vertices within a millimetre. As on the Phace path
the planes are found in *rounds*: detected at the start of a frame, held while PD converges, then
detected again at its equilibrium, until a detection finds nothing deeper than the contact
tolerance (re-detected every iteration instead, two lips pressed together chased each other's
moving surface and PD oscillated by a millimetre for 200 iterations on ICT's mouthClose). A
plane that was pushing at the end of a round stays for the next unless its vertex is found
again (then the new plane replaces it): with only the new detection's planes, ICT's pressed lips
alternated between two sets of vertices, 2.1 and 0.5 mm deep, for all ten rounds. Each
PD global step first solves without contact, y = A⁻¹ b; then every skin vertex v with a plane
(normal n_v, anchor a_v; the deepest of its planes) gets a force λ_v ≥ 0 along n_v, so that

    x = y + Σ_v λ_v (A⁻¹ B_vᵀ) n_vᵀ,   g_v(x) + λ_v / w_v = 0 for pushing vertices, λ_v = 0 and
    g_v(x) ≥ 0 for the others,

with g_v = n_v · (B_v x − a_v) the gap and B_v the vertex's barycentric row. Because A is one
scalar matrix for x, y and z, A⁻¹ (n ⊗ B_v)ᵀ = n ⊗ A⁻¹ B_vᵀ: one scalar solve per vertex ever
(A never changes), kept; the Schur complement is S_uv = (n_u · n_v) B_u A⁻¹ B_vᵀ, small and dense,
plus the compliance 1 / w_v on its diagonal (w_v = CONTACT_STIFFNESS_FACTOR × the tissue's own
stiffness at the vertex). The pushing set is the solution of a linear complementarity problem
(`push_forces`), found by block principal pivoting: start from the vertices inside, drop those
whose λ comes out negative (they would pull), add those the others' pushes carried inside, until
it settles. Whole-block exchanges can cycle: on ICT's pressed lips with 2.5 mm predictive planes
the set came back every fourth global step, the forces were clipped unsettled, PD never converged
and the lips moved 186 mm. So when a pass does not lower the count of wrong vertices for
PIVOT_PATIENCE passes, one vertex at a time changes sides (the last wrong one: Murty's rule),
which ends for any positive definite S (Júdice & Pires 1994; Kim & Park 2011 use it for NNLS).

Why compliant rows, and not equality rows held for the frame (bench/nose_push.py holds its
vertices on a plane that way): a held row glues a vertex that would separate, and the rows of
two lips, or of vertices in one tet, can be nearly dependent, so S alone is close to singular
and its multipliers move the tissue far from the contact (on the demo head: a chin vertex by
millimetres for a 0.4 mm push). The compliance bounds them, and a row only ever pushes.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from ..collisions.contacts import BonePose
from ..physics.contact_response import DEFAULT_CONTACT_TOLERANCE, ContactResponse
from ..physics.skin_embedding import SkinEmbedding, SkinOverBone

# The constraint's stiffness over the tissue's own at the vertex: a vertex pushed with force f
# stays f / w inside its plane, 1e-4 of what the tissue alone would give way.
CONTACT_STIFFNESS_FACTOR = 1e4
MAX_CONTACT_ROUNDS = 10
# m: predictive planes for skin vertices this close outside a collider. Not the Phace path's
# 2.5 mm (DEFAULT_CONTACT_MARGIN): on ICT's take (bench/vbs_contact.py, docs/
# volumetric_blendshapes.md "Contact") it settled as many frames (12 of 16) in more rounds, 124 s
# against 112 s for the take, the pressed lips at 0.25 in 10 rounds unconverged against 2 (and
# before push_forces' single exchanges it set off the cycling that blew those lips 186 mm out).
CONTACT_MARGIN = 1e-3
# m: a frame whose rounds end with new penetrations no deeper than this counts as converged (the
# issue's visible bound; the display projection then brings the shown skin within the contact
# tolerance). Lips sliding over the teeth in mouthFunnel kept finding new vertices 0.07–0.16 mm
# deep round after round on ICT, as the Phace path's lip rounds hover.
SETTLED_DEPTH = 4.0 * DEFAULT_CONTACT_TOLERANCE
MAX_ACTIVE_SET_PASSES = 500      # passes of push_forces; single exchanges may need one per vertex
PIVOT_PATIENCE = 3               # block passes allowed without fewer wrong vertices (module docstring)
# m: a vertex the pushes leave less than this inside its plane is not added to the set.
ACTIVE_SET_TOLERANCE = 1e-6


def push_forces(coupling: np.ndarray, compliance: np.ndarray, gaps: np.ndarray) -> tuple[np.ndarray, bool]:
    """(λ (C,), settled): the forces λ ≥ 0 with gaps + (coupling + diag(compliance)) λ ≥ 0 and
    λ = 0 wherever that is > 0 — the pushing set by block principal pivoting with Murty's
    single-exchange backup (module docstring). `settled` is False only if MAX_ACTIVE_SET_PASSES
    ran out (λ is then clipped at 0)."""
    active = gaps < 0.0
    force = np.zeros(len(gaps))
    fewest, patience = len(gaps) + 1, PIVOT_PATIENCE
    for _ in range(MAX_ACTIVE_SET_PASSES):
        force[:] = 0.0
        if active.any():
            block = coupling[np.ix_(active, active)] + np.diag(compliance[active])
            force[active] = np.linalg.solve(block, -gaps[active])
        after = gaps + coupling @ force
        wrong = (active & (force < 0.0)) | (~active & (after < -ACTIVE_SET_TOLERANCE))
        count = int(wrong.sum())
        if not count:
            return force, True
        if count < fewest:
            fewest, patience = count, PIVOT_PATIENCE
        else:
            patience -= 1
        if patience > 0:
            active ^= wrong
        else:
            last = np.flatnonzero(wrong)[-1]
            active[last] = ~active[last]
    return np.maximum(force, 0.0), False


class CompliantContact:
    """The contact of one ProjectiveDynamics (`solver`: its free nodes and factor) with a
    collision `scene` (collisions/scene.py). ``detect(x, pose, head)`` finds the planes of a
    round (the bones at `pose` and the colliders in the world, `head` (4×4) placing the head's
    rest frame there); ``correct`` then holds the skin behind them in every global step."""

    def __init__(self, model: dict, scene, solver, stiffness_factor: float = CONTACT_STIFFNESS_FACTOR):
        self.solver = solver
        self.embedding = SkinEmbedding.from_model(model)
        stiffness = np.where(solver.fixed, np.inf, solver.matrix.diagonal())
        with np.errstate(divide="ignore"):          # a vertex on fixed nodes only: infinitely stiff
            self.response = ContactResponse(scene, self.embedding, stiffness, ~solver.fixed,
                                            margin=CONTACT_MARGIN, skin_over_bone=SkinOverBone.from_model(model))
        # A vertex whose tet has only fixed nodes is pushed by nothing (detection leaves it out).
        vertex_stiffness = self.response.vertex_stiffness
        self.stiffness = np.where(np.isfinite(vertex_stiffness), stiffness_factor * vertex_stiffness, 0.0)
        vertices = len(self.embedding.nodes)
        rows = scipy.sparse.csr_matrix((self.embedding.weights.ravel(), (np.repeat(np.arange(vertices), 4),
                                                                         self.embedding.nodes.ravel())),
                                       shape=(vertices, self.embedding.node_count))
        self.free_rows = rows[:, solver.free].tocsr()
        self._column = np.full(vertices, -1, dtype=np.int64)      # vertex → its column of A⁻¹ B_vᵀ
        self._responses = np.zeros((len(solver.free), 0))
        self.head = np.eye(4)
        self._planes = (np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 3)))   # vertices, normals, anchors
        self._force = np.zeros(0)        # each plane's force at the last global step
        self.last_touching = 0           # vertices pushing after the last step

    def _unit_responses(self, vertices: np.ndarray) -> np.ndarray:
        """(F, k) A⁻¹ B_vᵀ on the free nodes for each vertex, solved the first time it is asked for."""
        new = vertices[self._column[vertices] < 0]
        if len(new):
            solved = self.solver.cholesky.solve(self.free_rows[new].T.toarray())
            self._column[new] = self._responses.shape[1] + np.arange(len(new))
            self._responses = np.hstack([self._responses, solved.reshape(len(self.solver.free), -1)])
        return self._responses[:, self._column[vertices]]

    def _world(self, nodes: np.ndarray) -> np.ndarray:
        return nodes @ self.head[:3, :3].T + self.head[:3, 3]

    def detect(self, x: np.ndarray, pose: BonePose, head: np.ndarray, fresh: bool = False) -> float:
        """Find the planes of a round at the nodes x (N,3) of the head's rest frame: each skin
        vertex's deepest, plus the last round's pushing planes of vertices not found again
        (none when `fresh`, a frame's first detection); returns the deepest violation found (m)."""
        self.head = np.asarray(head, dtype=np.float64)
        world = self._world(np.asarray(x, dtype=np.float64))
        planes, anchors = self.response.detect(world, pose)
        vertices, normals, points, deepest = np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros((0, 3)), 0.0
        if planes.count:
            skin = self.embedding.skin_positions(world)
            gap = np.einsum("cd,cd->c", planes.normal, skin[planes.vertex] - anchors)
            order = np.argsort(gap, kind="stable")
            vertices, first = np.unique(planes.vertex[order], return_index=True)
            chosen = order[first]
            normals, points, deepest = planes.normal[chosen], anchors[chosen], float(np.maximum(-gap[chosen], 0.0).max())
        if not fresh and len(self._force):
            old_vertices, old_normals, old_points = self._planes
            kept = (self._force > 0.0) & ~np.isin(old_vertices, vertices)
            vertices = np.concatenate([vertices, old_vertices[kept]])
            normals, points = np.vstack([normals, old_normals[kept]]), np.vstack([points, old_points[kept]])
        self._planes, self._force = (vertices, normals, points), np.zeros(len(vertices))
        return deepest

    def solve_rounds(self, x0, pose: BonePose, head: np.ndarray, iterations: int, tolerance_m: float,
                     contact_tolerance: float = DEFAULT_CONTACT_TOLERANCE):
        """PD from x0 with the planes held, detected again at each equilibrium, until no vertex is
        found deeper than `contact_tolerance` or MAX_CONTACT_ROUNDS (module docstring); (x, the
        PD report with every round's iterations, converged only if the last round's PD did and
        the last detection found nothing deeper than SETTLED_DEPTH, rounds, that depth m)."""
        x = np.asarray(x0, dtype=np.float64)
        self.detect(x, pose, head, fresh=True)
        total = 0
        for rounds in range(1, MAX_CONTACT_ROUNDS + 1):
            x, report = self.solver.solve(x, iterations, tolerance_m, contact=self)
            total += report.iterations
            depth = self.detect(x, pose, head)
            if depth <= contact_tolerance or not report.converged:
                break
        report.iterations = total
        report.converged = report.converged and depth <= SETTLED_DEPTH
        return x, report, rounds, depth

    def correct(self, solution: np.ndarray, x: np.ndarray) -> np.ndarray:
        """The free nodes' positions (F,3) of a global step whose unconstrained `solution` (F,3)
        is pushed out of the colliders (module docstring); `x` (N,3) the current iterate, whose
        fixed nodes are where this step holds them."""
        vertices, normals, anchors = self._planes
        self.last_touching = 0
        if not len(vertices):
            return solution
        nodes = np.array(x, dtype=np.float64)
        nodes[self.solver.free] = solution
        embedding = self.embedding
        skin = np.einsum("ck,ckd->cd", embedding.weights[vertices], nodes[embedding.nodes[vertices]])
        gaps = np.einsum("cd,cd->c", normals, self._world(skin) - anchors)
        push = normals @ self.head[:3, :3]               # the normals in the rest frame
        responses = self._unit_responses(vertices)       # (F, C)
        green = np.asarray(self.free_rows[vertices] @ responses)        # B_u A⁻¹ B_vᵀ (C, C)
        coupling = (push @ push.T) * green               # gap change of u per unit force at v
        compliance = 1.0 / np.maximum(self.stiffness[vertices], 1e-300)
        force, _ = push_forces(coupling, compliance, gaps)
        self._force = force
        self.last_touching = int((force > 0.0).sum())
        return solution + (responses * force) @ push
