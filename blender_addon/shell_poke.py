"""The Poke tool: a sphere follows the mouse over the face and pushes it in (or, with Ctrl or the
left mouse button held, grabs and pulls it) while the shape-key animation plays, simulated live
by the interactive shell in a child process (shell_live.py; the add-on never imports the solver).

Its parts without the modal event loop are functions the tests call: `sphere_from_ray` (where
the sphere goes for a ray through the mouse, cast onto the skin's evaluated mesh), `PokeSession`
(the child, the sphere empty, the preview object, the frame message of the scene as it is now,
the preview updated from a reply) and `PokeSession.close` (process ended, sphere and preview
removed). The modal operator only routes events to them.

The simulated face is shown on a preview object beside the skin (`<skin> FP shell preview`,
made and placed as the fat preview is: fat_preview.py), so the skin itself — its mesh, keys and
groups — is never written; the sphere is a scene empty (`FP poke sphere`) on the skin, where
the mouse is.
"""
from __future__ import annotations

import time
from typing import Optional

import bpy
import numpy as np
from mathutils import Matrix, Vector

from . import fat_preview, job_files, preferences, scene_export, shell_live
from .child_objects import attach_child, find_child, remove_child
from .shell_live import LiveShell, LiveShellError
from .shell_operators import write_live_stiffness
from .workflow import skin_object

PREVIEW_TAG = "face_physics_shell_preview_of"
SPHERE_TAG = "face_physics_poke_sphere_of"
PREVIEW_SUFFIX = " FP shell preview"
SPHERE_NAME = "FP poke sphere"
LIVE_FPS = 30.0


def sphere_from_ray(obj, depsgraph, origin_world, direction_world, radius: float, depth: float):
    """The sphere's centre (object-local units) for a ray through the mouse: on the skin's
    evaluated mesh (shape keys and modifiers as shown) at the first hit, moved along the surface
    normal so it sinks `depth` into the face — centre = hit + n (radius − depth) — or None when
    the ray misses. The hit is on the rig's pose, not the simulated face, so a held mouse keeps
    one depth rather than following its own dent inwards."""
    inverse = obj.matrix_world.inverted()
    origin = inverse @ Vector(origin_world)
    direction = (inverse.to_3x3() @ Vector(direction_world)).normalized()
    hit, location, normal, _ = obj.evaluated_get(depsgraph).ray_cast(origin, direction)
    if not hit:
        return None
    normal = normal.normalized()
    if normal.dot(direction) > 0.0:      # the back of a face: its normal points away from the viewer
        normal = -normal
    return np.array(location + normal * (radius - depth), dtype=np.float64)


def shape_weights(obj, depsgraph, names) -> np.ndarray:
    """The value of each of the shell's shape keys (its order, solver spelling) as evaluated now;
    a shape the skin does not have (or muted) weighs 0."""
    mapping = scene_export.name_mapping(obj.face_physics)
    from .preflight import solver_shape_key_name
    values = {}
    if obj.data.shape_keys is not None:
        evaluated = obj.data.shape_keys.evaluated_get(depsgraph).key_blocks
        for block in scene_export.user_key_blocks(obj):
            values[solver_shape_key_name(block.name, mapping)] = 0.0 if block.mute else float(
                evaluated[block.name].value)
    return np.array([values.get(name, 0.0) for name in names], dtype=np.float64)


def collider_transform(skin, collider, metres: float, start_inverse: Matrix) -> np.ndarray:
    """A prop's rigid motion since the session started, in the skin's frame in metres (the prop
    is sent once, as it was then: `PokeSession.__init__`)."""
    relative = skin.matrix_world.inverted() @ collider.matrix_world @ start_inverse
    matrix = np.array(relative, dtype=np.float64)
    matrix[:3, 3] *= metres
    return matrix


