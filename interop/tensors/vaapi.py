"""VA-API surfaces as interop tensors and frames.

A ``VAContext`` is an initialised VA display (a DRM render node, or any ``interop.native.libva.Display``). A
``VASurface`` owns one surface id on that display and destroys it once, at ``release()`` or garbage collection
(after closing any image still derived from it). A VA frame has one ``VATensor`` per plane, all over the same
surface; each carries ``display`` (the VADisplay as an int), ``surface_id`` (the id itself, never a pointer to it)
and ``plane_index``. Plane shapes are the CPU ones (Y (H, W), UV (H/2, W/2, 2) …): where the bytes are and how far
apart the rows are is the driver's business until the surface is exported (``vaapi_to_dma``) or mapped
(``vaapi_to_cpu``). ``Frame.crop`` works: a VA plane remembers its origin (``x``, ``y``) and mappers apply it.
"""

from __future__ import annotations

import glob
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._locks import FinalizerLock, UseCounted
from ..backends import Backend, BackendReport, register_backend
from ..context import Context, register_default_context
from ..errors import (
    BackendUnavailableError,
    InteropError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo, plane_infos, plane_layout
from ..tensor import Tensor, _ArrayExport
from ..types import AccessMode, FrameFormat, MemoryType
from ._fastpath import MappedView
from .cpu import view_bytes

log = logging.getLogger("interop")


def _va() -> Any:
    from ..native import libva

    return libva


# FrameFormat <-> VA fourcc (the formats whose plane layout interop and VA agree on)
_VA_FOURCC: dict[FrameFormat, str] = {
    FrameFormat.NV12: "NV12", FrameFormat.I420: "I420", FrameFormat.YV12: "YV12", FrameFormat.P010: "P010",
    FrameFormat.BGRX: "BGRX", FrameFormat.BGRA: "BGRA", FrameFormat.RGBX: "RGBX", FrameFormat.RGBA: "RGBA",
}


def va_fourcc_of(fmt: FrameFormat) -> int:
    """The VA fourcc of a frame format (UnsupportedFormatError for formats VA surfaces cannot hold)."""
    code = _VA_FOURCC.get(fmt)
    if code is None:
        raise UnsupportedFormatError(f"VA surfaces cannot hold {fmt.name}; VA formats: {', '.join(f.name for f in _VA_FOURCC)}")
    return _va().fourcc(code)


def format_of_va_fourcc(value: int) -> FrameFormat:
    for fmt, code in _VA_FOURCC.items():
        if _va().fourcc(code) == value:
            return fmt
    raise UnsupportedFormatError(f"VA fourcc {_va().fourcc_str(value)} has no interop FrameFormat; "
                                 f"supported: {', '.join(_VA_FOURCC.values())}")


# ---- context ------------------------------------------------------------------------------------------------


class VAContext(Context):
    """An initialised VA display. ``native`` is the ``interop.native.libva.Display``; ``device`` the render node.

    Two contexts are equal when they share the VADisplay: surface ids mean nothing on another display.
    """

    memory_type = MemoryType.VAAPI

    def __init__(self, display: Any = None, *, device: str | None = None):
        if display is None:
            display = _va().Display.open_drm(device or "/dev/dri/renderD128")
        elif not isinstance(display, _va().Display):
            raise UnsupportedTypeError(f"VAContext takes an interop.native.libva.Display, not {type(display).__name__}")
        super().__init__(native=display, device=display.device)

    @property
    def display(self) -> Any:
        """The libva Display (``.handle`` is the VADisplay pointer)."""
        return self._native

    @property
    def handle(self) -> int:
        return int(self._native.handle)

    def key(self) -> Any:
        return ("va", self._native.handle)

    def close(self) -> None:
        """vaTerminate now (surfaces still open on it are freed by the driver)."""
        self._native.close()

    # -- surfaces ----------------------------------------------------------------------------------------------
    def new_frame(self, format: FrameFormat, width: int, height: int, *, modifiers: list[int] | None = None) -> Frame:
        """A new surface as a VA frame (its content is undefined until written)."""
        sid = self.display.create_surfaces(width, height, va_fourcc_of(format), 1, modifiers=modifiers)[0]
        return va_frame(VASurface(self, sid, format, width, height))

    def frame_from_surface(self, surface_id: int, format: FrameFormat, width: int, height: int, *,
                           own: bool = False, keep: Any = None) -> Frame:
        """Wrap a surface made elsewhere (a decoder). ``own=True`` destroys it at release; ``keep`` is held alive."""
        return va_frame(VASurface(self, surface_id, format, width, height, own=own, keep=keep))


def _default_context() -> VAContext:
    nodes = sorted(glob.glob("/dev/dri/renderD*"))
    if not nodes:
        raise BackendUnavailableError("VA-API needs a DRM render node (/dev/dri/renderD*): none on this machine (tier C: "
                                      "a machine with an Intel/AMD GPU and its VA driver)", backend=BACKEND.name)
    reasons = []
    for node in nodes:
        try:
            return VAContext(device=node)
        except InteropError as e:
            reasons.append(f"{node}: {e}")
    raise BackendUnavailableError("no render node has a working VA driver: " + "; ".join(reasons), backend=BACKEND.name)


register_default_context(MemoryType.VAAPI, _default_context)


# ---- surfaces -----------------------------------------------------------------------------------------------


def _destroy(display: Any, surface_id: int, closers: list[Callable[[], None]], own: bool) -> None:
    # finaliser: must not refer to the VASurface. Images derived from the surface go first (drivers refuse, or
    # worse, free memory still mapped).
    while closers:
        try:
            closers.pop()()
        except Exception:
            log.exception("closing an image of VA surface %s failed", surface_id)
    if own and not display.closed:
        try:
            display.destroy_surfaces([surface_id])
        except InteropError:
            log.exception("vaDestroySurfaces(%s) failed", surface_id)


class VASurface(UseCounted):
    """One surface id on one display, destroyed once when ``own`` (the default): when its last user (plane tensor,
    CPU mapping and the numpy views of it) is gone, at ``release()``, or at garbage collection.

    ``keep`` holds whatever the surface's memory was imported from (a DMA frame) for as long as the surface lives.
    """

    def __init__(self, context: VAContext, surface_id: int, format: FrameFormat, width: int, height: int, *,
                 own: bool = True, keep: Any = None):
        if not isinstance(context, VAContext):
            raise UnsupportedTypeError(f"a VASurface belongs to a VAContext, not {type(context).__name__}")
        self.context = context
        self.surface_id = int(surface_id)
        self.format = format
        self.fourcc = va_fourcc_of(format)
        self.width = int(width)
        self.height = int(height)
        self.keep = keep
        self._lock = FinalizerLock()  # unuse() is a release hook, so often a finaliser: it never waits on itself
        self._users = 0
        self._closers: list[Callable[[], None]] = []
        self._fin = weakref.finalize(self, _destroy, context.display, self.surface_id, self._closers, own)

    # use() and unuse(): UseCounted's. A user is a plane tensor or a CPU mapping; the surface is destroyed when the
    # last one lets go (given back by an interrupted use(), it is as its caller found it: alive).
    def _usable(self) -> bool:
        return self._fin.alive

    def _refusal(self) -> Exception:
        return InvalidTensorError(f"VA surface {self.surface_id} was destroyed; map or decode the frame again")

    def _last_gone(self, freed: bool) -> Callable[[], None] | None:
        return self.release if freed else None  # after the lock is let go

    @property
    def display(self) -> Any:
        return self.context.display

    @property
    def released(self) -> bool:
        return not self._fin.alive

    def add_closer(self, closer: Callable[[], None]) -> None:
        """Run ``closer`` before the surface is destroyed (an image still derived from it)."""
        self._closers.append(closer)

    def remove_closer(self, closer: Callable[[], None]) -> None:
        try:
            self._closers.remove(closer)
        except ValueError:
            pass

    def sync(self) -> None:
        """vaSyncSurface: wait for decode/processing writing it."""
        self.display.sync_surface(self.surface_id)

    def release(self) -> None:
        """Destroy the surface now (closing images still derived from it). Tensors over it become unusable."""
        self._fin()

    def __repr__(self) -> str:
        return (f"<VASurface {self.surface_id} {self.format.name} {self.width}x{self.height} on {self.context.device}"
                f"{' released' if self.released else ''}>")


class VATensor(Tensor):
    """One plane of a VA surface. ``native`` is the VASurface. Not reachable from the CPU: map it to CPU or DMA.

    ``x``/``y``: the plane-element origin of a region (crop); mappers add ``y * pitch + x * element size``.
    """

    memory_type = MemoryType.VAAPI
    HANDLE_KEYS = {"va_surface_id": "surface_id", "va_display": "display", "plane_index": "plane_index"}

    def __init__(self, surface: VASurface, plane_index: int, info: TensorInfo, *, context: Context | None = None,
                 parent: Any = None, writable: bool = True, x: int = 0, y: int = 0):
        if not isinstance(surface, VASurface):
            raise InvalidTensorError(f"VATensor wraps a VASurface, not {type(surface).__name__}")
        surface.use()
        super().__init__(surface, info, context=context or surface.context, parent=parent, writable=writable)
        self.on_release(surface.unuse)
        self._plane_index = int(plane_index)
        self._x, self._y = int(x), int(y)

    @property
    def surface(self) -> VASurface:
        return self.native  # type: ignore[no-any-return]

    @property
    def surface_id(self) -> int:
        return self.surface.surface_id

    @property
    def display(self) -> int:
        """The VADisplay pointer as an int."""
        return int(self.surface.display.handle)

    @property
    def plane_index(self) -> int:
        self._check()
        return self._plane_index

    @property
    def x(self) -> int:
        self._check()
        return self._x

    @property
    def y(self) -> int:
        self._check()
        return self._y

    def origin_bytes(self, pitch: int) -> int:
        """Byte offset of this (region's) first element in a plane whose rows are ``pitch`` bytes apart."""
        elem = self._info.strides[1] if self._info.ndim > 1 else self._info.itemsize
        return self._y * pitch + self._x * elem

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        st = self._info.strides
        dy, rest = divmod(offset, st[0])
        dx = rest // st[1] if len(st) > 1 else 0
        return VATensor(self.surface, self._plane_index, info, context=self._context, parent=self,
                        writable=self._writable, x=self._x + dx, y=self._y + dy)

    def __repr__(self) -> str:
        if self.released:
            return "<VATensor released>"
        return (f"<VATensor surface={self.surface_id} plane={self._plane_index} shape={self._info.shape}"
                f"{f' origin=({self._x},{self._y})' if self._x or self._y else ''}>")


def va_frame(surface: VASurface, *, parent: Any = None, base: Frame | None = None, writable: bool = True) -> Frame:
    """A Frame of VATensors over every plane of ``surface`` (``base``: the frame it was mapped from, for metadata)."""
    infos = plane_infos(surface.format, surface.width, surface.height)
    planes = [VATensor(surface, i, inf, parent=parent, writable=writable) for i, inf in enumerate(infos)]
    if base is not None:
        return base.derive(planes, native=surface, context=surface.context)
    return Frame(planes, surface.format, surface.width, surface.height, context=surface.context, native=surface,
                 parent=parent)


def surface_of(obj: Tensor | Frame) -> VASurface:
    """The one surface under a VA tensor or frame (all planes of a VA frame share it)."""
    tensors = obj.tensors if isinstance(obj, Frame) else [obj]
    surfaces = {id(t.native): t.native for t in tensors if isinstance(t, VATensor)}
    if len(surfaces) != 1 or len(tensors) != sum(isinstance(t, VATensor) for t in tensors):
        raise InvalidTensorError("expected VA planes of one surface")
    return next(iter(surfaces.values()))


def check_planes(f: Frame) -> None:
    """A VA frame whose tensors are the surface's planes in order (no mixing, no missing plane)."""
    n = len(plane_layout(f.format))
    if [getattr(t, "plane_index", None) for t in f.tensors] != list(range(n)):
        raise InvalidTensorError(f"a VA {f.format.name} frame needs its {n} planes in order")


# ---- host mappings of a surface (vaDeriveImage + vaMapBuffer) ----------------------------------------------


class ImageMapping:
    """A derived, mapped VAImage of one surface. ``close()`` unmaps and destroys it once: when the array over the
    mapping (``base()``, which every plane view holds) is gone, or before the surface is destroyed."""

    def __init__(self, surface: Any):
        d = surface.display
        self.surface = surface  # the surface outlives its image, and the numpy views of it
        surface.use()
        weakref.finalize(self, surface.unuse)
        self._lock = threading.Lock()
        self._closed = False
        surface.sync()
        self.image = d.derive_image(surface.surface_id)
        try:
            if self.image.fourcc != surface.fourcc:
                raise InvalidTensorError(f"the driver derived a {self.image.fourcc:#x} image from a {surface.format.name} surface")
            self.address = d.map_buffer(self.image.buf)
        except BaseException:
            d.destroy_image(self.image.image_id)
            raise
        surface.add_closer(self.close)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        d = self.surface.display
        self.surface.remove_closer(self.close)
        if not d.closed:
            try:
                d.unmap_buffer(self.image.buf)
            finally:
                d.destroy_image(self.image.image_id)

    def base(self, writable: bool) -> np.ndarray:
        """The array over the whole mapping; the mapping is closed when it (and so every view of it) is gone."""
        iface = {"version": 3, "shape": (self.image.data_size,), "typestr": "|u1",
                 "data": (self.address, not writable), "strides": None}
        arr = np.asarray(_ArrayExport(iface, self))
        weakref.finalize(arr, self.close).atexit = False  # not at exit: libva may be torn down by then
        return arr


def map_to_host(f: Frame | Tensor, mode: AccessMode) -> list[Tensor]:
    """CPU tensors over the planes of a VA tensor or frame, in the surface's own memory (vaDeriveImage +
    vaMapBuffer; READ: read-only views). The image is unmapped when the last plane and every numpy view of it are
    gone, or before the surface is destroyed. What VAAPI -> CPU maps and CPU -> VAAPI writes its upload through."""
    surface = surface_of(f)
    tensors = f.tensors if isinstance(f, Frame) else [f]
    m = ImageMapping(surface)
    try:
        im = m.image
        if len(im.pitches) != len(plane_infos(surface.format, surface.width, surface.height)):
            raise InvalidTensorError(f"the driver derived {len(im.pitches)} planes from a {surface.format.name} surface")
        full = plane_infos(surface.format, surface.width, surface.height, list(im.pitches))
        base = m.base(mode.writes)
        out: list[Tensor] = []
        for t in tensors:
            assert isinstance(t, VATensor)
            i = t.plane_index
            info = TensorInfo(t.info.shape, t.info.dtype, full[i].strides)
            arr = view_bytes(base, im.offsets[i] + t.origin_bytes(im.pitches[i]), info, writable=mode.writes)
            # numpy views of the plane hold ``arr`` (so ``base``), not the tensor: release() drops the tensor's
            # reference, and the image is unmapped when the last plane and the last view are gone
            out.append(MappedView.of(arr, info, t, mode.writes, int(arr.__array_interface__["data"][0])))
        return out
    except BaseException:
        m.close()
        raise


# ---- doctor -------------------------------------------------------------------------------------------------

_probe_lock = threading.Lock()


def _detect() -> str | None:
    return None if glob.glob("/dev/dri/renderD*") else "no DRM render node (/dev/dri/renderD*) on this machine"


def _probe() -> list[BackendReport]:
    libva = _va()
    why = libva.available()
    if why:
        return [BackendReport(BACKEND.title, False, None, [], "C", why)]
    nodes = sorted(glob.glob("/dev/dri/renderD*"))
    if not nodes:
        return [BackendReport(BACKEND.title, True, None, [], "C", _detect())]
    devices, reasons, version = [], [], None
    with _probe_lock:
        for node in nodes:
            try:
                with libva.Display.open_drm(node) as d:
                    devices.append(f"{node}: {d.vendor}")
                    version = f"VA-API {d.version[0]}.{d.version[1]}"
            except InteropError as e:
                reasons.append(f"{node}: {e}")
    return [BackendReport(BACKEND.title, True, version, devices, "C", None if devices else "; ".join(reasons))]


# libva is loaded with ctypes (interop.native.libva): no Python module, no pip extra.
BACKEND = register_backend(Backend("vaapi", "VA-API", (MemoryType.VAAPI,), tier="C", probe=_probe, detect=_detect,
                                   hardware="a VA-API render node with a working driver"))

__all__ = ["VAContext", "VASurface", "VATensor", "va_frame", "surface_of", "va_fourcc_of", "format_of_va_fourcc",
           "map_to_host"]
