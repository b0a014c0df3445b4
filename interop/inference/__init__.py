"""Inference: an OpenVINO model fed zero-copy with frames or tensors of any memory type.

Frames (every format of docs/run.md's Pixel formats: planar and semi-planar YUV at 8, 10 and 12 bits, gray,
packed RGB/BGR) go through pre-processing compiled into the model (a plane graph and OpenVINO's
``PrePostProcessor``): colour conversion, crop of padded pitches, resize, mean/scale, layout and dtype all run
inside the model, so the CPU never converts or copies a pixel. The planes arrive as OpenVINO
tensors over the producer's memory at full pitch (``interop.map(frame, MemoryType.OPENVINO)``), shaped
(1, rows, pitch, C); one model is compiled per plane layout (format, pitches, rows, visible size) and cached.
A Tensor (or numpy array) is fed as the raw model input. A CUDA frame (NVDEC) for a device fed host tensors is
pre-processed on the GPU into page-locked host memory the model reads as it is (``gpu_preprocess``, docs/cuda.md).

Requests run in a pool sized by the device's OPTIMAL_NUMBER_OF_INFER_REQUESTS. Results are numpy arrays copied
out of the requests; ``output_bytes`` counts those bytes (this is not a mapper copy: ``copy_meter()`` does not see it).
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import itertools
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends import require
from ..errors import (
    CallbackReentryError,
    CompileError,
    InteropError,
    InteropTimeoutError,
    InvalidTensorError,
    NoRouteError,
    RequestFailedError,
    ResourceError,
    StateError,
    UnsupportedFormatError,
    UnsupportedTypeError,
    WrongMemoryError,
)
from ..frame import Frame
from ..types import ColorRange, ColorSpace, FrameFormat, MemoryType, check_bool
from . import _preprocess
from ._cuda_preprocess import GPUInput, Target, _nbytes, cuda_frame
from ._inputs import (
    SHAPES_CHECKED_LIMIT,
    PlaneInputs,
    check_shapes,
    convert_frame,
    frame_format_name,
    frame_inputs,
    raw_inputs,
    refusal,
)
from ._model import get_core as _get_core
from ._model import layout, load, static_model
from ._model import ov_message as _ov_message

__all__ = ["Inference", "CompileError", "CallbackReentryError", "MAX_INPUT_SIDE", "Outputs", "Callback", "GPUInput"]

log = logging.getLogger("interop.inference")

Outputs = dict[Any, np.ndarray]
Callback = Callable[[Outputs, Any], None]
InputSize = Callable[[int, int], Any]  # (frame width, frame height) -> (model width, height)


# a model input side beyond this is refused up front: no image model goes near it, and OpenVINO would try to
# allocate the tensors of a 2**40-wide input rather than refuse it
MAX_INPUT_SIDE = 1 << 16


# Which Inferences run a completion callback on this thread (ids; a 0 for the whole of the queue's callback): their
# submissions are queued, not waited for, and nothing here waits for a request.
_callback_state = threading.local()


def _callbacks_here() -> list[int]:
    owners: list[int] | None = getattr(_callback_state, "owners", None)
    if owners is None:
        owners = _callback_state.owners = []
    return owners



_live: weakref.WeakSet[Inference] = weakref.WeakSet()
# Inferences whose last request ended (a job's hold on its Inference, _Job.owner, let go): their last reference may
# not be dropped where the request ended, on OpenVINO's thread, inside the request queue's own callback (dropping it
# there would free the queue under its callback). Let go by a thread of the program's (_let_go_now) or at exit. Keyed
# by id: one Inference fed from callbacks alone (where nothing lets go) is parked once however often its requests end.
_ended: dict[int, Inference] = {}


def _let_go_now() -> None:
    """Drop the Inferences parked in _ended: called where a thread of the program's enters (never in a callback)."""
    if _ended and not _callbacks_here():
        _ended.clear()


# Set at interpreter exit. From then on, a thread other than the main one that enters Inference parks for good
# instead of starting OpenVINO work: a daemon thread still inside a request while OpenVINO's libraries are torn
# down ends the process with std::terminate. So does a Python thread that is inside any call of OpenVINO's bindings
# that lets go of the GIL (start_async, a wait) when the interpreter starts finalizing: taking the GIL back, it is
# ended by pthread_exit, whose unwinding through the bindings' noexcept GIL guard is std::terminate ("terminate
# called without an active exception"). Hence every such call from a thread of ours or a caller's is counted
# (Inference._inside_openvino), and exit waits for none to be left inside.
_exiting = threading.Event()
EXIT_WAIT_S = 30.0  # the longest interpreter exit waits for requests and threads inside OpenVINO, all Inferences together


def _gate(cond: threading.Condition, sealed: bool = False, new_work: bool = True,
          closed: Callable[[], bool] | None = None) -> None:
    """Called with ``cond`` held where a thread enters OpenVINO.

    New work (compile, map, start a caller's request): at exit, the main thread and completion callbacks are refused,
    other threads park. Work that exit itself waits for (the drainer starting submissions queued before exit, waiting
    calls looking at requests) goes on until _close_all has closed the Inference (``sealed``); from then on other
    threads park and callbacks are refused, and only the main thread (the one that finalizes: never ended) goes in."""
    if not _exiting.is_set() or (not new_work and not sealed):
        return
    main = threading.current_thread() is threading.main_thread()
    if main and not new_work:
        return
    if main or _callbacks_here():
        raise StateError("the interpreter is exiting: Inference takes no new requests")
    # A daemon thread parks here (the lock released while it waits) until exit has closed the Inference (``closed``;
    # close notifies), then gets the exit's InteropError: a thread the program joins in its own exit handler ends.
    while closed is None or not closed():
        cond.wait()
    raise _closed_by_exit()


def _closed_by_exit() -> StateError:
    return StateError("the interpreter is exiting: this Inference was closed by the exit")


# The completion callback of every request queue made, weakly, with its queue. Each request keeps a copy of the
# callback, and OpenVINO's thread that finishes a request holds one more until a moment after the request's wait()
# has returned: so the copy that goes last may go on OpenVINO's thread after the queue itself was freed, and letting
# go of it takes the GIL there. Once the interpreter finalizes, a thread taking the GIL is ended by pthread_exit,
# whose unwinding through the bindings' noexcept code is std::terminate (the abort seen at exit, rarely, when such a
# thread was late). close(), exit and an Inference's finaliser wait for those copies to go (_wait_callbacks_let_go).
# No lock: each step below is one operation under the GIL, so a finaliser that closes an Inference may run in the
# middle of any of them (a collection starts at any allocation) without waiting on itself.
_callbacks: dict[int, tuple[weakref.ref[Any], weakref.ref[_Dispatch]]] = {}
_callback_keys = itertools.count()
CALLBACK_LET_GO_S = 1.0  # the longest close() or exit waits for OpenVINO's threads to let go of those copies


def _track_callback(queue: Any, callback: _Dispatch) -> None:
    _prune_callbacks()
    _callbacks[next(_callback_keys)] = (weakref.ref(queue), weakref.ref(callback))


