"""Sizes, coordinates and fds: numpy integers are accepted, anything else is an InvalidTensorError (never a
TypeError from deep inside)."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import FrameFormat, InvalidTensorError


@pytest.fixture
def plane():
    return interop.wrap(np.arange(64, dtype=np.uint8).reshape(8, 8))


def test_region_and_crop_take_numpy_integers(plane):
    r = plane.region(np.int64(2), np.int32(1), np.uint8(3), 2)
    assert r.shape == (2, 3) and np.asarray(r)[0, 0] == 10
    f = interop.Frame([plane], FrameFormat.GRAY8, np.int64(8), np.int64(8))
    assert (f.width, f.height) == (8, 8) and f.crop(np.int16(2), 0, 2, 2).width == 2


@pytest.mark.parametrize("args", [("0", 0, 1, 1), (0.5, 0, 1, 1), (0, 0, None, 1)])
def test_region_refuses_non_integers(plane, args):
    with pytest.raises(InvalidTensorError, match="must be an integer"):
        plane.region(*args)
    with pytest.raises(InvalidTensorError, match="must be an integer"):
        interop.Frame([plane], FrameFormat.GRAY8).crop(*args)


def test_frame_size_must_be_integers(plane):
    with pytest.raises(InvalidTensorError, match="width must be an integer"):
        interop.Frame([plane], FrameFormat.GRAY8, "8", 8)


def test_dma_sizes_and_fds():
    from interop.native import dmabuf as nd
    from interop.tensors.dma import FramePool, frame_from_fds

    fd, _ = nd.allocate(8192)
    try:
        f = frame_from_fds(np.int64(fd), FrameFormat.NV12, 16, 16)
        assert len(f) == 2
        f.release()
        with pytest.raises(InvalidTensorError, match="one fd per plane"):
            frame_from_fds(3.5, FrameFormat.NV12, 16, 16)
        with pytest.raises(InvalidTensorError, match="count must be an integer"):
            FramePool(FrameFormat.NV12, 16, 16, count="2")
        with pytest.raises(InvalidTensorError, match="width must be an integer"):
            FramePool(FrameFormat.NV12, "16", 16)
    finally:
        import os

        os.close(fd)
