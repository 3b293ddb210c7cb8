"""build_model: face rig → simulation-ready volumetric model (a dict of arrays, see model_file)."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Optional

import numpy as np

from .. import __version__
from ..geometry import vertex_normals
from ..model_file import FORMAT_VERSION
from ..rig import FaceRig, rig_triangles, triangulate, validate_rig
from .attachments import PIN, SLIDE, bone_surface_nodes, pin_where_no_tangent_plane, split_pin_slide
from .directions import contraction_frames
from .embedding import embed_points
from .errors import ModelBuildError
from .fractions import muscle_fractions
from .grading import DEFAULT_MOUTH_FINE_FACTOR, mouth_grading
from .jaw import build_jaw
from .landmarks import infer_landmarks
from .mouth_cut import UPPER, cut_along_slit, find_mouth_slit
from .muscles import MusclePlacer
from .tetmesh import boundary_faces, compact, dihedral_angle_range, mesh_implicit_volume, signed_volumes, tet_quality
from .tissue import BONE_NAMES, SkinField, build_bone_field, estimated_bone_surfaces, find_cavity_lining

DENSITY_KG_PER_M3 = 1000.0     # 1 g/cm³, soft tissue
# BCC lattice: 12 tets per cubic cell, so a volume V at spacing h holds about 12 V / h³ tets;
# the tets cut by the boundary add about 12 % more (measured on the ICT face and demo head).
TETS_PER_CELL = 12 * 1.12
# Tissue thinner than this fraction of the lattice spacing could fall between lattice
# samples and leave holes; estimated bones keep at least this much tissue under the skin.
MIN_TISSUE_DEPTH_FRACTION = 0.6
# Around each mouth corner, this many lattice spacings where lip vertices are embedded freely:
# the cut ends there. Half a spacing: on the ICT face (h = 9.6 mm, corners 44 mm apart) a whole
# spacing left the outer third of each lip glued to the other lip.
CORNER_REACH = 0.5
# TissueField.depth_along samples this many steps of all rays still inside per field call.
_DEPTH_SAMPLES_PER_PASS = 12


@dataclass
class BuildOptions:
    target_tets: int = 35000
    # Lattice spacing at the mouth as a fraction of the far-field spacing (1: uniform lattice).
    mouth_fine_factor: float = DEFAULT_MOUTH_FINE_FACTOR
    samples_per_tet: int = 48
    volume_samples: int = 150_000
    progress: Optional[Callable[[str], None]] = None
    timings: dict = field(default_factory=dict)


class _Stopwatch:
    def __init__(self, options):
        self.options = options
        self.start = time.perf_counter()
        self.last = self.start

    def lap(self, stage, message=""):
        now = time.perf_counter()
        self.options.timings[stage] = round(now - self.last, 3)
        self.last = now
        if self.options.progress:
            self.options.progress(f"{stage}: {message} ({now - self.start:.1f} s)")


class TissueSample(NamedTuple):
    value: np.ndarray          # max(skin, bone): negative in the tissue
    projection: np.ndarray     # onto the surface (skin or bone) that decides the value
    skin_value: np.ndarray
    bone_value: np.ndarray
    bone_label: np.ndarray     # SKULL or JAW of the nearest bone piece


class TissueField:
    """max(skin, bone): negative in the tissue; the mesher calls it in head-frame coordinates."""

    def __init__(self, skin, bones, frame):
        self.skin, self.bones, self.frame = skin, bones, frame

    def world(self, points) -> TissueSample:
        skin_value, hit = self.skin.evaluate(points)
        bone_value, bone_label, bone_projection = self.bones.evaluate(points)
        bone_decides = bone_value > skin_value
        return TissueSample(value=np.where(bone_decides, bone_value, skin_value),
                            projection=np.where(bone_decides[:, None], bone_projection, hit.closest),
                            skin_value=skin_value, bone_value=bone_value, bone_label=bone_label)

    def negative(self, points):
        """(p,) bool: world(points).value < 0, for less work: bones are evaluated only inside the skin.

        With the skin value s < 0, max(s, bone) < 0 exactly when not bone >= 0 (as in `world`,
        whose comparison bone > s keeps s for a NaN bone).
        """
        negative = self.skin.negative(points)
        inside_skin = np.flatnonzero(negative)
        if len(inside_skin):
            negative[inside_skin] = ~(self.bones.evaluate(points[inside_skin])[0] >= 0)
        return negative

    def contains(self, local_points):
        """(p,) bool: the head-frame points where the field is negative (`negative`)."""
        return self.negative(self.frame.world(local_points))

    def __call__(self, local_points):
        sample = self.world(self.frame.world(local_points))
        return sample.value, self.frame.local(sample.projection)

    def depth_along(self, starts, directions, step, max_depth):
        """Distance from each start along its direction until leaving the tissue.

        Sampled every `step`, then the crossing is placed by linear interpolation of the
        field between the last sample inside and the first outside, so the depth does not
        jump by a whole step between two nearly identical starts (mirror-image knots).
        """
        distances = np.arange(1, int(max_depth / step) + 1) * step
        points = starts[:, None, :] + directions[:, None, :] * distances[None, :, None]
        # A few samples at a time, and only along the rays still in the tissue: beyond the
        # first sample outside nothing is used (those values stay NaN, never > 0).
        value = np.full((len(starts), len(distances)), np.nan)
        left = np.zeros(len(starts), dtype=bool)
        for first in range(0, len(distances), _DEPTH_SAMPLES_PER_PASS):
            rows = np.flatnonzero(~left)
            if not len(rows):
                break
            last = min(first + _DEPTH_SAMPLES_PER_PASS, len(distances))
            chunk = self.world(points[rows, first:last].reshape(-1, 3)).value.reshape(len(rows), -1)
            value[rows, first:last] = chunk
            left[rows] = (chunk > 0).any(axis=1)
        outside = value > 0
        rows = np.arange(len(starts))
        first_out = np.where(outside.any(1), outside.argmax(1), len(distances) - 1)
        before = np.maximum(first_out - 1, 0)
        inside_value, outside_value = value[rows, before], value[rows, first_out]
        span = outside_value - inside_value
        fraction = np.where((first_out > 0) & (span > 0), -inside_value / np.where(span > 0, span, 1.0), 1.0)
        return distances[before] + np.clip(fraction, 0.0, 1.0) * step * (first_out > 0)


def _local_box(frame, skin_vertices, margin, spacing=None, grading=None):
    """Head-frame box around the skin, symmetric about the midplane; with a grading, the
    lattice-space box whose warped image covers it.

    With a spacing, the box is widened to a whole number of cells each side of the
    midplane, so the lattice is its own mirror image and left/right muscles are
    discretised alike.
    """
    local = frame.local(skin_vertices)
    low, high = local.min(0) - margin, local.max(0) + margin
    if grading is not None:
        low, high = grading.covering_box(low, high)
    half_width = max(abs(low[0]), abs(high[0]))
    if spacing is not None:
        half_width = np.ceil(half_width / spacing) * spacing
    low[0], high[0] = -half_width, half_width
    return low, high


def estimate_volume(field, low, high, samples, seed=11, warp=None):
    """Volume of {field < 0} (a TissueField, through `contains`) inside the box [low, high] by stratified Monte Carlo, and its standard error.

    With a `warp` (lattice space → head frame) the box is in lattice space and the volume is
    the lattice-space volume of the warped-back region, which is what sets the tet count.

    One random point per cell of a regular grid: only cells cut by the boundary
    contribute variance, so the error falls much faster than with independent samples;
    the returned error is the independent-sample bound, an overestimate.
    """
    rng = np.random.default_rng(seed)
    extent = high - low
    cell = (np.prod(extent) / samples) ** (1.0 / 3.0)
    counts = np.maximum(np.round(extent / cell).astype(int), 1)
    index = np.stack(np.meshgrid(*[np.arange(n) for n in counts], indexing="ij"), -1).reshape(-1, 3)
    points = low + (index + rng.random(index.shape)) * (extent / counts)
    inside = field.contains(points if warp is None else warp(points))
    box = float(np.prod(extent))
    p = inside.mean()
    return box * p, box * np.sqrt(p * (1 - p) / len(points))


def _spacing_for(volume, target_tets):
    return (TETS_PER_CELL * volume / max(target_tets, 100)) ** (1.0 / 3.0)


@dataclass
class PreparedTissue:
    """Everything the tet mesher needs, and what later stages reuse."""
    landmarks: object
    jaw: object
    skin: SkinField
    cavity: np.ndarray            # (V,) skin vertices lining a cavity
    field: TissueField
    bone_info: dict
    volume: float                 # Monte-Carlo volume of the tissue, m³
    volume_error: float
    spacing: float                # far-field lattice spacing for the target tet count, m
    low: np.ndarray               # lattice-space box to mesh, mirror-symmetric, whole cells
    high: np.ndarray
    grading: object = None        # grading.RadialGrading, or None for a uniform lattice
    mouth_spacing: float = 0.0    # local lattice spacing between the lips, m


def prepare_tissue(rig: FaceRig, options: BuildOptions, triangles=None) -> PreparedTissue:
    """Landmarks, jaw and the implicit tissue (skin minus bones), with the lattice spacing.

    Bones are built twice: first without a minimum tissue depth, to estimate the volume and
    from it the spacing h; then keeping at least MIN_TISSUE_DEPTH_FRACTION × h of tissue
    under the skin, which is the field that gets meshed.
    """
    triangles = rig_triangles(rig) if triangles is None else triangles
    landmarks = infer_landmarks(rig)
    frame = landmarks.frame
    jaw = build_jaw(rig, landmarks)
    skin = SkinField(rig.vertices, triangles)
    cavity = find_cavity_lining(skin, landmarks.scale)
    margin = 0.01 * landmarks.scale
    low, high = _local_box(frame, rig.vertices, margin)
    coarse_samples = max(options.volume_samples // 5, 20_000)
    surfaces = estimated_bone_surfaces(rig, skin, landmarks, cavity)       # both bone builds share these
    bones, _ = build_bone_field(rig, skin, landmarks, jaw, cavity, min_tissue_depth=0.0, surfaces=surfaces)
    volume, _ = estimate_volume(TissueField(skin, bones, frame), low, high, coarse_samples)
    if volume <= 0:
        raise ModelBuildError("the skin encloses no tissue: is the skin inside out or are the bones larger "
                              "than the head? Check face orientation (normals must point out of the head).")
    grading = mouth_grading(frame, landmarks, options.mouth_fine_factor)
    warp = None if grading is None else grading.map
    lattice_low, lattice_high = _local_box(frame, rig.vertices, margin, grading=grading)
    spacing = _spacing_for(volume if grading is None else
                           estimate_volume(TissueField(skin, bones, frame), lattice_low, lattice_high,
                                           coarse_samples, warp=warp)[0], options.target_tets)
    bones, bone_info = build_bone_field(rig, skin, landmarks, jaw, cavity,
                                        min_tissue_depth=MIN_TISSUE_DEPTH_FRACTION * spacing, surfaces=surfaces)
    if surfaces is not None:
        surfaces.forget()
    field = TissueField(skin, bones, frame)
    volume, volume_error = estimate_volume(field, low, high, options.volume_samples)
    lattice_volume = volume if grading is None else estimate_volume(field, lattice_low, lattice_high,
                                                                    options.volume_samples, warp=warp)[0]
    spacing = _spacing_for(lattice_volume, options.target_tets)
    low, high = _local_box(frame, rig.vertices, margin, spacing, grading)
    mouth = frame.local(np.array([(landmarks["upper_lip"] + landmarks["lower_lip"]) / 2]))
    mouth_spacing = spacing * (1.0 if grading is None else float(grading.world_spacing_factor(mouth)[0]))
    return PreparedTissue(landmarks=landmarks, jaw=jaw, skin=skin, cavity=cavity, field=field,
                          bone_info=bone_info, volume=volume, volume_error=volume_error,
                          spacing=spacing, low=low, high=high, grading=grading, mouth_spacing=mouth_spacing)


def build_model(rig: FaceRig, options: BuildOptions | None = None) -> dict:
    options = options or BuildOptions()
    clock = _Stopwatch(options)
    validate_rig(rig)
    triangles = rig_triangles(rig)
    prepared = prepare_tissue(rig, options, triangles)
    landmarks, jaw, skin, cavity, tissue = (prepared.landmarks, prepared.jaw, prepared.skin,
                                            prepared.cavity, prepared.field)
    frame = landmarks.frame
    spacing, volume, volume_error, bone_info = (prepared.spacing, prepared.volume, prepared.volume_error,
                                                prepared.bone_info)
    clock.lap("tissue", f"{len(landmarks.position)} landmarks, jaw hinge by {jaw.method}; "
                        f"{volume * 1e6:.0f} cm³ of tissue, lattice spacing {spacing * 1e3:.1f} mm")

    mesh = mesh_implicit_volume(tissue, prepared.low, prepared.high, spacing, progress=options.progress,
                                grading=prepared.grading)
    nodes = frame.world(mesh.nodes)
    tets = mesh.tets            # the head frame is a rotation, so orientation is kept
    # The cut works at the lattice's own scale between the lips.
    mouth_spacing = prepared.mouth_spacing
    slit = find_mouth_slit(rig.vertices, triangles, landmarks, max_gap=mouth_spacing)
    tet_side, vertex_side, cut_report = None, None, None
    if slit is not None:
        nodes, tets, tet_side, _, cut_report = cut_along_slit(nodes, tets, slit, mouth_spacing)
        vertex_side = _skin_vertex_sides(rig.vertices, slit, landmarks, mouth_spacing)
    volumes = signed_volumes(nodes, tets)
    if (volumes <= 0).any():
        raise ModelBuildError(f"{int((volumes <= 0).sum())} tets ended up inverted; please report this rig.")
    clock.lap("tet mesh", f"{len(tets)} tets, {len(nodes)} nodes" + (
        f"; mouth cut along {cut_report.cut_faces} faces" if cut_report else "; no mouth slit to cut"))

    faces, face_is_bone, face_bone_label = _classify_boundary(tissue, nodes, tets)
    attached, bone_normal = bone_surface_nodes(nodes, faces, face_is_bone)
    node_bone = tissue.world(nodes[attached]).bone_label
    kind = pin_where_no_tangent_plane(split_pin_slide(nodes[attached], node_bone, landmarks, jaw.condyles), bone_normal)
    clock.lap("attachments", f"{int((kind == PIN).sum())} pinned, {int((kind == SLIDE).sum())} sliding nodes")

    muscles = _place_muscles(rig, triangles, prepared)
    fraction, mean_param = muscle_fractions(nodes, tets, muscles, options.samples_per_tet)
    passive = np.clip(1.0 - fraction.sum(1), 0.0, 1.0)
    clock.lap("muscles", f"{len(muscles)} muscles, {int((fraction.sum(1) > 0).sum())} tets with muscle")

    directions, direction_report = contraction_frames(nodes, tets, fraction, mean_param, muscles,
                                                      skin.outward_normal_at)
    clock.lap("directions", "Laplace contraction directions")

    embed_tet, embed_weights, outside = embed_points(nodes, tets, rig.vertices, vertex_side, tet_side)
    mass = np.zeros(len(nodes))
    for k in range(4):
        np.add.at(mass, tets[:, k], DENSITY_KG_PER_M3 * volumes / 4)
    clock.lap("embedding", f"skin embedded; {int((outside > 0.002).sum())} of {len(outside)} vertices more than "
                           f"2 mm outside the tets (farthest {outside.max() * 1e3:.1f} mm)")

    bone_vertices, bone_triangles, bone_tri_label = _bone_surface(nodes, faces[face_is_bone], face_bone_label[face_is_bone])
    quality = tet_quality(nodes, tets)
    min_dihedral, max_dihedral = dihedral_angle_range(nodes, tets)
    muscle_volume = fraction.T @ volumes
    info = {
        "solver_version": __version__,
        "target_tets": options.target_tets,
        "lattice_spacing_m": spacing,
        "mouth_lattice_spacing_m": mouth_spacing,
        "lattice_grading": None if prepared.grading is None else prepared.grading.describe(),
        "tet_count": int(len(tets)), "node_count": int(len(nodes)),
        "tissue_volume_estimate_m3": volume, "tissue_volume_estimate_stderr_m3": volume_error,
        "tet_volume_m3": float(volumes.sum()),
        "quality": {"min": float(quality.min()), "mean": float(quality.mean()),
                    "min_dihedral_deg": float(min_dihedral.min()), "max_dihedral_deg": float(max_dihedral.max()),
                    "repaired_tets": mesh.repaired, "dropped_pieces": mesh.dropped_pieces},
        "bones": bone_info.get("bones"),
        "cavity_lining_vertices": int(cavity.sum()),
        "jaw": {"method": jaw.method, "open_angle_deg": jaw.open_angle_deg,
                "axis_fit_deviation_deg": jaw.axis_fit_deviation_deg},
        "landmark_sources": landmarks.source,
        "face_scale": landmarks.scale,
        "muscle_volume_m3": {m.name: float(v) for m, v in zip(muscles, muscle_volume)},
        "muscle_direction_method": direction_report,
        "mouth_cut": cut_report.as_dict() if cut_report else None,
        "embedding_max_outside_m": float(outside.max()),
        "embedding_vertices_outside": {"over_1mm": int((outside > 0.001).sum()), "over_2mm": int((outside > 0.002).sum()),
                                       "total": int(len(outside))},
        "timings_s": options.timings,
    }
    model = {
        "format_version": np.array(FORMAT_VERSION),
        "rest_positions": nodes, "tets": tets.astype(np.int64), "tet_rest_volume": volumes, "node_mass": mass,
        "muscle_names": np.array([m.name for m in muscles]),
        "muscle_fraction": fraction.astype(np.float32), "passive_fraction": passive.astype(np.float32),
        "muscle_direction": directions,
        "bone_names": np.array(BONE_NAMES),
        "pin_nodes": attached[kind == PIN], "pin_bone": node_bone[kind == PIN].astype(np.int64),
        "slide_nodes": attached[kind == SLIDE], "slide_bone": node_bone[kind == SLIDE].astype(np.int64),
        "slide_normals": bone_normal[kind == SLIDE],
        "condyles": jaw.condyles, "jaw_frame": jaw.frame,
        "head_frame": frame.axes, "head_origin": frame.origin,
        "skin_vertices": rig.vertices.copy(), "skin_triangles": triangles,
        "skin_faces": np.asarray(rig.faces, dtype=np.int64),
        "skin_embedding_tet": embed_tet.astype(np.int64), "skin_embedding_weights": embed_weights,
        "bone_surface_vertices": bone_vertices, "bone_surface_triangles": bone_triangles,
        "bone_surface_label": bone_tri_label.astype(np.int8),
        "landmark_names": np.array(sorted(landmarks.position)),
        "landmark_positions": np.array([landmarks.position[n] for n in sorted(landmarks.position)]),
    }
    for prefix in ("upper_teeth", "lower_teeth"):
        verts = getattr(rig, f"{prefix}_vertices")
        if verts is not None:
            model[f"{prefix}_vertices"] = verts
            model[f"{prefix}_triangles"] = triangulate(getattr(rig, f"{prefix}_faces"), verts)
    clock.lap("assemble", "done")
    info["timings_s"] = dict(options.timings)
    model["build_info"] = np.array(json.dumps(info))
    return model


def _classify_boundary(tissue, nodes, tets):
    """Boundary faces of the tet mesh, whether each lies on bone (else skin), and its bone label."""
    faces, _ = boundary_faces(tets)
    sample = tissue.world(nodes[faces].mean(1))
    return faces, np.abs(sample.bone_value) < np.abs(sample.skin_value), sample.bone_label


def _place_muscles(rig, triangles, prepared):
    """The atlas placed on this face, left and right, sorted by name."""
    landmarks, jaw, tissue = prepared.landmarks, prepared.jaw, prepared.field
    anchors = dict(landmarks.position)
    anchors["mouth"] = (landmarks["upper_lip"] + landmarks["lower_lip"]) / 2
    anchors["condyle_L"], anchors["condyle_R"] = jaw.condyles
    step, reach = 0.0005 * landmarks.scale, 0.045 * landmarks.scale
    placer = MusclePlacer(rig.vertices, triangles, vertex_normals(rig.vertices, triangles), ~prepared.cavity,
                          landmarks, anchors, lambda starts, directions: tissue.depth_along(starts, directions,
                                                                                            step, reach))
    return sorted(placer.place("L") + placer.place("R"), key=lambda muscle: muscle.name)


def _skin_vertex_sides(vertices, slit, landmarks, spacing):
    """UPPER/LOWER for the skin vertices on or near the slit's walls (the lip of the nearest
    wall, within half a lattice spacing), 0 elsewhere.

    Farther away the tet containing a vertex is on its lip anyway. Within CORNER_REACH lattice
    spacings of a mouth corner the lips meet and their tissue is still one piece, so the
    vertices there take the tet that contains them, whichever lip it is counted to."""
    side, _ = slit.side_of(vertices, 0.5 * spacing)
    for wall_side in (UPPER, -UPPER):
        side[np.unique(slit.triangles[slit.side == wall_side])] = wall_side
    for corner in ("mouth_corner_L", "mouth_corner_R"):
        side[np.linalg.norm(vertices - landmarks.position[corner], axis=1) < CORNER_REACH * spacing] = 0
    return side


def _bone_surface(nodes, faces, labels):
    vertices, triangles, _ = compact(nodes, faces)
    return vertices, triangles, labels
