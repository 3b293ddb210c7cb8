"""The pictures an artist checks a face model with, each written as one PNG.

A model is the plain dict of arrays stored in MODEL.npz (SI metres). Views are oriented
by the model's ``head_frame`` (rows: the subject's left, up, forward), so meshes in any
axis convention come out upright and facing the same way: the front view shows the
subject's left on the image's right, and profiles are seen from the subject's left.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import LinearSegmentedColormap, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .raster import (BACKGROUND, Camera, MeshLayer, SpriteLayer, add_labels, add_legend, add_title,
                     pair_base_name, render_meshes, save_png, side_by_side, symmetric_pair_colour)

SKIN_COLOUR = (0.91, 0.75, 0.65)
SKULL_COLOUR = (0.93, 0.88, 0.76)      # ivory
JAW_COLOUR = (0.74, 0.81, 0.91)        # a cool tint, so the mandible separates from the cranium at a glance
TEETH_COLOUR = (1.0, 1.0, 0.98)
CONDYLE_COLOUR = (0.93, 0.45, 0.05)
PINNED_COLOUR = (0.86, 0.10, 0.08)
SLIDING_COLOUR = (0.12, 0.65, 0.22)
PASSIVE_TISSUE_COLOUR = (1.0, 0.96, 0.74)
MUSCLE_TISSUE_COLOUR = (0.80, 0.07, 0.07)

# Darker versions of the surface colours for cut lines in sections, which must stand out
# against the pale yellow passive tissue.
SKIN_LINE_COLOUR = (0.55, 0.25, 0.18)
SKULL_LINE_COLOUR = (0.45, 0.38, 0.20)
JAW_LINE_COLOUR = (0.15, 0.32, 0.65)
TEETH_LINE_COLOUR = (0.35, 0.35, 0.35)

SKULL_LABEL, JAW_LABEL = 0, 1

# Skin drawn as a veil over what lies beneath it: enough to show the face outline without
# washing out the colours underneath.
_SKIN_VEIL_OPACITY = 0.16
_MUSCLE_SKIN_VEIL_OPACITY = 0.12

# Muscle membership for the muscle picture: a tet shows a muscle when that muscle is its
# largest and covers at least this fraction of it...
_MUSCLE_FRACTION_SHOWN = 0.3
# ...or, for a muscle thinner than the tets (its fraction never reaches the bar above),
# at least this share of the muscle's own peak fraction, so that it still appears.
_THIN_MUSCLE_SHARE_OF_PEAK = 0.5

_THREE_VIEW_SIZE = 600  # pixels per view: three views plus a legend stay under ~2200 px wide
_TWO_VIEW_SIZE = 720
_MARKER_RADIUS_PX = 3.5
_CONDYLE_RADIUS_PX = 7.0

_VIEW_CAPTIONS = {
    "front": "front",
    "three_quarter": "three-quarter, from the subject's left",
    "side": "side, from the subject's left",
}

_TET_EDGES = np.array([[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]])
_TRIANGLE_EDGES = np.array([[0, 1], [1, 2], [2, 0]])


@dataclass(frozen=True, eq=False)
class HeadAxes:
    """Orthonormal subject's-left, up and forward (out of the face) world directions."""

    left: np.ndarray
    up: np.ndarray
    forward: np.ndarray

    @classmethod
    def of(cls, model: dict) -> "HeadAxes":
        left, up, forward = np.asarray(model["head_frame"], dtype=float)
        forward = forward / np.linalg.norm(forward)
        up = up - forward * np.dot(up, forward)
        up /= np.linalg.norm(up)
        if np.dot(left, np.cross(up, forward)) <= 0:
            raise ValueError("head_frame rows must be the subject's left, up and forward of a right-handed "
                             "frame; its left row points to the subject's right")
        return cls(np.cross(up, forward), up, forward)

    def coordinates(self, points: np.ndarray) -> np.ndarray:
        """(n,3) world points -> (n,3) components along left, up, forward."""
        return np.asarray(points, dtype=float) @ np.stack([self.left, self.up, self.forward]).T


