"""The add-on's side of the live shell session (the Poke tool): the child process
`python -m solver shell-live SHELL.npz` and its binary protocol, without bpy.

The add-on may not import the solver, so the protocol is written out twice: here (requests
packed, replies read) and in solver/shell/live.py (requests read, replies packed); the
documentation of both is docs/addon.md, "Live shell protocol", and tests/test_shell_live.py runs
the two against each other through the real child. Every message is a u32 little-endian body
length and the body, whose first byte is the message type; each request gets one reply.

`LiveShell` never blocks the UI: a daemon thread reads the replies into a queue, `send_frame`
refuses while an answer is still owed (one frame in flight, so a slow solve drops frames rather
than queueing seconds of them), and `latest_positions` takes whatever arrived.
"""
from __future__ import annotations

import collections
import os
import queue
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .solver_process import kill_process_tree

FRAME, RESET, MESH = 1, 2, 3
HELLO, POSITIONS, ERROR, OK = 128, 129, 130, 131
TOOL_OFF, TOOL_PUSH, TOOL_PULL = 0, 1, 2
SPHERE, CAPSULE, BOX, MESH_COLLIDER = 0, 1, 2, 3
STDERR_TAIL_LINES = 40
START_TIMEOUT_S = 120.0          # numba's first compile of the shell kernels, when its cache is cold


class LiveShellError(RuntimeError):
    """The session refused a request, or the child is gone (the message says which and why)."""


def shell_live_command(python, shell_path, stiffness_path=None) -> List[str]:
    """The child's command; with `stiffness_path` (STIFFNESS.npz from the repainted groups) it
    simulates those maps instead of the fitted ones."""
    command = [str(python), "-m", "solver", "shell-live", str(shell_path)]
    return command + ["--stiffness", str(stiffness_path)] if stiffness_path is not None else command


# --------------------------------------------------------------------------- requests

