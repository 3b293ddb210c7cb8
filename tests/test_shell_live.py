"""The live shell session (`python -m solver shell-live`, solver/shell/live.py) through the real
child process, driven by the add-on's client (blender_addon/shell_live.py, no bpy): the two
halves of the protocol against each other, frames answered, push and pull, props, and every bad
message answered with an error rather than a hang. Every wait has a timeout."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from blender_addon import shell_live as client  # noqa: E402
from shell_sheets import sheet_shell  # noqa: E402
from solver.shell.shell_file import save_shell  # noqa: E402

TIMEOUT = 120.0


@pytest.fixture(scope="module")
def sheet_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("live") / "shell.npz"
    save_shell(path, sheet_shell(stiffness=1.0, hole=False))
    return path


@pytest.fixture
def session(sheet_file):
    live = client.LiveShell(sys.executable, sheet_file, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    live.wait_hello(TIMEOUT)
    yield live
    assert live.close(timeout=10.0) == 0          # stdin closed: the session ends by itself


def _frame(live, weights=(0.0, 0.0), tool=client.TOOL_OFF, centre=(0, 0, 0), radius=0.0, colliders=()):
    return live.request(client.pack_frame(1 / 30, weights, tool, centre, radius, colliders), timeout=TIMEOUT)


def test_hello_names_the_shell(session, sheet_file):
    shell = sheet_shell(stiffness=1.0, hole=False)
    assert session.hello.shape_names == ("bump", "stretch")
    assert session.hello.fine_vertices == len(shell.fine_rest_m) == session.hello.coarse_vertices
    assert session.hello.face_height_m == pytest.approx(0.2)


def test_frames_follow_the_shape_key_and_reset_returns_to_rest(session):
    shell = sheet_shell(stiffness=1.0, hole=False)
    rest = _frame(session).positions_m
    assert np.allclose(rest, shell.fine_rest_m, atol=1e-6)
    for _ in range(30):
        reply = _frame(session, weights=(1.0, 0.0))
    target = shell.fine_rest_m + shell.coarse_deltas[0] * shell.face_height_m
    assert reply.substeps in (16, 17)                   # 2 ms sub-steps in a 1/30 s frame
    moved = np.abs(reply.positions_m - shell.fine_rest_m).max()
    assert moved > 0.5 * np.abs(target - shell.fine_rest_m).max()
    back = session.request(client.pack_reset([0.0, 0.0]), timeout=TIMEOUT)
    assert np.allclose(back.positions_m, shell.fine_rest_m, atol=1e-6)


def test_push_keeps_the_sheet_out_of_the_sphere_and_pull_lifts_it(session):
    h = 0.2
    radius = 0.08 * h
    top = np.array([0.5, 0.5, 0.15]) * h                 # the sheet's crest (z = 0.15 sin(pi u))
    centre = top + np.array([0, 0, radius - 0.03 * h])   # sunk 3 % of the face height into it
    for _ in range(20):
        pushed = _frame(session, tool=client.TOOL_PUSH, centre=centre, radius=radius)
    distance = np.linalg.norm(pushed.positions_m.astype(np.float64) - centre, axis=1)
    assert distance.min() >= radius * (1 - 1e-3)
    assert pushed.contact_force_n > 0.0
    session.request(client.pack_reset([0.0, 0.0]), timeout=TIMEOUT)
    grab = top + np.array([0, 0, 0.5 * radius])
    _frame(session, tool=client.TOOL_PULL, centre=grab, radius=radius)
    for step in range(1, 11):
        pulled = _frame(session, tool=client.TOOL_PULL, centre=grab + np.array([0, 0, 0.002 * step]), radius=radius)
    assert pulled.grabbed > 0
    lifted = pulled.positions_m[:, 2].max() - top[2]
    assert lifted > 0.015
    released = _frame(session)
    assert released.grabbed == 0


def test_a_prop_sent_once_pushes_like_the_sphere(session):
    h = 0.2
    radius = 0.08 * h
    # An octahedron-ish closed prop (a coarse ball) placed by its transform each frame.
    phi = (1 + 5 ** 0.5) / 2
    vertices = np.array([[-1, phi, 0], [1, phi, 0], [-1, -phi, 0], [1, -phi, 0], [0, -1, phi], [0, 1, phi],
                         [0, -1, -phi], [0, 1, -phi], [phi, 0, -1], [phi, 0, 1], [-phi, 0, -1], [-phi, 0, 1]], float)
    vertices *= radius / np.linalg.norm(vertices[0])
    faces = np.array([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4],
                      [11, 10, 2], [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9],
                      [4, 9, 5], [2, 4, 11], [6, 2, 10], [8, 6, 7], [9, 8, 1]])
    assert session.request(client.pack_mesh(7, vertices, faces), timeout=TIMEOUT) == ("ok", 7)
    transform = np.eye(4)
    transform[:3, 3] = np.array([0.5, 0.5, 0.15]) * h + np.array([0, 0, 0.5 * radius])
    for _ in range(10):
        reply = _frame(session, colliders=[(client.MESH_COLLIDER, (7, transform))])
    rest = sheet_shell(stiffness=1.0, hole=False).fine_rest_m
    assert (rest[:, 2] - reply.positions_m[:, 2]).max() > 0.2 * radius


def _with_body(body: bytes) -> bytes:
    return struct.pack("<I", len(body)) + body


BAD = {
    "unknown type": struct.pack("<IB", 1, 9),
    "empty": struct.pack("<I", 0),
    "too few weights": client.pack_frame(1 / 30, [0.5]),
    "truncated frame": _with_body(client.pack_frame(1 / 30, [0.5, 0.0])[4:-3]),
    "extra bytes": _with_body(client.pack_frame(1 / 30, [0.5, 0.0])[4:] + b"xx"),
    "NaN weight": client.pack_frame(1 / 30, [float("nan"), 0.0]),
    "negative dt": client.pack_frame(-1.0, [0.0, 0.0]),
    "bad tool": client.pack_frame(1 / 30, [0.0, 0.0], tool=5, sphere_radius_m=0.01),
    "zero radius push": client.pack_frame(1 / 30, [0.0, 0.0], tool=client.TOOL_PUSH),
    "unknown mesh": client.pack_frame(1 / 30, [0.0, 0.0], colliders=[(client.MESH_COLLIDER, (3, np.eye(4)))]),
    "mesh index out of range": client.pack_mesh(1, np.zeros((3, 3)), [[0, 1, 5]]),
}
EXPECTED = {"unknown type": "unknown message type 9", "empty": "empty message", "too few weights": "1 shape weights",
            "truncated frame": "message ends", "extra bytes": "left over", "NaN weight": "NaN",
            "negative dt": "dt", "bad tool": "tool 5", "zero radius push": "radius",
            "unknown mesh": "mesh 3", "mesh index out of range": "vertex 5"}


def test_every_bad_message_gets_an_error_and_the_session_goes_on(session):
    for name, message in BAD.items():
        with pytest.raises(client.LiveShellError, match=EXPECTED[name]):
            session.request(message, timeout=TIMEOUT)
        assert session.running, name
    assert _frame(session).positions_m.shape == (session.hello.fine_vertices, 3)


def test_an_impossible_length_ends_the_session_with_an_error(sheet_file):
    live = client.LiveShell(sys.executable, sheet_file, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        live.wait_hello(TIMEOUT)
        with pytest.raises(client.LiveShellError, match="over the limit"):
            live.request(struct.pack("<I", 2 ** 31), timeout=TIMEOUT)
        assert live.process.wait(timeout=30) == 2
    finally:
        live.close(timeout=10.0)


def test_a_missing_or_bad_shell_file_is_an_error_not_a_hang(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    for path in (tmp_path / "missing.npz", tmp_path / "bad.npz"):
        live = client.LiveShell(sys.executable, path, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            with pytest.raises(client.LiveShellError, match="cannot open the shell"):
                live.wait_hello(TIMEOUT)
            assert live.process.wait(timeout=30) == 2
        finally:
            live.close(timeout=10.0)


def test_the_command_line_session_ends_when_stdin_closes(sheet_file):
    done = subprocess.run([sys.executable, "-m", "solver", "shell-live", str(sheet_file)], input=b"",
                          capture_output=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=TIMEOUT)
    assert done.returncode == 0
    (length,) = struct.unpack("<I", done.stdout[:4])
    assert done.stdout[4] == client.HELLO and len(done.stdout) == 4 + length
