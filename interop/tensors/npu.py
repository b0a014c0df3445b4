"""NPU tensors: OpenVINO remote tensors of the NPU plugin's context, made over a frame's own memory.

``NPUContext`` wraps the NPU plugin's ``RemoteContext`` (``core.get_default_context("NPU")``); its
``get_params()["L0_CONTEXT"]`` is the plugin's Level Zero context. A DMA-BUF plane becomes an NPU tensor in
one of two ways, both zero-copy (docs/npu.md says why and what was verified how):

- ``"fd"``: hand the fd to the plugin, ``create_tensor(type, shape, {"MEM_TYPE": "SHARED_BUF",
  "MEM_HANDLE": "0x<fd>"})``; the plugin imports it with ze_external_memory_import_fd_t. The plugin imports
  from the buffer's start, so this serves planes at offset 0.
- ``"import"``: import the buffer into the plugin's own Level Zero context ourselves (zeMemAllocHost with the
  fd chained, interop.native.level_zero) and give OpenVINO an ``ov.Tensor`` over ``pointer + offset``: memory
  of the plugin's context, which the NPU binds without copying. This serves any offset (the chroma plane of
  an NV12 buffer).

Host memory (FFmpeg's decoded planes, page-aligned CPU tensors) goes a third way, ``"CPU_VA"`` (``host_planes``):
the plugin imports the whole pages that hold the planes (``create_tensor(u8, [bytes], {"MEM_TYPE": "CPU_VA",
"MEM_HANDLE": "0x<page>"})``, Level Zero's system-memory import, zero_mem.cpp ``import_standard_allocation_memory``)
and each plane goes over as an ``ov.Tensor`` at its own address, inside that import: memory of the plugin's
context, bound without a copy. Model shapes never depend on addresses (the planes keep the device-side shape
below; only the import's shape is the page count). ``HostImports`` keeps one import per page range while the
memory's owner lives, and refuses overlapping ones (WrongMemoryError naming the rule).

MEM_HANDLE travels as a hex string: OpenVINO's Python binding turns an int into an int64 ``ov::Any``, which
the plugin's ``as<void*>()`` refuses ("Bad as from: l to: Pv"), while a string is parsed by
``operator>>(void*&)`` into the pointer. So no C helper is needed.

Device-side plane shape: (1, rows, pitch / itemsize / C, C), the layout OpenVINO gets from FFmpeg frames
(the model crops the padding); a C-contiguous tensor keeps its shape. ``native`` is the RemoteTensor (or
the ov.Tensor of the import path); the CPU cannot read NPU tensors through interop.
"""

from __future__ import annotations

import glob
import threading
import weakref
from typing import Any

import numpy as np

from ..backends import Backend, BackendReport, register_backend
from ..context import Context, register_default_context
from ..errors import BackendUnavailableError, ContextMismatchError, InvalidTensorError, WrongMemoryError
from ..info import TensorInfo
from ..tensor import Tensor, _ArrayExport
from ..types import MemoryType

STRATEGIES = ("auto", "fd", "import")


def handle_value(handle: int) -> str:
    """A native handle (fd or pointer) as OpenVINO's plugins can read it into a ``void*``: a hex string."""
    return f"0x{int(handle):x}"


