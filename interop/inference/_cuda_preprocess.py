"""Pre-processing on the GPU for a model that runs on the host (OpenVINO's CPU or GPU plugin fed host tensors).

An NVDEC frame's planes (NV12, P010) are read in place on the GPU by one CUDA kernel that resizes them (bilinear on
cv2.resize's half-pixel grid), converts the colours (the frame's own matrix and range, ``color_matrix``), applies the
model's mean and scale and writes the network's f32 input (NCHW or NHWC) straight into page-locked host memory
mapped into the GPU's address space, where OpenVINO reads it. Nothing is copied: the kernel's output *is* the
network's input tensor, computed once where the network reads it. The host's CPU only launches the kernel and
waits for it (a blocking-sync event: the thread sleeps, it does not spin), so a CPU that runs the network keeps its
cores for the network.

Kernels are compiled by CuPy (NVRTC) once per pixel type per process. The output buffers are page-locked host
memory of the input's exact size, one per request that may hold one (``reserve``, when the model is compiled: pinning
memory takes milliseconds, which a frame cannot spare), each back for reuse when its last view is dropped (the request
that read it took its next input). The buffers of the SIZES_KEPT sizes used last are kept while an Inference that
used them is open (``hold``/``let_go``); others are freed as they come back.
"""

from __future__ import annotations

import ctypes
import errno
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InteropError, InvalidTensorError, UnsupportedFormatError
from ..frame import Frame
from ..info import TensorInfo
from ..types import ColorRange, ColorSpace, FrameFormat, MemoryType
from ._preprocess import color_matrix

#: frame formats the kernel reads: 4:2:0 with interleaved chroma, 8 or 16 bits per sample (what NVDEC outputs)
FORMATS = {FrameFormat.NV12: ("unsigned char", 1.0), FrameFormat.P010: ("unsigned short", 1 / 256)}

_BLOCK = (32, 8)

_SOURCE = r"""
__device__ __forceinline__ float tap(const PIX* __restrict__ p, long long pitch, int stride, int ch, int w, int h,
                                     float fx, float fy)
{
    // bilinear on the half-pixel grid; positions clamped to the plane, as cv2.resize does at the edges
    fx = fminf(fmaxf(fx, 0.0f), (float)(w - 1));
    fy = fminf(fmaxf(fy, 0.0f), (float)(h - 1));
    int x0 = (int)fx, y0 = (int)fy;
    int x1 = min(x0 + 1, w - 1), y1 = min(y0 + 1, h - 1);
    float ax = fx - (float)x0, ay = fy - (float)y0;
    const PIX* r0 = p + (long long)y0 * pitch;
    const PIX* r1 = p + (long long)y1 * pitch;
    float a = (float)r0[x0 * stride + ch] + ((float)r0[x1 * stride + ch] - (float)r0[x0 * stride + ch]) * ax;
    float b = (float)r1[x0 * stride + ch] + ((float)r1[x1 * stride + ch] - (float)r1[x0 * stride + ch]) * ax;
    return a + (b - a) * ay;
}

extern "C" __global__ void to_tensor(unsigned long long y_addr, long long y_pitch, unsigned long long uv_addr,
                                     long long uv_pitch, int w, int h, unsigned long long out_addr, int ow, int oh,
                                     int nhwc, const float* __restrict__ k)
{
    // k: the colour matrix (3 x 3, rows in the model's channel order, columns Y U V, stored values to 8-bit
    // levels), its bias (3), the mean (3) and 1 / scale (3)
    int ox = blockIdx.x * blockDim.x + threadIdx.x;
    int oy = blockIdx.y * blockDim.y + threadIdx.y;
    if (ox >= ow || oy >= oh) return;
    const PIX* yp = (const PIX*)y_addr;
    const PIX* uvp = (const PIX*)uv_addr;
    int cw = (w + 1) / 2, chh = (h + 1) / 2;
    float Y = tap(yp, y_pitch, 1, 0, w, h, (ox + 0.5f) * ((float)w / ow) - 0.5f, (oy + 0.5f) * ((float)h / oh) - 0.5f);
    float cx = (ox + 0.5f) * ((float)cw / ow) - 0.5f, cy = (oy + 0.5f) * ((float)chh / oh) - 0.5f;
    float U = tap(uvp, uv_pitch, 2, 0, cw, chh, cx, cy);
    float V = tap(uvp, uv_pitch, 2, 1, cw, chh, cx, cy);
    float* out = (float*)out_addr;
    long long plane = (long long)ow * oh;
    long long at = (long long)oy * ow + ox;
    for (int c = 0; c < 3; ++c) {
        float v = k[3 * c] * Y + k[3 * c + 1] * U + k[3 * c + 2] * V + k[9 + c];
        v = fminf(fmaxf(v, 0.0f), 255.0f);
        v = (v - k[12 + c]) * k[15 + c];
        if (nhwc) out[at * 3 + c] = v; else out[c * plane + at] = v;
    }
}
"""


