"""The live shell session: `python -m solver shell-live SHELL.npz [--stiffness STIFFNESS.npz]`, the
Poke tool's engine.

The add-on cannot import the solver (numba, scipy), so the interactive shell runs in this child
process and the two talk over its stdin and stdout in length-prefixed little-endian binary
messages (docs/addon.md, "Live shell protocol"). Every message is

    u32 body length (bytes), then the body: u8 message type, its payload

and every request gets exactly one reply, so the add-on always knows which answer it reads.

Requests (add-on → solver):
  1 FRAME  f64 dt, u32 K, K × f64 shape weights (the order of HELLO's names), u8 tool
           (0 off, 1 push, 2 pull), 4 × f64 sphere centre xyz and radius (metres, the rig's
           frame), u32 C, C colliders: u8 kind + payload — 0 sphere (4 f64: centre, radius),
           1 capsule (7 f64: start, end, radius), 2 box (15 f64: centre, axes row-major, half
           sizes), 3 mesh (u32 id from a MESH request, 16 f64 transform row-major)
           → POSITIONS
  2 RESET  u32 K, K × f64 weights: rest at the rig pose of the weights, grab released → POSITIONS
  3 MESH   u32 id, u32 V, u32 T, V×3 f64 vertices (m, the prop's own frame), T×3 u32 triangles:
           a closed prop for FRAME's kind 3 (its distance grid is made once, here) → OK
Replies (solver → add-on):
  128 HELLO      (sent once at start, unasked) u32 fine vertices V, u32 coarse vertices n,
                 f64 face height (m), u32 K, K × (u16 length, UTF-8 shape name)
  129 POSITIONS  u32 V, f64 simulate s, f64 warp s, f64 contact force (N), u32 sub-steps,
                 u32 grabbed vertices, V×3 f32 fine skin positions (m, the rig's frame)
  130 ERROR      UTF-8 message: the request was refused and changed nothing; the session goes on
  131 OK         u32 id

A body longer than MAX_BODY_BYTES cannot be skipped safely: ERROR, then exit status 2. The
session ends (status 0) when stdin closes. Push is a sphere collider appended after the scene's
colliders; pull grabs the coarse vertices the sphere touches when the tool turns to 2 and moves
them with it (ShellSimulator.grab / move_grab) until the tool changes.
"""
from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np

FRAME, RESET, MESH = 1, 2, 3
HELLO, POSITIONS, ERROR, OK = 128, 129, 130, 131
TOOL_OFF, TOOL_PUSH, TOOL_PULL = 0, 1, 2
# Collider kind → number of f64 in its payload (mesh: after its u32 id).
COLLIDER_FLOATS = {0: 4, 1: 7, 2: 15, 3: 16}
MAX_BODY_BYTES = 256 * 1024 * 1024
MAX_DT_S = 1.0


class ProtocolError(ValueError):
    """A request that cannot be understood; the session replies ERROR with this message."""


class _Reader:
    """Reads a request body's fields in order, checking that each is there and finite."""

    def __init__(self, body: bytes, name: str):
        self.body, self.at, self.name = body, 0, name

    def take(self, fmt: str, count: int = 1):
        size = np.dtype("<" + fmt).itemsize * count
        if self.at + size > len(self.body):
            raise ProtocolError(f"{self.name}: the message ends after {len(self.body)} bytes, "
                                f"{self.at + size} needed")
        values = np.frombuffer(self.body, dtype="<" + fmt, count=count, offset=self.at)
        self.at += size
        return values

    def u32(self) -> int:
        return int(self.take("u4")[0])

    def u8(self) -> int:
        return int(self.take("u1")[0])

    def floats(self, count: int, what: str) -> np.ndarray:
        values = self.take("f8", count).astype(np.float64)
        if not np.all(np.isfinite(values)):
            raise ProtocolError(f"{self.name}: {what} holds a NaN or infinite number")
        return values

    def end(self) -> None:
        if self.at != len(self.body):
            raise ProtocolError(f"{self.name}: {len(self.body) - self.at} bytes left over after the message "
                                f"({self.at} expected)")


