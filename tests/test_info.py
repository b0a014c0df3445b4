"""TensorInfo validation, property-tested: valid layouts accepted, every out-of-bounds layout refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interop import FrameFormat, InvalidTensorError, TensorInfo
from interop.info import contiguous_strides, packed_offsets, plane_infos

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64, np.bool_]


def _overlaps(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    """Brute force: do two elements share a byte?"""
    if math.prod(shape) == 0:
        return False
    starts = [0]
    for d, s in zip(shape, strides):
        starts = [a + i * s for a in starts for i in range(d)]
    starts.sort()
    return any(b - a < itemsize for a, b in zip(starts, starts[1:]))


@st.composite
def padded_layouts(draw):
    """Valid layouts: a C or permuted order with padding added at each level."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    order = draw(st.permutations(range(ndim)))
    strides = [0] * ndim
    acc = dtype.itemsize
    for axis in reversed(order):
        strides[axis] = acc
        acc = acc * max(shape[axis], 1) + dtype.itemsize * draw(st.integers(0, 3))
    return shape, dtype, tuple(strides)


@given(padded_layouts())
@settings(max_examples=300, deadline=None)
def test_valid_layouts_accepted(layout):
    shape, dtype, strides = layout
    info = TensorInfo(shape, dtype, strides)
    assert info.shape == shape and info.strides == strides and info.dtype == dtype
    assert info.nbytes == math.prod(shape) * dtype.itemsize
    assert info.extent >= info.nbytes
    if info.size:
        # extent matches what numpy computes for the same view
        buf = np.zeros(info.extent, np.uint8)
        arr = np.lib.stride_tricks.as_strided(buf.view(np.uint8)[: info.extent], shape=shape, strides=strides)
        assert arr.shape == shape


@given(st.lists(st.integers(0, 5), min_size=1, max_size=3), st.data())
@settings(max_examples=400, deadline=None)
def test_arbitrary_strides_refused_exactly_when_invalid(shape, data):
    itemsize = 4
    strides = tuple(data.draw(st.integers(-8, 48)) for _ in shape)
    shape = tuple(shape)
    bad = any(s < 0 for s in strides) or any(s % itemsize for s in strides) or _overlaps(shape, strides, itemsize)
    try:
        TensorInfo(shape, np.float32, strides)
        accepted = True
    except InvalidTensorError:
        accepted = False
    if bad:
        assert not accepted, (shape, strides)
    # A conservative check may refuse some exotic interleaved layouts; every C-ordered padded one is accepted.
    if not bad and sorted(strides, reverse=True) == list(strides) and all(d > 1 for d in shape):
        ok = all(strides[i] >= strides[i + 1] * shape[i + 1] for i in range(len(shape) - 1)) and strides[-1] >= itemsize
        if ok:
            assert accepted, (shape, strides)


@pytest.mark.parametrize("shape,strides,msg", [
    ((-1, 4), None, "negative dimension"),
    ((2, 4), (4, -1), "negative stride"),
    ((2, 4), (8, 3), "multiples of the item size"),
    ((2, 4), (2, 1), "overlap"),
    ((2, 4), (8,), "one stride"),
])
def test_refusals_name_the_problem(shape, strides, msg):
    with pytest.raises(InvalidTensorError, match=msg):
        TensorInfo(shape, np.uint8 if msg != "multiples of the item size" else np.uint16, strides)


@pytest.mark.parametrize("dtype", [np.complex64, object, "U4", np.dtype([("a", np.uint8)]), "not-a-dtype"])
def test_unknown_dtypes_refused(dtype):
    with pytest.raises(InvalidTensorError, match="dtype"):
        TensorInfo((2,), dtype)


def test_padded_plane_nbytes_and_extent():
    info = TensorInfo((480, 854), np.uint8, (896, 1))
    assert info.nbytes == 480 * 854
    assert info.extent == 479 * 896 + 854
    assert not info.is_contiguous
    assert TensorInfo((480, 854)).is_contiguous
    assert contiguous_strides((2, 3, 4), 2) == (24, 8, 2)


