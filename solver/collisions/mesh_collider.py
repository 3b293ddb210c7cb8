"""External props as closed triangle meshes, moving rigidly or deforming frame by frame.

A MESH.npz holds ``faces`` (F,3) vertex indices, ``transforms`` (T,4,4), the prop's world
placement in each animation frame, and ``vertices`` in metres: either (V,3), one shape that
only moves rigidly, or (T,V,3), one shape per frame of the same mesh (a prop bent by bones,
inflated by shape keys), placed by the transform of the same frame — identity transforms when
the vertices are already in the world. With per-frame vertices ``transforms`` has T frames, or
one that holds for all. Frames past the last reuse the last one. ``load_mesh_collider``
checks everything a detection relies on and says what to fix:

* arrays of the right shape and kind, finite, indices in range, no pickled/object arrays;
  per-frame vertices and transforms agree on the number of frames;
* every face has positive area (no repeated corner, no collinear corners) in every frame;
* the surface is closed and manifold: each edge is shared by exactly two faces that walk it
  in opposite directions, and the faces around each vertex form a single fan;
* each transform is rigid: orthonormal rotation with determinant +1, last row (0,0,0,1).

A mesh whose faces all point inwards (negative enclosed volume, judged on the first frame)
is turned around rather than rejected, since exporters flip normals often and the fix is
unambiguous.

Detection carries the skin points into the prop's own frame with the inverse transform, so a
rigid prop's hierarchy is built once. A deforming prop's hierarchy is refitted to the frame's
shape (same tree, new boxes and pseudo-normals) and its clearance grid rebuilt when detection
moves to another frame; the whole surface is the projection region.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ..npz_files import NpzReadError, read_npz
from .contacts import BonePose, ContactPlanes
from .detection import (ClearanceGrid, SurfaceQuery, apply_transform, candidates_in_box, closed_penetrations,
                        rigid_inverse, rotate, transformed_box)

# Relative tolerances of the rigidity check (orthonormality and the last row).
RIGID_TOLERANCE = 1e-5
# A face is degenerate when its area is below this fraction of the squared bounding-box diagonal.
DEGENERATE_AREA_FRACTION = 1e-12
CLEARANCE_CELLS_PER_AXIS = 48
# A deforming prop rebuilds its grid on every frame: 48³ cells took 0.25 s per frame for a
# 642-vertex sphere (a 35k-tet frame solves in 0.6 s), 16³ cells 14 ms, and the coarser grid
# made a detection of 8000 nearby points only ~20 % slower.
DEFORMING_CLEARANCE_CELLS_PER_AXIS = 16


class MeshColliderError(ValueError):
    """A mesh collider file or array is unusable; the message says what is wrong and how to fix it."""


def _fail(source, problem, fix):
    raise MeshColliderError(f"{source}: {problem}. {fix}")


def validate_collider_mesh(vertices, faces, transforms, source: str = "mesh collider"):
    """Checked copies (vertices float64 (V,3) or (T,V,3), faces int64 (F,3) outward, transforms
    float64 (T,4,4))."""
    for name, array in (("vertices", vertices), ("faces", faces), ("transforms", transforms)):
        if not isinstance(array, np.ndarray) or array.dtype == object or array.dtype.kind not in "biuf":
            kind = getattr(array, "dtype", type(array))
            _fail(source, f"'{name}' must be a numeric array, got {kind}",
                  "Save plain numeric arrays with numpy.savez (no Python objects, no pickling)")
    if vertices.ndim not in (2, 3) or vertices.shape[-1] != 3 or vertices.shape[-2] < 4 or len(vertices) == 0:
        _fail(source, f"'vertices' must have shape (V, 3), or (T, V, 3) for a deforming prop, with V >= 4 and "
                      f"T >= 1, got {vertices.shape}",
              "Store one row of x, y, z (metres) per vertex, and one such block per frame if the prop deforms")
    if faces.ndim != 2 or faces.shape[1] != 3 or len(faces) < 4:
        _fail(source, f"'faces' must have shape (F, 3) with F >= 4, got {faces.shape}",
              "Triangulate the mesh and store three vertex indices per face")
    if faces.dtype.kind not in "iu":
        _fail(source, f"'faces' must hold integers, got {faces.dtype}", "Store the vertex indices as integers")
    if transforms.ndim == 2 and transforms.shape == (4, 4):
        transforms = transforms[None]
    if transforms.ndim != 3 or transforms.shape[1:] != (4, 4) or len(transforms) == 0:
        _fail(source, f"'transforms' must have shape (T, 4, 4) with T >= 1, got {transforms.shape}",
              "Store one 4x4 world matrix per frame")
    vertices = np.ascontiguousarray(vertices, dtype=np.float64)
    faces = np.ascontiguousarray(faces, dtype=np.int64)
    transforms = np.ascontiguousarray(transforms, dtype=np.float64)
    finite = np.isfinite(vertices).all(-1)
    if not finite.all():
        first = np.argwhere(~finite)[0]
        where = f"vertex {first[-1]}" + (f" of frame {first[0]}" if vertices.ndim == 3 else "")
        _fail(source, f"{int((~finite).sum())} vertices have NaN or infinite coordinates (first: {where})",
              "Fix or remove those vertices")
    if not np.isfinite(transforms).all():
        bad = np.flatnonzero(~np.isfinite(transforms).reshape(len(transforms), -1).all(1))
        _fail(source, f"{len(bad)} transforms contain NaN or infinite values (first: frame {bad[0]})",
              "Export finite matrices for every frame")
    shapes = vertices if vertices.ndim == 3 else vertices[None]
    if len(shapes) > 1 and len(transforms) not in (1, len(shapes)):
        _fail(source, f"'vertices' has {len(shapes)} frames but 'transforms' has {len(transforms)}",
              "Store one transform per frame of vertices (identity matrices for vertices already in world "
              "space), or a single transform for all frames")
    vertex_count = shapes.shape[1]
    if faces.min() < 0 or faces.max() >= vertex_count:
        _fail(source, f"face indices must lie in [0, {vertex_count - 1}], got [{faces.min()}, {faces.max()}]",
              "Index the vertices from 0")
    for frame, shape in enumerate(shapes):
        _check_faces(shape, faces, source if len(shapes) == 1 else f"{source}, frame {frame}")
    faces = _check_closed_manifold(shapes[0], faces, source)
    _check_rigid(transforms, source)
    return vertices, faces, transforms


def _check_faces(vertices, faces, source):
    repeated = (faces[:, 0] == faces[:, 1]) | (faces[:, 1] == faces[:, 2]) | (faces[:, 2] == faces[:, 0])
    corners = vertices[faces]
    area = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    diagonal = np.linalg.norm(vertices.max(0) - vertices.min(0))
    degenerate = repeated | (area <= DEGENERATE_AREA_FRACTION * diagonal ** 2)
    if degenerate.any():
        bad = np.flatnonzero(degenerate)
        _fail(source, f"{len(bad)} faces have zero area (first: face {bad[0]})",
              "Merge duplicate vertices and dissolve degenerate faces (Blender: Mesh > Clean Up > Degenerate Dissolve)")


def _check_closed_manifold(vertices, faces, source):
    """Faces, turned outwards if they all pointed in; raises unless closed, manifold and consistently oriented."""
    directed = np.stack([faces, np.roll(faces, -1, axis=1)], axis=-1).reshape(-1, 2)
    undirected, edge_of, uses = np.unique(np.sort(directed, axis=1), axis=0, return_inverse=True, return_counts=True)
    edge_of = edge_of.reshape(-1)
    if (uses == 1).any():
        _fail(source, f"the mesh is not closed: {int((uses == 1).sum())} edges belong to one face only "
                      f"(first: vertices {tuple(undirected[uses == 1][0])})",
              "Fill the holes so the prop is a watertight solid (Blender: select boundary loops, Face > Fill)")
    if (uses > 2).any():
        _fail(source, f"the mesh is not manifold: {int((uses > 2).sum())} edges are shared by more than two faces "
                      f"(first: vertices {tuple(undirected[uses > 2][0])})",
              "Separate the touching parts or merge them into one solid")
    _, directed_uses = np.unique(directed, axis=0, return_counts=True)
    if (directed_uses > 1).any():
        _fail(source, "the faces are not consistently oriented: some edge is walked the same way by both its faces",
              "Recalculate the normals so they all point outwards (Blender: Mesh > Normals > Recalculate Outside)")
    _check_vertex_fans(faces, directed, edge_of, source, len(vertices))
    corners = vertices[faces]
    volume = np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() / 6.0
    return faces[:, ::-1].copy() if volume < 0 else faces


def _check_vertex_fans(faces, directed, edge_of, source, vertex_count):
    """Each vertex's faces must form one fan: corners of a vertex are joined across shared edges."""
    face_count = len(faces)
    corner = np.arange(3 * face_count).reshape(face_count, 3)
    # The two faces sharing each edge: sort the half-edges by edge id, they come in pairs.
    order = np.argsort(edge_of, kind="stable")
    first, second = order[0::2], order[1::2]
    face_a, slot_a = first // 3, first % 3
    face_b = second // 3
    rows, cols = [], []
    for end in range(2):
        # Half-edge `first` runs from its face's corner slot_a to slot_a + 1.
        vertex = directed[first, end]
        rows.append(corner[face_a, (slot_a + end) % 3])
        cols.append(corner[face_b, np.argmax(faces[face_b] == vertex[:, None], axis=1)])
    graph = coo_matrix((np.ones(len(rows[0]) * 2), (np.concatenate(rows), np.concatenate(cols))),
                       shape=(3 * face_count, 3 * face_count))
    _, component = connected_components(graph, directed=False)
    corner_vertex = faces.ravel()
    fans = np.zeros(vertex_count, np.int64)
    pairs = np.unique(np.column_stack([corner_vertex, component]), axis=0)
    np.add.at(fans, pairs[:, 0], 1)
    if (fans > 1).any():
        bad = np.flatnonzero(fans > 1)
        _fail(source, f"the mesh is not manifold at {len(bad)} vertices where separate surface sheets touch "
                      f"(first: vertex {bad[0]})",
              "Split those vertices or merge the touching parts into one solid")


