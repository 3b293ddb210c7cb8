"""The corrective rig against the full simulation over an animation (issue 42's acceptance; paper
002 Fig. 12–13): per frame, how far the corrected rig and the plain linear rig are from the
simulated skin, and how many lip vertices each pushes into the teeth.

1. WEIGHTS.npz: `--frames` frames at 30 fps of the `--keys` only (every other key 0), each key a
   slow sinusoid of its own period (1.2–3.5 s) and phase, clipped to [0, 1] so keys sit at 0 and
   at 1 for stretches, faded in from the neutral face over the first 10 frames; deterministic
   (`--seed`). Jaw, lip and smile keys overlap in every combination the clip passes through.
2. CORR.npz for exactly those keys: `python -m solver correctives MODEL FIT RIG --keys …
   --collisions teeth,lips --jobs N` (resumable: its samples are kept beside it).
3. The full simulation: `python -m solver animate MODEL FIT WEIGHTS --collisions teeth,lips`, the
   settings the corrective samples were simulated with.
4. The corrected rig: `python -m solver play-correctives RIG CORR WEIGHTS`; the linear rig:
   neutral + Σ w_k Δ_k.
Each step is skipped when its output is in FOLDER already, so a second run only measures.

Per frame, on the face region (inverse/shapes.face_region: the rig's face group, else the skin in
front of the jaw hinge and above the chin): the mean and the largest distance of each rig's vertices
to the simulated skin (mm); and, for all three skins at the simulated frame's bone pose, the lip
vertices deeper than 0.1 mm in a teeth proxy (bench/performance.py's FrameJudge, the performance
benchmark's measure). Also what limits the corrected rig: the same basis fitted to its own samples
(the gain there) and to the simulated frames themselves (the most the basis can carry). Prints the
figures, mesh sizes and commit; `--picture` draws both per frame.

    .venv/bin/python bench/correctives_acceptance.py --model MODEL.npz --fit FIT.npz --rig RIG.npz \
        --folder DIR [--keys jawOpen,…] [--frames 200] [--jobs 2] [--picture PNG] [--closeups DIR]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "bench"))

from bench_info import commit  # noqa: E402

DEFAULT_KEYS = "jawOpen,mouthSmile_L,mouthSmile_R,mouthFunnel,mouthPucker"
FPS, FADE_IN = 30.0, 10


def animation_weights(keys, frames: int, seed: int) -> np.ndarray:
    """(frames, K) weights in [0, 1]: per key 0.4 + 0.75 sin(2π t / period + phase), clipped,
    faded in from 0 over FADE_IN frames."""
    rng = np.random.default_rng(seed)
    periods, phases = rng.uniform(1.2, 3.5, len(keys)), rng.uniform(0.0, 2 * np.pi, len(keys))
    t = np.arange(frames)[:, None] / FPS
    weights = np.clip(0.4 + 0.75 * np.sin(2 * np.pi * t / periods + phases), 0.0, 1.0)
    fade = np.clip(np.arange(frames) / FADE_IN, 0.0, 1.0)
    return weights * (fade * fade * (3 - 2 * fade))[:, None]


def _solver(step: str, *arguments, timeout: float):
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, arguments)], cwd=REPOSITORY,
                         capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        sys.exit(f"{step} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    results = [json.loads(line) for line in run.stdout.splitlines() if '"result"' in line]
    print(f"{step}: {time.monotonic() - started:.0f} s", flush=True)
    return results[-1] if results else {}


def measure(model, rig, keys, weights, simulated, corrected, face) -> dict:
    """Per-frame figures (lists) of the corrected and the linear rig against the simulated skin."""
    from bench.performance import FrameJudge
    from solver.collisions.contacts import BonePose
    names = [str(name) for name in rig.shape_key_names]
    deltas = np.asarray(rig.shape_key_deltas)[[names.index(key) for key in keys]]
    judge = FrameJudge(model, rig)
    rows = {name: [] for name in ("corrected_mean_mm", "corrected_max_mm", "linear_mean_mm", "linear_max_mm",
                                  "simulated_lips_in_teeth", "corrected_lips_in_teeth", "linear_lips_in_teeth")}
    skin = simulated["skin_positions"]
    for frame in range(len(weights)):
        linear = rig.vertices + np.tensordot(weights[frame], deltas, axes=1)
        pose = BonePose(simulated["skull_transforms"][frame], simulated["jaw_transforms"][frame], frame)
        for label, played in (("corrected", corrected[frame]), ("linear", linear)):
            distance = np.linalg.norm(played[face] - skin[frame][face], axis=1) * 1e3
            rows[f"{label}_mean_mm"].append(float(distance.mean()))
            rows[f"{label}_max_mm"].append(float(distance.max()))
            rows[f"{label}_lips_in_teeth"].append(judge.lips_in_teeth(played, pose)[0])
        rows["simulated_lips_in_teeth"].append(judge.lips_in_teeth(skin[frame], pose)[0])
    return rows


def basis_limits(rig, keys, corr_path: Path, weights, simulated_skin, face) -> dict:
    """What limits the corrected rig: the gain over the linear rig (face-region mean distance) of the
    CORR basis fitted as the correctives are (solver/correctives/fitting.py, with CORR's ridge) to
    the corrective samples themselves (in-sample), to the animation's simulated frames themselves
    (in-sample: what the basis can carry), and to the first half of those frames, tested on the
    second (whether frames of the animation itself would teach the basis the rest)."""
    from solver.correctives.corr_file import load_correctives, term_coefficients
    from solver.correctives.fitting import fit_terms
    from solver.npz_files import read_npz
    from solver.requests.correctives import samples_folder
    names = [str(name) for name in rig.shape_key_names]
    deltas = np.asarray(rig.shape_key_deltas)[[names.index(key) for key in keys]]
    neutral = np.asarray(rig.vertices)
    corr = load_correctives(corr_path)
    term_names, ridge = corr["term_names"], float(corr.get("ridge", 0.0))
    stored = [read_npz(path) for path in sorted(samples_folder(corr_path).glob("*.npz"))
              if not path.name.startswith("probe-")]
    sample_weights = np.concatenate([arrays["weights"] for arrays in stored])
    sample_skins = np.concatenate([arrays["skin"] for arrays in stored])

    def gain(fit_weights, fit_skins, test_weights, test_skins):
        terms, _, _ = fit_terms(neutral, deltas, keys, term_names, fit_weights, fit_skins, ridge)
        linear = neutral + np.tensordot(test_weights, deltas, axes=1)
        corrected = linear + np.tensordot(term_coefficients(term_names, keys, test_weights), terms, axes=1)
        distance = lambda rig_skin: np.linalg.norm(rig_skin[:, face] - test_skins[:, face], axis=2).mean()  # noqa: E731
        return 1.0 - distance(corrected) / distance(linear)

    single = (sample_weights > 0).sum(axis=1) == 1
    half = len(weights) // 2
    return {"in_sample": gain(sample_weights, sample_skins, sample_weights, sample_skins),
            "in_sample_single_keys": gain(sample_weights, sample_skins, sample_weights[single], sample_skins[single]),
            "fitted_to_the_frames": gain(weights, simulated_skin, weights, simulated_skin),
            "first_half_frames_on_second_half": gain(weights[:half], simulated_skin[:half], weights[half:],
                                                     simulated_skin[half:]),
            "samples": len(sample_weights)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--rig", type=Path, required=True)
    parser.add_argument("--folder", type=Path, required=True, help="inputs and outputs; existing ones are kept")
    parser.add_argument("--keys", default=DEFAULT_KEYS)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=4 * 3600.0, help="seconds each solver step may take")
    parser.add_argument("--picture", type=Path, default=None)
    parser.add_argument("--closeups", type=Path, default=None, metavar="DIR",
                        help="mouth close-ups of --closeup-frames (default: the frame with most corrected-rig lip "
                             "vertices in the teeth): linear rig above corrected rig, corrected rig above simulation")
    parser.add_argument("--closeup-frames", type=lambda text: [int(f) for f in text.split(",") if f.strip()],
                        default=None)
    args = parser.parse_args()
    from solver.inverse.shapes import face_region
    from solver.model_file import load_model
    from solver.npz_files import read_npz
    from solver.rig import load_rig
    keys = [key.strip() for key in args.keys.split(",") if key.strip()]
    folder = args.folder.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    weights_path, corr, simulation, played = (folder / name for name in
                                              ("weights.npz", "corr.npz", "simulated.npz", "corrected.npz"))
    weights = animation_weights(keys, args.frames, args.seed)
    if not weights_path.exists():
        np.savez(weights_path, names=np.array(keys), weights=weights, fps=np.array(FPS))
    weights = read_npz(weights_path)["weights"]
    if not simulation.exists():
        _solver("animate", "animate", args.model, args.fit, weights_path, "-o", simulation,
                "--collisions", "teeth,lips", timeout=args.timeout)
    if not corr.exists():
        _solver("correctives", "correctives", args.model, args.fit, args.rig, "-o", corr, "--keys", ",".join(keys),
                "--collisions", "teeth,lips", "--jobs", args.jobs, timeout=args.timeout)
    if not played.exists():
        _solver("play-correctives", "play-correctives", args.rig, corr, weights_path, "-o", played,
                timeout=args.timeout)
    model, rig = load_model(args.model), load_rig(args.rig)
    face, how = face_region(model, rig)
    simulated, corrected = read_npz(simulation), read_npz(played)["skin_positions"]
    rows = measure(model, rig, keys, weights, simulated, corrected, face)
    corr_arrays = read_npz(corr)
    kept = int(np.asarray(corr_arrays["pair_kept"]).sum())
    mean = {label: float(np.mean(rows[f"{label}_mean_mm"])) for label in ("corrected", "linear")}
    lips = {label: np.asarray(rows[f"{label}_lips_in_teeth"]) for label in ("simulated", "corrected", "linear")}
    print(f"model {len(model['tets'])} tets; rig {len(rig.vertices)} vertices, face region {int(face.sum())} ({how}); "
          f"keys {', '.join(keys)}; {args.frames} frames at {FPS:g} fps; {len(corr_arrays['term_names'])} corrective "
          f"shapes, {kept} of {len(corr_arrays['pairs'])} pairs kept; commit {commit()}")
    print(f"distance to the simulation, face region, mean over frames of the per-frame mean: corrected "
          f"{mean['corrected']:.3f} mm, linear {mean['linear']:.3f} mm ({1 - mean['corrected'] / mean['linear']:.0%} "
          f"lower); worst frame's mean {max(rows['corrected_mean_mm']):.3f} / {max(rows['linear_mean_mm']):.3f} mm; "
          f"largest vertex {max(rows['corrected_max_mm']):.2f} / {max(rows['linear_max_mm']):.2f} mm")
    for label, counts in lips.items():
        print(f"lip vertices > 0.1 mm in the teeth, {label}: mean {counts.mean():.1f} a frame, max {counts.max()}, "
              f"{int((counts > 0).sum())} frames with any")
    limits = basis_limits(rig, keys, corr, weights, simulated["skin_positions"], face)
    print(f"the same basis fitted to its {limits['samples']} samples, on those samples: {limits['in_sample']:.0%} "
          f"lower than the linear rig ({limits['in_sample_single_keys']:.0%} on the single-key samples); fitted "
          f"to the {args.frames} simulated frames themselves: {limits['fitted_to_the_frames']:.0%} lower (what the "
          f"basis can carry); fitted to the first half of the frames, on the second: "
          f"{limits['first_half_frames_on_second_half']:.0%}")
    print(f"CORR: {int(corr_arrays['combinations']) if 'combinations' in corr_arrays else 0} combination rays, "
          f"ridge α = {float(corr_arrays['ridge']) if 'ridge' in corr_arrays else 0.0:g}")
    keys_on = (weights > 0.3).sum(axis=1)
    corrected_mm, linear_mm = np.asarray(rows["corrected_mean_mm"]), np.asarray(rows["linear_mean_mm"])
    print("gain over the linear rig by keys above 0.3: " + ", ".join(
        f"{count} keys ({int((keys_on == count).sum())} frames) "
        f"{1 - corrected_mm[keys_on == count].mean() / linear_mm[keys_on == count].mean():.0%}"
        for count in range(1, len(keys) + 1) if (keys_on == count).any()))
    report = {"commit": commit(), "keys": keys, "frames": args.frames, "face_vertices": int(face.sum()), **rows,
              "basis_limits": limits}
    (folder / "acceptance.json").write_text(json.dumps(report, indent=1))
    if args.picture is not None:
        from solver.pictures.corrective_curves import picture_corrective_curves
        print(f"picture: {picture_corrective_curves(report, args.picture)}")
    if args.closeups is not None:
        frames = args.closeup_frames or [int(np.argmax(rows["corrected_lips_in_teeth"]))]
        for path in closeups(model, rig, keys, weights, simulated, corrected, frames, args.closeups):
            print(f"picture: {path}")


def closeups(model, rig, keys, weights, simulated, corrected, frames, folder: Path) -> list:
    """Per frame two mouth close-ups (solver/pictures/contact_frames.py, lips in the teeth red):
    the linear rig above the corrected rig, and the corrected rig above the simulation."""
    from solver.collisions import CollisionScene
    from solver.collisions.contacts import BonePose
    from solver.pictures.contact_frames import picture_contact_frames
    names = [str(name) for name in rig.shape_key_names]
    deltas = np.asarray(rig.shape_key_deltas)[[names.index(key) for key in keys]]
    scene = CollisionScene(model, teeth=True, lips=True)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for frame in frames:
        pose = BonePose(simulated["skull_transforms"][frame], simulated["jaw_transforms"][frame], frame)
        linear = rig.vertices + np.tensordot(weights[frame], deltas, axes=1)
        pose_text = ", ".join(f"{key} {weight:.2f}" for key, weight in zip(keys, weights[frame]))
        for name, top, bottom, labels in (("linear_corrected", linear, corrected[frame], ("linear rig", "corrected rig")),
                                          ("corrected_simulated", corrected[frame], simulated["skin_positions"][frame],
                                           ("corrected rig", "simulation"))):
            written.append(picture_contact_frames(
                model, scene, top, bottom, pose, folder / f"frame{frame}_{name}.png",
                f"frame {frame} ({pose_text}): {labels[0]} above, {labels[1]} below; commit {commit()}",
                labels=labels))
    return written


if __name__ == "__main__":
    main()
