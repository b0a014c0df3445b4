"""Native handles hold their memory; READ mappings hand out read-only views, on every tier-A edge.

1. Every ``.native`` interop hands out (a pyopencl Buffer, a dpctl allocation, an ov.Tensor, a cv2.Mat or UMat,
   an av.VideoPlane, a numpy array, our DMA buffer) keeps the memory it points into alive by itself: it is held
   alone after its source and mapping are deleted and collected, the heap is recycled, and it must still read
   the original bytes. The images are larger than glibc's largest mmap threshold, so a freed source is unmapped
   and a native reading it would crash: each check runs in a child process, so a crash is a failed test.
2. A READ mapping is read-only wherever interop hands out a view of it: ``numpy.asarray`` and ``np.from_dlpack``
   give read-only arrays, a legacy DLPack capsule is refused (BufferError, as numpy does for read-only arrays),
   and a WRITE mapping of it is refused.

The edges come from the mapper registry, so a new tier-A edge is covered (or fails for want of a source here).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import interop
from interop import (
    AccessMode,
    Frame,
    FrameFormat,
    InteropError,
    InvalidTensorError,
    MemoryType,
    Tensor,
    TensorInfo,
)
from interop.mapper import registered

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# 40 MB: above glibc's largest dynamic mmap threshold, so freeing the source unmaps it
BIG = (4000, 10240)
SMALL = (48, 64)


def _tier_a_edges() -> list[tuple[str, ...]]:
    return sorted((s.name, d.name) for (s, d), cls in registered().items() if cls.tier == "A")


# Multi-step routes where the native of a later step sits on memory of an earlier one (issue 15).
ROUTES = [("CPU", "USM", "OPENCL"), ("CPU", "OPENCL", "OPENCV_UMAT"), ("CPU", "USM", "OPENCL", "USM"),
          ("DMA", "CPU", "OPENCL"), ("DMA", "CPU", "USM"), ("FFMPEG", "CPU", "OPENCL"), ("CPU", "OPENCL", "USM")]
PATHS = _tier_a_edges() + ROUTES


def _image(shape: tuple[int, int]) -> np.ndarray:
    h, w = shape
    return (np.add.outer(np.arange(h, dtype=np.uint32) * 7, np.arange(w, dtype=np.uint32)) % 251).astype(np.uint8)


class Unavailable(Exception):
    pass


def _source(mt: MemoryType, kind: str, img: np.ndarray) -> Tensor | Frame:
    """A ``kind`` ('tensor' or 'frame': GRAY8) of memory type ``mt`` holding ``img`` (its own copy)."""
    h, w = img.shape
    frame = kind == "frame"
    try:
        if mt is MemoryType.CPU:
            return interop.wrap(img.copy(), format=FrameFormat.GRAY8 if frame else None)
        if mt is MemoryType.OPENVINO:
            if frame:  # frames of OpenVINO memory come from a mapping only
                return interop.map(_source(MemoryType.CPU, kind, img), MemoryType.OPENVINO, mode=AccessMode.READ_WRITE)
            import openvino as ov

            return interop.wrap(ov.Tensor(img.copy()))  # a user's writeable ov.Tensor
        if mt is MemoryType.FFMPEG:
            import av

            f = interop.wrap(av.VideoFrame.from_ndarray(img, format="gray"))
            assert isinstance(f, Frame)
            return f if frame else f[0]
        if mt is MemoryType.OPENCV:
            import cv2

            return interop.wrap(cv2.Mat(img.copy()), format=FrameFormat.GRAY8 if frame else None)
        if mt is MemoryType.OPENCV_UMAT:
            import cv2

            return interop.wrap(cv2.UMat(img), info=TensorInfo(img.shape, np.uint8),
                                format=FrameFormat.GRAY8 if frame else None)
        if mt is MemoryType.OPENCL:
            import pyopencl as cl

            from interop.tensors.opencl import opencl_frame

            ctx = interop.Context.default(MemoryType.OPENCL)
            buf = cl.Buffer(ctx.native, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=img)
            if frame:
                return opencl_frame(buf, FrameFormat.GRAY8, w, h, context=ctx)  # type: ignore[arg-type]
            return interop.wrap(buf, info=TensorInfo(img.shape, np.uint8), context=ctx)
        if mt is MemoryType.USM:
            from interop.tensors.usm import allocate

            t = allocate(TensorInfo(img.shape, np.uint8), "shared")
            np.asarray(t)[...] = img
            return Frame([t], FrameFormat.GRAY8, w, h) if frame else t
        if mt is MemoryType.DMA:
            from interop.native.dmabuf import memfd_alloc
            from interop.tensors.dma import DMATensor, frame_from_fds

            fd = memfd_alloc(img.nbytes)
            os.pwrite(fd, img.tobytes(), 0)
            if frame:
                return frame_from_fds(fd, FrameFormat.GRAY8, w, h, take_ownership=True)
            return DMATensor.from_fd(fd, info=TensorInfo(img.shape, np.uint8), size=img.nbytes, take_ownership=True)
        if mt is MemoryType.GST:
            from interop.tensors.gst import caps_for, gst, wrap_buffer, wrap_memory

            buf = gst().Buffer.new_wrapped(img.tobytes())
            if frame:
                return wrap_buffer(buf, caps_for(FrameFormat.GRAY8, w, h))
            return wrap_memory(buf.peek_memory(0), TensorInfo(img.shape, np.uint8))
    except ImportError as e:  # BackendUnavailableError included
        raise Unavailable(f"{mt.name} is not available here: {e}") from e
    raise Unavailable(f"no {kind} source of {mt.name} memory in this test: add one")


def _gst_fd_source(kind: str, img: np.ndarray) -> Tensor | Frame:
    """GST memory backed by an fd (GstFdMemory over a memfd): what GST -> DMA takes (system memory has no fd)."""
    from tests.reliability import backends as B

    try:
        if kind == "frame":
            return B.gst_fd_frame(FrameFormat.GRAY8, img.shape[1], img.shape[0], [img])
        return B.gst_fd_tensor(img)
    except B.Missing as e:
        raise Unavailable(str(e)) from e


def _map_along(path: tuple[str, ...], kind: str, img: np.ndarray, mode: AccessMode) -> Tensor | Frame:
    if path[:2] == ("GST", "DMA"):
        obj: Any = _gst_fd_source(kind, img)
    else:
        obj = _source(MemoryType[path[0]], kind, img)
    for a, b in zip(path, path[1:]):
        mapper = registered()[(MemoryType[a], MemoryType[b])]
        missing = mapper.missing()
        if missing:
            raise Unavailable(missing)
        obj = mapper().map(obj, mode, allow_copy=True)
    return obj  # type: ignore[no-any-return]


# ---- 1. natives hold their memory (child processes) -------------------------------------------------------


def _meta(t: Tensor) -> dict[str, Any]:
    off = getattr(t, "offset", 0)
    return {"shape": t.info.shape, "strides": t.info.strides, "offset": off if isinstance(off, int) else 0}


def _natives(path: tuple[str, ...], kind: str, img: np.ndarray) -> list[tuple[str, Any, dict[str, Any]]]:
    """The natives of the mapping's planes (and the frame's own native), with how to read them. Everything else
    made here (source, intermediate and final mappings) is dropped when this returns."""
    out = _map_along(path, kind, img, AccessMode.READ)
    planes = out.tensors if isinstance(out, Frame) else [out]
    held = [(f"plane {i} of {type(t).__name__}", t.native, _meta(t)) for i, t in enumerate(planes)]
    if isinstance(out, Frame) and out.native is not None and type(out.native).__name__ == "VideoFrame":
        held.append(("the frame's av.VideoFrame", out.native, _meta(planes[0])))
    return held


def _strided(flat: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
    flat = flat[meta["offset"]:]
    return np.lib.stride_tricks.as_strided(flat, meta["shape"], meta["strides"], writeable=False)


def _read(native: Any, meta: dict[str, Any]) -> np.ndarray:
    """The (H, >=W) bytes a native reads now, through its own framework."""
    name = type(native).__name__
    if isinstance(native, np.ndarray):  # numpy, cv2.Mat
        return np.squeeze(np.asarray(native).view(np.ndarray))
    if name == "Tensor" and type(native).__module__.startswith("openvino"):
        return np.squeeze(native.data)
    if name == "Buffer":  # pyopencl
        import pyopencl as cl

        ctx = interop.Context.default(MemoryType.OPENCL)
        host = np.empty(native.size, np.uint8)
        cl.enqueue_copy(ctx.queue, host, native)  # type: ignore[attr-defined]
        return _strided(host, meta)
    if name == "UMat":
        return np.squeeze(native.get())
    if name == "VideoPlane":
        return _strided(np.frombuffer(native, np.uint8), meta)
    if name == "VideoFrame":
        return _read(native.planes[0], {"shape": meta["shape"], "strides": meta["strides"], "offset": 0})
    if hasattr(native, "copy_to_host"):  # dpctl USM memory
        return _strided(native.copy_to_host(), meta)
    if name == "Memory" and type(native).__module__.startswith("gi."):  # Gst.Memory
        from interop.tensors.gst import gst

        ok, mi = native.map(gst().MapFlags.READ)
        assert ok, "gst_memory_map failed"
        try:
            data = np.frombuffer(bytes(mi.data), np.uint8)
        finally:
            native.unmap(mi)
        return _strided(data, meta)
    if name == "DMABuffer":
        return _strided(np.frombuffer(os.pread(native.fd, native.size, 0), np.uint8), meta)
    raise AssertionError(f"no reader for a native {type(native).__module__}.{name}: add one to this test")


def child(path: tuple[str, ...]) -> None:
    """Run in a child process, for a tensor then a frame: hold each native alone, recycle the heap, read it back.
    Prints one line per kind: OK, SKIP (why) or FAIL (what); a crash ends the process."""
    img = _image(BIG)
    h, w = img.shape
    for kind in ("tensor", "frame"):
        try:
            held = _natives(path, kind, img)
        except (Unavailable, interop.UnsupportedTypeError) as e:  # e.g. a frames-only mapper given a tensor
            print(f"SKIP {kind}: {e}", flush=True)
            continue
        gc.collect()
        # take back what a free gave away: fresh allocations of the same size, written with other bytes
        garbage = [np.full(img.size, 0xAB, np.uint8) for _ in range(3)]
        for what, native, meta in held:
            print(f"reading {kind} {what}", flush=True)  # names the native if reading it crashes
            got = _read(native, meta)
            if got.shape[0] != h or got.shape[1] < w or not np.array_equal(got[:, :w], img):
                print(f"FAIL {kind}: {what} ({type(native).__name__}) does not read the original bytes after its "
                      f"source was freed", flush=True)
        del garbage, held
        print(f"OK {kind}", flush=True)


def _native_cases() -> list[Any]:
    known: dict[tuple[str, ...], str] = {}  # path -> why it fails today (a strict xfail, so a fix shows up)
    return [pytest.param(p, id="-".join(p), marks=[pytest.mark.xfail(strict=True, reason=known[p])] if p in known else [])
            for p in PATHS]


@pytest.mark.parametrize("path", _native_cases())
def test_native_outlives_source_and_mapping(path: tuple[str, ...]) -> None:
    code = f"from tests.test_native_handles import child; child({path!r})"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    route = " -> ".join(path)
    assert r.returncode == 0, (f"{route}: the child died (exit {r.returncode}) after: {lines[-1:]}: a native read "
                               f"freed memory\n{r.stderr[-3000:]}")
    fails = [ln for ln in lines if ln.startswith("FAIL")]
    assert not fails, f"{route}: {fails}"
    if not any(ln.startswith("OK") for ln in lines):
        pytest.skip("; ".join(ln[5:] for ln in lines if ln.startswith("SKIP")))


# ---- 2. READ mappings are read-only ---------------------------------------------------------------------------

# Edges whose mapper files belong to other developers (issue 15 item 14, reported): strict, so a fix shows up.
KNOWN_WRITABLE: dict[tuple[str, ...], str] = {}


def _read_only_cases() -> list[Any]:
    cases = []
    for path in PATHS:
        for kind in ("tensor", "frame"):
            why = KNOWN_WRITABLE.get(path)
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            cases.append(pytest.param(path, kind, marks=marks, id=f"{'-'.join(path)}-{kind}"))
    return cases


@pytest.mark.parametrize(("path", "kind"), _read_only_cases())
def test_read_mapping_is_read_only(path: tuple[str, ...], kind: str) -> None:
    img = _image(SMALL)
    try:
        out = _map_along(path, kind, img, AccessMode.READ)
    except Unavailable as e:
        pytest.skip(str(e))
    except interop.UnsupportedTypeError as e:
        pytest.skip(f"{' -> '.join(path)} does not take a {kind}: {e}")
    planes = out.tensors if isinstance(out, Frame) else [out]
    for t in planes:
        assert not t.writable, f"{t!r}: a READ mapping says it is writable"
        try:
            view = np.asarray(t)
        except InteropError:  # the CPU cannot reach it: a WRITE mapping of it to the CPU must be refused
            with pytest.raises(InvalidTensorError, match="read-only"):
                interop.map(t, MemoryType.CPU, mode=AccessMode.WRITE, allow_copy=True)
            continue
        assert not view.flags.writeable, f"{t!r}: numpy.asarray of a READ mapping is writeable"
        with pytest.raises(ValueError):
            view[(0,) * view.ndim] = 1
        dl = np.from_dlpack(t)
        assert not dl.flags.writeable, f"{t!r}: np.from_dlpack of a READ mapping is writeable"
        with pytest.raises(BufferError):
            t.__dlpack__()  # a legacy (unversioned) capsule has no read-only flag: refused, as numpy does
        np.testing.assert_array_equal(np.squeeze(view)[:, : img.shape[1]], img)
