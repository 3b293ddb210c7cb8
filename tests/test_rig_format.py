"""The face-rig file format: round trips, every rejected input, atomic saves, the ICT rig."""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ict_data import ICT_PATH, ict_available, load_ict_rig
from solver.rig import (
    FORMAT_VERSION,
    FaceRig,
    RigFormatError,
    load_rig,
    rig_triangles,
    save_rig,
    triangulate,
    validate_rig,
)

GRID_COLUMNS, GRID_ROWS, GRID_SPACING_M = 5, 4, 0.05


def _grid_faces() -> np.ndarray:
    """Quads over the grid's first cell rows, and the last cell row as -1-padded triangle pairs."""
    rows = []
    for row in range(GRID_ROWS - 1):
        for column in range(GRID_COLUMNS - 1):
            a = row * GRID_COLUMNS + column
            b, c, d = a + 1, a + 1 + GRID_COLUMNS, a + GRID_COLUMNS
            if row < GRID_ROWS - 2:
                rows.append([a, b, c, d])
            else:
                rows += [[a, b, c, -1], [a, c, d, -1]]
    return np.array(rows, dtype=np.int64)


def _box(centre, size: float):
    corners = np.array([[x, y, z] for z in (0, 1) for y in (0, 1) for x in (0, 1)], dtype=np.float64) - 0.5
    quads = np.array([[0, 2, 3, 1], [4, 5, 7, 6], [0, 1, 5, 4], [2, 6, 7, 3], [0, 4, 6, 2], [1, 3, 7, 5]])
    return corners * size + np.asarray(centre, dtype=np.float64), quads


def make_rig() -> FaceRig:
    """A curved 5x4 grid patch (0.2 m x 0.15 m) with every optional key filled in.

    Faces 0-7 are quads, faces 8-15 the -1-padded triangles of the last cell row.
    """
    xs, ys = np.meshgrid(np.arange(GRID_COLUMNS) * GRID_SPACING_M, np.arange(GRID_ROWS) * GRID_SPACING_M)
    # Curved across rows only, so each grid row stays a straight line for the zero-area cases.
    zs = 0.02 * np.sin(ys * 10.0)
    vertices = np.stack([xs.ravel(), ys.ravel(), zs.ravel()], axis=1)
    vertex_count = vertices.shape[0]
    rng = np.random.default_rng(7)
    upper_teeth, teeth_faces = _box([0.1, 0.05, -0.02], 0.03)
    lower_teeth, _ = _box([0.1, 0.01, -0.02], 0.03)
    skull, skull_faces = _box([0.1, 0.08, -0.08], 0.18)
    jaw, jaw_faces = _box([0.1, 0.0, -0.05], 0.1)
    return FaceRig(
        vertices=vertices,
        faces=_grid_faces(),
        shape_key_names=np.array(["jawOpen", "mouthSmile_L"]),
        shape_key_deltas=rng.normal(scale=0.003, size=(2, vertex_count, 3)),
        upper_teeth_vertices=upper_teeth,
        upper_teeth_faces=teeth_faces,
        lower_teeth_vertices=lower_teeth,
        lower_teeth_faces=teeth_faces.copy(),
        skull_vertices=skull,
        skull_faces=skull_faces,
        jaw_vertices=jaw,
        jaw_faces=jaw_faces,
        vertex_group_names=np.array(["lips", "forehead"]),
        vertex_group_weights=rng.uniform(size=(2, vertex_count)),
        landmark_names=np.array(["nose_tip", "chin"]),
        landmark_vertices=np.array([7, 2], dtype=np.int64),
    )


@pytest.fixture
def rig() -> FaceRig:
    return make_rig()


def assert_rigs_equal(expected: FaceRig, actual: FaceRig) -> None:
    for field in dataclasses.fields(FaceRig):
        want, got = getattr(expected, field.name), getattr(actual, field.name)
        if want is None:
            assert got is None, field.name
        else:
            assert got.dtype == want.dtype, field.name
            np.testing.assert_array_equal(got, want, err_msg=field.name)


