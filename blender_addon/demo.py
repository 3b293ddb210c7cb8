"""The product demo, worked through the add-on the way an artist would click it
(`python -m blender_addon.cli demo`, which `python3 build.py demo` runs):

1. the solver writes its built-in demo head (`python -m solver demo-rig`); **Import Face Rig**
   brings it in with its teeth, skull and jaw; the file is saved as `demo.blend`;
2. Model panel: **Build**; Fit panel: tick mouthSmile_L and mouthSmile_R, **Fit Selected**;
3. one duplicate of the skin per variant (Shift+D), side by side, each with its own panel
   settings and animation over the scene's frames: a smile keyed 0 → 1; the same smile with
   Bell's palsy **Left**; a fat map painted on both cheeks with **Slim ↔ Fat** towards fat; a
   sphere collider keyed to push into the left cheek;
4. Bake panel: **Bake** each to a Mesh Cache; save; Cycles renders every variant's last frame,
   the muscles (**Show Muscles**) and the fat map, and a captioned contact sheet.

Only operators and panel properties change the scene's Face Physics state; what a user would
do by hand (painting weights, keying values, placing the sphere) is done here with bpy.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import bpy
import numpy as np
from mathutils import Vector

from . import demo_pictures, muscle_overlay, preferences
from .demo_pictures import RenderQuality

SMILE_KEYS = ("mouthSmile_L", "mouthSmile_R")
FIRST_FRAME, LAST_FRAME = 1, 3          # a short ramp: the quasi-static solve starts each frame from the last
VARIANT_SPACING_M = 0.3                 # the duplicates stand side by side in demo.blend
FACE_CENTRE_M = Vector((0.0, 0.0, -0.02))   # between brows and chin of the demo head (rig frame, Z up)
FIELD_OF_VIEW_M = 0.28
FAT_SCALE = 1.5                         # the Fat panel's maximum
FAT_RADIUS_M = 0.05
FINGER_RADIUS_M = 0.012
FINGER_START_GAP_M = 0.001              # off the skin on the first frame …
FINGER_DEPTH_M = 0.01                   # … this far into the rest surface on the last
FINGER_ALPHA = 0.45                     # see-through, so the dent under it shows


@dataclass(frozen=True)
class DemoOptions:
    target_tets: int
    quality: RenderQuality
    fit_processes: int = 2


FULL = DemoOptions(target_tets=20000, quality=RenderQuality(resolution=480, samples=32))
# For the test suite: every step runs, on a coarse model and in thumbnails.
QUICK = DemoOptions(target_tets=2000, quality=RenderQuality(resolution=64, samples=2))


@dataclass(frozen=True)
class Picture:
    stem: str            # file name without .png
    caption: str         # under it on the contact sheet
    in_sheet: bool = True


NEUTRAL = Picture("neutral", "Neutral")
SMILE = Picture("smile", "Smile (fitted shape keys)")
PALSY = Picture("smile_palsy_left", "Smile, Bell's palsy left")
FAT = Picture("fat", "Fat map, Slim \u2194 Fat 1.5")
POKE = Picture("cheek_poke", "Cheek poked by a sphere")
MUSCLES = Picture("muscles", "Muscles", in_sheet=False)
FAT_MAP = Picture("fat_map", "Fat map", in_sheet=False)
PICTURES = (NEUTRAL, SMILE, PALSY, FAT, POKE, MUSCLES, FAT_MAP)
CONTACT_SHEET = "contact_sheet"


class DemoError(RuntimeError):
    pass


class Stopwatch:
    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self.seconds: Dict[str, float] = {}

    @contextmanager
    def step(self, name: str):
        self.log(f"demo: {name} …")
        start = time.perf_counter()
        yield
        self.seconds[name] = round(time.perf_counter() - start, 1)
        self.log(f"demo: {name} took {self.seconds[name]:.1f} s")


def _operator(operator, **properties) -> None:
    """Run an operator as its button would; its ERROR reports arrive as RuntimeError."""
    result = operator(**properties)
    if result != {'FINISHED'}:
        raise DemoError(f"{operator.idname_py()} ended with {result}")


def _activate(context, obj) -> None:
    for other in context.view_layer.objects:
        other.select_set(False)
    obj.select_set(True)
    context.view_layer.objects.active = obj


def write_demo_rig(solver_python: str, path: Path) -> Path:
    """The solver's built-in demo head, written by the solver's own command line."""
    made = subprocess.run([solver_python, "-m", "solver", "demo-rig", "-o", str(path)], capture_output=True,
                          text=True, env=preferences.solver_child_environment())
    if made.returncode != 0:
        raise DemoError(f"`python -m solver demo-rig` failed: {made.stderr.strip() or made.stdout.strip()}")
    return path


def _landmarks_local(obj) -> Dict[str, np.ndarray]:
    settings = obj.face_physics
    with np.load(bpy.path.abspath(settings.model_path), allow_pickle=False) as model:
        return {str(name): position / settings.metres_per_unit
                for name, position in zip(model["landmark_names"], model["landmark_positions"])}


def cheek_point(landmarks, side: str) -> np.ndarray:
    """The soft side of the cheek, between cheekbone, mouth corner and jaw angle."""
    return np.mean([landmarks[f"{name}_{side}"] for name in ("cheekbone", "mouth_corner", "gonion")], axis=0)


def _rest_vertices(obj) -> Tuple[np.ndarray, np.ndarray]:
    mesh = obj.data
    co = np.empty(len(mesh.vertices) * 3)
    normals = np.empty(len(mesh.vertices) * 3)
    mesh.vertices.foreach_get("co", co)
    mesh.vertices.foreach_get("normal", normals)
    return co.reshape(-1, 3), normals.reshape(-1, 3)


# --------------------------------------------------------------------------- the variants

def _duplicate(context, source, name: str, slot: int):
    """Shift+D of the skin alone: mesh, shape keys and Face Physics settings (model, fit,
    muscles) are copied, so the duplicate bakes without a build of its own."""
    _activate(context, source)
    _operator(bpy.ops.object.duplicate, linked=False)
    obj = context.active_object
    obj.name = name
    obj.location.x = source.location.x + slot * VARIANT_SPACING_M
    return obj


def _key_smile(obj) -> None:
    blocks = obj.data.shape_keys.key_blocks
    for name in SMILE_KEYS:
        for frame, value in ((FIRST_FRAME, 0.0), (LAST_FRAME, 1.0)):
            blocks[name].value = value
            blocks[name].keyframe_insert("value", frame=frame)


def _paint_fat_map(context, obj, landmarks) -> None:
    """Fat panel: + creates the map and enters Weight Paint; the 'painting' is one soft brush
    dab on each cheek, weight 1 at its centre fading to 0 at FAT_RADIUS_M."""
    _operator(bpy.ops.face_physics.paint_map, field='fat_group', create=True)
    group = obj.vertex_groups[obj.face_physics.fat_group]
    rest, _ = _rest_vertices(obj)
    weights = np.zeros(len(rest))
    for side in ("L", "R"):
        distance = np.linalg.norm(rest - cheek_point(landmarks, side), axis=1)
        t = np.clip(1.0 - distance / FAT_RADIUS_M, 0.0, 1.0)
        weights = np.maximum(weights, t * t * (3.0 - 2.0 * t))
    for index in np.flatnonzero(weights > 0.0):
        group.add([int(index)], float(weights[index]), 'REPLACE')
    bpy.ops.object.mode_set(mode='OBJECT')
    obj.face_physics.fat_scale = FAT_SCALE


def _add_finger(context, obj, landmarks):
    """A sphere parented to the skin, keyed from just off the left cheek into it along the
    skin's normal there, and listed in the Collisions panel."""
    rest, normals = _rest_vertices(obj)
    vertex = int(np.argmin(np.linalg.norm(rest - cheek_point(landmarks, "L"), axis=1)))
    normal = normals[vertex] / np.linalg.norm(normals[vertex])
    bpy.ops.mesh.primitive_uv_sphere_add(radius=FINGER_RADIUS_M, segments=32, ring_count=16)
    finger = context.active_object
    finger.name = f"{obj.name} fingertip"
    bpy.ops.object.shade_smooth()
    finger.parent = obj
    finger.matrix_parent_inverse.identity()
    for frame, gap in ((FIRST_FRAME, FINGER_START_GAP_M), (LAST_FRAME, -FINGER_DEPTH_M)):
        finger.location = rest[vertex] + normal * (FINGER_RADIUS_M + gap)
        finger.keyframe_insert("location", frame=frame)
    _activate(context, obj)
    _operator(bpy.ops.face_physics.collider_add)
    obj.face_physics.colliders[obj.face_physics.collider_index].collider = finger
    return finger


