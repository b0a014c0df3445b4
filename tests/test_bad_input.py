"""Bad input: a catalogue of wrong calls, each refused with the exact InteropError subclass and a message that says
what to do, plus hypothesis fuzzing of TensorInfo, wrap() and frame layouts.

Catalogue rows are (category, backend): a row whose backend is absent skips naming it. ``CATALOGUE`` is also
what docs/reliability.md counts.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import interop
from interop import (
    AccessMode,
    BackendUnavailableError,
    ContextMismatchError,
    CopyRequiredError,
    Frame,
    FrameFormat,
    InteropError,
    InvalidTensorError,
    MemoryType,
    NoRouteError,
    Tensor,
    TensorInfo,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from interop.errors import InteropBufferError, ModelFileError, StateError, WrongMemoryError
from interop.info import plane_infos, plane_layout
from tests.reliability import backends as B
from tests.reliability import stats


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    backend: str
    run: Callable[[], object]
    exc: type[InteropError]
    remedy: str  # regex that the message must contain: what the caller should do
    bug: str = ""  # a known bug in the library (xfail strict until its owner fixes it)


CATALOGUE: list[Case] = []


def case(category: str, backend: str, exc: type[InteropError], remedy: str,
         bug: str = "") -> Callable[[Callable[[], object]], Callable[[], object]]:
    def deco(fn: Callable[[], object]) -> Callable[[], object]:
        CATALOGUE.append(Case(fn.__name__.lstrip("_"), category, backend, fn, exc, remedy, bug))
        return fn

    return deco


def need(module: str, what: str):
    try:
        return B.need_module(module, what)
    except B.Missing as e:
        pytest.skip(str(e))


def need_attr(module: str, attr: str, what: str):
    try:
        return B.need_attr(module, attr, what)
    except B.Missing as e:
        pytest.skip(str(e))


U8 = np.uint8

# ---- shape / dtype / strides ------------------------------------------------------------------------------


@case("shape/dtype/strides", "core", InvalidTensorError, r"negative dimension")
def _info_negative_dim():
    TensorInfo((-1, 4))


@case("shape/dtype/strides", "core", InvalidTensorError, r"flip the data")
def _info_negative_stride():
    TensorInfo((2, 2), U8, (-2, 1))


@case("shape/dtype/strides", "core", InvalidTensorError, r"strides are in bytes")
def _info_stride_not_itemsize_multiple():
    TensorInfo((2, 2), np.float32, (6, 3))


@case("shape/dtype/strides", "core", InvalidTensorError, r"give each row at least its width in bytes")
def _info_overlapping_strides():
    TensorInfo((4, 4), U8, (2, 1))


@case("shape/dtype/strides", "core", InvalidTensorError, r"one stride \(in bytes\) per dimension")
def _info_strides_length():
    TensorInfo((2, 2), U8, (2,))


@case("shape/dtype/strides", "core", InvalidTensorError, r"use one of")
def _info_unsupported_dtype():
    TensorInfo((2,), np.complex64)


@case("shape/dtype/strides", "core", InvalidTensorError, r"use one of")
def _info_unknown_dtype_name():
    TensorInfo((2,), "not-a-dtype")


@case("shape/dtype/strides", "core", InvalidTensorError, r"astype")
def _info_byte_swapped_dtype():
    TensorInfo((2,), np.dtype(">f4") if sys.byteorder == "little" else np.dtype("<f4"))


@case("shape/dtype/strides", "core", InvalidTensorError, r"must be an integer")
def _info_float_dimension():
    TensorInfo((2.5, 3))


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"use one of")
def _wrap_object_array():
    interop.wrap(np.array([object(), object()]))


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"use one of")
def _wrap_structured_array():
    interop.wrap(np.zeros(3, dtype=[("a", "u1"), ("b", "f4")]))


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"flip the data")
def _wrap_reversed_array():
    interop.wrap(np.arange(10, dtype=U8)[::-1])


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"\(H\*3/2, W\)")
def _wrap_nv12_wrong_rows():
    interop.wrap(np.zeros((5, 4), U8), format=FrameFormat.NV12)


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"shaped \(H, W, 3\)")
def _wrap_rgb_wrong_channels():
    interop.wrap(np.zeros((4, 4, 4), U8), format=FrameFormat.RGB)


@case("shape/dtype/strides", "CPU", InvalidTensorError, r"of uint8")
def _wrap_rgb_wrong_dtype():
    interop.wrap(np.zeros((4, 4, 3), np.float32), format=FrameFormat.RGB)


@case("shape/dtype/strides", "core", InvalidTensorError, r"\(H, W\) or \(H, W, C\)")
def _region_of_1d_tensor():
    interop.wrap(np.zeros(8, U8)).region(0, 0, 1, 1)


@case("shape/dtype/strides", "core", InvalidTensorError, r"crop on even coordinates")
def _crop_odd_nv12():
    interop.wrap(np.zeros((6, 4), U8), format=FrameFormat.NV12).crop(1, 1, 2, 2)


@case("shape/dtype/strides", "core", InvalidTensorError, r"at least \d+ bytes")
def _plane_pitch_too_small():
    plane_infos(FrameFormat.NV12, 64, 32, [32, 64])


@case("shape/dtype/strides", "OpenVINO", InvalidTensorError, r"contiguous|ascontiguousarray|copy")
def _openvino_from_strided_numpy():
    OVT = need_attr("interop.tensors.openvino", "OpenVINOTensor", "the OpenVINO backend")
    need("openvino", "OpenVINO")
    OVT.from_numpy(np.zeros((8, 8), np.float32)[:, ::2], parent=None)


@case("shape/dtype/strides", "OpenCV", InvalidTensorError, r"use one of")
def _opencv_umat_unsupported_dtype():
    need("interop.tensors.opencv", "the OpenCV backend")
    cv2 = need("cv2", "OpenCV")
    interop.map(cv2.Mat(np.zeros((4, 4), np.uint64)), MemoryType.OPENCV_UMAT, allow_copy=True)


# ---- offsets and buffer sizes -----------------------------------------------------------------------------


@case("offset/size", "CPU", InvalidTensorError, r"check the shape, strides and offset")
def _wrap_buffer_too_small():
    interop.wrap(bytearray(10), info=TensorInfo((4, 4), U8))


@case("offset/size", "core", InvalidTensorError, r"not inside the")
def _region_outside():
    interop.wrap(np.zeros((4, 4), U8)).region(2, 2, 4, 4)


@case("offset/size", "core", InvalidTensorError, r"not inside the")
def _crop_negative():
    interop.wrap(np.zeros((4, 4, 3), U8), format=FrameFormat.RGB).crop(-2, 0, 2, 2)


@case("offset/size", "DMA", InvalidTensorError, r"give the plane's byte offset")
def _dma_negative_offset():
    with _memfd(4096) as fd:
        _dma_tensor().from_fd(fd, info=TensorInfo((4, 4), U8), offset=-16)


@case("offset/size", "DMA", InvalidTensorError, r"check the plane offset")
def _dma_offset_beyond_end():
    with _memfd(4096) as fd:
        _dma_tensor().from_fd(fd, info=TensorInfo((4, 4), U8), offset=8192)


@case("offset/size", "DMA", InvalidTensorError, r"too short")
def _dma_buffer_too_small():
    with _memfd(4096) as fd:
        _dma_tensor().from_fd(fd, info=TensorInfo((128, 128), U8))


@case("offset/size", "DMA", InvalidTensorError, r"size=|larger than")
def _dma_size_larger_than_fd():
    with _memfd(4096) as fd:
        _dma_tensor().from_fd(fd, info=TensorInfo((4, 4), U8), size=1 << 20)


@case("offset/size", "OpenCL", InvalidTensorError, r"bytes|size")
def _opencl_buffer_too_small():
    buf, ctx = _opencl_buffer(64)
    interop.wrap(buf, info=TensorInfo((16, 16), U8), context=ctx)


@case("offset/size", "USM", InvalidTensorError, r"needs \d+ bytes")
def _usm_buffer_too_small():
    mem, ctx = _usm_shared(64)
    interop.wrap(mem, info=TensorInfo((16, 16), U8), context=ctx)


def _dma_tensor():
    return need_attr("interop.tensors.dma", "DMATensor", "the DMA backend")


def _new_memfd(size: int) -> int:
    """A memfd of ``size`` bytes that the caller closes (or hands over)."""
    _dma_tensor()  # skips without the DMA backend before anything is allocated
    return need_attr("interop.native.dmabuf", "memfd_alloc", "the DMA native layer")(size)


@contextmanager
def _closing_fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def _memfd(size: int) -> Iterator[int]:
    with _closing_fd(_new_memfd(size)) as fd:
        yield fd


def _opencl_buffer(nbytes: int):
    """A pyopencl.Buffer of ``nbytes`` in the default OpenCL context, and that context."""
    need("interop.tensors.opencl", "the OpenCL backend")
    cl = need("pyopencl", "pyopencl")
    ctx = _default_ctx(MemoryType.OPENCL)
    return cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, nbytes), ctx


def _usm_shared(nbytes: int):
    """A dpctl shared USM allocation of ``nbytes`` on the default USM context's queue, and that context."""
    need("interop.tensors.usm", "the USM backend")
    dpm = need("dpctl.memory", "dpctl")
    ctx = _default_ctx(MemoryType.USM)
    return dpm.MemoryUSMShared(nbytes, queue=ctx.native), ctx


