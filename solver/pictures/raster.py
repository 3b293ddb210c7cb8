"""A small z-buffered software rasteriser and the matplotlib glue that frames its images.

Everything is headless: meshes are drawn by numba kernels into numpy arrays, and titles,
captions, labels and legends are composed with matplotlib's Agg canvas (never pyplot, so
no backend or global figure state is involved).

Conventions
-----------
* A camera is orthographic. Image pixel ``(row, col)`` covers the square whose centre is
  at image coordinates ``x = col + 0.5``, ``y = row + 0.5``; ``x`` grows to the right,
  ``y`` grows downwards, and the camera centre projects to ``(width / 2, height / 2)``.
* Depth is the distance along the viewing direction; smaller is nearer.
* Colours are RGB floats in [0, 1]; rendered and composed images are ``uint8`` (H, W, 3).
"""
from __future__ import annotations

import colorsys
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import IdentityTransform
from numba import njit
from PIL import Image

Colour = tuple[float, float, float]

# A neutral light grey: bone, skin and the saturated muscle colours all read against it,
# and it is the figure colour too, so composed sheets have no visible seams.
BACKGROUND: Colour = (0.945, 0.945, 0.94)

# Lambert shading from a light fixed to the camera. The ambient floor keeps surfaces that
# face away from the light readable. The light sits a little above the eye because a pure
# headlight flattens shapes (every surface facing the viewer is lit equally), and a little
# to the right because the three-quarter and side views turn the subject's left, which
# appears on the image's right, towards the viewer.
_AMBIENT = 0.30
_DIFFUSE = 0.70
_LIGHT_IN_CAMERA = np.array([0.25, 0.45, 1.0]) / np.linalg.norm([0.25, 0.45, 1.0])  # (right, up, toward eye)

# Outlines: where the opaque depth jumps by more than this share of the view height (an
# object's silhouette, or one part in front of another) the pixels are darkened, so pale
# bone and teeth stay distinct from each other and from the pale background.
_OUTLINE_DEPTH_JUMP = 0.015
_OUTLINE_STRENGTH = 0.55
_OUTLINE_COLOUR = np.array([0.18, 0.17, 0.16])

# A smoothed vertex normal that deviates from the triangle's own normal by more than this
# marks a hard crease or inconsistent winding; the corner then falls back to flat shading.
_CREASE_COS = np.cos(np.radians(35.0))

_DPI = 100          # composition figures are sized in pixels; 1 inch = _DPI pixels
_PAD = 16           # pixels of margin around composed elements
_TEXT_COLOUR = (0.15, 0.15, 0.15)


# --------------------------------------------------------------------------- camera

