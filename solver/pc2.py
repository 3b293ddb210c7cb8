"""Point caches in the PC2 format, as Blender's Mesh Cache modifier reads them.

Layout (little-endian): the 12-byte signature b"POINTCACHE2\\0", int32 version (1),
int32 point count, float32 start frame, float32 sample rate (frames per sample), int32
sample count, then float32 (x, y, z) per point per sample.

`Pc2Writer` appends one frame at a time: the frame's data is written and fsynced *before*
the header's sample count is raised (and fsynced), so a crash or a cancel at any moment
leaves a valid cache of every frame finished so far — a long bake can be watched while it
runs and is never corrupt.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

SIGNATURE = b"POINTCACHE2\0"
VERSION = 1
_HEADER = struct.Struct("<12siiffi")
_SAMPLE_COUNT_OFFSET = _HEADER.size - 4


class Pc2Error(ValueError):
    """A file is not a valid PC2 cache, or a frame does not fit the cache."""


class Pc2Writer:
    """Create (or replace) a cache at `path` and append frames of `point_count` points."""

    def __init__(self, path, point_count: int, start_frame: float = 1.0, sample_rate: float = 1.0):
        if point_count <= 0:
            raise Pc2Error(f"a point cache needs at least one point, got {point_count}")
        self.path = Path(path)
        self.point_count = int(point_count)
        self.sample_count = 0
        self._stream = open(self.path, "wb")
        self._stream.write(_HEADER.pack(SIGNATURE, VERSION, self.point_count, float(start_frame),
                                        float(sample_rate), 0))
        self._sync()

    @classmethod
    def continue_after(cls, path, point_count: int, samples: int) -> "Pc2Writer":
        """Reopen a cache to append after its first `samples` frames (a resumed bake): frames
        past them — one whose bake step was not recorded as done — are cut off first."""
        path = Path(path)
        _, start, rate = read_pc2(path)
        header = _HEADER.unpack_from(path.read_bytes()[:_HEADER.size])
        if header[2] != point_count or header[5] < samples:
            raise Pc2Error(f"{path}: holds {header[5]} frames of {header[2]} points; cannot continue after frame "
                           f"{samples} of {point_count} points")
        writer = cls.__new__(cls)
        writer.path, writer.point_count, writer.sample_count = path, int(point_count), int(samples)
        writer._stream = open(path, "r+b")
        writer._stream.seek(_SAMPLE_COUNT_OFFSET)
        writer._stream.write(struct.pack("<i", writer.sample_count))
        writer._stream.truncate(_HEADER.size + samples * point_count * 12)
        writer._sync()
        return writer

    def append(self, positions) -> None:
        frame = np.asarray(positions, dtype="<f4")
        if frame.shape != (self.point_count, 3):
            raise Pc2Error(f"a frame must have shape ({self.point_count}, 3), got {frame.shape}")
        if not np.all(np.isfinite(frame)):
            raise Pc2Error("a frame contains NaN or infinite coordinates; it was not written")
        self._stream.seek(0, os.SEEK_END)
        self._stream.write(frame.tobytes())
        self._sync()
        self.sample_count += 1
        self._stream.seek(_SAMPLE_COUNT_OFFSET)
        self._stream.write(struct.pack("<i", self.sample_count))
        self._sync()

    def _sync(self):
        self._stream.flush()
        os.fsync(self._stream.fileno())

    def close(self) -> None:
        if not self._stream.closed:
            self._stream.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_pc2(path):
    """(positions (samples, points, 3) float32, start frame, sample rate); validates the file."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < _HEADER.size:
        raise Pc2Error(f"{path}: too short to be a PC2 cache ({len(data)} bytes)")
    signature, version, points, start, rate, samples = _HEADER.unpack_from(data)
    if signature != SIGNATURE:
        raise Pc2Error(f"{path}: not a PC2 cache (signature {signature!r})")
    if version != VERSION or points <= 0 or samples < 0:
        raise Pc2Error(f"{path}: unsupported or damaged header (version {version}, {points} points, "
                       f"{samples} samples)")
    needed = _HEADER.size + samples * points * 12
    if len(data) < needed:
        raise Pc2Error(f"{path}: header promises {samples} samples but the file holds fewer")
    # Bytes past the promised samples are a frame whose header bump never happened: ignored.
    positions = np.frombuffer(data, dtype="<f4", count=samples * points * 3, offset=_HEADER.size)
    return positions.reshape(samples, points, 3), start, rate
