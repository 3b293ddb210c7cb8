"""Reading and writing `.npz` files: every reader refuses what is not a plain archive of named
arrays with one message per cause (and never unpickles), and a crash while writing never leaves a
half-written file where a good one was."""
from __future__ import annotations

import contextlib
import os
import secrets
import zipfile
from typing import Collection, Dict, Optional

import numpy as np

_NPY_MAGIC = b"\x93NUMPY"


class NpzReadError(ValueError):
    """A file is not a readable archive of plain arrays; the message starts with its path and
    says why (each reader adds what to do, in its own terms)."""


def read_npz(path, keys: Optional[Collection[str]] = None) -> Dict[str, np.ndarray]:
    """The arrays of an .npz archive (only `keys`, when given: other members stay unread).
    NpzReadError for a missing path, a folder, a file that is not an .npz archive (a text file, a
    single .npy array, a truncated archive), a member holding Python objects, or a damaged one."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise NpzReadError(f"{path}: is a folder, not a file")
    if not os.path.isfile(path):
        raise NpzReadError(f"{path}: no such file")
    with open(path, "rb") as stream:
        start = stream.read(len(_NPY_MAGIC))
    if start == _NPY_MAGIC:
        raise NpzReadError(f"{path}: a single .npy array, not an .npz archive of named arrays")
    if not zipfile.is_zipfile(path):
        raise NpzReadError(f"{path}: not an .npz archive (a text file, another format, or cut short)")
    arrays = {}
    try:
        # Opened here so that a damaged archive's file is closed too (np.load leaves it open).
        with open(path, "rb") as stream, np.load(stream, allow_pickle=False) as archive:
            for key in archive.files:
                if keys is not None and key not in keys:
                    continue
                try:
                    arrays[key] = archive[key]
                except ValueError as error:
                    if "pickle" in str(error).lower():
                        raise NpzReadError(f"{path}: {key}: holds Python objects, which are never unpickled "
                                           f"(store numbers, or names as a str array)") from None
                    raise
    except NpzReadError:
        raise
    except Exception as error:      # noqa: BLE001 — a damaged header fails in numpy's parser as anything, e.g. SyntaxError
        raise NpzReadError(f"{path}: the archive is corrupt ({type(error).__name__}: {error})") from None
    return arrays


def write_npz_atomically(path, arrays: Dict[str, np.ndarray], compressed: bool = True, streamed=None) -> None:
    """Write to a temporary file beside `path`, fsync it, then swap it in with os.replace.
    `streamed` {name: source} adds members too large to hold at once: a source has `shape`,
    `dtype` and `chunks()`, its leading-axis pieces in order (physics/skin_store.py)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temp_path = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 lets the umask set permissions as for any new file (mkstemp would force 0600);
    # O_BINARY stops Windows from translating newlines inside the archive.
    descriptor = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            if streamed:
                _write_members(stream, arrays, streamed, compressed)
            else:
                (np.savez_compressed if compressed else np.savez)(stream, **arrays)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise


def _write_members(stream, arrays, streamed, compressed: bool) -> None:
    """What np.savez writes (one `<name>.npy` member per array, ZIP64), plus the streamed ones
    written a chunk at a time."""
    compression = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(stream, mode="w", compression=compression, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
        for name, source in streamed.items():
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(source.dtype)), "fortran_order": False,
                      "shape": tuple(int(size) for size in source.shape)}
            written = 0
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array_header_1_0(member, header)
                for chunk in source.chunks():
                    chunk = np.ascontiguousarray(chunk, dtype=source.dtype)
                    member.write(chunk.tobytes())
                    written += len(chunk)
            if written != header["shape"][0]:
                raise ValueError(f"{name}: {written} rows streamed, {header['shape'][0]} promised")