# --------------------------------------------------------------------------- pictures

def picture_skin(model: dict, path) -> Path:
    """The skin mesh at rest from the front, three-quarter and side."""
    skin_vertices, skin_triangles = model["skin_vertices"], model["skin_triangles"]
    width, height, depth = np.ptp(HeadAxes.of(model).coordinates(skin_vertices), axis=0) * 100
    sheet = _render_views(model, ("front", "three_quarter", "side"), _THREE_VIEW_SIZE,
                          [MeshLayer(skin_vertices, skin_triangles, SKIN_COLOUR)], skin_vertices)
    title = (f"Skin: {len(skin_vertices):,} vertices, {len(skin_triangles):,} triangles, "
             f"{width:.1f} wide x {height:.1f} high x {depth:.1f} deep (cm)")
    return save_png(add_title(sheet, title), path)


def picture_bones(model: dict, path) -> Path:
    """Skull, jaw and teeth under a faint skin, front and side, with the jaw condyles marked."""
    axes = HeadAxes.of(model)
    layers = _bone_layers(model) + [
        MeshLayer(model["skin_vertices"], model["skin_triangles"], SKIN_COLOUR, _SKIN_VEIL_OPACITY)]
    framing = np.concatenate([model["skin_vertices"], model["bone_surface_vertices"]])
    condyles = np.asarray(model["condyles"], dtype=float).reshape(-1, 3)
    condyle_names = _condyle_names(condyles, axes)

    def condyle_labels(camera: Camera) -> list[tuple[str, tuple[float, float]]]:
        projected = camera.project(condyles)[:, :2]
        if len(projected) == 2 and np.linalg.norm(projected[0] - projected[1]) < 4 * _CONDYLE_RADIUS_PX:
            return [("condyles", tuple(projected.mean(axis=0)))]  # one hides the other in profile
        return [(name, tuple(point)) for name, point in zip(condyle_names, projected)]

    sheet = _render_views(model, ("front", "side"), _TWO_VIEW_SIZE, layers, framing,
                          sprite_layers=lambda radius_per_px: [
                              SpriteLayer(condyles, CONDYLE_COLOUR, _CONDYLE_RADIUS_PX * radius_per_px, on_top=True)],
                          labels=condyle_labels)
    entries = [("skull (cranium)", SKULL_COLOUR), ("jaw (mandible)", JAW_COLOUR)]
    if _has_teeth(model):
        entries.append(("teeth", TEETH_COLOUR))
    entries += [("skin (see-through)", SKIN_COLOUR), ("jaw condyles", CONDYLE_COLOUR)]
    return save_png(add_legend(sheet, entries, title="Bones and teeth under the skin"), path)


def picture_muscles(model: dict, path) -> Path:
    """Each muscle's tets as a solid coloured by muscle name (left and right alike), over
    the bone and under a faint skin, from the front, three-quarter and side."""
    positions, tets = model["rest_positions"], model["tets"]
    names = [str(name) for name in model["muscle_names"]]
    membership = muscle_tet_membership(np.asarray(model["muscle_fraction"], dtype=float))

    surfaces, surface_colours = [], []
    for index, name in enumerate(names):
        faces = tet_boundary_faces(positions, tets[membership[:, index]])
        surfaces.append(faces)
        surface_colours.append(np.tile(symmetric_pair_colour(name, names), (len(faces), 1)))
    muscle_faces = np.concatenate(surfaces) if surfaces else np.zeros((0, 3), dtype=np.int64)
    muscle_colours = np.concatenate(surface_colours) if surface_colours else np.zeros((0, 3))

    layers = _bone_layers(model) + [
        MeshLayer(positions, muscle_faces, muscle_colours, colour_per_vertex=False),
        MeshLayer(model["skin_vertices"], model["skin_triangles"], SKIN_COLOUR, _MUSCLE_SKIN_VEIL_OPACITY)]
    sheet = _render_views(model, ("front", "three_quarter", "side"), _THREE_VIEW_SIZE, layers,
                          model["skin_vertices"])

    shown_bases = {pair_base_name(name) for name, faces in zip(names, surfaces) if len(faces)}
    entries = []
    for base, members in _pairs_in_order(names).items():
        label = _pair_label(base, members)
        if base not in shown_bases:
            label += " (not drawn: too thin or overlapped)"
        entries.append((label, symmetric_pair_colour(members[0], names)))
    title = f"Muscles: {len(names)} muscles drawn from {int(membership.any(axis=1).sum()):,} of {len(tets):,} tets"
    return save_png(add_legend(sheet, entries, title=title), path)


