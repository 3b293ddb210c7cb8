"""Per-shape per-tet deformation-gradient targets from a rig's shape keys (paper 002 §3.3, Eq. 8),
and their blending by polar decomposition (§3.4).

Deformation transfer (Eq. 6): for each shape key, the tet mesh is deformed by minimising
k ||B x − s_key||² + μ E_ARAP + λ E_volume with the bone nodes fixed (Projective Dynamics on one
factorisation shared by every key), and the shape's targets are the tets' F there. Eq. 8 then
fits blendshapes V_m to expression examples H_l with weights α_{l,m}; with one example per key
(α = identity, H_m the transferred F) and the prior Ṽ_m from the same transfer, its minimiser
is V_m = H_m − I for every κ ≥ 0, so the transferred F are the targets themselves.

Blending: each target F_m = R_m S_m (polar); at weights α the rotation is the normalised
quaternion q_I + Σ α_m (q_m − q_I) (each q_m on the identity's hemisphere) and the stretch
I + Σ α_m (S_m − I); F*(α) = R(q) S. α = e_m gives F_m back exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .element_kernels import polar_rotation
from .energies import TetMesh, TetProjectiveTerm
from .projective_dynamics import Attachment, ProjectiveDynamics, barycentric_matrix, model_fixed_nodes

# Relative weights of the transfer: the attachment dominates so the skin reaches the key, the
# elastic terms only fill the volume (paper 002 uses the same μ, λ roles).
TRANSFER_ATTACHMENT = 1e3
TRANSFER_MU = 1.0
TRANSFER_LAMBDA = 1.0


def rotation_to_quaternion(R: np.ndarray) -> np.ndarray:
    """(M,4) unit quaternions (w, x, y, z), w ≥ 0, of rotations (M,3,3); the largest of the
    four candidate pivots is used for accuracy."""
    R = np.asarray(R, dtype=np.float64)
    trace = np.trace(R, axis1=1, axis2=2)
    candidates = np.stack([trace, R[:, 0, 0], R[:, 1, 1], R[:, 2, 2]], axis=1)
    pivot = np.argmax(candidates, axis=1)
    q = np.empty((len(R), 4))
    for k in range(4):
        rows = pivot == k
        r = R[rows]
        if k == 0:
            s = 2.0 * np.sqrt(1.0 + trace[rows])
            q[rows] = np.stack([0.25 * s, (r[:, 2, 1] - r[:, 1, 2]) / s, (r[:, 0, 2] - r[:, 2, 0]) / s,
                                (r[:, 1, 0] - r[:, 0, 1]) / s], axis=1)
        else:
            i, j, l = k - 1, k % 3, (k + 1) % 3
            s = 2.0 * np.sqrt(np.maximum(1.0 + r[:, i, i] - r[:, j, j] - r[:, l, l], 1e-300))
            values = np.empty((rows.sum(), 4))
            values[:, 0] = (r[:, l, j] - r[:, j, l]) / s
            values[:, 1 + i] = 0.25 * s
            values[:, 1 + j] = (r[:, j, i] + r[:, i, j]) / s
            values[:, 1 + l] = (r[:, l, i] + r[:, i, l]) / s
            q[rows] = values
    q *= np.where(q[:, :1] < 0.0, -1.0, 1.0)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def quaternion_to_rotation(q: np.ndarray) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return np.stack([np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                     np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                     np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


@dataclass
class VolumetricBlendshapes:
    """The shapes' per-tet targets F_m (K,M,3,3) split once into quaternions (K,M,4) and
    stretches S_m = R_mᵀ F_m (K,M,3,3)."""
    names: tuple
    targets: np.ndarray
    quaternions: np.ndarray
    stretches: np.ndarray

    @staticmethod
    def from_targets(names, targets: np.ndarray) -> "VolumetricBlendshapes":
        targets = np.asarray(targets, dtype=np.float64)
        shapes, tets = targets.shape[:2]
        flat = targets.reshape(-1, 3, 3)
        rotations = polar_rotation(flat)
        stretches = rotations.transpose(0, 2, 1) @ flat
        stretches = 0.5 * (stretches + stretches.transpose(0, 2, 1))
        return VolumetricBlendshapes(tuple(str(n) for n in names), targets,
                                     rotation_to_quaternion(rotations).reshape(shapes, tets, 4),
                                     stretches.reshape(shapes, tets, 3, 3))

    def blend(self, weights) -> np.ndarray:
        """F*(α) (M,3,3): rotations by quaternions, stretches linearly (module docstring)."""
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        if weights.shape != (len(self.names),) or not np.all(np.isfinite(weights)):
            raise ValueError(f"weights: expected {len(self.names)} finite shape-key weights, found {weights.shape}")
        identity_q = np.array([1.0, 0.0, 0.0, 0.0])
        q = identity_q + np.einsum("k,kmq->mq", weights, self.quaternions - identity_q)
        stretch = np.eye(3) + np.einsum("k,kmij->mij", weights, self.stretches - np.eye(3))
        return quaternion_to_rotation(q) @ stretch


def transfer_shape_targets(model: dict, skin_deltas: np.ndarray, attachment=TRANSFER_ATTACHMENT,
                           mu=TRANSFER_MU, lam=TRANSFER_LAMBDA, iterations: int = 300, tolerance_m: float = 1e-8,
                           start_positions=None):
    """F_m (K,M,3,3) of every shape key (skin deltas (K,V,3) m on the model's skin vertices),
    and the transferred node positions (K,N,3). One PD factorisation serves every key.
    start_positions: per key (N,3) whose bone nodes hold the key's bone pose (default: rest)."""
    mesh = TetMesh(model["rest_positions"], model["tets"])
    skin_rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    deltas = np.asarray(skin_deltas, dtype=np.float64)
    if deltas.ndim != 3 or deltas.shape[1:] != skin_rest.shape:
        raise ValueError(f"skin_deltas: expected (K,{len(skin_rest)},3), found {deltas.shape}")
    # The attachment per skin vertex balances a tet's elastic weight: volume / edge² ~ edge length.
    edge = np.cbrt(np.mean(mesh.rest_volume))
    link = Attachment(barycentric_matrix(model), attachment * np.mean(mesh.rest_volume) / edge ** 2)
    terms = [TetProjectiveTerm(mesh, "arap", mesh.rest_volume * mu), TetProjectiveTerm(mesh, "volume", mesh.rest_volume * lam)]
    solver = ProjectiveDynamics(mesh, terms, model_fixed_nodes(model), link)
    targets = np.empty((len(deltas), len(mesh.tets), 3, 3))
    positions = np.empty((len(deltas), mesh.node_count, 3))
    for k, delta in enumerate(deltas):
        link.positions = skin_rest + delta
        start = mesh.rest_positions if start_positions is None else start_positions[k]
        positions[k], _ = solver.solve(start, iterations, tolerance_m)
        targets[k] = mesh.deformation_gradients(positions[k])
    return targets, positions
