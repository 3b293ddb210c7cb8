"""Reading the scene into the solver's arrays: the face rig, maps, per-frame animation.

Only reads: the user's mesh, shape keys and vertex groups are never written. Positions are
in the rig frame: the skin's local coordinates × metres per unit (scene unit scale × the
object's uniform scale), so a result maps back onto the mesh by one division.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import head_motion, preflight, solver_numbers
from .storage import BAKE_KEY_PREFIX, CACHE_MODIFIER_NAME, corrective_key_names
from .preflight import ERROR, Finding
from .stepwise import END_TICK, drain

SCALE_TOLERANCE = 1e-4


def metres_per_unit(context, obj) -> Tuple[float, List[Finding]]:
    scale = np.array(obj.matrix_world.to_scale(), dtype=np.float64)
    unit = context.scene.unit_settings.scale_length or 1.0
    findings = []
    if np.ptp(np.abs(scale)) > SCALE_TOLERANCE * np.abs(scale).max():
        findings.append(Finding(ERROR, f"'{obj.name}' has a non-uniform scale {tuple(round(v, 4) for v in scale)}; "
                                       f"apply the scale (Ctrl+A ▸ Scale) first"))
    return float(unit * np.abs(scale).mean()), findings


def coordinates(points) -> np.ndarray:
    values = np.empty(len(points) * 3, dtype=np.float32)
    points.foreach_get("co", values)
    return values.reshape(-1, 3).astype(np.float64)


def mesh_faces(mesh) -> np.ndarray:
    """(F, 3) or (F, 4) faces; triangles in a quad array padded with -1; n-gons as triangles."""
    sizes = np.empty(len(mesh.polygons), dtype=np.int32)
    mesh.polygons.foreach_get("loop_total", sizes)
    if len(sizes) and sizes.max() > 4:
        mesh.calc_loop_triangles()
        triangles = np.empty(len(mesh.loop_triangles) * 3, dtype=np.int32)
        mesh.loop_triangles.foreach_get("vertices", triangles)
        return triangles.reshape(-1, 3).astype(np.int64)
    loops = np.empty(len(mesh.loops), dtype=np.int32)
    mesh.loops.foreach_get("vertex_index", loops)
    starts = np.empty(len(mesh.polygons), dtype=np.int32)
    mesh.polygons.foreach_get("loop_start", starts)
    width = 4 if (sizes == 4).any() else 3
    faces = np.full((len(sizes), width), -1, dtype=np.int64)
    for corner in range(width):
        has = sizes > corner
        faces[has, corner] = loops[starts[has] + corner]
    return faces


def triangles_of(faces: np.ndarray) -> np.ndarray:
    if faces.shape[1] == 3:
        return faces
    quads = faces[:, 3] >= 0
    return np.concatenate([faces[:, :3], faces[quads][:, [0, 2, 3]]])


def rest_coordinates(mesh) -> np.ndarray:
    """Local rest positions: the basis shape key when there are shape keys, else the vertices."""
    if mesh.shape_keys is not None:
        return coordinates(mesh.shape_keys.reference_key.data)
    return coordinates(mesh.vertices)


def topology_signature(obj) -> str:
    return preflight.topology_signature(len(obj.data.vertices), mesh_faces(obj.data))


def name_mapping(settings) -> Dict[str, str]:
    return {item.name: item.arkit_name.strip() for item in settings.name_mappings if item.arkit_name.strip()}


def shape_keys(obj, mapping: Dict[str, str]) -> Tuple[List[str], List[str], np.ndarray]:
    """(original names, exported names, deltas (K, V, 3) in local units) relative to the basis."""
    mesh = obj.data
    if mesh.shape_keys is None:
        return [], [], np.zeros((0, len(mesh.vertices), 3))
    basis = mesh.shape_keys.reference_key
    rest = coordinates(basis.data)
    blocks = user_key_blocks(obj)
    deltas = np.stack([coordinates(block.data) - rest for block in blocks]) if blocks else \
        np.zeros((0, len(rest), 3))
    names = [block.name for block in blocks]
    return names, [preflight.solver_shape_key_name(name, mapping) for name in names], deltas


def _is_bake_key(name: str) -> bool:
    return name.startswith(BAKE_KEY_PREFIX)


def vertex_group_weights(obj, group_name: str) -> Optional[np.ndarray]:
    """(V,) weights of one vertex group in [0, 1] (0 where a vertex is not in it), or None."""
    group = obj.vertex_groups.get(group_name) if group_name else None
    if group is None:
        return None
    weights = np.zeros(len(obj.data.vertices))
    index = group.index
    for vertex in obj.data.vertices:
        for element in vertex.groups:
            if element.group == index:
                weights[vertex.index] = element.weight
                break
    return np.clip(weights, 0.0, 1.0)


def _mesh_in_rig_frame(skin, other, scale: float) -> Tuple[np.ndarray, np.ndarray]:
    to_skin = np.array(skin.matrix_world.inverted() @ other.matrix_world, dtype=np.float64)
    local = coordinates(other.data.vertices)
    points = local @ to_skin[:3, :3].T + to_skin[:3, 3]
    return points * scale, mesh_faces(other.data)


def _shape_key_layout_findings(obj) -> List[Finding]:
    """Shape keys whose effect in Blender differs from the exported difference to the basis."""
    key = obj.data.shape_keys
    if key is None:
        return []
    if not key.use_relative:
        return [Finding(ERROR, "the shape keys are absolute (Relative is off in the Shape Keys panel); Face "
                               "Physics needs relative shape keys")]
    relative_to_other = [block.name for block in user_key_blocks(obj) if block.relative_key != key.reference_key]
    masked = [block.name for block in user_key_blocks(obj) if block.vertex_group]
    findings = []
    if relative_to_other:
        findings.append(Finding(preflight.WARNING, f"shape keys {', '.join(relative_to_other[:6])} are relative to "
                                                   f"another key, not the basis; they are exported as their "
                                                   f"difference to the basis"))
    if masked:
        findings.append(Finding(preflight.WARNING, f"shape keys {', '.join(masked[:6])} are limited to a vertex "
                                                   f"group; they are exported without it"))
    return findings


def export_rig(context, obj) -> Tuple[Dict[str, np.ndarray], List[Finding]]:
    """The face-rig arrays (docs/face-rig-format.md) of a skin object, and pre-flight findings."""
    settings = obj.face_physics
    scale, findings = metres_per_unit(context, obj)
    mesh = obj.data
    vertices = rest_coordinates(mesh) * scale
    faces = mesh_faces(mesh)
    mapping = name_mapping(settings)
    original, exported, deltas = shape_keys(obj, mapping)
    findings += preflight.check_geometry(vertices, triangles_of(faces))
    findings += preflight.check_shape_key_names(original, mapping)
    findings += _shape_key_layout_findings(obj)
    repeated = sorted({name for name in exported if exported.count(name) > 1})
    if repeated:
        findings.append(Finding(ERROR, f"several shape keys export as {repeated[0]!r}; fix the name mapping"))
    arrays = {"vertices": vertices, "faces": faces, "shape_key_names": np.array(exported, dtype=str),
              "shape_key_deltas": deltas * scale}
    for prefix, other in (("upper_teeth", settings.teeth_object), ("lower_teeth", settings.lower_teeth_object),
                          ("skull", settings.skull_object), ("jaw", settings.jaw_object)):
        if other is not None:
            arrays[f"{prefix}_vertices"], arrays[f"{prefix}_faces"] = _mesh_in_rig_frame(obj, other, scale)
    names = [group.name for group in obj.vertex_groups]
    if names:
        arrays["vertex_group_names"] = np.array(names, dtype=str)
        arrays["vertex_group_weights"] = np.stack([vertex_group_weights(obj, name) for name in names])
    return arrays, findings


def export_maps(obj) -> Optional[Dict[str, np.ndarray]]:
    """MAPS.npz arrays from the painted vertex groups (raw weights, with the stiffness and density
    ranges) and paralysis checkboxes, or None."""
    settings = obj.face_physics
    maps = {}
    for key, group in (("fat", settings.fat_group), ("paralysis", settings.paralysis_group)):
        weights = vertex_group_weights(obj, group)
        if weights is not None:
            maps[key] = weights
    # Raw weights and the panel's multipliers at weight 0 and 1: the solver makes them material.
    for key, group, value_range in (("stiffness", settings.stiffness_group, settings.stiffness_range),
                                    ("density", settings.density_group, settings.density_range)):
        weights = vertex_group_weights(obj, group)
        if weights is not None:
            maps[key] = weights
            maps[f"{key}_range"] = np.array(tuple(value_range), dtype=np.float64)
    paralysed = [muscle.name for muscle in settings.muscles if muscle.paralysed]
    if paralysed:
        maps["paralysed_muscles"] = np.array(paralysed, dtype=str)
    return maps or None


UPPER_LIP_GROUP, LOWER_LIP_GROUP = "FP_lip_upper", "FP_lip_lower"
# A vertex is on a painted lip above this weight (the solver's lips.lip_vertices_from_groups).
LIP_WEIGHT_THRESHOLD = 0.5


def lip_vertex_arrays(obj) -> Tuple[Optional[Dict[str, np.ndarray]], List[Finding]]:
    """The painted lips for the solver (`upper`, `lower` skin-vertex indices, weight above 0.5)
    from the vertex groups FP_lip_upper and FP_lip_lower, or None when the skin has neither;
    findings when only one exists or one is empty."""
    groups = {name: vertex_group_weights(obj, name) for name in (UPPER_LIP_GROUP, LOWER_LIP_GROUP)}
    present = [name for name, weights in groups.items() if weights is not None]
    if not present:
        return None, []
    if len(present) == 1:
        missing = LOWER_LIP_GROUP if present[0] == UPPER_LIP_GROUP else UPPER_LIP_GROUP
        return None, [Finding(preflight.WARNING, f"'{obj.name}' has the vertex group {present[0]} but not {missing}; "
                                                 f"the lips are found automatically (paint both to choose them)")]
    arrays = {key: np.flatnonzero(groups[name] > LIP_WEIGHT_THRESHOLD).astype(np.int64)
              for key, name in (("upper", UPPER_LIP_GROUP), ("lower", LOWER_LIP_GROUP))}
    findings = [Finding(ERROR, f"the vertex group {name} has no vertex with a weight above {LIP_WEIGHT_THRESHOLD}; "
                               f"paint the lip into it, or delete the group to find the lips automatically")
                for key, name in (("upper", UPPER_LIP_GROUP), ("lower", LOWER_LIP_GROUP)) if not len(arrays[key])]
    both = np.intersect1d(arrays["upper"], arrays["lower"])
    if len(both):
        findings.append(Finding(ERROR, f"{len(both)} vertices are in both {UPPER_LIP_GROUP} and {LOWER_LIP_GROUP} "
                                       f"(weight above {LIP_WEIGHT_THRESHOLD}); a vertex belongs to one lip"))
    return arrays, findings


def frame_range(context, settings) -> Tuple[int, int]:
    if settings.use_scene_range:
        return context.scene.frame_start, context.scene.frame_end
    return settings.frame_start, settings.frame_end


def user_key_blocks(obj) -> list:
    """The user's own shape keys: every key block but the basis, our baked ones and our corrective keys."""
    key = obj.data.shape_keys
    if key is None:
        return []
    ours = set(corrective_key_names(key))
    return [block for block in key.key_blocks
            if block != key.reference_key and not _is_bake_key(block.name) and block.name not in ours]