# --------------------------------------------------------------------------- valid rigs

def test_fixture_rig_is_valid(rig):
    validate_rig(rig)


def test_save_then_load_round_trips_exactly(rig, tmp_path):
    path = tmp_path / "rig.npz"
    save_rig(path, rig)
    assert_rigs_equal(rig, load_rig(path))


def test_round_trip_with_no_shape_keys_and_no_optional_arrays(rig, tmp_path):
    bare = FaceRig(vertices=rig.vertices, faces=rig.faces,
                   shape_key_names=np.array([], dtype=str), shape_key_deltas=np.zeros((0, len(rig.vertices), 3)))
    save_rig(tmp_path / "bare.npz", bare)
    loaded = load_rig(tmp_path / "bare.npz")
    assert_rigs_equal(bare, loaded)
    with np.load(tmp_path / "bare.npz") as written:
        assert set(written.files) == {"vertices", "faces", "shape_key_names", "shape_key_deltas", "format_version"}
        assert int(written["format_version"]) == FORMAT_VERSION


def test_triangle_only_faces_are_valid(rig):
    validate_rig(dataclasses.replace(rig, faces=triangulate(rig.faces)))


def test_load_converts_dtypes_and_ignores_unknown_keys(rig, tmp_path):
    path = tmp_path / "exported.npz"
    np.savez(path, vertices=rig.vertices.astype(np.float32), faces=rig.faces.astype(np.int32),
             shape_key_names=rig.shape_key_names.astype(bytes),
             shape_key_deltas=rig.shape_key_deltas.astype(np.float32),
             landmark_names=rig.landmark_names, landmark_vertices=rig.landmark_vertices.astype(np.uint16),
             exporter_comment=np.array("made by a newer add-on"))
    loaded = load_rig(path)
    assert loaded.vertices.dtype == np.float64
    assert loaded.shape_key_deltas.dtype == np.float64
    assert loaded.faces.dtype == np.int64
    assert loaded.landmark_vertices.dtype == np.int64
    assert loaded.shape_key_names.dtype.kind == "U"
    assert list(loaded.shape_key_names) == ["jawOpen", "mouthSmile_L"]
    assert loaded.upper_teeth_vertices is None


def test_file_without_format_version_is_read_as_version_1(rig, tmp_path):
    path = tmp_path / "old.npz"
    np.savez(path, vertices=rig.vertices, faces=rig.faces,
             shape_key_names=rig.shape_key_names, shape_key_deltas=rig.shape_key_deltas)
    assert load_rig(path).shape_key("jawOpen").shape == rig.vertices.shape


def test_rig_module_imports_no_heavy_dependencies():
    probe = "import sys, solver.rig; print(sorted(m for m in ('numba', 'scipy', 'bpy') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parent.parent)
    assert result.stdout.strip() == "[]"


# --------------------------------------------------------------------------- rejected rigs

def _set(key, value_of):
    """A case that replaces ``key`` with value_of(rig)."""
    return lambda rig: dataclasses.replace(rig, **{key: value_of(rig)})


def _edit(key, edit):
    """A case that applies edit(copy) to a copy of ``key``."""
    def apply(rig):
        array = getattr(rig, key).copy()
        edit(array)
        return dataclasses.replace(rig, **{key: array})
    return apply


def _assign(index, value):
    def edit(array):
        array[index] = value
    return edit


