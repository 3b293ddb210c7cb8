"""Frame time with and without collisions.

Demo case (default): a 40 mm sphere pressed 3 mm into the left cheek of the demo head over a
few quasi-static frames (Newton/AL path, optionally IPOPT).

    .venv/bin/python bench/collisions.py [--target-tets 3000] [--frames 4] [--contact-solver newton|ipopt]

Lip-contact case: an ICT-style model and its fit; the lip-contact animation of the acceptance
scenarios (bench/collision_scenarios.py: ICT_LIP_WEIGHTS for an ARKit fit, else
DEMO_LIP_WEIGHTS — the jaw opening under mouthClose, closing with the lower lip rolled in and
the lips pressed, pucker with the jaw forward), blended through the fit, solved with and
without ``CollisionScene(model, teeth=True, lips=True)``.

    .venv/bin/python bench/collisions.py --model MODEL.npz --fit FIT.npz [--frames 7] [--inbetweens 3]
        [--contact-region-rings 2] [--region-picture PNG [--region-frame 4]]

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
from solver.inverse.blend import blend  # noqa: E402
from solver.collisions.collider_set import ColliderSet  # noqa: E402
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


def run(model, frame_inputs, settings, collisions, observe=None):
    """[(seconds, FrameResult)] of every frame after the first (JIT warm-up, untouched start).
    `observe(simulator)` is called once it is built."""
    simulator = FaceSimulator(model, settings, collisions=collisions)
    if observe is not None:
        observe(simulator)
    results = []
    for frame, (activation, jaw) in enumerate(frame_inputs):
        started = time.perf_counter()
        result = simulator.step(activation, jaw, frame=frame)
        if frame:
            results.append((time.perf_counter() - started, result))
    return results


def lip_contact_frames(model, fit, frames, inbetweens=0):
    """[(tet activations, jaw)] of the scenario animation's first `frames` frames, blended
    through the fit (blend refuses weights whose activations are not positive definite), and
    the shape keys used. With `inbetweens` > 0 that many linearly interpolated frames go
    between consecutive scenario frames: the scenario jumps between key poses from one frame
    to the next (the pressed lips to the pucker in one step), an artist's curves at 24 fps
    take several frames for such a change."""
    from collision_scenarios import DEMO_LIP_WEIGHTS, ICT_LIP_WEIGHTS, weight_matrix
    names = [str(n) for n in fit["shape_key_names"]]
    schedule = ICT_LIP_WEIGHTS if "mouthPress_L" in names else DEMO_LIP_WEIGHTS
    weights, used = weight_matrix(schedule, names)
    if not used:
        raise SystemExit(f"the fit has none of the lip-contact shape keys {', '.join(schedule)}")
    weights = weights[:frames]
    if inbetweens > 0 and len(weights) > 1:
        steps = np.arange(len(weights) - 1)[:, None] + np.arange(inbetweens + 1)[None, :] / (inbetweens + 1)
        times = np.append(steps.reshape(-1), len(weights) - 1)
        weights = np.column_stack([np.interp(times, np.arange(len(weights)), column) for column in weights.T])
    blended = blend(fit, weights, 24.0, np.tile(np.eye(4), (len(weights), 1, 1)), detail=False).activations
    return [(blended.tet_activations(model, frame), blended.jaw[frame]) for frame in range(len(weights))], used


class RegionRecorder:
    """Keeps, of one frame's contact-region relaxations, the one that took the most Newton
    iterations: the round's start, bones, plane vertices and region, for ``picture``."""

    def __init__(self, frame: int):
        self.frame, self.kept, self.iterations = frame, None, -1

    def __call__(self, simulator):
        contact_region = simulator.contact_region
        relax = contact_region.relax

        def recording(objective, x, skull, jaw, **options):
            relaxation = relax(objective, x, skull, jaw, **options)
            if simulator.frame_index == self.frame and relaxation.result.iterations > self.iterations:
                self.iterations = relaxation.result.iterations
                self.kept = (np.asarray(x, dtype=np.float64).reshape(-1, 3).copy(), np.array(skull), np.array(jaw),
                             objective.contact.planes.vertex.copy(), contact_region.region(objective.contact.nodes))
            return relaxation
        contact_region.relax = recording

    def picture(self, model, scene, path):
        from solver.collisions.contacts import BonePose
        from solver.physics.skin_embedding import SkinEmbedding
        from solver.pictures.contact_frames import contact_region_sheet
        from solver.pictures.raster import save_png
        if self.kept is None:
            raise SystemExit(f"frame {self.frame} had no contact round to picture")
        nodes, skull, jaw, plane_vertices, region = self.kept
        image = contact_region_sheet(model, scene, nodes, SkinEmbedding.from_model(model).skin_positions(nodes),
                                     BonePose(skull, jaw, self.frame), region, plane_vertices,
                                     title=f"Contact region of frame {self.frame}'s largest relaxation "
                                           f"({self.iterations} Newton iterations on the region)")
        print(f"region picture: {save_png(image, path)}")


