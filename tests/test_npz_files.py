"""Every reader of the project's .npz files (rig, model, fit, activations, maps, mesh collider,
lip vertices) refuses what is not a plain archive of named arrays through one reader
(solver/npz_files.py), naming the file and the cause, and never unpickles."""
from __future__ import annotations

import re
import zipfile

import numpy as np
import pytest

from solver.collisions.mesh_collider import load_mesh_collider
from solver.collisions.scene import load_lip_vertices
from solver.inverse.fit_file import load_fit
from solver.model_file import load_model
from solver.npz_files import read_npz
from solver.physics.inputs import ACTIVATION_KEYS, MAP_KEYS, read_npz as read_input_npz
from solver.rig import load_rig

READERS = {
    "rig": load_rig,
    "model": load_model,
    "fit": load_fit,
    "activations": lambda path: read_input_npz(path, ACTIVATION_KEYS, "ACTIVATIONS"),
    "maps": lambda path: read_input_npz(path, MAP_KEYS, "MAPS"),
    "collider": load_mesh_collider,
    "lips": lambda path: load_lip_vertices(path, 10),
}


def _text(path):
    path.write_text("vertices,faces\n0,0,0\n")


def _npy(path):
    with open(path, "wb") as stream:
        np.save(stream, np.zeros(3))


def _truncated(path):
    np.savez(path, upper=np.arange(100), lower=np.arange(100, 200))
    path.write_bytes(path.read_bytes()[:80])


def _corrupt_member(path):
    np.savez_compressed(path, vertices=np.arange(5000.0), upper=np.arange(5000), lower=np.arange(5000))
    data = bytearray(path.read_bytes())
    data[120:400] = bytes(280)       # inside the first compressed member; the zip directory stays intact
    path.write_bytes(bytes(data))


def _objects(path):
    things = np.array([{"x": 1}], dtype=object)
    np.savez(path, upper=things, lower=np.array([1]), vertices=things)


def _folder(path):
    path.mkdir()


FILES = {
    "text": (_text, "not an .npz archive (a text file, another format, or cut short)"),
    "npy": (_npy, "a single .npy array, not an .npz archive"),
    "truncated": (_truncated, "not an .npz archive (a text file, another format, or cut short)"),
    "corrupt": (_corrupt_member, "the archive is corrupt"),
    "objects": (_objects, ": holds Python objects, which are never unpickled"),
    "folder": (_folder, "is a folder, not a file"),
}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", FILES)
def test_every_reader_names_the_file_and_why_it_cannot_be_read(tmp_path, reader, kind):
    make, cause = FILES[kind]
    path = tmp_path / "input.npz"
    make(path)
    with pytest.raises(ValueError, match=re.escape(path.name) + ".*" + re.escape(cause)):
        READERS[reader](path)


def test_unwanted_members_stay_unread(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, wanted=np.arange(3), other=np.array([{"x": 1}], dtype=object))
    assert list(read_npz(path, keys={"wanted"})) == ["wanted"]
    assert zipfile.is_zipfile(path)
