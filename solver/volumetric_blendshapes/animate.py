"""`animate --actuation volumetric-blendshapes`: shape-key weights played through volumetric
blendshapes solved by Projective Dynamics (paper 002 §3.4), writing RESULT.npz exactly as the
Phace path does (physics/animate.py's AnimationResult) and its `.pc2`.

The shapes come from FIT.npz: its `shape_key_deltas` (the rig's keys on the model's skin) and
`jaw` (each key's jaw pose). Each key is transferred onto the tets with its jaw pose
(targets.py); a frame blends the targets by the weights, poses the bones — skull at rest, jaw by
the linearly blended jaw parameters — and runs PD from the previous frame, in the head's rest
frame; the head transform then moves the result rigidly. The skin is the embedded skin plus, with
detail, the blended residual of each key the tet mesh could not carry (as the Phace path adds).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..npz_files import write_npz_atomically
from ..pc2 import Pc2Writer
from ..physics.animate import AnimationResult
from ..physics.bones import jaw_transform
from .energies import TetMesh, VolumetricBlendshapeEnergy
from .projective_dynamics import ProjectiveDynamics, barycentric_matrix, model_fixed_nodes
from .targets import VolumetricBlendshapes, transfer_shape_targets

# Relative weights of the animation energy (paper 002 Eq. 9 + μ ARAP + λ volume): the targets
# dominate, the passive terms only act where targets conflict (or, later, contacts push).
DEFAULT_MU = 1e-2
DEFAULT_LAMBDA = 1e-2
PD_ITERATIONS = 200
PD_TOLERANCE_M = 1e-7


class VolumetricBlendshapeError(ValueError):
    """The inputs cannot drive volumetric blendshapes; the message says why and what to do."""


def _bone_nodes(model):
    """(fixed nodes, which of them ride the jaw) — pinned and sliding nodes, both held to their bone."""
    names = [str(name) for name in model["bone_names"]]
    jaw = names.index("jaw") if "jaw" in names else -1
    nodes = np.concatenate([model["pin_nodes"], model["slide_nodes"]]).astype(np.int64)
    bones = np.concatenate([model["pin_bone"], model["slide_bone"]]).astype(np.int64)
    order = np.unique(nodes, return_index=True)[1]
    return nodes[order], bones[order] == jaw


def posed_bones(model, jaw_parameters) -> np.ndarray:
    """Rest node positions (N,3) with the jaw's nodes moved by the jaw pose (skull at rest)."""
    x = np.array(model["rest_positions"], dtype=np.float64)
    nodes, on_jaw = _bone_nodes(model)
    transform = jaw_transform(np.asarray(model["jaw_frame"]), np.asarray(jaw_parameters, dtype=np.float64))
    moving = nodes[on_jaw]
    x[moving] = x[moving] @ transform[:3, :3].T + transform[:3, 3]
    return x


class VolumetricBlendshapePlayer:
    """Targets transferred once, the PD matrix factorised once; `frame(weights, jaw)` → nodes (N,3)."""

    def __init__(self, model, names, skin_deltas, shape_jaw, mu=DEFAULT_MU, lam=DEFAULT_LAMBDA,
                 transfer_iterations: int = 300, transfer_tolerance_m: float = 1e-8):
        self.model = model
        self.mesh = TetMesh(model["rest_positions"], model["tets"])
        self.shape_jaw = np.asarray(shape_jaw, dtype=np.float64)
        starts = [posed_bones(model, jaw) for jaw in self.shape_jaw]
        started = time.perf_counter()
        targets, transferred = transfer_shape_targets(model, skin_deltas, iterations=transfer_iterations,
                                                      tolerance_m=transfer_tolerance_m, start_positions=starts)
        self.transfer_seconds = time.perf_counter() - started
        self.shapes = VolumetricBlendshapes.from_targets(names, targets)
        skin = barycentric_matrix(model)
        rest_skin = np.asarray(model["skin_vertices"], dtype=np.float64)
        # What each key asks of the skin beyond what its transferred mesh carries.
        self.residuals = np.stack([rest_skin + delta - skin @ x for delta, x in zip(skin_deltas, transferred)])
        self.skin_matrix = skin
        self.energy = VolumetricBlendshapeEnergy(self.mesh, self.shapes.blend(np.zeros(len(names))), 1.0, mu, lam)
        self.solver = ProjectiveDynamics(self.mesh, self.energy.terms, model_fixed_nodes(model))
        self.x = self.mesh.rest_positions.copy()

    def frame(self, weights, jaw_parameters=None):
        weights = np.asarray(weights, dtype=np.float64)
        jaw = weights @ self.shape_jaw if jaw_parameters is None else jaw_parameters
        self.energy.set_targets(self.shapes.blend(weights))
        self.solver.terms = self.energy.terms
        start = self.x.copy()
        bones = posed_bones(self.model, jaw)
        start[self.solver.fixed] = bones[self.solver.fixed]
        self.x, report = self.solver.solve(start, PD_ITERATIONS, PD_TOLERANCE_M)
        return self.x, report