def _default_ctx(mt: MemoryType):
    try:
        return interop.Context.default(mt)
    except BackendUnavailableError as e:
        B.skip_if_lacking_hardware(e, f"no {mt.name} context here")
        pytest.fail(f"no default {mt.name} context on a machine with every tier A backend: {e}")


# ---- file descriptors -------------------------------------------------------------------------------------


@case("fd", "DMA", InvalidTensorError, r"keep the fd open")
def _dma_closed_fd():
    fd = _new_memfd(4096)
    os.close(fd)
    _dma_tensor().from_fd(fd, info=TensorInfo((4, 4), U8))


@case("fd", "DMA", InvalidTensorError, r"pass the file descriptor of an open")
def _dma_negative_fd():
    _dma_tensor().from_fd(-1, info=TensorInfo((4, 4), U8))


@case("fd", "DMA", InvalidTensorError, r"pass a dma-buf fd")
def _dma_foreign_fd_pipe():
    DMATensor = _dma_tensor()
    r, w = os.pipe()
    with _closing_fd(r), _closing_fd(w):
        DMATensor.from_fd(r, info=TensorInfo((4, 4), U8), size=16)


@case("offset/size", "DMA", InvalidTensorError, r"one offset per plane|offsets")
def _dma_frame_too_few_offsets():
    frame_from_fds = need_attr("interop.tensors.dma", "frame_from_fds", "the DMA backend")
    with _memfd(4096) as fd:
        frame_from_fds(fd, FrameFormat.NV12, 16, 16, offsets=[0])


@case("fd", "DMA", InvalidTensorError, r"open it O_RDWR or O_RDONLY")
def _dma_write_only_fd():
    DMATensor = _dma_tensor()
    with tempfile.NamedTemporaryFile() as f:
        f.write(b"\0" * 4096)
        f.flush()
        with _closing_fd(os.open(f.name, os.O_WRONLY)) as fd:
            DMATensor.from_fd(fd, info=TensorInfo((4, 4), U8))


@case("fd", "DMA", InvalidTensorError, r"pass f.fileno\(\)")
def _dma_fd_not_an_int():
    with tempfile.TemporaryFile() as f:
        _dma_tensor().from_fd(f, info=TensorInfo((4, 4), U8))


@case("fd", "DMA", InvalidTensorError, r"not a buffer: pass a dma-buf or memfd fd")
def _dma_device_node_fd():
    DMATensor = _dma_tensor()
    with _closing_fd(os.open("/dev/null", os.O_RDWR)) as fd:
        DMATensor.from_fd(fd, info=TensorInfo((4, 4), U8), size=16)


# ---- contexts ---------------------------------------------------------------------------------------------


@case("context", "CPU", UnsupportedTypeError, r"cannot belong to")
def _wrap_array_with_foreign_context():
    interop.wrap(np.zeros(4, U8), context=_default_ctx(MemoryType.DMA))


@case("context", "core", UnsupportedTypeError, r"either as `to` or as `context=`")
def _map_context_twice():
    ctx = interop.Context.default(MemoryType.CPU)
    interop.map(np.zeros(4, U8), ctx, context=ctx)


@case("context", "core", UnsupportedTypeError, r"is a CPU context, not")
def _map_context_of_other_type():
    interop.map(np.zeros((4, 4), U8), MemoryType.DMA, context=interop.Context.default(MemoryType.CPU),
                allow_copy=True)


