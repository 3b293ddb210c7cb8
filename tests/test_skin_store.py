"""The take's skin on disk (solver/physics/skin_store.py) and its streaming into RESULT.npz
(solver/npz_files.py `streamed`): the same archive np.savez writes, frames never all in memory."""
from __future__ import annotations

import numpy as np
import pytest

from solver.npz_files import read_npz, write_npz_atomically
from solver.physics.skin_store import SkinStore, StoredArray


def test_frames_round_trip_and_a_resumed_store_keeps_them(tmp_path):
    rng = np.random.default_rng(0)
    frames = rng.normal(size=(7, 11, 3))
    path = tmp_path / ".result.skin.npy"
    with SkinStore(path, 7, 11) as store:
        for index in (0, 1, 2):
            store.write(index, frames[index])
        np.testing.assert_array_equal(store.read(0, 3), frames[:3])
    with SkinStore(path, 7, 11, resume=True) as store:
        assert store.reopened
        np.testing.assert_array_equal(store.read(0, 3), frames[:3])
        for index in range(3, 7):
            store.write(index, frames[index])
        np.testing.assert_array_equal(np.concatenate(list(store.chunks())), frames)
    np.testing.assert_array_equal(np.load(path), frames)          # a plain .npy file
    with SkinStore(path, 8, 11, resume=True) as store:          # another take's shape: started afresh
        assert not store.reopened and store.read(0, 8).shape == (8, 11, 3)
    with pytest.raises(ValueError, match="expected"):
        with SkinStore(path, 8, 11) as store:
            store.write(0, np.zeros((10, 3)))


@pytest.mark.parametrize("compressed", [True, False])
def test_a_streamed_member_reads_back_as_np_savez_writes_it(tmp_path, compressed, monkeypatch):
    import solver.physics.skin_store as skin_store
    monkeypatch.setattr(skin_store, "_CHUNK_BYTES", 3 * 11 * 3 * 8)     # three frames a chunk
    rng = np.random.default_rng(1)
    frames, small = rng.normal(size=(10, 11, 3)), {"converged": np.ones(10, bool), "fps": np.array(24.0)}
    with SkinStore(tmp_path / "skin.npy", 10, 11) as store:
        for index, frame in enumerate(frames):
            store.write(index, frame)
        write_npz_atomically(tmp_path / "streamed.npz", small, compressed=compressed,
                             streamed={"skin_positions": store})
    arrays = read_npz(tmp_path / "streamed.npz")
    assert set(arrays) == {"converged", "fps", "skin_positions"}
    np.testing.assert_array_equal(arrays["skin_positions"], frames)
    np.testing.assert_array_equal(arrays["converged"], small["converged"])
    stored = StoredArray(tmp_path / "streamed.npz", "skin_positions", frames.shape)
    assert len(stored) == 10 and np.asarray(stored).shape == (10, 11, 3)
    np.testing.assert_array_equal(stored[4], frames[4])
    np.testing.assert_array_equal(np.stack(list(stored)), frames)


def test_a_source_that_streams_fewer_rows_than_it_promises_leaves_no_file(tmp_path):
    class Short:
        shape, dtype = (5, 2, 3), np.dtype("<f8")

        def chunks(self):
            yield np.zeros((3, 2, 3))

    with pytest.raises(ValueError, match="3 rows streamed, 5 promised"):
        write_npz_atomically(tmp_path / "short.npz", {"a": np.zeros(2)}, streamed={"skin_positions": Short()})
    assert list(tmp_path.iterdir()) == []