@dataclass(frozen=True, eq=False)
class Camera:
    """An orthographic camera.

    ``view_direction`` is the direction the camera looks along (from the eye into the
    scene), ``up`` the world direction that appears upwards in the image (it is made
    orthogonal to the view), ``center`` the world point at the image centre, and
    ``extent`` the world length spanned by the image height.
    """

    view_direction: np.ndarray
    up: np.ndarray
    center: np.ndarray
    extent: float
    width: int = 800
    height: int = 800

    def __post_init__(self) -> None:
        view = _unit(np.asarray(self.view_direction, dtype=float))
        up = np.asarray(self.up, dtype=float)
        up = up - view * np.dot(up, view)
        if np.linalg.norm(up) < 1e-9:
            raise ValueError("Camera up vector is parallel to the view direction")
        if not self.extent > 0:
            raise ValueError(f"Camera extent must be positive, got {self.extent}")
        if self.width < 1 or self.height < 1:
            raise ValueError(f"Camera image size must be positive, got {self.width}x{self.height}")
        object.__setattr__(self, "view_direction", view)
        object.__setattr__(self, "up", _unit(up))
        object.__setattr__(self, "center", np.asarray(self.center, dtype=float).reshape(3))

    @property
    def right(self) -> np.ndarray:
        """World direction that appears to the right in the image."""
        return np.cross(self.view_direction, self.up)

    @property
    def pixels_per_unit(self) -> float:
        return self.height / self.extent

    def project(self, points: np.ndarray) -> np.ndarray:
        """(n,3) world points -> (n,3) image x, image y (pixels) and depth (world units)."""
        relative = np.asarray(points, dtype=float).reshape(-1, 3) - self.center
        scale = self.pixels_per_unit
        projected = np.empty_like(relative)
        projected[:, 0] = 0.5 * self.width + (relative @ self.right) * scale
        projected[:, 1] = 0.5 * self.height - (relative @ self.up) * scale
        projected[:, 2] = relative @ self.view_direction
        return projected

    def framed(self, points: np.ndarray, margin: float = 0.06) -> "Camera":
        """The same view, re-centred and zoomed so ``points`` fill the image with a margin
        of ``margin`` times the image size on every side."""
        relative = np.asarray(points, dtype=float).reshape(-1, 3) - self.center
        across, upward = relative @ self.right, relative @ self.up
        middle_across = 0.5 * (across.min() + across.max())
        middle_upward = 0.5 * (upward.min() + upward.max())
        span = max(np.ptp(upward), np.ptp(across) * self.height / self.width)
        if span <= 0:
            span = self.extent
        return dataclasses.replace(
            self,
            center=self.center + middle_across * self.right + middle_upward * self.up,
            extent=span / (1.0 - 2.0 * margin),
        )

    def scaled(self, factor: int) -> "Camera":
        """The same view with ``factor`` times as many pixels each way (for supersampling)."""
        return dataclasses.replace(self, width=self.width * factor, height=self.height * factor)

    @classmethod
    def front(cls, center, extent: float, up, forward, width: int = 800, height: int = 800) -> "Camera":
        """Facing the subject: the subject's left appears on the image's right."""
        return cls(-np.asarray(forward, dtype=float), up, center, extent, width, height)

    @classmethod
    def side(cls, center, extent: float, up, forward, width: int = 800, height: int = 800) -> "Camera":
        """Profile seen from the subject's left, face towards the image's left (Blender's
        'Right' orthographic view for a character facing -Y)."""
        return cls(-_subject_left(up, forward), up, center, extent, width, height)

    @classmethod
    def three_quarter(cls, center, extent: float, up, forward, width: int = 800, height: int = 800) -> "Camera":
        """Halfway between ``front`` and ``side``: 45 degrees round towards the subject's left."""
        eye_direction = _unit(_unit(np.asarray(forward, dtype=float)) + _subject_left(up, forward))
        return cls(-eye_direction, up, center, extent, width, height)


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(vector)
    if norm == 0:
        raise ValueError("zero-length direction vector")
    return vector / norm


def _subject_left(up, forward) -> np.ndarray:
    """The subject's left for a head whose top is ``up`` and whose face points ``forward``."""
    return _unit(np.cross(np.asarray(up, dtype=float), np.asarray(forward, dtype=float)))


# --------------------------------------------------------------------------- scene content

class MeshLayer(NamedTuple):
    """A triangle mesh to draw.

    ``colours`` is one RGB for the whole mesh, (T,3) per triangle or (V,3) per vertex. When
    the mesh has as many vertices as triangles the shape cannot tell which is meant and
    ``colour_per_vertex`` must say. ``opacity`` below 1 draws the mesh as a veil: only its
    nearest surface is blended over whatever lies behind it.
    """

    vertices: np.ndarray
    triangles: np.ndarray
    colours: np.ndarray | Sequence[float]
    opacity: float = 1.0
    colour_per_vertex: Optional[bool] = None


class SpriteLayer(NamedTuple):
    """Points drawn as shaded spheres of world radius ``radius``.

    ``colours`` is one RGB or (P,3). With ``on_top`` the markers are drawn over every mesh
    (for landmarks that sit inside geometry, such as jaw condyles inside the bone).
    """

    positions: np.ndarray
    colours: np.ndarray | Sequence[float]
    radius: float
    on_top: bool = False


# --------------------------------------------------------------------------- kernels