@case("context", "OpenCL", ContextMismatchError, r"context|OpenCLContext")
def _opencl_buffer_from_foreign_context():
    need("interop.tensors.opencl", "the OpenCL backend")
    cl = need("pyopencl", "pyopencl")
    ctx = _default_ctx(MemoryType.OPENCL)
    other = cl.Context(devices=ctx.native.devices)  # a second cl_context on the same device
    buf = cl.Buffer(other, cl.mem_flags.READ_WRITE, 256)
    interop.wrap(buf, info=TensorInfo((16, 16), U8), context=ctx)


@case("context", "core", ContextMismatchError, r"interop.map\(obj, to\)")
def _mapper_made_for_another_context():
    from interop.mapper import registered

    for (src, _dst), cls in sorted(registered().items(), key=lambda kv: kv[1].name):
        if src is MemoryType.CPU and not cls.missing() and cls.tier == "A":
            class Other(interop.Context):
                memory_type = MemoryType.CPU

            cls(input_context=Other(native=object())).map(interop.wrap(np.zeros((4, 4), U8)))
            return
    pytest.fail("no tier A mapper from the CPU can run here")


@case("arguments", "core", WrongMemoryError, r"interop.map\(obj, to\) wraps framework objects")
def _mapper_given_a_framework_object():
    from interop.mapper import registered

    # MemoryMapper.map takes Tensors and Frames only (interop.map and chains wrap): a numpy array is not its input
    cls = next(c for c in registered().values() if c.name == "cpu_to_dma")
    cls().map(np.zeros((4, 4), U8))


# ---- pixel formats ----------------------------------------------------------------------------------------


@case("pixel format", "core", UnsupportedTypeError, r"must be an interop.FrameFormat")
def _format_as_string():
    interop.wrap(np.zeros((6, 4), U8), format="NV12")


@case("pixel format", "FFmpeg", UnsupportedFormatError, r"supported|convert|reformat")
def _ffmpeg_unsupported_pixel_format():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    av = need("av", "PyAV")
    interop.wrap(av.VideoFrame(16, 16, "yuyv422"))


@case("pixel format", "DMA", UnsupportedFormatError, r"supported:")
def _dma_unknown_fourcc():
    fmt_of = need_attr("interop.tensors.dma", "format_of_fourcc", "the DMA backend")
    fmt_of(0x20202020)


@case("pixel format", "core", UnsupportedFormatError, r"no plane layout")
def _plane_layout_unknown():
    plane_layout("NV12")  # type: ignore[arg-type]


# ---- objects of unknown types / bad arguments -------------------------------------------------------------


@case("unknown type", "core", UnsupportedTypeError, r"it wraps:")
def _wrap_unknown_object():
    interop.wrap(object())


@case("unknown type", "core", UnsupportedTypeError, r"it wraps:")
def _map_unknown_object():
    interop.map({"a": 1}, MemoryType.CPU)


@case("unknown type", "core", UnsupportedTypeError, r"must be an interop.TensorInfo")
def _wrap_info_as_tuple():
    interop.wrap(bytearray(16), info=(4, 4))


@case("arguments", "core", UnsupportedTypeError, r"use MemoryType.CPU")
def _map_to_string():
    interop.map(np.zeros(4, U8), "cpu")


@case("arguments", "core", UnsupportedTypeError, r"must be an interop.MemoryType")
def _map_to_int():
    interop.map(np.zeros(4, U8), 3)


@case("arguments", "core", UnsupportedTypeError, r"READ, WRITE, READ_WRITE")
def _map_bad_mode():
    interop.map(np.zeros(4, U8), MemoryType.CPU, mode="r")


@case("arguments", "core", UnsupportedTypeError, r"True or False")
def _route_allow_copy_not_bool():
    interop.route(MemoryType.CPU, MemoryType.DMA, allow_copy="yes")


@case("arguments", "core", UnsupportedTypeError, r"MemoryType.parse")
def _route_from_string():
    interop.route("cpu", MemoryType.DMA)


@case("arguments", "core", UnsupportedTypeError, r"choose one of")
def _parse_unknown_memory_type():
    MemoryType.parse("tpu")


@case("arguments", "core", InvalidTensorError, r"its handles are")
def _unknown_handle_key():
    interop.wrap(np.zeros(4, U8)).handle("dma_fd")


@case("arguments", "core", InvalidTensorError, r"use interop.map\(\) to find a route")
def _mapper_given_wrong_memory_type():
    from interop.mapper import registered

    for (src, _dst), cls in sorted(registered().items(), key=lambda kv: kv[1].name):
        if src is not MemoryType.CPU:
            cls().map(interop.wrap(np.zeros((4, 4), U8)))
            return
    pytest.fail("no mapper from a non-CPU memory type is registered")


# ---- issue 15: argument types, buffers that are gone, layouts wrap() cannot read as bytes -------------------


@case("arguments", "core", UnsupportedTypeError, r"choose one of")
def _parse_none_as_memory_type():
    MemoryType.parse(None)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"True or False")
def _map_allow_copy_int():
    interop.map(np.zeros(4, U8), MemoryType.CPU, allow_copy=1)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"True or False")
def _map_allow_copy_none():
    interop.map(np.zeros(4, U8), MemoryType.CPU, allow_copy=None)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"READ, WRITE, READ_WRITE")
def _map_mode_bool():
    interop.map(np.zeros(4, U8), MemoryType.DMA, mode=True, allow_copy=True)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"must be an interop.MemoryType")
def _map_to_bool():
    interop.map(np.zeros(4, U8), True)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"must be an interop.Context")
def _wrap_context_of_wrong_type():
    interop.wrap(np.zeros(4, U8), context=MemoryType.CPU)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"must be an interop.Context")
def _map_context_of_wrong_type():
    interop.map(np.zeros(4, U8), MemoryType.DMA, context="cpu", allow_copy=True)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"must be an interop.FrameFormat")
def _wrap_format_as_int():
    interop.wrap(np.zeros((6, 4), U8), format=1)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"MemoryType or an interop.Context")
def _route_from_bool():
    interop.route(True, MemoryType.CPU)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"True or False")
def _tensor_writable_not_bool():
    Tensor(None, TensorInfo((4,), U8), writable="no")  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"interop.Context or None")
def _tensor_context_of_wrong_type():
    from interop.tensors.cpu import CPUTensor

    CPUTensor(np.zeros(4, U8), context=MemoryType.CPU)  # type: ignore[arg-type]


@case("arguments", "core", UnsupportedTypeError, r"key name such as")
def _handle_key_not_a_string():
    interop.wrap(np.zeros(4, U8)).handle(0)  # type: ignore[arg-type]