def collider_objects(obj) -> list:
    """The collider objects of the panel's list, in order, without empty slots."""
    return [item.collider for item in obj.face_physics.colliders if item.collider is not None]


@dataclass
class FrameSamples:
    """What the scene holds on each frame of a bake range, read by stepping the scene (so
    keyframes and drivers both count)."""
    first: int
    muscle_activations: np.ndarray             # (T, m) the muscle sliders (0 = rest, 1 = full)
    key_values: Dict[str, np.ndarray]          # Blender shape-key name → (T,) evaluated value (0 when muted)
    skin_worlds: np.ndarray                    # (T, 4, 4)
    head_worlds: np.ndarray                    # (T, 4, 4)
    collider_worlds: List[np.ndarray]          # per collider (T, 4, 4)
    # Per collider: local vertices (T, V, 3) of its evaluated mesh on every frame, and the
    # triangles of the first frame. When the mesh changes its vertices or faces on some frame
    # (a Remesh modifier, a boolean), `collider_topology_changes` holds that frame and the
    # vertices stop at the frame before it; else None.
    collider_meshes: List[Tuple[np.ndarray, np.ndarray]]
    collider_topology_changes: List[Optional[int]]
    fps: float

    @property
    def frame_count(self) -> int:
        return len(self.skin_worlds)