@njit(cache=True)
def _fill_triangles(screen, triangles, corner_colours, depth, image):
    """Z-buffered scan of triangles; colours interpolate linearly between the corners.

    The projection is orthographic, so screen-space barycentric interpolation of depth and
    colour is exact (no perspective correction is needed).
    """
    height, width = depth.shape
    for t in range(triangles.shape[0]):
        ia = triangles[t, 0]
        ib = triangles[t, 1]
        ic = triangles[t, 2]
        ax, ay, az = screen[ia, 0], screen[ia, 1], screen[ia, 2]
        bx, by, bz = screen[ib, 0], screen[ib, 1], screen[ib, 2]
        cx, cy, cz = screen[ic, 0], screen[ic, 1], screen[ic, 2]
        doubled_area = (bx - ax) * (cy - ay) - (by - ay) * (cx - ax)
        if abs(doubled_area) < 1e-12:
            continue
        # Pixels whose centres (col + 0.5, row + 0.5) fall inside the bounding box.
        col_lo = max(int(np.ceil(min(ax, bx, cx) - 0.5)), 0)
        col_hi = min(int(np.floor(max(ax, bx, cx) - 0.5)), width - 1)
        row_lo = max(int(np.ceil(min(ay, by, cy) - 0.5)), 0)
        row_hi = min(int(np.floor(max(ay, by, cy) - 0.5)), height - 1)
        inverse_area = 1.0 / doubled_area
        for row in range(row_lo, row_hi + 1):
            y = row + 0.5
            for col in range(col_lo, col_hi + 1):
                x = col + 0.5
                weight_a = ((bx - x) * (cy - y) - (by - y) * (cx - x)) * inverse_area
                weight_b = ((cx - x) * (ay - y) - (cy - y) * (ax - x)) * inverse_area
                weight_c = 1.0 - weight_a - weight_b
                if weight_a < 0.0 or weight_b < 0.0 or weight_c < 0.0:
                    continue
                z = weight_a * az + weight_b * bz + weight_c * cz
                if z < depth[row, col]:
                    depth[row, col] = z
                    for k in range(3):
                        image[row, col, k] = (weight_a * corner_colours[t, 0, k]
                                              + weight_b * corner_colours[t, 1, k]
                                              + weight_c * corner_colours[t, 2, k])


@njit(cache=True)
def _fill_sprites(screen, colours, radius_px, radius_world, light, depth, image):
    """Z-buffered sphere impostors: per pixel, the depth and normal of a true sphere."""
    height, width = depth.shape
    for s in range(screen.shape[0]):
        cx, cy, cz = screen[s, 0], screen[s, 1], screen[s, 2]
        col_lo = max(int(np.ceil(cx - radius_px - 0.5)), 0)
        col_hi = min(int(np.floor(cx + radius_px - 0.5)), width - 1)
        row_lo = max(int(np.ceil(cy - radius_px - 0.5)), 0)
        row_hi = min(int(np.floor(cy + radius_px - 0.5)), height - 1)
        for row in range(row_lo, row_hi + 1):
            dy = (row + 0.5 - cy) / radius_px
            for col in range(col_lo, col_hi + 1):
                dx = (col + 0.5 - cx) / radius_px
                squared = dx * dx + dy * dy
                if squared > 1.0:
                    continue
                towards_eye = np.sqrt(1.0 - squared)
                z = cz - towards_eye * radius_world
                if z < depth[row, col]:
                    depth[row, col] = z
                    # Normal in camera axes (right, up, towards eye); image y points down.
                    lit = dx * light[0] - dy * light[1] + towards_eye * light[2]
                    shade = _AMBIENT + _DIFFUSE * max(lit, 0.0)
                    for k in range(3):
                        image[row, col, k] = colours[s, k] * shade


# --------------------------------------------------------------------------- rendering