class PokeSession:
    """One Poke run on a skin: the live child, the sphere, the preview."""

    def __init__(self, context, obj, shell_path, python=None, env=None):
        self.object_name = obj.name
        self.metres, _ = scene_export.metres_per_unit(context, obj)
        settings = obj.face_physics_shell
        self.radius = float(settings.poke_radius)          # object units
        self.depth = float(settings.poke_depth) * self.radius
        python = python or preferences.solver_python()
        if python is None:
            raise ValueError("no solver Python: see the Face Physics preferences")
        # The FP_shell_* groups as painted now (shell_operators.py); the file is read before HELLO.
        stiffness_path, self.stiffness_said = write_live_stiffness(obj, shell_path)
        self.live = LiveShell(python, shell_path, env=env if env is not None else
                              preferences.solver_child_environment(), stiffness_path=stiffness_path)
        self.centre: Optional[np.ndarray] = None          # object units; None while the mouse is off the face
        self.pulling = False
        self.frames = 0
        self.round_trips = []
        self.last_sent = None
        try:
            try:
                self.hello = self.live.wait_hello()
            finally:
                if stiffness_path is not None:
                    job_files.remove_job_folder(stiffness_path.parent)
            if self.hello.fine_vertices != len(obj.data.vertices):
                raise ValueError(f"the shell has {self.hello.fine_vertices} vertices but '{obj.name}' has "
                                 f"{len(obj.data.vertices)}; fit the stiffness again")
            self.colliders = self._send_colliders(context, obj)
        except BaseException:
            self.live.close()
            raise
        self.preview = _make_preview(obj)
        self.sphere = _make_sphere(obj, self.radius)

    def _send_colliders(self, context, obj):
        """Each prop of the Collisions panel's list, sent once as a mesh in the skin's frame."""
        depsgraph = context.evaluated_depsgraph_get()
        colliders = []
        for index, collider in enumerate(scene_export.collider_objects(obj)):
            vertices, triangles = scene_export._evaluated_triangle_mesh(collider, depsgraph)
            relative = obj.matrix_world.inverted() @ collider.matrix_world
            local = (np.c_[vertices, np.ones(len(vertices))] @ np.array(relative).T)[:, :3] * self.metres
            self.live.request(shell_live.pack_mesh(index, local, triangles), timeout=60.0)
            colliders.append((index, collider.name, collider.matrix_world.inverted() @ obj.matrix_world))
        return colliders

    @property
    def obj(self):
        return bpy.data.objects.get(self.object_name)

    def aim(self, centre_local: Optional[np.ndarray], pulling: bool) -> None:
        """Where the sphere is (object units, None: off the face) and whether it pulls."""
        self.centre, self.pulling = centre_local, bool(pulling)
        if centre_local is not None and self.sphere is not None:
            self.sphere.location = Vector(centre_local)
        if self.sphere is not None:
            self.sphere.hide_viewport = centre_local is None

    def frame_message(self, context, dt: float = 1.0 / LIVE_FPS) -> bytes:
        """The FRAME request of the scene now: shape weights, sphere, props."""
        obj = self.obj
        depsgraph = context.evaluated_depsgraph_get()
        weights = shape_weights(obj, depsgraph, self.hello.shape_names)
        if self.centre is None:
            tool, centre = shell_live.TOOL_OFF, np.zeros(3)
        else:
            tool = shell_live.TOOL_PULL if self.pulling else shell_live.TOOL_PUSH
            centre = self.centre * self.metres
        colliders = []
        for index, name, start_inverse in self.colliders:
            collider = bpy.data.objects.get(name)
            if collider is not None:
                colliders.append((shell_live.MESH_COLLIDER,
                                  (index, collider_transform(obj, collider, self.metres, start_inverse))))
        return shell_live.pack_frame(dt, weights, tool, centre, self.radius * self.metres, colliders)

    def show(self, reply) -> bool:
        """Put a POSITIONS reply on the preview; False for anything else."""
        if not isinstance(reply, shell_live.Positions) or self.preview is None:
            return False
        update_preview(self.preview, reply.positions_m, self.metres)
        self.frames += 1
        if self.last_sent is not None:
            self.round_trips.append(reply.received - self.last_sent)
        return True

    def tick(self, context) -> None:
        """One timer tick: show what arrived, send the next frame if the last one is answered."""
        self.show(self.live.latest())
        if not self.live.owed:
            message = self.frame_message(context)
            self.last_sent = time.perf_counter()
            self.live.send_frame_if_free(message)

    def step_blocking(self, context, dt: float = 1.0 / LIVE_FPS, timeout: float = 30.0):
        """One frame sent and its reply shown, waiting for it (tests; background mode)."""
        self.last_sent = time.perf_counter()
        reply = self.live.request(self.frame_message(context, dt), timeout=timeout)
        self.show(reply)
        return reply

    def close(self) -> None:
        """End the child and remove the sphere and the preview."""
        self.live.close()
        obj = self.obj
        if obj is not None:
            remove_child(obj, PREVIEW_TAG)
            _remove_sphere(obj)
        self.preview = self.sphere = None


def _make_preview(obj):
    """`<skin> FP shell preview`: the skin's faces, beside the skin as the fat preview sits."""
    remove_child(obj, PREVIEW_TAG)
    rest = scene_export.rest_coordinates(obj.data)
    mesh = bpy.data.meshes.new(obj.name + PREVIEW_SUFFIX)
    mesh.from_pydata(rest.tolist(), [], fat_preview._polygons(obj.data))
    mesh.update()
    preview = attach_child(obj, bpy.data.objects.new(obj.name + PREVIEW_SUFFIX, mesh), PREVIEW_TAG)
    width = float(np.ptp(rest[:, 0])) if len(rest) else 0.0
    preview.location = ((1.0 + fat_preview.SIDE_GAP) * width, 0.0, 0.0)
    return preview


def _remove_sphere(obj) -> None:
    sphere = find_child(obj, SPHERE_TAG)
    if sphere is not None:
        bpy.data.objects.remove(sphere)       # an empty: no data block to free


