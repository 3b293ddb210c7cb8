"""Volumetric blendshapes with teeth and lip contact (solver/volumetric_blendshapes/contact.py) on
the ICT face: each frame solved without and with contact, the two compared.

    .venv/bin/python bench/vbs_contact.py --model MODEL.npz --fit FIT.npz [--pictures DIR] [--no-skin-filter]

The keys jawOpen, mouthClose and mouthFunnel of FIT.npz are transferred (≤ 60 PD iterations,
1e-6 m, as bench/pd.py); the take is 16 frames: the lips pressed together (jawOpen and mouthClose
together, 0.125 … 1 in 8 frames), then mouthFunnel and jawOpen, each 0.25 … 1 in 4 frames; each
frame starts from the last, as `animate` plays. Printed per frame: PD iterations (all rounds),
contact rounds, seconds, converged; the deepest skin vertex inside a collider without contact,
with contact (the embedded skin plus the keys' detail residual, before the display projection)
and as shown (display projection and skin filter, as `animate` writes it); how far the contact
moved the lip vertices and the rest of the skin; inverted tets.
With --pictures, each frame's mouth close-up (solver/pictures/contact_frames.py): the skin
without contact above (red: inside a teeth proxy or the other lip), as shown with contact below.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_info import commit  # noqa: E402

KEYS = ("jawOpen", "mouthClose", "mouthFunnel")


def take() -> list:
    frames = [(f"lips pressed {t:.3f}", {"jawOpen": 0.6 * t, "mouthClose": 0.6 * t}) for t in np.linspace(0.125, 1, 8)]
    frames += [(f"mouthFunnel {t:.2f}", {"mouthFunnel": t}) for t in np.linspace(0.25, 1, 4)]
    return frames + [(f"jawOpen {t:.2f}", {"jawOpen": t}) for t in np.linspace(0.25, 1, 4)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path, required=True)
    parser.add_argument("--pictures", type=Path, help="folder for each frame's mouth close-up")
    parser.add_argument("--no-skin-filter", action="store_true", help="show the skin as simulated")
    args = parser.parse_args()
    from solver.collisions.scene import CollisionScene
    from solver.inverse.fit_file import load_fit
    from solver.model_file import load_model
    from solver.physics.skin_filter import SkinFilter
    from solver.volumetric_blendshapes.animate import VolumetricBlendshapePlayer
    model = load_model(args.model)
    fit = load_fit(args.fit, model)
    names = [str(name) for name in fit["shape_key_names"]]
    index = [names.index(key) for key in KEYS]
    scene = CollisionScene(model, teeth=True, lips=True)
    started = time.perf_counter()
    players = [VolumetricBlendshapePlayer(model, list(KEYS), np.asarray(fit["shape_key_deltas"], np.float64)[index],
                                          np.asarray(fit["jaw"], np.float64)[index], scene=held, transfer_iterations=60,
                                          transfer_tolerance_m=1e-6) for held in (None, scene)]
    skin_filter = None if args.no_skin_filter else SkinFilter.for_model(model)
    print(f"commit {commit()}; ICT {len(model['tets'])} tets, {len(model['rest_positions'])} nodes, "
          f"{len(model['skin_vertices'])} skin vertices; setup (two transfers) {time.perf_counter() - started:.0f} s; "
          f"skin filter {'off' if skin_filter is None else 'on'}")
    lips = np.zeros(len(model["skin_vertices"]), bool)
    lips[scene.teeth_vertices] = True
    print("| frame | PD its (rounds) | s | converged | deepest without / with contact / shown, mm "
          "| lips moved / other skin, mm | inverted tets without / with |")
    print("|---|---|---|---|---|---|---|")
    for label, weights in take():
        w = np.array([weights.get(key, 0.0) for key in KEYS])
        offset = np.einsum("k,kvd->vd", w, players[0].residuals)
        results = []
        for player in players:
            frame_started = time.perf_counter()
            x, report = player.frame(w)
            seconds = time.perf_counter() - frame_started
            skin = player.skin_matrix @ x
            results.append((x, report, skin, scene.measure(skin + offset, player.pose).max_depth_m,
                            int((np.linalg.det(player.mesh.deformation_gradients(x)) <= 0).sum())))
        (_, _, plain_skin, plain_depth, plain_inverted), (x, report, skin, depth, inverted) = results
        shown_skin = players[1].shown_skin(x, w, skin_filter=skin_filter)
        shown, shown_depth = shown_skin.skin, shown_skin.depth_m
        if args.pictures is not None:
            from solver.pictures.contact_frames import picture_contact_frames
            args.pictures.mkdir(parents=True, exist_ok=True)
            picture_contact_frames(model, scene, plain_skin + offset, shown, players[1].pose,
                                   args.pictures / f"{label.replace(' ', '_')}.png", title=f"volumetric blendshapes, {label}",
                                   labels=("without contact", "with contact, as shown"))
        moved = np.linalg.norm(skin - plain_skin, axis=1)
        print(f"| {label} | {report.iterations} ({players[1].rounds}) | {seconds:.1f} | {report.converged} "
              f"| {plain_depth * 1e3:.2f} / {depth * 1e3:.2f} / {shown_depth * 1e3:.3f} "
              f"| {moved[lips].max() * 1e3:.2f} / {moved[~lips].max() * 1e3:.2f} | {plain_inverted} / {inverted} |",
              flush=True)


if __name__ == "__main__":
    main()
