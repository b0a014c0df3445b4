"""CUDA -> OPENCL: exportable CUDA memory (VMM, opaque fd) imported by NVIDIA's OpenCL, zero-copy; other CUDA
memory is copied on the GPU only with allow_copy, and counted.

CPU-side tests check the routing, the driver structs against cuda.h and the allocation's call sequence through a
fake driver; the gpu tests run on an NVIDIA GPU with NVIDIA's OpenCL (pyopencl carried as a wheel there).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import interop
from interop import AccessMode, MemoryType
from interop.errors import BackendUnavailableError, CopyRequiredError, InteropError, InvalidTensorError
from interop.mappers.cuda_to_opencl import EXTENSION, CUDAToOpenCL
from interop.native import cuda_export as ce
from tests.support.cuda_fakes import FakeDevice
from tests.support.requirements import need_module


def test_route_asks_for_allow_copy_and_never_follows_another_hop():
    with pytest.raises(CopyRequiredError):
        interop.route(MemoryType.CUDA, MemoryType.OPENCL)
    chain = interop.route(MemoryType.CUDA, MemoryType.OPENCL, allow_copy=True)
    assert [type(m) for m in chain.mappers] == [CUDAToOpenCL] and CUDAToOpenCL.tier == "B"
    # CUDA reached from another type is never exportable memory: no route goes FFMPEG/CPU -> CUDA -> OPENCL
    for src in (MemoryType.FFMPEG, MemoryType.CPU):
        assert CUDAToOpenCL not in [type(m) for m in interop.route(src, MemoryType.OPENCL, allow_copy=True).mappers]
    # and the host is reached from CUDA by the counted download, not through OpenCL
    assert [m.name for m in interop.route(MemoryType.CUDA, MemoryType.CPU, allow_copy=True).mappers] == ["cuda_to_cpu"]


def test_driver_structs_match_cuda_h():
    assert ctypes.sizeof(ce.AllocationProp) == 32 and ctypes.sizeof(ce.AccessDesc) == 12
    assert ce.AllocationProp.location.offset == 8 and ce.AllocationProp.win32HandleMetaData.offset == 16
    assert ce.AllocationProp.allocFlags.offset == 24


class FakeVMM:
    """libcuda's VMM calls over nothing: records the calls; ``fail`` names a call that returns an error."""

    def __init__(self, granularity: int = 2 << 20, fail: str | None = None):
        self.granularity, self.fail, self.calls = granularity, fail, []

        def call(name, body):
            def f(*args):
                self.calls.append(name)
                if name == self.fail:
                    return 2  # CUDA_ERROR_OUT_OF_MEMORY
                body(*args)
                return 0
            return f

        def gran(out, prop, option):
            p = prop._obj
            assert (p.type, p.requestedHandleTypes, p.location.type) == (1, 1, 1)
            out._obj.value = self.granularity

        def create(handle, size, prop, flags):
            handle._obj.value, self.created = 0x51, size.value

        def reserve(va, size, align, addr, flags):
            va._obj.value = 0x7F00_0000_0000

        def access(ptr, size, desc, count):
            d = desc._obj
            assert (d.location.type, d.flags, count.value) == (1, 3, 1)

        def export(fd, handle, kind, flags):
            fd._obj.value = 99

        noop = lambda *a: None  # noqa: E731
        self.lib = type("Lib", (), {})()
        for name, body in (("cuMemGetAllocationGranularity", gran), ("cuMemCreate", create),
                           ("cuMemAddressReserve", reserve), ("cuMemMap", noop), ("cuMemSetAccess", access),
                           ("cuMemExportToShareableHandle", export), ("cuMemUnmap", noop),
                           ("cuMemAddressFree", noop), ("cuMemRelease", noop), ("cuCtxSynchronize", noop)):
            setattr(self.lib, name, call(name, body))

    @staticmethod
    def _check(rc, what):
        if rc:
            raise InteropError(f"CUDA driver call {what} failed with CUresult {rc}")

    def push(self, device):
        self.calls.append("push")

    def pop(self):
        self.calls.append("pop")


def test_exportable_allocation_rounds_up_maps_exports_and_frees():
    d = FakeVMM()
    a = ce.ExportableAllocation(1000, driver=d)
    assert a.size == 2 << 20 and a.nbytes == 1000 and a.ptr == 0x7F00_0000_0000 and d.created == a.size
    assert d.calls == ["push", "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemAddressReserve", "cuMemMap",
                       "cuMemSetAccess", "pop"]
    assert a.export_fd() == 99
    a.close()
    assert a.closed and d.calls[-6:] == ["push", "cuCtxSynchronize", "cuMemUnmap", "cuMemAddressFree", "cuMemRelease",
                                         "pop"]
    with pytest.raises(InteropError, match="closed"):
        a.export_fd()


def test_a_failed_allocation_step_gives_back_what_was_made():
    d = FakeVMM(fail="cuMemMap")
    with pytest.raises(InteropError, match="cuMemMap failed"):
        ce.ExportableAllocation(4096, driver=d)
    assert d.calls[-4:] == ["cuMemUnmap", "cuMemAddressFree", "cuMemRelease", "pop"]
    with pytest.raises(InteropError, match="positive size"):
        ce.ExportableAllocation(0, driver=FakeVMM())


def test_cumemalloc_memory_is_refused_without_allow_copy():
    t = interop.wrap(FakeDevice(np.zeros((4, 8), np.uint8)))
    with pytest.raises(CopyRequiredError, match="exportable_empty"):
        CUDAToOpenCL().map(t)


