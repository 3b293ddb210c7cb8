"""Writing `.npz` files so that a crash never leaves a half-written file where a good one was."""
from __future__ import annotations

import contextlib
import os
import secrets
from typing import Dict

import numpy as np


def write_npz_atomically(path, arrays: Dict[str, np.ndarray], compressed: bool = True) -> None:
    """Write to a temporary file beside `path`, fsync it, then swap it in with os.replace."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    temp_path = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # os.open with 0o666 lets the umask set permissions as for any new file (mkstemp would force 0600);
    # O_BINARY stops Windows from translating newlines inside the archive.
    descriptor = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            (np.savez_compressed if compressed else np.savez)(stream, **arrays)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_path)
        raise
