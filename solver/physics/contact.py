"""Contact response: keeping skin vertices on the allowed side of the tangent planes that
collision detection hands over (paper 000 §4 Eq. 3, "Quasi-static solution"; docs/collisions.md).

Detection (solver/collisions) gives, per offending skin vertex v, a plane point p, a unit
normal n and a depth; the constraint is

    g_c(x) = n · (x_v − p) ≥ 0,     x_v = Σ_k w_vk x_{tet_v,k},

linear in the node positions and touching only the four nodes of the tet that carries v.
Paper 000 alternates a solve with the planes fixed and a new detection on the result; its
first solver was a "homebrew augmented Lagrangian", its final one IPOPT. Both are here:

Newton path (default) — augmented Lagrangian on the tangent planes. Each round minimises

    E(x) + Σ_c (κ_c/2) · max(0, λ_c/κ_c − g_c(x))²

with the frame's Newton solver, then updates λ_c ← max(0, λ_c − κ_c g_c). Why AL and not
the alternatives, for this solver:
  * The term lives in the 12×12 block of the carrying tet, which the elasticity Hessian
    already holds, so the reduced Hessian keeps its pattern and CHOLMOD's one symbolic
    analysis (and the kept factor used as a CG preconditioner) serve every round and frame:
    newton.py runs unchanged. An active-set method that adds the constraint rows to a KKT
    system (or eliminates them from q) changes the pattern whenever the active set does and
    needs a new analysis and factorisation each time.
  * A barrier (IPC-style log barrier) needs a strictly feasible start; detection hands over
    vertices that are already inside, so each frame would first need a separate
    feasibility-restoring pass, and the barrier's curvature blows up near contact (stiff,
    many line-search halvings) — the price of guaranteeing no penetration ever, which a
    per-frame tolerance of hundredths of a millimetre does not need.
  * A plain penalty is either soft (visible penetration) or, to reach 0.02 mm, so stiff it
    ruins the conditioning. AL reaches the tolerance with a moderate κ: the multiplier
    carries the contact force, and the penalty only has to correct what is left, so the
    violation shrinks by about k/(k + κ) per round (k the tissue's local stiffness).
  κ_c = CONTACT_STIFFNESS_FACTOR × the local stiffness of the vertex (the rest elasticity
  Hessian diagonal of its tet's nodes, weighted by the embedding): well above the tissue, so
  a round or two suffice, and a few hundred times the diagonal at most, harmless to a
  direct Cholesky.

``contact_element_energies`` / ``_gradients`` / ``_hessians`` per contact;
``AugmentedLagrangianContact`` on the whole mesh with ``energy(x)``, ``gradient(x)``,
``hessian(x, project=True)`` (already PSD; ``project`` changes nothing); and the convenience
call ``contact_energy``. Units: metres, newtons; κ in N/m, λ in N.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse

from ..collisions.contacts import ContactPlanes
from .linear_solver import LowRankTerm
from .skin_embedding import SkinEmbedding


# ----------------------------------------------------------------------------- tier 1: per contact

def contact_gaps(node_positions, weights, point, normal) -> np.ndarray:
    """g_c = n · (Σ_k w_k x_k − p) (C,) for node positions (C,4,3) of each contact's tet."""
    vertex = np.einsum("ck,ckd->cd", weights, node_positions)
    return np.einsum("cd,cd->c", normal, vertex - point)


def _push(node_positions, weights, point, normal, multiplier, stiffness):
    """max(0, λ − κ g): the contact force magnitude each plane exerts (N)."""
    return np.maximum(0.0, multiplier - stiffness * contact_gaps(node_positions, weights, point, normal))


def contact_element_energies(node_positions, weights, point, normal, multiplier, stiffness) -> np.ndarray:
    """(κ/2) max(0, λ/κ − g)² = max(0, λ − κ g)² / (2κ) per contact (C,), joules."""
    push = _push(node_positions, weights, point, normal, multiplier, stiffness)
    return push ** 2 / (2.0 * stiffness)