def _bake(context, obj) -> None:
    _activate(context, obj)
    obj.face_physics.bake_target = 'PC2'
    _operator(bpy.ops.face_physics.bake)


# --------------------------------------------------------------------------- the whole demo

def run_demo(out_dir: Path, solver_python: str, options: DemoOptions = FULL, docs_dir: Path = None,
             log: Callable[[str], None] = print) -> Dict[str, Path]:
    """Build, fit, set up and bake the variants, render; returns picture stem → PNG path
    (and CONTACT_SHEET). Starts from the current, empty file (File ▸ New ▸ General without its
    cube, or `read_homefile(use_empty=True)`); the add-on must be enabled."""
    context = bpy.context
    out_dir = Path(out_dir).resolve()
    renders = out_dir / "renders"
    out_dir.mkdir(parents=True, exist_ok=True)
    watch = Stopwatch(log)
    total_start = time.perf_counter()

    with watch.step("demo head → Import Face Rig"):
        scene = context.scene
        scene.frame_start, scene.frame_end = FIRST_FRAME, LAST_FRAME
        bpy.ops.wm.save_as_mainfile(filepath=str(out_dir / "demo.blend"))
        rig = write_demo_rig(solver_python, out_dir / "demo_rig.npz")
        _operator(bpy.ops.face_physics.import_rig, filepath=str(rig), bones=True)
        face = context.active_object
        face.name = "Face"
        bpy.ops.object.shade_smooth()
        demo_pictures.assign_material(face, demo_pictures.skin_material())
        bone_material = demo_pictures.plain_material("Face Physics demo bone", (0.85, 0.82, 0.72), 0.6)
        for bone in face.children:
            demo_pictures.assign_material(bone, bone_material)
            bone.hide_set(True)          # inside the head: out of the way in the viewport and in renders
            bone.hide_render = True

    with watch.step(f"Build ({options.target_tets} tets)"):
        face.face_physics.target_tets = options.target_tets
        _activate(context, face)
        _operator(bpy.ops.face_physics.build)
        log(f"demo: model {face.face_physics.model_tets} tets, {face.face_physics.model_nodes} nodes, "
            f"{len(face.face_physics.muscles)} muscles")

    with watch.step(f"Fit Selected ({', '.join(SMILE_KEYS)})"):
        settings = face.face_physics
        for item in settings.fit_shapes:
            item.selected = item.name in SMILE_KEYS
        settings.fit_processes = options.fit_processes
        _operator(bpy.ops.face_physics.fit, scope='SELECTED')
        for item in settings.fit_shapes:
            if item.fitted:
                log(f"demo: fit {item.name}: {item.error_mean_mm:.2f} / {item.error_p95_mm:.2f} / "
                    f"{item.error_max_mm:.2f} mm (mean / 95th / max)")

    landmarks = _landmarks_local(face)
    variants = {}
    with watch.step("set up the variants"):
        variants[SMILE] = smile = _duplicate(context, face, "Smile", 1)
        _key_smile(smile)
        variants[PALSY] = palsy = _duplicate(context, face, "Smile palsy left", 2)
        _key_smile(palsy)
        _operator(bpy.ops.face_physics.palsy_preset, side='LEFT')
        variants[FAT] = fat = _duplicate(context, face, "Fat", 3)
        _paint_fat_map(context, fat, landmarks)
        variants[POKE] = poke = _duplicate(context, face, "Cheek poke", 4)
        finger = _add_finger(context, poke, landmarks)
        demo_pictures.assign_material(finger, demo_pictures.plain_material(
            "Face Physics demo finger", (0.35, 0.5, 0.75), roughness=0.3, alpha=FINGER_ALPHA))

    for picture, obj in variants.items():
        with watch.step(f"Bake {obj.name}"):
            _bake(context, obj)
    bpy.ops.wm.save_mainfile()

    with watch.step("render"):
        pictures = _render_pictures(context, face, variants, finger, renders, options.quality)
    _activate(context, face)
    bpy.ops.wm.save_mainfile()
    # Each save keeps the previous one as demo.blend1; a demo output needs no backup.
    (out_dir / "demo.blend1").unlink(missing_ok=True)
    watch.seconds["total"] = round(time.perf_counter() - total_start, 1)
    log(f"demo: total {watch.seconds['total']:.1f} s")
    summary = {"seconds": watch.seconds, "tets": face.face_physics.model_tets, "options": repr(options)}
    (out_dir / "demo_timings.json").write_text(json.dumps(summary, indent=1) + "\n")
    if docs_dir is not None:
        copy_pictures(pictures, Path(docs_dir))
        log(f"demo: pictures copied to {docs_dir}")
    return pictures