@case("arguments", "core", InvalidTensorError, r"must be an integer, got the boolean")
def _region_with_bool():
    interop.wrap(np.zeros((4, 4), U8)).region(True, 0, 1, 1)


@case("shape/dtype/strides", "core", InvalidTensorError, r"must be an integer, got the boolean")
def _info_bool_dimension():
    TensorInfo((True, 4))


@case("shape/dtype/strides", "core", InvalidTensorError, r"must be an integer")
def _info_float_dimension_after_the_int_one():
    TensorInfo((4, 4))  # interned first: the cache must not answer for (4.0, 4)
    TensorInfo((4.0, 4))


@case("shape/dtype/strides", "core", InvalidTensorError, r"must be an integer")
def _info_numpy_float_stride_after_the_int_one():
    TensorInfo((4, 4), U8, (4, 1))
    TensorInfo((4, 4), U8, (np.float64(4), 1))


@case("shape/dtype/strides", "core", InvalidTensorError, r"tuple of integers")
def _info_shape_as_set():
    TensorInfo({4, 2})


@case("frame", "core", UnsupportedTypeError, r"list of interop.Tensor planes")
def _frame_of_none():
    Frame(None, FrameFormat.GRAY8)  # type: ignore[arg-type]


@case("frame", "core", UnsupportedTypeError, r"pass \[tensor\]")
def _frame_of_one_tensor_not_in_a_list():
    Frame(interop.wrap(np.zeros((4, 4), U8)), FrameFormat.GRAY8)  # type: ignore[arg-type]


@case("frame", "core", InvalidTensorError, r"give the frame's visible width and height")
def _frame_size_disagrees_with_planes():
    Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, 100, 100)


@case("frame", "core", InvalidTensorError, r"give the frame's visible width and height")
def _frame_chroma_plane_of_wrong_size():
    y, uv = interop.wrap(np.zeros((8, 8), U8)), interop.wrap(np.zeros((2, 2, 2), U8))
    Frame([y, uv], FrameFormat.NV12, 8, 8)


@case("frame", "core", InvalidTensorError, r"width must be an integer, got the boolean")
def _frame_width_bool():
    Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, True, 4)


@case("frame", "core", UnsupportedTypeError, r"interop.Context or None")
def _frame_context_of_wrong_type():
    Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, context=MemoryType.CPU)  # type: ignore[arg-type]


@case("frame", "core", UnsupportedTypeError, r"Fraction\(1, 25\)")
def _frame_time_base_float():
    Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, time_base=0.04)  # type: ignore[arg-type]


@case("frame", "core", UnsupportedTypeError, r"interop.ColorSpace or None")
def _frame_colorspace_string():
    Frame([interop.wrap(np.zeros((4, 4), U8))], FrameFormat.GRAY8, colorspace="bt709")  # type: ignore[arg-type]


@case("buffers", "CPU", InteropBufferError, r"numpy.asarray\(\) it first")
def _wrap_non_contiguous_memoryview():
    interop.wrap(memoryview(np.zeros((4, 4), U8)[:, ::2]))


@case("buffers", "CPU", InvalidTensorError, r"keep the buffer open")
def _wrap_closed_mmap():
    import mmap

    m = mmap.mmap(-1, 4096)
    m.close()
    interop.wrap(m)


@case("buffers", "CPU", InvalidTensorError, r"keep the buffer open")
def _wrap_released_memoryview():
    mv = memoryview(bytearray(16))
    mv.release()
    interop.wrap(mv)


@case("buffers", "CPU", InvalidTensorError, r"ascontiguousarray")
def _wrap_i420_column_stride():
    interop.wrap(np.arange(48, dtype=U8).reshape(6, 8)[:, ::2], format=FrameFormat.I420)


@case("buffers", "CPU", InvalidTensorError, r"ascontiguousarray")
def _wrap_nv12_rows_reversed():
    interop.wrap(np.zeros((6, 8), U8)[::-1], format=FrameFormat.NV12)


@case("buffers", "CPU", InvalidTensorError, r"ascontiguousarray")
def _wrap_p010_fortran_order():
    interop.wrap(np.asfortranarray(np.zeros((6, 8), np.uint16)), format=FrameFormat.P010)


@case("buffers", "CPU", InvalidTensorError, r"ascontiguousarray")
def _wrap_strided_view_with_info():
    interop.wrap(np.zeros((8, 8), U8)[:, ::2], info=TensorInfo((32,), U8))


@case("buffers", "CPU", InteropBufferError, r"max_version")
def _dlpack_legacy_capsule_of_read_only_tensor():
    a = np.zeros(4, U8)
    a.flags.writeable = False
    interop.wrap(a).__dlpack__()


# ---- routes -----------------------------------------------------------------------------------------------


def _pair(copying: bool):
    from interop.routing import route as _route

    for s in MemoryType:
        for d in MemoryType:
            if s is d:
                continue
            try:
                _route(s, d)
            except CopyRequiredError:
                if copying:
                    return s, d
            except NoRouteError:
                if not copying:
                    return s, d
    pytest.fail(f"no pair of memory types {'needs a copy' if copying else 'has no route'} in the routing graph")


@case("route", "core", NoRouteError, r"interop can reach")
def _no_route():
    s, d = _pair(copying=False)
    interop.route(s, d, allow_copy=True)


@case("route", "core", CopyRequiredError, r"allow_copy=True")
def _copy_required():
    s, d = _pair(copying=True)
    interop.route(s, d)


# ---- missing backends (simulated in a subprocess where the framework cannot be imported) -----------------

_BLOCK = textwrap.dedent("""
    import importlib.abc, importlib.util, sys
    BLOCK = {block!r}
    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCK:
                raise ImportError(f"No module named {{name!r}} (blocked by the test)")
            return None
    sys.meta_path.insert(0, Blocker())
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, *a, **k: None if name.split(".")[0] in BLOCK else _find_spec(name, *a, **k)
    import numpy as np, interop
    from interop import MemoryType
    try:
        {call}
    except interop.InteropError as e:
        print("RAISED", type(e).__name__, "|", e)
    else:
        print("NO ERROR")
""")


