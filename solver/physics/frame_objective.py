"""The energy one time step minimises, as the Newton solver sees it (simulator.py's docstring
has the terms): the tissue (corotated.py, with the volume floor of volume_floor.py) plus gravity
and wind as a constant force, the backward-Euler inertia of a dynamic step, and the contact
round's augmented-Lagrangian term (contact.py), on flat node-major x with one fixed Hessian
pattern.

``restricted`` gives the same energy on a sub-mesh with the rest of the nodes held, for the
contact region's relaxation (contact_region.py)."""
from __future__ import annotations

from typing import Optional

import numpy as np

from .corotated import CorotatedElasticity, TetMaterial
from .simple_energies import InertiaEnergy
from .volume_floor import VolumeFloor


def tissue_volume_floor(elasticity: CorotatedElasticity, material: TetMaterial, floor: float,
                        stiffness_ratio: float) -> Optional[VolumeFloor]:
    """The tissue's volume floor (SimulationSettings.volume_floor): κ_t = ratio · λ_t · V_t, so it
    scales with the tet's own volume stiffness (λ (J − 1)² per unit volume) and follows the
    stiffness maps; None when switched off."""
    if floor <= 0.0 or stiffness_ratio <= 0.0:
        return None
    volume = (material.passive_weight + material.active_weight) * elasticity.volume_scale
    return VolumeFloor(elasticity, floor, stiffness_ratio * material.lam * volume)