def picture_cross_section(model: dict, path, plane: str = "sagittal", offset: float = 0.0) -> Path:
    """The tet mesh cut by a plane through the model centre, shifted ``offset`` metres
    along the plane normal: ``'sagittal'`` (normal = the subject's left; seen from the
    left, face to the left, like the side view) or ``'horizontal'`` (normal = up; seen from
    above with the face upwards and the subject's left on the right, like the front view).

    Cut tets are filled from pale yellow (passive) to red (all muscle) by their muscle
    fraction and outlined, so the mesh resolution shows; skin, bone and teeth appear as
    their cut lines.
    """
    axes = HeadAxes.of(model)
    positions, tets = np.asarray(model["rest_positions"], dtype=float), model["tets"]
    if plane == "sagittal":
        normal, across, upward = axes.left, -axes.forward, axes.up
        across_label, upward_label = "face  \u2190   \u2192  back of head   (cm)", "down  \u2192  up   (cm)"
    elif plane == "horizontal":
        normal, across, upward = axes.up, axes.left, axes.forward
        across_label, upward_label = "subject's right  \u2190   \u2192  subject's left   (cm)", "back  \u2192  face   (cm)"
    else:
        raise ValueError(f"plane must be 'sagittal' or 'horizontal', got {plane!r}")
    origin = model_centre(model) + offset * normal

    def in_plane_cm(points: np.ndarray) -> np.ndarray:
        relative = points - origin
        return np.stack([relative @ across, relative @ upward], axis=-1) * 100.0

    polygons, cut_tets = _tet_cut_polygons(positions, tets, (positions - origin) @ normal, in_plane_cm)
    muscle_amount = np.clip(np.asarray(model["muscle_fraction"], dtype=float)[cut_tets].sum(axis=1), 0.0, 1.0)

    figure = Figure(dpi=100, facecolor=BACKGROUND, layout="constrained")
    FigureCanvasAgg(figure)
    plot = figure.add_subplot()
    plot.set_facecolor(BACKGROUND)
    tissue_colours = LinearSegmentedColormap.from_list("tissue", [PASSIVE_TISSUE_COLOUR, MUSCLE_TISSUE_COLOUR])
    tissue = PolyCollection(polygons, array=muscle_amount, cmap=tissue_colours, norm=Normalize(0.0, 1.0),
                            edgecolors=(0.25, 0.22, 0.2, 0.55), linewidths=0.3)
    plot.add_collection(tissue)

    line_handles = []
    for name, vertices, triangles, colour in _surfaces_for_cut_lines(model):
        segments = triangle_cut_segments(np.asarray(vertices, dtype=float), triangles, normal, origin)
        if len(segments):
            plot.add_collection(LineCollection(in_plane_cm(segments), colors=[colour], linewidths=1.8))
            if name not in [handle.get_label() for handle in line_handles]:  # upper and lower teeth share one
                line_handles.append(Line2D([], [], color=colour, linewidth=2.5, label=name))

    plot.set_aspect("equal")
    plot.autoscale_view()
    _fit_figure_to_section(figure, plot)
    plot.set_xlabel(across_label, fontsize=11)
    plot.set_ylabel(upward_label, fontsize=11)
    if line_handles:
        figure.legend(handles=line_handles, loc="outside lower center", ncol=len(line_handles), fontsize=11,
                      frameon=False, title="cut lines", title_fontsize=11)
    colour_bar = figure.colorbar(tissue, ax=plot, shrink=0.6, pad=0.02)
    colour_bar.set_label("muscle fraction of the tet (0 = passive tissue)", fontsize=11)

    where = "through the model centre" if offset == 0 else f"{abs(offset) * 100:.1f} cm {_offset_word(plane, offset)} the model centre"
    plot.set_title(f"{plane.capitalize()} section {where}\n"
                   f"{len(cut_tets):,} of {len(tets):,} tets cut; median tet edge {median_tet_edge(positions, tets) * 1000:.1f} mm",
                   fontsize=14)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, facecolor=BACKGROUND)
    return path


