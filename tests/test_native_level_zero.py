"""interop.native.level_zero end to end through the REAL Level Zero loader (libze_loader.so.1) and our fake
driver (tests/fakes/ze, built against libze-dev's headers). Each case_* runs in a child process whose loader
loads the fake (tests/ze_fake.py); memory written on one side is read on the other."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys

import pytest

from tests import ze_fake
from tests.support.requirements import need_module


def _memfd(size: int, fill: bytes = b"") -> tuple[int, mmap.mmap]:
    fd = os.memfd_create("ze-test", os.MFD_CLOEXEC)
    os.ftruncate(fd, size)
    m = mmap.mmap(fd, size)
    m[: len(fill)] = fill
    return fd, m


def _ctx():  # type: ignore[no-untyped-def]
    from interop.native import level_zero as ze

    drv = ze.drivers()[0]
    return ze, ze.ZeContext.create(drv), ze.devices(drv)[0]


def case_zeinit_through_real_loader() -> None:
    """zeInit succeeds through the real loader, which loaded our fake driver (both seen in /proc/self/maps)."""
    from interop.native import level_zero as ze

    ze.init()
    maps = open("/proc/self/maps").read()
    loader_paths = {ln.split()[-1] for ln in maps.splitlines() if "libze_loader.so" in ln}
    assert loader_paths and all(p.startswith("/usr/lib") for p in loader_paths), loader_paths
    assert str(ze_fake.FAKE_DRIVER) in maps
    assert os.environ.get("INTEROP_ZE_LOADER") is None  # not the fallback fake of the loader itself
    assert ze.loader_name() == "libze_loader.so.1"


def case_drivers_devices_properties() -> None:
    from interop.native import level_zero as ze

    drvs = ze.drivers()
    assert len(drvs) == 1 and drvs[0]
    assert ze.driver_api_version(drvs[0]) >= (1, 0)
    ext = ze.driver_extensions(drvs[0])
    assert "ZE_extension_external_memory_import_fd" in ext and "ZE_extension_external_memory_export_fd" in ext
    devs = ze.devices(drvs[0])
    p = ze.device_properties(devs[0])
    assert p.type == "VPU" and p.is_npu and p.vendor_id == 0x8086
    assert p.name == "interop fake Level Zero NPU" and p.uuid.startswith(b"fake-ze-device")
    # the VPU-only init flag the NPU plugin uses finds it as well
    assert ze.drivers(ze.ZE_INIT_FLAG_VPU_ONLY) == drvs


def case_host_device_shared_allocations() -> None:
    ze, ctx, dev = _ctx()
    allocs = [ze.allocate(ctx, 4096, k, device=dev) for k in ("host", "device", "shared")]
    assert ze.live_allocations() == 3
    for a, kind in zip(allocs, ("host", "device", "shared")):
        props = ze.alloc_properties(ctx, a.pointer + 100)  # an interior pointer finds its allocation
        assert props.type == kind and props.page_size == 4096
        assert (props.device is None) == (kind == "host")
        assert ze.address_range(ctx, a.pointer + 5) == (a.pointer, 4096)
    assert ze.alloc_properties(ctx, ctypes.addressof(ctypes.c_int())).type == "unknown"
    for a in allocs:
        a.release()
        a.release()  # idempotent
    assert ze.live_allocations() == 0
    ctx.destroy()


def case_import_dma_buf_both_directions() -> None:
    """An fd imported as host, device and shared memory: writes through the fd's mapping are read through the
    Level Zero pointer and the reverse (no copy: it is the same pages)."""
    ze, ctx, dev = _ctx()
    fd, m = _memfd(8192, b"from-the-fd")
    for kind in ("host", "device", "shared"):
        a = ze.import_dma_buf(ctx, fd, 8192, kind, device=dev)
        assert a.imported_fd == fd and a.kind == kind
        assert ctypes.string_at(a.pointer, 11) == b"from-the-fd"
        ctypes.memmove(a.pointer + 4000, f"from-{kind}".encode(), 5 + len(kind))
        assert m[4000:4005 + len(kind)] == f"from-{kind}".encode()
        a.release()
    os.fstat(fd)  # Level Zero did not take the caller's fd
    os.close(fd)
    ctx.destroy()


def case_export_then_reimport() -> None:
    """Export an allocation as a DMA-BUF fd, import that fd into a second context: one memory, three views."""
    ze, ctx, dev = _ctx()
    a = ze.allocate(ctx, 65536, "device", device=dev)
    fd = a.export_dma_buf()
    assert fd >= 0 and fd != a.imported_fd
    ctx2 = ze.ZeContext.create(ze.drivers()[0])
    b = ze.import_dma_buf(ctx2, fd, 65536, "host")
    ctypes.memmove(a.pointer + 1234, b"written-through-a", 17)
    assert ctypes.string_at(b.pointer + 1234, 17) == b"written-through-a"
    m = mmap.mmap(fd, 65536)
    assert m[1234:1251] == b"written-through-a"
    m[0:6] = b"via-fd"
    assert ctypes.string_at(b.pointer, 6) == b"via-fd" == ctypes.string_at(a.pointer, 6)
    m.close()
    b.release()
    a.release()
    os.close(fd)  # the exported fd is ours
    ctx2.destroy()
    ctx.destroy()


def case_typed_errors_name_the_result() -> None:
    from interop.errors import InteropError, InvalidTensorError, UnsupportedTypeError

    ze, ctx, dev = _ctx()
    fd, _ = _memfd(4096)
    with pytest.raises(ze.ZeError) as ei:  # the fd is shorter than asked
        ze.import_dma_buf(ctx, fd, 1 << 20, "host")
    assert ei.value.name == "ZE_RESULT_ERROR_INVALID_SIZE" and ei.value.call == "zeMemAllocHost"
    assert "fd" in str(ei.value) and isinstance(ei.value, InteropError)
    with pytest.raises(ze.ZeError) as ei:
        ze.export_dma_buf(ctx, 0x1000)  # not memory of the context
    assert ei.value.call == "zeMemGetAllocProperties"
    # UnsupportedTypeError has no subclass, so pytest.raises pins it exactly; InvalidTensorError does
    with pytest.raises(UnsupportedTypeError, match="device handle: pass device="):
        ze.allocate(ctx, 4096, "device")
    with pytest.raises(UnsupportedTypeError, match="kind must be one of host, device, shared"):
        ze.allocate(ctx, 4096, "texture", device=dev)
    with pytest.raises(InvalidTensorError, match="positive") as ei:
        ze.allocate(ctx, 0, "host")
    assert type(ei.value) is InvalidTensorError
    with pytest.raises(InvalidTensorError, match="file descriptor") as ei:
        ze.import_dma_buf(ctx, -1, 4096, "host")
    assert type(ei.value) is InvalidTensorError
    with pytest.raises(UnsupportedTypeError, match="file descriptor"):
        ze.import_dma_buf(ctx, "3", 4096, "host")
    a = ze.allocate(ctx, 4096, "host")
    with pytest.raises(ze.ZeError) as ei:
        ctx.destroy()
    assert ei.value.name == "ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE"
    a.release()
    with pytest.raises(InvalidTensorError, match="was freed") as ei:
        a.export_dma_buf()
    assert type(ei.value) is InvalidTensorError
    ctx.destroy()  # the failed destroy left the context alive; now it goes
    os.close(fd)


def case_finaliser_frees_memory() -> None:
    import gc

    ze, ctx, dev = _ctx()
    before = ze.live_allocations()
    for _ in range(200):
        ze.allocate(ctx, 4096, "shared", device=dev)
    gc.collect()
    assert ze.live_allocations() == before
    ctx.destroy()  # succeeds only if every allocation really went through zeMemFree


def test_no_driver_is_backend_unavailable() -> None:
    """Without a driver the real loader's zeInit fails; interop says so with the result name."""
    if not ze_fake._loader_present():
        pytest.skip("needs the Level Zero loader: apt install libze1")
    code = ("from interop.native import level_zero as ze\n"
            "from interop.errors import BackendUnavailableError\n"
            "try:\n    ze.drivers()\nexcept BackendUnavailableError as e:\n    print('unavailable:', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "ZE_ENABLE_ALT_DRIVERS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    if "unavailable" not in out.stdout:
        pytest.skip(f"a real Level Zero driver is installed here: {out.stdout.strip()[:200]}")
    assert "ZE_RESULT_ERROR_UNINITIALIZED" in out.stdout and "no driver" in out.stdout


def test_missing_loader_is_backend_unavailable() -> None:
    code = ("from interop.native import level_zero as ze\n"
            "from interop.errors import BackendUnavailableError\n"
            "try:\n    ze.loader()\nexcept BackendUnavailableError as e:\n    print('unavailable:', e)\n")
    env = dict(os.environ, INTEROP_ZE_LOADER="/nonexistent/libze_loader.so.1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert "unavailable" in out.stdout and "libze1" in out.stdout



@ze_fake.isolated
def case_first_zeinit_wins_so_init_early_keeps_the_npu() -> None:
    """Loader 1.8 keeps the first zeInit's outcome for the process. dpctl's Level Zero adapter initialises with
    GPU_ONLY, which an NPU driver (and our fake NPU) refuses; init_early() before dpctl keeps the driver."""
    need_module("dpctl")
    from interop.native import level_zero as ze

    assert ze.init_early()
    from interop.tensors.usm import _default_context

    _default_context()  # dpctl initialises its platforms (Level Zero GPU_ONLY among them)
    ze._init_results.clear()
    assert len(ze.drivers()) == 1  # still there


@ze_fake.isolated
def case_gpu_only_first_loses_the_npu() -> None:
    """The other order, through the loader directly: zeInit(GPU_ONLY) first, then zeInit(0) fails too."""
    from interop.native import level_zero as ze

    lib = ze.loader()
    assert lib.zeInit(ze.ZE_INIT_FLAG_GPU_ONLY) == ze.ZE_RESULT_ERROR_UNINITIALIZED
    assert lib.zeInit(0) == ze.ZE_RESULT_ERROR_UNINITIALIZED
    assert not ze.init_early()


globals().update(ze_fake.tests_for(globals()))