@dataclass(frozen=True)
class Target:
    """What the kernel writes: the model input's (height, width), layout, mean and scale (model channel order, in
    0..255 pixel units; None: 0 and 1), and channel order."""

    height: int
    width: int
    nhwc: bool = False
    mean: tuple[float, ...] | None = None
    scale: tuple[float, ...] | None = None
    rgb: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return (1, self.height, self.width, 3) if self.nhwc else (1, 3, self.height, self.width)


class GPUInput:
    """A model input made by GPU pre-processing (``Inference.gpu_preprocess``): ``array`` (f32, page-locked host
    memory the GPU writes, the model's input shape) for a frame of ``width`` x ``height`` on CUDA ``device``.

    The kernel may still be running when it is made: ``wait()`` returns once the array is written, and only then
    lets go of the frame the kernel reads (Inference waits before a request reads the array). Made a few frames
    ahead, it is long done by then, and nobody sleeps on the GPU: on a host whose cores all run the network, a
    thread that sleeps gets its core back late."""

    __slots__ = ("_array", "target", "width", "height", "device", "_done", "_frame", "_owner")

    def __init__(self, array: np.ndarray, target: Target, width: int, height: int, device: int = 0,
                 done: Any = None, frame: Any = None, owner: object = None):
        self._array, self.target, self.width, self.height, self.device = array, target, width, height, device
        self._done, self._frame = done, frame
        self._owner = owner  # what made it (an Inference's token): its size, mean, scale and colour order

    @property
    def array(self) -> np.ndarray:
        """The model input, once the kernel has written it (this waits for that)."""
        self.wait()
        return self._array

    def wait(self) -> None:
        """Return once the kernel has written the array, and let go of the frame it read."""
        done = self._done
        if done is not None:
            try:
                if not done.done:
                    done.synchronize()  # a blocking-sync event: the thread sleeps until the kernel ends
            except Exception as e:  # noqa: BLE001 - a kernel that failed: CUDA reports it here, as CuPy's error
                raise BackendUnavailableError(
                    f"the GPU pre-processing kernel failed ({type(e).__name__}: {e}); the GPU's context is lost for "
                    f"this process: restart it, or decode on the CPU (interop run without --nvdec)",
                    backend="cuda") from e
            self._done = self._frame = None

    def __del__(self) -> None:
        # dropped unwaited (a run stopped early): the buffer and the frame go back only once the kernel has ended
        try:
            self.wait()
        except Exception:  # noqa: BLE001,S110 - nothing to report to in a finaliser; a failed kernel was reported
            pass

    def __repr__(self) -> str:
        return f"<GPUInput {self.target.shape} f32 for a {self.width}x{self.height} frame on cuda:{self.device}>"


def _nbytes(target: Target) -> int:
    return TensorInfo(target.shape, np.dtype(np.float32)).nbytes


def cuda_frame(x: Any) -> Frame | None:
    """``x`` as a CUDA Frame when it is GPU memory (a CUDA Frame, or an NVDEC-decoded av.VideoFrame: mapped in
    place); None for anything else. Imports nothing for host inputs."""
    if isinstance(x, Frame):
        return x if x.memory_type is MemoryType.CUDA else None
    fmt = getattr(x, "format", None)
    if getattr(fmt, "name", None) != "cuda" or not hasattr(x, "sw_format"):
        return None
    from ..api import map as imap

    f = imap(x, MemoryType.CUDA)
    return f if isinstance(f, Frame) else None


