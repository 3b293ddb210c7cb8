"""PC2 point caches: format, incremental appends, and what a crash mid-frame leaves behind."""
import struct

import numpy as np
import pytest

from solver.pc2 import Pc2Error, Pc2Writer, read_pc2


def _frames(count, points=5, seed=3):
    return np.random.default_rng(seed).normal(size=(count, points, 3)).astype(np.float32)


def test_frames_round_trip_with_start_and_rate(tmp_path):
    frames = _frames(4)
    with Pc2Writer(tmp_path / "c.pc2", 5, start_frame=10.0, sample_rate=0.5) as writer:
        for frame in frames:
            writer.append(frame)
    positions, start, rate = read_pc2(tmp_path / "c.pc2")
    np.testing.assert_array_equal(positions, frames)
    assert (start, rate) == (10.0, 0.5)


def test_header_layout_is_what_blender_reads(tmp_path):
    with Pc2Writer(tmp_path / "c.pc2", 2, start_frame=1.0) as writer:
        writer.append(np.zeros((2, 3)))
    raw = (tmp_path / "c.pc2").read_bytes()
    assert raw[:12] == b"POINTCACHE2\0"
    assert struct.unpack_from("<iiffi", raw, 12) == (1, 2, 1.0, 1.0, 1)
    assert len(raw) == 32 + 2 * 3 * 4


def test_every_prefix_of_a_bake_is_a_valid_cache(tmp_path):
    frames = _frames(3)
    writer = Pc2Writer(tmp_path / "c.pc2", 5)
    assert read_pc2(tmp_path / "c.pc2")[0].shape == (0, 5, 3)
    for count, frame in enumerate(frames, start=1):
        writer.append(frame)
        positions, _, _ = read_pc2(tmp_path / "c.pc2")       # read while the writer is still open
        np.testing.assert_array_equal(positions, frames[:count])
    writer.close()


def test_a_frame_written_but_not_yet_counted_is_ignored(tmp_path):
    """A crash between writing a frame and bumping the header leaves the earlier frames intact."""
    frames = _frames(2)
    with Pc2Writer(tmp_path / "c.pc2", 5) as writer:
        writer.append(frames[0])
    with open(tmp_path / "c.pc2", "ab") as stream:           # the frame of an interrupted append
        stream.write(frames[1].tobytes()[:37])
    positions, _, _ = read_pc2(tmp_path / "c.pc2")
    np.testing.assert_array_equal(positions, frames[:1])


def test_bad_frames_and_files_are_refused(tmp_path):
    with Pc2Writer(tmp_path / "c.pc2", 5) as writer:
        with pytest.raises(Pc2Error, match="shape"):
            writer.append(np.zeros((4, 3)))
        bad = np.zeros((5, 3))
        bad[2, 1] = np.nan
        with pytest.raises(Pc2Error, match="NaN"):
            writer.append(bad)
        assert writer.sample_count == 0
    (tmp_path / "x.pc2").write_bytes(b"not a cache at all, really not, no" * 2)
    with pytest.raises(Pc2Error, match="signature"):
        read_pc2(tmp_path / "x.pc2")
    raw = bytearray((tmp_path / "c.pc2").read_bytes())
    raw[28:32] = struct.pack("<i", 9)                        # promises frames that are not there
    (tmp_path / "y.pc2").write_bytes(bytes(raw))
    with pytest.raises(Pc2Error, match="promises"):
        read_pc2(tmp_path / "y.pc2")