def parse_handle(value: Any) -> int:
    """An int from a handle in ``get_params()``: an int, a string, or an OVAny holding a ``void*``
    (``astype(str)`` prints it as hex)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if not isinstance(value, str) and hasattr(value, "astype"):
        value = value.astype(str)
    if isinstance(value, str):
        try:
            return int(value.strip(), 0) if value.strip() not in ("", "0", "(nil)") else 0
        except ValueError:
            pass
    raise InvalidTensorError(f"cannot read a native handle from {value!r}")


class NPUContext(Context):
    """The OpenVINO NPU plugin's remote context (``native``). ``ze_context`` is its Level Zero context handle.

    ``strategy``: "auto" (fd hand-off for planes at offset 0, our own import otherwise), "fd" or "import".
    """

    memory_type = MemoryType.NPU

    def __init__(self, remote_context: Any, *, core: Any = None, strategy: str = "auto"):
        if strategy not in STRATEGIES:
            raise InvalidTensorError(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        for m in ("create_tensor", "get_params"):
            if not hasattr(remote_context, m):
                raise InvalidTensorError(f"NPUContext wraps an openvino.RemoteContext, not {type(remote_context).__name__}")
        super().__init__(native=remote_context, device="NPU")
        self.core = core
        self.strategy = strategy
        self._ze_context: int | None = None
        self.host_imports = HostImports(self)

    @classmethod
    def create(cls, core: Any = None, *, strategy: str = "auto") -> NPUContext:
        """The NPU plugin's default context; BackendUnavailableError (with OpenVINO's reason) where there is none."""
        from .openvino import get_core

        core = core if core is not None else get_core()
        try:
            rc = core.get_default_context("NPU")
        except Exception as e:  # OpenVINO raises RuntimeError with the plugin's reason
            raise BackendUnavailableError(f"OpenVINO has no NPU context here: {str(e).strip().splitlines()[-1]}",
                                          backend=BACKEND.name) from e
        return cls(rc, core=core, strategy=strategy)

    @property
    def remote_context(self) -> Any:
        return self._native

    @property
    def ze_context(self) -> int:
        """The plugin's Level Zero context handle (``get_params()["L0_CONTEXT"]``)."""
        if self._ze_context is None:
            params = self._native.get_params()
            if "L0_CONTEXT" not in params:
                raise BackendUnavailableError(f"the NPU remote context publishes no L0_CONTEXT (params: {sorted(params)})",
                                              backend=BACKEND.name)
            self._ze_context = parse_handle(params["L0_CONTEXT"])
        return self._ze_context

    def handle(self, key: str) -> int:
        if key != "ze_context":
            raise InvalidTensorError(f"NPUContext has one handle, 'ze_context', not {key!r}")
        return self.ze_context

    def key(self) -> Any:
        """The plugin's Level Zero context (two wrappers of one plugin context are the same scope)."""
        try:
            return ("npu", self.ze_context, self.strategy)
        except Exception:  # a context without L0_CONTEXT: only itself
            return ("npu", id(self._native), self.strategy)

    def __repr__(self) -> str:
        return f"<NPUContext {self._native!r} strategy={self.strategy}>"


register_default_context(MemoryType.NPU, NPUContext.create)


def npu_output_context(given: Context | None, who: str) -> NPUContext:
    """The NPUContext a mapper makes its tensors in: ``given`` (the mapper's output context), else the default
    one; ContextMismatchError naming ``who`` (the mapper) when ``given`` is another kind of context."""
    ctx = given if given is not None else Context.default(MemoryType.NPU)
    if not isinstance(ctx, NPUContext):
        raise ContextMismatchError(f"{who} makes tensors of an NPUContext, not of {ctx!r}")
    return ctx


class NPUTensor(Tensor):
    """An NPU input: ``native`` is the openvino RemoteTensor (fd hand-off) or ov.Tensor over memory of the
    plugin's Level Zero context (import). ``info`` is the device-side shape. Handles: ``mem_handle`` (the fd
    or the pointer handed over), ``offset``; ``mem_type`` is "SHARED_BUF", "L0_HOST", "L0_USM" or "CPU_VA" (an
    ov.Tensor at the plane's own address inside a CPU_VA import of its pages: ``host_import``)."""

    memory_type = MemoryType.NPU
    HANDLE_KEYS = {"mem_handle": "mem_handle", "offset": "offset"}

    def __init__(self, native: Any, info: TensorInfo, *, mem_type: str, mem_handle: int, offset: int = 0,
                 context: Context | None = None, parent: Any = None, writable: bool = True):
        super().__init__(native, info, context=context, parent=parent, writable=writable)
        self.mem_type = mem_type
        self.mem_handle = int(mem_handle)
        self.offset = int(offset)
        self._host_import: HostImport | None = None

    @property
    def host_import(self) -> HostImport | None:
        """The CPU_VA import this tensor lies in (mem_type "CPU_VA"), else None."""
        return self._host_import

    @property
    def ov_tensor(self) -> Any:
        """What to give ``InferRequest.set_tensor``/``set_input_tensor``."""
        return self.native

    def __repr__(self) -> str:
        if self.released:
            return "<NPUTensor released>"
        return f"<NPUTensor {self.mem_type} shape={self._info.shape} dtype={self._info.dtype} handle={self.mem_handle:#x}>"