def _prune_callbacks() -> None:
    for key in list(_callbacks):  # the keys only: no allocation per item, where a collection could start
        entry = _callbacks.get(key)
        if entry is not None and entry[1]() is None:
            _callbacks.pop(key, None)


def _held_callbacks(owner: Inference | None) -> int:
    """Callbacks of freed request queues (of ``owner``'s, or anyone's) that something still holds."""
    _prune_callbacks()
    held = 0
    for q, d in list(_callbacks.values()):  # one list, of objects the dict holds
        callback = d()
        if q() is None and callback is not None and (owner is None or callback.ref() is owner):
            held += 1
        del callback
    return held


def _wait_callbacks_let_go(timeout: float, owner: Inference | None = None) -> bool:
    """Wait (``timeout`` seconds at most) until OpenVINO's threads hold no callback of a request queue that is gone
    (``owner``'s queues, or every Inference's). True once none does."""
    deadline = time.monotonic() + timeout
    while True:
        held = _held_callbacks(owner)
        if not held:
            return True
        if time.monotonic() >= deadline:
            log.debug("Inference: OpenVINO still holds %d callbacks of freed request queues after %.1f s", held,
                      timeout)
            return False
        time.sleep(0.001)  # the GIL let go: the thread that holds a copy needs it to drop that copy


@atexit.register
def _close_all() -> None:
    # OpenVINO's request threads must be gone before the interpreter tears down (else std::terminate at exit).
    _exiting.set()
    deadline = time.monotonic() + EXIT_WAIT_S  # one deadline for every Inference: exit never waits long
    still_inside = False
    for inf in list(_live):
        if not inf._wait_outside(max(0.0, deadline - time.monotonic())):
            still_inside = True
            continue
        inf._close(max(0.0, deadline - time.monotonic()))
        # Its requests are done, but the drainer (or a caller's daemon thread) may not be back from OpenVINO yet: a
        # request it started can complete, and close() see nothing pending, before that thread has the GIL again.
        if not inf._seal(max(0.0, deadline - time.monotonic())):
            still_inside = True
    if still_inside:
        # A thread is still inside OpenVINO: freeing the Core or the models under it is what the rule forbids.
        return
    _ended.clear()
    # The same for the plugins' own threads: release the shared Core, the contexts and the cached chains that hold
    # it, and the compiled models of closed Inferences, while the interpreter is whole (best effort: a Core the
    # program itself still references lives on).
    from .. import routing
    from ..context import set_default_context
    from ..tensors import openvino as ovt
    from ..types import MemoryType

    routing.forget_cached_routes()
    set_default_context(MemoryType.OPENVINO, None)
    ovt.drop_core()
    gc.collect()
    while _freeing and time.monotonic() < deadline:  # dropped Inferences' queues being freed on other threads
        time.sleep(0.001)
    _wait_callbacks_let_go(min(CALLBACK_LET_GO_S, max(0.0, deadline - time.monotonic())))  # see _callbacks


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
        inf = ref()
        if inf is None:
            return
        inf._start_queued()
        del inf


def _holds_host_import(keep: Any) -> bool:
    """Whether a job's mapped frame lies in host pages imported into the NPU plugin (CPU_VA)."""
    m = keep[1] if isinstance(keep, tuple) and len(keep) == 3 else None
    if not isinstance(m, Frame) or not m.tensors:
        return False
    return getattr(m.tensors[0], "host_import", None) is not None


def _free_queues(variants: dict[Any, _Variant], retired: list[_Pool]) -> None:
    """An Inference's finaliser: free its request queues only once OpenVINO's threads have returned from their
    callbacks. wait_all() returns as the last request's callback has counted it done, while that callback is still
    returning: a queue freed then (the program dropping its Inference right after wait_all) leaves the request copy
    the callback was given as the request's last owner, whose destructor, run on that request's own thread, waits
    for that request to finish: the thread is stuck for good (and the request's memory with it)."""
    pools = [v.pool for v in variants.values()] + list(retired)
    variants.clear()
    retired.clear()
    if not pools:
        return
    token = object()
    try:
        _freeing.add(token)  # before the thread starts: exit waits for it from now on
        if _callbacks_here():  # dropped inside a completion callback: that request's queue must not wait for it here
            threading.Thread(target=_wait_and_free, args=(pools, token), name="interop-inference-free",
                             daemon=True).start()
            token = None  # the thread's now
            return
        _wait_and_free(pools, token)
    finally:
        # A thread that could not start, or a Ctrl-C on the path without one: the token never stays behind (exit
        # would wait out its whole deadline for it). The thread's path runs inside a completion callback, on
        # OpenVINO's thread, where no KeyboardInterrupt lands (only the main thread gets one): past start(), the
        # token is the thread's.
        _freeing.discard(token)


#: a token per dropped Inference whose queues are being waited for and freed (_free_queues): exit waits until none
#: is left. A set changed by single C calls, never a Python lock: a Ctrl-C cannot leave it taken or a token counted.
_freeing: set[object] = set()


def _wait_and_free(pools: list[_Pool], token: object) -> None:
    try:
        while pools:  # no loop variable: it would hold the last queue after the token went (and exit went on)
            _wait_requests(pools[-1].queue)
            pools.pop()
    finally:
        _freeing.discard(token)


def _wait_requests(queue: Any) -> None:
    """Wait until every request of ``queue`` has returned from its callback (the GIL let go), request by request: the
    queue's own wait_all() stops at a request that failed inside OpenVINO, before the others' callbacks returned."""
    for i in range(len(queue)):
        try:
            queue[i].wait()
        except RuntimeError as e:  # a request that failed: reported when it was found
            log.debug("Inference: %r", e)


def _wait_queues(variants: list[_Variant]) -> None:
    """Wait for the requests of every variant's queue (a function of its own: no loop variable keeps a queue)."""
    for v in variants:
        _wait_requests(v.queue)
        v.sync_requests.clear()


class _Dispatch:
    """The queue's callback. Holds the Inference weakly: no cycle queue -> callback -> Inference -> queue."""

    __slots__ = ("ref", "__weakref__")  # weakly referenced by _callbacks

    def __init__(self, inf: Inference):
        self.ref = weakref.ref(inf)

    def __call__(self, request: Any, job: _Job) -> None:
        here = _callbacks_here()
        here.append(0)  # a callback's thread to the end, even as the Inference may be let go below (_free_queues)
        inf = self.ref()
        try:
            if inf is not None:
                inf._on_done(request, job)
            elif job.event is not None:
                job.event.set()
        finally:
            # An error of the caller's callback is kept (for wait_all) with its traceback, which holds this frame:
            # it must not hold the queue's callback (self) or the request copy (which holds the request, and that the
            # callback), or close() would wait for that callback to go
            del self, request, inf
            here.pop()


@dataclass
class _Pool:
    """An AsyncInferQueue and the jobs started on it that have not completed (counted under Inference._cond).

    A request that fails inside OpenVINO never calls back, and the queue then raises that error from every later
    start_async that picks the failed request: a pool with a failed request is replaced by a new one (the old one
    is kept until its other requests complete)."""

    queue: Any
    inflight: int = 0


