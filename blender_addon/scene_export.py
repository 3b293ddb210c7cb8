"""Reading the scene into the solver's arrays: the face rig, maps, per-frame animation.

Only reads: the user's mesh, shape keys and vertex groups are never written. Positions are
in the rig frame: the skin's local coordinates × metres per unit (scene unit scale × the
object's uniform scale), so a result maps back onto the mesh by one division.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from . import head_motion, preflight
from .preflight import ERROR, Finding

SCALE_TOLERANCE = 1e-4


def metres_per_unit(context, obj) -> Tuple[float, List[Finding]]:
    scale = np.array(obj.matrix_world.to_scale(), dtype=np.float64)
    unit = context.scene.unit_settings.scale_length or 1.0
    findings = []
    if np.ptp(np.abs(scale)) > SCALE_TOLERANCE * np.abs(scale).max():
        findings.append(Finding(ERROR, f"'{obj.name}' has a non-uniform scale {tuple(round(v, 4) for v in scale)}; "
                                       f"apply the scale (Ctrl+A ▸ Scale) first"))
    return float(unit * np.abs(scale).mean()), findings


def _coordinates(points) -> np.ndarray:
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
        return _coordinates(mesh.shape_keys.reference_key.data)
    return _coordinates(mesh.vertices)


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
    rest = _coordinates(basis.data)
    blocks = [block for block in mesh.shape_keys.key_blocks if block != basis and not _is_bake_key(block.name)]
    deltas = np.stack([_coordinates(block.data) - rest for block in blocks]) if blocks else \
        np.zeros((0, len(rest), 3))
    names = [block.name for block in blocks]
    return names, [preflight.solver_shape_key_name(name, mapping) for name in names], deltas


def _is_bake_key(name: str) -> bool:
    from .bake import BAKE_KEY_PREFIX
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
    local = _coordinates(other.data.vertices)
    points = local @ to_skin[:3, :3].T + to_skin[:3, 3]
    return points * scale, mesh_faces(other.data)


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
    """MAPS.npz arrays from the painted vertex groups and paralysis checkboxes, or None."""
    settings = obj.face_physics
    maps = {}
    for key, group in (("fat", settings.fat_group), ("paralysis", settings.paralysis_group)):
        weights = vertex_group_weights(obj, group)
        if weights is not None:
            maps[key] = weights
    for key, group, (low, high) in (("stiffness", settings.stiffness_group, settings.stiffness_range),
                                    ("density", settings.density_group, settings.density_range)):
        weights = vertex_group_weights(obj, group)
        if weights is not None:
            maps[key] = low + weights * (high - low)
    paralysed = [muscle.name for muscle in settings.muscles if muscle.paralysed]
    if paralysed:
        maps["paralysed_muscles"] = np.array(paralysed, dtype=str)
    return maps or None


def frame_range(context, settings) -> Tuple[int, int]:
    if settings.use_scene_range:
        return context.scene.frame_start, context.scene.frame_end
    return settings.frame_start, settings.frame_end


def sample_animation(context, obj, first: int, last: int, metres: float) -> Dict[str, np.ndarray]:
    """ACTIVATIONS.npz arrays: the muscles' contraction properties and the head's motion per
    frame, evaluated by stepping the scene (so F-curves and drivers both count). The scene's
    current frame is restored afterwards."""
    scene = context.scene
    settings = obj.face_physics
    names = [muscle.name for muscle in settings.muscles]
    original_frame, original_subframe = scene.frame_current, scene.frame_subframe
    contraction, skin_worlds, head_worlds = [], [], []
    try:
        for frame in range(first, last + 1):
            scene.frame_set(frame)
            contraction.append([muscle.contraction for muscle in settings.muscles])
            skin_worlds.append(np.array(obj.matrix_world, dtype=np.float64))
            head = settings.head_object
            head_worlds.append(np.array(head.matrix_world, dtype=np.float64) if head else skin_worlds[-1])
    finally:
        scene.frame_set(original_frame, subframe=original_subframe)
    frames = last - first + 1
    fps = scene.render.fps / (scene.render.fps_base or 1.0)
    return {"muscle_contraction": np.array(contraction, dtype=np.float64).reshape(frames, len(names)),
            "muscle_names": np.array(names, dtype=str),
            "jaw": np.zeros((frames, 5)),
            "head_transforms": head_motion.head_transforms_in_rig_frame(skin_worlds, head_worlds, metres),
            "fps": np.float64(fps)}


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


def simulation_settings(obj) -> dict:
    settings = obj.face_physics
    return {"dynamic": settings.dynamics == 'DYNAMIC', "substeps": int(settings.substeps),
            "gravity": bool(settings.gravity), "wind": wind_velocity(obj), "fat_scale": float(settings.fat_scale),
            "diffusion_steps": int(settings.diffusion_steps),
            "diffusion_time_step_m2": float(settings.diffusion_time_step)}


def cache_preflight(obj) -> List[Finding]:
    """Modifiers ahead of the Face Physics cache that could change the vertex count."""
    from .bake import CACHE_MODIFIER_NAME
    before = []
    for modifier in obj.modifiers:
        if modifier.name == CACHE_MODIFIER_NAME:
            break
        before.append((modifier.name, modifier.type))
    else:
        before = []   # no cache yet: the bake puts it first
    return preflight.check_modifiers_before_cache(before)