class FrameObjective:
    """The frame's total energy as the Newton solver sees it: flat x, one fixed Hessian pattern."""

    def __init__(self, elasticity: CorotatedElasticity, node_mass: np.ndarray):
        self.elasticity = elasticity
        self.node_mass = np.asarray(node_mass, dtype=np.float64)
        self.material: Optional[TetMaterial] = None
        self.constant_force = np.zeros(3 * elasticity.node_count)   # gravity + wind
        # The backward-Euler inertia of a dynamic step (None quasi-statically); its Hessian is a
        # diagonal, added on the elasticity's pattern.
        self.inertia: Optional[InertiaEnergy] = None
        # The augmented-Lagrangian contact term of the current collision round (contact.py).
        self.contact = None
        # The exact Hessian: Newton then converges quadratically (7 iterations for gravity on the
        # 30k-tet demo head, against 50+ with per-element PSD projection, which stalls into
        # linear convergence near equilibrium); where it is indefinite beyond what a small
        # diagonal shift mends, the solver takes that step on projected_hessian (newton.py).
        self.project_hessian = False
        # The volume floor: share J₀ of the rest volume and κ / (λ V) (0: off); its VolumeFloor
        # is rebuilt only when the material changes.
        self.volume_floor_share = 0.0
        self.volume_floor_stiffness = 0.0
        self._floor_for = None
        # The tissue's pass (E, ∇E, ∇²E) at the last point a contact round evaluated with its
        # Hessian: the next round starts at that very point (newton.py keeps the start's bits)
        # with only the contact term changed, and would otherwise pay the same pass again — one
        # of the 3.5 whole-mesh passes of each of a contact frame's 6-17 rounds.
        self._kept_tissue_pass = None

    @property
    def volume_floor(self) -> Optional[VolumeFloor]:
        """The tissue's volume floor for the current material (None when off)."""
        settings = (self.volume_floor_share, self.volume_floor_stiffness)
        cached = self._floor_for
        # The cache holds the material itself, so `is` cannot match a new one at a reused address.
        if cached is None or cached[0] is not self.material or cached[1] != settings:
            floor = None if self.material is None else tissue_volume_floor(self.elasticity, self.material, *settings)
            self._floor_for = cached = (self.material, settings, floor)
        return cached[2]

    def energy(self, x):
        return self._add_other_terms(x, self.elasticity.energy(x, self.material), None)[0]

    def gradient(self, x):
        return self._add_other_terms(x, None, self.elasticity.gradient(x, self.material))[1]

    def energy_and_gradient(self, x):
        """Both in one pass over the tets (newton.py's line search)."""
        return self._add_other_terms(x, *self.elasticity.energy_and_gradient(x, self.material))

    def energy_gradient_hessian(self, x):
        """(E, ∇E, ∇²E) in one pass over the tets (``hessian``'s projection setting): Newton
        evaluates its start and each full-step trial point so, and the Hessian of an accepted
        trial is the next step's; one SVD per tet instead of two passes (newton.py)."""
        value, gradient, hessian = self._tissue_pass(x)
        value, gradient = self._add_other_terms(x, value, gradient)
        return value, gradient, self._add_other_hessians(hessian, x, self.project_hessian)

    def _tissue_pass(self, x):
        """The elasticity's (E, ∇E, ∇²E) at x, from the kept pass when it was made at these bits
        with this material. Kept only while a contact term is set: without contacts no solve
        starts where another one ended, and the copy would cost ~5 % of every pass for nothing."""
        kept = self._kept_tissue_pass
        if kept is not None and kept[0] is self.material and kept[1] == self.project_hessian \
                and np.array_equal(kept[2], x):
            value, gradient, hessian = kept[3]
            return value, gradient.copy(), _with_data(hessian, hessian.data.copy())
        value, gradient, hessian = self.elasticity.energy_gradient_hessian(x, self.material,
                                                                           project=self.project_hessian)
        self._kept_tissue_pass = None
        if self.contact is not None:
            # Copies: the caller adds the other terms into the Hessian's values in place.
            self._kept_tissue_pass = (self.material, self.project_hessian, np.array(x, dtype=np.float64),
                                      (value, gradient.copy(), _with_data(hessian, hessian.data.copy())))
        return value, gradient, hessian

    def _add_other_terms(self, x, value, gradient):
        """(value, gradient): the elastic ones given (None: not wanted) plus gravity and wind,
        inertia and contact."""
        inertia = self.inertia
        floor = self.volume_floor
        floor_value = floor_gradient = None
        if floor is not None:
            if value is not None and gradient is not None:
                floor_value, floor_gradient = floor.energy_and_gradient(x)
            elif value is not None:
                floor_value = floor.energy(x)
            else:
                floor_gradient = floor.gradient(x)
        if value is not None:
            value = value - self.constant_force @ x
            if floor_value is not None:
                value += floor_value
            if inertia is not None:
                value += inertia.energy(x)
            if self.contact is not None:
                value += self.contact.energy(x)
        if gradient is not None:
            gradient = gradient - self.constant_force
            if floor_gradient is not None:
                gradient += floor_gradient
            if inertia is not None:
                gradient += inertia.gradient(x)
            if self.contact is not None:
                gradient += self.contact.gradient(x)
        return value, gradient

    def hessian_low_rank(self, x):
        """The contact planes' part of the Hessian, which switches on and off between Newton
        iterations (linear_solver.LowRankTerm); None without contacts."""
        return self.contact.hessian_low_rank(x) if self.contact is not None else None

    def hessian(self, x):
        return self._hessian(x, self.project_hessian)

    def projected_hessian(self, x):
        """The Hessian with every tet's block projected to positive semi-definite (the inertia
        and contact parts are already): Newton's stand-in where the exact one is indefinite."""
        return self._hessian(x, True)

    def _hessian(self, x, project: bool):
        return self._add_other_hessians(self.elasticity.hessian(x, self.material, project=project), x, project)

    def _add_other_hessians(self, hessian, x, project: bool):
        """The tissue's Hessian plus the volume floor's, the inertia's and the contact's, in place."""
        floor = self.volume_floor
        if floor is not None:
            floor.add_hessian_into(hessian.data, x, project)
        if self.inertia is not None:
            hessian.data[self.elasticity.diagonal_entry_positions] += self.inertia.hessian_diagonal
        if self.contact is not None:
            # On the elasticity's own pattern: the reduced pattern, and CHOLMOD's analysis, hold.
            self.contact.add_hessian_into(hessian.data, x)
        return hessian

    def restricted(self, region, elasticity: CorotatedElasticity) -> "FrameObjective":
        """This energy on the sub-mesh of a ``contact_region.Region`` (its tets, its nodes in
        local order), `elasticity` being that sub-mesh's: the same material, masses, forces,
        inertia target and contact planes. With the region's held nodes fixed it differs from
        this objective by a constant (the tets left out touch no free node), so minimising it
        minimises this one over the region's free nodes."""
        dofs = region.dofs
        restricted = FrameObjective(elasticity, self.node_mass[region.nodes])
        restricted.material = self.material.restricted_to(region.tets)
        restricted.constant_force = self.constant_force[dofs]
        if self.inertia is not None:
            restricted.inertia = InertiaEnergy(restricted.node_mass, self.inertia.x_hat[dofs], self.inertia.dt)
        restricted.project_hessian = self.project_hessian
        restricted.volume_floor_share = self.volume_floor_share
        restricted.volume_floor_stiffness = self.volume_floor_stiffness
        if self.contact is not None:
            restricted.contact = self.contact.on_embedding(region.embedding, hessian_layout=elasticity)
        return restricted


def _with_data(matrix, data):
    """`matrix`'s pattern (its index arrays shared, not copied) with the values `data`."""
    shared = type(matrix)((data, matrix.indices, matrix.indptr), shape=matrix.shape, copy=False)
    shared.has_sorted_indices = matrix.has_sorted_indices
    return shared
