"""Per-frame cost of the corrected rig in Blender (issue 42): a headless bpy mesh with K user shape
keys and N driven corrective keys (blender_addon/corrective_keys.py), timed per frame as the
depsgraph update after the key values change (drivers + shape-key mix), against the same mesh
with its K linear keys only.

    python bench/correctives_blender.py [--pairs 30] [--frames 60]

The mesh is the ICT generic face's skin (14,062 vertices, 53 keys; tests/ict_data.py) when the
data set is there, else a grid of the same size with 53 smooth random keys. The correctives are
synthetic (random smooth offsets; the cost does not depend on their values): one linear correction
and one w_a² term per key and `--pairs` w_a·w_b terms, so N = 2K + pairs. Every frame sets new
random weights (about half non-zero) on all K keys; the figure is the median over the frames.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import bpy  # noqa: E402

from bench.bench_info import commit  # noqa: E402


def face_mesh(keys: int):
    """(vertices (V, 3) m, faces, names, deltas (K, V, 3) m, source)."""
    from ict_data import ict_available, load_ict_rig
    if ict_available():
        rig = load_ict_rig()
        return (np.asarray(rig.vertices), np.asarray(rig.faces), [str(n) for n in rig.shape_key_names][:keys],
                np.asarray(rig.shape_key_deltas)[:keys], "ICT skin")
    side = 118                                            # 14,161 vertices, about ICT's 14,062
    x, y = np.meshgrid(np.linspace(-0.1, 0.1, side), np.linspace(-0.1, 0.1, side))
    vertices = np.stack([x.ravel(), y.ravel(), np.zeros(side * side)], axis=1)
    index = np.arange(side * side).reshape(side, side)
    faces = np.stack([index[:-1, :-1].ravel(), index[:-1, 1:].ravel(), index[1:, 1:].ravel(),
                      index[1:, :-1].ravel()], axis=1)
    rng = np.random.default_rng(0)
    deltas = np.stack([np.sin(vertices @ rng.normal(size=(3, 3)) * 30) * 0.005 for _ in range(keys)])
    return vertices, faces, [f"key{k:02d}" for k in range(keys)], deltas, "grid"


def build_object(vertices, faces, names, deltas):
    mesh = bpy.data.meshes.new("face")
    mesh.from_pydata(vertices.tolist(), [], faces.tolist())
    obj = bpy.data.objects.new("face", mesh)
    bpy.context.scene.collection.objects.link(obj)
    bpy.context.view_layer.objects.active = obj
    obj.shape_key_add(name="Basis", from_mix=False)
    for name, delta in zip(names, deltas):
        obj.shape_key_add(name=name, from_mix=False).data.foreach_set(
            "co", (vertices + delta).astype(np.float32).ravel())
    return obj


def corr_arrays(vertices, names, pairs: int, rng):
    terms = [(a, "") for a in names] + [(a, a) for a in names]
    candidates = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    terms += [candidates[i] for i in rng.choice(len(candidates), size=min(pairs, len(candidates)), replace=False)]
    offsets = np.stack([np.sin(vertices @ rng.normal(size=(3, 3)) * 20) * 0.001 for _ in terms]).astype(np.float32)
    return {"key_names": np.array(names, dtype=str), "term_names": np.array(terms, dtype=str), "terms": offsets,
            "vertex_count": np.array(len(vertices)), "format_version": np.array(1)}


def time_frames(obj, names, frames: int, rng) -> float:
    blocks = [obj.data.shape_keys.key_blocks[name] for name in names]
    depsgraph = bpy.context.evaluated_depsgraph_get()
    times = []
    for _ in range(frames):
        weights = rng.uniform(0, 1, len(blocks)) * (rng.uniform(size=len(blocks)) < 0.5)
        for block, value in zip(blocks, weights):
            block.value = value
        start = time.perf_counter()
        depsgraph.update()
        obj.evaluated_get(depsgraph).data.vertices[0].co     # the evaluated mesh exists
        times.append(time.perf_counter() - start)
    return float(np.median(times[3:])) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=53)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--frames", type=int, default=60)
    args = parser.parse_args()
    import addon_utils
    bpy.ops.wm.read_homefile(use_empty=True)
    addon_utils.enable("blender_addon", default_set=True, handle_error=None)
    from blender_addon import corrective_keys
    rng = np.random.default_rng(1)
    vertices, faces, names, deltas, source = face_mesh(args.keys)
    obj = build_object(vertices, faces, names, deltas)
    linear_ms = time_frames(obj, names, args.frames, rng)
    arrays = corr_arrays(vertices, names, args.pairs, rng)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "CORR.npz"
        np.savez(path, **arrays)
        start = time.perf_counter()
        added, _ = corrective_keys.add_from_file(bpy.context, obj, path)
        add_s = time.perf_counter() - start
    corrected_ms = time_frames(obj, names, args.frames, rng)
    print(f"{source}: {len(vertices)} vertices, {len(names)} keys + {len(added)} corrective keys "
          f"({args.pairs} pairs); median of {args.frames - 3} frames; commit {commit()}")
    print(f"  per frame (depsgraph update): linear {linear_ms:.2f} ms, corrected {corrected_ms:.2f} ms")
    print(f"  Add Corrective Keys: {add_s:.2f} s")


if __name__ == "__main__":
    main()