def _message(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IB", 1 + len(payload), kind) + payload


def _floats(values, count: int, what: str) -> bytes:
    array = np.ascontiguousarray(values, dtype="<f8").reshape(-1)
    if array.size != count:
        raise ValueError(f"{what}: expected {count} numbers, found {array.size}")
    return array.tobytes()


def pack_frame(dt: float, weights, tool: int = TOOL_OFF, sphere_centre_m=(0.0, 0.0, 0.0), sphere_radius_m: float = 0.0,
               colliders: Sequence[Tuple[int, object]] = ()) -> bytes:
    """A FRAME request. `colliders`: (kind, values) pairs — SPHERE (centre, radius: 4 numbers),
    CAPSULE (start, end, radius: 7), BOX (centre, axes row-major, half sizes: 15), or
    MESH_COLLIDER ((mesh id, 4×4 transform)) for a prop sent with `pack_mesh`."""
    weights = np.ascontiguousarray(weights, dtype="<f8").reshape(-1)
    parts = [struct.pack("<dI", float(dt), len(weights)), weights.tobytes(), struct.pack("<B", int(tool)),
             _floats([*np.asarray(sphere_centre_m, dtype=np.float64).reshape(3), float(sphere_radius_m)], 4,
                     "the sphere"),
             struct.pack("<I", len(colliders))]
    sizes = {SPHERE: 4, CAPSULE: 7, BOX: 15}
    for kind, values in colliders:
        if kind == MESH_COLLIDER:
            mesh_id, transform = values
            parts += [struct.pack("<BI", MESH_COLLIDER, int(mesh_id)), _floats(transform, 16, "a mesh transform")]
        elif kind in sizes:
            parts += [struct.pack("<B", kind), _floats(values, sizes[kind], f"a collider of kind {kind}")]
        else:
            raise ValueError(f"collider kind {kind!r} is not SPHERE, CAPSULE, BOX or MESH_COLLIDER")
    return _message(FRAME, b"".join(parts))


def pack_reset(weights) -> bytes:
    weights = np.ascontiguousarray(weights, dtype="<f8").reshape(-1)
    return _message(RESET, struct.pack("<I", len(weights)) + weights.tobytes())


def pack_mesh(mesh_id: int, vertices_m, triangles) -> bytes:
    vertices = np.ascontiguousarray(vertices_m, dtype="<f8").reshape(-1, 3)
    triangles = np.ascontiguousarray(triangles, dtype="<u4").reshape(-1, 3)
    return _message(MESH, struct.pack("<III", int(mesh_id), len(vertices), len(triangles)) + vertices.tobytes()
                    + triangles.tobytes())


# --------------------------------------------------------------------------- replies

@dataclass(frozen=True)
class Hello:
    fine_vertices: int
    coarse_vertices: int
    face_height_m: float
    shape_names: Tuple[str, ...]


@dataclass(frozen=True)
class Positions:
    positions_m: np.ndarray           # (V, 3) float32, metres in the rig's frame
    simulate_s: float                 # the solver's coarse rig + simulation time for the frame
    warp_s: float                     # warp + detail time
    contact_force_n: float
    substeps: int
    grabbed: int
    received: float                   # time.perf_counter() when the reply was read


def parse_reply(kind: int, body: bytes):
    """A reply body (after its type byte) → Hello, Positions, ("ok", id) or LiveShellError."""
    if kind == HELLO:
        fine, coarse, height, count = struct.unpack_from("<IIdI", body)
        at, names = struct.calcsize("<IIdI"), []
        for _ in range(count):
            (length,) = struct.unpack_from("<H", body, at)
            names.append(body[at + 2:at + 2 + length].decode("utf-8"))
            at += 2 + length
        return Hello(fine, coarse, height, tuple(names))
    if kind == POSITIONS:
        header = "<IdddII"
        count, simulate, warp, force, substeps, grabbed = struct.unpack_from(header, body)
        positions = np.frombuffer(body, dtype="<f4", count=3 * count, offset=struct.calcsize(header)).reshape(-1, 3)
        return Positions(positions, simulate, warp, force, substeps, grabbed, time.perf_counter())
    if kind == OK:
        return ("ok", struct.unpack_from("<I", body)[0])
    if kind == ERROR:
        return LiveShellError(body.decode("utf-8", errors="replace"))
    return LiveShellError(f"the live shell sent a message of unknown type {kind}")


def _read_exactly(stream, size: int) -> Optional[bytes]:
    chunks, left = [], size
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --------------------------------------------------------------------------- the child

class LiveShell:
    """One `shell-live` child: started in its own process group (killed as one), its replies read
    on a daemon thread."""

    def __init__(self, python, shell_path, env: Optional[Dict[str, str]] = None, stiffness_path=None):
        creation = ({"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP} if os.name == "nt"
                    else {"start_new_session": True})
        self.process = subprocess.Popen(shell_live_command(python, shell_path, stiffness_path), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0,
                                        **creation)
        self._replies: "queue.Queue" = queue.Queue()
        self._stderr: Deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.hello: Optional[Hello] = None
        self.owed = 0                       # requests sent and not answered yet
        self.sent_at: Optional[float] = None
        self._readers = [threading.Thread(target=self._read_replies, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_replies(self) -> None:
        stream = self.process.stdout
        while True:
            header = _read_exactly(stream, 4)
            body = None if header is None else _read_exactly(stream, struct.unpack("<I", header)[0])
            if not body:
                self._replies.put(None)          # the child is gone
                return
            self._replies.put(parse_reply(body[0], body[1:]))

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self._stderr.append(line.decode("utf-8", errors="replace").rstrip("\n"))

    def _gone(self) -> LiveShellError:
        try:
            status = self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            status = None
        tail = [line for line in self._stderr if line.strip()]
        return LiveShellError(f"the live shell ended (status {status})" + (f": {tail[-1]}" if tail else ""))

    def _take(self, timeout: Optional[float]):
        try:
            reply = self._replies.get(timeout=timeout) if timeout else self._replies.get_nowait()
        except queue.Empty:
            return None
        if reply is None:
            self._replies.put(None)              # every later call sees the end too
            raise self._gone()
        return reply

    def wait_hello(self, timeout: float = START_TIMEOUT_S) -> Hello:
        if self.hello is None:
            reply = self._take(timeout)
            if reply is None:
                raise LiveShellError(f"the live shell did not answer within {timeout:.0f} s")
            if isinstance(reply, LiveShellError):
                raise reply
            if not isinstance(reply, Hello):
                raise LiveShellError(f"the live shell began with {type(reply).__name__}, not HELLO")
            self.hello = reply
        return self.hello

    def send(self, message: bytes) -> None:
        try:
            self.process.stdin.write(message)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._gone() from None
        self.owed += 1
        self.sent_at = time.perf_counter()

    def request(self, message: bytes, timeout: float = 30.0):
        """Send one request and wait for its reply (tests, the bench, MESH and RESET); an ERROR
        reply is raised as LiveShellError."""
        self.wait_hello()
        self.drain()
        self.send(message)
        reply = self._take(timeout)
        if reply is None:
            raise LiveShellError(f"the live shell did not answer within {timeout:.0f} s")
        self.owed -= 1
        if isinstance(reply, LiveShellError):
            raise reply
        return reply

    def drain(self, timeout: float = 30.0) -> None:
        """Wait for the answers still owed (before a blocking request, so replies stay paired)."""
        while self.owed:
            if self._take(timeout) is None:
                raise LiveShellError(f"the live shell did not answer within {timeout:.0f} s")
            self.owed -= 1

    def send_frame_if_free(self, message: bytes) -> bool:
        """Send a FRAME unless the last one is still being solved; True when sent."""
        if self.owed:
            return False
        self.send(message)
        return True

    def latest(self):
        """The newest reply that arrived (Positions or ("ok", id)), None when none did; raises
        LiveShellError for an ERROR reply or a child that ended. Never blocks."""
        newest = None
        while True:
            reply = self._take(None)
            if reply is None:
                return newest
            self.owed = max(self.owed - 1, 0)
            if isinstance(reply, LiveShellError):
                raise reply
            newest = reply

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def close(self, timeout: float = 5.0) -> Optional[int]:
        """Close stdin (the session's signal to end), wait, kill the group if it lingers; the
        pipes are closed once their readers have seen the end."""
        try:
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill()
        for reader in self._readers:
            reader.join(timeout)
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()
        return self.process.returncode

    def _kill(self) -> None:
        kill_process_tree(self.process)