def _evaluated_triangle_mesh(obj, depsgraph) -> Tuple[np.ndarray, np.ndarray]:
    """(local vertices, triangles) of an object's evaluated mesh (modifiers applied)."""
    evaluated = obj.evaluated_get(depsgraph)
    mesh = evaluated.to_mesh()
    try:
        mesh.calc_loop_triangles()
        triangles = np.empty(len(mesh.loop_triangles) * 3, dtype=np.int32)
        mesh.loop_triangles.foreach_get("vertices", triangles)
        return coordinates(mesh.vertices), triangles.reshape(-1, 3).astype(np.int64)
    finally:
        evaluated.to_mesh_clear()


def sample_frames(context, obj, first: int, last: int) -> FrameSamples:
    """Step the scene through [first, last] and read the animation; the scene's current frame
    is restored afterwards."""
    return drain(sample_frames_steps(context, obj, first, last))


def sample_frames_steps(context, obj, first: int, last: int):
    """`sample_frames` as steps (stepwise.py): one frame per step, so a modal bake spreads the
    sampling over timer ticks; the scene's frame comes back even when the steps are abandoned."""
    scene = context.scene
    settings = obj.face_physics
    blocks = user_key_blocks(obj)
    colliders = collider_objects(obj)
    original_frame, original_subframe = scene.frame_current, scene.frame_subframe
    activations, skin_worlds, head_worlds = [], [], []
    values = {block.name: [] for block in blocks}
    collider_worlds = [[] for _ in colliders]
    collider_shapes = [[] for _ in colliders]
    collider_triangles: List[Optional[np.ndarray]] = [None for _ in colliders]
    topology_changes: List[Optional[int]] = [None for _ in colliders]
    yield 0.0, f"sampling frames {first}–{last}", END_TICK
    try:
        for frame in range(first, last + 1):
            scene.frame_set(frame)
            depsgraph = context.evaluated_depsgraph_get()
            activations.append([muscle.activation for muscle in settings.muscles])
            skin_worlds.append(np.array(obj.matrix_world, dtype=np.float64))
            head = settings.head_object
            head_worlds.append(np.array(head.matrix_world, dtype=np.float64) if head else skin_worlds[-1])
            _append_key_values(obj, blocks, depsgraph, values)
            for index, collider in enumerate(colliders):
                collider_worlds[index].append(np.array(collider.matrix_world, dtype=np.float64))
                if topology_changes[index] is not None:
                    continue
                local, triangles = _evaluated_triangle_mesh(collider, depsgraph)
                if collider_triangles[index] is None:
                    collider_triangles[index] = triangles
                elif local.shape != collider_shapes[index][0].shape \
                        or not np.array_equal(triangles, collider_triangles[index]):
                    topology_changes[index] = frame
                    continue
                collider_shapes[index].append(local)
            yield (frame - first + 1) / (last - first + 1), f"sampling frame {frame} of {first}–{last}"
    finally:
        scene.frame_set(original_frame, subframe=original_subframe)
    frames = last - first + 1
    collider_meshes = [(np.array(shapes), triangles) for shapes, triangles in zip(collider_shapes, collider_triangles)]
    return FrameSamples(first=first,
                        muscle_activations=np.array(activations, dtype=np.float64).reshape(frames,
                                                                                           len(settings.muscles)),
                        key_values={name: np.array(series) for name, series in values.items()},
                        skin_worlds=np.array(skin_worlds), head_worlds=np.array(head_worlds),
                        collider_worlds=[np.array(worlds) for worlds in collider_worlds],
                        collider_meshes=collider_meshes, collider_topology_changes=topology_changes,
                        fps=scene.render.fps / (scene.render.fps_base or 1.0))