def test_plane_layouts():
    y, u, v = plane_infos(FrameFormat.I420, 853, 479)
    assert y.shape == (479, 853) and u.shape == (240, 427) and v.shape == (240, 427)
    y, uv = plane_infos(FrameFormat.NV12, 854, 480, [896, 896])
    assert uv.shape == (240, 427, 2) and uv.strides == (896, 2, 1)
    y, uv = plane_infos(FrameFormat.P010, 64, 32)
    assert y.dtype == np.uint16 and uv.strides == (128, 4, 2)
    (rgb,) = plane_infos(FrameFormat.BGRX, 10, 5)
    assert rgb.shape == (5, 10, 4)
    offsets, total = packed_offsets(FrameFormat.NV12, 4, 4)
    assert offsets == [0, 16] and total == 24
    with pytest.raises(InvalidTensorError, match="pitch of at least"):
        plane_infos(FrameFormat.NV12, 854, 480, [800, 896])


@pytest.mark.parametrize(("fmt", "chroma", "dtype"), [
    (FrameFormat.I422, (479, 427), np.uint8), (FrameFormat.I444, (479, 853), np.uint8),
    (FrameFormat.I420_10, (240, 427), np.uint16), (FrameFormat.I422_10, (479, 427), np.uint16),
    (FrameFormat.I444_10, (479, 853), np.uint16), (FrameFormat.I420_12, (240, 427), np.uint16)])
def test_planar_yuv_layouts_of_the_decoder_formats(fmt, chroma, dtype):
    y, u, v = plane_infos(fmt, 853, 479)
    assert y.shape == (479, 853) and u.shape == v.shape == chroma
    assert y.dtype == u.dtype == v.dtype == dtype
    assert u.strides == (chroma[1] * np.dtype(dtype).itemsize, np.dtype(dtype).itemsize)
    offsets, total = packed_offsets(fmt, 853, 479)
    assert offsets == [0, y.nbytes, y.nbytes + u.nbytes] and total == y.nbytes + u.nbytes + v.nbytes


def test_gray10_is_one_uint16_plane():
    (y,) = plane_infos(FrameFormat.GRAY10, 10, 5, [32])
    assert y.shape == (5, 10) and y.dtype == np.uint16 and y.strides == (32, 2)
    with pytest.raises(InvalidTensorError, match="pitch of at least 20"):
        plane_infos(FrameFormat.GRAY10, 10, 5, [10])


def test_every_frame_format_has_a_plane_layout():
    from interop.info import plane_layout

    for fmt in FrameFormat:
        assert plane_layout(fmt), fmt


@pytest.mark.parametrize(("fmt", "rows", "height"), [
    (FrameFormat.I420, 720, 480), (FrameFormat.NV12, 720, 480), (FrameFormat.P010, 720, 480),
    (FrameFormat.I420_10, 720, 480), (FrameFormat.I422, 960, 480), (FrameFormat.I422_10, 962, 481),
    (FrameFormat.I444, 1443, 481), (FrameFormat.GRAY10, 7, 7)])
def test_stacked_height_follows_the_plane_layout(fmt, rows, height):
    from interop.info import plane_layout, stacked_height

    assert stacked_height(fmt, rows) == height
    # the planes at the buffer's pitch (planar chroma at pitch / sub_x) fill exactly those rows
    pitch = 256
    pitches = [pitch if s.channels else pitch // s.sub_x for s in plane_layout(fmt)]
    _, total = packed_offsets(fmt, 64, height, pitches)
    assert total == rows * pitch


@pytest.mark.parametrize(("fmt", "rows"), [(FrameFormat.I420, 721), (FrameFormat.I420, 724), (FrameFormat.I422, 961),
                                           (FrameFormat.I444, 1441), (FrameFormat.I444, 0)])
def test_stacked_height_refuses_buffers_no_frame_fills(fmt, rows):
    from interop.info import stacked_height

    with pytest.raises(InvalidTensorError, match="give width and height"):
        stacked_height(fmt, rows)