def _blocked(block: list[str], call: str) -> None:
    """Run ``call`` where ``block`` cannot be imported; re-raise the InteropError it printed, by class."""
    code = _BLOCK.format(block=block, call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    line = next((x for x in out.stdout.splitlines() if x.startswith(("RAISED", "NO ERROR"))), None)
    assert line is not None, f"subprocess failed: {out.stderr[-2000:]}"
    if line == "NO ERROR":
        return
    name, msg = re.match(r"RAISED (\w+) \| (.*)", line, re.S).groups()  # type: ignore[union-attr]
    raise getattr(interop, name, InteropError)(msg)


@case("missing backend", "FFmpeg", BackendUnavailableError, r"pip install 'interop-video\[")
def _missing_pyav():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    _blocked(["av"], "from interop.tensors.ffmpeg import video_frame_from_planes as v; "
                     "v([np.zeros((4, 4), np.uint8)] + [np.zeros((2, 2), np.uint8)] * 2, interop.FrameFormat.I420, 4, 4)")


@case("missing backend", "OpenCL", BackendUnavailableError, r"pip install 'interop-video\[")
def _missing_pyopencl():
    need("interop.tensors.opencl", "the OpenCL backend")
    _blocked(["pyopencl"], "interop.Context.default(MemoryType.OPENCL)")


@case("missing backend", "OpenCV", BackendUnavailableError, r"pip install 'interop-video\[")
def _missing_cv2():
    need("interop.tensors.opencv", "the OpenCV backend")
    _blocked(["cv2"], "interop.Context.default(MemoryType.OPENCV_UMAT)")


@case("missing backend", "route step", BackendUnavailableError, r"pip install 'interop-video\[")
def _missing_framework_of_a_route_step():
    from interop.mapper import registered

    steps = sorted((c for c in registered().values() if c.src is MemoryType.CPU and c.requires and c.tier == "A"),
                   key=lambda c: c.name)
    assert steps, "no tier A CPU mapper that needs a framework is registered"
    cls = steps[0]
    _blocked(list(cls.requires), f"interop.map(np.zeros((4, 4), np.uint8), MemoryType.{cls.dst.name}, allow_copy=True)")


# ---- released tensors -------------------------------------------------------------------------------------


def _released_cpu_tensor(shape: tuple[int, ...] = (4,)) -> Tensor:
    t = interop.wrap(np.zeros(shape, U8))
    t.release()
    return t


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_data_ptr():
    _released_cpu_tensor().data_ptr  # noqa: B018


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_handle():
    _released_cpu_tensor().handle("data")


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_dlpack():
    _released_cpu_tensor().__dlpack__(max_version=(1, 0))


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_info():
    _released_cpu_tensor().info  # noqa: B018


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_numpy():
    np.asarray(_released_cpu_tensor())


@case("released", "core", InvalidTensorError, r"map or wrap the source again")
def _released_tensor_map():
    interop.map(_released_cpu_tensor((4, 4)), MemoryType.DMA, allow_copy=True)


@case("released", "core", InvalidTensorError, r"decode, wrap or map it again")
def _released_frame():
    f = interop.wrap(np.zeros((4, 4, 3), U8), format=FrameFormat.RGB)
    f.release()
    f.tensors  # noqa: B018


@case("released", "DMA", InvalidTensorError, r"map or wrap the source again|wrap the fd again")
def _released_dma_tensor_fd():
    t = _dma_tensor().from_fd(_new_memfd(4096), info=TensorInfo((4, 4), U8), take_ownership=True)
    t.release()
    t.fd  # noqa: B018


@case("released", "FFmpeg", InvalidTensorError, r"decode, wrap or map it again|map or wrap the source again")
def _released_ffmpeg_frame():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    av = need("av", "PyAV")
    f = interop.wrap(av.VideoFrame(16, 16, "yuv420p"))
    f.release()
    interop.map(f, MemoryType.CPU)


def _released(kind: str, attr: str) -> None:
    B.require_kind(kind)
    t = B.make(kind, np.random.default_rng(0)).obj
    t.release()
    getattr(t, attr)


@case("released", "OpenCL", InvalidTensorError, r"map or wrap the source again")
def _released_opencl_cl_mem():
    _released("opencl-buffer", "cl_mem")


@case("released", "USM", InvalidTensorError, r"map or wrap the source again")
def _released_usm_pointer():
    _released("usm-shared", "pointer")


@case("released", "OpenCV", InvalidTensorError, r"map or wrap the source again")
def _released_umat_cl_mem():
    _released("opencv-umat", "cl_mem")


@case("unknown type", "OpenCL", UnsupportedTypeError, r"wraps a pyopencl.Buffer")
def _opencl_tensor_of_numpy():
    OpenCLTensor = need_attr("interop.tensors.opencl", "OpenCLTensor", "the OpenCL backend")
    OpenCLTensor(np.zeros(4, U8), TensorInfo((4,), U8))


# ---- model input mismatch ---------------------------------------------------------------------------------


def _tiny_model():
    ov = need("openvino", "OpenVINO")
    need_attr("interop.inference", "Inference", "interop/inference.py")
    from openvino import opset13 as ops  # type: ignore[import-not-found]

    x = ops.parameter([1, 3, 8, 8], np.float32, name="x")
    return ov.Model([ops.relu(x)], [x], "tiny")


def _infer_on_tiny_model(x: object) -> None:
    """One synchronous inference of ``x`` on the tiny model (1x3x8x8 float32 in), closed afterwards."""
    with interop.Inference(_tiny_model(), "CPU") as inf:
        inf.infer(x)


@case("model mismatch", "Inference", InvalidTensorError, r"expected|model input|shape")
def _inference_wrong_shape():
    _infer_on_tiny_model(np.zeros((1, 3, 4, 4), np.float32))


@case("model mismatch", "Inference", ModelFileError, r"give the path of an OpenVINO IR")
def _inference_missing_model_file():
    need_attr("interop.inference", "Inference", "interop/inference.py")
    need("openvino", "OpenVINO")
    interop.Inference("/nonexistent/model.xml", "CPU")


@case("model mismatch", "Inference", BackendUnavailableError, r"devices found")
def _inference_unknown_device():
    interop.Inference(_tiny_model(), "TPU")


@case("model mismatch", "Inference", InvalidTensorError, r"convert/resize the tensor to that shape and dtype")
def _inference_wrong_dtype():
    _infer_on_tiny_model(np.zeros((1, 3, 8, 8), np.uint8))


@case("model mismatch", "Inference", UnsupportedFormatError, r"convert the frame first")
def _inference_unsupported_frame_format():
    _infer_on_tiny_model(interop.wrap(np.zeros((8, 8), np.uint16), format=FrameFormat.GRAY16))


@case("arguments", "Inference", UnsupportedTypeError, r"callback must be callable")
def _inference_callback_not_callable():
    with interop.Inference(_tiny_model(), "CPU") as inf:
        inf.infer_async(np.zeros((1, 3, 8, 8), np.float32), 5)


@case("released", "Inference", StateError, r"make a new one")
def _inference_closed():
    inf = interop.Inference(_tiny_model(), "CPU")
    inf.close()
    inf.infer(np.zeros((1, 3, 8, 8), np.float32))


@case("pixel format", "OpenCL", UnsupportedTypeError, r"use interop.tensors.opencl.opencl_frame\(\)")
def _opencl_wrap_with_format():
    buf, _ = _opencl_buffer(64)
    interop.wrap(buf, info=TensorInfo((8, 8), U8), format=FrameFormat.GRAY8)


@case("pixel format", "USM", UnsupportedTypeError, r"wrap the planes and build a Frame")
def _usm_wrap_with_format():
    mem, _ = _usm_shared(64)
    interop.wrap(mem, info=TensorInfo((8, 8), U8), format=FrameFormat.GRAY8)


@case("pixel format", "OpenCV", UnsupportedTypeError, r"takes packed formats only")
def _umat_wrap_as_nv12():
    need("interop.tensors.opencv", "the OpenCV backend")
    cv2 = need("cv2", "OpenCV")
    interop.wrap(cv2.UMat(np.zeros((12, 8), U8)), format=FrameFormat.NV12)


@case("context", "OpenCV", UnsupportedTypeError, r"belongs to OpenCV's UMatContext")
def _umat_with_opencl_context():
    need("interop.tensors.opencv", "the OpenCV backend")
    cv2 = need("cv2", "OpenCV")
    interop.wrap(cv2.UMat(np.zeros((4, 4), U8)), context=_default_ctx(MemoryType.OPENCL))


@case("context", "FFmpeg", UnsupportedTypeError, r"cannot belong to")
def _video_frame_with_foreign_context():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    av = need("av", "PyAV")
    interop.wrap(av.VideoFrame(16, 16, "yuv420p"), context=interop.Context.default(MemoryType.CPU))


@case("shape/dtype/strides", "FFmpeg", UnsupportedTypeError, r"do not pass info= or format=")
def _video_frame_with_info():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    av = need("av", "PyAV")
    interop.wrap(av.VideoFrame(16, 16, "yuv420p"), info=TensorInfo((4, 4), U8))


@case("arguments", "FFmpeg", CopyRequiredError, r"pass allow_copy=True")
def _write_mapping_of_decoder_frame():
    need("interop.tensors.ffmpeg", "the FFmpeg backend")
    av = need("av", "PyAV")
    interop.map(interop.wrap(av.VideoFrame(16, 16, "yuv420p")), MemoryType.CPU, mode=AccessMode.WRITE)


# ---- the catalogue as a test --------------------------------------------------------------------------------


@pytest.mark.parametrize("c", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=c.bug)) if c.bug else c
                               for c in CATALOGUE], ids=[f"{c.category}|{c.backend}|{c.id}" for c in CATALOGUE])