def _append_key_values(obj, blocks, depsgraph, values: Dict[str, list]) -> None:
    if blocks:
        # Read from the evaluated key: drivers are certain to have run there.
        evaluated = obj.data.shape_keys.evaluated_get(depsgraph).key_blocks
        for block in blocks:
            values[block.name].append(0.0 if block.mute else float(evaluated[block.name].value))


def sample_key_values(context, obj, first: int, last: int) -> Dict[str, np.ndarray]:
    """Blender shape-key name → (T,) value on each frame of [first, last] ({} without keys);
    the scene's current frame is restored afterwards."""
    return drain(sample_key_values_steps(context, obj, first, last))


def sample_key_values_steps(context, obj, first: int, last: int):
    """`sample_key_values` as steps, one frame each (stepwise.py)."""
    blocks = user_key_blocks(obj)
    if not blocks:
        return {}
    scene = context.scene
    values = {block.name: [] for block in blocks}
    original_frame, original_subframe = scene.frame_current, scene.frame_subframe
    try:
        for frame in range(first, last + 1):
            scene.frame_set(frame)
            _append_key_values(obj, blocks, context.evaluated_depsgraph_get(), values)
            yield (frame - first + 1) / (last - first + 1), f"reading the shape keys on frame {frame}"
    finally:
        scene.frame_set(original_frame, subframe=original_subframe)
    return {name: np.array(series) for name, series in values.items()}


