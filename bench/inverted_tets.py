"""Inverted tets on the ICT face: the passive face with the jaw opened, and fitted shapes played.

Issue 4 asks that a blend of fitted shapes (0.5 jawOpen + 0.7 mouthSmile_L) stays within physical
bounds, no tet inverted. This solves, each from the neutral face as `animate` would:

1. the passive face (no activation) with the jaw opened about its hinge by jawOpen's rigid
   opening angle (the model's `build_info`) or by --jaw-degrees, which isolates what the bone
   attachments alone do;
2. with --fit, each of --poses (shape weights, `name=w` joined by `+`) played from that fit;
   with --every-shape, also every fitted shape at weight 1 (a shape fitted on top of another,
   mouthClose on jawOpen, together with it); with --random-blends N, also N blends of 2–4
   shapes drawn at random (weights 0.3–1, a shape fitted on top of another never above it, as
   `animate` requires); and a summary of the poses that invert a tet.

With --pictures DIR it also draws the model's bones and a sagittal section three quarters of the
way out to the jaw angles (bones.png, section_jaw.png), to see where jaw and skull bone lie.

and prints, per pose, the tets with det F ≤ 0 and below 0.2, the smallest det F, and where the
inverted ones lie in the head frame (mm from the head origin: left, up, forward), against the
condyles, so that a change to the bones or attachments can be judged by it.

    .venv/bin/python bench/inverted_tets.py --model MODEL.npz [--fit FIT.npz] [--jaw-degrees A]
        [--poses "jawOpen=1,jawOpen=0.5+mouthSmile_L=0.7"] [--every-shape] [--random-blends N]
        [--pictures DIR]
"""
from __future__ import annotations

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.inverse.blend import blend  # noqa: E402
from solver.inverse.fit_file import load_fit, shape_contexts  # noqa: E402
from solver.model_file import build_info, load_model, model_head_axes  # noqa: E402
from solver.physics.inputs import AnimationInputError  # noqa: E402
from solver.physics.simulator import FaceSimulator, SimulationSettings  # noqa: E402

DEFAULT_POSES = "jawOpen=1,jawOpen=0.5+mouthSmile_L=0.7"
LOW_VOLUME_RATIO = 0.2


def _head_mm(model, points):
    """World points → mm from the head origin along left, up, forward."""
    return (np.asarray(points) - model["head_origin"]) @ model_head_axes(model).T * 1e3


def _every_shape_poses(fit) -> list[str]:
    names = [str(name) for name in fit["shape_key_names"]]
    return [f"{context}=1+{name}=1" if context else f"{name}=1" for name, context in zip(names, shape_contexts(fit))]


def _random_blends(fit, count: int, seed: int) -> list[str]:
    """`count` poses of 2–4 shapes at weights 0.3–1; a shape's context (mouthClose's jawOpen)
    joins it at least at its weight."""
    names = [str(name) for name in fit["shape_key_names"]]
    contexts = dict(zip(names, shape_contexts(fit)))
    rng = np.random.default_rng(seed)
    poses = []
    for _ in range(count):
        chosen = rng.choice(len(names), size=rng.integers(2, 5), replace=False)
        weights = {names[i]: round(float(rng.uniform(0.3, 1.0)), 2) for i in chosen}
        for name, weight in list(weights.items()):
            if contexts[name]:
                weights[contexts[name]] = max(weights.get(contexts[name], 0.0), weight)
        poses.append("+".join(f"{name}={weight}" for name, weight in weights.items()))
    return poses


def _pictures(model, folder: Path) -> None:
    from solver.pictures.views import picture_bones, picture_cross_section
    folder.mkdir(parents=True, exist_ok=True)
    gonions = [str(name).startswith("gonion_") for name in model["landmark_names"]]
    lateral = float(np.abs(_head_mm(model, np.asarray(model["landmark_positions"])[gonions])[:, 0]).mean()) * 1e-3
    for path in (picture_bones(model, folder / "bones.png"),
                 picture_cross_section(model, folder / "section_jaw.png", "sagittal", 0.75 * lateral)):
        print(f"picture: {path}")


