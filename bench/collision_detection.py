"""Benchmark collision detection (solver/collisions) on the demo head and the ICT face.

Run from the repository root:  .venv/bin/python bench/collision_detection.py [--repeats N] [--json]

For each model (the demo head built at 3000 tets; ICT FaceKit at 4000 tets when the data
set is beside the project) it builds a CollisionScene (teeth proxies, lips, and a 2.5 cm
sphere prop at the chin) and reports the mesh sizes, the scene build time, and the mean
milliseconds (wall and CPU) per detection pass (all colliders) in three poses: neutral (no contacts),
lower lip pushed 3 mm up through the upper lip, and the upper lip pushed 6 mm back into
the teeth. Kernels are compiled/loaded and each pose detected once before timing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from solver.collisions import BonePose, CollisionScene, MeshCollider  # noqa: E402
from solver.demo_head import make_demo_rig  # noqa: E402
from solver.geometry import icosphere  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from tests.ict_data import ict_available, load_ict_rig  # noqa: E402

IDENTITY = BonePose(skull=np.eye(4), jaw=np.eye(4), frame=0)




def chin_prop(model):
    """A sphere prop pressed 5 mm into the skin in front of the chin."""
    marks = dict(zip([str(n) for n in model["landmark_names"]], model["landmark_positions"]))
    forward = np.asarray(model["head_frame"])[2]
    radius = 0.025
    vertices, faces = icosphere(3, radius)
    transform = np.eye(4)
    transform[:3, 3] = marks["chin"] + (radius - 0.005) * forward
    return MeshCollider("chin_ball", vertices, faces, transform[None])


def time_passes(scene, skin, repeats):
    """(wall ms, CPU ms) per pass, and the contacts. The kernels are serial, so CPU time is
    the work itself even when other jobs share the machine and inflate the wall time."""
    scene.detect(skin, IDENTITY)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        contacts = scene.detect(skin, IDENTITY)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / repeats * 1e3, cpu / repeats * 1e3, contacts


def bench_model(label, model, repeats):
    start = time.perf_counter()
    scene = CollisionScene(model, colliders=[chin_prop(model)])
    build_s = time.perf_counter() - start
    skin = np.ascontiguousarray(model["skin_vertices"])
    axes = np.asarray(model["head_frame"])
    up, forward = axes[1], axes[2]
    lips = scene.lips
    lip_up = skin.copy()
    lip_up[lips.lower_vertices] += 0.003 * up
    lip_back = skin.copy()
    lip_back[lips.upper_vertices] -= 0.006 * forward
    report = {
        "model": label,
        "skin_vertices": int(len(skin)),
        "skin_triangles": int(len(model["skin_triangles"])),
        "teeth_proxy_triangles": {c.name: c.proxy.triangle_count for c in scene.teeth},
        "teeth_proxy_region_triangles": {c.name: int(len(c.proxy.region)) for c in scene.teeth},
        "teeth_source": {c.name: c.proxy.source for c in scene.teeth},
        "lip_vertices": {"upper": int(len(lips.upper_vertices)), "lower": int(len(lips.lower_vertices))},
        "lip_region_triangles": {"upper": int(len(lips.upper_region)), "lower": int(len(lips.lower_region))},
        "lip_source": lips.source,
        "scene_build_s": round(build_s, 3),
        "ms_per_pass": {},
        "contacts": {},
    }
    for pose_name, positions in (("neutral", skin), ("lower_lip_up_3mm", lip_up), ("upper_lip_back_6mm", lip_back)):
        wall_ms, cpu_ms, contacts = time_passes(scene, positions, repeats)
        report["ms_per_pass"][pose_name] = {"wall": round(wall_ms, 3), "cpu": round(cpu_ms, 3)}
        report["contacts"][pose_name] = {name: int((contacts.collider == i).sum()) for i, name in enumerate(scene.names)}
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="print one JSON object per model")
    args = parser.parse_args()
    models = [("demo head (3000 tets)", lambda: build_model(make_demo_rig(), BuildOptions(target_tets=3000)))]
    if ict_available():
        models.append(("ICT FaceKit (4000 tets)", lambda: build_model(load_ict_rig(), BuildOptions(target_tets=4000))))
    else:
        print("ICT FaceKit data not found; benchmarking the demo head only")
    for label, build in models:
        report = bench_model(label, build(), args.repeats)
        if args.json:
            print(json.dumps(report))
            continue
        print(f"\n{label}: {report['skin_vertices']} skin vertices, {report['skin_triangles']} skin triangles")
        print(f"  teeth proxies ({report['teeth_source']}): {report['teeth_proxy_triangles']} triangles, "
              f"labial regions {report['teeth_proxy_region_triangles']}")
        print(f"  lips ({report['lip_source']}): vertices {report['lip_vertices']}, "
              f"regions {report['lip_region_triangles']} triangles")
        print(f"  scene build {report['scene_build_s']:.2f} s")
        print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        for pose_name, milliseconds in report["ms_per_pass"].items():
            print(f"  {pose_name:>20}: {milliseconds['wall']:7.3f} ms wall, {milliseconds['cpu']:7.3f} ms CPU per "
                  f"detection pass; contacts {report['contacts'][pose_name]}")


if __name__ == "__main__":
    main()