def picture_attachments(model: dict, path) -> Path:
    """Bone surfaces with the tet nodes pinned to them (red) and sliding on them (green)."""
    positions = np.asarray(model["rest_positions"], dtype=float)
    pinned, sliding = positions[model["pin_nodes"]], positions[model["slide_nodes"]]

    def markers(radius_per_px: float) -> list[SpriteLayer]:
        radius = _MARKER_RADIUS_PX * radius_per_px
        return [SpriteLayer(pinned, PINNED_COLOUR, radius), SpriteLayer(sliding, SLIDING_COLOUR, radius)]

    layers = _bone_layers(model)
    framing = np.concatenate([np.asarray(layer.vertices, dtype=float) for layer in layers] + [pinned, sliding])
    sheet = _render_views(model, ("front", "side"), _TWO_VIEW_SIZE, layers, framing, sprite_layers=markers)
    entries = [(f"pinned to bone ({len(pinned):,} nodes)", PINNED_COLOUR),
               (f"sliding on bone ({len(sliding):,} nodes)", SLIDING_COLOUR),
               ("skull (cranium)", SKULL_COLOUR), ("jaw (mandible)", JAW_COLOUR)]
    if _has_teeth(model):
        entries.append(("teeth", TEETH_COLOUR))
    return save_png(add_legend(sheet, entries, title="Where the tissue is attached to bone"), path)


def picture_sheet(model: dict, out_dir) -> list[Path]:
    """Every picture of ``model`` into ``out_dir``; the horizontal section is at the mouth."""
    out_dir = Path(out_dir)
    return [
        picture_skin(model, out_dir / "skin.png"),
        picture_bones(model, out_dir / "bones.png"),
        picture_muscles(model, out_dir / "muscles.png"),
        picture_cross_section(model, out_dir / "section_sagittal.png", "sagittal"),
        picture_cross_section(model, out_dir / "section_horizontal.png", "horizontal", mouth_offset(model)),
        picture_attachments(model, out_dir / "attachments.png"),
    ]


# --------------------------------------------------------------------------- model geometry

def model_centre(model: dict) -> np.ndarray:
    """World position of the middle of the tet mesh's bounding box in head axes (the
    world-axis box would be skewed for a model whose head frame is rotated)."""
    axes = HeadAxes.of(model)
    coordinates = axes.coordinates(model["rest_positions"])
    middle = 0.5 * (coordinates.min(axis=0) + coordinates.max(axis=0))
    return middle @ np.stack([axes.left, axes.up, axes.forward])


def mouth_offset(model: dict) -> float:
    """Height of the mouth above the model centre (metres, along up): the centre of the
    ``orbicularis_oris`` muscle when the model has one, else 0."""
    names = [pair_base_name(str(name)) for name in model["muscle_names"]]
    columns = [index for index, name in enumerate(names) if name == "orbicularis_oris"]
    if not columns:
        return 0.0
    weights = np.asarray(model["muscle_fraction"], dtype=float)[:, columns].sum(axis=1)
    if weights.sum() <= 0:
        return 0.0
    positions = np.asarray(model["rest_positions"], dtype=float)
    tet_centres = positions[model["tets"]].mean(axis=1)
    mouth = (weights[:, None] * tet_centres).sum(axis=0) / weights.sum()
    return float((mouth - model_centre(model)) @ HeadAxes.of(model).up)