def _vec(v: tuple[float, ...] | None, default: float) -> np.ndarray:
    if v is None:
        return np.full(3, default, np.float32)
    a = np.asarray(v, np.float32)
    if a.size == 1:
        return np.full(3, float(a[0]), np.float32)
    if a.size != 3:
        raise InvalidTensorError(f"GPU pre-processing writes 3 channels: mean/scale {v} must have 1 or 3 values")
    return a


def constants(fmt: FrameFormat, colorspace: ColorSpace | None, color_range: ColorRange | None,
              target: Target) -> np.ndarray:
    """The kernel's 18 constants for frames of ``fmt`` (see _SOURCE): pure arithmetic, testable on any machine."""
    w, bias = color_matrix("yuv", colorspace, color_range, target.rgb, FORMATS[fmt][1])
    mean, scale = _vec(target.mean, 0.0), _vec(target.scale, 1.0)
    if np.any(scale == 0):
        raise InvalidTensorError(f"scale {target.scale} has a zero: the model input would be infinite")
    return np.concatenate([w.reshape(9), bias, mean, 1.0 / scale]).astype(np.float32)


def reference(y: np.ndarray, uv: np.ndarray, width: int, height: int, k: np.ndarray, target: Target) -> np.ndarray:
    """What the kernel computes, in numpy (float64): planes ``y`` (rows, pitch) and ``uv`` (rows, pitch/2, 2) of
    stored values. The GPU tests compare the kernel with it."""

    def taps(p: np.ndarray, w: int, h: int, ow: int, oh: int) -> np.ndarray:
        fx = np.clip((np.arange(ow) + 0.5) * (w / ow) - 0.5, 0, w - 1)
        fy = np.clip((np.arange(oh) + 0.5) * (h / oh) - 0.5, 0, h - 1)
        x0, y0 = fx.astype(np.int64), fy.astype(np.int64)
        x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
        ax, ay = (fx - x0)[None, :, None], (fy - y0)[:, None, None]
        q = p.astype(np.float64)
        a = q[y0][:, x0] + (q[y0][:, x1] - q[y0][:, x0]) * ax
        b = q[y1][:, x0] + (q[y1][:, x1] - q[y1][:, x0]) * ax
        return a + (b - a) * ay  # type: ignore[no-any-return]

    oh, ow = target.height, target.width
    yy = taps(y[:height, :width, None], width, height, ow, oh)[..., 0]
    cw, ch = -(-width // 2), -(-height // 2)
    c = taps(uv[:ch, :cw], cw, ch, ow, oh)
    yuv = np.stack([yy, c[..., 0], c[..., 1]], -1)
    m = k[:9].astype(np.float64).reshape(3, 3)
    rgb = np.clip(yuv @ m.T + k[9:12], 0, 255)
    out = (rgb - k[12:15]) * k[15:18]
    return out[None] if target.nhwc else out.transpose(2, 0, 1)[None]


class HostBuffers:
    """Page-locked host buffers of ``nbytes`` on ``device``'s pinned memory, reused: ``take()`` hands one out as a
    uint8 array, back when the last view of it is gone (a finaliser: list appends and pops, no lock to take there).
    A retired pool (a size no longer used) frees its buffers instead, now and as they come back."""

    def __init__(self, device: int, nbytes: int):
        self.device, self.nbytes = device, nbytes
        self._free: list[int] = []
        self.allocated = 0
        self.retired = False
        self._driver: Any = None

    def _alloc(self) -> int:
        from ..errors import ResourceError
        from ..native.cuda_driver import driver

        try:
            self._driver = driver()  # frees go to the binding that allocated (tests swap bindings)
            ptr = self._driver.host_alloc(self.device, self.nbytes)
        except InteropError as e:
            if type(e) is not InteropError:  # already typed (no driver: BackendUnavailableError)
                raise
            raise ResourceError(errno.ENOMEM, f"could not pin {self.nbytes} bytes of host memory for the model's "
                                              f"input ({e}): free memory, or decode on the CPU (without --nvdec)") from e
        self.allocated += 1
        return ptr

    def _release(self, ptr: int) -> None:
        self.allocated -= 1
        self._driver.host_free(ptr)

    def _back(self, ptr: int) -> None:
        if self.retired:
            self._release(ptr)
            return
        self._free.append(ptr)
        if self.retired:  # retired by another thread meanwhile: its drain may have run before this append
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                ptr = self._free.pop()
            except IndexError:
                return
            self._release(ptr)

    def retire(self) -> None:
        self.retired = True
        self._drain()

    def reserve(self, n: int) -> None:
        """Make sure ``n`` buffers exist (allocated now, outside any timed frame); none for a retired pool."""
        while self.allocated < n and not self.retired:
            self._back(self._alloc())

    def take(self) -> np.ndarray:
        try:
            ptr = self._free.pop()
        except IndexError:
            ptr = self._alloc()
        block = (ctypes.c_uint8 * self.nbytes).from_address(ptr)
        holder = np.frombuffer(block, np.uint8)  # type: ignore[call-overload]
        # not at exit: a request may still read the buffer then (Inference's own exit handling ends them first)
        weakref.finalize(holder, self._back, ptr).atexit = False
        return holder


#: input sizes whose buffers are kept per process (a model compiled for a few frame sizes); an older one is retired
SIZES_KEPT = 4
_buffers: dict[tuple[int, int], HostBuffers] = {}
_buffers_lock = threading.Lock()


_holders: dict[tuple[int, int], int] = {}  # (device, nbytes) -> open Inferences that use buffers of that size


def hold(device: int, nbytes: int) -> None:
    """An Inference uses buffers of this size (until it lets go)."""
    with _buffers_lock:
        _holders[(device, nbytes)] = _holders.get((device, nbytes), 0) + 1


def let_go(device: int, nbytes: int) -> None:
    """An Inference closed: the last one to let go of a size frees its buffers (now, and as the rest come back)."""
    key = (device, nbytes)
    with _buffers_lock:
        if key not in _holders:  # never held: nothing of anyone else's to free
            return
        n = _holders[key] - 1
        if n > 0:
            _holders[key] = n
            return
        _holders.pop(key, None)
        b = _buffers.pop(key, None)
    if b is not None:
        b.retire()


def host_buffers(device: int, nbytes: int) -> HostBuffers:
    """The process's reused buffers of one size on one device (those of the SIZES_KEPT sizes used last are kept)."""
    key = (device, nbytes)
    with _buffers_lock:
        b = _buffers.pop(key, None) or HostBuffers(device, nbytes)
        _buffers[key] = b  # the most recently used last: dicts keep their order of insertion
        while len(_buffers) > SIZES_KEPT:
            _buffers.pop(next(iter(_buffers))).retire()
    return b


class GPUPreprocess:
    """The kernels and their constants for one Inference; ``run(frame, target)`` returns the model input as a host
    array written by the GPU."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kernels: dict[FrameFormat, Any] = {}
        self._constants: dict[tuple[Any, ...], Any] = {}
        self._streams: dict[tuple[int, int], Any] = {}

    @staticmethod
    def _cupy() -> Any:
        try:
            import cupy
        except ImportError as e:
            raise BackendUnavailableError("pre-processing NVDEC frames on the GPU needs CuPy (it compiles the kernel): "
                                          "pip install cupy-cuda12x (or cupy-cuda13x, matching the driver), or "
                                          "decode on the CPU (interop run without --nvdec)", backend="cuda") from e
        return cupy

    def _kernel(self, fmt: FrameFormat) -> Any:
        k = self._kernels.get(fmt)
        if k is None:
            cupy = self._cupy()
            k = cupy.RawKernel(_SOURCE.replace("PIX", FORMATS[fmt][0]), "to_tensor")
            k.compile()  # NVRTC now: a CuPy without it fails here, not inside the first launch
            self._kernels[fmt] = k
        return k

    def _k(self, device: int, f: Frame, target: Target) -> Any:
        key = (device, f.format, f.colorspace, f.color_range, target.rgb, target.mean, target.scale)
        k = self._constants.get(key)
        if k is None:
            cupy = self._cupy()
            with cupy.cuda.Device(device):
                k = cupy.asarray(constants(f.format, f.colorspace, f.color_range, target))
            self._constants[key] = k
        return k

    def _stream(self, cupy: Any, handle: int, device: int) -> Any:
        s = self._streams.get((handle, device))
        if s is None:
            with warnings.catch_warnings():  # CuPy 14 deprecates it for Stream.from_external, which older ones lack
                warnings.simplefilter("ignore", DeprecationWarning)
                s = self._streams[(handle, device)] = cupy.cuda.ExternalStream(handle, device)
        return s

    def check(self, f: Frame) -> None:
        if f.format not in FORMATS:
            raise UnsupportedFormatError(
                f"GPU pre-processing takes {', '.join(x.name for x in FORMATS)} frames (NVDEC's 4:2:0 output), "
                f"not {f.format.name}: decode to one of those, or map the frame to the CPU (allow_copy: a counted copy; "
                f"interop run: leave --nvdec out)")
        y, uv = f.tensors[0], f.tensors[1]
        item = np.dtype(y.info.dtype).itemsize
        if any(t.info.strides[0] % item for t in (y, uv)) or y.info.strides[-1] != item or uv.info.strides[-1] != item:
            raise InvalidTensorError(f"the planes of this {f.format.name} frame are not row-pitched arrays of "
                                     f"{item}-byte samples: {y.info}, {uv.info}")
        w, h = f.width, f.height
        if y.info.shape[0] < h or y.info.shape[1] < w or uv.info.shape[0] < -(-h // 2) or uv.info.shape[1] < -(-w // 2):
            raise InvalidTensorError(f"the planes {y.info.shape}, {uv.info.shape} of a {w}x{h} {f.format.name} frame "
                                     f"are smaller than the frame")

    def run(self, f: Frame, target: Target, owner: object = None) -> GPUInput:
        """The model input for CUDA frame ``f`` (one ``check`` passed: the caller refuses a frame before it does any
        other work for it): a C-contiguous f32 host array (page-locked) that a kernel queued now writes. The frame's
        planes are read in place, after their producer's pending writes (the kernel runs on their stream); the
        GPUInput holds the frame until its ``wait()`` has seen the kernel end."""
        from ..tensors.cuda import CUDATensor

        y, uv = f.tensors[0], f.tensors[1]
        if not isinstance(y, CUDATensor) or not isinstance(uv, CUDATensor):
            raise InvalidTensorError(f"GPU pre-processing reads CUDA planes, not {type(y).__name__}")
        cupy = self._cupy()
        dev = y.device_id
        item = np.dtype(y.info.dtype).itemsize
        out = host_buffers(dev, _nbytes(target)).take().view(np.float32).reshape(target.shape)
        stream = y.stream or 1  # the producer's stream (1: the legacy default stream)
        grid = (-(-target.width // _BLOCK[0]), -(-target.height // _BLOCK[1]))
        u64, i64, i32 = np.uint64, np.int64, np.int32
        try:
            with self._lock:
                kern = self._kernel(f.format)
                k = self._k(dev, f, target)
            with cupy.cuda.Device(dev):
                s = self._stream(cupy, int(stream), dev)
                kern(grid, _BLOCK, (u64(y.ptr), i64(y.info.strides[0] // item), u64(uv.ptr),
                                    i64(uv.info.strides[0] // item), i32(f.width), i32(f.height), u64(out.ctypes.data),
                                    i32(target.width), i32(target.height), i32(target.nhwc), k), stream=s)
                try:
                    done = cupy.cuda.Event(block=True, disable_timing=True)
                    done.record(s)
                except BaseException:
                    s.synchronize()  # the kernel may be running: nothing may reuse its buffer or frame before it ends
                    raise
        except Exception as e:  # noqa: BLE001 - CuPy's own errors (NVRTC, driver/runtime mismatch) become one typed error
            if isinstance(e, InteropError):
                raise
            raise BackendUnavailableError(
                f"GPU pre-processing failed in CuPy ({type(e).__name__}: {e}): install the cupy-cudaXX matching the "
                f"NVIDIA driver's CUDA version (with its NVRTC), or decode on the CPU (interop run without --nvdec)",
                backend="cuda") from e
        return GPUInput(out, target, f.width, f.height, dev, done, f, owner)
