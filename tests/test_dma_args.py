"""Bad arguments to every public DMA function: each gets a typed InteropError (also a ValueError or TypeError) that
says what to do, never a truncated value, a raw ZeroDivisionError/OverflowError, a hang or a leaked fd."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from interop import FrameFormat, InteropError, TensorInfo
from interop.errors import ResourceError
from interop.native import dmabuf as nd
from interop.tensors.dma import (
    DMABuffer,
    DMAContext,
    DMATensor,
    FramePool,
    aligned_pitches,
    buffer_from_fd,
    dma_frame,
    drm_fourcc_of,
    format_of_fourcc,
    fourcc,
    frame_from_fds,
)

NV12 = FrameFormat.NV12
INFO = TensorInfo((16, 16), np.uint8)
# values that are not the integer an argument wants: each must be refused, not truncated or wrapped around
NOT_INTS = [None, math.nan, math.inf, "4", b"4", 1.9, 4.0, True, [4], object()]
HUGE = 2**40


@pytest.fixture(scope="module")
def memfd():
    fd = nd.memfd_alloc(1 << 16, "dma-args")
    yield fd
    os.close(fd)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _refused(call: Callable[[], Any]) -> BaseException:
    n = _fds()
    with pytest.raises(InteropError) as ei:
        call()
    # a size larger than the machine's memory is a ResourceError (an OSError with ENOMEM), anything else a bad value
    assert isinstance(ei.value, (ValueError, TypeError, ResourceError)), \
        f"{type(ei.value).__name__} is neither ValueError, TypeError nor ResourceError"
    assert str(ei.value), "an error without a message"
    assert _fds() == n, "a refused call leaked an fd"
    return ei.value


def _cases(fd: int) -> list[tuple[str, Callable[[Any], Any], list[Any]]]:
    """(what, call taking the bad value, bad values)."""
    ctx = DMAContext("memfd")
    return [
        ("from_fd fd", lambda v: DMATensor.from_fd(v, info=INFO), NOT_INTS + [-1, HUGE, 2**31]),
        ("from_fd offset", lambda v: DMATensor.from_fd(fd, info=INFO, offset=v), NOT_INTS + [-1, HUGE]),
        ("from_fd size", lambda v: DMATensor.from_fd(fd, info=INFO, size=v), NOT_INTS[1:] + [0, -1, HUGE]),
        ("from_fd drm_fourcc", lambda v: DMATensor.from_fd(fd, info=INFO, drm_fourcc=v), NOT_INTS + [-1, 2**32]),
        ("from_fd drm_modifier", lambda v: DMATensor.from_fd(fd, info=INFO, drm_modifier=v), NOT_INTS + [-1, 2**64]),
        ("from_fd take_ownership", lambda v: DMATensor.from_fd(fd, info=INFO, take_ownership=v), [None, 1, "yes"]),
        ("from_fd info", lambda v: DMATensor.from_fd(fd, info=v), [None, (16, 16), "u8"]),
        ("buffer_from_fd fd", lambda v: buffer_from_fd(v), NOT_INTS + [-1, HUGE]),
        ("buffer_from_fd size", lambda v: buffer_from_fd(fd, size=v), NOT_INTS[1:] + [0, HUGE]),
        ("frame_from_fds fds", lambda v: frame_from_fds(v, NV12, 16, 16),
         NOT_INTS + [-1, HUGE, [fd, None], [fd, 1.5], [fd, HUGE], "ab"]),
        ("frame_from_fds format", lambda v: frame_from_fds(fd, v, 16, 16), [None, "NV12", 1]),
        ("frame_from_fds width", lambda v: frame_from_fds(fd, NV12, v, 16), NOT_INTS + [0, -16, HUGE]),
        ("frame_from_fds height", lambda v: frame_from_fds(fd, NV12, 16, v), NOT_INTS + [0, -16, HUGE]),
        ("frame_from_fds offsets", lambda v: frame_from_fds(fd, NV12, 16, 16, offsets=v),
         [[0, 2.7], [0.0, 256], [0, None], [0, "256"], [0, HUGE], [-1, 256], 5, "0,256"]),
        ("frame_from_fds pitches", lambda v: frame_from_fds(fd, NV12, 16, 16, pitches=v),
         [[16.5, 16], [16, None], [16, HUGE], 16]),
        ("frame_from_fds size", lambda v: frame_from_fds(fd, NV12, 16, 16, size=v), NOT_INTS[1:] + [0, HUGE]),
        ("frame_from_fds drm_modifier", lambda v: frame_from_fds(fd, NV12, 16, 16, drm_modifier=v),
         NOT_INTS + [-1, 2**64]),
        ("DMAContext kind", lambda v: DMAContext(v), ["heap", 3, b"memfd"]),
        ("allocate size", lambda v: ctx.allocate(v), NOT_INTS + [0, -1, 2**62]),
        ("DMABuffer.allocate size", lambda v: DMABuffer.allocate(v), NOT_INTS + [0, -4096]),
        ("DMABuffer.allocate kind", lambda v: DMABuffer.allocate(4096, kind=v), ["heap", 3]),
        ("nd.allocate size", lambda v: nd.allocate(v), NOT_INTS + [0, -1]),
        ("nd.memfd_alloc size", lambda v: nd.memfd_alloc(v), NOT_INTS + [0, -1]),
        ("alloc_tensor info", lambda v: ctx.alloc_tensor(v), [None, (4, 4), 16]),
        ("alloc_frame format", lambda v: ctx.alloc_frame(v, 16, 16), [None, "NV12", 0]),
        ("alloc_frame width", lambda v: ctx.alloc_frame(NV12, v, 16), NOT_INTS + [0, -2, HUGE]),
        ("alloc_frame height", lambda v: ctx.alloc_frame(NV12, 16, v), NOT_INTS + [0, -2, HUGE]),
        ("alloc_frame pitch_align", lambda v: ctx.alloc_frame(NV12, 16, 16, pitch_align=v), NOT_INTS + [0, -64, HUGE]),
        ("FramePool format", lambda v: FramePool(v, 16, 16, 1), [None, "NV12"]),
        ("FramePool width", lambda v: FramePool(NV12, v, 16, 1), NOT_INTS + [0, HUGE]),
        ("FramePool height", lambda v: FramePool(NV12, 16, v, 1), NOT_INTS + [0, HUGE]),
        ("FramePool count", lambda v: FramePool(NV12, 16, 16, v), NOT_INTS + [0, -1, HUGE]),
        ("FramePool pitch_align", lambda v: FramePool(NV12, 16, 16, 1, pitch_align=v), NOT_INTS + [0, -1]),
        ("FramePool context", lambda v: FramePool(NV12, 16, 16, 1, context=v), ["memfd", 1]),
        ("aligned_pitches align", lambda v: aligned_pitches(NV12, 16, v), NOT_INTS + [0, -64]),
        ("aligned_pitches width", lambda v: aligned_pitches(NV12, v, 64), NOT_INTS + [0, HUGE]),
        ("fourcc code", lambda v: fourcc(v), [None, 0x3231564E, "", "NV12X", "NV1\u00e9"]),
        ("format_of_fourcc value", lambda v: format_of_fourcc(v), NOT_INTS + [-1, 2**32]),
        ("drm_fourcc_of format", lambda v: drm_fourcc_of(v), [None, "NV12", 0x3231564E]),
        ("dma_frame planes", lambda v: dma_frame(v, NV12, 16, 16), [None, [], "planes", [None]]),
        ("inspect_fd fd", lambda v: nd.inspect_fd(v), NOT_INTS + [-1, HUGE]),
    ]


def _flat() -> list[Any]:
    return [pytest.param(i, j, id=f"{what}={v!r}"[:60])
            for i, (what, _, vals) in enumerate(_cases(0)) for j, v in enumerate(vals)]


@pytest.mark.parametrize("i,j", _flat())
def test_bad_argument_is_a_typed_error(memfd, i, j):
    what, call, vals = _cases(memfd)[i]
    _refused(lambda: call(vals[j]))


def test_float_offsets_sizes_and_pitches_are_refused_not_truncated(memfd):
    """offset=1.9 once mapped byte 1, offsets=[2.7] byte 2, size=100.7 a 100-byte buffer: silent wrong data."""
    info = TensorInfo((4,), np.uint8)
    assert "offset" in str(_refused(lambda: DMATensor.from_fd(memfd, info=info, offset=1.9)))
    assert "size" in str(_refused(lambda: DMATensor.from_fd(memfd, info=info, size=100.7)))
    assert "offsets[0]" in str(_refused(lambda: frame_from_fds([memfd], FrameFormat.GRAY8, 4, 4, offsets=[2.7])))
    assert "pitches[0]" in str(_refused(lambda: frame_from_fds([memfd], FrameFormat.GRAY8, 4, 4, pitches=[4.5])))
    # numpy integers are integers
    t = DMATensor.from_fd(np.int32(memfd), info=info, offset=np.int64(2), size=np.uint16(100))
    assert (t.offset, t.size) == (2, 100) and type(t.offset) is int
    t.release()


def test_pitch_align_zero_is_not_a_zero_division(memfd):
    e = _refused(lambda: DMAContext("memfd").alloc_frame(NV12, 16, 16, pitch_align=0))
    assert not isinstance(e, ZeroDivisionError) and "pitch_align" in str(e)


def test_huge_fd_is_not_an_overflow_error():
    e = _refused(lambda: DMATensor.from_fd(2**40, info=INFO))
    assert not isinstance(e, OverflowError)


def test_good_arguments_still_work(memfd):
    f = frame_from_fds([memfd, memfd], NV12, 16, 16, offsets=[0, 256], pitches=[16, 16], size=4096)
    assert [p.offset for p in f.tensors] == [0, 256] and f[0].size == 4096
    f.release()
    g = DMAContext("memfd").alloc_frame(NV12, 17, 9, pitch_align=1)
    assert g[0].pitch == 17
    g.release()
    with FramePool(NV12, 16, 16, 1, pitch_align=np.int64(32)) as pool:
        h = pool.acquire(timeout=np.float32(0.5))
        assert h[0].pitch == 32
        h.release()
