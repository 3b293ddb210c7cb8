"""Whole-mesh and convenience tiers of the volumetric-blendshape energy (paper 002 Eq. 6, 9):

    E(x) = Σ_t v_t [ w_t ||F_t(x) − F*_t||² + μ ||F_t − R(F_t)||² + λ ||F_t − P_vol(F_t)||² ]

with v_t the rest volume, F_t = X_t G_t the deformation gradient (G_t (4,3) the linear shape
functions' gradients), R the polar rotation and P_vol the closest unit-determinant matrix
(element_kernels.py). Each term is one `TetProjectiveTerm` with the energies' common API
(`energy`, `gradient`, `hessian(x, project=True)` on (N,3) or flattened node-major x);
`VolumetricBlendshapeEnergy` sums the three.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import scipy.sparse
from numba import njit, prange

from . import element_kernels


def shape_gradients(rest_positions: np.ndarray, tets: np.ndarray):
    """G (M,4,3) with F = Σ_a x_a ⊗ G[a] for the tet's nodes x_a, and the rest volumes (M,)."""
    rest = np.asarray(rest_positions, dtype=np.float64)[np.asarray(tets)]
    edges = (rest[:, 1:] - rest[:, :1]).transpose(0, 2, 1)     # D_m (M,3,3), columns are edges
    volumes = np.linalg.det(edges) / 6.0
    if np.any(volumes <= 0.0):
        raise ValueError(f"tets: {int(np.sum(volumes <= 0.0))} tets are inverted or flat at rest")
    inverse = np.linalg.inv(edges)                              # rows: ∂F/∂(node 1..3)
    gradients = np.concatenate([-inverse.sum(axis=1, keepdims=True), inverse], axis=1)
    return gradients, volumes


@njit(cache=True, parallel=True)
def _deformation_gradients_kernel(x, tets, G, F):
    for t in prange(len(tets)):
        for i in range(3):
            for j in range(3):
                F[t, i, j] = (x[tets[t, 0], i] * G[t, 0, j] + x[tets[t, 1], i] * G[t, 1, j]
                              + x[tets[t, 2], i] * G[t, 2, j] + x[tets[t, 3], i] * G[t, 3, j])


@njit(cache=True)
def _scatter_stress_kernel(tets, G, stress, out):
    # One thread: tets share nodes, and this pass is a few ms against the projections' tens.
    for t in range(len(tets)):
        for a in range(4):
            node = tets[t, a]
            for i in range(3):
                out[node, i] += stress[t, i, 0] * G[t, a, 0] + stress[t, i, 1] * G[t, a, 1] + stress[t, i, 2] * G[t, a, 2]