def device_layout(info: TensorInfo, image: bool) -> tuple[tuple[int, ...], int]:
    """(shape OpenVINO gets, bytes it spans). Frame planes (``image``) and padded (H, W[, C]) tensors: (1, rows,
    pitch/itemsize/C, C), the layout OpenVINO gets from FFmpeg frames (the model crops the padding). A dense
    tensor that is not a frame plane keeps its shape. Other layouts: InvalidTensorError."""
    isz = info.dtype.itemsize
    if info.is_contiguous and not image:
        return tuple(info.shape), info.nbytes
    if info.ndim in (2, 3):
        h, w = info.shape[:2]
        c = info.shape[2] if info.ndim == 3 else 1
        pitch = info.strides[0]
        inner_ok = info.strides[1] == c * isz and (info.ndim == 2 or info.strides[2] == isz)
        if inner_ok and pitch % (c * isz) == 0 and pitch >= w * c * isz:
            return (1, h, pitch // (c * isz), c), h * pitch
    raise InvalidTensorError(f"the NPU takes dense tensors or image planes with padded rows; {info} is neither: "
                             f"make it contiguous first")


def ov_type(dtype: np.dtype) -> Any:
    from .openvino import ov_module

    return ov_module().Type(dtype)


class _Imports:
    """One import per DMA buffer into the plugin's context, shared by the planes of that buffer."""

    def __init__(self, ctx: NPUContext):
        self.ctx = ctx
        self.allocs: dict[int, Any] = {}

    def of(self, buf: Any) -> Any:
        from ..native import level_zero as ze

        a = self.allocs.get(id(buf))
        if a is None:
            zctx = ze.ZeContext.borrow(self.ctx.ze_context)
            a = ze.allocate(zctx, buf.size, "host", import_fd=buf.fd, keepalive=buf)
            self.allocs[id(buf)] = a
        return a


def npu_planes(planes: list[Tensor], ctx: NPUContext, *, image: bool, parents: list[Any] | None = None) -> list[NPUTensor]:
    """NPU tensors over DMA planes (``parents`` overrides each output's parent, e.g. the USM tensor a DMA
    plane was exported from). Zero-copy: the plugin reads the planes' own memory."""
    from ..native import dmabuf as nd
    from ..tensors.dma import DMATensor

    imports = _Imports(ctx)
    out: list[NPUTensor] = []
    for i, t in enumerate(planes):
        if not isinstance(t, DMATensor):
            raise InvalidTensorError(f"expected DMA planes, got {type(t).__name__}")
        if t.drm_modifier not in (nd.DRM_FORMAT_MOD_LINEAR, nd.DRM_FORMAT_MOD_INVALID):
            raise InvalidTensorError(f"DRM modifier {t.drm_modifier:#018x} is tiled; the NPU reads linear memory: ask the "
                                     f"producer for DRM_FORMAT_MOD_LINEAR")
        shape, span = device_layout(t.info, image)
        if t.offset + span > t.size:
            raise InvalidTensorError(f"the plane's padded rows ({span} bytes at offset {t.offset}) run past the end of "
                                     f"its {t.size}-byte buffer; the NPU needs whole rows: allocate the buffer with full pitch")
        strategy = ctx.strategy
        if strategy == "auto":
            strategy = "fd" if t.offset == 0 else "import"
        parent = parents[i] if parents is not None else t
        if strategy == "fd":
            if t.offset:
                raise InvalidTensorError(f"the NPU plugin imports an fd from its start; this plane is at offset "
                                         f"{t.offset}: use NPUContext(strategy='auto' or 'import')")
            props = {"MEM_TYPE": "SHARED_BUF", "MEM_HANDLE": handle_value(t.fd)}
            native = ctx.remote_context.create_tensor(ov_type(t.info.dtype), list(shape), props)
            out.append(NPUTensor(native, TensorInfo(shape, t.info.dtype), mem_type="SHARED_BUF", mem_handle=t.fd,
                                 context=ctx, parent=parent, writable=t.writable))
        else:
            alloc = imports.of(t.buffer)
            addr = alloc.pointer + t.offset
            out.append(_host_tensor(alloc, addr, shape, t.info.dtype, ctx, parent, t.writable, "L0_HOST"))
    return out


# ---- host memory: CPU_VA imports ---------------------------------------------------------------------
PAGE = 4096  # the plugin's utils::STANDARD_PAGE_SIZE (interop.native.level_zero.STANDARD_PAGE_SIZE)
_ZE_SOURCE = "src/plugins/intel_npu/src/utils/src/zero/zero_mem.cpp"


class HostImport:
    """One CPU_VA import: the plugin's RemoteTensor over the pages [start, end) and the owner of that memory.

    The import ends (the RemoteTensor is dropped: the plugin's zeMemFree) before the owner is let go, so an import
    never outlives the memory it covers. NPU tensors inside it hold it (their ov.Tensor's array refers to it)."""

    def __init__(self, remote: Any, start: int, end: int, owner: Any):
        self.start, self.end = start, end
        self._box = [remote, owner]
        self._finalizer = weakref.finalize(self, _end_import, self._box)

    @property
    def remote(self) -> Any:
        return self._box[0]

    @property
    def size(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"<HostImport {self.start:#x}..{self.end:#x} ({self.size} bytes)>"


def _end_import(box: list[Any]) -> None:
    box[0] = None  # the import first (RemoteTensor destroyed: zeMemFree in the plugin) ...
    box.clear()  # ... then the memory's owner (FFmpeg may reuse or free the buffer from here on)


class HostImports:
    """The live CPU_VA imports of one NPU plugin context, by page range.

    A range inside a live import reuses it; a range that overlaps one, or ends where one starts (the plugin checks
    the page after the range: "Can not import a memory which is part of an existing allocation"), is refused with
    WrongMemoryError; anything else becomes a new import."""

    def __init__(self, ctx: NPUContext):
        self._ctx = weakref.ref(ctx)
        self._lock = threading.Lock()
        self._live: list[weakref.ref[HostImport]] = []

    def live(self) -> list[HostImport]:
        out = [imp for r in self._live if (imp := r()) is not None and imp._box]
        self._live = [weakref.ref(i) for i in out]
        return out

    def _find(self, start: int, end: int) -> HostImport | tuple[int, int] | None:
        """The live import holding [start, end), or the (start, end) of one it overlaps, or None. The overlap is
        answered without a reference to that import: the traceback of the error raised for it (kept by whoever
        catches it, and freed only by the collector when it sits in a cycle) would keep the import, and so its
        pages, alive, and the retry that waits for its request would find it still there."""
        for imp in self.live():
            if imp.start <= start and end <= imp.end:
                return imp
            if start < imp.end and imp.start <= end:
                return (imp.start, imp.end)
        return None

    def acquire(self, start: int, end: int, owner: Any) -> HostImport:
        with self._lock:
            found = self._find(start, end)
            if isinstance(found, HostImport):
                return found
            if found is not None:
                clash = found
                raise WrongMemoryError(
                    f"the pages {start:#x}..{end:#x} overlap the pages {clash[0]:#x}..{clash[1]:#x} already imported "
                    f"into the NPU plugin's Level Zero context for other memory (rule: imports never overlap, "
                    f"{_ZE_SOURCE}); release the NPU tensors of that memory first, or use page-aligned buffers")
            ctx = self._ctx()
            assert ctx is not None
            props = {"MEM_TYPE": "CPU_VA", "MEM_HANDLE": handle_value(start)}
            try:
                remote = ctx.remote_context.create_tensor(ov_type(np.dtype(np.uint8)), [end - start], props)
            except RuntimeError as e:  # the plugin's ZeroMemException / OPENVINO_THROW reach Python as RuntimeError
                why = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                raise WrongMemoryError(f"the NPU plugin cannot import the host pages {start:#x}..{end:#x} (CPU_VA): {why} "
                                       f"(rules: page-aligned address and size, no overlap, a driver with "
                                       f"ZE_EXTERNAL_MEMORY_TYPE_FLAG_STANDARD_ALLOCATION; {_ZE_SOURCE})") from e
            got = parse_handle(remote.get_params().get("MEM_HANDLE", "0"))
            if got != start:
                # the planes are handed over at their own addresses: they must be the imported allocation's
                raise WrongMemoryError(f"the NPU plugin imported the host pages {start:#x} at {got:#x}, not in place; "
                                       f"planes at their own addresses would not be memory of its context")
            imp = HostImport(remote, start, end, owner)
            self._live.append(weakref.ref(imp))
            return imp


def host_planes(planes: list[Tensor], ctx: NPUContext, *, image: bool, aligned_start: bool,
                limits: list[int] | None = None) -> list[NPUTensor]:
    """NPU tensors over host-memory planes (each plane's ``data_ptr``), through CPU_VA imports of their pages.

    Planes whose page ranges overlap or touch share one import (the planes of one FFmpeg frame live and die
    together). ``aligned_start``: each import must begin at a plane's first byte (CPU tensors: the memory starts on
    a page boundary, so no other object's bytes are imported); otherwise the whole pages around the planes are
    imported (FFmpeg's buffers, held by the planes while the import lives). ``limits``: bytes reachable from each
    plane's start (its buffer's end); the device reads whole padded rows, which must fit. Zero-copy."""
    spans = []
    for i, t in enumerate(planes):
        addr = t._host_address()
        if addr is None:
            raise WrongMemoryError(f"{t!r} is not host memory; the NPU imports host memory only through CPU_VA")
        shape, span = device_layout(t.info, image)
        if limits is not None and span > limits[i]:
            raise InvalidTensorError(f"the plane's padded rows ({span} bytes) run past the end of its buffer "
                                     f"({limits[i]} bytes); the NPU reads whole rows: keep the full pitch")
        spans.append((addr, addr + span, shape, i))
    groups: list[list[Any]] = []
    for s in sorted(spans):
        page_start = s[0] - s[0] % PAGE
        if groups and page_start <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], -(-s[1] // PAGE) * PAGE)
            groups[-1][2].append(s)
        else:
            groups.append([page_start, -(-s[1] // PAGE) * PAGE, [s]])
    out: list[NPUTensor | None] = [None] * len(planes)
    for start, end, members in groups:
        first = members[0][0]
        if aligned_start and first % PAGE:
            raise WrongMemoryError(
                f"host memory at {first:#x} does not start on a page boundary: the NPU plugin imports host memory "
                f"only page-aligned ({_ZE_SOURCE}: 'not aligned to standard page size'), and importing the page "
                f"around it would take in another object's bytes; allocate the tensor page-aligned, or pass "
                f"allow_copy=True to copy it")
        imp = ctx.host_imports.acquire(start, end, [planes[m[3]] for m in members])
        for addr, _, shape, i in members:
            t = planes[i]
            n = _host_tensor(imp, addr, shape, t.info.dtype, ctx, t, t.writable, "CPU_VA")
            n._host_import = imp
            out[i] = n
    return out  # type: ignore[return-value]


def _host_tensor(owner: Any, addr: int, shape: tuple[int, ...], dtype: np.dtype, ctx: NPUContext, parent: Any,
                 writable: bool, mem_type: str) -> NPUTensor:
    """An ov.Tensor over ``addr`` (memory of the plugin's Level Zero context); the array keeps ``owner`` alive."""
    from .openvino import ov_module

    info = TensorInfo(shape, dtype)
    iface = {"version": 3, "shape": shape, "typestr": info.dtype.str, "descr": info.dtype.descr,
             "data": (addr, False), "strides": None}
    arr = np.asarray(_ArrayExport(iface, owner))  # OpenVINO wants writeable memory; it only reads inputs
    native = ov_module().Tensor(arr, shared_memory=True)
    return NPUTensor(native, info, mem_type=mem_type, mem_handle=addr, context=ctx, parent=parent, writable=writable)


# ---- doctor ---------------------------------------------------------------------------------------------
def _detect() -> str | None:
    return None if glob.glob("/dev/accel/accel*") else "no /dev/accel node (no NPU or no intel_vpu kernel driver)"


def _probe_npu() -> list[BackendReport]:
    npu = BackendReport(name=BACKEND.title, installed=True, tier=BACKEND.tier)
    accel = glob.glob("/dev/accel/accel*")
    npu.details["accel_nodes"] = accel
    why = BACKEND.missing_module()
    if why is not None:
        npu.installed = False
        npu.reason = f"OpenVINO {why}"
        return [npu]
    try:
        from .openvino import get_core

        core = get_core()
        if "NPU" in core.available_devices:
            npu.devices.append(str(core.get_property("NPU", "FULL_DEVICE_NAME")))
        else:
            why = "no /dev/accel node (no NPU or no intel_vpu kernel driver)" if not accel else "an accel node exists"
            try:
                core.get_default_context("NPU")
            except Exception as e:
                why += f"; OpenVINO: {str(e).strip().splitlines()[-1]}"
            npu.reason = f"OpenVINO lists no NPU: {why}"
    except Exception as e:
        npu.reason = f"OpenVINO failed: {e}"
    return [npu]


# NPU memory lives in the NPU plugin's Level Zero context, reached through OpenVINO: its probe asks OpenVINO.
BACKEND = register_backend(Backend("npu", "NPU (OpenVINO)", (MemoryType.NPU,), tier="C", extra="openvino",
                                   requires=("openvino",), probe=_probe_npu, detect=_detect, hardware="an Intel NPU",
                                   after=("level_zero",)))


def _probe() -> list[BackendReport]:
    """The Level Zero row and the NPU row, as doctor shows them (the NPU sits on Level Zero)."""
    from .level_zero import BACKEND as LEVEL_ZERO

    return LEVEL_ZERO.rows() + BACKEND.rows()
