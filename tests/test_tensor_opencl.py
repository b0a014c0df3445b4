"""OpenCL tensors: the shared context, wrap() of pyopencl objects, handles, regions, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import interop
from interop import Context, InteropError, InvalidTensorError, MemoryType, TensorInfo
from interop.errors import ContextMismatchError, UnsupportedTypeError
from tests.support.ocl_support import fill_bytes, need, opencl_context, read_bytes

cl = need("pyopencl", "pyopencl")


@pytest.fixture()
def ctx():
    return opencl_context()


def test_default_context_is_opencvs_in_order_queue(ctx):
    cv2 = need("cv2", "OpenCV")
    from interop.tensors.opencl import OpenCLContext

    assert isinstance(ctx, OpenCLContext) and ctx.source == "opencv"
    assert ctx.cl_context == int(cv2.UMat.context())
    assert ctx.queue.int_ptr == int(cv2.UMat.queue())
    assert not ctx.queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE
    assert Context.default(MemoryType.OPENCL) is ctx
    assert ctx.host_shared == bool(ctx.device.type & cl.device_type.CPU)


def test_wrap_buffer_handles_and_info(ctx):
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 4096)
    t = interop.wrap(buf, info=TensorInfo((32, 32), np.float32))
    assert t.memory_type is MemoryType.OPENCL and t.native is buf
    assert t.handle("cl_mem") == buf.int_ptr == t.cl_mem and t.handle("offset") == 0
    assert t.context is ctx
    raw = interop.wrap(buf)
    assert raw.info.shape == (4096,) and raw.info.dtype == np.uint8


def test_wrap_pyopencl_array_keeps_whole_allocation(ctx):
    import pyopencl.array as cla

    a = cla.to_device(ctx.queue, np.arange(20, dtype=np.float32).reshape(4, 5))
    view = a[1:3, 1:4]
    t = interop.wrap(view)
    assert t.native is a.base_data  # the whole allocation, never a sub-buffer
    assert t.offset == view.offset == 6 * 4
    assert t.info.shape == (2, 3) and t.info.strides == (20, 4)
    with interop.map(t, MemoryType.CPU) as h:
        np.testing.assert_array_equal(h.numpy(), np.arange(20, dtype=np.float32).reshape(4, 5)[1:3, 1:4])


def test_region_is_an_offset_into_the_same_cl_mem(ctx):
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64 * 48 * 3)
    t = interop.wrap(buf, info=TensorInfo((48, 64, 3), np.uint8))
    r = t.region(10, 5, 20, 8)
    assert r.cl_mem == t.cl_mem and r.native is buf
    assert r.offset == 5 * 64 * 3 + 10 * 3
    fill_bytes(ctx, buf, 0, buf.size, 1)
    with interop.map(r, MemoryType.CPU, mode=interop.AccessMode.WRITE) as h:
        h.numpy()[:] = 7
    whole = read_bytes(ctx, buf, 0, buf.size).reshape(48, 64, 3)
    assert (whole[5:13, 10:30] == 7).all() and whole.sum() == 48 * 64 * 3 + 6 * 20 * 8 * 3


def test_opencl_frame_planes_share_one_buffer(ctx):
    from interop.tensors.opencl import opencl_frame

    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64 * 48 * 3 // 2)
    f = opencl_frame(buf, interop.FrameFormat.NV12, 64, 48)
    assert [p.offset for p in f] == [0, 64 * 48] and all(p.native is buf for p in f)
    assert f[1].info.shape == (24, 32, 2)


def test_not_cpu_reachable(ctx):
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 16)
    t = interop.wrap(buf)
    with pytest.raises(InteropError):
        np.asarray(t)
    with pytest.raises(BufferError):
        t.__dlpack__()


def test_kernel_arg_needs_offset_zero_for_plain_buffers(ctx):
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 64)
    t = interop.wrap(buf, info=TensorInfo((16,), np.float32))
    k = ctx.build("__kernel void f(__global float* a, float v){a[get_global_id(0)]=v;}").f
    t.set_kernel_arg(k, 0)
    k.set_arg(1, np.float32(3))
    cl.enqueue_nd_range_kernel(ctx.queue, k, (16,), None)
    assert (read_bytes(ctx, buf, 0, 64).view(np.float32) == 3).all()
    with pytest.raises(InteropError):
        t._view(4, TensorInfo((15,), np.float32)).set_kernel_arg(k, 0)  # a plain buffer at an offset


def test_bad_input(ctx):
    buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 100)
    with pytest.raises(InvalidTensorError):
        interop.wrap(buf, info=TensorInfo((101,), np.uint8))  # wrong info for a raw buffer
    from interop.tensors.opencl import OpenCLContext, OpenCLTensor

    with pytest.raises(InvalidTensorError):
        OpenCLTensor(buf, TensorInfo((10,), np.uint8), offset=95)
    with pytest.raises(InvalidTensorError):
        OpenCLTensor(buf, TensorInfo((10,), np.uint8), offset=-1)
    with pytest.raises(UnsupportedTypeError):
        OpenCLTensor(np.zeros(4), TensorInfo((4,), np.float64))
    other = OpenCLContext(cl.Context(ctx.native.devices))
    assert other != ctx
    with pytest.raises(ContextMismatchError):
        OpenCLTensor(buf, TensorInfo((10,), np.uint8), context=other)
    with pytest.raises(UnsupportedTypeError):
        interop.wrap(buf, context=Context.default(MemoryType.CPU))
    t = interop.wrap(buf)
    t.release()
    with pytest.raises(InvalidTensorError):
        _ = t.cl_mem
    with pytest.raises(InvalidTensorError):
        interop.map(t, MemoryType.CPU)


def test_live_count_tracks_release(ctx):
    from interop.tensors.opencl import live_count

    before = live_count()
    t = interop.wrap(cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE, 16))
    assert live_count() == before + 1
    t.release()
    assert live_count() == before


def test_doctor_shows_one_shared_context(ctx):
    from interop.tensors.opencl import _probe

    (row,) = _probe()
    assert row.available, row.reason
    shared = row.details["shared context"]
    assert shared.startswith("OpenCV == pyopencl == dpctl: True") or shared.startswith("OpenCV == pyopencl: True")
    assert f"{ctx.cl_context:#x}" in shared and row.details["platforms"] >= 1


def test_build_survives_an_unusable_binary_cache(ctx, monkeypatch):
    """pyopencl's on-disk cache failing (seen on the GPU machine: sqlite 'file is not a database') costs the cache,
    not the build; compiler errors still surface as they are."""
    import sqlite3

    import pyopencl as cl

    from interop.tensors.opencl import OpenCLContext

    real = cl.Program.build
    calls = []

    def build(self, options=[], devices=None, cache_dir=None):  # noqa: B006 (pyopencl's own signature)
        calls.append(cache_dir)
        if cache_dir is not False:
            raise sqlite3.DatabaseError("file is not a database")
        return real(self, options, devices, cache_dir)

    monkeypatch.setattr(cl.Program, "build", build)
    c = OpenCLContext(ctx.native)  # a fresh context object: no program cached yet
    prg = c.build("__kernel void one(__global uchar *p) { p[get_global_id(0)] = 1; }")
    assert calls == [None, False] and prg.one is not None
    with pytest.raises(cl.Error):
        c.build("__kernel void broken(")