def _report(label, simulator, step, model):
    ratio = np.linalg.det(simulator.elasticity.deformation_gradients(simulator.positions))
    inverted = np.flatnonzero(ratio <= 0.0)
    local = _head_mm(model, np.asarray(model["rest_positions"])[np.asarray(model["tets"])[inverted]].mean(1))
    where = "" if len(inverted) == 0 else (
        f"; inverted ones at left {local[:, 0].min():.0f}..{local[:, 0].max():.0f}, up {local[:, 1].min():.0f}.."
        f"{local[:, 1].max():.0f}, forward {local[:, 2].min():.0f}..{local[:, 2].max():.0f} mm")
    print(f"{label:<40} converged {step.converged}, {step.iterations:>3} Newton it.; det F ≤ 0: {len(inverted):>3}, "
          f"< {LOW_VOLUME_RATIO}: {(ratio < LOW_VOLUME_RATIO).sum():>3}, smallest {ratio.min():.3f}{where}", flush=True)
    return len(inverted)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--fit", type=Path)
    parser.add_argument("--poses", default=DEFAULT_POSES)
    parser.add_argument("--jaw-degrees", type=float, help="the passive opening (default: jawOpen's rigid one)")
    parser.add_argument("--every-shape", action="store_true", help="also play every fitted shape at weight 1")
    parser.add_argument("--random-blends", type=int, default=0, help="also play this many random blends")
    parser.add_argument("--seed", type=int, default=0, help="of the random blends")
    parser.add_argument("--pictures", type=Path, help="write bones.png and section_jaw.png here")
    args = parser.parse_args()
    model = load_model(args.model)
    if args.pictures is not None:
        _pictures(model, args.pictures)
    condyles = _head_mm(model, model["condyles"])
    rigid = float(build_info(model)["jaw"]["open_angle_deg"])
    opening = rigid if args.jaw_degrees is None else args.jaw_degrees
    print(f"model: {len(model['tets'])} tets; condyles at up {condyles[0, 1]:.0f}, forward {condyles[0, 2]:.0f} mm; "
          f"jawOpen's rigid opening {rigid:.1f} deg")
    simulator = FaceSimulator(model, SimulationSettings())
    neutral = np.broadcast_to(np.eye(3), (len(model["tets"]), 3, 3))
    step = simulator.step(neutral, np.array([np.radians(opening), 0.0, 0.0, 0.0, 0.0]), np.eye(4), frame=0)
    _report(f"passive, jaw opened {opening:.1f} deg", simulator, step, model)
    if args.fit is None:
        return
    fit = load_fit(args.fit, model)
    names = [str(name) for name in fit["shape_key_names"]]
    poses = list(dict.fromkeys(args.poses.split(",") + (_every_shape_poses(fit) if args.every_shape else [])
                               + _random_blends(fit, args.random_blends, args.seed)))
    inverting = []
    for pose in poses:
        weights = np.zeros((1, len(names)))
        for term in pose.split("+"):
            name, weight = term.split("=")
            weights[0, names.index(name)] = float(weight)
        try:
            blended = blend(fit, weights, 24.0, np.eye(4)[None], detail=False)
        except AnimationInputError as error:
            print(f"{pose:<40} refused: {error}", flush=True)
            continue
        played = blended.activations
        simulator.return_to_rest()
        step = simulator.step(played.tet_activations(model, 0), played.jaw[0], played.head_transforms[0], frame=0)
        held = int(blended.held_tets[0])
        if _report(pose + (f" ({held} muscle tets held at the blend floor)" if held else ""), simulator, step, model):
            inverting.append(pose)
    print(f"{len(inverting)} of {len(poses)} poses invert a tet" + (f": {', '.join(inverting)}" if inverting else ""))


if __name__ == "__main__":
    main()