def _head_transforms(samples: FrameSamples, metres: float) -> np.ndarray:
    return head_motion.head_transforms_in_rig_frame(samples.skin_worlds, samples.head_worlds, metres)


def activations_arrays(obj, samples: FrameSamples, metres: float, head: bool = True) -> Dict[str, np.ndarray]:
    """ACTIVATIONS.npz: every muscle's contraction per frame (from its slider), the jaw at rest,
    and (with `head`) the head's motion relative to the skin."""
    frames = samples.frame_count
    arrays = {"muscle_contraction": solver_numbers.contraction_from_activation(samples.muscle_activations),
              "muscle_names": np.array([muscle.name for muscle in obj.face_physics.muscles], dtype=str),
              "jaw": np.zeros((frames, 5)), "fps": np.float64(samples.fps)}
    if head:
        arrays["head_transforms"] = _head_transforms(samples, metres)
    return arrays


def muscles_move(samples: FrameSamples) -> bool:
    """Whether any muscle slider is off rest (0) on any frame."""
    return bool(np.any(samples.muscle_activations != 0.0))


def weights_arrays(obj, samples: FrameSamples, fit_names, metres: float) -> Tuple[Dict[str, np.ndarray],
                                                                                  List[Finding]]:
    """WEIGHTS.npz for the fit: the value of each fitted shape key per frame (exported names),
    and findings for keys that move but are not in the fit (they would be ignored)."""
    mapping = name_mapping(obj.face_physics)
    fitted = set(fit_names)
    names, columns, unfitted = [], [], []
    for block in user_key_blocks(obj):
        exported = preflight.solver_shape_key_name(block.name, mapping)
        series = samples.key_values[block.name]
        if exported in fitted and exported not in names:
            names.append(exported)
            columns.append(series)
        elif np.any(series != 0.0):
            unfitted.append(block.name)
    findings = []
    if unfitted:
        shown = ", ".join(unfitted[:6]) + (f" and {len(unfitted) - 6} more" if len(unfitted) > 6 else "")
        findings.append(Finding(preflight.WARNING, f"shape keys {shown} move in the baked range but are not in the "
                                                   f"fit, so the simulation ignores them; fit them (Fit panel)"))
    frames = samples.frame_count
    weights = np.column_stack(columns) if columns else np.zeros((frames, 0))
    return ({"names": np.array(names, dtype=str), "weights": weights.reshape(frames, len(names)),
             "fps": np.float64(samples.fps), "head_transforms": _head_transforms(samples, metres)}, findings)