@dataclass(eq=False)
class _Job:
    variant: _Variant | None  # holds the compiled model and its pool while the request runs (cleared when done)
    callback: Callback | None
    userdata: Any
    keepalive: Any  # the input frame/tensors: their memory is read by the request until it completes
    event: threading.Event | None = None
    result: Outputs | None = None
    error: BaseException | None = None
    pool: _Pool | None = None
    done: bool = False
    host_frame: bool = False  # holds a host-memory import (NPU CPU_VA): counted against HOST_FRAMES_IN_FLIGHT
    views: bool = False  # the callback gets views of the request's output tensors (copy_outputs=False)
    # The Inference itself while the request runs: a program that drops its Inference with requests running keeps
    # it (and its place in _live) until they end, so that interpreter exit still waits for them (a completion
    # callback entering Python while the interpreter is torn down ends the process)
    owner: Any = None


@dataclass(eq=False)
class _Variant:
    """One compiled model (raw, or with the pre-processing for one plane layout) and its request pool."""

    key: Any
    compiled: Any
    pool: _Pool
    inputs: list[Any]
    output_keys: list[Any]
    nreq: int
    model: Any = None  # the ov.Model compiled: where input shapes of a dynamic model are checked
    shapes_ok: set[tuple[tuple[int, ...], ...]] = field(default_factory=set)  # input shapes that passed the check
    dynamic: bool = False  # an input has a dynamic dimension
    submit_lock: threading.Lock = field(default_factory=threading.Lock)
    used: int = 0  # when it was last asked for (Inference._tick): the least recently used one is dropped first
    sync_requests: list[Any] = field(default_factory=list)  # idle requests of infer(), run in the caller's thread

    @property
    def queue(self) -> Any:
        return self.pool.queue


def default_device(available: list[str] | None = None) -> str:
    """The device ``Inference(device=None)`` picks: the NPU when OpenVINO sees one, else the CPU."""
    avail = list(_get_core().available_devices) if available is None else available
    return "NPU" if any(d.split(".")[0] == "NPU" for d in avail) else "CPU"