INVALID_RIGS = [
    # missing, and one half of an optional pair
    ("missing vertices", _set("vertices", lambda r: None), r"^vertices: required key is missing"),
    ("missing shape_key_deltas", _set("shape_key_deltas", lambda r: None), r"^shape_key_deltas: required key"),
    ("teeth vertices without faces", _set("upper_teeth_faces", lambda r: None),
     r"^upper_teeth_faces: upper_teeth_vertices is given without upper_teeth_faces"),
    ("landmark names without indices", _set("landmark_vertices", lambda r: None),
     r"^landmark_vertices: landmark_names is given without landmark_vertices"),
    ("group weights without names", _set("vertex_group_names", lambda r: None),
     r"^vertex_group_names: vertex_group_weights is given without"),
    # shapes
    ("vertices not (V,3)", _set("vertices", lambda r: r.vertices[:, :2]), r"^vertices: expected shape \(N, 3\)"),
    ("faces with 5 columns", _set("faces", lambda r: np.pad(r.faces, ((0, 0), (0, 1)))),
     r"^faces: expected shape \(F, 3\) or \(F, 4\)"),
    ("deltas for too few vertices", _set("shape_key_deltas", lambda r: r.shape_key_deltas[:, :-1]),
     r"^shape_key_deltas: expected shape \(K, V, 3\) = \(2, 20, 3\).*got \(2, 19, 3\)"),
    ("deltas for too many shape keys", _set("shape_key_deltas", lambda r: np.zeros((3, 20, 3))),
     r"^shape_key_deltas: expected shape \(K, V, 3\) = \(2, 20, 3\)"),
    ("2-D shape key names", _set("shape_key_names", lambda r: r.shape_key_names[:, None]),
     r"^shape_key_names: expected a 1-D array"),
    ("teeth vertices not (N,3)", _set("lower_teeth_vertices", lambda r: r.lower_teeth_vertices.ravel()),
     r"^lower_teeth_vertices: expected shape \(N, 3\)"),
    ("fewer than 4 skin vertices", lambda r: dataclasses.replace(
        r, vertices=r.vertices[[0, 1, 5]], faces=np.array([[0, 1, 2]]),
        shape_key_deltas=r.shape_key_deltas[:, [0, 1, 5]], vertex_group_names=None, vertex_group_weights=None,
        landmark_names=None, landmark_vertices=None),
     r"^vertices: has 3 vertices; the mesh needs at least 4"),
    ("no faces", _set("faces", lambda r: np.zeros((0, 4), dtype=np.int64)), r"^faces: has no faces"),
    ("no skull faces", _set("skull_faces", lambda r: np.zeros((0, 3), dtype=np.int64)), r"^skull_faces: has no faces"),
    # dtypes
    ("text vertices", _set("vertices", lambda r: r.vertices.astype(str)), r"^vertices: values must be real numbers"),
    ("complex deltas", _set("shape_key_deltas", lambda r: r.shape_key_deltas.astype(complex)),
     r"^shape_key_deltas: values must be real numbers"),
    ("float faces", _set("faces", lambda r: r.faces.astype(np.float64)), r"^faces: vertex indices must be integers"),
    ("float jaw faces", _set("jaw_faces", lambda r: r.jaw_faces.astype(np.float32)),
     r"^jaw_faces: vertex indices must be integers"),
    ("float landmark indices", _set("landmark_vertices", lambda r: r.landmark_vertices + 0.5),
     r"^landmark_vertices: vertex indices must be integers"),
    ("numeric shape key names", _set("shape_key_names", lambda r: np.array([1, 2])),
     r"^shape_key_names: names must be strings"),
    ("object vertex group names", _set("vertex_group_names", lambda r: r.vertex_group_names.astype(object)),
     r"^vertex_group_names: names must be strings"),
    # NaN / inf
    ("NaN vertex", _edit("vertices", _assign((3, 1), np.nan)),
     r"^vertices: 1 values are NaN or infinite; first at index \(3, 1\)"),
    ("inf delta", _edit("shape_key_deltas", _assign((1, 4, 2), np.inf)),
     r"^shape_key_deltas: 1 values are NaN or infinite"),
    ("NaN teeth vertex", _edit("upper_teeth_vertices", _assign((0, 0), np.nan)),
     r"^upper_teeth_vertices: 1 values are NaN"),
    ("NaN weight", _edit("vertex_group_weights", _assign((0, 0), np.nan)), r"^vertex_group_weights: 1 values are NaN"),
    # face indices
    ("face index past the end", _edit("faces", _assign((2, 1), 20)),
     r"^faces: 1 faces index past the last vertex of vertices \(20 vertices\); first is face 2"),
    ("negative face index", _edit("faces", _assign((5, 0), -1)),
     r"^faces: 1 faces hold negative vertex indices; first is face 5"),
    ("padding other than -1", _edit("faces", _assign((6, 3), -2)),
     r"^faces: 1 faces hold negative vertex indices; first is face 6"),
    ("teeth face past the end", _edit("lower_teeth_faces", _assign((0, 0), 8)),
     r"^lower_teeth_faces: 1 faces index past the last vertex of lower_teeth_vertices"),
    # degenerate faces
    ("repeated vertex in a quad", _edit("faces", _assign(3, [5, 6, 6, 10])),
     r"^faces: 1 faces use the same vertex twice; first is face 3"),
    ("repeated vertex in a padded triangle", _edit("faces", _assign(9, [11, 11, 16, -1])),
     r"^faces: 1 faces use the same vertex twice; first is face 9"),
    ("collinear triangles", _edit("faces", _assign([10, 12], [[15, 16, 17, -1], [16, 17, 18, -1]])),
     r"^faces: 2 faces have zero area .*; first is face 10"),
    ("quad with a zero-area half", _edit("faces", _assign(0, [0, 1, 2, 7])),
     r"^faces: 1 faces have zero area .*first is face 0"),
    # names
    ("duplicate shape key names", _set("shape_key_names", lambda r: np.array(["jawOpen", "jawOpen"])),
     r"^shape_key_names: duplicate names: 'jawOpen' \(2x\)"),
    ("duplicate landmark names", _set("landmark_names", lambda r: np.array(["chin", "chin"])),
     r"^landmark_names: duplicate names: 'chin'"),
    ("empty shape key name", _set("shape_key_names", lambda r: np.array(["jawOpen", ""])),
     r"^shape_key_names: 1 names are empty or whitespace; first is entry 1"),
    ("whitespace group name", _set("vertex_group_names", lambda r: np.array(["  ", "lips"])),
     r"^vertex_group_names: 1 names are empty or whitespace; first is entry 0"),
    # units
    ("centimetres", _set("vertices", lambda r: r.vertices * 100),
     r"^vertices: bounding-box diagonal is .* m, which looks like centimetres — "
     r"export in metres or apply scale 0\.01"),
    ("millimetres", _set("vertices", lambda r: r.vertices * 1000),
     r"^vertices: .*looks like millimetres — export in metres or apply scale 0\.001"),
    ("too small", _set("vertices", lambda r: r.vertices * 0.01), r"^vertices: bounding-box diagonal is .* too small"),
    ("skull in centimetres", _set("skull_vertices", lambda r: r.skull_vertices * 100),
     r"^skull_vertices: .*looks like centimetres"),
    # vertex groups
    ("weight above 1", _edit("vertex_group_weights", _assign((1, 4), 1.5)),
     r"^vertex_group_weights: 1 weights lie outside \[0, 1\]; first is group 'forehead' vertex 4 = 1\.5"),
    ("negative weight", _edit("vertex_group_weights", _assign((0, 0), -0.1)),
     r"^vertex_group_weights: 1 weights lie outside"),
    ("weights for too few vertices", _set("vertex_group_weights", lambda r: r.vertex_group_weights[:, :-1]),
     r"^vertex_group_weights: expected shape \(G, V\) = \(2, 20\)"),
    ("weights for too few groups", _set("vertex_group_weights", lambda r: r.vertex_group_weights[:1]),
     r"^vertex_group_weights: expected shape \(G, V\)"),
    # landmarks
    ("landmark past the skin", _set("landmark_vertices", lambda r: np.array([7, 20])),
     r"^landmark_vertices: 1 indices are not skin vertices \(0\.\.19\); first is 'chin' = 20"),
    ("negative landmark", _set("landmark_vertices", lambda r: np.array([-1, 2])),
     r"^landmark_vertices: 1 indices are not skin vertices"),
    ("more landmark names than indices", _set("landmark_names", lambda r: np.array(["nose_tip", "chin", "brow"])),
     r"^landmark_vertices: has 2 indices but landmark_names has 3 names"),
]


