"""Before and after pictures of one frame with lip contact (issue 5).

Top row: the *plain* blendshape skin (rest + Σ w_j delta_j, the bones at the blended jaw),
with every skin vertex that detection finds inside a teeth proxy or through the other lip
drawn red. Bottom row: the simulated skin of the same frame as it is shown (fit → blend →
FaceSimulator with the collision scene, the fit's detail residual and the display projection
included); the vertices that penetrated in the plain frame are drawn blue, so one sees where
they went, and any still penetrating red.

Columns: a front close-up of the mouth, and a sagittal-ish view — the subject's right half
of the skin and of the teeth proxies (everything left of the midline removed), seen from
the subject's left — which shows the lips in section in front of the teeth proxies. The
proxies' labial projection regions (where a penetrating lip may be pushed) are drawn green,
the rest of the proxies ivory.

``mouth_corner_sheet``: each mouth corner close up, plain and shown side by side, where a
skin's lips meet in details finer than the whole-mouth view shows (a wedge, a notch).

``contact_region_sheet``: where a contact round relaxes the tissue before its whole-mesh
steps (solver/physics/contact_region.py): the same two views, the skin carried by the relaxed
tets and by the held ring around them coloured, and in section the region's tets themselves.

Everything is drawn with the project's software rasteriser (raster.py); nothing opens a
window.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..model_file import model_landmarks
from .raster import BACKGROUND, Camera, MeshLayer, add_legend, add_title, render_meshes, save_png, side_by_side
from .views import SKIN_COLOUR, TEETH_COLOUR, HeadAxes, tet_boundary_faces

PENETRATING_COLOUR = (0.86, 0.08, 0.06)
RESOLVED_COLOUR = (0.13, 0.38, 0.86)
REGION_COLOUR = (0.55, 0.82, 0.55)
RELAXED_COLOUR = (0.96, 0.58, 0.20)
HELD_RING_COLOUR = (0.45, 0.62, 0.85)
PANEL_SIZE = 440               # pixels per view
_CLOSE_UP_MOUTH_WIDTHS = 1.7   # the front close-up spans this many mouth widths across
_SECTION_MOUTH_WIDTHS = 1.5    # the section spans this many mouth widths up and down
_ROW_GAP = 18
_CORNER_MOUTH_WIDTHS = 0.35    # a corner close-up spans this many mouth widths across


@dataclass(frozen=True, eq=False)
class ContactFrameSheet:
    image: np.ndarray              # (H, W, 3) uint8
    plain_penetrating: np.ndarray  # skin vertex indices penetrating in the plain frame
    plain_depth_m: float
    simulated_penetrating: np.ndarray
    simulated_depth_m: float


def picture_contact_frames(model: dict, scene, plain_skin: np.ndarray, simulated_skin: np.ndarray, pose,
                           path, title: Optional[str] = None, simulated_pose=None,
                           labels: tuple = ("plain", "simulated")) -> Path:
    """Write the before/after picture of one frame (see the module docstring) to `path`.

    `scene` is the frame's CollisionScene (teeth proxies and lips), `pose` its BonePose for
    the plain frame and (unless `simulated_pose` is given) for the simulated one. Returns
    the path written. `labels`: what the two rows are called (e.g. the corrected rig's rows)."""
    return save_png(contact_frame_sheet(model, scene, plain_skin, simulated_skin, pose, title,
                                        simulated_pose, labels).image, path)


def contact_frame_sheet(model: dict, scene, plain_skin: np.ndarray, simulated_skin: np.ndarray, pose,
                        title: Optional[str] = None, simulated_pose=None,
                        labels: tuple = ("plain", "simulated")) -> ContactFrameSheet:
    """The picture of ``picture_contact_frames`` as an image, with what it highlights."""
    simulated_pose = pose if simulated_pose is None else simulated_pose
    plain_skin = np.asarray(plain_skin, dtype=np.float64)
    simulated_skin = np.asarray(simulated_skin, dtype=np.float64)
    skin_count = len(model["skin_vertices"])
    if plain_skin.shape != (skin_count, 3) or simulated_skin.shape != (skin_count, 3):
        raise ValueError(f"plain and simulated skin must be ({skin_count}, 3), got {plain_skin.shape} and "
                         f"{simulated_skin.shape}")
    plain_hits, plain_depth = _penetrating(scene, plain_skin, pose)
    simulated_hits, simulated_depth = _penetrating(scene, simulated_skin, simulated_pose)

    axes = HeadAxes.of(model)
    mouth, width = _mouth(model, scene)
    triangles = np.asarray(model["skin_triangles"])
    front_camera, side_camera = _mouth_cameras(axes, mouth, width)

    rows = []
    for skin, pose_of_row, marked, still in ((plain_skin, pose, plain_hits, plain_hits),
                                             (simulated_skin, simulated_pose, plain_hits, simulated_hits)):
        colours = np.tile(np.asarray(SKIN_COLOUR, dtype=float), (skin_count, 1))
        if marked is not still:
            colours[marked] = RESOLVED_COLOUR
        colours[still] = PENETRATING_COLOUR
        proxies = _proxy_layers(scene, pose_of_row, axes, mouth)
        front = render_meshes(front_camera, [MeshLayer(skin, triangles, colours, colour_per_vertex=True)])
        right_half = _half(skin, triangles, axes, mouth)
        section = render_meshes(side_camera, [MeshLayer(skin, right_half, colours, colour_per_vertex=True)]
                                + proxies)
        rows.append((front, section))

    top, bottom = labels
    captions = [
        (f"{top}: {len(plain_hits)} penetrating, {plain_depth * 1e3:.2f} mm deep", f"{top}: right half, from the left"),
        (f"{bottom}: {len(simulated_hits)} penetrating, {simulated_depth * 1e3:.2f} mm",
         f"{bottom}: right half, from the left"),
    ]
    row_images = [side_by_side(list(images), list(texts)) for images, texts in zip(rows, captions)]
    stacked = _stack(row_images)
    legend = [("skin", SKIN_COLOUR), ("penetrating (inside a teeth proxy or through the other lip)", PENETRATING_COLOUR),
              (f"penetrated in the {top} frame, held out in the {bottom}", RESOLVED_COLOUR),
              ("teeth proxy", TEETH_COLOUR), ("teeth proxy: labial projection region", REGION_COLOUR)]
    image = add_legend(stacked, legend)
    image = add_title(image, title or "Lip contact: plain blendshapes (top) and simulated with collisions (bottom)")
    return ContactFrameSheet(image=image, plain_penetrating=plain_hits, plain_depth_m=plain_depth,
                             simulated_penetrating=simulated_hits, simulated_depth_m=simulated_depth)


def mouth_corner_sheet(model: dict, plain_skin: np.ndarray, shown_skin: np.ndarray, title: Optional[str] = None,
                       labels: tuple = ("plain", "shown")) -> np.ndarray:
    """One row: the subject's right corner plain and shown, then the left one, from the front,
    each view _CORNER_MOUTH_WIDTHS mouth widths across and centred on the skin vertex nearest
    the corner's landmark where that skin has it (the view follows the corner)."""
    marks = model_landmarks(model)
    if not all(name in marks for name in ("mouth_corner_L", "mouth_corner_R")):
        raise ValueError("the model has no mouth-corner landmarks to centre the corner views on")
    rest = np.asarray(model["skin_vertices"], dtype=np.float64)
    width = float(np.linalg.norm(marks["mouth_corner_L"] - marks["mouth_corner_R"]))
    axes = HeadAxes.of(model)
    triangles = np.asarray(model["skin_triangles"])
    images, captions = [], []
    for side in ("R", "L"):
        corner = int(np.argmin(np.linalg.norm(rest - marks[f"mouth_corner_{side}"], axis=1)))
        for label, skin in zip(labels, (plain_skin, shown_skin)):
            skin = np.asarray(skin, dtype=np.float64)
            camera = Camera.front(skin[corner], _CORNER_MOUTH_WIDTHS * width, axes.up, axes.forward, 360, 360)
            images.append(render_meshes(camera, [MeshLayer(skin, triangles, SKIN_COLOUR)]))
            captions.append(f"{side} corner, {label}")
    return add_title(side_by_side(images, captions), title or "Mouth corners, plain and shown")


def contact_region_sheet(model: dict, scene, node_positions: np.ndarray, skin: np.ndarray, pose, region,
                         plane_vertices: np.ndarray, title: Optional[str] = None) -> np.ndarray:
    """One contact round's region (module docstring) as an image. `node_positions` (N,3) and
    `skin` (V,3) at the round's start, `region` its ``contact_region.Region`` (the sub-mesh's
    tets, and the nodes it moves), `plane_vertices` the round's plane vertices."""
    tets = np.asarray(model["tets"], dtype=np.int64)
    node_positions = np.asarray(node_positions, dtype=np.float64).reshape(-1, 3)
    skin = np.asarray(skin, dtype=np.float64)
    region_tets = region.tets
    free_nodes = np.zeros(len(node_positions), bool)
    free_nodes[region.free_nodes] = True
    in_region = np.zeros(len(tets), bool)
    in_region[region_tets] = True
    carrying = np.asarray(model["skin_embedding_tet"], dtype=np.int64)
    colours = np.tile(np.asarray(SKIN_COLOUR, dtype=float), (len(skin), 1))
    on_region = in_region[carrying]
    colours[on_region] = HELD_RING_COLOUR
    colours[on_region & free_nodes[tets[carrying]].all(axis=1)] = RELAXED_COLOUR
    colours[plane_vertices] = PENETRATING_COLOUR

    axes = HeadAxes.of(model)
    mouth, width = _mouth(model, scene)
    triangles = np.asarray(model["skin_triangles"])
    front_camera, side_camera = _mouth_cameras(axes, mouth, width)
    front = render_meshes(front_camera, [MeshLayer(skin, triangles, colours, colour_per_vertex=True)])
    right = region_tets[((node_positions[tets[region_tets]].mean(axis=1) - mouth) @ axes.left) <= 0.0]
    faces = tet_boundary_faces(node_positions, tets[right])
    face_colours = np.where(free_nodes[faces].all(axis=1)[:, None], RELAXED_COLOUR, HELD_RING_COLOUR)
    section = render_meshes(side_camera, [MeshLayer(node_positions, faces, face_colours, colour_per_vertex=False),
                                          MeshLayer(skin, _half(skin, triangles, axes, mouth), colours, opacity=0.35,
                                                    colour_per_vertex=True)]
                            + _proxy_layers(scene, pose, axes, mouth))
    image = side_by_side([front, section], [
        f"{len(region_tets):,} of {len(tets):,} tets relaxed, {len(np.unique(plane_vertices))} plane vertices",
        "right half of the region's tets, from the left"])
    legend = [("contact plane vertex", PENETRATING_COLOUR), ("relaxed: every node free", RELAXED_COLOUR),
              ("ring: touches a held node", HELD_RING_COLOUR), ("skin outside the region", SKIN_COLOUR),
              ("teeth proxy", TEETH_COLOUR), ("teeth proxy: labial projection region", REGION_COLOUR)]
    return add_title(add_legend(image, legend), title or "Contact region relaxed before the whole-mesh steps")


def _penetrating(scene, skin, pose) -> tuple[np.ndarray, float]:
    planes = scene.detect(skin, pose)
    return np.unique(planes.vertex), float(planes.depth.max(initial=0.0))


def _mouth(model, scene) -> tuple[np.ndarray, float]:
    """The mouth centre (world) and the mouth width (m) from the landmarks, else from the lips."""
    marks = model_landmarks(model)
    if all(name in marks for name in ("mouth_corner_L", "mouth_corner_R", "upper_lip", "lower_lip")):
        return 0.5 * (marks["upper_lip"] + marks["lower_lip"]), float(np.linalg.norm(marks["mouth_corner_L"]
                                                                                      - marks["mouth_corner_R"]))
    lips = np.asarray(model["skin_vertices"])[np.union1d(scene.lips.upper_vertices, scene.lips.lower_vertices)]
    return 0.5 * (lips.min(0) + lips.max(0)), float(np.ptp(lips, axis=0).max())


def _mouth_cameras(axes: HeadAxes, mouth, width: float) -> tuple[Camera, Camera]:
    """The front close-up of the mouth and the side view of its section."""
    front = Camera.front(mouth, 1.0, axes.up, axes.forward, PANEL_SIZE, PANEL_SIZE)
    centre = mouth - 0.25 * width * axes.forward
    side = Camera.side(centre, 1.0, axes.up, axes.forward, PANEL_SIZE, PANEL_SIZE)
    return (_centred(front, mouth, _CLOSE_UP_MOUTH_WIDTHS * width),
            _centred(side, centre, _SECTION_MOUTH_WIDTHS * width))


def _centred(camera: Camera, centre, extent: float) -> Camera:
    return Camera(camera.view_direction, camera.up, np.asarray(centre, dtype=float), extent, camera.width,
                  camera.height)


def _half(vertices, triangles, axes: HeadAxes, mouth) -> np.ndarray:
    """Triangles on the subject's right of the midline (through the mouth centre)."""
    sideways = (np.asarray(vertices)[triangles].mean(1) - mouth) @ axes.left
    return triangles[sideways <= 0.0]


def _proxy_layers(scene, pose, axes: HeadAxes, mouth) -> list[MeshLayer]:
    layers = []
    posed = scene.posed_proxies(pose)
    for collider in getattr(scene, "teeth", []):
        vertices, triangles = posed[collider.name]
        colours = np.tile(np.asarray(TEETH_COLOUR, dtype=float), (len(triangles), 1))
        colours[collider.proxy.region] = REGION_COLOUR
        keep = ((vertices[triangles].mean(1) - mouth) @ axes.left) <= 0.0
        layers.append(MeshLayer(vertices, triangles[keep], colours[keep], colour_per_vertex=False))
    return layers


def _stack(images) -> np.ndarray:
    """Images one above the other, left aligned, on the background colour."""
    width = max(image.shape[1] for image in images)
    background = np.round(np.asarray(BACKGROUND) * 255).astype(np.uint8)
    parts = []
    for index, image in enumerate(images):
        padded = np.empty((image.shape[0], width, 3), np.uint8)
        padded[:] = background
        padded[:, :image.shape[1]] = image
        parts.append(padded)
        if index < len(images) - 1:
            gap = np.empty((_ROW_GAP, width, 3), np.uint8)
            gap[:] = background
            parts.append(gap)
    return np.concatenate(parts)
