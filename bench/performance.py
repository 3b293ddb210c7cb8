"""A captured performance through physics, frame by frame, against the plain blendshape rig.

Plays shape-key weights (default: ../shared/data/performance_dev.npz, 1,400 frames at 30 fps
retargeted to ICT's ARKit names) through `animate MODEL FIT WEIGHTS --collisions teeth,lips`
(the same blend → animate path as the command line) on the generic ICT face, and prints per
frame what an artist would see as broken, each against the plain rig frame rest + Σ wₖ Δₖ:

* creased / folded: interior edges of ICT's `face` part (vertices 0–9408, quads split along
  their first diagonal) bent > 30° / > 90° more than the rig bends them (solver/geometry/bends.py);
  how many folds touch a triangle the rig itself squashes below 5 % of its rest area (a sliver);
* lips in teeth: lip vertices deeper than 0.1 mm inside a teeth proxy (after the rest allowance),
  simulated and plain rig, at the frame's jaw;
* distance to the rig: mean / max over the face part, mm;
* inverted tets, skin vertices the skin filter pinned at a collider, Newton iterations,
  seconds (the frame's solve and filter), converged.

What to play (each run starts from the neutral face):
    --frames A:B[:STEP]   a range of the performance (default: all of it), led in by 15 frames
                          from the neutral face when it starts past frame 0;
    --windows             four 40-frame windows where the mouth works hardest — widest jaw,
                          lips closed over an open jaw, strongest smile, strongest pucker —
                          each led in by 15 frames ramping from the neutral face to its first frame.

    .venv/bin/python bench/performance.py --model MODEL.npz --fit FIT.npz [--windows | --frames 0:1400:10]
        [--weights W.npz] [--no-collisions [--no-shortcuts]] [--no-detail] [--json OUT.json] [--curve OUT.png]
        [--pictures DIR [--worst 3 | --picture-frames CLIP:FRAME,…]] [--keep DIR] [--no-skin-filter]
    .venv/bin/python bench/performance.py --model MODEL.npz --fit FIT.npz --kept DIR [DIR …] [--refilter] …

Targets (issue 37), every frame: 0 folded, creased ≤ 0.1 % of the face's edges, 0 lip vertices
deeper than 0.1 mm in the teeth, converged, 0 inverted tets; median seconds per frame ≤ 4.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from bench_info import commit  # noqa: E402
from solver.collisions.contacts import BonePose  # noqa: E402
from solver.collisions.scene import CollisionScene  # noqa: E402
from solver.collisions.teeth import TeethCollider  # noqa: E402
from solver.geometry.bends import SkinBends  # noqa: E402
from solver.inverse.blend import blend, load_weights, skin_filter_for  # noqa: E402
from solver.inverse.fit_file import load_fit  # noqa: E402
from solver.inverse.shapes import rig_shape_deltas  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics.animate import animate  # noqa: E402
from solver.physics.simulator import WITHOUT_SHORTCUTS, SimulationSettings  # noqa: E402
from solver.physics.skin_filter import SkinFilter, default_width  # noqa: E402
from solver.rig import triangulate  # noqa: E402
from tests.ict_data import load_ict_rig  # noqa: E402

DEV_PERFORMANCE = REPOSITORY.parent / "shared" / "data" / "performance_dev.npz"
FACE_PART = (0, 9409)                    # ICT's `face` part, vertices 0–9408
DEEP_IN_TEETH = 1e-4                     # m: a lip vertex deeper than this in a teeth proxy counts
WINDOW, LEAD_IN = 40, 15
CREASE_BUDGET = 0.001                    # creased edges allowed, as a share of the face's edges


def face_bends(rig) -> SkinBends:
    """The interior edges of ICT's `face` part, its quads split along their first diagonal."""
    region = np.zeros(len(rig.vertices), dtype=bool)
    region[slice(*FACE_PART)] = True
    return SkinBends(triangulate(rig.faces), len(rig.vertices), region=region)


def lead_in(first: np.ndarray) -> np.ndarray:
    """LEAD_IN frames ramping from the neutral face to (not including) the weights `first`."""
    return np.linspace(0.0, 1.0, LEAD_IN, endpoint=False)[:, None] * first[None, :]


