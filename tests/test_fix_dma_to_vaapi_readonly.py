"""DMA -> VAAPI: a frame with a read-only plane is refused for WRITE / READ_WRITE (the fake driver, which maps
the fd read-write, cannot import a read-only fd at all, so the READ case is not tested here)."""

from __future__ import annotations

import os

import pytest

import interop
from interop import AccessMode, FrameFormat, MemoryType
from interop.errors import InvalidTensorError
from interop.tensors.dma import frame_from_fds

W, H = 64, 48


def _frame(read_only: bool):
    fd = os.memfd_create("interop-test")
    os.ftruncate(fd, W * H * 3 // 2)
    ro = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY if read_only else os.O_RDWR)
    try:
        return frame_from_fds(ro, FrameFormat.NV12, W, H)
    finally:
        os.close(ro)
        os.close(fd)


@pytest.mark.parametrize("mode", [AccessMode.WRITE, AccessMode.READ_WRITE])
def test_write_over_read_only_planes_is_refused(fake_va, va_ctx, mode) -> None:
    df = _frame(read_only=True)
    assert not any(t.writable for t in df)
    before = fake_va.live()
    with pytest.raises(InvalidTensorError, match="AccessMode.READ"):
        interop.map(df, MemoryType.VAAPI, mode=mode)
    assert fake_va.live() == before, "no surface was imported"


def test_writable_planes_give_a_writable_frame(fake_va, va_ctx) -> None:
    df = _frame(read_only=False)
    for mode in (AccessMode.READ, AccessMode.WRITE):
        vf = interop.map(df, MemoryType.VAAPI, mode=mode)
        assert all(t.writable for t in vf)
        vf.release()
