"""The simulated skin of a take on disk, a frame at a time: RESULT.npz's `skin_positions`
(T, V, 3) float64 metres without ever holding T frames in memory (issue 41: a 2,000-frame ICT take
is 675 MB of skin).

`SkinStore` is a plain .npy file (header, then C-order float64 frames) written frame by frame
through ordinary file writes, never a memory map, so the pages go to the OS's file cache and not
to the process; `animate` keeps it in the bake's partial folder, where it also serves a resumed
bake (full precision, unlike the .pc2's float32), and streams it into RESULT.npz
(npz_files.write_npz_atomically's `streamed`). `StoredArray` is what an AnimationResult holds
instead of the array: RESULT.npz's member, read when first used.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

# Frames copied per piece when streaming the store into RESULT.npz (~16 MB for ICT's skin).
_CHUNK_BYTES = 16 << 20


class SkinStore:
    """(frames, vertices, 3) float64 on disk at `path`; `resume` reopens a store of that shape."""

    dtype = np.dtype("<f8")

    def __init__(self, path, frames: int, vertices: int, resume: bool = False):
        self.path = Path(path)
        self.shape = (int(frames), int(vertices), 3)
        self._frame_bytes = self.shape[1] * 3 * self.dtype.itemsize
        self.reopened = bool(resume and self._matches())     # else the caller refills what it resumes
        if not self.reopened:
            self._create()
        self._stream = open(self.path, "r+b")
        self._offset = self._header_length()

    def _create(self) -> None:
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        with open(self.path, "wb") as stream:
            np.lib.format.write_array_header_1_0(stream, header)
            stream.truncate(stream.tell() + self.shape[0] * self._frame_bytes)

    def _header_length(self) -> int:
        with open(self.path, "rb") as stream:
            np.lib.format.read_magic(stream)
            np.lib.format.read_array_header_1_0(stream)
            return stream.tell()

    def _matches(self) -> bool:
        """A store left by an earlier run of the same take (resume)."""
        try:
            with open(self.path, "rb") as stream:
                if np.lib.format.read_magic(stream) != (1, 0):
                    return False
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
                end = stream.tell() + self.shape[0] * self._frame_bytes
                size = os.fstat(stream.fileno()).st_size
            return tuple(shape) == self.shape and not fortran and dtype == self.dtype and size >= end
        except (OSError, ValueError):
            return False

    def write(self, frame: int, positions) -> None:
        values = np.ascontiguousarray(positions, dtype=self.dtype)
        if values.shape != self.shape[1:]:
            raise ValueError(f"skin frame of shape {values.shape}, expected {self.shape[1:]}")
        self._stream.seek(self._offset + int(frame) * self._frame_bytes)
        self._stream.write(values.tobytes())

    def read(self, start: int, stop: int) -> np.ndarray:
        """Frames start..stop−1 as an array (a copy)."""
        self._stream.flush()
        count = max(0, int(stop) - int(start))
        self._stream.seek(self._offset + int(start) * self._frame_bytes)
        data = self._stream.read(count * self._frame_bytes)
        return np.frombuffer(data, dtype=self.dtype).reshape(count, *self.shape[1:]).copy()

    def chunks(self):
        """The frames in order, a few megabytes at a time (for writing them into an archive)."""
        step = max(1, _CHUNK_BYTES // max(self._frame_bytes, 1))
        for start in range(0, self.shape[0], step):
            yield self.read(start, min(self.shape[0], start + step))

    def close(self) -> None:
        self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class StoredArray:
    """An array member of an .npz, read (once) when first used: `np.asarray(stored)`, indexing,
    `len` and iteration work as on the array."""

    def __init__(self, path, key: str, shape):
        self.path, self.key, self.shape = Path(path), key, tuple(shape)
        self._loaded = None

    def load(self) -> np.ndarray:
        if self._loaded is None:
            with np.load(self.path, allow_pickle=False) as archive:
                self._loaded = archive[self.key]
        return self._loaded

    def __array__(self, dtype=None, copy=None):
        array = self.load()
        return array if dtype is None else array.astype(dtype)

    def __getitem__(self, index):
        return self.load()[index]

    def __len__(self) -> int:
        return self.shape[0]

    def __iter__(self):
        return iter(self.load())