@pytest.mark.parametrize("make_invalid, message", [case[1:] for case in INVALID_RIGS],
                         ids=[case[0] for case in INVALID_RIGS])
def test_validate_rejects(rig, make_invalid, message):
    with pytest.raises(RigFormatError, match=message) as raised:
        validate_rig(make_invalid(rig))
    assert "Fix: " in str(raised.value)


def test_save_rejects_an_invalid_rig_before_writing(rig, tmp_path):
    with pytest.raises(RigFormatError, match="^faces: vertex indices must be integers"):
        save_rig(tmp_path / "rig.npz", dataclasses.replace(rig, faces=rig.faces.astype(float)))
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- rejected files

def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nowhere.npz"
    with pytest.raises(RigFormatError, match=f"{re.escape(str(path))}: no such file"):
        load_rig(path)


def test_not_an_npz_names_the_path(tmp_path):
    path = tmp_path / "rig.npz"
    path.write_text("vertices,faces\n")
    with pytest.raises(RigFormatError, match=f"{re.escape(str(path))}: not an .npz archive"):
        load_rig(path)


def test_single_npy_array_is_not_an_npz(rig, tmp_path):
    path = tmp_path / "rig.npy"
    np.save(path, rig.vertices)
    with pytest.raises(RigFormatError, match="not an .npz archive"):
        load_rig(path)