def muscle_tet_membership(muscle_fraction: np.ndarray) -> np.ndarray:
    """(M,m) bool: the tets drawn as each muscle (at most one muscle per tet).

    A tet belongs to its largest muscle when that muscle fills at least 30% of it, or,
    for a muscle whose peak fraction is below that (thinner than the tets), at least half
    of that peak.
    """
    tet_count, muscle_count = muscle_fraction.shape
    membership = np.zeros((tet_count, muscle_count), dtype=bool)
    if tet_count == 0 or muscle_count == 0:
        return membership
    dominant = np.argmax(muscle_fraction, axis=1)
    dominant_fraction = muscle_fraction[np.arange(tet_count), dominant]
    threshold = np.minimum(_MUSCLE_FRACTION_SHOWN, _THIN_MUSCLE_SHARE_OF_PEAK * muscle_fraction.max(axis=0))
    shown = (dominant_fraction >= threshold[dominant]) & (dominant_fraction > 0)
    membership[np.arange(tet_count)[shown], dominant[shown]] = True
    return membership


def tet_boundary_faces(positions: np.ndarray, tets: np.ndarray) -> np.ndarray:
    """(F,3) the faces used by exactly one of ``tets``, wound to face out of the set."""
    tets = np.asarray(tets, dtype=np.int64).reshape(-1, 4)
    if len(tets) == 0:
        return np.zeros((0, 3), dtype=np.int64)
    # Face k of a tet is the one opposite its corner k.
    faces = np.concatenate([tets[:, [1, 2, 3]], tets[:, [0, 2, 3]], tets[:, [0, 1, 3]], tets[:, [0, 1, 2]]])
    opposite = np.concatenate([tets[:, 0], tets[:, 1], tets[:, 2], tets[:, 3]])

    # A face is on the boundary when no other tet shares its three corners; lexsort groups
    # equal corner sets without packing indices into one integer (which could overflow).
    corners = np.sort(faces, axis=1)
    order = np.lexsort(corners.T[::-1])
    sorted_corners = corners[order]
    starts_group = np.ones(len(order), dtype=bool)
    starts_group[1:] = np.any(sorted_corners[1:] != sorted_corners[:-1], axis=1)
    group = np.cumsum(starts_group) - 1
    single = order[np.bincount(group)[group] == 1]
    faces, opposite = faces[single], opposite[single]

    positions = np.asarray(positions, dtype=float)
    a, b, c = positions[faces[:, 0]], positions[faces[:, 1]], positions[faces[:, 2]]
    points_inwards = np.einsum("ij,ij->i", np.cross(b - a, c - a), positions[opposite] - a) > 0
    faces[points_inwards] = faces[points_inwards][:, [0, 2, 1]]
    return faces


def median_tet_edge(positions: np.ndarray, tets: np.ndarray) -> float:
    tets = np.asarray(tets)
    if len(tets) == 0:
        return 0.0
    ends = np.asarray(positions, dtype=float)[tets[:, _TET_EDGES]]
    return float(np.median(np.linalg.norm(ends[:, :, 1] - ends[:, :, 0], axis=-1)))


# --------------------------------------------------------------------------- helpers