def test_a_tensor_over_a_closed_allocation_is_refused():
    from interop.info import TensorInfo
    from interop.tensors.cuda import CUDATensor

    a = ce.ExportableAllocation(4096, driver=FakeVMM())
    t = CUDATensor(a, TensorInfo((64, 64), np.uint8), ptr=a.ptr, stream=None)
    a.close()
    with pytest.raises(InvalidTensorError, match="closed"):
        CUDAToOpenCL().map(t, allow_copy=True)


def test_without_an_importing_device_the_error_says_where_to_go():
    need_module("pyopencl")
    from interop.mappers import cuda_to_opencl as m

    if m._found or any(EXTENSION in d.extensions.split() for p in _platforms() for d in p.get_devices()):
        pytest.skip("this machine has an OpenCL device that imports CUDA memory (the gpu tests cover it)")
    with pytest.raises(BackendUnavailableError, match=EXTENSION):
        m.import_context()


def _platforms():
    import pyopencl as cl

    try:
        return cl.get_platforms()
    except cl.Error:
        return []


# ---- on the GPU ------------------------------------------------------------------------------------------------


@pytest.fixture
def nvidia_cl():
    need_module("torch", "cuda")
    need_module("pyopencl")
    from interop.mappers.cuda_to_opencl import import_context

    try:
        return import_context()
    except BackendUnavailableError as e:
        pytest.fail(f"a CUDA machine without NVIDIA's OpenCL import: {e}")


@pytest.mark.gpu
def test_exportable_tensor_is_the_same_memory_in_opencl_both_ways(nvidia_cl):
    import pyopencl as cl
    import torch

    from interop.cuda import exportable_empty

    t = exportable_empty((64, 256), np.uint8)
    tv = torch.from_dlpack(t)
    assert tv.data_ptr() == t.ptr
    tv.copy_(torch.arange(64 * 256, device="cuda").reshape(64, 256).to(torch.uint8))  # queued on torch's stream
    with interop.copy_meter() as meter:
        o = interop.map(t, MemoryType.OPENCL, mode=AccessMode.READ_WRITE, allow_copy=True)
        assert o.context is nvidia_cl and o.offset == 0 and o.native.size >= t.info.nbytes
        host = np.empty((64, 256), np.uint8)
        cl.enqueue_copy(nvidia_cl.queue, host, o.native).wait()
        assert np.array_equal(host, tv.cpu().numpy())  # CUDA's writes, read by OpenCL
        cl.enqueue_copy(nvidia_cl.queue, o.native, np.full((64, 256), 7, np.uint8)).wait()  # OpenCL writes
        cl_mem = o.cl_mem
        o.release()
        assert int(tv.sum()) == 7 * 64 * 256 and meter.copies == 0  # seen by torch, nothing copied
        again = CUDAToOpenCL().map(t)
        assert again.cl_mem == cl_mem  # imported once per context
        again.release()
        region = CUDAToOpenCL().map(t.region(0, 3, 256, 2))  # a view: the same buffer at its offset
        assert region.offset == 3 * 256 and region.cl_mem == cl_mem
        region.release()
    t.native.close()


@pytest.mark.gpu
def test_torch_memory_is_copied_on_the_gpu_only_when_allowed_and_written_back(nvidia_cl):
    import pyopencl as cl
    import torch

    src = torch.arange(32 * 128, device="cuda").reshape(32, 128).to(torch.uint8)
    t = interop.wrap(src)
    with pytest.raises(CopyRequiredError, match="exportable_empty"):
        CUDAToOpenCL().map(t)
    with interop.copy_meter() as meter:
        o = interop.map(t, MemoryType.OPENCL, mode=AccessMode.READ_WRITE, allow_copy=True)
        host = np.empty((32, 128), np.uint8)
        cl.enqueue_copy(nvidia_cl.queue, host, o.native, src_offset=o.offset).wait()
        assert np.array_equal(host, src.cpu().numpy()) and meter.copies == 1
        cl.enqueue_copy(nvidia_cl.queue, o.native, np.full((32, 128), 3, np.uint8), dst_offset=o.offset).wait()
        o.release()
        assert meter.copies == 2 and int(src.sum()) == 3 * 32 * 128  # the write-back, counted
    # the staging buffer went back to its pool with its import: the next copy of that size reuses both
    from interop.mappers import cuda_to_opencl as m

    pooled = m._pool[(0, 32 * 128)][-1]
    imported = pooled.imports[nvidia_cl.cl_context].int_ptr
    kept = m.staging_count()
    o2 = interop.map(t, MemoryType.OPENCL, allow_copy=True)
    assert m.staging_count() == kept - 1 and o2.cl_mem == imported
    o2.release()
    assert m.staging_count() == kept


@pytest.mark.gpu
def test_nvdec_frames_reach_opencl_through_pooled_gpu_copies(nvidia_cl, tmp_path):
    import pyopencl as cl
    import torch

    from interop.mappers import cuda_to_opencl as m
    from tests.support.gpu_clips import make_clip, nvdec

    clip = make_clip(tmp_path / "c.mp4", frames=12)
    frames = 0
    with nvdec(clip) as c, interop.copy_meter() as meter:
        for vf in c.decode(video=0):
            frames += 1
            f = interop.map(interop.map(vf, MemoryType.CUDA), MemoryType.OPENCL, allow_copy=True)
            for plane, o in zip(vf.planes, f):
                want = torch.from_dlpack(plane.__dlpack__(stream=None)).cpu().numpy()
                got = np.empty(want.shape, want.dtype)
                cl.enqueue_copy(nvidia_cl.queue, got, o.native, src_offset=o.offset).wait()
                assert np.array_equal(got, want)  # the decoder's pixels, pitch dropped
            f.release()
        assert frames == 12 and meter.copies == 2 * frames  # one GPU copy per plane per frame, counted
    assert m.staging_count() >= 2  # the two planes' buffers came back to the pool