def _render_pictures(context, face, variants, finger, folder: Path, quality: RenderQuality) -> Dict[str, Path]:
    scene = context.scene
    demo_pictures.set_up_render(scene, quality)
    studio = demo_pictures.make_studio(scene, FIELD_OF_VIEW_M)
    scene.frame_set(LAST_FRAME)

    def render(picture: Picture, centre_object, shown) -> Path:
        for obj in scene.objects:
            if obj.type == 'MESH':
                obj.hide_render = obj not in shown
        studio.frame(centre_object.matrix_world.translation + FACE_CENTRE_M)
        return demo_pictures.render_png(scene, folder / f"{picture.stem}.png")

    paths = {NEUTRAL.stem: render(NEUTRAL, face, {face})}
    for picture, obj in variants.items():
        paths[picture.stem] = render(picture, obj, {obj, finger} if picture is POKE else {obj})

    _activate(context, face)
    _operator(bpy.ops.face_physics.muscle_overlay)           # Show Muscles
    overlay = muscle_overlay.find_overlay(face)
    demo_pictures.assign_material(overlay, demo_pictures.attribute_material("Face Physics demo muscles",
                                                                            "muscle", weight_colours=False))
    paths[MUSCLES.stem] = render(MUSCLES, face, set(face.children))      # the bones and the overlay
    _operator(bpy.ops.face_physics.muscle_overlay)           # Hide Muscles

    fat = variants[FAT]
    skin = fat.data.materials[0]
    demo_pictures.assign_material(fat, demo_pictures.attribute_material("Face Physics demo fat map",
                                                                        fat.face_physics.fat_group,
                                                                        weight_colours=True))
    paths[FAT_MAP.stem] = render(FAT_MAP, fat, {fat})
    demo_pictures.assign_material(fat, skin)
    for obj in scene.objects:
        if obj.type == 'MESH':
            obj.hide_render = obj in face.children          # demo.blend renders the lineup, bones hidden
    paths[CONTACT_SHEET] = demo_pictures.contact_sheet(
        [(paths[picture.stem], picture.caption) for picture in PICTURES if picture.in_sheet],
        folder / f"{CONTACT_SHEET}.png")
    return paths


def copy_pictures(pictures: Dict[str, Path], folder: Path) -> List[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(path, folder / path.name)) for path in pictures.values()]
