"""Muscles that move like their names: each muscle family contracted alone, against the rig's own key.

Run from the repository root:

    .venv/bin/python bench/muscles.py [--model MODEL.npz] [--rig ict|demo] [--target-tets 35000]

For the model (default: the ICT face built at --target-tets), each family is contracted alone
from rest, quasi-statically and without gravity, at γ = 1/0.7 (the fibre shortened by 30 %) and
γ = 2 (shortened to half: "full contraction", the smallest eigenvalue inverse physics lets a
fitted activation reach, solver/inverse/fit.py MIN_ACTIVATION_EIGENVALUE):

    smile       zygomaticus_major_L              mouth_corner_L   against mouthSmile_L
    frown       depressor_anguli_oris_L          mouth_corner_L   against mouthFrown_L
    brow raise  frontalis_L                      brow_inner_L     against browInnerUp_L (or browInnerUp)
                                                 brow_outer_L     against browOuterUp_L
    pucker      orbicularis_oris_L + _R          upper_lip, lower_lip and the mouth width
                                                 (mouth_corner_L to _R)  against mouthPucker

and, as tests/test_muscle_families.py reads them, the mean motion of the left brow (skin within
5 mm of the brow_inner_L–brow_outer_L segment) and of the lips (skin in front of the mouth
corners, within 8 mm of their height and 20 mm of the midline) against the keys' mean there.

Per landmark it prints the simulated displacement of the skin (mm) and its components in the
head frame (left, up, forward; docs/model-format.md), the rig key's displacement of the same
vertex, the ratio of the two lengths and the simulated motion projected on the key's
direction over the key's length ("along"); a key that moves the vertex less than 0.05 mm
gets no ratio. Then the Newton iterations, load steps and
convergence of the solve. Issue 37 asks for smile at γ = 2 to reach ratio ≥ 0.5.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))

from bench_info import commit  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.model_file import load_model, model_head_axes, model_landmarks  # noqa: E402
from solver.physics.activation import muscle_indices, tet_activations  # noqa: E402
from solver.physics.simulator import FaceSimulator, SimulationSettings  # noqa: E402

MM = 1e3
CONTRACTIONS = (1.0 / 0.7, 2.0)
# family: (muscles, [(landmark, rig key candidates)])
FAMILIES = {
    "smile": (("zygomaticus_major_L",), [("mouth_corner_L", ("mouthSmile_L",))]),
    "frown": (("depressor_anguli_oris_L",), [("mouth_corner_L", ("mouthFrown_L",))]),
    "brow raise": (("frontalis_L",), [("brow_inner_L", ("browInnerUp_L", "browInnerUp")),
                                      ("brow_outer_L", ("browOuterUp_L",))]),
    "pucker": (("orbicularis_oris_L", "orbicularis_oris_R"),
               [("upper_lip", ("mouthPucker",)), ("lower_lip", ("mouthPucker",))]),
}
PUCKER_KEY = "mouthPucker"
BROW_KEYS = ("browOuterUp_L", "browInnerUp_L", "browInnerUp")
# The regions tests/test_muscle_families.py reads on the demo model: the left brow (skin within
# BROW_BAND of the brow_inner_L–brow_outer_L segment) and the lips (skin in front of the mouth
# corners, within LIP_HEIGHT of their height and LIP_HALF_WIDTH of the midline).
BROW_BAND = 5e-3
LIP_HEIGHT, LIP_HALF_WIDTH = 8e-3, 20e-3
# A key that moves a vertex less than this has no ratio worth printing (m).
KEY_FLOOR = 0.05e-3


def load_rig(which: str):
    if which == "demo":
        from solver.demo_head import make_demo_rig
        return make_demo_rig()
    from tests.ict_data import ICT_PATH, ict_available, load_ict_rig
    if not ict_available():
        sys.exit(f"the ICT FaceKit data is needed for this benchmark: {ICT_PATH} not found")
    return load_ict_rig()


def landmark_vertex(model, name) -> int:
    """The skin vertex at a landmark (landmarks are placed on skin vertices)."""
    return int(np.argmin(np.linalg.norm(model["skin_vertices"] - model_landmarks(model)[name], axis=1)))


def contraction_of(model, muscles, gamma) -> np.ndarray:
    contraction = np.ones(len(model["muscle_names"]))
    contraction[muscle_indices(model, muscles)] = gamma
    return contraction


def head_components(axes, vector) -> str:
    left, up, forward = axes @ vector * MM
    return f"(L {left:+6.2f} U {up:+6.2f} F {forward:+6.2f})"


def rig_key(rig, candidates):
    for name in candidates:
        if rig.has_shape_key(name):
            return name, np.asarray(rig.shape_key(name), dtype=np.float64)
    return None, None


def contract(simulator, model, muscles, gamma):
    """Skin displacement (V, 3) of the muscles alone at γ, solved from rest, and the frame."""
    simulator.return_to_rest()
    rest = simulator.skin_positions()
    frame = simulator.step(tet_activations(model, contraction_of(model, muscles, gamma)))
    return simulator.skin_positions() - rest, frame


def compare(axes, label, moved, key_name, key_move) -> str:
    line = f"    {label:16s} sim {np.linalg.norm(moved) * MM:6.2f} mm {head_components(axes, moved)}"
    if key_name is None:
        return line + "   (the rig has no such key)"
    key_length = np.linalg.norm(key_move)
    line += f"   rig {key_name:13s} {key_length * MM:6.2f} mm {head_components(axes, key_move)}"
    if key_length < KEY_FLOOR:
        return line + "   (the key does not move it)"
    return line + (f"   ratio {np.linalg.norm(moved) / key_length:5.2f}, "
                   f"along {moved @ key_move / key_length ** 2:+5.2f}")


def brow_band(model) -> np.ndarray:
    landmarks = model_landmarks(model)
    inner, outer = landmarks["brow_inner_L"], landmarks["brow_outer_L"]
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    along = np.clip((skin - inner) @ (outer - inner) / np.sum((outer - inner) ** 2), 0.0, 1.0)
    return np.linalg.norm(skin - inner - along[:, None] * (outer - inner), axis=1) < BROW_BAND


def lip_region(model) -> np.ndarray:
    left, right = landmark_vertex(model, "mouth_corner_L"), landmark_vertex(model, "mouth_corner_R")
    skin = np.asarray(model["skin_vertices"], dtype=np.float64)
    local = (skin - 0.5 * (skin[left] + skin[right])) @ model_head_axes(model).T
    return (np.abs(local[:, 0]) < LIP_HALF_WIDTH) & (np.abs(local[:, 1]) < LIP_HEIGHT) & (local[:, 2] > 0.0)


def run_family(simulator, model, rig, axes, family, gamma):
    muscles, landmarks = FAMILIES[family]
    moved, frame = contract(simulator, model, muscles, gamma)
    lines = []
    for name, keys in landmarks:
        vertex = landmark_vertex(model, name)
        key_name, deltas = rig_key(rig, keys)
        lines.append(compare(axes, name, moved[vertex], key_name, None if deltas is None else deltas[vertex]))
    if family == "brow raise":
        band = brow_band(model)
        for key in BROW_KEYS:
            key_name, deltas = rig_key(rig, (key,))
            if key_name is not None:
                lines.append(compare(axes, f"left brow ({band.sum()})", moved[band].mean(axis=0), key_name,
                                     deltas[band].mean(axis=0)))
    if family == "pucker":
        lips = lip_region(model)
        key_name, deltas = rig_key(rig, (PUCKER_KEY,))
        lines.append(compare(axes, f"lips ({lips.sum()})", moved[lips].mean(axis=0), key_name,
                             None if deltas is None else deltas[lips].mean(axis=0)))
        left, right = landmark_vertex(model, "mouth_corner_L"), landmark_vertex(model, "mouth_corner_R")
        skin = np.asarray(model["skin_vertices"], dtype=np.float64)
        width = np.linalg.norm(skin[left] - skin[right])
        sim_width = np.linalg.norm(skin[left] + moved[left] - skin[right] - moved[right]) - width
        key_name, deltas = rig_key(rig, (PUCKER_KEY,))
        text = f"    {'mouth width':16s} sim {sim_width * MM:+6.2f} mm (rest {width * MM:.1f} mm)"
        if key_name is not None:
            key_width = np.linalg.norm(skin[left] + deltas[left] - skin[right] - deltas[right]) - width
            text += f"   rig {key_name} {key_width * MM:+6.2f} mm   ratio {sim_width / key_width:5.2f}"
        lines.append(text)
    peak = np.argmax(np.linalg.norm(moved, axis=1))
    lines.append(f"    {'largest skin move':16s} {np.linalg.norm(moved[peak]) * MM:6.2f} mm at vertex {peak}; "
                 f"Newton {frame.iterations} iterations in {frame.load_steps} load steps, "
                 f"{'converged' if frame.converged else 'NOT converged: ' + frame.reason}, {frame.seconds:.1f} s")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model file (.npz); default: build one from --rig")
    parser.add_argument("--rig", choices=("ict", "demo"), default="ict",
                        help="the rig whose keys are compared (and which is built without --model)")
    parser.add_argument("--target-tets", type=int, default=35000)
    parser.add_argument("--families", nargs="+", choices=tuple(FAMILIES), default=tuple(FAMILIES))
    args = parser.parse_args()
    rig = load_rig(args.rig)
    if args.model:
        model = load_model(args.model)
        source = args.model
    else:
        started = time.perf_counter()
        model = build_model(rig, BuildOptions(target_tets=args.target_tets))
        source = f"built from the {args.rig} rig at target {args.target_tets} tets in {time.perf_counter() - started:.0f} s"
    if len(model["skin_vertices"]) != len(rig.vertices):
        sys.exit(f"the model has {len(model['skin_vertices'])} skin vertices, the {args.rig} rig {len(rig.vertices)}: "
                 "not a model of this rig")
    axes = model_head_axes(model)
    muscle_tets = int((np.asarray(model["muscle_fraction"]).sum(axis=1) > 0).sum())
    print(f"commit {commit()}; model {source}: {len(model['tets'])} tets ({muscle_tets} with muscle), "
          f"{len(model['rest_positions'])} nodes, {len(model['skin_vertices'])} skin vertices")
    print("each family alone from rest, quasi-static, no gravity; displacements of the skin vertex at the "
          "landmark, head-frame components (L)eft (U)p (F)orward in mm")
    simulator = FaceSimulator(model, SimulationSettings())
    for family in args.families:
        muscles = FAMILIES[family][0]
        fraction = np.asarray(model["muscle_fraction"])[:, muscle_indices(model, muscles)].sum(axis=1)
        print(f"\n{family}: {' + '.join(muscles)} ({int((fraction > 0).sum())} tets)")
        for gamma in CONTRACTIONS:
            print(f"  γ = {gamma:.3f} (fibre × {1 / gamma:.2f})")
            for line in run_family(simulator, model, rig, axes, family, gamma):
                print(line)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