def _message(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack("<IB", 1 + len(payload), kind) + payload


def hello_message(sim) -> bytes:
    names = b"".join(struct.pack("<H", len(encoded)) + encoded
                     for encoded in (name.encode("utf-8") for name in sim.model.shape_names))
    return _message(HELLO, struct.pack("<IIdI", len(sim.fine_rest_m), sim.vertex_count, sim.face_height_m,
                                       sim.shape_count) + names)


def positions_message(sim) -> bytes:
    fine = sim.fine_positions_m()
    timings = sim.timings
    header = struct.pack("<IdddII", len(fine), timings["coarse_rig"] + timings["simulate"], timings["warp_detail"],
                         sim.contact_force_n, sim.substeps_taken, len(sim.grabbed_vertices))
    return _message(POSITIONS, header + np.ascontiguousarray(fine, dtype="<f4").tobytes())


def error_message(text: str) -> bytes:
    return _message(ERROR, text.encode("utf-8"))


class LiveSession:
    """The simulator and what the session remembers between requests: the props sent with MESH
    and whether the sphere holds a grab."""

    def __init__(self, sim):
        self.sim = sim
        self.meshes: dict = {}
        self.pulling = False

    def handle(self, body: bytes) -> bytes:
        """One request body → its reply (ERROR for a bad request, which changes nothing)."""
        try:
            if not body:
                raise ProtocolError("an empty message (no type byte)")
            kind = body[0]
            if kind == FRAME:
                return self._frame(_Reader(body[1:], "FRAME"))
            if kind == RESET:
                return self._reset(_Reader(body[1:], "RESET"))
            if kind == MESH:
                return self._mesh(_Reader(body[1:], "MESH"))
            raise ProtocolError(f"unknown message type {kind} (expected 1 FRAME, 2 RESET or 3 MESH)")
        except ProtocolError as error:
            return error_message(str(error))
        except ValueError as error:          # the simulator's or a collider's own checks
            return error_message(str(error))

    def _weights(self, reader: _Reader) -> np.ndarray:
        count = reader.u32()
        if count != self.sim.shape_count:
            raise ProtocolError(f"{reader.name}: {count} shape weights, but the shell has {self.sim.shape_count} "
                                f"shape keys (in HELLO's order)")
        return reader.floats(count, "the shape weights")

    def _frame(self, reader: _Reader) -> bytes:
        from .colliders import BoxCollider, CapsuleCollider, SphereCollider
        dt = float(reader.floats(1, "dt")[0])
        if not 0.0 <= dt <= MAX_DT_S:
            raise ProtocolError(f"FRAME: dt {dt} s is outside [0, {MAX_DT_S}] s")
        weights = self._weights(reader)
        tool = reader.u8()
        if tool not in (TOOL_OFF, TOOL_PUSH, TOOL_PULL):
            raise ProtocolError(f"FRAME: tool {tool} is not 0 (off), 1 (push) or 2 (pull)")
        sphere = reader.floats(4, "the sphere")
        if tool != TOOL_OFF and not sphere[3] > 0.0:
            raise ProtocolError(f"FRAME: the sphere's radius {sphere[3]} m must be positive")
        colliders, placed = [], []
        for index in range(reader.u32()):
            kind = reader.u8()
            if kind not in COLLIDER_FLOATS:
                raise ProtocolError(f"FRAME: collider {index} has kind {kind} (0 sphere, 1 capsule, 2 box, 3 mesh)")
            mesh_id = reader.u32() if kind == 3 else None
            values = reader.floats(COLLIDER_FLOATS[kind], f"collider {index}")
            if kind == 0:
                colliders.append(SphereCollider(values[:3], values[3]))
            elif kind == 1:
                colliders.append(CapsuleCollider(values[:3], values[3:6], values[6]))
            elif kind == 2:
                colliders.append(BoxCollider(values[:3], values[3:12].reshape(3, 3), values[12:15]))
            else:
                if mesh_id not in self.meshes:
                    raise ProtocolError(f"FRAME: collider {index} names mesh {mesh_id}, which no MESH request sent")
                placed.append((self.meshes[mesh_id], values.reshape(4, 4).copy()))
                colliders.append(self.meshes[mesh_id])
        reader.end()
        for mesh, transform in placed:           # only once the whole request is known to be good
            mesh.transform = transform
        centre, radius = sphere[:3], float(sphere[3])
        if tool == TOOL_PUSH:
            colliders.append(SphereCollider(centre, radius))
        if tool == TOOL_PULL:
            if self.pulling:
                self.sim.move_grab(centre)
            else:
                self.sim.grab(centre, radius)
                self.pulling = True
        elif self.pulling:
            self.sim.release()
            self.pulling = False
        self.sim.step(weights, colliders, dt)
        return positions_message(self.sim)

    def _reset(self, reader: _Reader) -> bytes:
        weights = self._weights(reader)
        reader.end()
        self.sim.release()
        self.pulling = False
        self.sim.reset(weights)
        return positions_message(self.sim)

    def _mesh(self, reader: _Reader) -> bytes:
        from .colliders import MeshCollider
        mesh_id, vertex_count, triangle_count = reader.u32(), reader.u32(), reader.u32()
        vertices = reader.floats(3 * vertex_count, "the vertices").reshape(-1, 3)
        triangles = reader.take("u4", 3 * triangle_count).astype(np.int64).reshape(-1, 3)
        reader.end()
        if len(triangles) and triangles.max() >= vertex_count:
            raise ProtocolError(f"MESH: a triangle names vertex {int(triangles.max())} of {vertex_count}")
        self.meshes[mesh_id] = MeshCollider(vertices, triangles, source=f"mesh {mesh_id}")
        return _message(OK, struct.pack("<I", mesh_id))


def _read_exactly(stream, size: int):
    """`size` bytes, or None when the stream ends first."""
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(shell_path, stdin=None, stdout=None, stiffness_path=None) -> int:
    """Run the session until stdin closes; the exit status (0 ended, 2 unusable input). With
    `stiffness_path` (STIFFNESS.npz, stiffness_maps.py) the repainted maps replace the fitted ones."""
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    sys.stdout = sys.stderr          # a stray print must not corrupt the binary stream
    try:
        from .forward import ShellSimulator
        from .shell_file import load_shell
        from .stiffness_maps import StiffnessMapError, load_with_stiffness
        sim = ShellSimulator(load_with_stiffness(load_shell(Path(shell_path)), stiffness_path))
    except StiffnessMapError as error:
        stdout.write(error_message(f"cannot use the stiffness {stiffness_path}: {error}"))
        stdout.flush()
        return 2
    except (OSError, ValueError) as error:
        stdout.write(error_message(f"cannot open the shell {shell_path}: {error}"))
        stdout.flush()
        return 2
    session = LiveSession(sim)
    stdout.write(hello_message(sim))
    stdout.flush()
    while True:
        header = _read_exactly(stdin, 4)
        if header is None:
            return 0
        (length,) = struct.unpack("<I", header)
        if length > MAX_BODY_BYTES:
            stdout.write(error_message(f"a message of {length} bytes is over the limit of {MAX_BODY_BYTES}; "
                                       f"the stream cannot be followed, the session ends"))
            stdout.flush()
            return 2
        body = _read_exactly(stdin, length)
        if body is None:
            return 0
        stdout.write(session.handle(body))
        stdout.flush()
