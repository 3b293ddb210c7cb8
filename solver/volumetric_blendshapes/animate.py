"""`animate --actuation volumetric-blendshapes`: shape-key weights played through volumetric
blendshapes solved by Projective Dynamics (paper 002 §3.4), writing RESULT.npz exactly as the
Phace path does (physics/animate.py's AnimationResult) and its `.pc2`.

The shapes come from FIT.npz: its `shape_key_deltas` (the rig's keys on the model's skin) and
`jaw` (each key's jaw pose). Each key is transferred onto the tets with its jaw pose
(targets.py); a frame blends the targets by the weights, poses the bones — skull at rest, jaw by
the linearly blended jaw parameters — and runs PD from the previous frame, in the head's rest
frame; the head transform then moves the result rigidly. The skin is the embedded skin plus, with
detail, the blended residual of each key the tet mesh could not carry (as the Phace path adds).

The shown skin then goes through the Phace path's skin filter (physics/skin_filter.py): the
deviation from the plain rig frame, rest + Σ wₖ Δₖ, low-passed on the skin surface, pushed back
out of the colliders, and held flat by the fold guard where it would bend shown triangles beyond
the rig's. The tet mesh's kinks are the same whichever actuation drives it, and a key played at
weight 1 is still shown exactly as the rig has it (zero deviation stays zero).
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..collisions.contacts import BonePose
from ..pc2 import Pc2Writer
from ..physics.animate import AnimationResult, frame_records
from ..physics.bones import jaw_transform
from ..physics.contact_response import DEFAULT_CONTACT_TOLERANCE
from ..physics.skin_filter import SkinFilter
from ..physics.skin_store import SkinStore, StoredArray
from .contact import CompliantContact
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


@dataclass(frozen=True)
class ShownSkin:
    """One frame's skin as written: in the world, detail, display projection and filter included."""
    skin: np.ndarray            # (V,3) m
    depth_m: float              # the deepest vertex still inside a collider (0 without a scene)
    pinned: int = 0             # vertices the skin filter pinned onto a collider or showed as simulated
    guarded: int = 0            # vertices on triangles its fold guard held flat


class VolumetricBlendshapePlayer:
    """Targets transferred once, the PD matrix factorised once; `frame(weights, jaw)` → nodes
    (N,3). With a collision `scene` (collisions/scene.py) the skin is kept out of it by
    contact.CompliantContact."""

    def __init__(self, model, names, skin_deltas, shape_jaw, mu=DEFAULT_MU, lam=DEFAULT_LAMBDA,
                 transfer_iterations: int = 300, transfer_tolerance_m: float = 1e-8, scene=None):
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
        self.rest_skin = np.asarray(model["skin_vertices"], dtype=np.float64)
        self.skin_deltas = np.asarray(skin_deltas, dtype=np.float64)
        # What each key asks of the skin beyond what its transferred mesh carries.
        self.residuals = np.stack([self.rest_skin + delta - skin @ x for delta, x in zip(skin_deltas, transferred)])
        self.skin_matrix = skin
        self.energy = VolumetricBlendshapeEnergy(self.mesh, self.shapes.blend(np.zeros(len(names))), 1.0, mu, lam)
        self.solver = ProjectiveDynamics(self.mesh, self.energy.terms, model_fixed_nodes(model))
        self.scene = scene
        self.contact = None if scene is None else CompliantContact(model, scene, self.solver)
        self.head = np.eye(4)
        self.pose = BonePose(skull=np.eye(4), jaw=np.eye(4))
        self.rounds = 0                  # contact rounds of the last frame
        self.found_depth = 0.0           # m, the deepest new penetration its last round found
        self.x = self.mesh.rest_positions.copy()

    def frame(self, weights, jaw_parameters=None, head=None, frame: int = 0):
        """Nodes (N,3) in the head's rest frame at `weights`, and the PD report. `head` (4×4,
        default identity) places the head in the world for contact (the colliders are there),
        `frame` the index animated props are read at."""
        weights = np.asarray(weights, dtype=np.float64)
        jaw = weights @ self.shape_jaw if jaw_parameters is None else jaw_parameters
        self.energy.set_targets(self.shapes.blend(weights))
        self.solver.terms = self.energy.terms
        start = self.x.copy()
        bones = posed_bones(self.model, jaw)
        start[self.solver.fixed] = bones[self.solver.fixed]
        self.head = np.eye(4) if head is None else np.asarray(head, dtype=np.float64)
        self.pose = BonePose(skull=self.head, jaw=self.head @ jaw_transform(np.asarray(self.model["jaw_frame"]), jaw),
                             frame=frame)
        if self.contact is None:
            self.x, report = self.solver.solve(start, PD_ITERATIONS, PD_TOLERANCE_M)
        else:
            self.x, report, self.rounds, self.found_depth = self.contact.solve_rounds(
                start, self.pose, self.head, PD_ITERATIONS, PD_TOLERANCE_M)
        return self.x, report

    def displayed_skin(self, x, offset=None, measure: bool = True) -> tuple[np.ndarray, float]:
        """(the skin shown in the world for nodes x (N,3) of the last frame: embedded, plus the
        rest-frame `offset` (V,3), placed by that frame's head transform, then moved out of the
        colliders as the Phace path's display projection does; the deepest vertex still inside a
        collider after it, m, or 0 when not `measure`d: the skin filter measures what it shows)."""
        rotation, translation = self.head[:3, :3], self.head[:3, 3]
        skin = self.skin_matrix @ x if offset is None else self.skin_matrix @ x + offset
        shown = skin @ rotation.T + translation
        if self.contact is None:
            return shown, 0.0
        response = self.contact.response
        shown = shown + response.project_displayed(x @ rotation.T + translation, self.pose,
                                                   None if offset is None else offset @ rotation.T)
        if not measure:
            return shown, 0.0
        planes = response.collisions.detect(shown, self.pose)
        return shown, float(planes.depth.max(initial=0.0))

    def shown_skin(self, x, weights, detail: bool = True, skin_filter: Optional[SkinFilter] = None) -> ShownSkin:
        """The skin written for the last frame (nodes x (N,3), its `weights` (K,)): `displayed_skin`
        with the blended residuals as detail, then, with a `skin_filter`, filtered against the
        plain rig frame and kept out of the scene (module docstring)."""
        weights = np.asarray(weights, dtype=np.float64)
        offset = np.einsum("k,kvd->vd", weights, self.residuals) if detail else None
        shown, depth = self.displayed_skin(x, offset, measure=skin_filter is None)
        if skin_filter is None:
            return ShownSkin(shown, depth)
        rig = (self.rest_skin + np.einsum("k,kvd->vd", weights, self.skin_deltas)) @ self.head[:3, :3].T \
            + self.head[:3, 3]
        filtered = skin_filter.apply_in_scene(shown, rig, self.scene, self.pose, DEFAULT_CONTACT_TOLERANCE)
        depth = 0.0 if self.scene is None else self.scene.measure(filtered.skin, self.pose, shown=True).max_depth_m
        return ShownSkin(filtered.skin, depth, filtered.held_by_colliders, filtered.guarded)


