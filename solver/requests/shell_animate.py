"""One shell-animate request: shape-key weights played through the interactive shell (paper 001
§3; solver/shell/forward.py), with optional prop colliders, written as `animate` writes.

The command line (`python -m solver shell-animate SHELL.npz WEIGHTS.npz -o RESULT.npz`) and a
job folder (kind `shell-animate`) both parse into a `ShellAnimateRequest`, which checks every
field once, before a file is loaded. `run_shell_animate` loads the shell and the weights (the
WEIGHTS.npz `animate` takes: `names`, `weights` (T, K), optional `fps` and `head_transforms`),
steps the shell one frame of 1/fps seconds at a time and writes RESULT.npz and its `.pc2` into
the partial folder beside RESULT, swapping both into place when every frame is done, so a
cancel or crash leaves the earlier result as it was.

RESULT.npz has animate's arrays (solver/physics/animate.py, docs/addon.md): `skin_positions`
(T, V, 3) metres on the rig's vertices (warp + detail, Eq. 14, moved by the head transform),
`converged` (all true: a shell frame is a fixed number of direct solves), `newton_iterations`
(the frame's sub-steps, one solve each), `frame_seconds`, `fps`, `skull_transforms` (the head
transforms), `jaw_transforms` (identity), `penetration_depth_max` (deepest skin vertex inside a
collider after the frame, metres: where the max depth holds the shell in), `contacts` (coarse vertices the colliders moved in
the frame's last sub-step), and zeros for the volumetric model's `inverted_tets`,
`filter_pinned`, `filter_guarded` (ones for `smallest_volume_ratio`).

With `stiffness` (STIFFNESS.npz: `strain`, `bending` per rig vertex, the add-on's repainted
groups) the shell's fitted stiffness is replaced before the simulator factorises its K
(solver/shell/stiffness_maps.py).

Colliders are animate's MESH.npz props (`vertices` m, `faces`, `transforms` (T, 4, 4) per
frame) in the world; the shell runs in the head's frame, so each frame a prop is placed by the
inverse head transform times its own. Props with one shape per frame are refused: the shell
precomputes one distance grid per prop.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from . import fields as check
from .fields import RequestError

MAX_FPS = 1000.0


@dataclass(frozen=True)
class ShellAnimateRequest:
    """Everything `shell-animate` takes; the constructor checks each field (RequestError names it)."""
    shell: Path                             # SHELL.npz (shell-fit)
    weights: Path                           # WEIGHTS.npz
    output: Path                            # RESULT.npz; its .pc2 is written beside it
    colliders: tuple = ()                   # MESH.npz paths
    stiffness: Optional[Path] = None        # STIFFNESS.npz (solver/shell/stiffness_maps.py); None: the fitted maps
    fps: Optional[float] = None             # None: the weights file's (24 when it has none)
    cache_start_frame: float = 1.0          # the .pc2 header's first frame
    cache_metres_per_unit: float = 1.0      # the .pc2 holds skin positions / this (the rig's own units)

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("shell", check.input_file(self.shell, "shell", "SHELL.npz"))
        put("weights", check.input_file(self.weights, "weights", "WEIGHTS.npz"))
        if isinstance(self.colliders, (str, Path)) or not isinstance(self.colliders, (list, tuple)):
            raise RequestError("colliders", f"expected a list of collider files, found {self.colliders!r}",
                               "give a list, empty for none")
        put("colliders", tuple(check.input_file(path, "colliders", "MESH.npz") for path in self.colliders))
        if self.stiffness is not None:
            put("stiffness", check.input_file(self.stiffness, "stiffness", "STIFFNESS.npz"))
        if self.fps is not None:
            put("fps", check.number(self.fps, "fps", 1e-3, MAX_FPS, meaning="frames per second of the weights"))
        put("cache_start_frame", check.number(self.cache_start_frame, "cache_start_frame", -1e6, 1e6,
                                              meaning="the scene frame of the first simulated frame"))
        put("cache_metres_per_unit", check.number(self.cache_metres_per_unit, "cache_metres_per_unit", 1e-6, 1e3,
                                                  meaning="metres per unit of the .pc2 (0.01 for a rig in cm)"))
        put("output", check.output_file(self.output, "output", ".npz",
                                        [self.shell, self.weights, self.stiffness, *self.colliders],
                                        companions=(".pc2",)))


def _load_shell(path: Path):
    from ..shell.shell_file import ShellFormatError, load_shell
    try:
        return load_shell(path)
    except ShellFormatError as error:
        raise RequestError("shell", str(error).rstrip("."), "fit the shell again with shell-fit") from None


def _with_stiffness(shell, path):
    """The shell with the repainted stiffness of STIFFNESS.npz, when one is given."""
    from ..shell.stiffness_maps import StiffnessMapError, load_with_stiffness
    try:
        return load_with_stiffness(shell, path)
    except StiffnessMapError as error:
        raise RequestError("stiffness", str(error).rstrip("."),
                           "give the STIFFNESS.npz exported for this shell's rig, or leave it out for the fitted "
                           "maps") from None


def _load_weights(path: Path, shell):
    """(weights (T, K) in the shell's shape order, fps, head transforms (T, 4, 4))."""
    from ..inverse.blend import load_weights
    from ..physics.inputs import AnimationInputError
    try:
        weights, _, fps, heads = load_weights(path, {"shape_key_names": np.array(shell.shape_names)})
    except AnimationInputError as error:
        problem = str(error).rstrip(".").replace("not in the fit", "not in the shell").replace(
            "fit those shapes", "fit the shell on a rig with those shape keys")
        raise RequestError("weights", f"{Path(path).name}: {problem}",
                           "correct the file as the message says (its keys are in docs/addon.md)") from None
    return weights, fps, heads


def _load_colliders(paths, face_height_m: float):
    from ..npz_files import NpzReadError, read_npz
    from ..shell.colliders import MeshCollider
    loaded = []
    for path in map(Path, paths):
        source = f"mesh collider file {path}"
        try:
            arrays = read_npz(path)
            missing = [key for key in ("vertices", "faces", "transforms") if key not in arrays]
            if missing:
                raise ValueError(f"{source}: missing arrays {missing}; save it with numpy.savez(path, vertices=..., "
                                 f"faces=..., transforms=...)")
            loaded.append(MeshCollider(arrays["vertices"], arrays["faces"], arrays["transforms"], source=source))
        except (OSError, ValueError, NpzReadError) as error:
            raise RequestError("colliders", str(error).rstrip("."), "export the collider again") from None
    return loaded


def partial_folder(output: Path) -> Path:
    """`.<stem>.partial/` beside the output, where the frames grow until all are done."""
    return output.resolve().parent / f".{output.stem}.partial"


def run_shell_animate(request: ShellAnimateRequest, report) -> dict:
    """Simulate the request and write RESULT.npz and its .pc2 (module docstring); the summary:
    outputs (paths), frames, message and, with colliders, penetration_depth_max_mm."""
    from ..pc2 import Pc2Writer
    from ..physics.animate import AnimationResult
    from ..physics.skin_store import SkinStore
    from ..shell.colliders import signed_distance_m
    from ..shell.forward import ShellSimulator
    shell = _with_stiffness(_load_shell(request.shell), request.stiffness)
    weights, file_fps, heads = _load_weights(request.weights, shell)
    fps = request.fps if request.fps is not None else file_fps
    colliders = _load_colliders(request.colliders, shell.face_height_m)
    frames = len(weights)
    started = time.perf_counter()
    simulator = ShellSimulator(shell)
    report.progress(f"shell loaded: {simulator.vertex_count} coarse vertices, {len(shell.fine_rest_m)} rig vertices, "
                    f"factorised in {time.perf_counter() - started:.2f} s; simulating {frames} frames",
                    fraction=0.0, frame=0, frames=frames)
    simulator.reset(weights[0])
    workspace = partial_folder(request.output)
    if workspace.is_symlink() or workspace.is_file():
        workspace.unlink()
    elif workspace.is_dir():
        shutil.rmtree(workspace)
    workspace.mkdir()
    fine_count = len(shell.fine_rest_m)
    records = {"converged": np.ones(frames, bool), "newton_iterations": np.zeros(frames, np.int64),
               "frame_seconds": np.zeros(frames), "penetration_depth_max": np.zeros(frames),
               "contacts": np.zeros(frames, np.int64)}
    every = max(1, frames // 20)
    # The skin goes to disk frame by frame (physics/skin_store.py), as animate's does.
    with SkinStore(workspace / ".result.skin.npy", frames, fine_count) as store, \
            Pc2Writer(workspace / "result.pc2", fine_count, start_frame=request.cache_start_frame) as cache:
        for frame in range(frames):
            frame_started = time.perf_counter()
            head = heads[frame]
            to_head = np.linalg.inv(head)
            for collider in colliders:
                collider.transform = to_head @ collider.transforms[min(frame, len(collider.transforms) - 1)]
            # The first frame starts at its own pose (reset), so it has nothing to catch up on.
            substeps = simulator.step(weights[frame], colliders, dt=1.0 / fps) if frame else 0
            local = simulator.fine_positions_m()
            skin = local @ head[:3, :3].T + head[:3, 3]
            store.write(frame, skin)
            records["frame_seconds"][frame] = time.perf_counter() - frame_started
            records["newton_iterations"][frame] = substeps
            records["contacts"][frame] = simulator.contacts
            if colliders:       # the written skin's own depth (in the head's frame, as the colliders now are)
                deepest = max(float(-signed_distance_m(collider, local).min(initial=np.inf)) for collider in colliders)
                records["penetration_depth_max"][frame] = max(deepest, 0.0)
            cache.append(skin / request.cache_metres_per_unit)
            if (frame + 1) % every == 0 or frame + 1 == frames:
                report.progress(f"frame {frame + 1}/{frames}: {substeps} sub-steps, "
                                f"{1e3 * records['frame_seconds'][frame]:.2f} ms",
                                fraction=round((frame + 1) / frames, 4), frame=frame + 1, frames=frames)
        result = AnimationResult(skin_positions=None, fps=float(fps), skull_transforms=heads,
                                 **{key: records[key] for key in ("converged", "newton_iterations", "frame_seconds",
                                                                  "penetration_depth_max", "contacts")})
        result.write_streaming_skin(workspace / "result.npz", store)
    output, cache_path = request.output, request.output.with_suffix(".pc2")
    os.replace(workspace / "result.pc2", cache_path)
    os.replace(workspace / "result.npz", output)
    with contextlib.suppress(OSError):
        shutil.rmtree(workspace)
    milliseconds = 1e3 * float(np.median(records["frame_seconds"]))
    summary = {"outputs": {"result": str(output), "cache": str(cache_path)}, "frames": int(frames),
               "message": f"wrote {output.name} and {cache_path.name}: {frames} frames through the shell, "
                          f"median {milliseconds:.2f} ms a frame"}
    if colliders:
        deepest_mm = 1e3 * float(records["penetration_depth_max"].max(initial=0.0))
        summary["penetration_depth_max_mm"] = round(deepest_mm, 4)
        summary["message"] += f"; deepest skin vertex inside a collider {deepest_mm:.2f} mm"
    return summary