def render_meshes(camera: Camera, layers: Sequence, sprites: Sequence[SpriteLayer] = (),
                  background: Colour = BACKGROUND, supersample: int = 2) -> np.ndarray:
    """Draw mesh layers (``MeshLayer`` or plain (vertices, triangles, colours, opacity)
    tuples) and sprite layers; return a (camera.height, camera.width, 3) uint8 image.

    Opaque layers share one z-buffer. Each semi-transparent layer is drawn as a veil: its
    nearest surface in front of the opaque scene is found with a z-buffer of its own, and
    the veils are blended back to front per pixel. Drawing only the nearest surface keeps
    a faint skin looking like one even film instead of darkening wherever the mesh folds
    or its back wall shows through. Silhouettes and depth steps of the opaque scene are
    outlined. Edges are anti-aliased by rendering ``supersample`` times larger and
    averaging. Sprite layers with ``on_top`` are drawn last, over everything.
    """
    fine = camera.scaled(supersample)
    light = _LIGHT_IN_CAMERA @ np.stack([fine.right, fine.up, -fine.view_direction])
    depth = np.full((fine.height, fine.width), np.inf)
    image = np.empty((fine.height, fine.width, 3))
    image[:] = background

    meshes = [MeshLayer(*layer) for layer in layers]
    for layer in meshes:
        _check_mesh_layer(layer)
    for layer in meshes:
        if layer.opacity >= 1.0:
            _draw_mesh(fine, layer, light, depth, image)
    for sprite_layer in sprites:
        if not sprite_layer.on_top:
            _draw_sprites(fine, sprite_layer, depth, image)
    _darken_outlines(depth, image, _OUTLINE_DEPTH_JUMP * fine.extent)

    veils = [layer for layer in meshes if layer.opacity < 1.0]
    if veils:
        _blend_veils(fine, veils, light, depth, image)

    on_top_depth = np.full_like(depth, np.inf)
    for sprite_layer in sprites:
        if sprite_layer.on_top:
            _draw_sprites(fine, sprite_layer, on_top_depth, image)

    averaged = image.reshape(camera.height, supersample, camera.width, supersample, 3).mean(axis=(1, 3))
    return np.round(np.clip(averaged, 0.0, 1.0) * 255.0).astype(np.uint8)


def _darken_outlines(depth: np.ndarray, image: np.ndarray, depth_jump: float) -> None:
    """Darken both pixels of every neighbouring pair whose depths differ by more than
    ``depth_jump``; the background counts as far behind everything."""
    drawn = np.isfinite(depth)
    if not drawn.any():
        return
    far = depth[drawn].max() + 2.0 * depth_jump
    filled = np.where(drawn, depth, far)
    outline = np.zeros(depth.shape, dtype=bool)
    across = np.abs(np.diff(filled, axis=1)) > depth_jump
    down = np.abs(np.diff(filled, axis=0)) > depth_jump
    outline[:, 1:] |= across
    outline[:, :-1] |= across
    outline[1:, :] |= down
    outline[:-1, :] |= down
    image[outline] += _OUTLINE_STRENGTH * (_OUTLINE_COLOUR - image[outline])


def _check_mesh_layer(layer: MeshLayer) -> None:
    if not 0.0 < layer.opacity <= 1.0:
        raise ValueError(f"layer opacity must be in (0, 1], got {layer.opacity}")
    vertices = np.asarray(layer.vertices)
    if vertices.ndim != 2 or vertices.shape[1] != 3 or not np.all(np.isfinite(vertices)):
        raise ValueError("layer vertices must be a finite (n, 3) array")
    triangles = np.asarray(layer.triangles)
    if triangles.size and (triangles.min() < 0 or triangles.max() >= len(vertices)):
        raise ValueError("layer triangles index outside its vertices")


def _draw_mesh(camera: Camera, layer: MeshLayer, light: np.ndarray, depth: np.ndarray, image: np.ndarray) -> None:
    triangles = np.ascontiguousarray(np.asarray(layer.triangles, dtype=np.int64).reshape(-1, 3))
    if len(triangles) == 0:
        return
    vertices = np.asarray(layer.vertices, dtype=float)
    corner_colours = _base_corner_colours(layer, len(vertices), triangles) * _corner_shading(vertices, triangles, light)[..., None]
    _fill_triangles(camera.project(vertices), triangles, np.ascontiguousarray(corner_colours), depth, image)