def report(plain, pressed):
    for frame, ((t0, r0), (t1, r1)) in enumerate(zip(plain, pressed), start=1):
        print(f"frame {frame}: {1e3 * t0:8.1f} ms without ({r0.iterations} it, {r0.projected_steps} on the "
              f"projected Hessian, {r0.factorisations} factorisations, {r0.krylov_iterations} CG, "
              f"{'converged' if r0.converged else 'NOT converged'}), {1e3 * t1:8.1f} ms with collisions "
              f"({r1.iterations} it, {r1.projected_steps} on the projected Hessian, {r1.factorisations} "
              f"factorisations, {r1.krylov_iterations} CG, {r1.region_iterations} in the contact region, "
              f"{r1.load_steps} load step(s), {r1.contacts} contacts, "
              f"{r1.collision_rounds} rounds, "
              f"depth {1e3 * r1.penetration_depth_max:.4f} mm, {r1.anchored_vertices} anchored, "
              f"{r1.projected_vertices} vertices moved by the display projection up to "
              f"{1e3 * r1.projection_max:.3f} mm, {'converged' if r1.converged else 'NOT converged'})")
    without, with_ = sum(t for t, _ in plain), sum(t for t, _ in pressed)
    frames = len(plain)
    unconverged = [f"{'without' if results is plain else 'with'} {frame}"
                   for results in (plain, pressed) for frame, (_, r) in enumerate(results, start=1) if not r.converged]
    if unconverged:
        print(f"NOT converged: {', '.join(unconverged)} (the overhead below compares unfinished frames)")
    print(f"mean: {1e3 * without / frames:.1f} ms per frame without, {1e3 * with_ / frames:.1f} ms with collisions; "
          f"overhead {100 * (with_ / without - 1):+.0f} %; contacts {sum(r.contacts for _, r in pressed)}, "
          f"rounds {sum(r.collision_rounds for _, r in pressed)} over {frames} frames; Newton iterations "
          f"{sum(r.iterations for _, r in plain)} without, {sum(r.iterations for _, r in pressed)} with "
          f"(and {sum(r.region_iterations for _, r in pressed)} in the contact region); "
          f"factorisations {sum(r.factorisations for _, r in plain)} without, "
          f"{sum(r.factorisations for _, r in pressed)} with")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-tets", type=int, default=3000)
    parser.add_argument("--frames", type=int, default=4, help="frames (the lip case: at most the animation's 7)")
    parser.add_argument("--contact-solver", choices=("newton", "ipopt"), default="newton")
    parser.add_argument("--model", type=Path, help="MODEL.npz for the lip-contact case (with --fit)")
    parser.add_argument("--fit", type=Path, help="FIT.npz of that model")
    parser.add_argument("--inbetweens", type=int, default=0,
                        help="the lip case: interpolated frames between consecutive scenario frames")
    parser.add_argument("--contact-region-rings", type=int, default=SimulationSettings.contact_region_rings,
                        help="tet rings of the contact region relaxed before each Newton step (0: off)")
    parser.add_argument("--region-picture", type=Path,
                        help="the lip case: picture the largest contact-region relaxation of --region-frame here")
    parser.add_argument("--region-frame", type=int, default=4)
    args = parser.parse_args()
    settings = SimulationSettings(contact_solver=args.contact_solver, contact_region_rings=args.contact_region_rings)
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
        inputs, keys = lip_contact_frames(model, fit, args.frames, args.inbetweens)
        print(f"{args.model.name}: {len(model['tets'])} tets, {len(model['skin_vertices'])} skin vertices; "
              f"scene {scene.names} built in {time.perf_counter() - started:.1f} s; ramping {', '.join(keys)}")
        recorder = RegionRecorder(args.region_frame) if args.region_picture else None
        report(run(model, inputs, settings, None), run(model, inputs, settings, scene, observe=recorder))
        if recorder is not None:
            recorder.picture(model, scene, args.region_picture)
        return
    model = build_model(make_demo_rig(), BuildOptions(target_tets=args.target_tets))
    print(f"demo head: {len(model['tets'])} tets, {len(model['skin_vertices'])} skin vertices")
    inputs = [(np.tile(np.eye(3), (len(model["tets"]), 1, 1)), np.zeros(5))] * args.frames
    report(run(model, inputs, settings, None), run(model, inputs, settings, ColliderSet([cheek_sphere(model, args.frames)])))

if __name__ == "__main__":
    main()
