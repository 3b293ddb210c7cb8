"""Every energy of forward physics by name, for one shared derivative test.

``REGISTERED_ENERGIES[name](rest_positions, tets, rng)`` builds the energy on a small tet mesh
with randomised parameters (materials, activations, masses) and returns a ``RegisteredEnergy``:
the energy behind the common API ``energy(x)``, ``gradient(x)``, ``hessian(x, project=True)``,
plus the properties the test may expect of it. tests/test_energy_derivatives.py runs each one
through the same checks (finite-difference gradient and Hessian, symmetry, PSD projection,
rigid-motion invariance, inverted and near-degenerate tets); a new energy or penalty joins the
test by adding a factory here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import scipy.sparse

from solver.collisions.contacts import ContactPlanes
from solver.physics.contact import AugmentedLagrangianContact
from solver.physics.skin_embedding import SkinEmbedding
from solver.physics.corotated import STIFFNESS_UNIT_PA, CorotatedElasticity, TetMaterial
from solver.physics.simple_energies import STANDARD_GRAVITY, GravityEnergy, InertiaEnergy
from solver.physics.volume_floor import VolumeFloor
from solver.volumetric_blendshapes.energies import TetMesh, TetProjectiveTerm


class EnergyTerm(Protocol):
    def energy(self, x) -> float: ...

    def gradient(self, x) -> np.ndarray: ...

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix: ...


@dataclass(frozen=True)
class RegisteredEnergy:
    term: EnergyTerm
    # E(x Rᵀ + t) = E(x) for every rotation R and translation t (internal energies).
    rigid_motion_invariant: bool
    # Zero gradient at the rest positions, and so at every rigid motion of them if invariant.
    rest_is_equilibrium: bool


class CorotatedWithMaterial:
    """A CorotatedElasticity evaluated with one fixed TetMaterial, in the common API."""

    def __init__(self, elasticity: CorotatedElasticity, material: TetMaterial):
        self.elasticity, self.material = elasticity, material

    def energy(self, x) -> float:
        return self.elasticity.energy(x, self.material)

    def gradient(self, x) -> np.ndarray:
        return self.elasticity.gradient(x, self.material)

    def hessian(self, x, project: bool = True) -> scipy.sparse.csr_matrix:
        return self.elasticity.hessian(x, self.material, project)


def random_activations(rng, count: int, spread: float = 0.3, volume_spread: float = 0.1) -> np.ndarray:
    """(count,3,3) random symmetric positive definite S = Q diag(λ) Qᵀ: log-stretches of
    standard deviation ``spread``, det S = exp(N(0, volume_spread)) (1 when volume_spread = 0)."""
    rotations = random_rotations(rng, count)
    log_stretch = spread * rng.standard_normal((count, 3))
    log_stretch += (volume_spread * rng.standard_normal((count, 1)) - log_stretch.sum(axis=1, keepdims=True)) / 3.0
    activations = (rotations * np.exp(log_stretch)[:, None, :]) @ rotations.transpose(0, 2, 1)
    return 0.5 * (activations + activations.transpose(0, 2, 1))  # exactly symmetric


def random_rotations(rng, count: int) -> np.ndarray:
    """(count,3,3) rotations from the QR of Gaussian matrices, signs fixed so det = +1."""
    q, r = np.linalg.qr(rng.standard_normal((count, 3, 3)))
    q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
    q[np.linalg.det(q) < 0.0, :, 0] *= -1.0
    return q


def _random_material(rng, elasticity: CorotatedElasticity, muscle: bool) -> TetMaterial:
    """μ, λ around the Phace defaults; without muscle, all tissue passive (S = I)."""
    count = elasticity.element_count
    rest_volume = elasticity.rest_volume / elasticity.volume_scale  # the model's unscaled volume
    active_fraction = rng.uniform(0.3, 0.9, count) if muscle else np.zeros(count)
    return TetMaterial(
        passive_weight=rest_volume * (1.0 - active_fraction),
        active_weight=rest_volume * active_fraction,
        activation=random_activations(rng, count) if muscle else np.broadcast_to(np.eye(3), (count, 3, 3)),
        mu=STIFFNESS_UNIT_PA * rng.uniform(0.5, 2.0, count),
        lam=STIFFNESS_UNIT_PA * rng.uniform(1.0, 10.0, count),
    )


def _corotated_passive(rest_positions, tets, rng) -> RegisteredEnergy:
    elasticity = CorotatedElasticity(rest_positions, tets)
    return RegisteredEnergy(CorotatedWithMaterial(elasticity, _random_material(rng, elasticity, muscle=False)),
                            rigid_motion_invariant=True, rest_is_equilibrium=True)


def _corotated_active(rest_positions, tets, rng) -> RegisteredEnergy:
    elasticity = CorotatedElasticity(rest_positions, tets)
    return RegisteredEnergy(CorotatedWithMaterial(elasticity, _random_material(rng, elasticity, muscle=True)),
                            rigid_motion_invariant=True, rest_is_equilibrium=False)


def _corotated_plastic(rest_positions, tets, rng) -> RegisteredEnergy:
    elasticity = CorotatedElasticity(rest_positions, tets, rest_scale=rng.uniform(0.8, 1.25, len(tets)))
    return RegisteredEnergy(CorotatedWithMaterial(elasticity, _random_material(rng, elasticity, muscle=True)),
                            rigid_motion_invariant=True, rest_is_equilibrium=False)


def _random_node_masses(rng, rest_positions) -> np.ndarray:
    return rng.uniform(0.5, 2.0, len(rest_positions)) * 1e-3  # kg, a gram or so per node


def _gravity(rest_positions, tets, rng) -> RegisteredEnergy:
    return RegisteredEnergy(GravityEnergy(_random_node_masses(rng, rest_positions), (0.0, 0.0, -STANDARD_GRAVITY)),
                            rigid_motion_invariant=False, rest_is_equilibrium=False)


def _inertia(rest_positions, tets, rng) -> RegisteredEnergy:
    scale = np.ptp(rest_positions, axis=0).max()
    predicted = rest_positions + 0.1 * scale * rng.standard_normal(rest_positions.shape)
    return RegisteredEnergy(InertiaEnergy(_random_node_masses(rng, rest_positions), predicted, dt=1.0 / 30.0),
                            rigid_motion_invariant=False, rest_is_equilibrium=False)


def _augmented_lagrangian_contact(rest_positions, tets, rng) -> RegisteredEnergy:
    """Tangent planes on skin vertices embedded in random tets (weights partly outside [0, 1],
    as on a coarse mesh). Half the planes carry a multiplier so large (λ/κ far beyond any gap
    the test configurations reach) that they push everywhere; the other half have λ = 0 and
    push only where their vertex is behind the plane — a random mix of active and inactive."""
    count = 2 * len(tets) + 4
    node_count = len(rest_positions)
    vertex_tet = rng.integers(0, len(tets), count)
    weights = rng.dirichlet(np.ones(4), count) + rng.uniform(-0.3, 0.3, (count, 4))
    weights /= weights.sum(axis=1, keepdims=True)
    embedding = SkinEmbedding(vertex_tet=vertex_tet, nodes=np.asarray(tets)[vertex_tet], weights=weights,
                              node_count=node_count)
    size = np.ptp(rest_positions, axis=0).max()
    normals = rng.standard_normal((count, 3))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    planes = ContactPlanes(vertex=np.arange(count), point=rng.uniform(-1.0, 1.0, (count, 3)) * size, normal=normals,
                           depth=np.zeros(count), collider=np.zeros(count, np.int64))
    stiffness = rng.uniform(0.5, 2.0, count) * 1e3             # N/m
    pushing_everywhere = np.arange(count) % 2 == 0
    multipliers = np.where(pushing_everywhere, 100.0 * size * stiffness, 0.0)
    return RegisteredEnergy(AugmentedLagrangianContact(embedding, planes, multipliers, stiffness),
                            rigid_motion_invariant=False, rest_is_equilibrium=False)


def _volume_floor(rest_positions, tets, rng) -> RegisteredEnergy:
    """A floor above the rest volume (1.5–2 times it), so that every tet of every test
    configuration is below it and has derivatives to check; tests/test_energy_derivatives.py
    checks separately that a floor below 1 leaves the rest shape and tets above it alone."""
    return RegisteredEnergy(VolumeFloor(CorotatedElasticity(rest_positions, tets), floor=rng.uniform(1.5, 2.0),
                                        stiffness=rng.uniform(0.5, 2.0, len(tets))),
                            rigid_motion_invariant=True, rest_is_equilibrium=False)


def _volumetric_blendshape_term(kind: str, invariant: bool):
    """One term of the volumetric-blendshape energy (solver/volumetric_blendshapes/energies.py)
    with random per-tet weights. The target term pulls each F toward a random F*, so it is not
    rigid-motion invariant (the targets fix the orientation) and the rest is no equilibrium;
    ARAP and volume are internal energies with the rest shape as a minimum."""
    def factory(rest_positions, tets, rng) -> RegisteredEnergy:
        mesh = TetMesh(rest_positions, tets)
        coefficient = mesh.rest_volume * rng.uniform(0.5, 2.0, len(tets))
        target = np.eye(3) + 0.3 * rng.standard_normal((len(tets), 3, 3)) if kind == "target" else None
        return RegisteredEnergy(TetProjectiveTerm(mesh, kind, coefficient, target),
                                rigid_motion_invariant=invariant, rest_is_equilibrium=invariant)
    return factory


EnergyFactory = Callable[[np.ndarray, np.ndarray, np.random.Generator], RegisteredEnergy]

REGISTERED_ENERGIES: dict[str, EnergyFactory] = {
    "corotated_passive": _corotated_passive,
    "corotated_active": _corotated_active,
    "corotated_plastic": _corotated_plastic,
    "gravity": _gravity,
    "inertia": _inertia,
    "augmented_lagrangian_contact": _augmented_lagrangian_contact,
    "volume_floor": _volume_floor,
    "volumetric_blendshape_target": _volumetric_blendshape_term("target", invariant=False),
    "volumetric_blendshape_arap": _volumetric_blendshape_term("arap", invariant=True),
    "volumetric_blendshape_volume": _volumetric_blendshape_term("volume", invariant=True),
}
