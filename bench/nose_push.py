"""A flat collider pushed 10 mm into the nose of the neutral face, in both actuation models (issue
42; paper 000 Fig. 10): how the pushed tissue rotates and loses volume.

The collider is the plane through nose_tip − depth · forward (head frame), normal forward; every
skin vertex in front of it is pushed back to it. Both models start from the same unpushed pose,
the rest shape (neutral activations, neutral targets, no gravity), and are measured the same way
on the tets the push moved by more than 0.1 mm: the rotation of each tet's deformation gradient
against the unpushed pose (polar decomposition; mean, 95th percentile, max), the volume they lost,
and the inverted tets.

* Phace: the project's quasi-static solver (`FaceSimulator` with a `CollisionScene` holding an
  analytic box collider whose back face is the plane), the box driven in from 2 mm in front of the
  nose tip over `--steps` frames, each frame an equilibrium warm-started from the last; contacts
  are the solver's own (docs/collisions.md).
* Volumetric blendshapes: Projective Dynamics with the contacts as equality rows solved through
  the Schur complement (paper 002 Eq. 10); every skin vertex in front of the plane held on it
  (an active set that only grows, re-detected each PD iteration); targets F* = I, μ ARAP + λ volume.

    .venv/bin/python bench/nose_push.py [--model MODEL.npz] [--depth-mm 10] [--mu 0.01 --lam 0.01]
        [--picture docs/images/volumetric_blendshapes/nose_push.png]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "bench"))

from bench_info import commit  # noqa: E402
from solver.model_file import load_model, model_head_axes, model_landmarks  # noqa: E402
from solver.volumetric_blendshapes.element_kernels import polar_rotation  # noqa: E402
from solver.volumetric_blendshapes.energies import TetMesh  # noqa: E402

MOVED_M = 1e-4          # a tet the push moved: one of its nodes by more than this


def phace_push(model, forward, depth_m: float, steps: int):
    """(pushed node positions, seconds, Newton iterations, unconverged frames, contacts at the end)."""
    from solver.collisions.scene import CollisionScene
    from solver.collisions.sdf import BoxCollider
    from solver.physics.simulator import FaceSimulator, SimulationSettings
    left = model_head_axes(model)[0]
    left = left - (left @ forward) * forward
    left /= np.linalg.norm(left)
    axes = np.column_stack([left, np.cross(forward, left), forward])      # orthonormal, z = forward
    size = np.array([0.3, 0.3, 0.1])
    # The back face 2 mm in front of the nose tip at frame 0, on the plane at the last frame.
    centre = model_landmarks(model)["nose_tip"] + (0.002 + 0.5 * size[2]) * forward
    offsets = -(depth_m + 0.002) * np.arange(steps + 1) / steps
    transforms = np.tile(np.eye(4), (steps + 1, 1, 1))
    transforms[:, :3, 3] = offsets[:, None] * forward
    box = BoxCollider(name="plane", centre=centre, axes=axes, size=size, transforms=transforms)
    scene = CollisionScene(model, teeth=False, lips=False, colliders=[box])
    simulator = FaceSimulator(model, SimulationSettings(dynamic=False, gravity=False), collisions=scene)
    neutral = np.tile(np.eye(3), (len(model["tets"]), 1, 1))
    started, iterations, unconverged = time.perf_counter(), 0, 0
    for frame in range(steps + 1):
        result = simulator.step(neutral, frame=frame)
        iterations += result.iterations
        unconverged += not result.converged
    return result.positions, time.perf_counter() - started, iterations, unconverged, result.contacts


def blendshape_push(model, mesh: TetMesh, forward, plane: float, mu: float, lam: float, iterations: int):
    """(pushed node positions, seconds, PD report, skin vertices in contact)."""
    from solver.volumetric_blendshapes.energies import VolumetricBlendshapeEnergy
    from solver.volumetric_blendshapes.projective_dynamics import (ProjectiveDynamics, barycentric_matrix,
                                                                   model_fixed_nodes)
    energy = VolumetricBlendshapeEnergy(mesh, np.broadcast_to(np.eye(3), (len(mesh.tets), 3, 3)), 1.0, mu, lam)
    pd = ProjectiveDynamics(mesh, energy.terms, model_fixed_nodes(model))
    skin = barycentric_matrix(model).tocsr()
    slot = np.full(mesh.node_count, -1)
    slot[pd.free] = np.arange(len(pd.free))
    active: set[int] = set()

    def contacts(x):
        depth = skin @ x @ forward - plane
        active.update(np.flatnonzero(depth > 0.0).tolist())
        vertices = np.array(sorted(active), dtype=np.int64)
        rows = np.zeros((len(vertices), 3 * len(pd.free)))
        values = np.full(len(vertices), plane)
        for row, vertex in enumerate(vertices):
            start, end = skin.indptr[vertex], skin.indptr[vertex + 1]
            for node, weight in zip(skin.indices[start:end], skin.data[start:end]):
                if slot[node] >= 0:
                    rows[row, 3 * slot[node]:3 * slot[node] + 3] += weight * forward
                else:                          # a bone node: fixed, its share moves to the right side
                    values[row] -= weight * x[node] @ forward
        return rows, values

    started = time.perf_counter()
    x, report = pd.solve(mesh.rest_positions, iterations, 1e-7, constraints=contacts)
    return x, time.perf_counter() - started, report, len(active)


def push_measures(mesh: TetMesh, pushed) -> dict:
    """Per-tet rotation angle (degrees) and det F against the unpushed pose (`mesh`'s rest), the
    moved tets, and their summary figures."""
    F = mesh.deformation_gradients(pushed)
    rotation = polar_rotation(F)
    angle = np.degrees(np.arccos(np.clip((np.trace(rotation, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0)))
    determinant = np.linalg.det(F)
    moved = np.linalg.norm(pushed - mesh.rest_positions, axis=1)[mesh.tets].max(axis=1) > MOVED_M
    volume = mesh.rest_volume
    return {"angle": angle, "determinant": determinant, "moved": moved,
            "moved_tets": int(moved.sum()), "angle_mean": float(angle[moved].mean()),
            "angle_p95": float(np.percentile(angle[moved], 95)), "angle_max": float(angle[moved].max()),
            "volume_lost_percent": float(100 * (1 - (volume * determinant)[moved].sum() / volume[moved].sum())),
            "smallest_det": float(determinant.min()), "inverted": int((determinant <= 0).sum())}


def _row(label: str, m: dict) -> str:
    rotation = f"{m['angle_mean']:.2f}° / {m['angle_p95']:.1f}° / {m['angle_max']:.1f}°"
    return (f"| {label} | {m['moved_tets']:,} | {rotation} | {m['volume_lost_percent']:.2f} % | {m['inverted']} "
            f"(least det F {m['smallest_det']:.3f}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("/work/s11/ict/model.npz"))
    parser.add_argument("--depth-mm", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=10, help="Phace: frames the collider is driven in over")
    parser.add_argument("--mu", type=float, default=0.01)
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=100, help="PD iterations at most")
    parser.add_argument("--picture", type=Path, default=None)
    args = parser.parse_args()
    model = load_model(args.model)
    mesh = TetMesh(model["rest_positions"], model["tets"])
    forward = model_head_axes(model)[2]
    nose_tip = model_landmarks(model)["nose_tip"]
    depth_m = 1e-3 * args.depth_mm
    plane = float(nose_tip @ forward) - depth_m
    print(f"commit {commit()}; {mesh.node_count} nodes, {len(mesh.tets)} tets; a plane {args.depth_mm:g} mm into "
          f"the nose; tets moved > {MOVED_M * 1e3:g} mm measured against the unpushed pose", flush=True)
    x, seconds, iterations, unconverged, contacts = phace_push(model, forward, depth_m, args.steps)
    phace = push_measures(mesh, x)
    print(f"Phace: {args.steps + 1} frames, {iterations} Newton iterations, {unconverged} not converged, "
          f"{seconds:.1f} s; {contacts} contact planes at the end", flush=True)
    y, pd_seconds, report, in_contact = blendshape_push(model, mesh, forward, plane, args.mu, args.lam,
                                                        args.iterations)
    blendshapes = push_measures(mesh, y)
    print(f"volumetric blendshapes (mu {args.mu:g}, lam {args.lam:g}): PD {report.iterations} iterations "
          f"({'converged' if report.converged else 'not converged'}), {pd_seconds:.1f} s; {in_contact} skin "
          f"vertices held on the plane")
    print("| model | tets moved | rotation vs unpushed: mean / p95 / max | volume lost (moved tets) | inverted tets |")
    print("|---|---|---|---|---|")
    print(_row("Phace", phace))
    print(_row(f"volumetric blendshapes (μ = λ = {args.mu:g})" if args.mu == args.lam else "volumetric blendshapes",
               blendshapes))
    if args.picture is not None:
        from solver.pictures.nose_push import picture_nose_push
        print("picture:", picture_nose_push(mesh, {"Phace": (x, phace), "volumetric blendshapes": (y, blendshapes)},
                                            nose_tip, model_head_axes(model), plane, args.picture,
                                            f"a plane {args.depth_mm:g} mm into the nose; commit {commit()}"))


if __name__ == "__main__":
    main()