def windows(names, weights) -> list[tuple[str, np.ndarray]]:
    """The four hardest 40-frame windows, each led in from the neutral face (module docstring)."""
    column = {name: weights[:, names.index(name)] for name in names}
    cues = {"widest jaw": column["jawOpen"],
            "lips closed over an open jaw": np.minimum(column["jawOpen"], column["mouthClose"]),
            "strongest smile": column["mouthSmile_L"] + column["mouthSmile_R"],
            "strongest pucker": column["mouthPucker"] + column["mouthFunnel"]}
    chosen, taken = [], np.zeros(len(weights), dtype=bool)
    for label, cue in cues.items():
        peak = int(np.argmax(np.where(taken, -np.inf, cue)))      # a window no earlier one covers
        start = int(np.clip(peak - WINDOW // 2, 0, len(weights) - WINDOW))
        taken[max(start - WINDOW // 2, 0):start + WINDOW + WINDOW // 2] = True
        chosen.append((f"{label} (frames {start}-{start + WINDOW - 1})",
                       np.concatenate([lead_in(weights[start]), weights[start:start + WINDOW]])))
    return chosen


def play(model, fit, rig, weights_in_fit_order, fps, collisions: bool, detail: bool, skin_filter: bool,
         workdir: Path, label: str, shortcuts: bool = True):
    """Animate one clip as `animate MODEL FIT WEIGHTS` does; the result, the plain rig frames,
    the tets held at the blend floor per frame, and the wall time."""
    frames = len(weights_in_fit_order)
    blended = blend(fit, weights_in_fit_order, fps, np.tile(np.eye(4), (frames, 1, 1)), detail=detail)
    chosen_filter, warning = skin_filter_for(model, blended, enabled=skin_filter)
    if warning:
        print(f"  warning: {warning}")
    scene = CollisionScene(model, teeth=True, lips=True) if collisions else None
    started = time.perf_counter()
    settings = SimulationSettings(fps=fps, **({} if shortcuts else WITHOUT_SHORTCUTS))
    result = animate(model, blended.activations, workdir / f"{label}.npz", settings,
                     skin_detail=blended.detail, collisions=scene, rig_offset=blended.rig_offset,
                     skin_filter=chosen_filter,
                     progress=lambda event: print(f"    frame {event['frame']}/{event['frames']}: "
                                                  f"{event['newton_iterations']} its, {event['seconds']:.1f} s"
                                                  + ("" if event["converged"] else " NOT CONVERGED"),
                                                  flush=True))
    wall = time.perf_counter() - started
    return result, plain_frames(fit, rig, weights_in_fit_order), blended.held_tets, wall


def plain_frames(fit, rig, weights_in_fit_order) -> np.ndarray:
    deltas = rig_shape_deltas(rig, fit["shape_key_names"], dtype=np.float64)
    return rig.vertices[None] + np.einsum("tk,kvd->tvd", weights_in_fit_order, deltas)


def kept_clip(folder: Path, index: int, fit, rig):
    """What play() returns, read back from a clip kept by --keep (wall time unknown: 0)."""
    with np.load(folder / f"clip{index}.npz", allow_pickle=False) as arrays:
        result = SimpleNamespace(**{key: arrays[key] for key in arrays.files})
    for key in ("filter_pinned", "filter_guarded"):     # kept before RESULT.npz recorded them
        if not hasattr(result, key):
            setattr(result, key, np.zeros(len(result.converged), np.int64))
    with np.load(folder / f"clip{index}_weights.npz", allow_pickle=False) as arrays:
        weights = arrays["weights"]
    held = blend(fit, weights, 30.0, np.tile(np.eye(4), (len(weights), 1, 1)), detail=False).held_tets
    return result, plain_frames(fit, rig, weights), held, 0.0


def refilter(model, result, plain, label, jobs: int = 1):
    """Show kept unfiltered frames through the skin filter with teeth and lip contact, as
    animate does (solver/physics/animate.py); the filter's seconds are added to each frame's.
    With jobs > 1 the frames are shared among that many spawned processes (each frame's filter
    is independent of the others; not forked: the judge's numba already runs OpenMP threads)."""
    frames = len(result.converged)
    work = (model, result.skin_positions, plain, result.skull_transforms, result.jaw_transforms)
    chunks = [chunk for chunk in np.array_split(np.arange(frames), max(jobs, 1) * 8) if len(chunk)]
    if jobs > 1:
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_refilter_worker, initargs=(work,)) as pool:
            done = list(pool.map(_refilter_frames, chunks))
    else:
        _refilter_worker(work)
        done = [_refilter_frames(chunk) for chunk in chunks]
    result.filter_pinned = np.zeros(frames, np.int64)
    result.filter_guarded = np.zeros(frames, np.int64)
    for chunk, (skins, pinned, guarded, seconds) in zip(chunks, done):
        result.skin_positions[chunk], result.filter_pinned[chunk], result.filter_guarded[chunk] = skins, pinned, guarded
        result.frame_seconds[chunk] += seconds
    print(f"  clip {label}: shown through the skin filter (width {default_width(model) * 1e3:.1f} mm)")


_REFILTERING = None       # what refilter's workers read: (model, skins, plain, skull, jaw transforms)
_REFILTER_TOOLS = None    # each process's own filter, scene and contact tolerance


def _refilter_worker(work):
    global _REFILTERING, _REFILTER_TOOLS
    _REFILTERING = work
    model = work[0]
    _REFILTER_TOOLS = (SkinFilter.for_model(model), CollisionScene(model, teeth=True, lips=True),
                       SimulationSettings().contact_tolerance)


def _refilter_frames(frames):
    _, skins, plain, skull, jaw = _REFILTERING
    skin_filter, scene, tolerance = _REFILTER_TOOLS
    shown, pinned, guarded, seconds = [], [], [], []
    for frame in frames:
        started = time.perf_counter()
        result = skin_filter.apply_in_scene(skins[frame], plain[frame], scene, BonePose(skull[frame], jaw[frame], frame),
                                            tolerance)
        shown.append(result.skin)
        pinned.append(result.held_by_colliders)
        guarded.append(result.guarded)
        seconds.append(time.perf_counter() - started)
    return np.array(shown), np.array(pinned), np.array(guarded), np.array(seconds)


class FrameJudge:
    """Everything measured on one frame against its plain rig frame."""

    def __init__(self, model, rig):
        self.bends = face_bends(rig)
        self.rest = np.asarray(rig.vertices)
        self.teeth_scene = CollisionScene(model, teeth=True, lips=False, teeth_shadow=False)
        self.face = slice(*FACE_PART)

    def lips_in_teeth(self, skin, pose) -> tuple[int, float]:
        found = self.teeth_scene.detect(skin, pose)
        teeth = np.isin(found.collider, [i for i, c in enumerate(self.teeth_scene.colliders)
                                         if isinstance(c, TeethCollider)])
        depth = np.zeros(len(skin))
        np.maximum.at(depth, found.vertex[teeth], found.depth[teeth])
        return int((depth > DEEP_IN_TEETH).sum()), float(depth.max(initial=0.0))

    def row(self, frame, skin, plain, pose, result, held) -> dict:
        bend = self.bends.count(skin, plain, rest=self.rest)
        lips, deepest = self.lips_in_teeth(skin, pose)
        plain_lips, plain_deepest = self.lips_in_teeth(plain, pose)
        distance = np.linalg.norm(skin[self.face] - plain[self.face], axis=1) * 1e3
        return {"frame": frame, "creased": bend.creased, "folded": bend.folded,
                "folded_on_slivers": bend.folded_on_slivers,
                "worst_bend_deg": round(bend.worst_excess_degrees, 1),
                "lips_in_teeth": lips, "deepest_in_teeth_mm": round(deepest * 1e3, 3),
                "rig_lips_in_teeth": plain_lips, "rig_deepest_in_teeth_mm": round(plain_deepest * 1e3, 3),
                "mean_mm": round(float(distance.mean()), 3), "max_mm": round(float(distance.max()), 2),
                "inverted_tets": int(result.inverted_tets[frame]),
                "smallest_det_f": round(float(result.smallest_volume_ratio[frame]), 3),
                "held_tets": int(held[frame]), "filter_pinned": int(result.filter_pinned[frame]),
                "filter_guarded": int(result.filter_guarded[frame]),
                "newton_iterations": int(result.newton_iterations[frame]),
                "seconds": round(float(result.frame_seconds[frame]), 2), "converged": bool(result.converged[frame])}


def summary(rows, edges) -> dict:
    pick = lambda key: np.array([r[key] for r in rows])       # noqa: E731
    budget = CREASE_BUDGET * edges
    return {"frames": len(rows), "face_edges": edges,
            "creased_median": float(np.median(pick("creased"))), "creased_max": int(pick("creased").max()),
            "frames_over_crease_budget": int((pick("creased") > budget).sum()),
            "folded_max": int(pick("folded").max()), "frames_with_folds": int((pick("folded") > 0).sum()),
            "frames_with_folds_off_slivers": int((pick("folded") > pick("folded_on_slivers")).sum()),
            "frames_with_lips_in_teeth": int((pick("lips_in_teeth") > 0).sum()),
            "deepest_in_teeth_mm": float(pick("deepest_in_teeth_mm").max()),
            "rig_frames_with_lips_in_teeth": int((pick("rig_lips_in_teeth") > 0).sum()),
            "unconverged": int((~pick("converged")).sum()), "inverted_tets_max": int(pick("inverted_tets").max()),
            "max_mm": float(pick("max_mm").max()), "mean_mm_median": float(np.median(pick("mean_mm"))),
            "newton_median": float(np.median(pick("newton_iterations"))),
            "seconds_median": float(np.median(pick("seconds"))), "seconds_max": float(pick("seconds").max())}


def print_summary(label, s):
    print(f"  {label}: {s['frames']} frames; creased median {s['creased_median']:.0f}, max {s['creased_max']} "
          f"({s['frames_over_crease_budget']} frames over {CREASE_BUDGET:.1%} of {s['face_edges']} edges); "
          f"folded max {s['folded_max']} ({s['frames_with_folds']} frames with folds, "
          f"{s['frames_with_folds_off_slivers']} of them off the rig's slivers); lips in teeth "
          f"{s['frames_with_lips_in_teeth']} frames (deepest {s['deepest_in_teeth_mm']:.2f} mm; plain rig "
          f"{s['rig_frames_with_lips_in_teeth']}); {s['unconverged']} not converged; inverted tets max "
          f"{s['inverted_tets_max']}; distance to rig mean {s['mean_mm_median']:.2f} (median), max "
          f"{s['max_mm']:.1f} mm; {s['newton_median']:.0f} Newton its and {s['seconds_median']:.2f} s a frame "
          f"(median), slowest {s['seconds_max']:.1f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--weights", type=Path, default=DEV_PERFORMANCE)
    parser.add_argument("--frames", default=None, help="A:B[:STEP] of the performance (default: all)")
    parser.add_argument("--windows", action="store_true", help="the four hardest windows, each led in from rest")
    parser.add_argument("--no-collisions", action="store_true")
    parser.add_argument("--no-detail", action="store_true")
    parser.add_argument("--no-skin-filter", action="store_true")
    parser.add_argument("--no-shortcuts", action="store_true",
                        help="without issue 41's forward shortcuts (they act only without collisions)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--curve", type=Path, help="PNG of creases, folds and seconds over the frames")
    parser.add_argument("--pictures", type=Path, help="folder for mouth and mouth-corner close-ups of the worst frames")
    parser.add_argument("--worst", type=int, default=3)
    parser.add_argument("--picture-frames", default="",
                        help="draw these frames instead of the worst: CLIP:FRAME,… (clip numbers from 0)")
    parser.add_argument("--keep", type=Path, help="keep each clip's RESULT.npz (and the weights played) here")
    parser.add_argument("--kept", type=Path, nargs="+",
                        help="judge (and draw) the clips kept in these folders by --keep, without simulating; "
                             "several folders are judged as one take (e.g. the two halves of the whole take)")
    parser.add_argument("--refilter", action="store_true",
                        help="with --kept clips played with --no-skin-filter: show them through the skin filter "
                             "as animate would (the simulation does not depend on it)")
    parser.add_argument("--jobs", type=int, default=1, help="with --refilter: processes sharing the frames")
    args = parser.parse_args()

    model = load_model(args.model)
    fit = load_fit(args.fit, model)
    rig = load_ict_rig()
    weights, _, fps, _ = load_weights(args.weights, fit)
    with np.load(args.weights, allow_pickle=False) as data:
        weight_names = [str(n) for n in data["names"]]
        raw = np.asarray(data["weights"], dtype=np.float64)
    kept = []                   # (folder, clip index there) of each clip judged from --kept
    if args.kept:
        clips = []
        for folder in args.kept:
            for index in range(len(list(folder.glob("clip*_weights.npz")))):
                with np.load(folder / f"clip{index}_weights.npz", allow_pickle=False) as arrays:
                    clips.append((str(arrays["label"]), arrays["weights"]))
                kept.append((folder, index))
    elif args.windows:
        fit_names = [str(n) for n in fit["shape_key_names"]]
        order = [weight_names.index(n) if n in weight_names else -1 for n in fit_names]
        clips = []
        for label, clip in windows(weight_names, raw):
            in_fit = np.where(np.array(order) >= 0, clip[:, np.maximum(order, 0)], 0.0)
            clips.append((label, in_fit))
    else:
        start, stop, step = 0, len(weights), 1
        if args.frames:
            parts = [int(p) for p in args.frames.split(":")]
            start, stop = parts[0], parts[1]
            step = parts[2] if len(parts) > 2 else 1
        clip = weights[start:stop:step]
        if start > 0:       # a clip from the middle is led in from the neutral face, as a window is
            clip = np.concatenate([lead_in(clip[0]), clip])
        clips = [(f"frames {start}:{stop}:{step}" + (f" led in by {LEAD_IN}" if start > 0 else ""), clip)]
    judge = FrameJudge(model, rig)
    info = json.loads(str(model["build_info"])) if "build_info" in model else {}
    print(f"commit {commit()}; ICT face: {len(model['tets'])} tets, {len(model['rest_positions'])} nodes, "
          f"{len(rig.vertices)} skin vertices, {len(judge.bends)} interior edges in the face part; "
          f"{args.weights.name} at {fps:g} fps; collisions {'off' if args.no_collisions else 'teeth,lips'}"
          f"{(', shortcuts ' + ('off' if args.no_shortcuts else 'on')) if args.no_collisions else ''}, "
          f"detail {'off' if args.no_detail else 'on'}, "
          f"skin filter {'off' if args.no_skin_filter else 'on'}", flush=True)
    report = {"commit": commit(), "tets": int(len(model["tets"])), "face_edges": len(judge.bends),
              "collisions": not args.no_collisions, "shortcuts": not args.no_shortcuts,
              "lattice_spacing_mm": info.get("lattice_spacing_m", 0) * 1e3, "clips": []}
    everything = []
    worst = []
    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.keep or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        for index, (label, clip) in enumerate(clips):
            print(f"\n{label}: {len(clip)} frames", flush=True)
            if args.kept:
                result, plain, held, wall = kept_clip(*kept[index], fit, rig)
                if args.refilter:
                    refilter(model, result, plain, index, args.jobs)
            else:
                result, plain, held, wall = play(model, fit, rig, clip, fps, not args.no_collisions,
                                                 not args.no_detail, not args.no_skin_filter, workdir, f"clip{index}",
                                                 shortcuts=not args.no_shortcuts)
            if args.keep:
                np.savez(workdir / f"clip{index}_weights.npz", weights=clip, label=np.array(label))
            rows = []
            for frame in range(len(clip)):
                pose = BonePose(result.skull_transforms[frame], result.jaw_transforms[frame], frame)
                row = judge.row(frame, result.skin_positions[frame], plain[frame], pose, result, held)
                rows.append(row)
                print(f"  {frame:>4} creased {row['creased']:>4} folded {row['folded']:>3} "
                      f"({row['folded_on_slivers']} on slivers; worst "
                      f"{row['worst_bend_deg']:5.1f}°) lips in teeth {row['lips_in_teeth']:>3} "
                      f"({row['deepest_in_teeth_mm']:.2f} mm; rig {row['rig_lips_in_teeth']}) rig distance "
                      f"{row['mean_mm']:.2f}/{row['max_mm']:.1f} mm inverted {row['inverted_tets']} det F "
                      f"{row['smallest_det_f']:.2f} held {row['held_tets']} pinned {row['filter_pinned']} "
                      f"guarded {row['filter_guarded']} "
                      f"its {row['newton_iterations']:>3} "
                      f"{row['seconds']:.2f} s{'' if row['converged'] else ' NOT CONVERGED'}")
                chosen = f"{index}:{frame}" in args.picture_frames.split(",")
                if chosen or not args.picture_frames:
                    worst.append((row["folded"], row["creased"], label, frame, result.skin_positions[frame].copy(),
                                  plain[frame], pose))
                if not args.picture_frames:
                    worst = sorted(worst, key=lambda item: (-item[0], -item[1]))[:max(args.worst, 0)]
            clip_summary = summary(rows, len(judge.bends))
            print_summary(label, clip_summary)
            report["clips"].append({"label": label, "wall_seconds": wall, "summary": clip_summary, "rows": rows})
            everything += rows
    report["summary"] = summary(everything, len(judge.bends))
    print_summary("all", report["summary"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.curve:
        from solver.pictures.quality_curve import picture_quality_curve
        print(f"wrote {picture_quality_curve(report, args.curve, CREASE_BUDGET * len(judge.bends))}")
    if args.pictures:
        from solver.pictures.contact_frames import mouth_corner_sheet, picture_contact_frames
        from solver.pictures.raster import save_png
        args.pictures.mkdir(parents=True, exist_ok=True)
        scene = CollisionScene(model, teeth=True, lips=True)
        for rank, (folded, creased, label, frame, skin, plain, pose) in enumerate(worst):
            name = f"frame_{rank}.png" if args.picture_frames else f"worst_{rank}.png"
            title = (f"{label}, frame {frame}: {creased} creased, {folded} folded edges; skin filter "
                     f"{'off' if args.no_skin_filter else 'on'} ({report['commit']})")
            print(f"wrote {picture_contact_frames(model, scene, plain, skin, pose, args.pictures / name, title)}")
            corners = args.pictures / name.replace(".png", "_corners.png")
            print(f"wrote {save_png(mouth_corner_sheet(model, plain, skin, title), corners)}")


if __name__ == "__main__":
    main()
