"""Pictures of the demo, made headless: Cycles on the CPU (the bpy module has no GPU or OpenGL,
so neither EEVEE nor Workbench can render), a skin material, a three-point light rig, a camera
that frames one face, captions drawn by Blender's own render stamp, and a contact sheet tiled
with numpy. Nothing here knows about physics; `demo.py` decides what is shown."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple

import bpy
import numpy as np
from mathutils import Vector

BACKGROUND = (0.035, 0.037, 0.045)
CAPTION_HEIGHT_SHARE = 0.075          # of the frame width; the stamp font is sized to fit
CAPTION_SCENE = "Face Physics captions"
STUDIO_WORLD = "Face Physics studio"


@dataclass(frozen=True)
class RenderQuality:
    resolution: int          # square frames, pixels
    samples: int


def set_up_render(scene, quality: RenderQuality) -> None:
    scene.render.engine = 'CYCLES'
    scene.cycles.device = 'CPU'
    scene.cycles.samples = quality.samples
    scene.cycles.use_adaptive_sampling = False      # the same noise on every frame: pictures compare cleanly
    scene.cycles.seed = 0
    # OpenImageDenoise is in this build, but on a busy 2-core CPU 16 samples + denoising took
    # longer than 32 samples without it, which are clean enough at 480 pixels.
    scene.cycles.use_denoising = False
    scene.cycles.max_bounces = 4
    scene.render.resolution_x = scene.render.resolution_y = quality.resolution
    scene.render.resolution_percentage = 100
    scene.render.film_transparent = False
    scene.render.image_settings.file_format = 'PNG'
    scene.render.image_settings.color_mode = 'RGB'
    scene.render.use_stamp = False
    scene.view_settings.view_transform = 'AgX'
    scene.view_settings.look = 'AgX - Medium High Contrast'
    world = bpy.data.worlds.get(STUDIO_WORLD) or bpy.data.worlds.new(STUDIO_WORLD)
    scene.world = world
    world.use_nodes = True
    world.node_tree.nodes["Background"].inputs["Color"].default_value = (*BACKGROUND, 1.0)


# --------------------------------------------------------------------------- materials

def _principled_material(name: str):
    material = bpy.data.materials.get(name) or bpy.data.materials.new(name)
    material.use_nodes = True
    nodes = material.node_tree.nodes
    return material, nodes.get("Principled BSDF") or nodes.new("ShaderNodeBsdfPrincipled")


def skin_material():
    """Warm, matte skin with a soft sheen. No subsurface scattering: it doubled the render time
    and, on a face without pores or colour variation, hardly shows."""
    material, shader = _principled_material("Face Physics demo skin")
    shader.inputs["Base Color"].default_value = (0.72, 0.45, 0.34, 1.0)
    shader.inputs["Roughness"].default_value = 0.5
    shader.inputs["Specular IOR Level"].default_value = 0.35
    shader.inputs["Sheen Weight"].default_value = 0.2
    return material


def plain_material(name: str, colour: Sequence[float], roughness: float = 0.4, alpha: float = 1.0):
    material, shader = _principled_material(name)
    shader.inputs["Base Color"].default_value = (*colour[:3], 1.0)
    shader.inputs["Roughness"].default_value = roughness
    shader.inputs["Alpha"].default_value = alpha
    return material


def attribute_material(name: str, attribute: str, weight_colours: bool):
    """Colours from a mesh attribute: a colour attribute as it is (the muscle overlay), or a
    vertex group's weight through Weight Paint's blue → green → red ramp."""
    material, shader = _principled_material(name)
    tree = material.node_tree
    source = tree.nodes.new("ShaderNodeAttribute")
    source.attribute_type = 'GEOMETRY'
    source.attribute_name = attribute
    shader.inputs["Roughness"].default_value = 0.6
    if not weight_colours:
        tree.links.new(source.outputs["Color"], shader.inputs["Base Color"])
        return material
    ramp = tree.nodes.new("ShaderNodeValToRGB")
    elements = ramp.color_ramp.elements
    elements[0].color = (0.0, 0.0, 1.0, 1.0)
    elements[1].color = (1.0, 0.0, 0.0, 1.0)
    elements.new(0.5).color = (0.0, 1.0, 0.0, 1.0)
    tree.links.new(source.outputs["Fac"], ramp.inputs["Fac"])
    tree.links.new(ramp.outputs["Color"], shader.inputs["Base Color"])
    return material


def assign_material(obj, material) -> None:
    obj.data.materials.clear()
    obj.data.materials.append(material)


# --------------------------------------------------------------------------- lights and camera

# (name, offset from the face centre in metres, power W, size m, colour): key above the
# camera to the subject's right, softer fill to the left, rim behind to separate the head
# from the background.
LIGHTS = (("Key", (-0.5, -0.45, 0.4), 9.0, 0.3, (1.0, 0.93, 0.85)),
          ("Fill", (0.6, -0.5, 0.0), 2.5, 0.6, (0.85, 0.92, 1.0)),
          ("Rim", (0.25, 0.55, 0.45), 10.0, 0.25, (1.0, 1.0, 1.0)))


@dataclass
class Studio:
    camera: object
    lights: List[object]
    distance: float            # camera to face centre, metres
    height: float              # camera above the face centre, metres

    def frame(self, centre: Vector) -> None:
        """Look at `centre` from straight in front (-Y), a little from above, as a clinical
        photograph does: the left and right halves of the face compare directly."""
        self.camera.location = centre + Vector((0.0, -self.distance, self.height))
        self.camera.rotation_euler = (centre - self.camera.location).to_track_quat('-Z', 'Y').to_euler()
        for light, (_, offset, *_rest) in zip(self.lights, LIGHTS):
            light.location = centre + Vector(offset)
            light.rotation_euler = (centre - light.location).to_track_quat('-Z', 'Y').to_euler()


def make_studio(scene, field_of_view_m: float, focal_length_mm: float = 85.0) -> Studio:
    """A camera whose frame is `field_of_view_m` wide at the face, and the three lights."""
    collection = bpy.data.collections.new("Face Physics studio")
    scene.collection.children.link(collection)
    camera_data = bpy.data.cameras.new("Face Physics camera")
    camera_data.lens = focal_length_mm
    camera_data.sensor_fit = 'HORIZONTAL'
    camera_data.clip_start = 0.01
    camera = bpy.data.objects.new("Face Physics camera", camera_data)
    collection.objects.link(camera)
    scene.camera = camera
    lights = []
    for name, _, power, size, colour in LIGHTS:
        data = bpy.data.lights.new(f"{name} light", 'AREA')
        data.energy, data.size, data.color = power, size, colour
        light = bpy.data.objects.new(f"{name} light", data)
        collection.objects.link(light)
        lights.append(light)
    distance = field_of_view_m * focal_length_mm / camera_data.sensor_width
    return Studio(camera=camera, lights=lights, distance=distance, height=0.12 * distance)


# --------------------------------------------------------------------------- rendering

def render_png(scene, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    scene.render.filepath = str(path)
    bpy.ops.render.render(write_still=True, scene=scene.name)
    return path


def read_png(path: Path) -> np.ndarray:
    """(H, W, 3) float RGB in [0, 1], top row first, as stored in the file."""
    image = bpy.data.images.load(str(path), check_existing=False)
    try:
        width, height = image.size
        pixels = np.empty(width * height * image.channels, dtype=np.float32)
        image.pixels.foreach_get(pixels)
        return pixels.reshape(height, width, image.channels)[::-1, :, :3].copy()
    finally:
        bpy.data.images.remove(image)


def write_png(path: Path, rgb: np.ndarray) -> Path:
    height, width = rgb.shape[:2]
    image = bpy.data.images.new("Face Physics sheet", width, height, alpha=False)
    try:
        rgba = np.ones((height, width, 4), dtype=np.float32)
        rgba[..., :3] = rgb[::-1]
        image.pixels.foreach_set(rgba.ravel())
        image.filepath_raw = str(path)
        image.file_format = 'PNG'
        image.save()
    finally:
        bpy.data.images.remove(image)
    return path


def caption_strip(text: str, width: int, folder: Path) -> np.ndarray:
    """`text` on the studio background, drawn by the render stamp of an empty scene (Blender's
    own font rasteriser works without a GPU; rendering nothing costs a fraction of a second)."""
    scene = bpy.data.scenes.new(CAPTION_SCENE)
    camera_data = bpy.data.cameras.new(CAPTION_SCENE)
    camera = bpy.data.objects.new(CAPTION_SCENE, camera_data)
    try:
        scene.collection.objects.link(camera)
        scene.camera = camera
        set_up_render(scene, RenderQuality(resolution=width, samples=1))
        render = scene.render
        render.resolution_y = max(12, int(round(width * CAPTION_HEIGHT_SHARE)))
        for name in dir(render):
            if name.startswith("use_stamp_"):
                setattr(render, name, False)
        render.use_stamp = render.use_stamp_note = True
        render.stamp_note_text = text
        render.stamp_font_size = max(8, int(render.resolution_y * 0.6))
        render.stamp_foreground = (0.92, 0.92, 0.92, 1.0)
        render.stamp_background = (0.0, 0.0, 0.0, 0.0)
        path = render_png(scene, folder / f".caption_{os.getpid()}.png")
        strip = read_png(path)
        path.unlink()
        return strip
    finally:
        bpy.data.objects.remove(camera)
        bpy.data.cameras.remove(camera_data)
        bpy.data.scenes.remove(scene)


def contact_sheet(pictures: Sequence[Tuple[Path, str]], path: Path) -> Path:
    """The pictures (all the same size) side by side, each captioned underneath."""
    cells = []
    for picture, caption in pictures:
        frame = read_png(picture)
        cells.append(np.concatenate([frame, caption_strip(caption, frame.shape[1], path.parent)]))
    return write_png(path, np.concatenate(cells, axis=1))
