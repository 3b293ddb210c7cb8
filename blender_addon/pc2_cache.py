"""Writing `.pc2` point caches for Blender's Mesh Cache modifier, without the solver.

The format is the one `solver/pc2.py` reads and writes (that module is numpy-only too, but it
lives in the solver's package, which Blender cannot import): a 32-byte header — b"POINTCACHE2\\0",
int32 version 1, int32 point count, float32 start frame, float32 sample rate, int32 sample
count — then float32 x, y, z per point per sample, little-endian.

Two layers of safety for a long bake:
- each frame is written and fsynced before the header's sample count is raised, so the file
  is a valid cache of every frame finished so far at any moment;
- the cache is written under a temporary name beside the destination and swapped in with
  os.replace only when complete, so a cancelled or failed bake never damages the previous
  good cache that Blender is playing.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterable

import numpy as np

SIGNATURE = b"POINTCACHE2\0"
VERSION = 1
HEADER = struct.Struct("<12siiffi")
SAMPLE_COUNT_OFFSET = HEADER.size - 4


def _sync(stream) -> None:
    stream.flush()
    os.fsync(stream.fileno())


def write_pc2(path, frames: Iterable[np.ndarray], point_count: int, start_frame: float) -> int:
    """Write `frames` (each (point_count, 3)) as a new cache at `path`; return the frame count."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    written = 0
    try:
        with open(temporary, "wb") as stream:
            stream.write(HEADER.pack(SIGNATURE, VERSION, int(point_count), float(start_frame), 1.0, 0))
            _sync(stream)
            for frame in frames:
                data = np.asarray(frame, dtype="<f4")
                if data.shape != (point_count, 3) or not np.all(np.isfinite(data)):
                    raise ValueError(f"frame {written}: expected {point_count} finite points, got shape {data.shape}")
                stream.seek(0, os.SEEK_END)
                stream.write(data.tobytes())
                _sync(stream)
                written += 1
                stream.seek(SAMPLE_COUNT_OFFSET)
                stream.write(struct.pack("<i", written))
                _sync(stream)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return written


def map_pc2_frames(path) -> np.ndarray:
    """The cache's frames (samples, points, 3) float32, memory-mapped: a frame is read from disk
    when it is used, so a long cache costs nothing to open."""
    header = read_pc2_header(path)
    return np.memmap(path, dtype="<f4", mode="r", offset=HEADER.size,
                     shape=(header["samples"], header["points"], 3))


def read_pc2_header(path) -> dict:
    with open(path, "rb") as stream:
        signature, version, points, start, rate, samples = HEADER.unpack(stream.read(HEADER.size))
    if signature != SIGNATURE:
        raise ValueError(f"{path}: not a PC2 cache")
    return {"version": version, "points": points, "start_frame": start, "sample_rate": rate, "samples": samples}
