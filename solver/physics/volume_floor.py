"""The volume floor: tets squeezed below a share J₀ of their rest volume pay a penalty and a barrier.

    E = Σ_t κ_t φ(J_t),   J = det F,   s = J₀ − J,
    φ(J) = ½ s² + b(J),   b(J) = −(J − J₀)² ln(J / J₀)      for J_ε ≤ J < J₀ (0 above J₀),
    φ(J) = φ(J_ε) + φ′(J_ε)(J − J_ε) + ½ φ″(J_ε)(J − J_ε)²     below J_ε = BARRIER_EXTENSION · J₀.

Part of the tissue's energy in the forward solve and the fit (SimulationSettings.volume_floor;
docs/physics.md, "Energy"). The co-rotated energy resists a change of volume only as
λ (J − 1)², finite through J = 0, so a tet the tissue around it pushes hard enough passes through
zero volume and turns inside out: blends of fitted ICT shapes did, at the mouth. Tissue is nearly
incompressible, so no expression asks for a tet at a fifth of its volume; the floor is zero on
every tet at or above J₀ and changes nothing there.

The penalty ½ s² alone pushes back with at most κ J₀ at J = 0: soft tets between muscles
contracting many times stiffer (active_stiffening.py) were crushed through it. b is the clamped log
barrier of Incremental Potential Contact (Li et al. 2020): zero with its first two derivatives at J₀,
growing without bound as J → 0. Below J_ε its quadratic continuation keeps E finite, so a start
that is already inverted (a predicted or bone-moved start) still has an energy and a gradient
that pushes the tet back; there the force is already ~50× the penalty's at J = 0 and grows
with the inversion.

Three tiers as for the elasticity: per-element value, gradient ∂E/∂F and 9×9 Hessian on stacked
deformation gradients; whole-mesh energy, gradient and Hessian on the elasticity's pattern. J
of every tet comes from one numba pass; everything else is assembled only for the few tets below
the floor.

    ∂J/∂F = cof F,   ∂²J/∂F_ij ∂F_kl = ε_ikm ε_jln F_mn,
    ∂E/∂F = κ φ′(J) cof F,   ∂²E/∂F² = κ [φ″(J) cof F ⊗ cof F + φ′(J) ∂²J/∂F²]

The second term is indefinite (φ′ < 0 below J₀); `hessian(project=True)` clamps each tet's 12×12
block to its positive part, as the elasticity does.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse
from numba import njit

from .corotated import CorotatedElasticity, _add_volume_hessian
from .matrix3 import cofactor3, det3


@njit(cache=True)
def _stacked_cofactors(F, out):
    for t in range(F.shape[0]):
        out[t] = cofactor3(F[t])


@njit(cache=True)
def _floor_hessians(F, slope, curvature, stiffness, out):
    """out[t] += κ [φ″ cof ⊗ cof + φ′ ∂²J/∂F²] for the tets below the floor (the elasticity's own
    volume-term kernel, with the floor's coefficients)."""
    for t in range(F.shape[0]):
        if slope[t] != 0.0:
            _add_volume_hessian(F[t], cofactor3(F[t]), stiffness[t] * curvature[t], stiffness[t] * slope[t], out[t])


# Where the barrier hands over to its quadratic continuation, as a share of the floor J₀.
BARRIER_EXTENSION = 0.05


def _barrier_on_range(J, floor):
    """(φ, φ′, φ″) of ½ s² + b on J_ε ≤ J ≤ J₀ (J an array)."""
    shortfall = floor - J
    logarithm = np.log(J / floor)
    value = 0.5 * shortfall ** 2 - shortfall ** 2 * logarithm
    slope = -shortfall + 2.0 * shortfall * logarithm - shortfall ** 2 / J
    curvature = 1.0 - 2.0 * logarithm + 4.0 * shortfall / J + shortfall ** 2 / J ** 2
    return value, slope, curvature


def floor_profile(J, floor: float):
    """(φ(J), φ′(J), φ″(J)) per tet for volume ratios J (M,): zero at and above the floor."""
    J = np.asarray(J, dtype=np.float64)
    extension = BARRIER_EXTENSION * floor
    below, deep = J < floor, J < extension
    value, slope, curvature = np.zeros_like(J), np.zeros_like(J), np.zeros_like(J)
    on_range = below & ~deep
    value[on_range], slope[on_range], curvature[on_range] = _barrier_on_range(J[on_range], floor)
    if deep.any():
        at_value, at_slope, at_curvature = _barrier_on_range(np.array([extension]), floor)
        offset = J[deep] - extension
        value[deep] = at_value[0] + at_slope[0] * offset + 0.5 * at_curvature[0] * offset ** 2
        slope[deep] = at_slope[0] + at_curvature[0] * offset
        curvature[deep] = at_curvature[0]
    return value, slope, curvature


def cofactors(F) -> np.ndarray:
    """(M,3,3) cof F = ∂ det F / ∂F for stacked F (M,3,3); defined for singular F too."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    out = np.empty_like(F)
    _stacked_cofactors(F, out)
    return out


def floor_element_energies(F, floor: float, stiffness) -> np.ndarray:
    """(M,) κ φ(det F) for stacked F (M,3,3); stiffness κ a scalar or (M,)."""
    return _per_element(stiffness, len(F)) * floor_profile(np.linalg.det(F), floor)[0]


def floor_element_gradients(F, floor: float, stiffness) -> np.ndarray:
    """(M,3,3) ∂E/∂F = κ φ′(J) cof F."""
    slope = floor_profile(np.linalg.det(F), floor)[1]
    return (_per_element(stiffness, len(F)) * slope)[:, None, None] * cofactors(F)


def floor_element_hessians(F, floor: float, stiffness) -> np.ndarray:
    """(M,9,9) ∂²E/∂F² (row-major flattening of F); zero for tets at or above the floor."""
    F = np.ascontiguousarray(F, dtype=np.float64)
    _, slope, curvature = floor_profile(np.linalg.det(F), floor)
    hessians = np.zeros((len(F), 9, 9))
    _floor_hessians(F, slope, curvature, np.ascontiguousarray(_per_element(stiffness, len(F))), hessians)
    return hessians


@njit(cache=True)
def _volume_ratios(x, tets, shape_gradients, ratios):
    """det F of every tet into `ratios`, F[c, b] = Σ_n x[tet[n], c] G[n, b], without forming the
    (M,3,3) stack: the forward solve asks for it at every line-search trial, where the floor
    would otherwise cost a third of the elastic energy's time."""
    F = np.empty((3, 3))
    for t in range(tets.shape[0]):
        for c in range(3):
            for b in range(3):
                total = 0.0
                for n in range(4):
                    total += x[tets[t, n], c] * shape_gradients[t, n, b]
                F[c, b] = total
        ratios[t] = det3(F)


def _per_element(stiffness, count: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(stiffness, dtype=np.float64), (count,))


class VolumeFloor:
    """The floor's penalty and barrier on one tet mesh (the elasticity's shape gradients and Hessian pattern),
    with one stiffness κ for every tet or one per tet ((M,), e.g. in J for forward physics)."""

    def __init__(self, elasticity: CorotatedElasticity, floor: float = 0.2, stiffness=1.0):
        if not (np.isfinite(floor) and floor > 0.0):
            raise ValueError(f"volume floor: expected a positive share of the rest volume, found {floor}")
        try:
            stiffness = _per_element(stiffness, elasticity.element_count).copy()
        except ValueError:
            raise ValueError(f"volume floor stiffness: expected one number or one per tet "
                             f"({elasticity.element_count}), found shape {np.shape(stiffness)}") from None
        if not (np.isfinite(stiffness).all() and (stiffness >= 0.0).all()):
            raise ValueError("volume floor stiffness: expected non-negative finite numbers")
        self.elasticity, self.floor, self.stiffness = elasticity, float(floor), stiffness

    # ------------------------------------------------------------------ per tet

    def volume_ratios(self, x) -> np.ndarray:
        """(M,) J = det F: each tet's volume over its rest volume (negative when inverted)."""
        elasticity = self.elasticity
        positions = np.ascontiguousarray(elasticity._positions(x))      # the elasticity's own checks of x
        ratios = np.empty(elasticity.element_count)
        _volume_ratios(positions, elasticity.tets, elasticity.shape_gradients, ratios)
        return ratios

    def _below(self, x):
        """(tets below the floor, their F (k,3,3))."""
        below = np.flatnonzero(self.volume_ratios(x) < self.floor)
        element_positions = np.asarray(x, dtype=np.float64).reshape(-1, 3)[self.elasticity.tets[below]]
        return below, element_positions.transpose(0, 2, 1) @ self.elasticity.shape_gradients[below]

    def _node_columns(self, tets):
        """(k,12) global coordinate index of each tet's local entry 3n + c."""
        return (3 * self.elasticity.tets[tets][:, :, None] + np.arange(3)).reshape(len(tets), 12)

    def _to_nodes(self, tets, per_F) -> np.ndarray:
        """(k,4,3) ∂/∂x of the tets' nodes from ∂/∂F (k,3,3): Σ_b (∂/∂F)[c,b] G[n,b]."""
        return np.einsum("acb,anb->anc", per_F, self.elasticity.shape_gradients[tets])

    # ------------------------------------------------------------------ whole mesh

    def energy(self, x) -> float:
        below, F = self._below(x)
        return float(floor_element_energies(F, self.floor, self.stiffness[below]).sum())

    def gradient(self, x) -> np.ndarray:
        """∂E/∂x (3N,), node-major."""
        return self._gradient(*self._below(x))

    def energy_and_gradient(self, x) -> tuple[float, np.ndarray]:
        """Both from one pass over the tets' volumes (the line search of a Newton step wants both)."""
        below, F = self._below(x)
        return float(floor_element_energies(F, self.floor, self.stiffness[below]).sum()), self._gradient(below, F)

    def _gradient(self, below, F) -> np.ndarray:
        gradient = np.zeros(3 * self.elasticity.node_count)
        node_gradients = self._to_nodes(below, floor_element_gradients(F, self.floor, self.stiffness[below]))
        np.add.at(gradient, self._node_columns(below).ravel(), node_gradients.ravel())
        return gradient

    def _hessian_blocks(self, x, project: bool):
        """(tets below the floor, their 12×12 blocks of ∂²E/∂x²)."""
        below, F = self._below(x)
        hessian_F = floor_element_hessians(F, self.floor, self.stiffness[below]).reshape(-1, 3, 3, 3, 3)
        G = self.elasticity.shape_gradients[below]
        # (3i+c, 3j+e) = Σ_{b,f} H[c,b,e,f] G[i,b] G[j,f]
        blocks = np.einsum("acbef,aib,ajf->aicje", hessian_F, G, G).reshape(-1, 12, 12)
        if project:
            eigenvalues, eigenvectors = np.linalg.eigh(blocks)
            blocks = np.einsum("aik,ak,ajk->aij", eigenvectors, np.maximum(eigenvalues, 0.0), eigenvectors)
        return below, blocks

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        """∂²E/∂x² on the elasticity's Hessian pattern (so it adds to the elastic Hessian entry by
        entry); each tet's 12×12 block clamped to positive semi-definite when `project`."""
        elasticity = self.elasticity
        data = np.zeros(len(elasticity.hessian_indices))
        self.add_hessian_into(data, x, project)
        size = 3 * elasticity.node_count
        return scipy.sparse.csr_matrix((data, elasticity.hessian_indices, elasticity.hessian_indptr),
                                       shape=(size, size))

    def add_hessian_into(self, data, x, project: bool = True) -> None:
        """Add ∂²E/∂x² to the data array of a matrix on the elasticity's Hessian pattern (the
        frame's Hessian), without assembling a matrix of its own."""
        below, blocks = self._hessian_blocks(x, project)
        np.add.at(data, self.elasticity.element_entry_positions[below].ravel(), blocks.ravel())
