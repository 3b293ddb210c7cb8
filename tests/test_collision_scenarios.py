"""Issue 5 acceptance scenarios on the demo head at 15,000 target tets (built once for the module).

1. Lip contact: a shape-key animation whose plain blendshape result (rest + Σ w_j delta_j,
   bones at the blended jaw) pushes skin into the teeth proxies and each lip through the
   other — the jaw opens with mouthClose over it (jawOpen + mouthClose is the closed mouth),
   then closes while mouthClose stays on — against fit → blend → FaceSimulator with
   CollisionScene(model, teeth=True, lips=True), the fit's detail residual included as each
   frame's skin offset (what `animate` writes). The plain result must penetrate; the displayed
   one must not, by more than 0.2 mm (measured again with CollisionScene.measure on every
   frame's displayed skin: the lips against the teeth and each other, the rule of
   docs/collisions.md "Which skin meets the teeth"), and the tissue itself must hold every
   vertex it can push (drive ≥ 0.25) within 0.2 mm — the display projection only moves
   vertices the tissue cannot (anchored) and offsets the fit's residual carries in.
2. No lip vertex behind the teeth: for every lip vertex inside the teeth's frontal silhouette
   (the line through it along the head's forward axis meets a teeth proxy), its forward
   coordinate minus that of the frontmost proxy surface on that line must not drop more than
   0.2 mm below its rest value; and every teeth plane handed to the solver faces out of the
   arch (its horizontal part points away from the arch centre).
3. A headset-like shell (a closed visor with thickness, made in code from the face's smoothed
   upper envelope, saved as MESH.npz and read back by load_mesh_collider) moved 2 mm past first
   contact onto the upper face: no penetration deeper than 0.2 mm, tet volume change < 2 %, no
   inverted tet, the skin bulges around the contact. And the CLI path: `python -m solver --json animate
   MODEL FIT WEIGHTS -o RESULT.npz --collisions teeth,lips --collider shell.npz`.
4. The before/after picture (solver/pictures/contact_frames.py).

The scenario definitions live in bench/collision_scenarios.py, which prints the same numbers
per frame. Measured numbers are in docs/collisions.md ("Acceptance scenarios").
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from solver.collisions import BonePose, CollisionScene, load_mesh_collider
from solver.inverse.fit_file import save_fit
from solver.inverse.shapes import fit_shapes
from solver.model_builder.builder import BuildOptions, build_model
from solver.model_file import save_model

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "bench"))
import collision_scenarios as scenarios  # noqa: E402

pytestmark = pytest.mark.slow

MM = 1e3
MAX_DEPTH = 0.2e-3          # m: the bound on any penetration
MAX_BEHIND = 0.2e-3         # m: how far a lip vertex may move behind the front of a teeth row
MAX_VOLUME_CHANGE = 0.02
# The test animation: the jaw opens under mouthClose, then closes with mouthClose held on
# (weights where the blended activations stay positive definite: jawOpen ≥ 0.6 with
# mouthClose 1 on the demo fit).
LIP_WEIGHTS = {"jawOpen": [0.0, 1.0, 0.8, 0.6], "mouthClose": [0.0, 1.0, 1.0, 1.0]}
HEADSET_FRAMES = 5
HEADSET_PRESS = 2.0e-3      # m past first contact


@pytest.fixture(scope="module")
def demo_15k(demo_rig):
    return build_model(demo_rig, BuildOptions(target_tets=15000))


@pytest.fixture(scope="module")
def lip_fit(demo_15k, demo_rig):
    return fit_shapes(demo_15k, demo_rig, list(LIP_WEIGHTS), jobs=1)


@pytest.fixture(scope="module")
def lip_run(demo_15k, demo_rig, lip_fit):
    scene = CollisionScene(demo_15k, teeth=True, lips=True)
    messages = []
    run = scenarios.run_lip_scenario(demo_15k, lip_fit, lambda names: scenarios.shape_deltas(demo_rig, names),
                                     LIP_WEIGHTS, scene, progress=messages.append)
    return dict(scene=scene, run=run, messages=messages)


def _report(run_or_messages) -> str:
    return "\n".join(run_or_messages)


def test_plain_blendshapes_penetrate_and_the_simulation_holds_the_skin_out(lip_run):
    run, messages = lip_run["run"], lip_run["messages"]
    frames = run.frames
    report = _report(messages + scenarios.summarise_lip_run(run))
    # The plain blend really penetrates: skin into the teeth proxies and each lip through the other.
    assert max(f.plain_count for f in frames) > 20, report
    assert any(f.plain_per_collider["upper_lip"] + f.plain_per_collider["lower_lip"] > 0 for f in frames), report
    assert any(f.plain_per_collider["upper_teeth"] + f.plain_per_collider["lower_teeth"] > 0 for f in frames), report
    assert max(f.plain_depth for f in frames) > 1e-3, report
    # The displayed result does not, by more than 0.2 mm, and the tissue holds what it can push.
    assert all(f.converged for f in frames), report
    assert max(f.simulated_depth for f in frames) <= MAX_DEPTH, report
    assert max(f.reported_depth for f in frames) <= MAX_DEPTH, report
    assert max(f.physics_depth for f in frames) <= MAX_DEPTH, report


def test_no_lip_vertex_ends_behind_the_teeth(lip_run, demo_15k):
    run, messages = lip_run["run"], lip_run["messages"]
    total, inward, worst = scenarios.inward_teeth_planes(run.recording, demo_15k)
    report = _report(messages + [f"teeth planes {total}, pointing into the mouth {inward} (worst {worst:.3f})"])
    assert total > 0, report
    assert inward == 0, report
    assert max(f.behind_simulated for f in run.frames) <= MAX_BEHIND, report
    # In the mouth behind a row (its shadow, teeth_shadow.py), on the displayed skin and on the
    # tissue's own.
    assert max(max(f.in_mouth_simulated, f.in_mouth_tissue) for f in run.frames) <= MAX_BEHIND, report


def test_the_before_after_picture(lip_run, demo_15k, tmp_path):
    from solver.pictures.contact_frames import contact_frame_sheet, picture_contact_frames
    run, scene = lip_run["run"], lip_run["scene"]
    frame = int(np.argmax([f.plain_count for f in run.frames]))
    sheet = contact_frame_sheet(demo_15k, scene, run.plain[frame], run.simulated[frame], run.poses[frame])
    assert len(sheet.plain_penetrating) == run.frames[frame].plain_count
    assert sheet.plain_depth_m == pytest.approx(run.frames[frame].plain_depth)
    image = sheet.image
    assert image.ndim == 3 and image.shape[2] == 3 and image.shape[0] > 800 and image.shape[1] > 800
    red = (image[..., 0] > 180) & (image[..., 1] < 60) & (image[..., 2] < 60)
    assert red.sum() > 20, "the penetrating vertices are drawn red"
    path = picture_contact_frames(demo_15k, scene, run.plain[frame], run.simulated[frame], run.poses[frame],
                                  tmp_path / "lip_contact.png")
    assert path.is_file() and path.stat().st_size > 10_000


def test_the_mouth_corner_picture(lip_run, demo_15k):
    """Both corners close up, plain and shown side by side: four views centred on the corner,
    skin in the middle of each."""
    from solver.pictures.contact_frames import mouth_corner_sheet
    run = lip_run["run"]
    frame = int(np.argmax([f.plain_count for f in run.frames]))
    image = mouth_corner_sheet(demo_15k, run.plain[frame], run.simulated[frame], "corners")
    assert image.ndim == 3 and image.shape[1] >= 4 * 360 and image.shape[0] > 360
    panel_width = image.shape[1] // 4
    middle = image[image.shape[0] // 2 + 20]
    for panel in range(4):
        centre = middle[panel * panel_width + panel_width // 2].astype(int)
        assert centre.sum() > 150 and abs(int(centre[0]) - int(centre[2])) > 20, "the skin fills the view's centre"


def test_the_contact_region_picture(lip_run, demo_15k):
    """contact_frames.contact_region_sheet on the region around the plain frame's penetrating
    vertices (the rest face drawn): relaxed tets and the held ring both show, in both views."""
    from solver.physics.skin_embedding import SkinEmbedding
    from solver.physics.contact_region import ContactRegion
    from solver.physics.corotated import CorotatedElasticity
    from solver.pictures.contact_frames import HELD_RING_COLOUR, RELAXED_COLOUR, contact_region_sheet
    run, scene = lip_run["run"], lip_run["scene"]
    frame = int(np.argmax([f.plain_count for f in run.frames]))
    vertices = np.unique(scene.detect(run.plain[frame], run.poses[frame]).vertex)
    embedding = SkinEmbedding.from_model(demo_15k)
    nodes = np.asarray(demo_15k["rest_positions"])
    region = ContactRegion(demo_15k, CorotatedElasticity(nodes, demo_15k["tets"]), embedding).region(
        embedding.nodes[vertices])
    image = contact_region_sheet(demo_15k, scene, nodes, embedding.skin_positions(nodes), run.poses[0], region,
                                 vertices)
    assert image.ndim == 3 and image.shape[0] > 400 and image.shape[1] > 900

    def pixels(colour):
        target = np.round(np.asarray(colour) * 255)
        return (np.abs(image.astype(float) - target).max(axis=2) < 40).sum()
    assert pixels(RELAXED_COLOUR) > 5_000 and pixels(HELD_RING_COLOUR) > 2_000


def test_the_lip_section_picture(lip_run, demo_15k, tmp_path):
    from PIL import Image
    from solver.pictures.contact_frames import REGION_COLOUR
    from solver.pictures.lip_sections import picture_lip_sections
    run, scene = lip_run["run"], lip_run["scene"]
    panels = scenarios.lip_section_panels(demo_15k, scene, run)
    # No frame leaves the tissue's own lip vertices in the mouth here, so the panels are the
    # frames whose plain blend goes more than 0.2 mm in: one on the demo, the deepest.
    assert all(f.in_mouth_tissue_vertices == 0 for f in run.frames)
    assert len(panels) == 1
    assert panels[0].title.startswith(f"frame {int(np.argmax([f.in_mouth_plain for f in run.frames]))}:")
    assert len(panels[0].marked) == 0 and [label for label, _, _ in panels[0].skins][-1].startswith("simulated")
    path = picture_lip_sections(demo_15k, scene, panels, tmp_path / "sections.png", title="demo")
    with Image.open(path) as picture:
        image = np.asarray(picture.convert("RGB")).astype(int)
    assert image.shape[0] > 400 and image.shape[1] > 400

    def pixels_near(colour, tolerance=40):
        return int((np.abs(image - np.round(np.asarray(colour) * 255)).max(axis=2) <= tolerance).sum())

    assert pixels_near(REGION_COLOUR) > 200, "the teeth proxies' labial regions are cut"
    assert pixels_near((0.85, 0.1, 0.05)) > 200, "the simulated skin is cut"
    with pytest.raises(ValueError, match="at least one panel"):
        picture_lip_sections(demo_15k, scene, [], tmp_path / "none.png")


@pytest.fixture(scope="module")
def headset_file(demo_15k, tmp_path_factory):
    path = tmp_path_factory.mktemp("headset") / "headset.npz"
    return scenarios.save_headset(path, demo_15k, frames=HEADSET_FRAMES, press=HEADSET_PRESS)


def test_headset_shell_is_a_valid_mesh_collider_reaching_the_face(headset_file, demo_15k):
    shell = load_mesh_collider(headset_file)
    assert shell.name == "headset" and shell.frame_count == HEADSET_FRAMES
    rest = np.asarray(demo_15k["skin_vertices"])
    depths = [shell.detect(rest, BonePose(np.eye(4), np.eye(4), frame), 0).depth.max(initial=0.0)
              for frame in range(HEADSET_FRAMES)]
    assert depths[0] == 0.0 and depths[1] == 0.0
    assert depths[-1] == pytest.approx(HEADSET_PRESS, abs=0.05e-3)


def _assert_headset_acceptance(model, headset_file):
    shell = load_mesh_collider(headset_file)
    scene = CollisionScene(model, teeth=True, lips=True, colliders=[shell])
    messages = []
    result = scenarios.press_scenario(model, scene, "headset", HEADSET_FRAMES, progress=messages.append)
    report = _report(messages + scenarios.describe_press("headset", result))
    assert all(result.converged), report
    assert max(result.depth) <= MAX_DEPTH, report
    assert max(result.physics_depth) <= MAX_DEPTH, report
    assert abs(result.volume_change) < MAX_VOLUME_CHANGE, report
    assert result.smallest_volume_ratio > 0.0, report
    assert result.pressed_in > 1.0e-3, report
    assert result.bulge > 0.0, report


def test_headset_shell_pressed_on_the_upper_face(headset_file, demo_15k):
    """Over the glabella the demo head has 1.4-6 mm of tissue on sliding bone nodes. A push
    straight at the bone is asked only of vertices whose tet can give that way
    (ContactResponse.drive_along); before, those nodes slid 30-130 mm over the skull under
    this press and turned tets inside out (docs/collisions.md, "Headset")."""
    _assert_headset_acceptance(demo_15k, headset_file)


def _solver(*args, cwd):
    environment = dict(os.environ, PYTHONPATH=str(REPOSITORY))
    completed = subprocess.run([sys.executable, "-m", "solver", "--json", *map(str, args)], cwd=cwd,
                               env=environment, capture_output=True, text=True, timeout=1800)
    return completed, [json.loads(line) for line in completed.stdout.splitlines() if line.strip()]


def test_animate_cli_with_teeth_lips_and_a_headset_shell(tmp_path, demo_15k, lip_fit, headset_file):
    """The CLI path, the fit's detail residual included: the written skin is what is shown, and
    is measured again."""
    model = demo_15k
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", lip_fit)
    names = list(LIP_WEIGHTS)
    weights = np.column_stack([LIP_WEIGHTS[name] for name in names])
    frames = len(weights)
    np.savez(tmp_path / "weights.npz", names=np.array(names), weights=weights, fps=24.0)
    shell = np.load(headset_file)
    # The shell comes in over the animation's frames (its last two transforms: 1 mm, 2 mm in).
    np.savez(tmp_path / "shell.npz", vertices=shell["vertices"], faces=shell["faces"],
             transforms=shell["transforms"][-frames:])
    completed, messages = _solver("animate", "model.npz", "fit.npz", "weights.npz", "-o", "result.npz",
                                  "--collisions", "teeth,lips", "--collider", "shell.npz", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    with np.load(tmp_path / "result.npz", allow_pickle=False) as result:
        arrays = {key: result[key] for key in result.files}
    progress = [m for m in messages if m["type"] == "progress" and m.get("frame")]      # frame lines, from 1
    report = "\n".join(json.dumps(m) for m in progress)
    assert arrays["penetration_depth_max"].shape == (frames,)
    assert arrays["contacts"].shape == (frames,)
    assert arrays["skull_transforms"].shape == (frames, 4, 4) and arrays["jaw_transforms"].shape == (frames, 4, 4)
    assert np.allclose(arrays["skull_transforms"], np.eye(4))
    assert not np.allclose(arrays["jaw_transforms"][1], np.eye(4)), "the jaw opens in frame 1"
    assert all("penetration_depth_max_mm" in m for m in progress)
    assert arrays["contacts"].max() > 0, report
    assert arrays["penetration_depth_max"].max() <= MAX_DEPTH, report
    # Measured again on the written skin (detail, display projection and skin filter included)
    # with the written bone transforms, as the filter keeps it out (the lips' corner fade allowed).
    scene = CollisionScene(model, teeth=True, lips=True, colliders=[load_mesh_collider(tmp_path / "shell.npz")])
    measured = [scene.measure(arrays["skin_positions"][frame],
                              BonePose(arrays["skull_transforms"][frame], arrays["jaw_transforms"][frame], frame),
                              shown=True)
                for frame in range(frames)]
    report += "\nmeasured: " + "; ".join(json.dumps(m.as_dict()) for m in measured)
    assert max(m.max_depth_m for m in measured) <= MAX_DEPTH, report
    assert arrays["converged"].all(), report
