"""Issue 5 acceptance scenarios: lips against teeth and lips, a headset shell, a finger.

Lip scenario: a short animation of shape-key weights whose *plain* blendshape result
(rest + Σ w_j delta_j, bones at b = Σ w_j b_j) pushes skin into the teeth proxies and
through the other lip, compared with the simulated result (fit → blend → FaceSimulator
with ``CollisionScene(model, teeth=True, lips=True)``). Per frame it prints the plain
penetrating vertex count and depth, the simulated depth (measured again with
``CollisionScene.measure`` on the final skin), contacts, rounds, the lips' worst offset
behind the mouth-side surface of the teeth, and the frame's seconds. The demo head (default) is built at
15,000 target tets and its needed shapes fitted in-process; ICT (or any model) comes as
``--model MODEL.npz --fit FIT.npz`` (the rig for the plain blend: ``--rig RIG.npz``, or the
ICT FaceKit rig from tests/ict_data.py when the model has its vertex count).

    .venv/bin/python bench/collision_scenarios.py [--picture docs/images/collisions/lip_contact_demo.png]
    .venv/bin/python bench/collision_scenarios.py --model /tmp/ict_g45.npz --fit /tmp/ict_g45_fit.npz \
        --picture docs/images/collisions/lip_contact_ict.png \
        --section-picture docs/images/collisions/lip_sections_ict.png   # where the lips end, in section
    .venv/bin/python bench/collision_scenarios.py --headset [--model MODEL.npz]   # the shell and the finger

Headset scenario: a curved visor with thickness (a closed shell built from a smoothed upper
envelope of the face, saved as MESH.npz and read back with ``load_mesh_collider``) moved in
over a few frames until it presses ``--press`` mm past first contact, and a 20 mm sphere
pushed into the cheek; it prints depth, tet volume change, the smallest tet volume ratio
and the bulge of the skin around each contact.

The functions are also the test suite's scenario definitions (tests/test_collision_scenarios.py).
Use NUMBA_NUM_THREADS=1 on a shared machine.
"""
from __future__ import annotations

import argparse
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
if str(REPOSITORY) not in sys.path:
    sys.path.insert(0, str(REPOSITORY))

from solver.collisions import BonePose, CollisionScene  # noqa: E402
from solver.collisions.sdf import SphereCollider  # noqa: E402
from solver.collisions.teeth_shadow import forward_spans  # noqa: E402
from solver.geometry import triangle_normals_areas  # noqa: E402
from solver.inverse.blend import blend  # noqa: E402
from solver.model_builder.tetmesh import signed_volumes  # noqa: E402
from solver.model_file import model_head_axes  # noqa: E402
from solver.physics.bones import bone_transforms  # noqa: E402
from solver.physics.simulator import FaceSimulator, SimulationSettings  # noqa: E402

MM = 1e3
ACCEPTED_DEPTH = 0.2e-3             # m: the bound on any penetration
ACCEPTED_VOLUME_CHANGE = 0.02       # the bound on the tissue volume change

# ----------------------------------------------------------------------------- lip animation

# Weights of the lip scenario, as (name, value per frame). Frame 0 is neutral; the jaw opens
# with the lips closing over it (jawOpen + mouthClose is the closed mouth by the ARKit
# convention); then the jaw closes while mouthClose stays on and the lower lip rolls in,
# so the plain blend drives each lip through the other and the lips into the teeth.
DEMO_LIP_WEIGHTS = {
    "jawOpen":        [0.0, 0.5, 1.0, 0.85, 0.70, 0.60],
    "mouthClose":     [0.0, 0.5, 1.0, 1.00, 1.00, 1.00],
    "mouthRollLower": [0.0, 0.0, 0.0, 0.20, 0.40, 0.60],
}
# ICT (ARKit set): the jaw opening under mouthClose, then closing while the lower lip rolls in
# and the lips press; then pucker with the jaw forward, and pucker with the mouth nearly shut.
# Every frame's blend keeps the activations positive definite with the all-shape ICT fit
# (mouthClose at 1 with any other lip key does not: mouthClose is fitted on top of jawOpen).
ICT_LIP_WEIGHTS = {
    "jawOpen":        [0.0, 0.5, 1.0, 0.7, 0.4, 0.0, 0.3],
    "mouthClose":     [0.0, 0.5, 1.0, 0.7, 0.4, 0.0, 0.3],
    "mouthRollLower": [0.0, 0.0, 0.0, 0.5, 0.8, 0.0, 0.0],
    "mouthPress_L":   [0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0],
    "mouthPress_R":   [0.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0],
    "mouthPucker":    [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.7],
    "jawForward":     [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.7],
}