def test_catalogue(c: Case):
    with pytest.raises(InteropError) as ei:
        c.run()
    stats.add("bad input: catalogue rows refused")
    assert type(ei.value) is c.exc, f"{c.id}: raised {type(ei.value).__name__}({ei.value}), want exactly {c.exc.__name__}"
    assert re.search(c.remedy, str(ei.value)), f"{c.id}: message {str(ei.value)!r} lacks the remedy /{c.remedy}/"


def _docs_catalogue_figures() -> tuple[list[tuple[str, int]], dict[str, int]]:
    """Every row count the docs claim for this catalogue, as (where, figure), and the per-backend totals of the
    table in docs/reliability.md."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    readme = open(os.path.join(root, "README.md")).read()
    rel = open(os.path.join(root, "docs", "reliability.md")).read()
    claims = [("README.md: '**N bad-input catalogue rows**'", r"\*\*(\d+) bad-input catalogue rows\*\*", readme),
              ("docs/reliability.md: 'A catalogue of N wrong calls'", r"A catalogue of (\d+) wrong calls", rel),
              ("docs/reliability.md: 'bad-input catalogue | N rows'", r"\| bad-input catalogue \| (\d+) rows", rel)]
    figures = []
    for where, pattern, text in claims:
        m = re.search(pattern, text)
        assert m, f"{where} is gone: update this test with where the docs now state the catalogue's size"
        figures.append((where, int(m.group(1))))
    table = rel[rel.index("### Bad-input catalogue"):]
    header = next(ln for ln in table.splitlines() if ln.startswith("| category |"))
    total = next(ln for ln in table.splitlines() if ln.startswith("| **total** |"))
    cols = [c.strip() for c in header.strip("|").split("|")][1:]
    vals = [int(c.strip().strip("*") or 0) for c in total.strip("|").split("|")[1:]]
    by_backend = dict(zip(cols, vals))
    figures.append(("docs/reliability.md: the table's total", by_backend.pop("total")))
    return figures, by_backend


def test_catalogue_size():
    """The catalogue is as large as README.md and docs/reliability.md say, backend by backend (the docs used to
    drift: a `>= 40` check let them claim almost any figure)."""
    assert len({c.id for c in CATALOGUE}) == len(CATALOGUE)
    figures, by_backend = _docs_catalogue_figures()
    wrong = [f"{where} says {n}" for where, n in figures if n != len(CATALOGUE)]
    assert not wrong, f"the catalogue has {len(CATALOGUE)} rows, but " + "; ".join(wrong)
    counts = {b: sum(1 for c in CATALOGUE if c.backend == b) for b in {c.backend for c in CATALOGUE}}
    assert counts == {b: n for b, n in by_backend.items() if n}, "docs/reliability.md's table, per backend"
    stats.note("bad input: catalogue rows", len(CATALOGUE))
    stats.note("bad input: catalogue table",
               sorted({(c.category, c.backend) for c in CATALOGUE}))


# ---- fuzzing ------------------------------------------------------------------------------------------------

FUZZ = settings(max_examples=int(os.environ.get("INTEROP_FUZZ_EXAMPLES", 200)), deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANY_DTYPE = st.one_of(st.sampled_from(["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "float32",
                                        "float64", "bool", "complex64", "object", "U3", ">i4", "V4", "float128"]),
                      st.text(max_size=6), st.integers(-3, 3), st.none())
DIMS = st.lists(st.one_of(st.integers(-4, 12), st.floats(-2, 5), st.just(float("nan")), st.text(max_size=2), st.none()),
                max_size=4)


@FUZZ
@given(shape=st.one_of(DIMS, st.integers(-2, 9), st.none(), st.text(max_size=3)), dtype=ANY_DTYPE,
       strides=st.one_of(st.none(), DIMS, st.lists(st.integers(-64, 256), max_size=4)))
def test_fuzz_tensorinfo(shape, dtype, strides):
    """TensorInfo either builds a consistent layout or raises InvalidTensorError, nothing else."""
    stats.add("bad input: fuzzed TensorInfo")
    try:
        info = TensorInfo(shape, dtype, strides)
    except InvalidTensorError:
        stats.add("bad input: fuzzed inputs refused")
        return
    assert len(info.strides) == len(info.shape) and all(s >= 0 for s in info.strides)
    assert all(s % info.itemsize == 0 for s in info.strides)
    assert info.nbytes == int(np.prod(info.shape)) * info.itemsize
    if info.size:
        assert info.extent >= info.itemsize
        # the layout is realisable: numpy accepts it over a buffer of `extent` bytes
        buf = np.zeros(info.extent, np.uint8)
        np.lib.stride_tricks.as_strided(buf.view(np.uint8), shape=info.shape, strides=info.strides)


def _check_fuzzed_wrap(obj: object, info: tuple | None, fmt: FrameFormat | None = None) -> None:
    """wrap(obj, TensorInfo(*info), format=fmt) gives a consistent Tensor/Frame, or TensorInfo or wrap() refuses
    with an InteropError (counted); any other exception fails the test."""
    try:
        ti = None if info is None else TensorInfo(*info)
    except InvalidTensorError:
        stats.add("bad input: fuzzed inputs refused")
        return
    try:
        out = interop.wrap(obj, info=ti, format=fmt)
    except InteropError:
        stats.add("bad input: fuzzed inputs refused")
        return
    _check_wrapped(out)


def _check_wrapped(out: object) -> None:
    assert isinstance(out, (Tensor, Frame)), type(out)
    for t in B.planes_of(out):  # type: ignore[arg-type]
        try:
            a = np.asarray(t)
        except InteropError:
            continue
        assert a.shape == t.info.shape and a.strides == t.info.strides


@FUZZ
@given(arr=hnp.arrays(st.sampled_from([np.uint8, np.int16, np.float32, np.float64, np.bool_, np.complex64, np.int64]),
                      hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)),
       step=st.integers(-2, 3), info=st.one_of(st.none(), st.tuples(DIMS, ANY_DTYPE, st.one_of(st.none(), DIMS))))
def test_fuzz_wrap_arrays(arr, step, info):
    """wrap(random arrays, views and infos) returns a Tensor/Frame or raises an InteropError, nothing else."""
    stats.add("bad input: fuzzed wrap()")
    if arr.ndim and step:
        arr = arr[::step]
    _check_fuzzed_wrap(arr, info)


@FUZZ
@given(obj=st.one_of(st.binary(max_size=64).map(bytearray), st.binary(max_size=64), st.integers(), st.text(max_size=4),
                     st.lists(st.integers(0, 255), max_size=4), st.none(), st.floats(), st.just(memoryview(b"abcd"))),
       info=st.one_of(st.none(), st.tuples(DIMS, ANY_DTYPE, st.one_of(st.none(), DIMS))),
       fmt=st.one_of(st.none(), st.sampled_from(list(FrameFormat))))
def test_fuzz_wrap_objects(obj, info, fmt):
    """wrap(random buffers and non-buffers, with random info/format) never raises anything but InteropError."""
    stats.add("bad input: fuzzed wrap()")
    _check_fuzzed_wrap(obj, info, fmt)


@FUZZ
@given(fmt=st.sampled_from(list(FrameFormat)), w=st.integers(-2, 70), h=st.integers(-2, 50),
       pad=st.lists(st.integers(-8, 64), min_size=0, max_size=4), extra=st.integers(-64, 64))
def test_fuzz_frame_layouts(fmt, w, h, pad, extra):
    """plane_infos with random sizes/pitches, and wrap(buffer, format=) of the packed result: consistent planes
    inside the buffer, or an InteropError."""
    stats.add("bad input: fuzzed frame layouts")
    specs = plane_layout(fmt)
    pitches = None
    if pad:
        pitches = [max(0, (-(-max(w, 1) // s.sub_x)) * max(s.channels, 1) * s.dtype.itemsize + p) for s, p in zip(specs, pad)]
    try:
        infos = plane_infos(fmt, w, h, pitches)
    except InteropError:
        stats.add("bad input: fuzzed inputs refused")
        return
    assert len(infos) == len(specs)
    for spec, info in zip(specs, infos):
        assert info.shape[:2] == spec.shape(w, h)[:2] and info.dtype == spec.dtype
        assert info.strides[0] >= spec.row_bytes(w)
    total = sum(i.strides[0] * i.shape[0] for i in infos)
    buf = np.zeros(max(total + extra, 0), np.uint8)
    arr = buf if len(specs) > 1 or buf.size != total else buf.reshape(infos[0].shape[0], -1)
    try:
        if len(specs) == 1 and buf.size == total and pitches is None:
            arr = buf.view(specs[0].dtype).reshape(infos[0].shape)
        out = interop.wrap(arr, format=fmt)
    except (InteropError, ValueError) as e:
        assert isinstance(e, InteropError), f"{type(e).__name__}: {e}"
        stats.add("bad input: fuzzed inputs refused")
        return
    assert isinstance(out, Frame) and out.format is fmt and len(out) == len(specs)
    lo, hi = buf.ctypes.data, buf.ctypes.data + buf.nbytes
    for t in out.tensors:
        a = np.asarray(t)
        if a.size:
            start = a.__array_interface__["data"][0]
            assert lo <= start and start + TensorInfo.of(a).extent <= hi, "a plane reaches outside its buffer"


def test_map_modes_and_flags_refused_consistently():
    """Every AccessMode is accepted; anything else (ints, strings, bools) is UnsupportedTypeError."""
    a = np.zeros((2, 2), U8)
    for m in AccessMode:
        assert interop.map(a, MemoryType.CPU, mode=m) is not None
    for bad in (1, "READ", True, None):
        with pytest.raises(UnsupportedTypeError, match="READ, WRITE, READ_WRITE"):
            interop.map(a, MemoryType.CPU, mode=bad)


@settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 3))  # each example maps and collects: slower
@given(fmt=st.sampled_from(list(FrameFormat)), w=st.integers(-2, 48), h=st.integers(-2, 32),
       pitches=st.one_of(st.none(), st.lists(st.integers(-16, 200), min_size=1, max_size=3)),
       offsets=st.one_of(st.none(), st.lists(st.integers(-64, 6000), min_size=1, max_size=3)),
       buf_size=st.integers(1, 8192), size=st.one_of(st.none(), st.integers(-8, 10000)))
def test_fuzz_dma_frame_layouts(fmt, w, h, pitches, offsets, buf_size, size):
    """frame_from_fds over a memfd with random layouts: a Frame whose every plane can be read through the CPU
    (never a SIGBUS/segfault from a plane past the buffer's end), or an InteropError; no fd leaks either way."""
    try:
        frame_from_fds = B.need_attr("interop.tensors.dma", "frame_from_fds", "the DMA backend")
        memfd_alloc = B.need_attr("interop.native.dmabuf", "memfd_alloc", "the DMA native layer")
    except B.Missing as e:
        pytest.skip(str(e))
    stats.add("bad input: fuzzed DMA frame layouts")
    fd = memfd_alloc(buf_size)
    before = B.fd_count()
    try:
        try:
            f = frame_from_fds(fd, fmt, w, h, pitches=pitches, offsets=offsets, size=size)
        except InteropError:
            f = None
        if f is None:  # checked outside the except block, whose traceback keeps the callee's locals alive
            stats.add("bad input: fuzzed inputs refused")
            gc.collect()
            assert B.fd_count() == before, "a refused layout leaked an fd"
            return
        assert isinstance(f, Frame) and len(f) == len(plane_layout(fmt))
        if not isinstance(B.runnable_chain(MemoryType.DMA, MemoryType.CPU), str):
            cpu = interop.map(f, MemoryType.CPU)
            for t in cpu.tensors:
                np.asarray(t).sum()  # touches every byte of the plane
            cpu.release()
        f.release()
        del f
    finally:
        os.close(fd)
    gc.collect()
    assert B.fd_count() == before - 1, "fds leaked by a frame over a memfd"


# ---- every public argument, every wrong type ---------------------------------------------------------------

_WRONG = {"True": True, "1.5": 1.5, "str": "x", "None": None, "object": object(), "np.float64": np.float64(2),
          "np.bool_": np.True_, "list": [1]}


def _plane():
    return interop.wrap(np.zeros((4, 4), U8))


# (name, call taking the wrong value, wrong values that are valid for this argument)
_ARGS: list[tuple[str, Callable[[object], object], tuple[str, ...]]] = [
    ("wrap info", lambda v: interop.wrap(np.zeros(16, U8), info=v), ("None",)),
    ("wrap format", lambda v: interop.wrap(np.zeros((6, 4), U8), format=v), ("None",)),
    ("wrap context", lambda v: interop.wrap(np.zeros(4, U8), context=v), ("None",)),
    ("map to", lambda v: interop.map(np.zeros(4, U8), v), ()),
    ("map mode", lambda v: interop.map(np.zeros(4, U8), MemoryType.CPU, mode=v), ()),
    ("map context", lambda v: interop.map(np.zeros(4, U8), MemoryType.DMA, context=v, allow_copy=True), ("None",)),
    ("map allow_copy", lambda v: interop.map(np.zeros(4, U8), MemoryType.CPU, allow_copy=v), ("True", "np.bool_")),
    ("route src", lambda v: interop.route(v, MemoryType.CPU), ()),
    ("route dst", lambda v: interop.route(MemoryType.CPU, v), ()),
    ("route allow_copy", lambda v: interop.route(MemoryType.CPU, MemoryType.CPU, allow_copy=v), ("True",)),
    ("TensorInfo shape", lambda v: TensorInfo(v), ("list",)),  # [1] is the shape (1,)
    ("TensorInfo dim", lambda v: TensorInfo((v, 4)), ()),
    ("TensorInfo dtype", lambda v: TensorInfo((4,), v), ()),
    ("TensorInfo stride", lambda v: TensorInfo((4,), U8, (v,)), ()),
    ("Frame tensors", lambda v: Frame(v, FrameFormat.GRAY8), ()),
    ("Frame format", lambda v: Frame([_plane()], v), ()),
    ("Frame width", lambda v: Frame([_plane()], FrameFormat.GRAY8, v, 4), ("None",)),
    ("Frame height", lambda v: Frame([_plane()], FrameFormat.GRAY8, 4, v), ("None",)),
    ("Frame context", lambda v: Frame([_plane()], FrameFormat.GRAY8, context=v), ("None",)),
    ("Frame colorspace", lambda v: Frame([_plane()], FrameFormat.GRAY8, colorspace=v), ("None",)),
    ("Frame color_range", lambda v: Frame([_plane()], FrameFormat.GRAY8, color_range=v), ("None",)),
    ("Frame pts", lambda v: Frame([_plane()], FrameFormat.GRAY8, pts=v), ("None",)),
    ("Frame time_base", lambda v: Frame([_plane()], FrameFormat.GRAY8, time_base=v), ("None",)),
    ("Frame metadata", lambda v: Frame([_plane()], FrameFormat.GRAY8, metadata=v), ("None",)),
    ("Frame.crop x", lambda v: Frame([_plane()], FrameFormat.GRAY8).crop(v, 0, 1, 1), ()),
    ("Tensor info", lambda v: Tensor(None, v), ()),
    ("Tensor context", lambda v: Tensor(None, TensorInfo((4,), U8), context=v), ("None",)),
    ("Tensor writable", lambda v: Tensor(None, TensorInfo((4,), U8), writable=v), ("True", "np.bool_")),
    ("Tensor.region w", lambda v: _plane().region(0, 0, v, 1), ()),
    ("Tensor.handle key", lambda v: _plane().handle(v), ()),
    ("MemoryType.parse", lambda v: MemoryType.parse(v), ()),
]


@pytest.mark.parametrize("name,call,valid", _ARGS, ids=[a[0] for a in _ARGS])
def test_public_arguments_of_the_wrong_type(name, call, valid):
    """Each public argument given each wrong type: an InteropError that is also a TypeError or ValueError (what a
    caller of a Python API catches for a bad argument), never a raw exception from deep inside, never accepted."""
    for label, v in _WRONG.items():
        if label in valid:
            continue
        with pytest.raises(InteropError) as ei:
            call(v)
        assert isinstance(ei.value, (TypeError, ValueError)), f"{name}={label}: {type(ei.value).__name__}"
        stats.add("bad input: wrong-type arguments refused")
