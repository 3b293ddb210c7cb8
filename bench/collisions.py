"""Frame time with and without collisions.

Demo case (default): a 40 mm sphere pressed 3 mm into the left cheek of the demo head over a
few quasi-static frames (Newton/AL path, optionally IPOPT).

    .venv/bin/python bench/collisions.py [--target-tets 3000] [--frames 4] [--contact-solver newton|ipopt]

Lip-contact case: an ICT-style model and its fit; the lip-closing shape keys (mouthPress,
mouthClose, mouthRoll…, those present) are ramped from neutral to full strength over the frames
and solved with and without ``CollisionScene(model, teeth=True, lips=True)``.

    .venv/bin/python bench/collisions.py --model MODEL.npz --fit FIT.npz [--frames 8]

Prints tet and skin-vertex counts, ms per frame without and with collisions, contacts, rounds,
and the overhead of collisions in percent (total frame time with / without − 1).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.collisions.sdf import SphereCollider  # noqa: E402
from solver.demo_head import make_demo_rig  # noqa: E402
from solver.geometry import triangle_normals_areas  # noqa: E402
from solver.inverse.fit_file import load_fit  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics.activation import active_tet_indices, tet_activations_from_vectors  # noqa: E402
from solver.physics.contact import ColliderSet  # noqa: E402
from solver.physics.simulator import FaceSimulator, SimulationSettings  # noqa: E402


def cheek_sphere(model, frames, radius=0.04, depth=0.003):
    names = [str(n) for n in model["landmark_names"]]
    landmark = lambda name: np.asarray(model["landmark_positions"])[names.index(name)]  # noqa: E731
    skin = model["skin_vertices"]
    vertex = int(np.argmin(np.linalg.norm(skin - 0.5 * (landmark("cheekbone_L") + landmark("mouth_corner_L")), axis=1)))
    normals, areas = triangle_normals_areas(skin, model["skin_triangles"])
    summed = np.zeros_like(skin)
    for corner in range(3):
        np.add.at(summed, model["skin_triangles"][:, corner], normals * areas[:, None])
    normal = summed[vertex] / np.linalg.norm(summed[vertex])
    transforms = np.tile(np.eye(4), (frames, 1, 1))
    for frame, offset in enumerate(np.linspace(radius, radius - depth, frames)):
        transforms[frame, :3, 3] = skin[vertex] + offset * normal
    return SphereCollider(name="finger", radius=radius, transforms=transforms)


def run(model, frame_inputs, settings, collisions):
    """[(seconds, FrameResult)] of every frame after the first (JIT warm-up, untouched start)."""
    simulator = FaceSimulator(model, settings, collisions=collisions)
    results = []
    for frame, (activation, jaw) in enumerate(frame_inputs):
        started = time.perf_counter()
        result = simulator.step(activation, jaw, frame=frame)
        if frame:
            results.append((time.perf_counter() - started, result))
    return results


LIP_KEYS = ("mouthPress_L", "mouthPress_R", "mouthClose", "mouthRollLower", "mouthRollUpper", "mouthPucker")


def lip_contact_frames(model, fit, frames):
    """Activations and jaw ramping from the fit's neutral to the sum of the lip-closing keys."""
    names = [str(n) for n in fit["shape_key_names"]]
    keys = [names.index(k) for k in LIP_KEYS if k in names]
    if not keys:
        raise SystemExit(f"the fit has none of the lip-closing shape keys {', '.join(LIP_KEYS)}")
    neutral = fit["neutral_activations"]
    delta = sum(fit["activations"][k] - neutral for k in keys)
    jaw = sum(fit["jaw"][k] for k in keys)
    active, tet_count = active_tet_indices(model), len(model["tets"])
    return [(tet_activations_from_vectors(neutral + t * delta, active, tet_count), t * jaw)
            for t in np.linspace(0.0, 1.0, frames)], [names[k] for k in keys]


def report(plain, pressed):
    for frame, ((t0, r0), (t1, r1)) in enumerate(zip(plain, pressed), start=1):
        print(f"frame {frame}: {1e3 * t0:8.1f} ms without ({r0.iterations} it), {1e3 * t1:8.1f} ms with collisions "
              f"({r1.iterations} it, {r1.contacts} contacts, {r1.collision_rounds} rounds, depth "
              f"{1e3 * r1.penetration_depth_max:.4f} mm, {r1.anchored_vertices} anchored, "
              f"{'converged' if r1.converged else 'NOT converged'})")
    without, with_ = sum(t for t, _ in plain), sum(t for t, _ in pressed)
    frames = len(plain)
    print(f"mean: {1e3 * without / frames:.1f} ms per frame without, {1e3 * with_ / frames:.1f} ms with collisions; "
          f"overhead {100 * (with_ / without - 1):+.0f} %; contacts {sum(r.contacts for _, r in pressed)}, "
          f"rounds {sum(r.collision_rounds for _, r in pressed)} over {frames} frames")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-tets", type=int, default=3000)
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--contact-solver", choices=("newton", "ipopt"), default="newton")
    parser.add_argument("--model", type=Path, help="MODEL.npz for the lip-contact case (with --fit)")
    parser.add_argument("--fit", type=Path, help="FIT.npz of that model")
    args = parser.parse_args()
    settings = SimulationSettings(contact_solver=args.contact_solver)
    if args.model or args.fit:
        if not (args.model and args.fit):
            raise SystemExit("--model and --fit go together")
        model = load_model(args.model)
        fit = load_fit(args.fit, model)
        try:
            from solver.collisions.scene import CollisionScene
            started = time.perf_counter()
            scene = CollisionScene(model, teeth=True, lips=True)
        except Exception as error:      # the scene module may still be in progress
            raise SystemExit(f"CollisionScene(model, teeth=True, lips=True) is not usable yet: "
                             f"{type(error).__name__}: {error}")
        inputs, keys = lip_contact_frames(model, fit, args.frames)
        print(f"{args.model.name}: {len(model['tets'])} tets, {len(model['skin_vertices'])} skin vertices; "
              f"scene {scene.names} built in {time.perf_counter() - started:.1f} s; ramping {', '.join(keys)}")
        report(run(model, inputs, settings, None), run(model, inputs, settings, scene))
        return
    model = build_model(make_demo_rig(), BuildOptions(target_tets=args.target_tets))
    print(f"demo head: {len(model['tets'])} tets, {len(model['skin_vertices'])} skin vertices")
    inputs = [(np.tile(np.eye(3), (len(model["tets"]), 1, 1)), np.zeros(5))] * args.frames
    report(run(model, inputs, settings, None), run(model, inputs, settings, ColliderSet([cheek_sphere(model, args.frames)])))

if __name__ == "__main__":
    main()