def _check_rigid(transforms, source):
    rotation = transforms[:, :3, :3]
    scale = max(1.0, float(np.abs(transforms[:, :3, 3]).max()))
    orthonormal = np.abs(np.einsum("tji,tjk->tik", rotation, rotation) - np.eye(3)).max(axis=(1, 2))
    determinant = np.linalg.det(rotation)
    last_row = np.abs(transforms[:, 3] - np.array([0.0, 0.0, 0.0, 1.0])).max(1) / scale
    bad = (orthonormal > RIGID_TOLERANCE) | (determinant <= 0) | (last_row > RIGID_TOLERANCE)
    if bad.any():
        frame = int(np.flatnonzero(bad)[0])
        reason = ("has a non-orthonormal rotation (scale or shear)" if orthonormal[frame] > RIGID_TOLERANCE
                  else "mirrors (determinant <= 0)" if determinant[frame] <= 0 else "has a last row other than 0 0 0 1")
        _fail(source, f"transform of frame {frame} {reason}; {int(bad.sum())} of {len(transforms)} frames are not rigid",
              "Apply scale to the mesh itself and export rotation + translation only per frame")


class MeshCollider:
    """A closed prop mesh moving rigidly per frame, or deforming with one shape per frame
    (Collider protocol). `vertices` is the first frame's shape; `frame_vertices` (T,V,3) holds
    every frame's for a deforming prop, None for a rigid one."""

    def __init__(self, name: str, vertices, faces, transforms, max_depth: float = math.inf,
                 source: str | None = None):
        self.name = str(name)
        checked, self.faces, self.transforms = validate_collider_mesh(
            np.asarray(vertices), np.asarray(faces), np.asarray(transforms), source or f"mesh collider '{name}'")
        self.frame_vertices = checked if checked.ndim == 3 and len(checked) > 1 else None
        self.vertices = checked[0] if checked.ndim == 3 else checked
        self.max_depth = float(max_depth)
        self.volume = SurfaceQuery(self.vertices, self.faces)
        self._shape_frame = 0        # the frame of frame_vertices the volume and clearance now hold
        self.clearance = self._clearance_grid()

    def _clearance_grid(self) -> ClearanceGrid:
        extent = float((self.volume.upper - self.volume.lower).max())
        cells = CLEARANCE_CELLS_PER_AXIS if self.frame_vertices is None else DEFORMING_CLEARANCE_CELLS_PER_AXIS
        return ClearanceGrid(self.volume, extent / cells, max_cells_per_axis=cells)

    @property
    def deforming(self) -> bool:
        return self.frame_vertices is not None

    @property
    def frame_count(self) -> int:
        return max(len(self.transforms), 0 if self.frame_vertices is None else len(self.frame_vertices))

    def transform_at(self, frame: int) -> np.ndarray:
        return self.transforms[min(max(int(frame), 0), len(self.transforms) - 1)]

    def shape_at(self, frame: int) -> np.ndarray:
        """(V,3) the prop's own-frame vertices at `frame` (before its transform)."""
        if self.frame_vertices is None:
            return self.vertices
        return self.frame_vertices[min(max(int(frame), 0), len(self.frame_vertices) - 1)]

    def _follow_shape(self, frame: int) -> None:
        """Bring the hierarchy and the clearance grid to the shape of `frame` (deforming props).
        Detection runs many times per frame and frames advance in order, so this costs one
        refit and one grid per frame."""
        if self.frame_vertices is None:
            return
        index = min(max(int(frame), 0), len(self.frame_vertices) - 1)
        if index != self._shape_frame:
            self.volume.refit(self.frame_vertices[index])
            self.clearance = self._clearance_grid()
            self._shape_frame = index

    def posed(self, frame: int):
        """(vertices, faces) in the world at `frame`."""
        transform = self.transform_at(frame)
        return self.shape_at(frame) @ transform[:3, :3].T + transform[:3, 3], self.faces

    def detect(self, skin_positions: np.ndarray, pose: BonePose, collider_index: int,
               margin: float = 0.0) -> ContactPlanes:
        skin_positions = np.ascontiguousarray(skin_positions, dtype=np.float64)
        self._follow_shape(pose.frame)
        transform = self.transform_at(pose.frame)
        lower, upper = transformed_box(self.volume.lower, self.volume.upper, transform, pad=margin)
        nearby = candidates_in_box(skin_positions, lower, upper)
        if len(nearby) == 0:
            return ContactPlanes.empty()
        local = apply_transform(skin_positions[nearby], rigid_inverse(transform))
        maybe = self.clearance.uncleared(local, margin)
        nearby, local = nearby[maybe], local[maybe]
        found = closed_penetrations(self.volume, None, local, self.max_depth, margin=margin)
        return ContactPlanes(vertex=nearby[found.index], point=apply_transform(found.point, transform),
                             normal=rotate(found.normal, transform), depth=found.depth,
                             collider=np.full(len(found.index), collider_index, np.int64))


def load_mesh_collider(path, name: str | None = None, max_depth: float = math.inf) -> MeshCollider:
    """Read and validate MESH.npz (keys vertices (V,3) or (T,V,3), faces, transforms); the name
    defaults to the file stem."""
    path = Path(path)
    source = f"mesh collider file {path}"
    keys = ("vertices", "faces", "transforms")
    try:
        arrays = read_npz(path)
    except NpzReadError as error:
        _fail(source, str(error).removeprefix(f"{path}: "),
              "Save it with numpy.savez(path, vertices=..., faces=..., transforms=...), numbers only")
    missing = [key for key in keys if key not in arrays]
    if missing:
        _fail(source, f"missing arrays {missing} (found {sorted(arrays)})",
              "Save it with numpy.savez(path, vertices=..., faces=..., transforms=...)")
    return MeshCollider(name or path.stem, arrays["vertices"], arrays["faces"], arrays["transforms"],
                        max_depth=max_depth, source=source)