def contact_element_gradients(node_positions, weights, point, normal, multiplier, stiffness) -> np.ndarray:
    """∂E_c/∂x of the contact's four nodes (C,4,3): −max(0, λ − κ g) w_k n."""
    push = _push(node_positions, weights, point, normal, multiplier, stiffness)
    return -(push[:, None, None] * weights[:, :, None] * normal[:, None, :])


def contact_directions(weights, normal) -> np.ndarray:
    """∂g_c/∂x of each contact's four nodes, w ⊗ n (C,12), local order 3k + d."""
    return (weights[:, :, None] * normal[:, None, :]).reshape(-1, 12)


def contact_element_hessians(node_positions, weights, point, normal, multiplier, stiffness) -> np.ndarray:
    """∂²E_c/∂x² (C,12,12), local order 3k + d: κ (w ⊗ n)(w ⊗ n)ᵀ where the term is active
    (λ − κ g > 0), else 0. Rank one and positive semi-definite, so nothing to project; at the
    kink itself (λ = κ g) the inactive side is taken."""
    push = _push(node_positions, weights, point, normal, multiplier, stiffness)
    direction = contact_directions(weights, normal)
    scale = np.where(push > 0.0, stiffness, 0.0)
    return scale[:, None, None] * direction[:, :, None] * direction[:, None, :]


# ----------------------------------------------------------------------------- tier 2: whole mesh


