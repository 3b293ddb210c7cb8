"""Volumetric blendshapes under a flat collider pushed 10 mm into the nose (neutral face), contacts
as equality rows solved through the Schur complement (paper 002 Eq. 10): per-tet rotation of the
pushed tets against the unpushed pose, and volume loss. The Phace side of the comparison
(paper 000 Fig. 10) is not measured here yet.

The collider is the plane through nose_tip − depth·forward with normal forward (head frame);
every skin vertex in front of it is held on it (an active set that only grows, re-detected each
PD iteration).

    .venv/bin/python bench/nose_push_vbs.py [--depth-mm 10] [--mu 0.01 --lam 0.01]
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
from solver.volumetric_blendshapes.energies import TetMesh, VolumetricBlendshapeEnergy  # noqa: E402
from solver.volumetric_blendshapes.projective_dynamics import (ProjectiveDynamics, barycentric_matrix,  # noqa: E402
                                                               model_fixed_nodes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("/work/s11/ict/model.npz"))
    parser.add_argument("--depth-mm", type=float, default=10.0)
    parser.add_argument("--mu", type=float, default=0.01)
    parser.add_argument("--lam", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    model = load_model(args.model)
    mesh = TetMesh(model["rest_positions"], model["tets"])
    forward = model_head_axes(model)[2]
    plane = float(model_landmarks(model)["nose_tip"] @ forward) - 1e-3 * args.depth_mm
    energy = VolumetricBlendshapeEnergy(mesh, np.broadcast_to(np.eye(3), (len(mesh.tets), 3, 3)), 1.0, args.mu, args.lam)
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
    x, report = pd.solve(mesh.rest_positions, args.iterations, 1e-7, constraints=contacts)
    seconds = time.perf_counter() - started
    F = mesh.deformation_gradients(x)
    rotation = polar_rotation(F)
    angle = np.degrees(np.arccos(np.clip((np.trace(rotation, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0)))
    moved = np.linalg.norm(x - mesh.rest_positions, axis=1)[mesh.tets].max(axis=1) > 1e-4     # tets the push moved
    determinant = np.linalg.det(F)
    volume = mesh.rest_volume
    print(f"commit {commit()}; {mesh.node_count} nodes, {len(mesh.tets)} tets; collider {args.depth_mm} mm into "
          f"the nose; mu {args.mu}, lam {args.lam}")
    print(f"PD {report.iterations} iterations ({'converged' if report.converged else 'not converged'}, last move "
          f"{report.last_step_m:.1e} m), {seconds:.1f} s, {len(active)} skin vertices in contact")
    print(f"tets moved > 0.1 mm: {int(moved.sum())}; their rotation against the unpushed pose: mean "
          f"{angle[moved].mean():.2f}°, max {angle.max():.2f}°")
    print(f"volume of the moved tets: {100 * (1 - (volume * determinant)[moved].sum() / volume[moved].sum()):.2f} % lost; "
          f"smallest det F {determinant.min():.3f}; inverted tets {int((determinant <= 0).sum())}")


if __name__ == "__main__":
    main()