def _unconverged_reason(player: VolumetricBlendshapePlayer, report) -> str:
    if report.last_step_m >= PD_TOLERANCE_M:
        return f"PD did not settle in {PD_ITERATIONS} iterations (last move {report.last_step_m:.2e} m)"
    return (f"contacts still found {player.found_depth * 1e3:.2f} mm deep after {player.rounds} rounds "
            f"(the shown skin is moved out of the colliders)")


def play_volumetric_blendshapes(model, fit: dict, weights: np.ndarray, fps: float, head_transforms: np.ndarray,
                                result_path, detail: bool = True, scene=None,
                                skin_filter: Optional[SkinFilter] = None,
                                progress: Callable[[dict], None] = lambda event: None,
                                cache_start_frame: float = 1.0, cache_metres_per_unit: float = 1.0) -> AnimationResult:
    """Every frame of `weights` (T,K) in the fit's shape order; writes RESULT.npz at result_path
    and its .pc2 beside it (physics/animate.py's layout). `scene`: the collision scene to keep
    the skin out of (collisions/scene.py), or None; `skin_filter`: the filter the skin is shown
    through (physics/skin_filter.py), or None for the skin as simulated."""
    if "shape_key_deltas" not in fit:
        raise VolumetricBlendshapeError("FIT.npz has no shape_key_deltas (fits made before they were stored): "
                                        "fit the shapes again to play them as volumetric blendshapes")
    result_path = Path(result_path)
    setup_started = time.perf_counter()
    player = VolumetricBlendshapePlayer(model, fit["shape_key_names"], np.asarray(fit["shape_key_deltas"], np.float64),
                                        np.asarray(fit["jaw"], np.float64), scene=scene)
    setup_seconds = time.perf_counter() - setup_started
    frames, skin_count = len(weights), len(model["skin_vertices"])
    records = frame_records(frames)
    records["skull_transforms"] = np.asarray(head_transforms, float)
    records["jaw_transforms"] = np.stack([head @ jaw_transform(np.asarray(model["jaw_frame"]), w @ player.shape_jaw)
                                          for head, w in zip(head_transforms, weights)])
    with contextlib.ExitStack() as closing:
        # The skin goes to disk frame by frame, as the Phace path's (physics/skin_store.py).
        store = closing.enter_context(SkinStore(result_path.with_name(f".{result_path.stem}.skin.npy"), frames,
                                                skin_count))
        cache = closing.enter_context(Pc2Writer(result_path.with_suffix(".pc2"), skin_count,
                                                start_frame=cache_start_frame))
        for frame in range(frames):
            x, report = player.frame(weights[frame], head=head_transforms[frame], frame=frame)
            filter_started = time.perf_counter()
            shown = player.shown_skin(x, weights[frame], detail, skin_filter)
            determinants = np.linalg.det(player.mesh.deformation_gradients(x))
            values = {"converged": report.converged, "newton_iterations": report.iterations,
                      "frame_seconds": report.seconds + (time.perf_counter() - filter_started),
                      "inverted_tets": int((determinants <= 0).sum()),
                      "smallest_volume_ratio": float(determinants.min(initial=1.0)),
                      "penetration_depth_max": shown.depth_m, "filter_pinned": shown.pinned,
                      "filter_guarded": shown.guarded,
                      "contacts": 0 if player.contact is None else player.contact.last_touching}
            for name, value in values.items():
                records[name][frame] = value
            store.write(frame, shown.skin)
            cache.append(shown.skin / cache_metres_per_unit)
            progress({"frame": frame + 1, "frames": frames, "converged": bool(report.converged),
                      "newton_iterations": int(report.iterations),
                      "seconds": round(float(values["frame_seconds"]), 3),
                      "inverted_tets": values["inverted_tets"], "setup_seconds": round(setup_seconds, 3),
                      **({} if player.scene is None else {"contacts": int(values["contacts"]),
                                                          "penetration_depth_max_mm": round(1e3 * shown.depth_m, 4)}),
                      **({} if report.converged else {"reason": _unconverged_reason(player, report)})})
        result = AnimationResult(skin_positions=StoredArray(result_path, "skin_positions", store.shape), fps=float(fps),
                                 **records)
        result.write_streaming_skin(result_path, store)
    store.path.unlink()
    return result