def _draw_sprites(camera: Camera, layer: SpriteLayer, depth: np.ndarray, image: np.ndarray) -> None:
    positions = np.asarray(layer.positions, dtype=float).reshape(-1, 3)
    if len(positions) == 0:
        return
    colours = np.broadcast_to(np.asarray(layer.colours, dtype=float), positions.shape)
    _fill_sprites(camera.project(positions), np.ascontiguousarray(colours),
                  float(layer.radius * camera.pixels_per_unit), float(layer.radius),
                  _LIGHT_IN_CAMERA, depth, image)


def _blend_veils(camera: Camera, veils: list[MeshLayer], light: np.ndarray, depth: np.ndarray, image: np.ndarray) -> None:
    # A veil lying on (or a hair behind) an opaque surface still counts as in front of it,
    # so coincident surfaces such as a skin over the tet hull are veiled evenly instead of
    # in z-fighting speckles.
    limit = depth + 1e-3 * camera.extent
    veil_depths = np.empty((len(veils),) + depth.shape)
    veil_colours = np.zeros((len(veils),) + image.shape)
    for index, layer in enumerate(veils):
        veil_depths[index] = limit
        _draw_mesh(camera, layer, light, veil_depths[index], veil_colours[index])
    opacities = np.array([layer.opacity for layer in veils], dtype=float)
    _composite_veils(veil_depths, veil_colours, opacities, limit, image)


@njit(cache=True)
def _composite_veils(veil_depths, veil_colours, opacities, limit, image):
    """Blend, per pixel, every veil that covers it (depth below ``limit``) from the
    farthest to the nearest."""
    veil_count = veil_depths.shape[0]
    height, width = limit.shape
    blended = np.zeros(veil_count, dtype=np.bool_)
    for row in range(height):
        for col in range(width):
            blended[:] = False
            for _ in range(veil_count):
                farthest, farthest_depth = -1, -np.inf
                for veil in range(veil_count):
                    z = veil_depths[veil, row, col]
                    if not blended[veil] and z < limit[row, col] and z > farthest_depth:
                        farthest, farthest_depth = veil, z
                if farthest < 0:
                    break
                blended[farthest] = True
                alpha = opacities[farthest]
                for k in range(3):
                    image[row, col, k] += alpha * (veil_colours[farthest, row, col, k] - image[row, col, k])


def _base_corner_colours(layer: MeshLayer, vertex_count: int, triangles: np.ndarray) -> np.ndarray:
    """(T,3,3): the unshaded colour at each corner of each triangle."""
    colours = np.asarray(layer.colours, dtype=float)
    if colours.shape == (3,):
        return np.broadcast_to(colours, (len(triangles), 3, 3))
    if colours.ndim != 2 or colours.shape[1] != 3:
        raise ValueError(f"layer colours must be RGB, (T,3) or (V,3); got shape {colours.shape}")
    per_vertex = layer.colour_per_vertex
    if per_vertex is None:
        matches_vertices, matches_triangles = len(colours) == vertex_count, len(colours) == len(triangles)
        if matches_vertices == matches_triangles:
            raise ValueError(f"{len(colours)} colours for {vertex_count} vertices and {len(triangles)} "
                             "triangles: set colour_per_vertex to say which they are")
        per_vertex = matches_vertices
    if per_vertex:
        return colours[triangles]
    return np.repeat(colours[:, None, :], 3, axis=1)


def _corner_shading(vertices: np.ndarray, triangles: np.ndarray, light: np.ndarray) -> np.ndarray:
    """(T,3) two-sided Lambert intensity at each triangle corner (Gouraud shading).

    Corners use the area-weighted vertex normal, except across creases (or where winding
    is inconsistent), where they keep the triangle's own normal. The absolute cosine
    lights both sides alike, as open meshes show their insides.
    """
    corners = vertices[triangles]
    face_normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])  # length = 2 * area
    vertex_normals = np.stack([
        np.bincount(triangles.ravel(), weights=np.repeat(face_normals[:, axis], 3), minlength=len(vertices))
        for axis in range(3)], axis=1)
    face_normals = _normalised_rows(face_normals)
    corner_normals = _normalised_rows(vertex_normals)[triangles]
    smooth = np.einsum("tcj,tj->tc", corner_normals, face_normals) >= _CREASE_COS
    corner_normals = np.where(smooth[..., None], corner_normals, face_normals[:, None, :])
    return _AMBIENT + _DIFFUSE * np.abs(corner_normals @ light)