def test_corrupt_archive_names_the_path(rig, tmp_path):
    path = tmp_path / "rig.npz"
    save_rig(path, rig)
    data = bytearray(path.read_bytes())
    data[200:260] = bytes(60)  # inside the first compressed member, leaving the zip directory intact
    path.write_bytes(bytes(data))
    with pytest.raises(RigFormatError, match=f"{re.escape(str(path))}: .*corrupt"):
        load_rig(path)


def test_object_arrays_are_refused(rig, tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, vertices=rig.vertices, faces=rig.faces, shape_key_deltas=rig.shape_key_deltas,
             shape_key_names=np.array(list(rig.shape_key_names), dtype=object))
    with pytest.raises(RigFormatError,
                       match="shape_key_names: holds Python objects, which are never unpickled"):
        load_rig(path)


def test_missing_required_key_in_file_names_key_and_path(rig, tmp_path):
    path = tmp_path / "rig.npz"
    np.savez(path, vertices=rig.vertices, shape_key_names=rig.shape_key_names, shape_key_deltas=rig.shape_key_deltas)
    with pytest.raises(RigFormatError, match=f"^{re.escape(str(path))}: faces: required key is missing"):
        load_rig(path)


def test_invalid_content_in_file_names_key_and_path(rig, tmp_path):
    path = tmp_path / "rig.npz"
    np.savez(path, vertices=rig.vertices * 100, faces=rig.faces,
             shape_key_names=rig.shape_key_names, shape_key_deltas=rig.shape_key_deltas)
    with pytest.raises(RigFormatError, match=f"^{re.escape(str(path))}: vertices: .*looks like centimetres"):
        load_rig(path)


def test_newer_format_version_asks_for_a_solver_update(rig, tmp_path):
    path = tmp_path / "future.npz"
    np.savez(path, vertices=rig.vertices, faces=rig.faces, shape_key_names=rig.shape_key_names,
             shape_key_deltas=rig.shape_key_deltas, format_version=np.array(FORMAT_VERSION + 1))
    with pytest.raises(RigFormatError,
                       match="format_version: the file is format version 2.*update the Face Physics solver"):
        load_rig(path)


def test_non_integer_format_version_is_refused(rig, tmp_path):
    path = tmp_path / "odd.npz"
    np.savez(path, vertices=rig.vertices, faces=rig.faces, shape_key_names=rig.shape_key_names,
             shape_key_deltas=rig.shape_key_deltas, format_version=np.array(1.5))
    with pytest.raises(RigFormatError, match="format_version: expected a positive integer scalar"):
        load_rig(path)


# --------------------------------------------------------------------------- atomic saves