def _render_views(model: dict, views: Sequence[str], size: int, layers: list[MeshLayer], framing_points: np.ndarray,
                  sprite_layers: Callable[[float], list[SpriteLayer]] | None = None,
                  labels: Callable[[Camera], list[tuple[str, tuple[float, float]]]] | None = None) -> np.ndarray:
    """The named views side by side, at one common scale so sizes compare between views.

    ``sprite_layers`` receives the world length of one pixel, so markers keep the same
    on-screen size whatever the model's scale.
    """
    axes = HeadAxes.of(model)
    framing_points = np.asarray(framing_points, dtype=float)
    centre = 0.5 * (framing_points.min(axis=0) + framing_points.max(axis=0))
    cameras = [getattr(Camera, view)(centre, 1.0, axes.up, axes.forward, size, size).framed(framing_points)
               for view in views]
    common_extent = max(camera.extent for camera in cameras)
    cameras = [replace(camera, extent=common_extent) for camera in cameras]
    sprites = sprite_layers(common_extent / size) if sprite_layers else []

    images = []
    for camera in cameras:
        image = render_meshes(camera, layers, sprites)
        if labels:
            image = add_labels(image, labels(camera))
        images.append(image)
    return side_by_side(images, [_VIEW_CAPTIONS[view] for view in views])


def _bone_layers(model: dict) -> list[MeshLayer]:
    labels = np.asarray(model["bone_surface_label"])
    bone_colours = np.where((labels == JAW_LABEL)[:, None], JAW_COLOUR, SKULL_COLOUR)
    layers = [MeshLayer(model["bone_surface_vertices"], model["bone_surface_triangles"], bone_colours,
                        colour_per_vertex=False)]
    for jaw in ("upper", "lower"):
        if f"{jaw}_teeth_vertices" in model:
            layers.append(MeshLayer(model[f"{jaw}_teeth_vertices"], model[f"{jaw}_teeth_triangles"], TEETH_COLOUR))
    return layers


def _has_teeth(model: dict) -> bool:
    return "upper_teeth_vertices" in model or "lower_teeth_vertices" in model


def _surfaces_for_cut_lines(model: dict) -> list[tuple[str, np.ndarray, np.ndarray, tuple]]:
    labels = np.asarray(model["bone_surface_label"])
    bone_triangles = np.asarray(model["bone_surface_triangles"])
    surfaces = [("skin", model["skin_vertices"], model["skin_triangles"], SKIN_LINE_COLOUR),
                ("skull", model["bone_surface_vertices"], bone_triangles[labels == SKULL_LABEL], SKULL_LINE_COLOUR),
                ("jaw", model["bone_surface_vertices"], bone_triangles[labels == JAW_LABEL], JAW_LINE_COLOUR)]
    for jaw in ("upper", "lower"):
        if f"{jaw}_teeth_vertices" in model:
            surfaces.append(("teeth", model[f"{jaw}_teeth_vertices"], model[f"{jaw}_teeth_triangles"],
                             TEETH_LINE_COLOUR))
    return surfaces


def _condyle_names(condyles: np.ndarray, axes: HeadAxes) -> list[str]:
    if len(condyles) != 2:
        return ["condyle"] * len(condyles)
    sideways = condyles @ axes.left
    return ["left condyle", "right condyle"] if sideways[0] > sideways[1] else ["right condyle", "left condyle"]


def _pairs_in_order(names: Sequence[str]) -> dict[str, list[str]]:
    """Base name -> the names sharing it, in order of first appearance."""
    pairs: dict[str, list[str]] = {}
    for name in names:
        pairs.setdefault(pair_base_name(name), []).append(name)
    return pairs


def _pair_label(base: str, members: Sequence[str]) -> str:
    """``zygomaticus_major_L/R`` for a pair, the name itself for a single muscle."""
    if len(members) == 1 or base in members:
        return ", ".join(members)
    separator = members[0][len(base)]
    return base + separator + "/".join(member[len(base) + 1:] for member in members)