class TetMesh:
    """A tet mesh's shape gradients, volumes and the Hessian's sparse pattern, computed once."""

    def __init__(self, rest_positions, tets):
        self.rest_positions = np.asarray(rest_positions, dtype=np.float64).reshape(-1, 3)
        self.tets = np.asarray(tets, dtype=np.int64)
        self.node_count = len(self.rest_positions)
        self.shape_gradients, self.rest_volume = shape_gradients(self.rest_positions, self.tets)
        dofs = (3 * self.tets[:, :, None] + np.arange(3)).reshape(-1, 12)   # (M,12), node-major
        self._rows = np.repeat(dofs, 12, axis=1).ravel()
        self._columns = np.tile(dofs, (1, 12)).ravel()
        self._dofs = dofs

    def positions(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.size != 3 * self.node_count or not np.all(np.isfinite(x)):
            raise ValueError(f"x: expected {self.node_count} finite nodes, found shape {x.shape}")
        return x.reshape(-1, 3)

    def deformation_gradients(self, x) -> np.ndarray:
        F = np.empty((len(self.tets), 3, 3))
        _deformation_gradients_kernel(np.ascontiguousarray(self.positions(x)), self.tets, self.shape_gradients, F)
        return F

    def gradient_to_nodes(self, stress: np.ndarray) -> np.ndarray:
        """(3N,) Σ_t ∂E/∂x from dE/dF_t (M,3,3)."""
        return self.stress_to_nodes(stress).reshape(-1)

    def stress_to_nodes(self, stress: np.ndarray) -> np.ndarray:
        """(N,3) Σ_t P_t G_tᵀ scattered to the tets' nodes, for per-tet matrices P_t (M,3,3)."""
        per_node = np.zeros((self.node_count, 3))
        _scatter_stress_kernel(self.tets, self.shape_gradients, np.ascontiguousarray(stress, dtype=np.float64), per_node)
        return per_node

    def hessian_to_nodes(self, hessians: np.ndarray) -> scipy.sparse.csr_matrix:
        """(3N,3N) from d²E/dF² (M,9,9): ∂F_ij/∂x_{a,k} = δ_ik G_aj."""
        G = self.shape_gradients
        # dF/dx (M, 9, 12): column (a,k), row (i,j)
        dFdx = np.einsum("ik,maj->mijak", np.eye(3), G).reshape(-1, 9, 12)
        blocks = np.einsum("mpa,mpq,mqb->mab", dFdx, hessians, dFdx)
        size = 3 * self.node_count
        return scipy.sparse.csr_matrix((blocks.ravel(), (self._rows, self._columns)), shape=(size, size))


class TetProjectiveTerm:
    """One term Σ_t c_t ψ(F_t) of the energy, kind 'target', 'arap' or 'volume', with per-tet
    coefficients c_t (already times the rest volume) and, for 'target', the targets F* (M,3,3)."""

    def __init__(self, mesh: TetMesh, kind: str, coefficient, target: Optional[np.ndarray] = None):
        if kind not in ("target", "arap", "volume"):
            raise ValueError(f"kind: {kind!r} is not one of target, arap, volume")
        self.mesh, self.kind = mesh, kind
        self.coefficient = np.broadcast_to(np.asarray(coefficient, dtype=np.float64), (len(mesh.tets),)).copy()
        if kind == "target":
            target = np.asarray(target, dtype=np.float64)
            if target.shape != (len(mesh.tets), 3, 3) or not np.all(np.isfinite(target)):
                raise ValueError(f"target: expected ({len(mesh.tets)},3,3) finite matrices, found {target.shape}")
        self.target = target

    def _element(self, x, compute_hessian: bool, project: bool = False):
        F = self.mesh.deformation_gradients(x)
        if self.kind == "target":
            return element_kernels.target_element(F, self.target, self.coefficient, compute_hessian)
        return element_kernels.isotropic_element(self.kind, F, self.coefficient, compute_hessian, project)

    def energy(self, x) -> float:
        return float(self._element(x, False)[0].sum())

    def gradient(self, x) -> np.ndarray:
        return self.mesh.gradient_to_nodes(self._element(x, False)[1])

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        return self.mesh.hessian_to_nodes(self._element(x, True, project)[2])

    def projection(self, x) -> np.ndarray:
        """P(F_t) (M,3,3): the local step of Projective Dynamics."""
        if self.kind == "target":
            return self.target
        return element_kernels.projections(self.kind, self.mesh.deformation_gradients(x))


class VolumetricBlendshapeEnergy:
    """E_target + μ E_ARAP + λ E_volume on one mesh, every tet weighted by its rest volume.

    target_weight, mu, lam: scalars or (M,) per tet (dimensionless relative weights; the
    equilibrium does not depend on a common scale). targets: F* (M,3,3).
    """

    def __init__(self, mesh: TetMesh, targets: np.ndarray, target_weight=1.0, mu=0.1, lam=0.1):
        volume = mesh.rest_volume
        self.mesh = mesh
        self.terms = [TetProjectiveTerm(mesh, "target", volume * np.asarray(target_weight, dtype=np.float64), targets),
                      TetProjectiveTerm(mesh, "arap", volume * np.asarray(mu, dtype=np.float64)),
                      TetProjectiveTerm(mesh, "volume", volume * np.asarray(lam, dtype=np.float64))]

    def set_targets(self, targets: np.ndarray) -> None:
        self.terms[0] = TetProjectiveTerm(self.mesh, "target", self.terms[0].coefficient, targets)

    def energy(self, x) -> float:
        return sum(term.energy(x) for term in self.terms)

    def gradient(self, x) -> np.ndarray:
        return sum(term.gradient(x) for term in self.terms)

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        return sum(term.hessian(x, project) for term in self.terms).tocsr()
