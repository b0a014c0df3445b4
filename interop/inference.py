"""Inference: an OpenVINO model fed zero-copy with frames or tensors of any memory type.

Frames (I420 three planes, NV12 two planes, packed RGB/BGR/RGBX/BGRX) go through pre-processing compiled into the
model with OpenVINO's ``PrePostProcessor``: colour conversion, crop of padded pitches, resize, mean/scale, layout
and dtype all run inside the model, so the CPU never converts or copies a pixel. The planes arrive as OpenVINO
tensors over the producer's memory at full pitch (``interop.map(frame, MemoryType.OPENVINO)``), shaped
(1, rows, pitch, C); one model is compiled per plane layout (format, pitches, rows, visible size) and cached.
A Tensor (or numpy array) is fed as the raw model input.

Requests run in a pool sized by the device's OPTIMAL_NUMBER_OF_INFER_REQUESTS. Results are numpy arrays copied
out of the requests; ``output_bytes`` counts those bytes (this is not a mapper copy: ``copy_meter()`` does not see it).
"""

from __future__ import annotations

import atexit
import errno
import gc
import logging
import math
import os
import re
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .backends import require
from .errors import (
    InteropError,
    InteropTimeoutError,
    InvalidTensorError,
    ResourceError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from .frame import Frame
from .tensor import Tensor
from .types import FrameFormat, MemoryType

log = logging.getLogger(__name__)

Outputs = dict[Any, np.ndarray]
Callback = Callable[[Outputs, Any], None]

_PACKED = {FrameFormat.RGB: "RGB", FrameFormat.BGR: "BGR", FrameFormat.RGBX: "RGBX", FrameFormat.BGRX: "BGRX"}

# a model input side beyond this is refused up front: no image model goes near it, and OpenVINO would try to
# allocate the tensors of a 2**40-wide input rather than refuse it
MAX_INPUT_SIDE = 1 << 16


class CompileError(InteropError, ValueError):
    """OpenVINO refused the model with the arguments given: a device name, a ``config`` key or value, or an
    ``input_size`` the model cannot be reshaped to. Also a ValueError (the arguments are wrong, not the call);
    the message carries OpenVINO's own text, and ``__cause__`` its exception."""


class CallbackReentryError(InteropError, RuntimeError):
    """A call that waits for this Inference's requests (``infer``, ``wait_all``, ``close``) was made from one of
    its own completion callbacks, where it could only wait for itself. ``infer_async`` is allowed there."""


def _ov_message(e: BaseException) -> str:
    """OpenVINO's message without its source-location lines ("Exception from src/...cpp:117:"), on one line."""
    lines = []
    for ln in str(e).splitlines():
        ln = ln.strip()
        if re.fullmatch(r"Exception from \S+:\d+:", ln):
            continue
        ln = re.sub(r"^Check '.*' failed at \S+:\d+:\s*", "", ln)
        if ln:
            lines.append(ln)
    return " ".join(lines) or str(e).strip() or type(e).__name__


# Which Inferences run a completion callback on this thread (ids): their submissions are queued, not waited for.
_callback_state = threading.local()


def _callbacks_here() -> list[int]:
    owners: list[int] | None = getattr(_callback_state, "owners", None)
    if owners is None:
        owners = _callback_state.owners = []
    return owners


def _get_core() -> Any:
    """The shared ov.Core (interop.tensors.openvino's, so remote contexts and caches are shared)."""
    from .tensors.openvino import get_core

    return get_core()


def _ov_native(t: Tensor) -> Any:
    """The ov.Tensor (or RemoteTensor) behind an OPENVINO/NPU tensor."""
    return t.native


def _as_4d(ov: Any, nat: Any) -> Any:
    """A plane as (1, rows, pitch, C): producers may give (rows, pitch) or (rows, pitch, C); same memory."""
    shape = tuple(nat.get_shape())  # ov.RemoteTensor (NPU planes) has get_shape() but no .shape
    if len(shape) == 4:
        return nat
    if len(shape) in (2, 3):
        arr = nat.data  # a writeable host view of the tensor's memory (CPU-reachable tensors only)
        return ov.Tensor(arr.reshape((1,) + shape + ((1,) if len(shape) == 2 else ())), shared_memory=True)
    raise InvalidTensorError(f"a frame plane shaped {shape} cannot be fed to the model: expected (1, rows, pitch, C)")


class _Ownerless:
    """Read-only bytes at an address, for numpy (``np.asarray``), owning nothing: see _PlaneInputs."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, nbytes: int):
        self.__array_interface__ = {"version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (address, True)}


class _PlaneInputs:
    """Request inputs for decoded planes mapped to OpenVINO, one ov.Tensor per (address, plane layout), reused.

    A decoder hands out frames from a small pool of buffers, so the same few addresses come back frame after
    frame; making an ov.Tensor per plane per frame (OpenVINO's constructor: 1.1 µs) is the largest cost of
    feeding a frame. These tensors own nothing, so they are safe only as Inference uses them: a request reads
    one while the job keeps the mapped frame (and so that buffer) alive, and they never leave Inference. A
    tensor is (address, shape, type) and nothing else, so one made for an earlier buffer at the same address
    and layout is exactly the tensor a new one would be (the map checked that the layout fits the buffer)."""

    LIMIT = 1024  # entries (a few pools of tens of buffers); past it the cache starts again

    def __init__(self, ov: Any):
        self._tensor = ov.Tensor
        self._cache: dict[tuple[int, Any], Any] = {}
        self.made = 0

    def get(self, t: Any) -> Any:
        """The request input for PlaneTensor ``t`` (its address and layout, the same memory as ``t.native``)."""
        spec = t._spec
        addr = t._host_address()
        key = (addr, spec)
        nat = self._cache.get(key)
        if nat is None:
            nat = self._tensor(np.asarray(_Ownerless(addr, spec.full.nbytes)), spec.shape, spec.type)
            if len(self._cache) >= self.LIMIT:
                self._cache.clear()
            self._cache[key] = nat
            self.made += 1
        return nat

    def clear(self) -> None:
        self._cache.clear()


_plane_tensor: type | None = None


def _plane_tensor_class() -> type:
    global _plane_tensor
    if _plane_tensor is None:
        from .mappers.ffmpeg_to_openvino import PlaneTensor

        _plane_tensor = PlaneTensor
    return _plane_tensor


_live: weakref.WeakSet[Inference] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # OpenVINO's request threads must be gone before the interpreter tears down (else std::terminate at exit).
    for inf in list(_live):
        inf.close()
    # The same for the plugins' own threads: release the shared Core, the contexts and the cached chains that hold
    # it, and the compiled models of closed Inferences, while the interpreter is whole (best effort: a Core the
    # program itself still references lives on).
    from . import routing
    from .context import set_default_context
    from .tensors import openvino as ovt
    from .types import MemoryType

    routing.forget_cached_routes()
    set_default_context(MemoryType.OPENVINO, None)
    ovt.drop_core()
    gc.collect()


def _check_timeout(timeout: object) -> float | None:
    """A timeout argument: None (wait for ever) or a finite number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, (bool, np.bool_)) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise UnsupportedTypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    t = float(timeout)
    if not (t >= 0 and math.isfinite(t)):  # NaN fails every comparison
        raise InvalidTensorError(f"timeout must be a finite number of seconds >= 0 (None waits for ever), got {timeout!r}")
    return t


_DRAIN_LINGER = 1.0  # seconds the drainer waits for more queued submissions before its thread ends


def _drain(ref: weakref.ref[Inference], cond: threading.Condition,
           backlog: deque[tuple[_Variant, list[Any], _Job]]) -> None:
    """Start the submissions queued by completion callbacks, waiting for free requests as a caller's thread would.

    Holds the Inference weakly (only the queue and its condition strongly); ends after _DRAIN_LINGER idle."""
    while True:
        with cond:
            if not cond.wait_for(lambda: bool(backlog), _DRAIN_LINGER):
                inf = ref()
                if inf is not None:
                    inf._drainer = None
                return
            v, inputs, job = backlog.popleft()
        try:
            with v.submit_lock:
                v.queue.start_async(inputs, job)  # this thread runs no callback: waiting here is safe
        except BaseException as e:  # noqa: B036 - reported by wait_all(), never lost on this thread
            inf = ref()
            if inf is not None:
                inf._submit_failed(job, e)
        del v, inputs, job


class _Dispatch:
    """The queue's callback. Holds the Inference weakly: no cycle queue -> callback -> Inference -> queue."""

    __slots__ = ("ref",)

    def __init__(self, inf: Inference):
        self.ref = weakref.ref(inf)

    def __call__(self, request: Any, job: _Job) -> None:
        inf = self.ref()
        if inf is not None:
            inf._on_done(request, job)
        elif job.event is not None:
            job.event.set()


@dataclass
class _Job:
    variant: _Variant
    callback: Callback | None
    userdata: Any
    keepalive: Any  # the input frame/tensors: their memory is read by the request until it completes
    event: threading.Event | None = None
    result: Outputs | None = None
    error: BaseException | None = None


@dataclass
class _Variant:
    """One compiled model (raw, or with the pre-processing for one plane layout) and its request pool."""

    key: Any
    compiled: Any
    queue: Any
    inputs: list[Any]
    output_keys: list[Any]
    nreq: int
    model: Any = None  # the ov.Model compiled: where input shapes of a dynamic model are checked
    shapes_ok: set[tuple[tuple[int, ...], ...]] = field(default_factory=set)  # input shapes that passed the check
    dynamic: bool = False  # an input has a dynamic dimension
    submit_lock: threading.Lock = field(default_factory=threading.Lock)


class Inference:
    """Run an OpenVINO model on frames or tensors of any memory type, zero-copy.

    ``model``: a path (OpenVINO IR .xml, .onnx, .tflite) or an ``ov.Model``. ``device``: an OpenVINO device name;
    None takes the NPU when present, else the CPU (logged). ``input_size``: (width, height) the model runs at,
    used when the model's spatial size is dynamic (a static model keeps its own); an int means square.
    ``mean``/``scale``: per-channel (or scalar) values in 0..255 pixel units applied as ``(x - mean) / scale``,
    in the model's channel order; ``rgb``: the model takes RGB (False: BGR). ``config``: OpenVINO compile
    properties (default PERFORMANCE_HINT=THROUGHPUT, for the async pool).

    ``infer(x)`` returns ``{output name: ndarray}``; ``infer_async(x, callback, userdata)`` returns at once and
    calls ``callback(outputs, userdata)`` on OpenVINO's thread; ``wait_all(timeout=None)`` waits for every request
    and re-raises the first error (InteropTimeoutError past ``timeout``). A callback may call ``infer_async`` (it
    never waits there: past a full pool the input is queued and started as requests complete); ``infer``,
    ``wait_all`` and ``close`` would wait for the callback's own request, and raise CallbackReentryError there.
    A Frame's memory stays referenced until its request completes; the caller must not write into it meanwhile.

    Bad arguments raise InteropError subclasses that are also TypeError (a wrong type) or ValueError (a wrong
    value); OpenVINO's refusals (a config key or value, a device id, an input size the model cannot take) are
    CompileError, raised when the model is compiled (the first input, or ``compile_for``), with OpenVINO's text.
    An input shape a dynamic model cannot run is refused (InvalidTensorError) before a request starts.
    """

    def __init__(self, model: Any, device: str | None = None, *, input_size: int | Sequence[int] | None = None,
                 mean: float | Sequence[float] | None = None, scale: float | Sequence[float] | None = None,
                 rgb: bool = True, config: Mapping[str, Any] | None = None):
        self._ov = ov = require("openvino", "OpenVINO", "openvino")
        self._core = core = _get_core()
        if isinstance(model, ov.Model):
            self._model = model
            self.model_name = model.get_friendly_name() or "model"
        elif isinstance(model, (str, os.PathLike)):
            path = os.fspath(model)
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if not os.path.isfile(path):
                what = "is a directory, not a model file" if os.path.isdir(path) else "not found"
                raise InvalidTensorError(f"model file {path!r} {what}: give the path of an OpenVINO IR (.xml), "
                                         f"ONNX (.onnx) or TFLite (.tflite) model")
            try:
                self._model = core.read_model(path)
            except Exception as e:  # noqa: BLE001 - OpenVINO's frontends raise RuntimeError and others
                raise InvalidTensorError(f"OpenVINO cannot read the model {path!r}: {_ov_message(e)}; "
                                         f"give an IR (.xml with its .bin), ONNX or TFLite file") from e
            self.model_name = os.path.basename(path)
        else:
            raise UnsupportedTypeError(f"model must be a path or an openvino.Model, not {type(model).__name__}")
        self._device = self._pick_device(device)
        self._memory_type = MemoryType.NPU if self._device.split(".")[0].upper() == "NPU" else MemoryType.OPENVINO
        self._config: dict[str, Any] = {"PERFORMANCE_HINT": "THROUGHPUT"}
        self._config.update(self._check_config(config))
        self._input_size = self._check_size(input_size)
        self._mean = self._check_vec(mean, "mean")
        self._scale = self._check_vec(scale, "scale")
        if self._scale is not None and any(s == 0 for s in self._scale):
            raise InvalidTensorError("scale must not contain 0 (the input is divided by it)")
        if not isinstance(rgb, (bool, np.bool_)):
            raise UnsupportedTypeError(f"rgb must be True (the model takes RGB) or False (BGR), not {rgb!r}")
        self._rgb = bool(rgb)
        self._variants: dict[Any, _Variant] = {}
        self._plane_inputs = _PlaneInputs(ov)
        self._variants_lock = threading.Lock()
        self._cond = threading.Condition()
        self._pending = 0
        self._errors: list[BaseException] = []
        self._output_bytes = 0
        self.compile_seconds = 0.0
        self.requests_done = 0
        self._closed = False
        # submissions made from completion callbacks, started by a thread of their own (see infer_async)
        self._backlog: deque[tuple[_Variant, list[Any], _Job]] = deque()
        self._drainer: threading.Thread | None = None
        _live.add(self)

    # -- properties -----------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return self._device

    @property
    def output_bytes(self) -> int:
        """Bytes copied out of infer requests into the numpy results (not a mapper copy)."""
        with self._cond:
            return self._output_bytes

    @property
    def memory_type(self) -> MemoryType:
        """The memory type inputs are routed to before inference (OPENVINO; NPU on the NPU)."""
        return self._memory_type

    @property
    def model(self) -> Any:
        """The ov.Model as given or read (without interop's pre-processing)."""
        return self._model

    def __repr__(self) -> str:
        return f"<Inference {self.model_name} on {self._device}, {len(self._variants)} compiled>"

    # -- set-up helpers ---------------------------------------------------------------------------------
    def _pick_device(self, device: str | None) -> str:
        avail = list(self._core.available_devices)
        if device is None:
            dev = "NPU" if any(d.split(".")[0] == "NPU" for d in avail) else "CPU"
            log.info("Inference: device %s (%s)", dev, "NPU found" if dev == "NPU" else f"no NPU among {avail}")
            return dev
        if not isinstance(device, str):
            raise UnsupportedTypeError(f"device must be an OpenVINO device name such as 'CPU' or 'NPU', not {device!r}")
        base = device.split(":")[0].split(".")[0].upper()
        if base not in ("AUTO", "MULTI", "HETERO", "BATCH") and not any(d.split(".")[0].upper() == base for d in avail):
            from .errors import BackendUnavailableError

            raise BackendUnavailableError(f"OpenVINO device {device!r} is not available here; devices found: "
                                          f"{', '.join(avail) or 'none'} (leave device=None to pick one)",
                                          backend="openvino", extra="openvino")
        return device

    @staticmethod
    def _check_config(config: Any) -> dict[str, Any]:
        if config is None:
            return {}
        if not isinstance(config, Mapping):
            raise UnsupportedTypeError(f"config must be a dict of OpenVINO compile properties, e.g. "
                                       f"{{'INFERENCE_PRECISION_HINT': 'f32'}}, not {type(config).__name__} {config!r}")
        bad = [k for k in config if not isinstance(k, str)]
        if bad:
            raise UnsupportedTypeError(f"config keys must be OpenVINO property names (str), not {bad[0]!r}")
        return dict(config)

    @staticmethod
    def _check_size(size: Any) -> tuple[int, int] | None:
        if size is None:
            return None
        usage = "input_size must be (width, height) or an int (square), in whole pixels"
        if isinstance(size, np.ndarray):
            size = size.tolist()
        if isinstance(size, (int, np.integer)) and not isinstance(size, (bool, np.bool_)):
            size = (size, size)
        if isinstance(size, (str, bytes)) or not isinstance(size, Sequence) or len(size) != 2:
            raise UnsupportedTypeError(f"{usage}, not {size!r}")
        if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in size):
            raise UnsupportedTypeError(f"{usage}, not {size!r}")
        w, h = (int(v) for v in size)
        if w <= 0 or h <= 0:
            raise InvalidTensorError(f"input_size {size!r} must be positive")
        if w > MAX_INPUT_SIDE or h > MAX_INPUT_SIDE:
            raise InvalidTensorError(f"input_size {size!r} is larger than an image model takes (at most "
                                     f"{MAX_INPUT_SIDE} a side): give the size the model runs at")
        return w, h

    @staticmethod
    def _check_vec(v: Any, what: str) -> list[float] | None:
        if v is None:
            return None
        usage = f"{what} must be a number or a sequence of numbers (one per channel)"
        if isinstance(v, np.ndarray) and v.ndim <= 1:
            v = v.tolist()  # numbers (bools stay bools, and are refused below)
        items = [v] if isinstance(v, (int, float, np.number, np.bool_)) else v
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or any(
                isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)) for x in items):
            raise UnsupportedTypeError(f"{usage}, not {v!r}")
        out = [float(x) for x in items]
        if not out or len(out) > 4:
            raise InvalidTensorError(f"{what} {v!r} must have one value or one per channel (3, or 4 with alpha)")
        if not all(math.isfinite(x) for x in out):
            raise InvalidTensorError(f"{what} {v!r} must be finite numbers")
        return out

    def _layout(self, param: Any) -> str:
        lay = param.get_layout()
        if not lay.empty:
            s = lay.to_string().strip("[]").replace(",", "")
            if s in ("NCHW", "NHWC"):
                return s
        ps = param.get_partial_shape()
        if ps.rank.is_static and ps.rank.get_length() == 4:
            if ps[1].is_static and ps[1].get_length() in (1, 3, 4):
                return "NCHW"
            if ps[3].is_static and ps[3].get_length() in (1, 3, 4):
                return "NHWC"
            return "NCHW"
        raise UnsupportedFormatError(
            f"the model input {param.get_any_name() if param.get_names() else 0} has shape {ps}: frames need an "
            f"image input of rank 4 (NCHW or NHWC); feed a Tensor of the model's input shape instead")

    def _compile(self, model: Any, key: Any) -> _Variant:
        ov = self._ov
        t0 = time.perf_counter()
        try:
            compiled = self._core.compile_model(model, self._device, self._config)
        except (RuntimeError, TypeError) as e:  # TypeError: a config value pybind11 cannot convert
            raise CompileError(
                f"OpenVINO cannot compile {self.model_name} for device {self._device!r} with config {self._config}: "
                f"{_ov_message(e)} -- check the device name (e.g. 'CPU', 'GPU.0', 'NPU'; available: "
                f"{', '.join(self._core.available_devices) or 'none'}) and each config key and value "
                f"(e.g. INFERENCE_PRECISION_HINT is one of the device's precisions such as 'f32')") from e
        try:
            nreq = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        except RuntimeError:
            nreq = 1
        nreq = max(1, nreq)
        queue = ov.AsyncInferQueue(compiled, nreq)
        queue.set_callback(_Dispatch(self))
        outs = []
        for i, o in enumerate(compiled.outputs):
            outs.append(o.get_any_name() if o.get_names() else i)
        dt = time.perf_counter() - t0
        self.compile_seconds += dt
        log.info("Inference: compiled %s for %s on %s in %.2f s (%d requests)", self.model_name, key, self._device, dt, nreq)
        dynamic = any(port.get_partial_shape().is_dynamic for port in compiled.inputs)
        return _Variant(key, compiled, queue, list(compiled.inputs), outs, nreq, model, dynamic=dynamic)

    def _static_model(self, size_hw: tuple[int, int] | None) -> Any:
        """A copy of the model with batch 1 and, for a dynamic image input, spatial size ``size_hw``."""
        m = self._model.clone()
        if len(m.inputs) != 1:
            return m
        param = m.inputs[0]
        ps = param.get_partial_shape()
        if not (ps.rank.is_static and ps.rank.get_length() == 4):
            return m
        if ps.is_static:
            return m
        lay = self._layout(m.get_parameters()[0])
        dims = [ps[i].get_length() if ps[i].is_static else None for i in range(4)]
        dims[0] = 1
        c_i, h_i, w_i = (1, 2, 3) if lay == "NCHW" else (3, 1, 2)
        if dims[c_i] is None:
            dims[c_i] = 3
        if size_hw is not None:
            if dims[h_i] is None:
                dims[h_i] = size_hw[0]
            if dims[w_i] is None:
                dims[w_i] = size_hw[1]
        if any(d is None for d in dims):
            raise InvalidTensorError(f"the model input has a dynamic spatial size {ps}: give input_size=(width, height)")
        try:
            m.reshape({param: self._ov.PartialShape(dims)})
        except (RuntimeError, ValueError) as e:
            size = f"{dims[w_i]}x{dims[h_i]}"
            raise CompileError(f"{self.model_name} cannot run at input {size} (input shape {dims}, model input {ps}): "
                               f"{_ov_message(e)} -- give an input_size=(width, height) the model accepts") from e
        return m

    # -- variants -------------------------------------------------------------------------------------
    def _variant(self, key: Any, build: Callable[[], Any]) -> _Variant:
        """The compiled variant for ``key``, compiling ``build()`` once (concurrent callers wait for it)."""
        v = self._variants.get(key)
        if v is not None:
            return v
        with self._variants_lock:
            v = self._variants.get(key)
            if v is None:
                v = self._variants[key] = self._compile(build(), key)
            return v

    def _raw_variant(self) -> _Variant:
        size = None if self._input_size is None else (self._input_size[1], self._input_size[0])
        return self._variant("raw", lambda: self._static_model(size) if size is not None else self._model)

    def _frame_variant(self, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int) -> _Variant:
        key = (fmt, tuple(shapes), width, height)
        return self._variant(key, lambda: self._ppp_model(fmt, shapes, width, height))

    def _ppp_model(self, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int) -> Any:
        """The model with pre-processing for frames whose planes are shaped ``shapes`` ((1, rows, pitch, C))."""
        ov = self._ov
        from openvino.preprocess import ColorFormat, PrePostProcessor, ResizeAlgorithm

        if len(self._model.inputs) != 1:
            raise UnsupportedFormatError(f"{self.model_name} has {len(self._model.inputs)} inputs: frames feed "
                                         f"single-input image models; feed a list of Tensors instead")
        if any(len(s) != 4 or s[0] != 1 for s in shapes):
            raise InvalidTensorError(f"frame planes must be shaped (1, rows, pitch, C), got {shapes}")
        rows, pitch = shapes[0][1], shapes[0][2]
        yuv = fmt in (FrameFormat.I420, FrameFormat.NV12)
        if fmt is FrameFormat.I420:
            cf, sub, want = ColorFormat.I420_THREE_PLANES, ["y", "u", "v"], \
                [(1, rows, pitch, 1), (1, rows // 2, pitch // 2, 1), (1, rows // 2, pitch // 2, 1)]
        elif fmt is FrameFormat.NV12:
            cf, sub, want = ColorFormat.NV12_TWO_PLANES, ["y", "uv"], [(1, rows, pitch, 1), (1, rows // 2, pitch // 2, 2)]
        elif fmt in _PACKED:
            cf, sub, want = getattr(ColorFormat, _PACKED[fmt]), None, [(1, rows, pitch, len(_PACKED[fmt]))]
        else:
            raise UnsupportedFormatError(f"Inference takes I420, NV12, RGB, BGR, RGBX and BGRX frames, not {fmt.name}: "
                                         f"convert the frame first (e.g. decode to yuv420p)")
        if len(shapes) != len(want) or [s[3] for s in shapes] != [w[3] for w in want]:
            raise InvalidTensorError(f"a {fmt.name} frame has planes shaped like {want}, got {shapes}")
        ch, cw = -(-height // 2), -(-width // 2)
        if rows < height or pitch < width or (yuv and any(s[1] < ch or s[2] < cw for s in shapes[1:])):
            raise InvalidTensorError(f"planes {shapes} are smaller than the {width}x{height} frame")
        param = self._model.get_parameters()[0]
        lay = self._layout(param)
        ps = param.get_partial_shape()
        h_i, w_i = (2, 3) if lay == "NCHW" else (1, 2)
        if ps[h_i].is_static and ps[w_i].is_static:
            target = (ps[h_i].get_length(), ps[w_i].get_length())
        elif self._input_size is not None:
            target = (self._input_size[1], self._input_size[0])
        else:
            target = (height, width)
        # OpenVINO's own I420/NV12 input needs even sizes and chroma pitch = luma pitch / 2. Where a resize is
        # needed, or those do not hold, the planes are cropped and resized one by one *before* colour conversion
        # (4x fewer pixels to convert at half resolution; measured ~1.7x cheaper than converting then resizing).
        ppp_ok = shapes == want and not (pitch % 2 or rows % 2 or height % 2 or width % 2)
        planes_first = yuv and ((height, width) != target or not ppp_ok)
        if planes_first and (target[0] % 2 or target[1] % 2):
            if not ppp_ok:
                raise UnsupportedFormatError(
                    f"{fmt.name} frame {width}x{height} (planes {shapes}) needs an even model input size to be converted "
                    f"in the model: give input_size=(even width, even height) or crop the frame to an even size")
            planes_first = False
        m = self._static_model(target)
        p = PrePostProcessor(m)
        inp = p.input()
        if planes_first:  # the plane prefix (below) hands PPP an f32 NHWC image in the model's colour order
            inp.tensor().set_element_type(ov.Type.f32).set_layout(ov.Layout("NHWC"))
            pre = inp.preprocess()
        else:
            tt = inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_spatial_static_shape(rows, pitch)
            if sub is None:
                tt.set_color_format(cf)
            else:
                tt.set_color_format(cf, sub)
            pre = inp.preprocess()
            pre.convert_color(ColorFormat.RGB if self._rgb else ColorFormat.BGR)
            if (rows, pitch) != (height, width):
                pre.crop([0, 0, 0, 0], [1, height, width, 3])  # padded pitch: cropped inside the model, never copied
            if (height, width) != target:  # resize the u8 image: cheaper than resizing it as f32
                pre.resize(ResizeAlgorithm.RESIZE_LINEAR)
            pre.convert_element_type(ov.Type.f32)
        if self._mean is not None:
            pre.mean(self._mean if len(self._mean) > 1 else self._mean[0])
        if self._scale is not None:
            pre.scale(self._scale if len(self._scale) > 1 else self._scale[0])
        elem = param.get_element_type()
        if elem != ov.Type.f32:
            pre.convert_element_type(elem)
        pre.convert_layout(ov.Layout(lay))
        inp.model().set_layout(ov.Layout(lay))
        try:
            built = p.build()
            if planes_first:
                built = self._prepend_planes(built, fmt, shapes, width, height, target)
            return built
        except RuntimeError as e:
            raise UnsupportedFormatError(f"cannot build pre-processing for {fmt.name} planes {shapes} into "
                                         f"{self.model_name}: {_ov_message(e)}") from e

    def _prepend_planes(self, model: Any, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
                        target: tuple[int, int]) -> Any:
        """Plane inputs (1, rows, pitch, C) u8 -> crop -> f32 -> resize each plane -> YUV to RGB/BGR, fed into
        ``model``'s image parameter (f32 NHWC at ``target``). All inside the model: nothing runs on the host."""
        ov = self._ov
        import openvino.opset8 as op8
        import openvino.opset11 as ops

        param = model.get_parameters()[0]
        base = param.output(0).get_any_name() if param.output(0).get_names() else "image"
        th, tw = target
        i64 = np.int64

        def plane(i: int, sub: str, ph: int, pw: int, oh: int, ow: int) -> tuple[Any, Any]:
            shp = shapes[i]
            c = shp[3]
            p = ops.parameter(list(shp), ov.Type.u8, name=f"{base}/{sub}")
            x = p
            if (shp[1], shp[2]) != (ph, pw):  # padded pitch / rows: a crop inside the model, never a host copy
                x = ops.slice(x, np.array([0, 0, 0, 0], i64), np.array([1, ph, pw, c], i64), np.array([1, 1, 1, 1], i64))
            x = ops.convert(x, ov.Type.f32)
            x = ops.reshape(x, np.array([1, 1, ph, pw], i64), False) if c == 1 else ops.transpose(x, np.array([0, 3, 1, 2], i64))
            if (ph, pw) != (oh, ow):
                x = ops.interpolate(x, np.array([oh, ow], i64), "linear_onnx", "sizes", axes=np.array([2, 3], i64),
                                    coordinate_transformation_mode="half_pixel")
            x = ops.reshape(x, np.array([1, oh, ow, 1], i64), False) if c == 1 else ops.transpose(x, np.array([0, 2, 3, 1], i64))
            return p, x

        ch, cw = -(-height // 2), -(-width // 2)
        py, y = plane(0, "y", height, width, th, tw)
        if fmt is FrameFormat.I420:
            pu, u = plane(1, "u", ch, cw, th // 2, tw // 2)
            pv, v = plane(2, "v", ch, cw, th // 2, tw // 2)
            conv = (op8.i420_to_rgb if self._rgb else op8.i420_to_bgr)(y, u, v)
            params = [py, pu, pv]
        else:
            puv, uv = plane(1, "uv", ch, cw, th // 2, tw // 2)
            conv = (op8.nv12_to_rgb if self._rgb else op8.nv12_to_bgr)(y, uv)
            params = [py, puv]
        for ti in list(param.output(0).get_target_inputs()):
            ti.replace_source_output(conv.output(0))
        return ov.Model(model.get_results(), params, model.get_friendly_name())

    # -- inputs ---------------------------------------------------------------------------------------
    def _map(self, x: Any) -> Any:
        from .api import map as imap

        return imap(x, self._memory_type)

    def _prepare(self, x: Any) -> tuple[_Variant, list[Any], Any]:
        """(variant, input tensors, objects to keep alive until the request completes)."""
        if isinstance(x, (list, tuple)) and not isinstance(x, Frame):
            mapped = [self._map(t) for t in x]
            return self._raw_inputs(mapped, x)
        if isinstance(x, Mapping):
            raise UnsupportedTypeError("give several inputs as a list in the model's input order, not a dict")
        m = self._map(x)  # interop.map wraps a framework's object (a decoded av.VideoFrame: in one step)
        if isinstance(m, Frame):
            planes, shapes = self._frame_inputs(m)
            v = self._frame_variant(m.format, shapes, m.width, m.height)
            return v, planes, (x, m, planes)
        return self._raw_inputs([m], x)

    def _frame_inputs(self, m: Frame) -> tuple[list[Any], list[tuple[int, ...]]]:
        """The ov.Tensors a request reads for the planes of mapped frame ``m``, and their shapes."""
        planes, shapes = [], []
        plane_cls = _plane_tensor_class()
        for t in m.tensors:
            if type(t) is plane_cls and t._native is None:  # a decoded plane: a reused tensor (see _PlaneInputs)
                t._check()
                planes.append(self._plane_inputs.get(t))
                shapes.append(t._info.shape)
            else:
                nat = _as_4d(self._ov, _ov_native(t))
                planes.append(nat)
                shapes.append(tuple(int(d) for d in nat.get_shape()))
        return planes, shapes

    def _raw_inputs(self, mapped: list[Any], keep: Any) -> tuple[_Variant, list[Any], Any]:
        v = self._raw_variant()
        if len(mapped) != len(v.inputs):
            raise InvalidTensorError(f"{self.model_name} has {len(v.inputs)} input(s), {len(mapped)} tensor(s) given")
        nats = []
        for t, port in zip(mapped, v.inputs):
            if isinstance(t, Frame):
                raise UnsupportedTypeError("give a Frame on its own (not in a list): frames go through pre-processing")
            nat = _ov_native(t)
            shape = tuple(int(d) for d in nat.get_shape())
            want = port.get_partial_shape()
            et = port.get_element_type()
            ok_shape = want.compatible(self._ov.PartialShape(list(shape)))  # bounds of dynamic dims included
            dt = np.dtype(et.to_dtype())
            if not ok_shape or np.dtype(t.info.dtype) != dt:
                name = port.get_any_name() if port.get_names() else "0"
                raise InvalidTensorError(
                    f"model input {name!r} of {self.model_name} wants shape {want} {dt}, got {shape} {t.info.dtype}: "
                    f"convert/resize the tensor to that shape and dtype, or pass a Frame so the model pre-processes it")
            nats.append(nat)
        if v.dynamic:
            self._check_shapes(v, tuple(tuple(int(d) for d in n.get_shape()) for n in nats))
        return v, nats, (keep, mapped)

    SHAPES_CHECKED_LIMIT = 64  # distinct input shapes remembered per variant; past it the set starts again

    def _check_shapes(self, v: _Variant, shapes: tuple[tuple[int, ...], ...]) -> None:
        """Refuse input shapes a dynamic model cannot run, before a request is started with them.

        A request that fails inside OpenVINO never calls back (OpenVINO's queue drops the callback and re-raises the
        error in a later start_async), so infer() would wait for good: each new shape is first checked by shape
        inference on a copy of the model, once."""
        if shapes in v.shapes_ok:
            return
        m = v.model.clone()
        try:
            m.reshape({port: self._ov.PartialShape(list(shp)) for port, shp in zip(m.inputs, shapes)})
        except (RuntimeError, ValueError) as e:
            raise InvalidTensorError(f"{self.model_name} cannot run on input shape(s) {list(shapes)}: {_ov_message(e)} "
                                     f"-- give the model an input size it accepts") from e
        if len(v.shapes_ok) >= self.SHAPES_CHECKED_LIMIT:
            v.shapes_ok.clear()
        v.shapes_ok.add(shapes)

    def compile_for(self, x: Any) -> None:
        """Compile (and cache) the model variant ``x`` needs, without running it: keeps compilation out of timings."""
        self._prepare(x)

    # -- running --------------------------------------------------------------------------------------
    BACKLOG_LIMIT = 1024  # submissions from callbacks waiting for a request; past it infer_async refuses more

    def _submit(self, x: Any, job_cb: Callback | None, userdata: Any, event: threading.Event | None) -> _Job:
        self._check_open()
        v, inputs, keep = self._prepare(x)
        job = _Job(v, job_cb, userdata, keep, event)
        if _callbacks_here():
            # A completion callback must never wait for a request: the request it runs on is busy until it returns,
            # so with every request busy (or another submitter waiting on submit_lock for one) it would wait for
            # itself for good. It starts a free request if one is ready now, else queues the job for the drainer.
            self._submit_from_callback(v, inputs, job)
            return job
        with self._cond:
            self._pending += 1
        try:
            with v.submit_lock:  # blocks (GIL released) while every request of the pool is busy
                v.queue.start_async(inputs, job)
        except BaseException:
            with self._cond:
                self._pending -= 1
                self._cond.notify_all()
            raise
        return job

    def _submit_from_callback(self, v: _Variant, inputs: list[Any], job: _Job) -> None:
        with self._cond:
            if len(self._backlog) >= self.BACKLOG_LIMIT:
                raise ResourceError(errno.EAGAIN, f"{len(self._backlog)} submissions from completion callbacks are "
                                                  f"already waiting for a free request: submit fewer per callback, "
                                                  f"or from a thread of your own (where infer_async waits)")
            self._pending += 1
            queued = bool(self._backlog)
        if not queued and v.submit_lock.acquire(blocking=False):
            try:
                # every submitter holds submit_lock, so a request ready now is still free at start_async: no wait
                if v.queue.is_ready():
                    v.queue.start_async(inputs, job)
                    return
            except BaseException:
                with self._cond:
                    self._pending -= 1
                    self._cond.notify_all()
                raise
            finally:
                v.submit_lock.release()
        with self._cond:
            self._backlog.append((v, inputs, job))
            if self._drainer is None:
                self._drainer = threading.Thread(target=_drain, args=(weakref.ref(self), self._cond, self._backlog),
                                                 name="interop-inference-submit", daemon=True)
                self._drainer.start()
            self._cond.notify_all()

    def _submit_failed(self, job: _Job, e: BaseException) -> None:
        """A queued submission could not be started (the drainer's thread): reported by wait_all()."""
        job.error = e
        job.keepalive = None
        with self._cond:
            self._errors.append(e)
            self._pending -= 1
            self._cond.notify_all()

    def _on_done(self, request: Any, job: _Job) -> None:
        # OpenVINO's thread. Never let an exception escape into OpenVINO.
        owners = _callbacks_here()
        owners.append(id(self))
        try:
            outs: Outputs = {}
            n = 0
            for i, k in enumerate(job.variant.output_keys):
                a = np.array(request.get_output_tensor(i).data, copy=True)
                n += a.nbytes
                outs[k] = a
            with self._cond:
                self._output_bytes += n
            job.result = outs
            if job.event is None and job.callback is not None:
                job.callback(outs, job.userdata)
        except BaseException as e:  # noqa: B036 - must not escape into OpenVINO's thread
            job.error = e
            if job.event is None:
                log.debug("Inference: callback failed: %r", e)
                with self._cond:
                    self._errors.append(e)
        finally:
            owners.pop()
            job.keepalive = None
            with self._cond:
                self._pending -= 1
                self.requests_done += 1
                self._cond.notify_all()
            if job.event is not None:
                job.event.set()

    def _refuse_in_own_callback(self, what: str) -> None:
        if id(self) in _callbacks_here():
            raise CallbackReentryError(
                f"{what} was called from a completion callback of this Inference, where it would wait for the "
                f"request the callback runs on: call infer_async() there (it queues), or hand the work to a "
                f"thread of your own")

    def infer(self, x: Any) -> Outputs:
        """Run one input (Frame, Tensor, numpy array, or a list of Tensors for several inputs) and wait for it.

        Refused (CallbackReentryError) in this Inference's own completion callbacks, where it would wait for itself.
        """
        self._refuse_in_own_callback("infer()")
        ev = threading.Event()
        job = self._submit(x, None, None, ev)
        ev.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def infer_async(self, x: Any, callback: Callback | None = None, userdata: Any = None) -> None:
        """Start inference and return at once; from a thread of the caller's, waits while every request is busy.

        ``callback(outputs, userdata)`` runs on OpenVINO's thread; an exception it raises is re-raised by wait_all().
        A completion callback (of this or another Inference) may call infer_async: there it never waits, as a
        request is busy until its callback returns; when no request is free the input is queued (it stays
        referenced) and started by a thread of this Inference as requests complete, in the order queued.
        ``pending`` and ``wait_all()`` count queued inputs; an input that cannot be started is reported by
        ``wait_all()``. At most BACKLOG_LIMIT inputs wait so; past that infer_async raises ResourceError.
        """
        if callback is not None and not callable(callback):
            raise UnsupportedTypeError(f"callback must be callable, not {type(callback).__name__}")
        self._submit(x, callback, userdata, None)

    def wait_all(self, timeout: float | None = None) -> None:
        """Wait until every started (and queued) request has completed; re-raise the first error since the last
        wait_all(). ``timeout``: seconds (None waits for ever); past it, InteropTimeoutError (a TimeoutError),
        the requests still running. Refused (CallbackReentryError) in this Inference's own completion callbacks."""
        limit = _check_timeout(timeout)
        self._refuse_in_own_callback("wait_all()")
        with self._cond:
            if not self._cond.wait_for(lambda: self._pending == 0, limit):
                raise InteropTimeoutError(f"{self._pending} inference requests still running after {timeout} s: "
                                          f"wait again, or look for a completion callback that does not return")
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Wait for running requests, then free the compiled models and their request pools. Idempotent.

        Waits at most a minute: if requests are still running then (a callback that does not return), their
        models are left to the garbage collector. Refused (CallbackReentryError) in this Inference's own callbacks."""
        if self._closed:
            return
        self._refuse_in_own_callback("close()")
        self._closed = True
        try:
            self.wait_all(timeout=60)
        except InteropTimeoutError as e:
            log.warning("Inference.close: %s; closing without waiting for them", e)
            return
        except BaseException as e:  # noqa: B036 - closing must not fail; errors were the caller's to collect
            log.debug("Inference.close: %r", e)
        with self._variants_lock:
            variants, self._variants = list(self._variants.values()), {}
        for v in variants:
            v.queue.wait_all()
        variants.clear()
        self._plane_inputs.clear()

    def __enter__(self) -> Inference:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InteropError("this Inference was closed; make a new one")

    @property
    def pending(self) -> int:
        """Requests started and not yet completed."""
        with self._cond:
            return self._pending

    def compiled_property(self, name: str, x: Any = None) -> Any:
        """A property of the compiled model used for ``x`` (default: the raw model), e.g. INFERENCE_PRECISION_HINT."""
        v = self._raw_variant() if x is None else self._prepare(x)[0]
        return v.compiled.get_property(name)

    def pool_size(self, x: Any = None) -> int:
        """Number of infer requests in the pool used for ``x`` (default: the raw model's)."""
        v = self._raw_variant() if x is None else self._prepare(x)[0]
        return v.nreq