def _fit_figure_to_section(figure: Figure, plot) -> None:
    """Size the figure to the section's aspect ratio, so a tall or wide cut fills the
    picture instead of floating in blank margins; the plot box is at most 7.4 x 7 inches
    (740 x 700 pixels), leaving room round it for labels, title, colour bar and legend."""
    (left, right), (bottom, top) = plot.get_xlim(), plot.get_ylim()
    aspect = (right - left) / (top - bottom)
    plot_width = min(7.4, 7.0 * aspect)
    figure.set_size_inches(plot_width + 2.6, plot_width / aspect + 1.9)


def _offset_word(plane: str, offset: float) -> str:
    if plane == "sagittal":
        return "to the subject's left of" if offset > 0 else "to the subject's right of"
    return "above" if offset > 0 else "below"


def _tet_cut_polygons(positions: np.ndarray, tets: np.ndarray, signed_distance: np.ndarray,
                      in_plane: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Where a plane cuts each tet: (K,4,2) polygons (a triangle repeats its last corner)
    and the (K,) indices of the tets they come from.

    Nodes exactly on the plane count as on its positive side, so a tet face lying in the
    plane is drawn once (by the tet on the negative side) rather than twice or never.
    """
    tets = np.asarray(tets, dtype=np.int64)
    above = signed_distance[tets] >= 0
    start, end = _TET_EDGES[:, 0], _TET_EDGES[:, 1]
    crossing = above[:, start] != above[:, end]
    cut_tets = np.flatnonzero(crossing.any(axis=1))
    crossing = crossing[cut_tets]
    distance = signed_distance[tets[cut_tets]]
    with np.errstate(invalid="ignore", divide="ignore"):
        along = np.where(crossing, distance[:, start] / (distance[:, start] - distance[:, end]), 0.0)
    edge_start, edge_end = positions[tets[cut_tets][:, start]], positions[tets[cut_tets][:, end]]
    points = in_plane(edge_start + along[..., None] * (edge_end - edge_start))  # (K,6,2)

    # Order each polygon's 3 or 4 corners by angle around their mean, non-crossing edges last.
    counts = crossing.sum(axis=1)
    mean = (points * crossing[..., None]).sum(axis=1) / np.maximum(counts, 1)[:, None]
    angle = np.where(crossing, np.arctan2(points[..., 1] - mean[:, None, 1], points[..., 0] - mean[:, None, 0]), np.inf)
    corners = np.take_along_axis(points, np.argsort(angle, axis=1)[:, :4, None], axis=1)
    triangles = counts == 3
    corners[triangles, 3] = corners[triangles, 2]

    # Drop slivers where the plane only grazes a node or an edge.
    x, y = corners[..., 0], corners[..., 1]
    area = 0.5 * np.abs(np.sum(x * np.roll(y, -1, axis=1) - np.roll(x, -1, axis=1) * y, axis=1))
    scale = np.ptp(points.reshape(-1, 2), axis=0).max() if len(points) else 0.0
    keep = area > 1e-12 * scale ** 2
    return corners[keep], cut_tets[keep]


def triangle_cut_segments(vertices: np.ndarray, triangles: np.ndarray, normal: np.ndarray,
                          origin: np.ndarray) -> np.ndarray:
    """(S,2,3) the segments where a plane cuts a triangle mesh (same node rule as tets)."""
    triangles = np.asarray(triangles, dtype=np.int64).reshape(-1, 3)
    distance = ((vertices - origin) @ normal)[triangles]
    above = distance >= 0
    start, end = _TRIANGLE_EDGES[:, 0], _TRIANGLE_EDGES[:, 1]
    crossing = above[:, start] != above[:, end]
    cut = crossing.any(axis=1)  # a cut triangle has exactly two crossing edges
    crossing, distance, cut_triangles = crossing[cut], distance[cut], triangles[cut]
    along = distance[:, start] / np.where(crossing, distance[:, start] - distance[:, end], 1.0)
    edge_start, edge_end = vertices[cut_triangles[:, start]], vertices[cut_triangles[:, end]]
    points = edge_start + along[..., None] * (edge_end - edge_start)
    return points[crossing].reshape(-1, 2, 3)