RIGID_MOTION_TOLERANCE = 1e-4
# A collider whose evaluated local vertices move by more than this fraction of its size over
# the range deforms (bones, shape keys, modifiers); float32 noise stays far below it.
DEFORMATION_TOLERANCE = 1e-6


def collider_arrays(obj, samples: FrameSamples, metres: float) -> Tuple[List[Tuple[str, Dict[str, np.ndarray]]],
                                                                        List[Finding]]:
    """(name, MESH.npz arrays) per collider, in the skin's rig frame (metres), and findings.

    A collider that only moves rigidly relative to the skin is sent as its evaluated mesh at the
    first frame (`vertices` (V, 3)) plus that motion per frame (`transforms`). One whose mesh
    deforms (bones, shape keys, modifiers) or whose scale changes relative to the skin is sent as
    its shape on every frame (`vertices` (T, V, 3)) with identity transforms. A mesh whose
    vertices or faces change during the range cannot be followed: that is an error."""
    colliders = collider_objects(obj)
    result, findings = [], []
    for collider, (shapes, triangles), worlds, changed in zip(colliders, samples.collider_meshes,
                                                              samples.collider_worlds,
                                                              samples.collider_topology_changes):
        if changed is not None:
            findings.append(Finding(ERROR, f"collider '{collider.name}' has other vertices or faces on frame "
                                           f"{changed} than on frame {samples.first}; a collider must keep its mesh "
                                           f"over the baked range (apply or drop modifiers such as Remesh)"))
            continue
        relative = [np.linalg.inv(skin) @ world @ np.linalg.inv(worlds[0]) @ samples.skin_worlds[0]
                    for skin, world in zip(samples.skin_worlds, worlds)]
        stretch = max(float(np.abs(np.linalg.svd(motion[:3, :3], compute_uv=False) - 1.0).max()) for motion in relative)
        size = float(np.linalg.norm(np.ptp(shapes[0], axis=0))) or 1.0
        deformation = float(np.abs(shapes - shapes[0]).max()) / size
        if stretch > RIGID_MOTION_TOLERANCE or deformation > DEFORMATION_TOLERANCE:
            vertices = np.empty(shapes.shape)
            for frame, (skin, world) in enumerate(zip(samples.skin_worlds, worlds)):
                to_skin = np.linalg.inv(skin) @ world
                vertices[frame] = (shapes[frame] @ to_skin[:3, :3].T + to_skin[:3, 3]) * metres
            transforms = np.tile(np.eye(4), (len(shapes), 1, 1))
        else:
            to_skin = np.linalg.inv(samples.skin_worlds[0]) @ worlds[0]
            vertices = (shapes[0] @ to_skin[:3, :3].T + to_skin[:3, 3]) * metres
            transforms = head_motion.head_transforms_in_rig_frame(samples.skin_worlds, worlds, metres)
        result.append((collider.name, {"vertices": vertices, "faces": triangles, "transforms": transforms}))
    return result, findings


def collider_preflight(obj) -> List[Finding]:
    findings = []
    settings = obj.face_physics
    empty = sum(1 for item in settings.colliders if item.collider is None)
    if empty:
        findings.append(Finding(preflight.WARNING, f"{empty} collider slot{'s' * (empty != 1)} without an object "
                                                   f"skipped (Collisions panel)"))
    for collider in collider_objects(obj):
        if collider == obj:
            findings.append(Finding(ERROR, f"'{obj.name}' is its own collider; remove it from the collider list"))
        elif not len(collider.data.polygons):
            findings.append(Finding(ERROR, f"collider '{collider.name}' has no faces; give it a closed surface"))
    return findings


def wind_velocity(obj) -> Optional[List[float]]:
    """Wind in m/s in the rig's axes: from the wind force-field object if set, else the panel."""
    settings = obj.face_physics
    field_object = settings.wind_object
    if field_object is not None and field_object.field and field_object.field.type == 'WIND':
        direction = np.array(field_object.matrix_world.to_3x3().normalized().col[2], dtype=np.float64)
        speed = float(field_object.field.strength)
    else:
        direction = np.array(settings.wind_direction, dtype=np.float64)
        speed = float(settings.wind_speed)
    length = np.linalg.norm(direction)
    if speed <= 0.0 or length == 0.0:
        return None
    world = direction / length * speed
    return [float(v) for v in head_motion.world_vector_in_rig_frame(world, np.array(obj.matrix_world))]