def play_volumetric_blendshapes(model, fit: dict, weights: np.ndarray, fps: float, head_transforms: np.ndarray,
                                result_path, detail: bool = True,
                                progress: Callable[[dict], None] = lambda event: None,
                                cache_start_frame: float = 1.0, cache_metres_per_unit: float = 1.0) -> AnimationResult:
    """Every frame of `weights` (T,K) in the fit's shape order; writes RESULT.npz at result_path
    and its .pc2 beside it (physics/animate.py's layout)."""
    if "shape_key_deltas" not in fit:
        raise VolumetricBlendshapeError("FIT.npz has no shape_key_deltas (fits made before they were stored): "
                                        "fit the shapes again to play them as volumetric blendshapes")
    result_path = Path(result_path)
    setup_started = time.perf_counter()
    player = VolumetricBlendshapePlayer(model, fit["shape_key_names"], np.asarray(fit["shape_key_deltas"], np.float64),
                                        np.asarray(fit["jaw"], np.float64))
    setup_seconds = time.perf_counter() - setup_started
    frames = len(weights)
    skin_count = len(model["skin_vertices"])
    skin = np.empty((frames, skin_count, 3))
    converged = np.zeros(frames, dtype=bool)
    iterations = np.zeros(frames, dtype=np.int64)
    seconds = np.zeros(frames)
    inverted, smallest = np.zeros(frames, dtype=np.int64), np.ones(frames)
    with Pc2Writer(result_path.with_suffix(".pc2"), skin_count, start_frame=cache_start_frame) as cache:
        for frame in range(frames):
            x, report = player.frame(weights[frame])
            local = player.skin_matrix @ x
            if detail:
                local = local + np.einsum("k,kvd->vd", weights[frame], player.residuals)
            head = head_transforms[frame]
            skin[frame] = local @ head[:3, :3].T + head[:3, 3]
            determinants = np.linalg.det(player.mesh.deformation_gradients(x))
            inverted[frame], smallest[frame] = int((determinants <= 0).sum()), float(determinants.min(initial=1.0))
            converged[frame], iterations[frame], seconds[frame] = report.converged, report.iterations, report.seconds
            cache.append(skin[frame] / cache_metres_per_unit)
            progress({"frame": frame + 1, "frames": frames, "converged": bool(report.converged),
                      "newton_iterations": int(report.iterations), "seconds": round(report.seconds, 3),
                      "inverted_tets": int(inverted[frame]), "setup_seconds": round(setup_seconds, 3),
                      **({} if report.converged else {"reason": f"PD did not settle in {PD_ITERATIONS} iterations "
                                                                f"(last move {report.last_step_m:.2e} m)"})})
    jaw_world = np.stack([head @ jaw_transform(np.asarray(model["jaw_frame"]), w @ player.shape_jaw)
                          for head, w in zip(head_transforms, weights)])
    result = AnimationResult(skin_positions=skin, converged=converged, newton_iterations=iterations,
                             frame_seconds=seconds, fps=float(fps), skull_transforms=np.asarray(head_transforms, float),
                             jaw_transforms=jaw_world, inverted_tets=inverted, smallest_volume_ratio=smallest)
    write_npz_atomically(result_path, result.arrays())
    return result