class AugmentedLagrangianContact:
    """Σ_c (κ_c/2) max(0, λ_c/κ_c − g_c(x))² over fixed tangent planes, in the energies' common
    API on node positions x ((N,3) or (3N,)), g_c(x) = n_c · (x_v − a_c) with x_v the embedded
    skin vertex and a_c the plane point: ``anchors`` (C,3), by default ``planes.point`` (the
    contact response passes planes it moved, see ContactResponse.detect).

    ``hessian_layout`` (optional): the CorotatedElasticity of the same tets; the Hessian is
    then returned on its pattern (``hessian_indptr``/``hessian_indices``) and can be added to
    the elasticity's in place with ``add_hessian_into``, which leaves the reduced pattern and
    so CHOLMOD's symbolic analysis unchanged."""

    def __init__(self, embedding: SkinEmbedding, planes: ContactPlanes, multipliers, stiffness,
                 hessian_layout=None, anchors=None):
        self.embedding = embedding
        self.planes = planes
        count = planes.count
        self.multipliers = np.broadcast_to(np.asarray(multipliers, dtype=np.float64), (count,)).copy()
        self.stiffness = np.broadcast_to(np.asarray(stiffness, dtype=np.float64), (count,)).copy()
        if count and not (self.stiffness > 0.0).all():
            raise ValueError("contact stiffness must be positive")
        if count and (self.multipliers < 0.0).any():
            raise ValueError("contact multipliers must be non-negative (planes only push)")
        self.anchors = np.asarray(planes.point if anchors is None else anchors, dtype=np.float64).reshape(count, 3)
        vertices = np.asarray(planes.vertex, dtype=np.int64)
        self.nodes = embedding.nodes[vertices]              # (C,4)
        self.weights = embedding.weights[vertices]          # (C,4)
        self.layout = hessian_layout
        self._entry_positions = (None if hessian_layout is None
                                 else hessian_layout.element_entry_positions[embedding.vertex_tet[vertices]])

    @property
    def count(self) -> int:
        return self.planes.count

    def on_embedding(self, embedding: SkinEmbedding, hessian_layout=None) -> "AugmentedLagrangianContact":
        """The same planes, multipliers, stiffnesses and anchors on another embedding of the
        same skin: a sub-mesh's (contact_region.Region.embedding), which must carry every
        plane's vertex."""
        if self.count and (embedding.vertex_tet[self.planes.vertex] < 0).any():
            raise ValueError("the embedding does not carry every contact plane's vertex")
        return AugmentedLagrangianContact(embedding, self.planes, self.multipliers, self.stiffness,
                                          hessian_layout=hessian_layout, anchors=self.anchors)

    def _arguments(self, x):
        nodes = np.asarray(x, dtype=np.float64).reshape(-1, 3)
        if len(nodes) != self.embedding.node_count:
            raise ValueError(f"x: expected {self.embedding.node_count} nodes, found {len(nodes)}")
        return (nodes[self.nodes], self.weights, self.anchors, self.planes.normal, self.multipliers,
                self.stiffness)

    def gaps(self, x) -> np.ndarray:
        """g_c(x) (C,), metres: > 0 on the allowed side."""
        return contact_gaps(*self._arguments(x)[:4])

    def updated_multipliers(self, x) -> np.ndarray:
        """The AL update λ ← max(0, λ − κ g(x)) (C,): the contact forces at x, newtons."""
        return np.maximum(0.0, self.multipliers - self.stiffness * self.gaps(x))

    def energy(self, x) -> float:
        return float(contact_element_energies(*self._arguments(x)).sum()) if self.count else 0.0

    def gradient(self, x) -> np.ndarray:
        gradient = np.zeros((self.embedding.node_count, 3))
        if self.count:
            np.add.at(gradient, self.nodes, contact_element_gradients(*self._arguments(x)))
        return gradient.reshape(-1)

    def add_hessian_into(self, data: np.ndarray, x) -> None:
        """data (the CSR data of a Hessian on ``hessian_layout``'s pattern) += this term's Hessian."""
        if self.layout is None:
            raise ValueError("add_hessian_into needs the contact term built with a hessian_layout")
        if self.count:
            np.add.at(data, self._entry_positions.reshape(-1),
                      contact_element_hessians(*self._arguments(x)).reshape(-1))

    def hessian_low_rank(self, x) -> LowRankTerm:
        """This term's Hessian as Σ c cᵀ over the active planes (λ − κ g > 0): c = √κ (w ⊗ n) on
        the plane's four nodes (3N × k CSC), keyed by the column's nodes and values so that a
        plane active in two solves is recognised (linear_solver.LowRankTerm)."""
        size = 3 * self.embedding.node_count
        if not self.count:
            return LowRankTerm.empty(size)
        active = np.flatnonzero(_push(*self._arguments(x)) > 0.0)
        values = np.sqrt(self.stiffness[active])[:, None] * contact_directions(self.weights[active],
                                                                              self.planes.normal[active])
        rows = (3 * self.nodes[active][:, :, None] + np.arange(3)).reshape(-1, 12)
        columns = scipy.sparse.csc_matrix((values.ravel(), rows.ravel(), np.arange(0, 12 * len(active) + 1, 12)),
                                          shape=(size, len(active)))
        keys = tuple(row.tobytes() + value.tobytes() for row, value in zip(rows, values))
        return LowRankTerm(columns, keys)

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        size = 3 * self.embedding.node_count
        if self.layout is not None:
            data = np.zeros(len(self.layout.hessian_indices))
            self.add_hessian_into(data, x)
            return scipy.sparse.csr_matrix((data, self.layout.hessian_indices, self.layout.hessian_indptr),
                                           shape=(size, size))
        blocks = contact_element_hessians(*self._arguments(x)) if self.count else np.zeros((0, 12, 12))
        dofs = (3 * self.nodes[:, :, None] + np.arange(3)).reshape(-1, 12)
        rows = np.broadcast_to(dofs[:, :, None], blocks.shape).reshape(-1)
        cols = np.broadcast_to(dofs[:, None, :], blocks.shape).reshape(-1)
        return scipy.sparse.csr_matrix((blocks.reshape(-1), (rows, cols)), shape=(size, size))


# ----------------------------------------------------------------------------- tier 3

def contact_energy(x, embedding: SkinEmbedding, planes: ContactPlanes, multipliers, stiffness):
    """(E, gradient (3N,), Hessian 3N×3N CSR) of the augmented-Lagrangian contact term."""
    term = AugmentedLagrangianContact(embedding, planes, multipliers, stiffness)
    return term.energy(x), term.gradient(x), term.hessian(x)