def fat_settings(obj) -> dict:
    """The Fat panel's settings as the animate job takes them: growth, softening, diffusion."""
    settings = obj.face_physics
    return {"fat_scale": float(settings.fat_scale), "fat_softening": float(settings.fat_softening),
            "diffusion_spread_m": 1e-3 * float(settings.diffusion_spread_mm)}


def collision_kinds(obj) -> List[str]:
    """The Collisions panel's contacts as the solver names them (animate, correctives)."""
    settings = obj.face_physics
    return [kind for kind, wanted in (("teeth", settings.teeth_contact), ("lips", settings.lip_contact)) if wanted]


VOLUMETRIC_BLENDSHAPES = "volumetric-blendshapes"


def actuation(obj, with_fit: bool) -> str:
    """The animate job's actuation: the Bake panel's choice; volumetric blendshapes only play shape
    keys through a fit (`actuation_findings` says so before a bake starts)."""
    return VOLUMETRIC_BLENDSHAPES if with_fit and obj.face_physics.actuation == 'VOLUMETRIC_BLENDSHAPES' else "phace"


def actuation_findings(obj) -> List[Finding]:
    """What the volumetric-blendshape actuation cannot take, each with where to turn it off; []
    for Phace. (The muscle sliders are checked once the frames are sampled.) Contact it takes."""
    settings = obj.face_physics
    if settings.actuation != 'VOLUMETRIC_BLENDSHAPES':
        return []
    if settings.animation_source != 'SHAPE_KEYS' or not settings.fit_path:
        return [Finding(ERROR, "volumetric blendshapes play the shape keys through the fit: set Drive to "
                               "Shape keys and fit the keys (Fit panel), or choose the Phace actuation")]
    used = [what for what, on in (("Dynamic mode (Dynamics panel)", settings.dynamics == 'DYNAMIC'),
                                  ("Gravity (Dynamics panel)", settings.gravity),
                                  ("wind (Dynamics panel)", wind_velocity(obj) is not None),
                                  ("the painted maps (Maps panel)", export_maps(obj) is not None)) if on]
    if not used:
        return []
    return [Finding(ERROR, "volumetric blendshapes are quasi-static and take no dynamics, gravity, wind or "
                           f"maps: turn off {', '.join(used)}, or choose the Phace actuation")]


def simulation_settings(context, obj, with_fit: bool) -> dict:
    """The animate job's settings (docs/addon.md, job protocol)."""
    settings = obj.face_physics
    collisions = collision_kinds(obj)
    contact = {"collisions": collisions} if collisions else {}
    if "teeth" in collisions:
        # A padding is a physical thickness: scene units to metres, not the skin's own scale.
        contact["teeth_padding_m"] = float(settings.teeth_padding) * (context.scene.unit_settings.scale_length or 1.0)
    if actuation(obj, with_fit) == VOLUMETRIC_BLENDSHAPES:      # its contact has no solver choice
        return {"actuation": VOLUMETRIC_BLENDSHAPES, "detail": bool(settings.use_detail),
                "skin_filter": bool(settings.use_skin_filter), **contact}
    result = {"dynamic": settings.dynamics == 'DYNAMIC', "substeps": int(settings.substeps),
              "gravity": bool(settings.gravity), "wind": wind_velocity(obj), **fat_settings(obj),
              "collisions": collisions, **contact}
    if collisions or collider_objects(obj):
        result["contact_solver"] = settings.contact_solver.lower()
    if with_fit:
        result["detail"] = bool(settings.use_detail)
        result["skin_filter"] = bool(settings.use_skin_filter)
    return result


def cache_preflight(obj) -> List[Finding]:
    """Modifiers ahead of the Face Physics cache that could change the vertex count."""
    before = []
    for modifier in obj.modifiers:
        if modifier.name == CACHE_MODIFIER_NAME:
            break
        before.append((modifier.name, modifier.type))
    else:
        before = []   # no cache yet: the bake puts it first
    return preflight.check_modifiers_before_cache(before)