def _make_sphere(obj, radius: float):
    """A sphere empty of the poke radius, on the skin (object units)."""
    _remove_sphere(obj)
    sphere = bpy.data.objects.new(SPHERE_NAME, None)
    sphere.empty_display_type = 'SPHERE'
    sphere.empty_display_size = radius
    sphere = attach_child(obj, sphere, SPHERE_TAG)
    sphere.hide_viewport = True
    return sphere


def update_preview(preview, positions_m: np.ndarray, metres: float) -> None:
    """The preview's vertices from a reply's skin positions (metres, the rig's frame)."""
    mesh = preview.data
    if positions_m.shape != (len(mesh.vertices), 3):
        raise ValueError(f"the live shell sent {positions_m.shape[0]} positions for {len(mesh.vertices)} vertices")
    mesh.vertices.foreach_set("co", (np.asarray(positions_m, dtype=np.float32) / np.float32(metres)).ravel())
    mesh.update()


def find_preview(obj):
    return find_child(obj, PREVIEW_TAG)


_session: Optional[PokeSession] = None


def current_session() -> Optional[PokeSession]:
    return _session


def stop_session() -> None:
    """End a running Poke (the operator's end, another file opened, the add-on disabled)."""
    global _session
    if _session is not None:
        session, _session = _session, None
        session.close()


class FACE_PHYSICS_OT_poke(bpy.types.Operator):
    """Poke the face with a sphere while the animation plays, simulated live by the interactive
    shell: move over the face to push, hold Ctrl or the left mouse button to pull; Esc or right
    click ends"""
    bl_idname = "face_physics.shell_poke"
    bl_label = "Poke"
    bl_options = set()

    _timer = None

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        if obj is None or not obj.face_physics_shell.shell_path:
            cls.poll_message_set("Fit Stiffness first: Poke runs the fitted shell")
            return False
        if _session is not None:
            cls.poll_message_set("Poke is already running")
            return False
        if preferences.solver_python() is None:
            cls.poll_message_set("No solver Python: see the Face Physics preferences")
            return False
        return context.area is not None and context.area.type == 'VIEW_3D'

    def invoke(self, context, event):
        global _session
        obj = skin_object(context)
        try:
            _session = PokeSession(context, obj, bpy.path.abspath(obj.face_physics_shell.shell_path))
        except (ValueError, OSError, LiveShellError) as error:
            self.report({'ERROR'}, f"Poke: {error}")
            return {'CANCELLED'}
        self.report({'INFO'}, f"Poke: {_session.stiffness_said}")
        self._timer = context.window_manager.event_timer_add(1.0 / LIVE_FPS, window=context.window)
        context.window_manager.modal_handler_add(self)
        context.workspace.status_text_set("Poke: move over the face to push · Ctrl or left button held to pull · "
                                          "Esc or right click to end")
        return {'RUNNING_MODAL'}

    def modal(self, context, event):
        session = _session
        if session is None or session.obj is None:
            return self._end(context)
        if event.type in {'ESC', 'RIGHTMOUSE'} and event.value == 'PRESS':
            return self._end(context)
        if event.type == 'LEFTMOUSE':
            self._left_held = event.value == 'PRESS'
        if event.type in {'MOUSEMOVE', 'LEFTMOUSE', 'LEFT_CTRL', 'RIGHT_CTRL'}:
            self._aim(context, event)
            return {'RUNNING_MODAL'} if event.type == 'LEFTMOUSE' else {'PASS_THROUGH'}
        if event.type == 'TIMER':
            try:
                session.tick(context)
            except LiveShellError as error:
                self.report({'ERROR'}, f"Poke: {error}")
                return self._end(context)
            context.area.tag_redraw()
        return {'PASS_THROUGH'}

    _left_held = False

    def _aim(self, context, event) -> None:
        """The mouse's ray in the 3D View's main region — not context.region, which is the sidebar
        the Poke button was pressed in — cast onto the skin."""
        from bpy_extras import view3d_utils
        area = context.area
        region = next((region for region in area.regions if region.type == 'WINDOW'), None) if area else None
        view = area.spaces.active.region_3d if area is not None else None
        session = _session
        centre = None
        if region is not None and view is not None:
            mouse = (event.mouse_x - region.x, event.mouse_y - region.y)
            if 0 <= mouse[0] < region.width and 0 <= mouse[1] < region.height:
                origin = view3d_utils.region_2d_to_origin_3d(region, view, mouse)
                direction = view3d_utils.region_2d_to_vector_3d(region, view, mouse)
                centre = sphere_from_ray(session.obj, context.evaluated_depsgraph_get(), origin, direction,
                                         session.radius, session.depth)
        session.aim(centre, event.ctrl or self._left_held)

    def _end(self, context):
        if self._timer is not None:
            context.window_manager.event_timer_remove(self._timer)
            self._timer = None
        if context.workspace is not None:
            context.workspace.status_text_set(None)
        stop_session()
        return {'CANCELLED'}

    def cancel(self, context):
        self._end(context)


CLASSES = (FACE_PHYSICS_OT_poke,)