class Inference:
    """Run an OpenVINO model on frames or tensors of any memory type, zero-copy.

    ``model``: a path (OpenVINO IR .xml, .onnx, .tflite) or an ``ov.Model``. ``device``: an OpenVINO device name;
    None takes the NPU when present, else the CPU (logged). ``input_size``: (width, height) the model runs at,
    used when the model's spatial size is dynamic (a static model keeps its own); an int means square; or a
    callable ``(frame width, frame height) -> (width, height)`` asked once per frame size (e.g. to keep each
    frame's aspect; a raw tensor then runs at its own shape).
    ``mean``/``scale``: per-channel (or scalar) values in 0..255 pixel units applied as ``(x - mean) / scale``,
    in the model's channel order; ``rgb``: the model takes RGB (False: BGR). ``config``: OpenVINO compile
    properties (default PERFORMANCE_HINT=THROUGHPUT, for the async pool). ``allow_copy``: a frame of a pixel format
    the model cannot take zero-copy (docs/run.md, Pixel formats) is converted, each conversion a copy counted in
    ``copy_meter()`` (a decoded av.VideoFrame to yuv420p by PyAV; a GRAY16 Frame to GRAY8, its high byte, by
    numpy); ``converted`` maps each such format to what it became. Without it such frames raise
    UnsupportedFormatError, one line naming the supported formats. ``requests``: infer requests per compiled
    model (default: the device's OPTIMAL_NUMBER_OF_INFER_REQUESTS; more than one per stream keeps a stream busy
    while the caller hands it the next input).

    ``infer(x)`` returns ``{output name: ndarray}``; ``infer_async(x, callback, userdata)`` returns at once and
    calls ``callback(outputs, userdata)`` on OpenVINO's thread; ``wait_all(timeout=None)`` waits for every request
    and re-raises the first error (InteropTimeoutError past ``timeout``). A callback may call ``infer_async`` (it
    never waits there: past a full pool the input is queued and started as requests complete); ``infer``,
    ``wait_all`` and ``close`` would wait for the callback's own request, and raise CallbackReentryError there.
    A Frame's memory stays referenced until its request completes; the caller must not write into it meanwhile.

    Bad arguments raise InteropError subclasses that are also TypeError (a wrong type) or ValueError (a wrong
    value); OpenVINO's refusals (a config key or value, a device id, an input size the model cannot take) are
    CompileError, raised when the model is compiled (the first input, or ``compile_for``), with OpenVINO's text.
    An input shape a dynamic model cannot run is refused (InvalidTensorError) before a request starts; a request
    that fails inside OpenVINO while it runs raises RequestFailedError (from ``infer``, or ``wait_all``).

    Frames may change size or pixel format from one to the next: each layout gets its own compiled model, made
    once and kept in a bounded cache (the VARIANTS_LIMIT most recently used); requests in flight finish on the
    model they started with. The first change is logged.

    On the NPU, decoded (host-memory) frames are imported page by page (``CPU_VA``) and held until their request
    completes; at most HOST_FRAMES_IN_FLIGHT such frames are in flight, and a frame whose pages overlap those of a
    frame still in flight waits for a request to complete and is mapped again (never copied).
    """

    VARIANTS_LIMIT = 8  # compiled layouts kept; past it the least recently used one is dropped
    HOST_FRAMES_IN_FLIGHT = 3  # NPU frames over imported host pages (FFmpeg buffers) in flight at once
    # GPU-pre-processed inputs a caller may hold besides the requests' (host buffers kept): interop run's thread
    # that prepares ahead (pipeline._Ahead.DEPTH), the one it is making and the loop's
    GPU_INPUTS_AHEAD = 12
    POLL_S = 0.05  # how often waiting paths look for requests that failed inside OpenVINO (they never call back)
    READY_TICK_S = 0.001  # how often infer_async(timeout=) looks for a free request


    def __init__(self, model: Any, device: str | None = None, *,
                 input_size: int | Sequence[int] | InputSize | None = None,
                 mean: float | Sequence[float] | None = None, scale: float | Sequence[float] | None = None,
                 rgb: bool = True, config: Mapping[str, Any] | None = None, allow_copy: bool = False,
                 requests: int | None = None):
        if requests is not None:
            if isinstance(requests, (bool, np.bool_)) or not isinstance(requests, (int, np.integer)):
                raise UnsupportedTypeError(f"requests must be a positive int or None, not {requests!r}")
            if not 1 <= requests <= 1024:
                raise InvalidTensorError(f"requests must be 1..1024 (infer requests in the pool), not {requests}")
        self._requests = None if requests is None else int(requests)
        self._ov = ov = require("openvino", "OpenVINO", "openvino")
        self._core = core = _get_core()
        self._model, self.model_name = load(ov, core, model)
        self._device = self._pick_device(device)
        self._memory_type = MemoryType.NPU if self._device.split(".")[0].upper() == "NPU" else MemoryType.OPENVINO
        self._config: dict[str, Any] = {"PERFORMANCE_HINT": "THROUGHPUT"}
        self._config.update(self._check_config(config))
        self._input_size_fn: InputSize | None = None
        self._input_size: tuple[int, int] | None = None
        if callable(input_size) and not isinstance(input_size, (np.ndarray, Sequence)):
            self._input_size_fn = input_size
        else:
            self._input_size = self._check_size(input_size)
        self._mean = self._check_vec(mean, "mean")
        self._scale = self._check_vec(scale, "scale")
        if self._scale is not None and any(s == 0 for s in self._scale):
            raise InvalidTensorError("scale must not contain 0 (the input is divided by it)")
        if not isinstance(rgb, (bool, np.bool_)):
            raise UnsupportedTypeError(f"rgb must be True (the model takes RGB) or False (BGR), not {rgb!r}")
        self._rgb = bool(rgb)
        self._allow_copy = check_bool(allow_copy, "allow_copy")
        self.converted: dict[str, str] = {}  # pixel formats converted with allow_copy -> what they became
        self._variants: dict[Any, _Variant] = {}
        self._retired: list[_Pool] = []  # pools of dropped variants or with a failed request, until they are idle
        self._tick = itertools.count(1)
        self._first_layout: tuple[Any, ...] | None = None  # (format, width, height) of the first frame compiled for
        self._layout_change_logged = False
        self._host_frames = 0
        self._plane_inputs = PlaneInputs(ov)
        self._gpu: Any = None  # _cuda_preprocess.GPUPreprocess, made for the first CUDA frame
        self._gpu_token = object()  # marks the GPUInputs this Inference made
        self._gpu_targets: dict[tuple[int, int, int], Any] = {}  # frame (width, height, device) -> what the kernel writes
        self._gpu_sizes: set[tuple[int, int]] = set()  # (device, bytes) of the pinned buffers its inputs use
        self._variants_lock = threading.Lock()
        self._cond = threading.Condition()
        self._inside = 0  # threads inside OpenVINO through this Inference (compile, map, start, infer, wait)
        self._sealed = False  # closed at exit: no thread enters OpenVINO through it any more (see _gate)
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
        # the request queues of an Inference the program drops without close() (see _free_queues)
        fin = weakref.finalize(self, _free_queues, self._variants, self._retired)
        fin.atexit = False  # exit closes every live Inference first (_close_all)

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
            dev = default_device(avail)
            log.info("Inference: device %s (%s)", dev, "NPU found" if dev == "NPU" else f"no NPU among {avail}")
            return dev
        if not isinstance(device, str):
            raise UnsupportedTypeError(f"device must be an OpenVINO device name such as 'CPU' or 'NPU', not {device!r}")
        base = device.split(":")[0].split(".")[0].upper()
        if base not in ("AUTO", "MULTI", "HETERO", "BATCH") and not any(d.split(".")[0].upper() == base for d in avail):
            from ..errors import BackendUnavailableError

            raise BackendUnavailableError(f"OpenVINO device {device!r} is not available here; devices found: "
                                          f"{', '.join(avail) or 'none'} (leave device=None to pick one)",
                                          backend="openvino", extra="openvino")
        # OpenVINO's names are upper case ('CPU', 'GPU.1', 'AUTO:NPU,CPU') and it refuses 'cpu' as unregistered;
        # what follows a device's ':' is its own (a device id), but for a meta-device's list of devices
        name, sep, rest = device.partition(":")
        name = name.upper()
        return name + sep + (rest.upper() if name in ("AUTO", "MULTI", "HETERO", "BATCH") else rest)

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
        return layout(param)

    def _compile(self, model: Any, key: Any) -> _Variant:
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
            nreq = self._requests or int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        except RuntimeError:
            nreq = 1
        nreq = max(1, nreq)
        queue = self._new_queue(compiled, nreq)
        outs = []
        for i, o in enumerate(compiled.outputs):
            outs.append(o.get_any_name() if o.get_names() else i)
        dt = time.perf_counter() - t0
        self.compile_seconds += dt
        log.info("Inference: compiled %s for %s on %s in %.2f s (%d requests)", self.model_name, key, self._device, dt, nreq)
        dynamic = any(port.get_partial_shape().is_dynamic for port in compiled.inputs)
        return _Variant(key, compiled, _Pool(queue), list(compiled.inputs), outs, nreq, model, dynamic=dynamic)

    def _new_queue(self, compiled: Any, nreq: int) -> Any:
        queue = self._ov.AsyncInferQueue(compiled, nreq)
        callback = _Dispatch(self)
        queue.set_callback(callback)
        _track_callback(queue, callback)
        return queue

    def _static_model(self, size_hw: tuple[int, int] | None) -> Any:
        """A copy of the model with batch 1 and, for a dynamic image input, spatial size ``size_hw``."""
        return static_model(self._ov, self._model, size_hw, self.model_name)


    # -- variants -------------------------------------------------------------------------------------
    def _variant(self, key: Any, build: Callable[[], Any]) -> _Variant:
        """The compiled variant for ``key``, compiling ``build()`` once (concurrent callers wait for it).

        At most VARIANTS_LIMIT are kept: a new one drops the least recently used. A dropped variant stays alive
        while requests run on it (their jobs hold it); its pool is released from a caller's thread once idle."""
        v = self._variants.get(key)
        if v is not None:
            v.used = next(self._tick)
            return v
        self._release_idle_pools()  # waits for callbacks to return: never while holding _variants_lock
        with self._variants_lock:
            v = self._variants.get(key)
            if v is None:
                v = self._compile(build(), key)
                while len(self._variants) >= self.VARIANTS_LIMIT:
                    old = min(self._variants.values(), key=lambda x: x.used)
                    del self._variants[old.key]
                    log.debug("Inference: dropped the compiled model for %s (least recently used)", old.key)
                    with self._cond:
                        self._retired.append(old.pool)
                self._variants[key] = v
            v.used = next(self._tick)
            return v

    def _release_idle_pools(self) -> None:
        """Let go of retired pools whose requests have all completed (from a caller's thread, never a callback's:
        a queue must not be destroyed by its own callback thread)."""
        with self._cond:
            idle = [p for p in self._retired if p.inflight == 0]
            self._retired[:] = [p for p in self._retired if p.inflight > 0]  # the same list: _free_queues has it
        for p in idle:
            _wait_requests(p.queue)
        idle.clear()

    def _raw_variant(self) -> _Variant:
        size = None if self._input_size is None else (self._input_size[1], self._input_size[0])
        return self._variant("raw", lambda: self._static_model(size) if size is not None else self._model)

    def _frame_variant(self, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
                       colorspace: ColorSpace | None = None, color_range: ColorRange | None = None) -> _Variant:
        # The colour matrix and range are part of the model: frames that differ in them get models of their own.
        key = (fmt, tuple(shapes), width, height, colorspace, color_range)
        return self._variant(key, lambda: self._ppp_model(fmt, shapes, width, height, colorspace, color_range))

    def _size_for(self, width: int, height: int) -> tuple[int, int] | None:
        """The model input (width, height) for frames of ``width`` x ``height``."""
        if self._input_size_fn is None:
            return self._input_size
        try:
            got = self._input_size_fn(width, height)
        except InteropError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's function: its failure is reported as bad input_size
            raise InvalidTensorError(f"input_size({width}, {height}) raised {type(e).__name__}: {e}") from e
        size = self._check_size(got)
        if size is None:
            raise UnsupportedTypeError(f"input_size({width}, {height}) must return (width, height), not None")
        return size

    def _ppp_options(self, width: int, height: int) -> _preprocess.Options:
        return _preprocess.Options(self.model_name, self._size_for(width, height),
                                   None if self._mean is None else tuple(self._mean),
                                   None if self._scale is None else tuple(self._scale), self._rgb)

    def _ppp_model(self, fmt: FrameFormat, shapes: list[tuple[int, ...]], width: int, height: int,
                   colorspace: ColorSpace | None = None, color_range: ColorRange | None = None) -> Any:
        """The model with pre-processing for frames whose planes are shaped ``shapes`` ((1, rows, pitch, C))."""
        layout_now = (fmt, width, height)
        if self._first_layout is None:
            self._first_layout = layout_now
        elif layout_now != self._first_layout and not self._layout_change_logged:
            self._layout_change_logged = True  # once: a stream that keeps changing would flood the log
            f0, w0, h0 = self._first_layout
            log.info("Inference: frames changed from %s %dx%d to %s %dx%d: a model is compiled for each layout "
                     "(at most %d kept)", f0.name, w0, h0, fmt.name, width, height, self.VARIANTS_LIMIT)
        opts = self._ppp_options(width, height)
        return _preprocess.ppp_model(self._ov, self._model, fmt, shapes, width, height, opts, colorspace, color_range)

    # -- inputs ---------------------------------------------------------------------------------------
    def _map(self, x: Any) -> Any:
        from ..api import map as imap

        return imap(x, self._memory_type)

    def _map_one(self, x: Any) -> Any:
        """``x`` mapped for the device. On the NPU, host memory (decoded frames) is imported page by page: at most
        HOST_FRAMES_IN_FLIGHT such frames wait for their requests, and a frame whose pages overlap an import still
        held by a request in flight (FFmpeg's buffers can share pages) waits for a request to complete and is
        mapped again: never copied (the copying route needs allow_copy, which Inference never passes)."""
        if self._memory_type is not MemoryType.NPU:
            return self._map(x)
        waits = not _callbacks_here()  # a completion callback must never wait for a request
        if waits:
            with self._cond:
                self._cond.wait_for(lambda: self._host_frames < self.HOST_FRAMES_IN_FLIGHT)
        collected = False
        while True:
            with self._cond:
                seen = self.requests_done
                busy = self._host_frames > 0
            try:
                return self._map(x)
            except (WrongMemoryError, NoRouteError):
                if not (waits and busy):
                    if collected:
                        raise
                    # The import in the way may be garbage: NPU tensors of finished requests that sit in a reference
                    # cycle (an exception's traceback holds them) until the collector runs. Collect once and retry.
                    collected = True
                    gc.collect()
                    continue
                with self._cond:  # the pages may be those of a frame in flight: retry once one request completed
                    while self.requests_done == seen and self._host_frames > 0:
                        self._cond.wait()

    def _prepare(self, x: Any) -> tuple[_Variant, list[Any], Any]:
        """(variant, input tensors, objects to keep alive until the request completes)."""
        if isinstance(x, (list, tuple)) and not isinstance(x, Frame):
            mapped = [self._map(t) for t in x]
            return self._raw_inputs(mapped, x)
        if isinstance(x, Mapping):
            raise UnsupportedTypeError("give several inputs as a list in the model's input order, not a dict")
        if isinstance(x, GPUInput):
            return self._gpu_inputs(x)
        if self._memory_type is MemoryType.OPENVINO:
            g = cuda_frame(x)
            if g is not None:
                return self._gpu_inputs(self._gpu_make(g))
        try:
            m = self._map_one(x)  # interop.map wraps a framework's object (a decoded av.VideoFrame: in one step)
        except UnsupportedFormatError as e:  # a pixel format interop has no planes for (yuv410p...)
            return self._prepare(self._convert(x, e))
        if isinstance(m, Frame):
            planes, shapes = self._frame_inputs(m)
            try:
                v = self._frame_variant(m.format, shapes, m.width, m.height, m.colorspace, m.color_range)
            except UnsupportedFormatError as e:
                if m.format in _preprocess.supported_formats():  # refused for another reason (the model's inputs)
                    raise
                return self._prepare(self._convert(x, e))
            return v, planes, (x, m, planes)
        return self._raw_inputs([m], x)

    def gpu_preprocess(self, x: Any) -> GPUInput:
        """The model input for CUDA frame ``x`` (an NVDEC-decoded av.VideoFrame, or a CUDA Frame of NV12 or P010
        planes), made now: resized, colour converted and normalised on the GPU by one kernel that writes it into
        page-locked host memory, where the model (on a device fed host tensors: CPU, GPU) reads it as it is
        (``_cuda_preprocess``: computed where the model reads it, not copied). Returns a GPUInput to give to
        ``infer``/``infer_async``/``compile_for``; the frame itself may go back to its decoder at once.
        ``infer_async(frame)`` does the same in one step; this lets a thread of the caller's pre-process frames
        ahead of the thread that starts requests (``interop run --nvdec`` does)."""
        self._check_open()
        f = cuda_frame(x)
        if f is None:
            raise UnsupportedTypeError(f"gpu_preprocess takes a CUDA frame (an NVDEC av.VideoFrame or a CUDA Frame), "
                                       f"not {type(x).__name__}")
        return self._gpu_make(f)

    _ON_CPU = "map the frame to the CPU instead (allow_copy: a counted copy; interop run: leave --nvdec out)"

    def _gpu_make(self, f: Frame) -> GPUInput:
        from ._cuda_preprocess import GPUPreprocess

        if self._memory_type is not MemoryType.OPENVINO:
            raise UnsupportedFormatError(f"GPU pre-processing writes the model's input into host memory, which "
                                         f"{self._device} does not read as it is: use the CPU or GPU device")
        with self._cond:
            if self._gpu is None:
                self._gpu = GPUPreprocess()
            gpu = self._gpu
        gpu.check(f)
        device = int(getattr(f.tensors[0], "device_id", 0))
        key = (f.width, f.height, device)
        target = self._gpu_targets.get(key)
        if target is None:  # once per frame size: no OpenVINO call, nor the caller's input_size, per frame
            with self._inside_openvino():
                target = self._gpu_target(f.width, f.height)
            self._hold_gpu_buffers((device, _nbytes(target)))
            self._gpu_targets[key] = target
        return gpu.run(f, target, self._gpu_token)

    def _hold_gpu_buffers(self, size: tuple[int, int]) -> None:
        """This Inference uses pinned buffers of ``size`` from now until it closes (held before any is taken)."""
        from ._cuda_preprocess import hold

        with self._cond:
            closed = self._closed
            if not closed and size not in self._gpu_sizes:
                hold(*size)  # lock order: _cond, then the buffers' lock (nothing takes them the other way)
                self._gpu_sizes.add(size)
        if closed:
            self._check_open()

    def _gpu_target(self, width: int, height: int) -> Target:
        """What the kernel writes for frames of ``width`` x ``height``: the model's input size, layout, mean, scale."""
        params = self._model.get_parameters()
        if len(params) != 1:
            raise UnsupportedFormatError(f"{self.model_name} has {len(params)} inputs: GPU pre-processing feeds a "
                                         f"model of one image input; give such a model its inputs as tensors "
                                         f"(interop run: leave --nvdec out)")
        et = params[0].get_element_type()
        if et != self._ov.Type.f32:
            raise UnsupportedFormatError(f"GPU pre-processing writes f32 model inputs; {self.model_name} takes "
                                         f"{et}: {self._ON_CPU}")
        lay = self._layout(params[0])
        ps = params[0].get_partial_shape()
        if ps[0].is_static and ps[0].get_length() != 1:
            raise UnsupportedFormatError(f"GPU pre-processing writes one frame per request (batch 1); {self.model_name} "
                                         f"takes batches of {ps[0].get_length()}: {self._ON_CPU}")
        c = ps[1 if lay == "NCHW" else 3]
        if c.is_static and c.get_length() != 3:
            raise UnsupportedFormatError(f"GPU pre-processing writes 3 colour channels; {self.model_name} takes "
                                         f"{c.get_length()}: {self._ON_CPU}")
        th, tw = _preprocess._target_size(params[0], lay, self._size_for(width, height), width, height)
        mean = None if self._mean is None else tuple(self._mean)
        scale = None if self._scale is None else tuple(self._scale)
        return Target(th, tw, lay == "NHWC", mean, scale, self._rgb)

    def _gpu_inputs(self, x: GPUInput) -> tuple[_Variant, list[Any], Any]:
        """A GPUInput: the network as it is (no pre-processing in its graph) at the input's size."""
        from ._cuda_preprocess import host_buffers

        x.wait()  # the kernel has written it (and the frame it read goes back to its decoder)
        if x._owner is not self._gpu_token:
            raise InvalidTensorError("this GPUInput was made by another Inference (its size, mean, scale and colour "
                                     "order): make it with this one's gpu_preprocess")
        th, tw = x.target.height, x.target.width
        v = self._variant(("cuda", th, tw), lambda: self._static_model((th, tw)))
        # a buffer per request that may hold one, per input a thread pre-processing ahead may hold, and the loop's
        host_buffers(x.device, x.array.nbytes).reserve(v.nreq + self.GPU_INPUTS_AHEAD)
        mapped = self._map(x.array)
        return v, raw_inputs(self._ov, [mapped], v.inputs, self.model_name), (x, mapped)

    def _convert(self, x: Any, err: UnsupportedFormatError) -> Any:
        """``x`` converted to a format the model takes (allow_copy; counted in copy_meter), or the one-line refusal
        naming the supported formats."""
        what = frame_format_name(x)
        if what is None:
            raise err
        if not self._allow_copy:
            raise refusal(what) from err
        out, src, to = convert_frame(x)
        if src not in self.converted:
            self.converted[src] = to
            log.warning("Inference: %s frames are converted to %s before the model (allow_copy): a counted copy per "
                        "frame", src, to)
        return out

    def _frame_inputs(self, m: Frame) -> tuple[list[Any], list[tuple[int, ...]]]:
        """The ov.Tensors a request reads for the planes of mapped frame ``m``, and their shapes."""
        return frame_inputs(self._ov, self._plane_inputs, m)

    def _raw_inputs(self, mapped: list[Any], keep: Any) -> tuple[_Variant, list[Any], Any]:
        v = self._raw_variant()
        nats = raw_inputs(self._ov, mapped, v.inputs, self.model_name)
        if v.dynamic:
            self._check_shapes(v, tuple(tuple(int(d) for d in n.get_shape()) for n in nats))
        return v, nats, (keep, mapped)

    SHAPES_CHECKED_LIMIT = SHAPES_CHECKED_LIMIT

    def _check_shapes(self, v: _Variant, shapes: tuple[tuple[int, ...], ...]) -> None:
        check_shapes(self._ov, v.model, v.shapes_ok, shapes, self.model_name)


    def compile_for(self, x: Any) -> None:
        """Compile (and cache) the model variant ``x`` needs, without running it: keeps compilation out of timings."""
        self._check_open()
        with self._inside_openvino():
            self._prepare(x)

    # -- running --------------------------------------------------------------------------------------
    BACKLOG_LIMIT = 1024  # submissions from callbacks waiting for a request; past it infer_async refuses more

    @contextlib.contextmanager
    def _inside_openvino(self, new_work: bool = True) -> Iterator[None]:
        """Counts a thread that compiles, maps, starts requests or waits in OpenVINO: at exit, _close_all waits for
        none to be inside OpenVINO before tearing it down, and parks threads that come later (see _gate; ``new_work``
        False: work exit waits for, let in until the Inference is sealed)."""
        with self._cond:
            _gate(self._cond, self._sealed, new_work, lambda: self._closed)
            self._inside += 1
        try:
            yield
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    def _seal(self, timeout: float) -> bool:
        """At exit, once closed: no thread enters OpenVINO through this Inference any more (see _gate); wait for those
        still inside (``timeout`` seconds at most). True once none is."""
        with self._cond:
            self._sealed = True
        return self._wait_outside(timeout)

    def _start_queued(self) -> None:
        """The drainer's step: start the oldest submission queued by a callback (a failure is reported by wait_all).

        Counted inside OpenVINO from before it takes the submission until it has let go of it: the references it
        drops may be the last ones to a compiled model and its pool, which must not be freed as the interpreter
        finalizes."""
        with self._inside_openvino(new_work=False):
            self._start_next_queued()

    def _start_next_queued(self) -> None:
        with self._cond:
            if not self._backlog:
                return
            v, inputs, job = self._backlog.popleft()
        try:
            with v.submit_lock:
                self._start(v, inputs, job)  # this thread runs no callback: waiting here is safe
        except BaseException as e:  # noqa: B036 - reported by wait_all(), never lost on this thread
            self._submit_failed(job, e)

    def _wait_outside(self, timeout: float) -> bool:
        with self._cond:
            if not self._cond.wait_for(lambda: self._inside == 0, timeout):
                log.warning("Inference at exit: %d threads still inside OpenVINO after %.0f s: OpenVINO is left as "
                            "it is", self._inside, timeout)
                return False
        return True

    def _submit(self, x: Any, job_cb: Callback | None, userdata: Any, event: threading.Event | None,
                timeout: float | None = None, views: bool = False) -> _Job:
        self._check_open()
        _let_go_now()
        with self._inside_openvino():
            return self._submit_inside(x, job_cb, userdata, event, timeout, views)

    def _submit_inside(self, x: Any, job_cb: Callback | None, userdata: Any, event: threading.Event | None,
                       timeout: float | None, views: bool = False) -> _Job:
        v, inputs, keep = self._prepare(x)
        job = _Job(v, job_cb, userdata, keep, event, views=views, owner=self)
        if self._memory_type is MemoryType.NPU and _holds_host_import(keep):
            job.host_frame = True
            with self._cond:
                self._host_frames += 1
        if _callbacks_here():
            # A completion callback must never wait for a request: the request it runs on is busy until it returns,
            # so with every request busy (or another submitter waiting on submit_lock for one) it would wait for
            # itself for good. It starts a free request if one is ready now, else queues the job for the drainer.
            self._submit_from_callback(v, inputs, job)
            return job
        with self._cond:
            self._pending += 1
        try:
            if timeout is None:
                with v.submit_lock:  # blocks (GIL released) while every request of the pool is busy
                    self._start(v, inputs, job)
            else:
                self._start_within(v, inputs, job, timeout)
        except BaseException:
            with self._cond:
                self._pending -= 1
                self._release_job(job)
                self._cond.notify_all()
            raise
        return job

    def _start_within(self, v: _Variant, inputs: list[Any], job: _Job, timeout: float) -> None:
        """_start once a request is free, waiting ``timeout`` seconds at most (InteropTimeoutError past it)."""
        deadline = time.monotonic() + timeout
        if not v.submit_lock.acquire(timeout=timeout):
            raise self._busy(timeout)
        try:
            # A request turns free only after its callback has returned, which nothing signals: poll in short ticks,
            # and now and then look for a request that failed inside OpenVINO (it never turns free).
            reap_at = time.monotonic() + self.POLL_S
            while not v.pool.queue.is_ready():
                now = time.monotonic()
                if now >= deadline:
                    if self._reap(v, v.pool) and v.pool.queue.is_ready():  # a failed request held the pool
                        break
                    raise self._busy(timeout)
                if now >= reap_at:
                    self._reap(v, v.pool)
                    reap_at = now + self.POLL_S
                    continue
                with self._cond:
                    self._cond.wait(min(self.READY_TICK_S, deadline - now))
            self._start(v, inputs, job)
        finally:
            v.submit_lock.release()

    def _busy(self, timeout: float) -> InteropTimeoutError:
        return InteropTimeoutError(f"every inference request of {self.model_name} was still busy after {timeout} s: "
                                   f"the input was not started; try again, wait_all(), or look for a completion "
                                   f"callback that does not return")

    def _start(self, v: _Variant, inputs: list[Any], job: _Job) -> None:
        """start_async on the variant's pool (submit_lock held). A pool with a failed request raises that request's
        error from start_async: the failure is reported for its own job, the pool replaced, and the start retried."""
        for attempt in range(2):
            pool = v.pool
            with self._cond:
                pool.inflight += 1
                job.pool = pool
            try:
                pool.queue.start_async(inputs, job)
                return
            except RuntimeError:
                with self._cond:
                    pool.inflight -= 1
                    job.pool = None
                if attempt or not self._reap(v, pool):
                    raise

    def _reap(self, v: _Variant, pool: _Pool) -> bool:
        """Find the requests of ``pool`` that failed inside OpenVINO (they never call back): fail their jobs with
        RequestFailedError and replace the pool (its queue would raise the error again). True if any was found."""
        failed = []
        for i in range(len(pool.queue)):
            try:
                pool.queue[i].wait_for(0)  # False while running; raises the error of a request that failed
            except RuntimeError as err:
                failed.append((i, err))
        if not failed:
            return False
        userdata = pool.queue.userdata
        with self._cond:
            for i, cause in failed:
                job = userdata[i]
                if isinstance(job, _Job) and not job.done and job.pool is pool:
                    failure = RequestFailedError(f"an inference request of {self.model_name} on {self._device} "
                                                 f"failed inside OpenVINO: {_ov_message(cause)}")
                    # the cause's traceback holds this frame (the pool, the variant, the Inference): not kept
                    failure.__cause__ = cause.with_traceback(None)
                    self._finish(job, failure)
            if v.pool is pool:
                v.pool = _Pool(self._new_queue(v.compiled, v.nreq))
                self._retired.append(pool)
            self._cond.notify_all()
        return True

    def _reap_all(self) -> None:
        """Look for failed requests in every pool with requests in flight (waiting paths, from the caller's thread)."""
        with self._variants_lock:
            variants = list(self._variants.values())
        with self._cond:
            retired = list(self._retired)
        for v in variants:
            if v.pool.inflight:
                self._reap(v, v.pool)
        for pool in retired:  # a dropped variant's pool: its jobs still name their variant
            if pool.inflight:
                owner = next((j.variant for j in pool.queue.userdata
                              if isinstance(j, _Job) and j.pool is pool and j.variant is not None), None)
                if owner is not None:
                    self._reap(owner, pool)

    def _finish(self, job: _Job, err: BaseException | None) -> None:
        """Account for a job that will not call back (self._cond held)."""
        if job.done:
            return
        job.done = True
        if err is not None:
            job.error = err
            if job.event is None:
                self._errors.append(err)
        self._pending -= 1
        self._release_job(job)
        if job.event is not None:
            job.event.set()

    def _release_job(self, job: _Job) -> None:
        """Drop what a job held for its request (self._cond held)."""
        if job.pool is not None:
            job.pool.inflight -= 1
            job.pool = None
        if job.host_frame:
            job.host_frame = False
            self._host_frames -= 1
        job.keepalive = None
        job.variant = None
        # OpenVINO's queue keeps the job after its request: the caller's objects go now (a bound method's object, a
        # callback's error and its traceback would keep the Inference and its compiled models alive)
        job.callback = job.userdata = None
        if job.event is None:  # a waiter reads the result or error after the event (infer)
            job.result = job.error = None
        owner, job.owner = job.owner, None
        if owner is not None and self._pending == 0:
            _ended[id(owner)] = owner  # maybe its last reference, on any thread: let go by _let_go_now
        del owner

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
                    self._start(v, inputs, job)
                    return
            except BaseException:
                with self._cond:
                    self._pending -= 1
                    self._release_job(job)
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
        with self._cond:
            self._finish(job, e)
            self._cond.notify_all()

    def _on_done(self, request: Any, job: _Job) -> None:
        # OpenVINO's thread. Never let an exception escape into OpenVINO.
        owners = _callbacks_here()
        owners.append(id(self))
        try:
            assert job.variant is not None
            if job.views:  # valid while the callback runs: the request is not reused before it returns
                if job.callback is not None:
                    job.callback(self._output_views(request, job.variant), job.userdata)
            else:
                outs = self._outputs(request, job.variant)
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
            del request  # see _Dispatch.__call__: a kept traceback holds this frame
            owners.pop()
            with self._cond:
                if not job.done:
                    job.done = True
                    self._pending -= 1
                    self.requests_done += 1
                    self._release_job(job)
                self._cond.notify_all()
            if job.event is not None:
                job.event.set()

    def _outputs(self, request: Any, v: _Variant) -> Outputs:
        """The request's outputs copied out (counted in output_bytes)."""
        outs: Outputs = {}
        n = 0
        for i, k in enumerate(v.output_keys):
            a = np.array(request.get_output_tensor(i).data, copy=True)
            n += a.nbytes
            outs[k] = a
        with self._cond:
            self._output_bytes += n
        return outs

    @staticmethod
    def _output_views(request: Any, v: _Variant) -> Outputs:
        """The request's outputs as numpy views of its output tensors (nothing copied, nothing counted)."""
        return {k: request.get_output_tensor(i).data for i, k in enumerate(v.output_keys)}

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
        self._check_open()
        _let_go_now()
        with self._inside_openvino():
            return self._infer(x)

    def _infer(self, x: Any) -> Outputs:
        # Run in the caller's thread on a request of its own: a request that fails inside OpenVINO raises here
        # (in the async pool it would never call back), and there is no hand-off to another thread to wait for.
        v, inputs, keep = self._prepare(x)
        job = _Job(v, None, None, keep)  # no owner: the caller's thread holds the Inference until it is done
        with self._cond:
            self._pending += 1
            if self._memory_type is MemoryType.NPU and _holds_host_import(keep):
                job.host_frame = True
                self._host_frames += 1
        try:
            try:
                req = v.sync_requests.pop()
            except IndexError:
                req = v.compiled.create_infer_request()
            try:
                req.infer(inputs)
            except RuntimeError as e:
                raise RequestFailedError(f"an inference request of {self.model_name} on {self._device} failed "
                                         f"inside OpenVINO: {_ov_message(e)}") from e
            outs = self._outputs(req, v)
            v.sync_requests.append(req)
            return outs
        finally:
            with self._cond:
                job.done = True
                self._pending -= 1
                self.requests_done += 1
                self._release_job(job)
                self._cond.notify_all()

    def infer_async(self, x: Any, callback: Callback | None = None, userdata: Any = None, *,
                    timeout: float | None = None, copy_outputs: bool = True) -> None:
        """Start inference and return at once; from a thread of the caller's, waits while every request is busy:
        ``timeout`` seconds at most (None: for ever; 0: start only if a request is free now), then
        InteropTimeoutError (a TimeoutError), the input not started.

        ``callback(outputs, userdata)`` runs on OpenVINO's thread; an exception it raises is re-raised by wait_all().
        A completion callback (of this or another Inference) may call infer_async: there it never waits, as a
        request is busy until its callback returns; when no request is free the input is queued (it stays
        referenced) and started by a thread of this Inference as requests complete, in the order queued.
        ``pending`` and ``wait_all()`` count queued inputs; an input that cannot be started is reported by
        ``wait_all()``. At most BACKLOG_LIMIT inputs wait so; past that infer_async raises ResourceError.

        ``copy_outputs=False``: the callback gets numpy views of the request's own output tensors instead of copies
        (nothing copied, ``output_bytes`` unchanged). They are valid only until the callback returns (the request
        then runs another input): copy what must outlive it.
        """
        if callback is not None and not callable(callback):
            raise UnsupportedTypeError(f"callback must be callable, not {type(callback).__name__}")
        if not isinstance(copy_outputs, bool):
            raise UnsupportedTypeError(f"copy_outputs must be True or False, not {copy_outputs!r}")
        self._submit(x, callback, userdata, None, _check_timeout(timeout), not copy_outputs)

    def wait_all(self, timeout: float | None = None) -> None:
        """Wait until every started (and queued) request has completed; re-raise the first error since the last
        wait_all(). ``timeout``: seconds (None waits for ever); past it, InteropTimeoutError (a TimeoutError),
        the requests still running. Refused (CallbackReentryError) in this Inference's own completion callbacks."""
        limit = _check_timeout(timeout)
        self._refuse_in_own_callback("wait_all()")
        self._wait_all(limit, timeout)
        _let_go_now()

    def _wait_all(self, limit: float | None, timeout: float | None, counted: bool = False) -> None:
        """wait_all()'s body; ``counted``: the caller already counts itself inside OpenVINO (close), so the calls
        here must not pass _gate again (an Inference sealed meanwhile would park a thread that exit waits for)."""
        def inside() -> contextlib.AbstractContextManager[None]:
            return contextlib.nullcontext() if counted else self._inside_openvino(new_work=False)

        deadline = None if limit is None else time.monotonic() + limit
        while True:
            with self._cond:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                tick = self.POLL_S if left is None else min(self.POLL_S, left)
                if self._cond.wait_for(lambda: self._pending == 0, tick):
                    errors, self._errors = self._errors, []
                    break
                if left is not None and left <= tick:
                    raise InteropTimeoutError(f"{self._pending} inference requests still running after {timeout} s: "
                                              f"wait again, or look for a completion callback that does not return")
            with inside():
                self._reap_all()  # a request that failed inside OpenVINO never calls back: look for one
        with inside():
            self._release_idle_pools()
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Wait for running requests, then free the compiled models and their request pools. Idempotent.

        Waits at most a minute: if requests are still running then (a callback that does not return), their
        models are left to the garbage collector. Refused (CallbackReentryError) in this Inference's own callbacks."""
        self._close(60.0)

    def _close(self, wait_s: float) -> None:
        # The thread that closes is counted inside OpenVINO from the moment it claims the closing to its end: at
        # exit, _close_all finds the Inference closed (by a daemon thread of the program's, say) and must wait for
        # that close to be done with the requests, as it waits for its own, before the interpreter finalizes.
        with self._cond:
            if self._closed:
                return
            self._refuse_in_own_callback("close()")
            self._closed = True  # (never sealed before: exit seals an Inference only once it is closed)
            self._inside += 1
        try:
            self._close_counted(wait_s)
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()

    def _close_counted(self, wait_s: float) -> None:
        try:
            self._wait_all(_check_timeout(wait_s), wait_s, counted=True)
        except InteropTimeoutError as e:
            log.warning("Inference.close: %s; closing without waiting for them", e)
            self._let_go_gpu_buffers()  # buffers still read are freed only as their last view goes
            return
        except (KeyboardInterrupt, SystemExit):
            # not closed: the requests still run (their waits below have no limit); close() again, as exit does,
            # finishes it
            with self._cond:
                self._closed = False
            raise
        except BaseException as e:  # noqa: B036 - closing must not fail; errors were the caller's to collect
            log.debug("Inference.close: %r", e)
        try:
            with self._variants_lock:
                variants = list(self._variants.values())
                self._variants.clear()  # the same dict: _free_queues has it
            _wait_queues(variants)
            variants.clear()  # the last references to the queues, but for a job's or a retired pool's (let go next)
            self._release_idle_pools()
            self._plane_inputs.clear()
            _wait_callbacks_let_go(CALLBACK_LET_GO_S, self)  # the queues just freed: see _callbacks
        finally:
            self._let_go_gpu_buffers()

    def _let_go_gpu_buffers(self) -> None:
        """The pinned buffers of GPU-pre-processed inputs, freed once no open Inference uses their size."""
        from ._cuda_preprocess import let_go

        with self._cond:
            sizes = list(self._gpu_sizes)
            self._gpu_sizes.clear()
        for size in sizes:
            let_go(*size)

    def __enter__(self) -> Inference:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            # Raised, not parked, at exit too: a thread the program joins in its own exit handler must end.
            if _exiting.is_set():
                raise _closed_by_exit()
            raise StateError("this Inference was closed; make a new one")

    @property
    def pending(self) -> int:
        """Requests started and not yet completed."""
        with self._cond:
            return self._pending

    def compiled_property(self, name: str, x: Any = None) -> Any:
        """A property of the compiled model used for ``x`` (default: the raw model), e.g. INFERENCE_PRECISION_HINT."""
        self._check_open()
        with self._inside_openvino():
            v = self._raw_variant() if x is None else self._prepare(x)[0]
            return v.compiled.get_property(name)

    def pool_size(self, x: Any = None) -> int:
        """Number of infer requests in the pool used for ``x`` (default: the raw model's)."""
        self._check_open()
        with self._inside_openvino():
            v = self._raw_variant() if x is None else self._prepare(x)[0]
        return v.nreq
