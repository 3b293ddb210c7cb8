"""The `animate` command's work: run a model through per-frame activations and write the result.

RESULT.npz holds `skin_positions` (T,V,3) metres on the rig's vertices, `converged` (T,),
`newton_iterations` (T,), `frame_seconds` (T,), `fps`, `skull_transforms` and
`jaw_transforms` (T,4,4) (each bone's rigid world transform from rest, always written),
`penetration_depth_max` (T,) metres (deepest vertex of the written skin inside a collider; 0
without a collision scene), `contacts` (T,) (contact planes pushing), `inverted_tets` (T,)
(tets with det F ≤ 0 at the frame's end), `smallest_volume_ratio` (T,) (the least det F) and
`filter_pinned` (T,) (skin vertices the skin filter pinned onto a collider, or showed as
simulated, because its smoothing and pushes left them inside one; skin_filter.py) and
`filter_guarded` (T,) (skin vertices on triangles the filter's fold guard held flat); it is
written atomically once all frames are done. A `.pc2` point cache of the skin is written beside it frame by frame (each
frame fsynced before the header counts it), so a long run can be watched, and a crash or a
cancel leaves every finished frame playable.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..collisions.contacts import BonePose
from ..npz_files import write_npz_atomically
from ..pc2 import Pc2Writer, read_pc2
from .checkpoint import Checkpoint
from .inputs import ActivationInput, MapsInput
from .maps import MapSettings, MaterialMaps, material_maps, painted_multiplier
from .simulator import FaceSimulator, SimulationSettings
from .skin_filter import SkinFilter
from .skin_store import SkinStore, StoredArray


@dataclass
class AnimationResult:
    skin_positions: np.ndarray      # (T,V,3), or a StoredArray read from RESULT.npz when used
    converged: np.ndarray           # (T,) bool
    newton_iterations: np.ndarray   # (T,) int
    frame_seconds: np.ndarray       # (T,)
    fps: float
    skull_transforms: np.ndarray = None      # (T,4,4)
    jaw_transforms: np.ndarray = None        # (T,4,4)
    penetration_depth_max: np.ndarray = None  # (T,) m
    contacts: np.ndarray = None              # (T,)
    inverted_tets: np.ndarray = None         # (T,) tets with det F ≤ 0
    smallest_volume_ratio: np.ndarray = None  # (T,) least det F over the tets
    filter_pinned: np.ndarray = None         # (T,) vertices the skin filter pinned (collisions)
    filter_guarded: np.ndarray = None        # (T,) vertices the skin filter's fold guard held flat

    def write_streaming_skin(self, path, store) -> None:
        """RESULT.npz with the skin streamed from a SkinStore (skin_store.py) instead of held."""
        arrays = self.arrays()
        del arrays["skin_positions"]
        write_npz_atomically(path, arrays, streamed={"skin_positions": store})

    def arrays(self) -> dict:
        frames = len(self.converged)
        identity = np.tile(np.eye(4), (frames, 1, 1))
        return {"skin_positions": self.skin_positions, "converged": self.converged,
                "newton_iterations": self.newton_iterations, "frame_seconds": self.frame_seconds,
                "fps": np.array(self.fps),
                "skull_transforms": identity if self.skull_transforms is None else self.skull_transforms,
                "jaw_transforms": identity if self.jaw_transforms is None else self.jaw_transforms,
                "penetration_depth_max": (np.zeros(frames) if self.penetration_depth_max is None
                                          else self.penetration_depth_max),
                "contacts": np.zeros(frames, np.int64) if self.contacts is None else self.contacts,
                "inverted_tets": np.zeros(frames, np.int64) if self.inverted_tets is None else self.inverted_tets,
                "smallest_volume_ratio": (np.ones(frames) if self.smallest_volume_ratio is None
                                          else self.smallest_volume_ratio),
                "filter_pinned": np.zeros(frames, np.int64) if self.filter_pinned is None else self.filter_pinned,
                "filter_guarded": np.zeros(frames, np.int64) if self.filter_guarded is None else self.filter_guarded}


def overrides_from_maps(model, maps: Optional[MapsInput], settings: MapSettings = MapSettings()) -> MaterialMaps:
    """Painted per-vertex maps → per-tet plasticity, stiffness, mass and paralysis, each map
    diffused as `settings` says (maps.diffuse_skin_map)."""
    if maps is None:
        return MaterialMaps()
    return material_maps(model, fat=maps.fat, stiffness=painted_multiplier(maps.stiffness, maps.stiffness_range),
                         density=painted_multiplier(maps.density, maps.density_range),
                         paralysis=maps.paralysis, settings=settings, paralysed_muscles=maps.paralysed_muscles)


def frame_records(frames: int) -> dict:
    """RESULT.npz's per-frame arrays other than the skin, empty, for a bake to fill frame by frame
    (this module's `animate` and volumetric_blendshapes/animate.py's player)."""
    return {"converged": np.zeros(frames, dtype=bool), "newton_iterations": np.zeros(frames, dtype=np.int64),
            "frame_seconds": np.zeros(frames), "skull_transforms": np.zeros((frames, 4, 4)),
            "jaw_transforms": np.zeros((frames, 4, 4)), "penetration_depth_max": np.zeros(frames),
            "contacts": np.zeros(frames, dtype=np.int64), "inverted_tets": np.zeros(frames, dtype=np.int64),
            "smallest_volume_ratio": np.ones(frames), "filter_pinned": np.zeros(frames, dtype=np.int64),
            "filter_guarded": np.zeros(frames, dtype=np.int64)}


def animate(model, activations: ActivationInput, result_path, settings: SimulationSettings,
            maps: Optional[MapsInput] = None, map_settings: MapSettings = MapSettings(),
            progress: Callable[[dict], None] = lambda event: None,
            skin_detail: Optional[np.ndarray] = None, collisions=None, rig_offset=None,
            skin_filter: Optional[SkinFilter] = None, checkpoint: Optional[Checkpoint] = None,
            resume: bool = False, cache_start_frame: float = 1.0,
            cache_metres_per_unit: float = 1.0) -> AnimationResult:
    """Run every frame; `skin_detail` (T, V, 3), when given, is added to the simulated skin
    (the shape-key detail the tet mesh cannot carry, inverse/blend.py); with `skin_filter` and
    `rig_offset` (T, V, 3: the plain rig frame less the rest skin, blend.ShapeKeyFrames) the
    skin is shown as the plain rig frame plus the low-passed deviation of the simulation from it
    (skin_filter.py), kept out of the colliders; `collisions`, when
    given, is the collision scene the skin is kept out of (simulator.FaceSimulator) — the
    written skin, detail and the projection of anchored vertices included
    (docs/collisions.md). The painted `maps` act as `map_settings` says (fat scale and
    softening, diffusion into the volume; maps.MapSettings). With a `checkpoint` the state is
    saved after every frame, and with `resume` the run continues from the saved frame, appending
    to the `.pc2` the earlier run left (checkpoint.py); `cache_start_frame` is the `.pc2`'s first
    frame (the scene frame of the first simulated frame) and `cache_metres_per_unit` its unit (the
    .pc2 holds skin positions divided by it: the rig's own units, for a Mesh Cache modifier;
    RESULT.npz stays in metres)."""
    result_path = Path(result_path)
    overrides = overrides_from_maps(model, maps, map_settings)
    simulator = FaceSimulator(model, settings, overrides, collisions=collisions)
    frames = activations.frame_count
    skin_count = len(model["skin_vertices"])
    records = frame_records(frames)
    filtering = skin_filter is not None and rig_offset is not None
    rest_skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    cache_path = result_path.with_suffix(".pc2")
    with contextlib.ExitStack() as closing:
        # The skin goes to disk frame by frame (skin_store.py): memory stays flat however long the take.
        store = closing.enter_context(SkinStore(result_path.with_name(f".{result_path.stem}.skin.npy"), frames,
                                                skin_count, resume=resume))
        first = 0
        if resume:
            first, snapshot, saved, factor = checkpoint.load()
            simulator.resume(snapshot, factor)
            for name, values in saved.items():
                if name in records:
                    records[name][:first] = values
            if not store.reopened:          # a partial bake from before the store: its .pc2, in float32
                for frame, positions in enumerate(read_pc2(cache_path)[0][:first]):
                    store.write(frame, positions * cache_metres_per_unit)
            cache = closing.enter_context(Pc2Writer.continue_after(cache_path, skin_count, first))
        else:
            cache = closing.enter_context(Pc2Writer(cache_path, skin_count, start_frame=cache_start_frame))
        for frame in range(first, frames):
            detail = None if skin_detail is None else skin_detail[frame]
            # With a scene the contacts hold the skin *with* its detail out of the colliders.
            step = simulator.step(activations.tet_activations(model, frame), activations.jaw[frame],
                                  activations.head_transforms[frame], frame=frame,
                                  skin_offset=detail if collisions is not None else None)
            records["skull_transforms"][frame], records["jaw_transforms"][frame] = step.skull_transform, \
                step.jaw_transform
            records["penetration_depth_max"][frame], records["contacts"][frame] = step.penetration_depth_max, \
                step.contacts
            ratios = np.linalg.det(simulator.elasticity.deformation_gradients(step.positions))
            records["inverted_tets"][frame] = int((ratios <= 0.0).sum())
            records["smallest_volume_ratio"][frame] = float(ratios.min(initial=1.0))
            skin = simulator.displayed_skin(detail)
            filter_started = time.perf_counter()
            if filtering:
                head = activations.head_transforms[frame]
                rig = (rest_skin + rig_offset[frame]) @ head[:3, :3].T + head[:3, 3]
                pose = BonePose(step.skull_transform, step.jaw_transform, frame)
                filtered = skin_filter.apply_in_scene(skin, rig, collisions, pose, settings.contact_tolerance)
                skin = filtered.skin
                records["filter_pinned"][frame] = filtered.held_by_colliders
                records["filter_guarded"][frame] = filtered.guarded
                if collisions is not None:      # the written skin's own depth, as the filter keeps it out
                    records["penetration_depth_max"][frame] = collisions.measure(skin, pose,
                                                                                 shown=True).max_depth_m
            records["converged"][frame], records["newton_iterations"][frame] = step.converged, step.iterations
            records["frame_seconds"][frame] = step.seconds + (time.perf_counter() - filter_started)
            store.write(frame, skin)
            cache.append(skin / cache_metres_per_unit)
            if checkpoint is not None:
                linear = simulator.solver.linear_solver
                checkpoint.save(frame + 1, simulator.snapshot(), records, (linear.factorisations, linear.kept_factor))
            progress({"frame": frame + 1, "frames": frames, "converged": bool(step.converged),
                      "newton_iterations": int(step.iterations),
                      "seconds": round(float(records["frame_seconds"][frame]), 3),
                      "inverted_tets": int(records["inverted_tets"][frame]),
                      **({} if collisions is None else {
                          "penetration_depth_max_mm": round(1e3 * records["penetration_depth_max"][frame], 4),
                          "contacts": int(step.contacts), "collision_rounds": int(step.collision_rounds)}),
                      **({} if step.converged else {"reason": step.reason})})
        result = AnimationResult(skin_positions=StoredArray(result_path, "skin_positions", store.shape),
                                 fps=float(activations.fps), **records)
        result.write_streaming_skin(result_path, store)
    store.path.unlink()
    return result