def test_invalid_save_leaves_the_old_file_intact(rig, tmp_path):
    path = tmp_path / "rig.npz"
    save_rig(path, rig)
    good_bytes = path.read_bytes()
    with pytest.raises(RigFormatError, match="^vertices: 1 values are NaN"):
        save_rig(path, _edit("vertices", _assign((0, 0), np.nan))(rig))
    assert path.read_bytes() == good_bytes
    assert os.listdir(tmp_path) == ["rig.npz"]
    assert_rigs_equal(rig, load_rig(path))


def test_failed_write_leaves_the_old_file_intact_and_no_temp_file(rig, tmp_path, monkeypatch):
    path = tmp_path / "rig.npz"
    save_rig(path, rig)
    good_bytes = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez_compressed", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_rig(path, dataclasses.replace(rig, vertices=rig.vertices + 0.001))
    assert path.read_bytes() == good_bytes
    assert os.listdir(tmp_path) == ["rig.npz"]


# --------------------------------------------------------------------------- triangles

def test_triangulate_splits_quads_and_keeps_padded_triangles():
    faces = np.array([[0, 1, 2, 3], [4, 5, 6, -1], [7, 8, 9, 10]], dtype=np.int32)
    np.testing.assert_array_equal(
        triangulate(faces), [[0, 1, 2], [0, 2, 3], [4, 5, 6], [7, 8, 9], [7, 9, 10]])
    assert triangulate(faces).dtype == np.int64


def test_triangulate_passes_triangles_through():
    triangles = np.array([[0, 1, 2], [2, 1, 3]], dtype=np.int32)
    result = triangulate(triangles)
    np.testing.assert_array_equal(result, triangles)
    assert result.dtype == np.int64


def test_triangulate_rejects_other_shapes():
    with pytest.raises(RigFormatError, match=r"^faces: expected shape \(F, 3\) or \(F, 4\)"):
        triangulate(np.zeros((2, 5), dtype=np.int64))


def test_rig_triangles_cover_the_grid(rig):
    triangles = rig_triangles(rig)
    # Quads split in two and padded rows stay single, so every grid cell ends up as two triangles.
    assert triangles.shape == (2 * (GRID_COLUMNS - 1) * (GRID_ROWS - 1), 3)
    assert set(np.unique(triangles)) == set(range(len(rig.vertices)))


# --------------------------------------------------------------------------- the ICT FaceKit rig

@pytest.fixture(scope="module")
def ict_rig() -> FaceRig:
    if not ict_available():
        pytest.skip(f"ICT FaceKit data not found at {ICT_PATH}")
    return load_ict_rig()


def test_ict_rig_converts_and_validates(ict_rig):
    validate_rig(ict_rig)
    assert ict_rig.vertices.shape == (14062, 3)
    assert ict_rig.shape_key_deltas.shape == (53, 14062, 3)
    assert ict_rig.has_shape_key("jawOpen") and ict_rig.has_shape_key("mouthSmile_L")
    assert ict_rig.upper_teeth_vertices is not None and ict_rig.upper_teeth_faces is not None
    assert ict_rig.lower_teeth_vertices is not None and ict_rig.lower_teeth_faces is not None
    diagonal = np.linalg.norm(np.ptp(ict_rig.vertices, axis=0))
    assert 0.2 < diagonal < 0.6
    assert len(ict_rig.landmark_names) == 68 and ict_rig.landmark_names[0] == "mp68_00"


def test_ict_lower_teeth_sit_below_the_upper_teeth(ict_rig):
    # Guards the part names against a swap: jaw-driven teeth must be the lower set.
    assert ict_rig.lower_teeth_vertices[:, 1].mean() < ict_rig.upper_teeth_vertices[:, 1].mean()


def test_ict_rig_round_trips_through_a_file(ict_rig, tmp_path):
    path = tmp_path / "ict.npz"
    save_rig(path, ict_rig)
    assert_rigs_equal(ict_rig, load_rig(path))


def test_ict_rig_is_cached_and_read_only(ict_rig):
    assert load_ict_rig() is ict_rig
    with pytest.raises(ValueError):
        ict_rig.vertices[0, 0] = 1.0