def weight_matrix(schedule: dict, names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(T, K) weights in the order of `names` (shapes of the schedule missing there are left
    out), and the schedule's names that were used."""
    used = [name for name in schedule if name in names]
    frames = len(next(iter(schedule.values())))
    weights = np.zeros((frames, len(names)))
    for name in used:
        weights[:, list(names).index(name)] = schedule[name]
    return weights, used


def shape_deltas(rig, names: Sequence[str]) -> np.ndarray:
    """(K, V, 3) rig deltas of `names` (rig: a FaceRig)."""
    rig_names = [str(n) for n in rig.shape_key_names]
    return np.stack([np.asarray(rig.shape_key_deltas[rig_names.index(name)]) for name in names])


def bone_poses(model, jaw: np.ndarray, head_transforms: Optional[np.ndarray] = None) -> list[BonePose]:
    """One BonePose per frame for the blended jaw parameters (T, 5)."""
    heads = np.tile(np.eye(4), (len(jaw), 1, 1)) if head_transforms is None else head_transforms
    poses = []
    for frame, (head, b) in enumerate(zip(heads, jaw)):
        skull, jaw_transform = bone_transforms(head, model["jaw_frame"], b)
        poses.append(BonePose(skull=skull, jaw=jaw_transform, frame=frame))
    return poses


def plain_blend(model, deltas: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """(T, V, 3) the plain blendshape skin: rest + Σ_j w_j delta_j."""
    return np.asarray(model["skin_vertices"])[None] + np.einsum("tk,kvd->tvd", weights, deltas)


# ----------------------------------------------------------------------------- lips behind teeth

def teeth_spans(scene: CollisionScene, pose: BonePose, points: np.ndarray, axes: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """(front, rear), each (proxies, P): per teeth proxy, the forward coordinate (head frame, m)
    where the line through each point along the head's forward axis enters the proxy (its
    labial side) and where it leaves it (its mouth side); NaN where the line misses it."""
    spans = [forward_spans(vertices, triangles, points, axes)
             for vertices, triangles in scene.posed_proxies(pose).values()]
    return (np.array([front for front, _ in spans]).reshape(len(spans), len(points)),
            np.array([rear for _, rear in spans]).reshape(len(spans), len(points)))


def lip_vertices(scene: CollisionScene) -> np.ndarray:
    return np.union1d(scene.lips.upper_vertices, scene.lips.lower_vertices)


def labial_lip_vertices(scene: CollisionScene, model, axes: np.ndarray) -> np.ndarray:
    """The lip vertices in front of the teeth at rest (in front of the frontmost proxy surface
    on their forward line, or beside, above or below the teeth as seen from the front). The
    others — on the demo head the inner lining, which the rig runs through and behind the
    teeth — are on the mouth side already in the neutral face, so "ending behind the teeth"
    does not apply to them."""
    lips = lip_vertices(scene)
    return lips[(rest_behind_teeth(scene, model, axes, lips, "front") <= 0.0).all(axis=0)]


def behind_teeth(scene: CollisionScene, skin: np.ndarray, pose: BonePose, axes: np.ndarray,
                 vertices: np.ndarray, allowance: np.ndarray, surface: str = "front") -> np.ndarray:
    """(len(vertices),) how far (m) each lip vertex lies behind a teeth row its line along the
    head's forward axis passes through, beyond what it did at rest (`allowance` (proxies,
    len(vertices)): ``rest_behind_teeth`` with the same `surface`); ≤ 0: behind neither.

    `surface` "front": behind the row's front (labial) surface — inside the row or anywhere
    past it, the strict measure the demo test holds to 0.2 mm. "rear": behind its mouth-side
    (lingual) surface, i.e. in the mouth. On ICT the two differ where a lip meets the thin tip
    of an incisor: a lower lip rolled in and closed on lies under the upper incisors' edge,
    behind their front but not in the mouth."""
    front, rear = teeth_spans(scene, pose, skin[vertices], axes)
    behind = (front if surface == "front" else rear) - skin[vertices] @ axes[2]
    return np.where(np.isfinite(behind), behind - np.maximum(allowance, 0.0), -np.inf).max(axis=0)


def rest_behind_teeth(scene: CollisionScene, model, axes: np.ndarray, vertices: np.ndarray,
                      surface: str = "front") -> np.ndarray:
    """(proxies, len(vertices)) the rest skin's ``behind_teeth`` per row (0 where the line misses it)."""
    rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    front, rear = teeth_spans(scene, BonePose(np.eye(4), np.eye(4), 0), rest[vertices], axes)
    span = front if surface == "front" else rear
    return np.where(np.isfinite(span), span - rest[vertices] @ axes[2], 0.0)


class RecordingScene:
    """A CollisionScene wrapper that keeps every teeth plane the solver is handed (for the
    check that no plane points into the mouth). Same interface: names, colliders, detect,
    crossings, measure."""

    def __init__(self, scene: CollisionScene):
        self.scene = scene
        self.names = scene.names
        self.teeth_indices = [i for i, name in enumerate(scene.names) if name.endswith("_teeth")]
        self.colliders = scene.colliders
        self.teeth_planes: list = []          # (frame, vertex, point, normal, collider)

    def detect(self, skin_positions, pose, margin: float = 0.0):
        return self._record(self.scene.detect(skin_positions, pose, margin=margin), pose)

    def crossings(self, skin_before, pose_before, skin_after, pose_after):
        return self._record(self.scene.crossings(skin_before, pose_before, skin_after, pose_after), pose_after)

    def _record(self, planes, pose):
        teeth = np.isin(planes.collider, self.teeth_indices)
        if teeth.any():
            self.teeth_planes.append((pose.frame, planes.vertex[teeth], planes.point[teeth], planes.normal[teeth],
                                      planes.collider[teeth], pose))
        return planes

    def measure(self, skin_positions, pose):
        return self.scene.measure(skin_positions, pose)

    def posed_proxies(self, pose):
        return self.scene.posed_proxies(pose)


def inward_teeth_planes(recording: RecordingScene, model) -> tuple[int, int, float]:
    """(planes, planes pointing into the mouth, largest inward component) over every recorded
    teeth plane. Judged in the proxy's rest frame (point and normal carried back by the bone's
    inverse transform), as teeth.labial_region defines the region: inward = the normal's part
    across the head's up axis points towards the arch centre (the rest proxy's bounding-box
    centre) instead of away from it."""
    up = model_head_axes(model)[1]
    teeth = {collider.name: collider for collider in recording.scene.teeth}
    total, inward, worst = 0, 0, 0.0
    for frame, vertex, point, normal, collider, pose in recording.teeth_planes:
        for index in np.unique(collider):
            teeth_collider = teeth[recording.names[index]]
            transform = teeth_collider.transform(pose)
            rotation, translation = transform[:3, :3], transform[:3, 3]
            mine = collider == index
            local_point = (point[mine] - translation) @ rotation
            local_normal = normal[mine] @ rotation
            vertices = teeth_collider.proxy.vertices
            radial = local_point - 0.5 * (vertices.min(0) + vertices.max(0))
            radial -= np.outer(radial @ up, up)
            radial /= np.maximum(np.linalg.norm(radial, axis=1, keepdims=True), 1e-12)
            outward = np.einsum("ij,ij->i", local_normal, radial)
            total += int(mine.sum())
            inward += int((outward < 0).sum())
            worst = max(worst, float(-outward.min(initial=0.0)))
    return total, inward, worst


# ----------------------------------------------------------------------------- running the lip scenario

@dataclass
class LipFrame:
    plain_count: int
    plain_depth: float                 # m
    plain_per_collider: dict
    simulated_depth: float             # m, CollisionScene.measure on the displayed skin (detail included)
    simulated_count: int
    reported_depth: float              # m, FrameResult.penetration_depth_max
    contacts: int
    rounds: int
    anchored: int                      # vertices the tissue cannot push, projected out for display
    converged: bool
    seconds: float
    behind_plain: float                # m, worst labial lip vertex behind the front of a teeth row
    behind_simulated: float
    in_mouth_plain: float              # m, worst labial lip vertex behind the mouth side of a teeth row
    in_mouth_simulated: float
    anchored_depth: float = 0.0        # m, how deep the anchored vertices were (embedded skin)
    physics_depth: float = 0.0         # m, the embedded skin's pushable vertices (drive ≥ 0.25): what the tissue holds
    projected: int = 0                 # displayed-skin vertices the display projection moved
    projection_max: float = 0.0        # m, its largest move
    all_skin_depth: float = 0.0        # m, displayed skin with every skin vertex tested against the teeth
    behind_tissue: float = 0.0         # m, as behind_simulated on the embedded skin (no detail offset, no projection)
    in_mouth_tissue: float = 0.0       # m, as in_mouth_simulated on the embedded skin
    in_mouth_tissue_vertices: int = 0  # embedded-skin lip vertices more than ACCEPTED_DEPTH in the mouth


@dataclass
class LipRun:
    names: list
    weights: np.ndarray
    poses: list
    plain: np.ndarray                  # (T,V,3)
    simulated: np.ndarray              # (T,V,3) the displayed skin: embedded + detail + anchored projection
    detail: np.ndarray                 # (T,V,3)
    frames: list = field(default_factory=list)
    recording: Optional[RecordingScene] = None
    positions: list = field(default_factory=list)     # (T,) tet node positions
    tissue: list = field(default_factory=list)        # (T,) the embedded skin (V,3): no detail offset, no projection


def pushable_depth(simulator: FaceSimulator, scene: CollisionScene, pose: BonePose) -> float:
    """How deep (m) the embedded skin — the tissue's own result, before the detail offset and the
    display projection — lies in the scene at the vertices the tissue is asked to hold out:
    pushable ones (drive along the plane normal ≥ 0.25), measured beyond what the compression limit lets a plane give
    up (skin_embedding.MAX_TISSUE_COMPRESSION)."""
    response = simulator.contact_response
    planes = scene.detect(simulator.skin_positions(), pose)
    planes = planes.subset(response.pushable(planes, pose))
    if not planes.count:
        return 0.0
    given_up = (response.skin_over_bone.compression_limit(planes, pose) if response.skin_over_bone is not None
                else np.zeros(planes.count))
    return float(np.maximum(planes.depth - given_up, 0.0).max())


def run_lip_scenario(model, fit, deltas_of, schedule: dict, scene: CollisionScene,
                     settings: Optional[SimulationSettings] = None, progress=print,
                     all_skin_scene: Optional[CollisionScene] = None) -> LipRun:
    """Plain blend vs fit → blend → FaceSimulator(collisions=scene) for the schedule's weights,
    with the fit's detail residual as each frame's skin offset (so the contacts hold the
    displayed skin out, as `animate` does). `deltas_of(names)` gives the rig's (K,V,3) deltas
    of the named shapes. `all_skin_scene` (optional): a scene testing every skin vertex against
    the teeth, measured on the displayed skin for the record."""
    fit_names = [str(n) for n in fit["shape_key_names"]]
    weights, used = weight_matrix(schedule, fit_names)
    frames = len(weights)
    blended = blend(fit, weights, 24.0, np.tile(np.eye(4), (frames, 1, 1)))
    activations = blended.activations
    poses = bone_poses(model, activations.jaw)
    order = [fit_names.index(name) for name in used]
    plain = plain_blend(model, deltas_of(used), weights[:, order])
    axes = model_head_axes(model)
    lips = labial_lip_vertices(scene, model, axes)
    rest_behind = rest_behind_teeth(scene, model, axes, lips)
    rest_in_mouth = rest_behind_teeth(scene, model, axes, lips, "rear")
    recording = RecordingScene(scene)
    simulator = FaceSimulator(model, settings or SimulationSettings(), collisions=recording)
    run = LipRun(names=used, weights=weights[:, order], poses=poses, plain=plain,
                 simulated=np.empty_like(plain), detail=blended.detail, recording=recording)
    for frame in range(frames):
        plain_measure = scene.measure(plain[frame], poses[frame])
        started = time.perf_counter()
        step = simulator.step(activations.tet_activations(model, frame), activations.jaw[frame],
                              activations.head_transforms[frame], frame=frame, skin_offset=blended.detail[frame])
        seconds = time.perf_counter() - started
        skin = simulator.displayed_skin(blended.detail[frame])
        run.simulated[frame] = skin
        run.positions.append(simulator.positions.copy())
        measured = scene.measure(skin, poses[frame])
        physics_depth = pushable_depth(simulator, scene, poses[frame])
        tissue = simulator.skin_positions()
        run.tissue.append(tissue)
        in_mouth_tissue = behind_teeth(scene, tissue, poses[frame], axes, lips, rest_in_mouth, "rear")
        everything = None if all_skin_scene is None else all_skin_scene.measure(skin, poses[frame])
        record = LipFrame(
            plain_count=plain_measure.penetrating_vertices, plain_depth=plain_measure.max_depth_m,
            plain_per_collider=dict(plain_measure.per_collider), simulated_depth=measured.max_depth_m,
            simulated_count=measured.penetrating_vertices, reported_depth=step.penetration_depth_max,
            contacts=step.contacts, rounds=step.collision_rounds, anchored=step.anchored_vertices,
            converged=step.converged, seconds=seconds,
            behind_plain=float(behind_teeth(scene, plain[frame], poses[frame], axes, lips, rest_behind).max()),
            behind_simulated=float(behind_teeth(scene, skin, poses[frame], axes, lips, rest_behind).max()),
            in_mouth_plain=float(behind_teeth(scene, plain[frame], poses[frame], axes, lips, rest_in_mouth,
                                              "rear").max()),
            in_mouth_simulated=float(behind_teeth(scene, skin, poses[frame], axes, lips, rest_in_mouth,
                                                  "rear").max()),
            anchored_depth=step.anchored_depth_max, physics_depth=physics_depth,
            projected=step.projected_vertices, projection_max=step.projection_max,
            all_skin_depth=np.nan if everything is None else everything.max_depth_m,
            behind_tissue=float(behind_teeth(scene, tissue, poses[frame], axes, lips, rest_behind).max()),
            in_mouth_tissue=float(in_mouth_tissue.max()),
            in_mouth_tissue_vertices=int((in_mouth_tissue > ACCEPTED_DEPTH).sum()))
        run.frames.append(record)
        progress(describe_lip_frame(frame, record))
    return run


def describe_lip_frame(frame: int, record: LipFrame) -> str:
    per = ", ".join(f"{name} {count}" for name, count in record.plain_per_collider.items() if count)
    return (f"frame {frame}: plain {record.plain_count:4d} penetrating ({per or 'none'}), max "
            f"{record.plain_depth * MM:6.3f} mm, lips behind teeth {max(record.behind_plain, 0) * MM:5.2f} mm "
            f"(in the mouth {max(record.in_mouth_plain, 0) * MM:5.2f}) | "
            f"simulated max {record.simulated_depth * MM:6.4f} mm ({record.simulated_count} vertices, reported "
            f"{record.reported_depth * MM:.4f}), behind teeth {max(record.behind_simulated, 0) * MM:.3f} mm "
            f"(in the mouth {max(record.in_mouth_simulated, 0) * MM:.3f}; the tissue's own skin "
            f"{max(record.behind_tissue, 0) * MM:.3f} / {max(record.in_mouth_tissue, 0) * MM:.3f}, "
            f"{record.in_mouth_tissue_vertices} vertices over {ACCEPTED_DEPTH * MM} mm in the mouth), "
            f"{record.contacts} contacts, {record.rounds} rounds, "
            f"{'converged' if record.converged else 'NOT converged'}, {record.seconds:.2f} s; tissue holds its "
            f"pushable skin to {record.physics_depth * MM:.4f} mm, {record.anchored} anchored up to "
            f"{record.anchored_depth * MM:.3f} mm; display projection moved {record.projected} vertices up to "
            f"{record.projection_max * MM:.3f} mm; every skin vertex vs teeth {record.all_skin_depth * MM:.3f} mm")


def lip_section_panels(model, scene: CollisionScene, run: LipRun) -> list:
    """Sections (solver.pictures.lip_sections) of the frames where the tissue's own skin has lip
    vertices more than ACCEPTED_DEPTH in the mouth, each cut through the deepest of them; when no
    frame has any, of the frames whose plain blend has, each cut through the plain blend's
    deepest (or, when neither has any, the frame whose plain blend goes furthest in)."""
    from solver.pictures.lip_sections import LipSectionPanel
    axes = model_head_axes(model)
    lips = labial_lip_vertices(scene, model, axes)
    rest_in_mouth = rest_behind_teeth(scene, model, axes, lips, "rear")
    rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    frames = ([frame for frame, record in enumerate(run.frames) if record.in_mouth_tissue_vertices]
              or [frame for frame, record in enumerate(run.frames) if record.in_mouth_plain > ACCEPTED_DEPTH]
              or [int(np.argmax([record.in_mouth_plain for record in run.frames]))])
    panels = []
    for frame in frames:
        pose, tissue = run.poses[frame], run.tissue[frame]
        in_mouth = behind_teeth(scene, tissue, pose, axes, lips, rest_in_mouth, "rear")
        cut_skin, depth, cut_on = tissue, in_mouth, ""
        if in_mouth.max() <= ACCEPTED_DEPTH:
            cut_skin = run.plain[frame]
            depth = behind_teeth(scene, cut_skin, pose, axes, lips, rest_in_mouth, "rear")
            cut_on = f"\n(cut through the plain blend's deepest: {max(depth.max(), 0.0) * MM:.2f} mm)"
        weights = textwrap.fill(", ".join(f"{name} {weight:.1f}" for name, weight
                                          in zip(run.names, run.weights[frame]) if weight), 46)
        panels.append(LipSectionPanel(
            title=f"frame {frame}: {weights}\n{int((in_mouth > ACCEPTED_DEPTH).sum())} lip vertices in the mouth, "
                  f"up to {max(in_mouth.max(), 0.0) * MM:.2f} mm{cut_on}",
            pose=pose, skins=[("rest", rest, (0.6, 0.6, 0.6)),
                              ("plain blendshapes", run.plain[frame], (0.1, 0.55, 0.1)),
                              ("simulated: the tissue's own skin", tissue, (0.85, 0.1, 0.05))],
            cut_point=cut_skin[lips[int(np.argmax(depth))]], marked=lips[in_mouth > ACCEPTED_DEPTH],
            marked_label=f"lip vertices over {ACCEPTED_DEPTH * MM} mm in the mouth"))
    return panels


def summarise_lip_run(run: LipRun) -> list[str]:
    frames = run.frames
    lines = [
        f"plain blendshapes: {sum(f.plain_count > 0 for f in frames)}/{len(frames)} frames penetrate, "
        f"up to {max(f.plain_count for f in frames)} vertices, deepest {max(f.plain_depth for f in frames) * MM:.3f} mm, "
        f"lips up to {max(max(f.behind_plain, 0) for f in frames) * MM:.2f} mm behind the teeth "
        f"({max(max(f.in_mouth_plain, 0) for f in frames) * MM:.2f} mm in the mouth)",
        f"simulated: deepest {max(f.simulated_depth for f in frames) * MM:.4f} mm (accepted ≤ {ACCEPTED_DEPTH * MM} mm), "
        f"lips behind the teeth ≤ {max(max(f.behind_simulated, 0) for f in frames) * MM:.4f} mm "
        f"(in the mouth ≤ {max(max(f.in_mouth_simulated, 0) for f in frames) * MM:.4f} mm; the tissue's own "
        f"skin ≤ {max(max(f.behind_tissue, 0) for f in frames) * MM:.4f} / "
        f"{max(max(f.in_mouth_tissue, 0) for f in frames) * MM:.4f} mm), "
        f"{sum(not f.converged for f in frames)} unconverged frames, {sum(f.rounds for f in frames)} rounds, "
        f"{sum(f.anchored for f in frames)} anchored, {sum(f.seconds for f in frames):.1f} s in all",
        f"tissue: pushable embedded skin within {max(f.physics_depth for f in frames) * MM:.4f} mm; anchored up to "
        f"{max(f.anchored for f in frames)} per frame, up to {max(f.anchored_depth for f in frames) * MM:.3f} mm; "
        f"display projection up to {max(f.projected for f in frames)} vertices, up to "
        f"{max(f.projection_max for f in frames) * MM:.3f} mm; every skin vertex vs the teeth: "
        f"{max(f.all_skin_depth for f in frames) * MM:.3f} mm",
    ]
    return lines


# ----------------------------------------------------------------------------- the headset shell

def thick_height_field(grid_left, grid_up, inner, thickness, axes, origin):
    """A closed, outward-oriented triangle mesh (vertices (n,3) world m, faces (f,3)) of the
    slab between the height field `inner` (forward coordinate on the grid, head frame, m) and
    inner + thickness: the visor's face-side and outer surfaces joined by four side walls."""
    rows, columns = inner.shape
    left, up = np.meshgrid(grid_left, grid_up, indexing="xy")       # (rows, columns)
    sheets = [np.stack([left, up, inner + offset], -1).reshape(-1, 3) for offset in (0.0, thickness)]
    local = np.concatenate(sheets)
    count = rows * columns
    index = np.arange(count).reshape(rows, columns)
    faces = []
    a, b, c, d = index[:-1, :-1], index[:-1, 1:], index[1:, 1:], index[1:, :-1]
    quads = np.stack([a, b, c, d], -1).reshape(-1, 4)
    # Inner sheet faces towards −forward (towards the face), outer sheet towards +forward.
    faces += [quads[:, [0, 2, 1]], quads[:, [0, 3, 2]]]
    faces += [quads[:, [0, 1, 2]] + count, quads[:, [0, 2, 3]] + count]
    border = np.concatenate([index[0, :], index[1:, -1], index[-1, -2::-1], index[-2:0:-1, 0]])
    following = np.roll(border, -1)
    for p, q in zip(border, following):
        faces.append(np.array([[p, q, q + count], [p, q + count, p + count]]))
    faces = np.concatenate(faces).astype(np.int64)
    world = local @ axes + origin
    volume = np.einsum("ij,ij->i", world[faces[:, 0]], np.cross(world[faces[:, 1]], world[faces[:, 2]])).sum() / 6
    if volume < 0:
        faces = faces[:, ::-1].copy()
    return world, faces


def headset_shell(model, frames: int = 5, press: float = 2.0e-3, clearance: float = 1.0e-3,
                  thickness: float = 6.0e-3, spacing: float = 2.5e-3, reach: float = 6.0e-3):
    """A headset-like visor over the upper face: (vertices (n,3), faces (f,3), transforms (T,4,4)).

    In the head frame, over the eyes and cheekbones (sideways ±60 mm of the nasion, from the
    nose's middle to 25 mm above the brows): the face-side surface is the face's upper
    envelope — per grid node the most forward skin within `reach` — smoothed and `clearance`
    in front of the face; the shell is `thickness` thick. Frame 0 holds it there; it moves
    straight back along the head's forward axis in equal steps to `press` beyond first
    contact in the last frame (and stays)."""
    from scipy.ndimage import gaussian_filter

    axes = model_head_axes(model)
    origin = np.asarray(model["head_origin"], dtype=np.float64)
    landmarks = {str(n): np.asarray(p) for n, p in zip(model["landmark_names"], model["landmark_positions"])}
    local = (np.asarray(model["skin_vertices"]) - origin) @ axes.T
    up_of = lambda name: float((landmarks[name] - origin) @ axes[1])  # noqa: E731
    bottom = 0.5 * (up_of("nose_tip") + up_of("nasion"))
    top = max(up_of(name) for name in landmarks if name.startswith("brow_")) + 0.025
    grid_left = np.arange(-0.060, 0.060 + 1e-9, spacing)
    grid_up = np.arange(bottom, top + 1e-9, spacing)
    inner = np.full((len(grid_up), len(grid_left)), -np.inf)
    front = local[:, 2] > np.percentile(local[:, 2], 50)
    points = local[front]
    for row, up in enumerate(grid_up):
        band = points[np.abs(points[:, 1] - up) < reach]
        for column, left in enumerate(grid_left):
            near = band[np.hypot(band[:, 0] - left, band[:, 1] - up) < reach]
            if len(near):
                inner[row, column] = near[:, 2].max()
    missing = ~np.isfinite(inner)
    if missing.all():
        raise ValueError("no face skin under the headset grid")
    inner[missing] = inner[~missing].min() - 0.01
    envelope = inner.copy()
    inner = np.maximum(gaussian_filter(inner, 1.5, mode="nearest"), envelope) + clearance
    vertices, faces = thick_height_field(grid_left, grid_up, inner, thickness, axes, origin)
    transforms = np.tile(np.eye(4), (frames, 1, 1))
    for frame, back in enumerate(np.linspace(0.0, clearance + press, frames)):
        transforms[frame, :3, 3] = -back * axes[2]
    return vertices, faces, transforms


def save_headset(path, model, **options) -> Path:
    vertices, faces, transforms = headset_shell(model, **options)
    path = Path(path)
    np.savez(path, vertices=vertices, faces=faces, transforms=transforms)
    return path


def cheek_finger(model, frames: int = 5, radius: float = 0.010, depth: float = 0.003) -> SphereCollider:
    """A 20 mm sphere (a fingertip) touching the left cheek in frame 0, `depth` deep in the last."""
    landmarks = {str(n): np.asarray(p) for n, p in zip(model["landmark_names"], model["landmark_positions"])}
    skin = np.asarray(model["skin_vertices"])
    target = 0.5 * (landmarks["cheekbone_L"] + landmarks["mouth_corner_L"])
    vertex = int(np.argmin(np.linalg.norm(skin - target, axis=1)))
    normal = vertex_normals(skin, model["skin_triangles"])[vertex]
    transforms = np.tile(np.eye(4), (frames, 1, 1))
    for frame, offset in enumerate(np.linspace(radius, radius - depth, frames)):
        transforms[frame, :3, 3] = skin[vertex] + offset * normal
    return SphereCollider(name="finger", centre=np.zeros(3), radius=radius, transforms=transforms)


def vertex_normals(positions, triangles):
    normals, areas = triangle_normals_areas(positions, triangles)
    summed = np.zeros_like(positions)
    for corner in range(3):
        np.add.at(summed, triangles[:, corner], normals * areas[:, None])
    return summed / np.maximum(np.linalg.norm(summed, axis=1, keepdims=True), 1e-30)


@dataclass
class PressResult:
    depth: list                      # m per frame, CollisionScene.measure on the displayed skin
    reported: list                   # m per frame, FrameResult.penetration_depth_max
    contacts: list
    rounds: list
    anchored: list
    converged: list
    seconds: list
    physics_depth: list = field(default_factory=list)   # m per frame: the embedded skin's pushable vertices
    projection: list = field(default_factory=list)      # m per frame: the display projection's largest move
    bone_limited: list = field(default_factory=list)    # vertices per frame held at MAX_TISSUE_COMPRESSION
    volume_change: float = 0.0       # total tet volume, last frame / rest − 1
    smallest_volume_ratio: float = 0.0
    pressed_in: float = 0.0          # m, deepest inward skin motion (along the rest normal) in the contact
    bulge: float = 0.0               # m, largest outward skin motion in the ring around the contact
    bulge_mean: float = 0.0          # m, mean outward motion over that ring
    ring_vertices: int = 0
    skin: np.ndarray = None          # (V,3) the last frame's skin
    positions: np.ndarray = None     # (N,3) the last frame's tet nodes


def press_scenario(model, scene, collider_name: str, frames: int, settings: Optional[SimulationSettings] = None,
                   activation=None, progress=print, ring=(0.003, 0.020)) -> PressResult:
    """Run `frames` neutral frames with the scene (which holds the pressing collider
    `collider_name`) and measure the acceptance numbers. The bulge ring: skin vertices not in
    contact whose distance to the nearest contact vertex lies in `ring` (m)."""
    simulator = FaceSimulator(model, settings or SimulationSettings(), collisions=scene)
    activation = np.tile(np.eye(3), (len(model["tets"]), 1, 1)) if activation is None else activation
    out = PressResult([], [], [], [], [], [], [])
    pose = None
    for frame in range(frames):
        started = time.perf_counter()
        step = simulator.step(activation, np.zeros(5), np.eye(4), frame=frame)
        seconds = time.perf_counter() - started
        pose = BonePose(step.skull_transform, step.jaw_transform, frame)
        measured = scene.measure(simulator.displayed_skin(), pose)
        physics = pushable_depth(simulator, scene, pose)
        for key, value in (("depth", measured.max_depth_m), ("reported", step.penetration_depth_max),
                           ("contacts", step.contacts), ("rounds", step.collision_rounds),
                           ("anchored", step.anchored_vertices), ("converged", step.converged),
                           ("seconds", seconds), ("physics_depth", physics), ("projection", step.projection_max),
                           ("bone_limited", step.bone_limited_vertices)):
            getattr(out, key).append(value)
        progress(f"frame {frame}: displayed skin {measured.max_depth_m * MM:.4f} mm deep ({measured.per_collider}), "
                 f"reported {step.penetration_depth_max * MM:.4f} mm; pushable embedded skin {physics * MM:.4f} mm; "
                 f"{step.contacts} contacts, {step.collision_rounds} rounds, {step.anchored_vertices} anchored, "
                 f"{step.bone_limited_vertices} held at the compression limit, projection {step.projected_vertices} "
                 f"vertices up to {step.projection_max * MM:.3f} mm, "
                 f"{'converged' if step.converged else 'NOT converged: ' + step.reason}, {seconds:.2f} s")
    rest_positions = np.asarray(model["rest_positions"], dtype=np.float64)
    positions = simulator.positions.reshape(-1, 3)
    rest_volumes = signed_volumes(rest_positions, model["tets"])
    volumes = signed_volumes(positions, model["tets"])
    out.volume_change = float(volumes.sum() / rest_volumes.sum() - 1.0)
    out.smallest_volume_ratio = float((volumes / rest_volumes).min())
    skin = simulator.displayed_skin()
    out.skin, out.positions = skin, positions.copy()
    rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    normals = vertex_normals(rest, np.asarray(model["skin_triangles"]))
    outward = np.einsum("ij,ij->i", skin - rest, normals)
    # The contact: skin vertices on or within 0.05 mm of the collider at the end.
    index = scene.names.index(collider_name)
    collider = scene.colliders[index]
    near = _near_collider(collider, skin, pose, 0.05e-3)
    if len(near):
        out.pressed_in = float(-outward[near].min())
        from scipy.spatial import cKDTree
        distance, _ = cKDTree(rest[near]).query(rest)
        in_ring = (distance > ring[0]) & (distance < ring[1])
        in_ring[near] = False
        out.ring_vertices = int(in_ring.sum())
        if in_ring.any():
            out.bulge = float(outward[in_ring].max())
            out.bulge_mean = float(outward[in_ring].mean())
    return out


def _near_collider(collider, skin, pose, distance, mask=False):
    """Skin vertices inside `collider` or less than `distance` outside it: by the signed
    distance of an analytic collider, else by detecting the skin moved `distance` towards the
    prop's centre as well (mesh props)."""
    if hasattr(collider, "signed_distance"):
        inside = collider.signed_distance(skin, pose.frame).value < distance
    else:
        found = collider.detect(skin, pose, 0)
        inside = np.zeros(len(skin), bool)
        inside[found.vertex] = True
        # Vertices just outside: probe the skin pushed towards the prop by `distance`.
        transform = collider.transform_at(pose.frame)
        centre = collider.vertices.mean(0) @ transform[:3, :3].T + transform[:3, 3]
        towards = centre - skin
        towards /= np.maximum(np.linalg.norm(towards, axis=1, keepdims=True), 1e-12)
        probe = collider.detect(skin + distance * towards, pose, 0)
        inside[probe.vertex] = True
    return inside if mask else np.flatnonzero(inside)


def describe_press(name: str, result: PressResult) -> list[str]:
    return [f"{name}: deepest {max(result.depth) * MM:.4f} mm over {len(result.depth)} frames (accepted ≤ "
            f"{ACCEPTED_DEPTH * MM} mm; reported {max(result.reported) * MM:.4f} mm), contacts {result.contacts}, "
            f"rounds {result.rounds}, anchored {result.anchored}, held at the compression limit {result.bone_limited}, "
            f"{sum(not c for c in result.converged)} unconverged, pushable embedded skin within "
            f"{max(result.physics_depth, default=0.0) * MM:.4f} mm, display projection up to "
            f"{max(result.projection, default=0.0) * MM:.3f} mm, "
            f"{sum(result.seconds):.1f} s",
            f"{name}: tet volume change {result.volume_change * 100:+.3f} % (accepted ±{ACCEPTED_VOLUME_CHANGE * 100:.0f} %), "
            f"smallest tet volume ratio {result.smallest_volume_ratio:.3f}, skin pressed in "
            f"{result.pressed_in * MM:.2f} mm, bulge around it max {result.bulge * MM:.3f} mm / mean "
            f"{result.bulge_mean * MM:.3f} mm over {result.ring_vertices} ring vertices"]


# ----------------------------------------------------------------------------- main

def demo_model(target_tets: int):
    from solver.demo_head import make_demo_rig
    from solver.model_builder.builder import BuildOptions, build_model
    rig = make_demo_rig()
    return build_model(rig, BuildOptions(target_tets=target_tets)), rig


def rig_for(model, rig_path: Optional[Path]):
    from solver.rig import load_rig
    if rig_path is not None:
        return load_rig(rig_path)
    sys.path.insert(0, str(REPOSITORY / "tests"))
    from tests.ict_data import ict_available, load_ict_rig
    if ict_available():
        rig = load_ict_rig()
        if len(rig.vertices) == len(model["skin_vertices"]):
            return rig
    from solver.demo_head import make_demo_rig
    rig = make_demo_rig()
    if len(rig.vertices) == len(model["skin_vertices"]):
        return rig
    raise SystemExit("give --rig RIG.npz: the model's skin matches neither the ICT rig nor the demo head")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="MODEL.npz (default: the demo head built at --target-tets)")
    parser.add_argument("--fit", type=Path, help="FIT.npz of the model (default: fit the needed demo shapes)")
    parser.add_argument("--rig", type=Path, help="RIG.npz of the model, for the plain blendshapes")
    parser.add_argument("--target-tets", type=int, default=15000)
    parser.add_argument("--picture", type=Path, help="write the before/after picture here")
    parser.add_argument("--headset", action="store_true", help="run the headset shell and cheek finger instead")
    parser.add_argument("--press", type=float, default=2.0, help="headset press beyond first contact, mm")
    parser.add_argument("--save-model", type=Path, help="save the built demo model here")
    parser.add_argument("--save-fit", type=Path, help="save the demo fit here")
    parser.add_argument("--frames", type=int, help="run only the first FRAMES frames of the lip animation")
    parser.add_argument("--save-run", type=Path, help="save plain and simulated skin, poses and tet positions (npz)")
    parser.add_argument("--section-picture", type=Path,
                        help="write sagittal sections of the frames with lip vertices in the mouth here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if args.model:
        from solver.model_file import load_model
        model = load_model(args.model)
        rig = rig_for(model, args.rig)
    else:
        model, rig = demo_model(args.target_tets)
        if args.save_model:
            from solver.model_file import save_model
            save_model(args.save_model, model)
    print(f"model: {len(model['tets'])} tets, {len(model['skin_vertices'])} skin vertices "
          f"({time.perf_counter() - started:.1f} s)")

    if args.headset:
        run_headset(model, args.press * 1e-3)
        return

    fit_names = [str(n) for n in rig.shape_key_names]
    ict = "mouthPress_L" in fit_names
    schedule = ICT_LIP_WEIGHTS if ict else DEMO_LIP_WEIGHTS
    if args.frames:
        schedule = {name: values[:args.frames] for name, values in schedule.items()}
    if args.fit:
        from solver.inverse.fit_file import load_fit
        fit = load_fit(args.fit, model)
    else:
        from solver.inverse.shapes import fit_shapes
        needed = [name for name in schedule if name in fit_names]
        started = time.perf_counter()
        fit = fit_shapes(model, rig, needed, jobs=1)
        print(f"fitted {', '.join(needed)} in {time.perf_counter() - started:.1f} s; errors (mean/95th/max mm): "
              + "; ".join(f"{n} {np.round(e, 2).tolist()}" for n, e in zip(fit["shape_key_names"], fit["fit_error_mm"])))
        if args.save_fit:
            from solver.inverse.fit_file import save_fit
            save_fit(args.save_fit, fit)
    started = time.perf_counter()
    scene = CollisionScene(model, teeth=True, lips=True)
    print(f"scene {scene.names} in {time.perf_counter() - started:.1f} s")
    run = run_lip_scenario(model, fit, lambda names: shape_deltas(rig, names), schedule, scene)
    for line in summarise_lip_run(run):
        print(line)
    total, inward, worst = inward_teeth_planes(run.recording, model)
    print(f"teeth planes handed to the solver: {total}, pointing into the mouth: {inward} "
          f"(largest inward component {worst:.3f})")
    if args.save_run:
        np.savez(args.save_run, plain=run.plain, simulated=run.simulated, detail=run.detail,
                 positions=np.stack(run.positions), tissue=np.stack(run.tissue), names=np.array(run.names),
                 weights=run.weights, skull=np.stack([p.skull for p in run.poses]),
                 jaw=np.stack([p.jaw for p in run.poses]))
    if args.picture:
        from solver.pictures.contact_frames import picture_contact_frames
        frame = int(np.argmax([f.plain_count for f in run.frames]))
        path = picture_contact_frames(model, scene, run.plain[frame], run.simulated[frame], run.poses[frame],
                                      args.picture, title=f"{'ICT FaceKit' if ict else 'Demo head'}, frame "
                                      f"{frame}: " + ", ".join(f"{n} {w:.2f}" for n, w in
                                                               zip(run.names, run.weights[frame]) if w))
        print(f"picture: {path}")
    if args.section_picture:
        from solver.pictures.lip_sections import picture_lip_sections
        path = picture_lip_sections(model, scene, lip_section_panels(model, scene, run), args.section_picture,
                                    title=f"{'ICT FaceKit' if ict else 'Demo head'}: lips and teeth in sagittal "
                                          f"section (face to the left)")
        print(f"section picture: {path}")


def run_headset(model, press: float, frames: int = 5):
    import tempfile
    from solver.collisions import load_mesh_collider
    with tempfile.TemporaryDirectory() as folder:
        path = save_headset(Path(folder) / "headset.npz", model, frames=frames, press=press)
        shell = load_mesh_collider(path)
    print(f"headset shell: {len(shell.vertices)} vertices, {len(shell.faces)} faces, {frames} frames, "
          f"pressed {press * MM:.1f} mm past first contact")
    scene = CollisionScene(model, teeth=True, lips=True, colliders=[shell])
    for line in describe_press("headset", press_scenario(model, scene, "headset", frames)):
        print(line)
    finger = CollisionScene(model, teeth=True, lips=True, colliders=[cheek_finger(model, frames)])
    for line in describe_press("finger", press_scenario(model, finger, "finger", frames)):
        print(line)


if __name__ == "__main__":
    main()