def _normalised_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return vectors / np.maximum(norms, 1e-300)


# --------------------------------------------------------------------------- composition

def save_png(image: np.ndarray, path) -> Path:
    """Write a uint8 RGB image; parent folders are created. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(image, dtype=np.uint8)).save(path)
    return path


def add_labels(image: np.ndarray, labels: Sequence[tuple[str, tuple[float, float]]]) -> np.ndarray:
    """Annotate points of ``image`` (given in image x, y pixels) with text and a leader line.

    Each label is pushed outwards (towards the nearer side edge) so it does not cover the
    middle of the subject. The result has the same size as ``image``.
    """
    height, width = image.shape[:2]
    figure = _new_figure(width, height)
    axes = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    axes.imshow(image, interpolation="none")
    axes.set_axis_off()
    for text, (x, y) in labels:
        outwards = 1 if x >= 0.5 * width else -1
        axes.annotate(
            text, xy=(x, y), xytext=(outwards * 45, 35), textcoords="offset pixels",
            ha="left" if outwards > 0 else "right", va="center", fontsize=12, color=_TEXT_COLOUR,
            bbox=dict(boxstyle="round,pad=0.3", facecolor="white", edgecolor=(0.6, 0.6, 0.6), alpha=0.9),
            arrowprops=dict(arrowstyle="-", color=(0.25, 0.25, 0.25), linewidth=1.0, shrinkA=0, shrinkB=4))
    return _figure_to_image(figure)


def side_by_side(images: Sequence[np.ndarray], titles: Sequence[str]) -> np.ndarray:
    """Place images in a row, tops aligned, each with its caption above it, at full
    resolution (one image pixel per output pixel)."""
    if len(images) != len(titles) or not images:
        raise ValueError("side_by_side needs one title per image and at least one image")
    figure = _new_figure(1, 1)
    captions = [figure.text(0, 0, title, fontsize=13, color=_TEXT_COLOUR, ha="center", va="bottom",
                            transform=IdentityTransform()) for title in titles]
    caption_height = max(_size_in_pixels(figure, caption)[1] for caption in captions)
    width = sum(image.shape[1] for image in images) + _PAD * (len(images) - 1)
    tallest = max(image.shape[0] for image in images)
    height = tallest + caption_height + _PAD // 2
    figure.set_size_inches(width / _DPI, height / _DPI)
    left = 0
    for image, caption in zip(images, captions):
        figure.figimage(image, xo=left, yo=tallest - image.shape[0], origin="upper")
        caption.set_position((left + 0.5 * image.shape[1], tallest + _PAD // 4))
        left += image.shape[1] + _PAD
    return _figure_to_image(figure)


def add_title(image: np.ndarray, title: str) -> np.ndarray:
    """``image`` with a title band above it."""
    return _compose(image, (), title)


def add_legend(image: np.ndarray, entries: Sequence[tuple[str, Colour]], title: Optional[str] = None) -> np.ndarray:
    """``image`` with a legend of coloured patches to its right and an optional title.

    The image keeps its full resolution, so an 800-pixel view with a legend comes out
    about 1000 pixels wide. A legend taller than the image is split into columns.
    """
    return _compose(image, entries, title)


def _compose(image: np.ndarray, entries: Sequence[tuple[str, Colour]], title: Optional[str]) -> np.ndarray:
    image_height, image_width = image.shape[:2]
    figure = _new_figure(1, 1)

    title_artist, title_width, title_height = None, 0, 0
    if title:
        title_artist = figure.text(0, 0, title, fontsize=16, fontweight="bold", color=_TEXT_COLOUR,
                                   ha="center", va="top", transform=IdentityTransform())
        title_width, title_height = _size_in_pixels(figure, title_artist)

    legend, legend_width, legend_height = None, 0, 0
    if entries:
        legend, legend_width, legend_height = _legend_fitting_height(figure, entries, image_height)

    content_width = image_width + (_PAD + legend_width if legend else 0)
    width = max(content_width, title_width) + 2 * _PAD
    content_height = max(image_height, legend_height)
    height = content_height + (title_height + _PAD if title_artist else 0) + 2 * _PAD
    figure.set_size_inches(width / _DPI, height / _DPI)

    # Figure pixel positions are measured from the bottom left, as matplotlib does.
    content_left = (width - content_width) // 2
    content_middle = _PAD + 0.5 * content_height
    figure.figimage(image, xo=content_left, yo=int(content_middle - 0.5 * image_height), origin="upper")
    if legend:
        legend.set_bbox_to_anchor((content_left + image_width + _PAD, content_middle), transform=IdentityTransform())
    if title_artist:
        title_artist.set_position((0.5 * width, height - _PAD))
    return _figure_to_image(figure)


def _legend_fitting_height(figure: Figure, entries: Sequence[tuple[str, Colour]], max_height: int):
    """A figure legend with as few columns as keep it no taller than ``max_height``."""
    handles = [Patch(facecolor=colour, edgecolor=(0.3, 0.3, 0.3), linewidth=0.6) for _, colour in entries]
    names = [name for name, _ in entries]
    for columns in range(1, len(entries) + 1):
        legend = figure.legend(handles, names, loc="center left", ncol=columns, frameon=False, fontsize=12,
                               handlelength=1.6, handleheight=1.2, labelcolor=_TEXT_COLOUR,
                               bbox_to_anchor=(0, 0), bbox_transform=IdentityTransform())
        width, height = _size_in_pixels(figure, legend)
        if height <= max_height or columns == len(entries):
            return legend, width, height
        legend.remove()
    raise AssertionError("unreachable: the last column count always returns")


def _new_figure(width_px: int, height_px: int) -> Figure:
    figure = Figure(figsize=(width_px / _DPI, height_px / _DPI), dpi=_DPI, facecolor=BACKGROUND)
    FigureCanvasAgg(figure)
    return figure


def _size_in_pixels(figure: Figure, artist) -> tuple[int, int]:
    box = artist.get_window_extent(figure.canvas.get_renderer())
    return int(np.ceil(box.width)), int(np.ceil(box.height))


def _figure_to_image(figure: Figure) -> np.ndarray:
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


# --------------------------------------------------------------------------- colours

def distinct_colours(count: int) -> np.ndarray:
    """(count,3) well-separated colours: tab20 (greys dropped, strong shades before pale
    ones), then golden-ratio hue steps at alternating lightness for any beyond that."""
    tab20 = np.asarray(colormaps["tab20"].colors)
    strong, pale = tab20[0::2], tab20[1::2]
    not_grey = np.arange(len(strong)) != 7  # tab20's seventh pair is the grey one
    colours = list(strong[not_grey]) + list(pale[not_grey])
    golden_ratio_conjugate = 0.618033988749895
    extra = 0
    while len(colours) < count:
        hue = (0.11 + extra * golden_ratio_conjugate) % 1.0
        lightness = (0.45, 0.65, 0.35)[extra % 3]
        colours.append(np.array(colorsys.hls_to_rgb(hue, lightness, 0.65)))
        extra += 1
    return np.array(colours[:count]).reshape(count, 3)


def pair_base_name(name: str) -> str:
    """The name shared by a left/right pair: a trailing ``_L``/``_R`` (or Blender's
    ``.L``/``.R``) is dropped."""
    for suffix in ("_L", "_R", ".L", ".R"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def symmetric_pair_colour(name: str, all_names: Sequence[str]) -> Colour:
    """The colour of ``name`` among ``all_names``: distinct per base name, shared by the
    two sides of a pair (``zygomaticus_major_L`` and ``zygomaticus_major_R``). Base names
    take palette colours in order of first appearance, so the colour of a muscle depends
    only on the list, not on the order of calls."""
    bases = list(dict.fromkeys(pair_base_name(str(other)) for other in all_names))
    base = pair_base_name(name)
    if base not in bases:
        raise KeyError(f"{name!r} is not among the names given")
    return tuple(float(c) for c in distinct_colours(len(bases))[bases.index(base)])
