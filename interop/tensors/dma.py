"""DMA-BUF tensors and frames: per plane an fd, offset, pitch, buffer size, DRM fourcc and 64-bit DRM modifier.

Ownership: the library keeps its own dup of every fd it is given (``DMATensor.from_fd``) in a ``DMABuffer``, and
the fd lives exactly as long as that object: it is closed when the buffer is unreachable (its finaliser, at once by
reference counting: a released tensor drops its reference) or by ``DMABuffer.close()``. So releasing the last tensor
closes the fd at once, unless the caller holds the buffer (``t.native``), which then stays valid on its own, like
every other ``.native``. Pool buffers belong to their pool (see FramePool). The library never closes a caller's fd
(unless ``take_ownership=True``). Buffers we
allocate come from a dma-buf heap, else /dev/udmabuf, else a sealed memfd (``is_dmabuf`` False: same mmap and
fd-passing semantics, no cache maintenance, no device import).
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from .._locks import FinalizerLock, UseCounted
from ..backends import Backend, BackendReport, register_backend
from ..context import Context, register_default_context
from ..errors import (
    InteropError,
    InteropTimeoutError,
    InvalidTensorError,
    UnsupportedFormatError,
    UnsupportedTypeError,
)
from ..frame import Frame
from ..info import TensorInfo, packed_offsets, plane_infos, plane_layout
from ..native import dmabuf as nd
from ..tensor import Tensor
from ..types import FrameFormat, MemoryType

# ---- DRM fourcc <-> FrameFormat ------------------------------------------------------------------------


def fourcc(code: str) -> int:
    """DRM fourcc of a 4-character code, e.g. fourcc('NV12') == 0x3231564e."""
    if not isinstance(code, str):
        raise UnsupportedTypeError(f"fourcc() takes a code of 1 to 4 ASCII characters such as 'NV12', "
                                   f"not {type(code).__name__}")
    if not 1 <= len(code) <= 4 or not code.isascii():
        raise InvalidTensorError(f"a fourcc code is 1 to 4 ASCII characters such as 'NV12', got {code!r}")
    c = code.ljust(4).encode("ascii")
    return c[0] | c[1] << 8 | c[2] << 16 | c[3] << 24


def fourcc_str(value: int) -> str:
    value = nd.check_int(value, "a DRM fourcc", hi=0xFFFFFFFF)
    return bytes((value >> s) & 0xFF for s in (0, 8, 16, 24)).decode("ascii", "replace")


# DRM names packed formats by the bits of a little-endian word, so its RGB888 is B,G,R in memory.
DRM_FOURCC: dict[FrameFormat, int] = {
    FrameFormat.NV12: fourcc("NV12"), FrameFormat.NV21: fourcc("NV21"), FrameFormat.I420: fourcc("YU12"),
    FrameFormat.YV12: fourcc("YV12"), FrameFormat.P010: fourcc("P010"),
    FrameFormat.RGB: fourcc("BG24"), FrameFormat.BGR: fourcc("RG24"),
    FrameFormat.RGBX: fourcc("XB24"), FrameFormat.BGRX: fourcc("XR24"),
    FrameFormat.RGBA: fourcc("AB24"), FrameFormat.BGRA: fourcc("AR24"),
    FrameFormat.GRAY8: fourcc("R8"), FrameFormat.GRAY16: fourcc("R16"),
    FrameFormat.I422: fourcc("YU16"), FrameFormat.I444: fourcc("YU24"),
    # DRM's 3-plane LSB-aligned 16-bit YCbCr (Y, Cb, Cr): FFmpeg's yuv4xxp10le / yuv420p12le exactly
    FrameFormat.I420_10: fourcc("S010"), FrameFormat.I422_10: fourcc("S210"), FrameFormat.I444_10: fourcc("S410"),
    FrameFormat.I420_12: fourcc("S012"), FrameFormat.GRAY10: fourcc("R10"),
}
_FORMAT_OF_FOURCC = {v: k for k, v in DRM_FOURCC.items()}


def drm_fourcc_of(fmt: FrameFormat) -> int:
    fmt = _check_format(fmt)
    try:
        return DRM_FOURCC[fmt]
    except KeyError:
        raise UnsupportedFormatError(f"{fmt.name} has no DRM fourcc; use one of {', '.join(f.name for f in DRM_FOURCC)}") from None


def format_of_fourcc(value: int) -> FrameFormat:
    value = nd.check_int(value, "a DRM fourcc", hi=0xFFFFFFFF)
    try:
        return _FORMAT_OF_FOURCC[value]
    except KeyError:
        raise UnsupportedFormatError(f"DRM fourcc {fourcc_str(int(value))!r} ({int(value):#x}) has no interop FrameFormat; "
                                     f"supported: {', '.join(fourcc_str(v) for v in _FORMAT_OF_FOURCC)}") from None


def _check_format(fmt: object) -> FrameFormat:
    if not isinstance(fmt, FrameFormat):
        raise UnsupportedTypeError(f"format must be an interop.FrameFormat (e.g. FrameFormat.NV12), "
                                   f"not {type(fmt).__name__} {fmt!r}")
    return fmt


# frame sizes beyond this are refused up front: no video or DRM format goes near it, and the plane arithmetic of a
# width of 2**40 would ask the allocator for exabytes
MAX_DIMENSION = 1 << 16


def _check_dims(width: object, height: object) -> tuple[int, int]:
    return (nd.check_int(width, "width", lo=1, hi=MAX_DIMENSION),
            nd.check_int(height, "height", lo=1, hi=MAX_DIMENSION))


def _check_timeout(timeout: object) -> float | None:
    """A timeout argument: None (wait for ever) or a finite number of seconds >= 0 (0 polls)."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise InvalidTensorError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")
    t = float(timeout)
    if not t >= 0 or t == float("inf"):  # NaN fails every comparison; a NaN wait spins for ever
        raise InvalidTensorError(f"timeout must be a finite number of seconds >= 0 (0 polls, None waits for ever), "
                                 f"got {timeout!r}")
    return t


def _check_bool(value: object, what: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise InvalidTensorError(f"{what} must be True or False, not {type(value).__name__} {value!r}")
    return bool(value)


# ---- buffers -------------------------------------------------------------------------------------------

_live_lock = threading.Lock()
_live_buffers = {"open": 0}


def _close_fd(cell: list[Any], live: dict[str, int], on_close: list[Callable[[], None]] | None = None) -> None:
    """A DMABuffer's finaliser. ``cell``: [the fd it owns (-1 before the hand-off), whether it is counted in ``live``];
    a buffer whose construction was interrupted before it took the fd over closes nothing (its caller does)."""
    if sys.is_finalizing():  # interpreter teardown: daemon threads are frozen, maybe holding our locks; the OS frees it
        return
    fd, cell[0] = cell[0], -1
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass
    if cell[1]:
        cell[1] = False
        with _live_lock:
            live["open"] -= 1
    # The on_close callbacks run however the fd closes: close(), a closed pool, or the buffer becoming unreachable.
    callbacks = list(on_close or ())
    if on_close:
        on_close.clear()
    for cb in callbacks:
        try:
            cb()
        except Exception:
            import logging

            logging.getLogger("interop").exception("DMA buffer close callback failed")


def live_buffers() -> int:
    """How many DMA buffers (fds) the library holds open now: a leak check."""
    return _live_buffers["open"]


class DMABuffer(UseCounted):
    """One fd the library owns (a dup, a received fd, or an allocation) and what is known about it.

    Tensors over it count as users; when the last user is gone the ``on_free`` callbacks run (pool return, DONE to a
    producer). The fd is closed when this object is unreachable (its finaliser; tensors drop their reference at
    release, so with nobody else holding it that is at once), by ``close()``, or, after ``close_when_free()`` (a
    closed pool), when the last user is gone. Holding the object (``t.native``) keeps the fd and memory valid after
    every tensor over it is gone. Mappings are made once and cached.
    ``fd`` raises InvalidTensorError once the buffer is closed: a closed fd's number is soon reused by another file.
    ``device_local``: the export of a device allocation (usm_to_dma sets it), which the CPU never maps.
    """

    device_local: bool = False

    def __init__(self, fd: int, size: int, *, kind: str, is_dmabuf: bool, writable: bool = True,
                 sealed: bool = True, persistent: bool = False, handed: list[int] | None = None, at: int = 0):
        """Takes ``fd`` over. ``handed`` (with ``at``): ``fd`` is ``handed[at]``, and the buffer sets that entry to -1
        in the same step as it takes the fd over, a step no Ctrl-C can split: a caller that closes the entries still
        >= 0 when anything raises never closes an fd a buffer owns (nor leaves one nobody closes)."""
        if handed is not None and (type(handed) is not list or not -len(handed) <= at < len(handed)
                                   or handed[at] != fd):
            raise InvalidTensorError(f"handed[{at}] must be the fd {fd} the buffer takes over")
        self._fd = nd.check_fd(fd)
        self.size = nd.check_int(size, "size", lo=0)
        self.kind = kind
        self.is_dmabuf = bool(is_dmabuf)
        self.fd_writable = bool(writable)
        self.sealed = bool(sealed)
        self.persistent = persistent  # a pool's buffer (informational: every buffer lives as long as its object)
        self._close_on_free = False  # set by close_when_free(): the owner (a closed pool) gave it up
        # a FinalizerLock: unuse() runs from tensors' finalisers, which the collector may start inside mapping()
        self._lock = FinalizerLock()
        self._users = 0
        self._closed = False
        self._maps: dict[bool, nd.Mapping] = {}
        self._markers: dict[tuple[int, bool], tuple[nd.Mapping, memoryview]] = {}
        # (offset, info, writable) -> (mapping, numpy interface of that plane): the CPU views of received frames
        self.host_views: dict[tuple[int, TensorInfo, bool], tuple[nd.Mapping, dict[str, Any]]] = {}
        self._on_free: list[Callable[[], None]] = []
        self._on_close: list[Callable[[], None]] = []
        self.pool_slot: Any = None  # set by FramePool
        self.syncable: bool | None = None  # whether DMA_BUF_IOCTL_SYNC works on the fd (found on first access)
        # Ctrl-C is raised only as a function starts, at a backward jump or as a call of C code returns, so the
        # finaliser is registered first, owning nothing, and the fd changes hands after it in one step with none of
        # those in it: an interrupt anywhere leaves the fd either the caller's (still in ``handed``) or this buffer's
        # (closed by the finaliser), never both nor neither. The live count goes with the finaliser the same way.
        cell: list[Any] = [-1, False]
        self._fin = weakref.finalize(self, _close_fd, cell, _live_buffers, self._on_close)
        # Not at interpreter exit: another thread may still be inside a call on the fd; the OS closes it at exit.
        self._fin.atexit = False
        with _live_lock:
            cell[1] = True
            _live_buffers["open"] += 1
        if handed is None:
            handed, at = [self._fd], 0
        cell[0], handed[at] = handed[at], -1

    @classmethod
    def allocate(cls, size: int, *, kind: str | None = None, persistent: bool = False) -> DMABuffer:
        """A new buffer of ``size`` bytes (see native.dmabuf.allocate). Out of fds or memory: ResourceError."""
        size = nd.check_size(size)
        fd, got = nd.allocate(size, kind)
        real = got != "memfd"
        handed = [fd]  # set to -1 as the buffer takes the fd over (see __init__): closed here only before that
        try:
            return cls(fd, nd.page_align(size) if real else size, kind=got, is_dmabuf=real, persistent=persistent,
                       handed=handed)
        except BaseException:
            if handed[0] >= 0:
                os.close(handed[0])
            raise

    @property
    def fd(self) -> int:
        """Our fd. Raises InvalidTensorError once the buffer is closed (never a number another file may now hold)."""
        if self._closed:
            raise InvalidTensorError(f"this DMA buffer was closed (its fd {self._fd} is gone and the number may "
                                     f"belong to another file now): wrap the fd again or take a new frame")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def users(self) -> int:
        return self._users

    # use() and unuse(): UseCounted's
    def _usable(self) -> bool:
        return not self._closed

    def _refusal(self) -> Exception:
        return InvalidTensorError("this DMA buffer was closed; its fd is gone")

    def _last_gone(self, freed: bool) -> Callable[[], None]:
        # Given back by an interrupted use() with nobody else let go meanwhile, the buffer is as its caller found it
        # (a pool's acquire() puts its slot back itself): no on-free callback, but a close_when_free() that came
        # meanwhile closes it. Another user let go meanwhile (freed): the callbacks run, and acquire() finds its slot
        # already back.
        callbacks = list(self._on_free) if freed else []
        return lambda: self._freed(callbacks)  # outside the lock: the callbacks take the pool's or transport's locks

    def _freed(self, callbacks: list[Callable[[], None]]) -> None:
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a callback (pool return, transport DONE) must not break release()
                import logging

                logging.getLogger("interop").exception("DMA buffer free callback failed")
        # Otherwise the fd stays open while this object is reachable: whoever holds it (t.native) can still use it,
        # and with nobody holding it reference counting runs the finaliser (closing the fd) as the tensors let go.
        if self._close_on_free:
            self.close_when_free()  # checks for users again under the lock: one may have come since

    def close_when_free(self) -> None:
        """Close the fd now if no tensor uses the buffer, else when the last user lets go (FramePool.close()):
        a frame still held keeps a valid fd and mapping until it is released."""
        with self._lock:
            self._close_on_free = True
            if self._users > 0 or self._closed:
                return
            self._closed = True  # under the lock: no use() can slip in between the check and the close
            self._maps.clear()
            self._markers.clear()
            self.host_views.clear()
        self._fin()
        self._closed_now()

    def on_close(self, cb: Callable[[], None]) -> None:
        """Run ``cb`` once, when the fd is closed (a transport that told a consumer about this buffer forgets it)."""
        self._on_close.append(cb)

    def _closed_now(self) -> None:
        callbacks, self._on_close = self._on_close, []
        for cb in callbacks:
            try:
                cb()
            except Exception:
                import logging

                logging.getLogger("interop").exception("DMA buffer close callback failed")

    def on_free(self, cb: Callable[[], None]) -> None:
        """Run ``cb`` each time the last user lets go (pool return, DONE message to a producer)."""
        self._on_free.append(cb)

    def mapping(self, writable: bool) -> nd.Mapping:
        """A shared CPU mapping of the whole buffer, read-only or read-write, made once."""
        with self._lock:
            if self._closed:
                raise InvalidTensorError("this DMA buffer was closed; wrap the fd again")
            m = self._maps.get(writable)
            if m is None:
                if writable and not self.fd_writable:
                    raise InvalidTensorError("this dma-buf fd is read-only (O_RDONLY): map it with AccessMode.READ")
                m = nd.Mapping(self.fd, self.size, writable, owner=self)
                self._maps[writable] = m
            return m

    def marker_view(self, offset: int, writable: bool) -> tuple[nd.Mapping, memoryview]:
        """The commit marker at ``offset`` as its two words over the mapping (``marker_words``), made once per offset.
        The caller keeps the returned mapping referenced while it uses the view (a close() drops the cache)."""
        mv = self._markers.get((offset, writable))
        if mv is None:
            m = self.mapping(writable)
            if not 0 <= offset <= self.size - MARKER_SIZE:
                raise InvalidTensorError(f"commit marker offset {offset} is outside this buffer of {self.size} bytes")
            mv = self._markers[(offset, writable)] = (m, marker_words(m.address + offset))
        return mv

    def close(self) -> None:
        """Close our fd now. Mappings already handed out stay valid until their last view is gone."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._maps.clear()
            self._markers.clear()
            self.host_views.clear()
        self._fin()
        self._closed_now()

    def __repr__(self) -> str:
        if self._closed:
            return f"<DMABuffer size={self.size} {self.kind} closed>"
        return f"<DMABuffer fd={self._fd} size={self.size} {self.kind}>"


# ---- context -------------------------------------------------------------------------------------------


class DMAContext(Context):
    """DMA-BUF memory of this machine. ``device`` names the allocator used: 'dma_heap', 'udmabuf' or 'memfd'."""

    memory_type = MemoryType.DMA

    def __init__(self, kind: str | None = None):
        super().__init__(native=None, device=nd.check_kind(kind) or nd.available_kinds()[0])

    def key(self) -> Any:
        return "dma"

    @property
    def is_dmabuf(self) -> bool:
        """False where the allocator is the memfd stand-in."""
        return self.device != "memfd"

    def allocate(self, size: int) -> DMABuffer:
        return DMABuffer.allocate(size, kind=self.device)

    def alloc_tensor(self, info: TensorInfo) -> DMATensor:
        """A new buffer holding ``info`` (C-contiguous strides are kept as given)."""
        if type(info) is not TensorInfo:
            raise UnsupportedTypeError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
        buf = self.allocate(max(info.extent, 1))
        try:
            return DMATensor(buf, info, context=self)
        except BaseException:
            buf.close()
            raise

    def alloc_frame(self, format: FrameFormat, width: int, height: int, *, pitch_align: int = 64) -> Frame:
        """A new frame, all planes in one buffer one after another, rows padded to ``pitch_align`` bytes."""
        format = _check_format(format)
        width, height = _check_dims(width, height)
        pitches = aligned_pitches(format, width, pitch_align)
        offsets, total = packed_offsets(format, width, height, pitches)
        buf = self.allocate(total)
        try:
            return _frame_on(buf, format, width, height, offsets, pitches, self)
        except BaseException:
            if buf.users == 0:
                buf.close()
            raise


register_default_context(MemoryType.DMA, DMAContext)


def _default_ctx() -> DMAContext:
    return Context.default(MemoryType.DMA)  # type: ignore[return-value]


# ---- tensors -------------------------------------------------------------------------------------------


class DMATensor(Tensor):
    """A strided array inside a DMA buffer. ``native`` is our DMABuffer (there is no framework object).

    Handles: ``fd`` (ours; dup it to keep it beyond release), ``offset`` (bytes into the buffer), ``pitch``
    (= ``info.strides[0]``), ``size`` (of the whole buffer), ``drm_fourcc``, ``drm_modifier`` (64-bit),
    ``is_dmabuf`` (False for the memfd stand-in).
    """

    memory_type = MemoryType.DMA
    #: a received or pool frame's hold on its buffers (see BufferLease); None for every other DMA tensor
    _lease: BufferLease | None = None
    HANDLE_KEYS = {"dma_fd": "fd", "offset": "offset", "drm_modifier": "drm_modifier",
                   "drm_fourcc": "drm_fourcc", "size": "size", "pitch": "pitch"}

    def __init__(self, buffer: DMABuffer, info: TensorInfo, *, offset: int = 0, drm_fourcc: int = 0,
                 drm_modifier: int = nd.DRM_FORMAT_MOD_LINEAR, context: Context | None = None,
                 parent: Any = None, writable: bool = True):
        if not isinstance(buffer, DMABuffer):
            raise InvalidTensorError(f"DMATensor wraps a DMABuffer, not {type(buffer).__name__}; use DMATensor.from_fd(fd, info=...)")
        offset = nd.check_int(offset, "offset", lo=None, hi=None)
        _check_layout(buffer.size, offset, info, f"fd {buffer.fd}")
        drm_modifier = nd.check_int(drm_modifier, "drm_modifier (64 unsigned bits)", hi=nd.U64_MAX)
        drm_fourcc = nd.check_int(drm_fourcc, "drm_fourcc (32 unsigned bits)", hi=0xFFFFFFFF)
        buffer.use()
        super().__init__(buffer, info, context=context or _default_ctx(), parent=parent,
                         writable=writable and buffer.fd_writable)
        self._buffer = buffer
        self._offset = int(offset)
        self._drm_fourcc = int(drm_fourcc)
        self._drm_modifier = drm_modifier
        self.on_release(buffer.unuse)

    def release(self) -> None:
        """End this tensor's use of its buffer. The buffer's fd closes now unless someone still holds the buffer
        (another tensor, a CPU view, ``t.native`` kept by the caller) or its pool does."""
        super().release()
        # Drop our references so that reference counting closes a buffer nobody else holds (the buffer's own
        # finaliser); every accessor checks released first, so nothing reads these afterwards.
        self._native = None
        self.__dict__.pop("_buffer", None)
        lease = self.__dict__.pop("_lease", None)  # the last plane or view of a received frame to let go sends its DONE
        if lease is not None:
            lease.cut = True  # the frame is no longer whole: a sender's token check (FrameSender.send) sees it

    @classmethod
    def from_fd(cls, fd: int, *, info: TensorInfo, offset: int = 0, size: int | None = None, drm_fourcc: int = 0,
                drm_modifier: int = 0, take_ownership: bool = False, context: Context | None = None,
                parent: Any = None) -> DMATensor:
        """Wrap a caller's dma-buf (or memfd, or file) fd. The tensor keeps its own dup unless ``take_ownership``."""
        if type(info) is not TensorInfo:
            raise UnsupportedTypeError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
        offset = nd.check_int(offset, "offset", lo=None, hi=None)
        nd.check_int(drm_modifier, "drm_modifier (64 unsigned bits)", hi=nd.U64_MAX)
        nd.check_int(drm_fourcc, "drm_fourcc (32 unsigned bits)", hi=0xFFFFFFFF)
        buf = buffer_from_fd(fd, size=size, take_ownership=take_ownership)
        try:
            return cls(buf, info, offset=offset, drm_fourcc=drm_fourcc, drm_modifier=drm_modifier,
                       context=context, parent=parent)
        except BaseException:
            if buf.users == 0:
                buf.close()
            raise

    # -- handles ---------------------------------------------------------------------------------------
    # Every handle raises InvalidTensorError once the tensor is released or its buffer closed: a stale fd number
    # or offset handed to another API would act on whatever file or memory took its place.
    def _live_buffer(self) -> DMABuffer:
        self._check()
        b = self._buffer
        if b.closed:
            raise InvalidTensorError("the DMA buffer under this tensor was closed (DMABuffer.close()): its fd is "
                                     "gone; wrap the fd again or take a new frame")
        return b

    @property
    def buffer(self) -> DMABuffer:
        return self._live_buffer()

    @property
    def fd(self) -> int:
        return self._live_buffer().fd

    @property
    def offset(self) -> int:
        self._live_buffer()
        return self._offset

    @property
    def pitch(self) -> int:
        self._live_buffer()
        return self._info.strides[0] if self._info.ndim else 0

    @property
    def size(self) -> int:
        return self._live_buffer().size

    @property
    def drm_fourcc(self) -> int:
        self._live_buffer()
        return self._drm_fourcc

    @property
    def drm_modifier(self) -> int:
        self._live_buffer()
        return self._drm_modifier

    @property
    def is_dmabuf(self) -> bool:
        return self._live_buffer().is_dmabuf

    def _view(self, offset: int, info: TensorInfo) -> Tensor:
        return DMATensor(self._buffer, info, offset=self._offset + offset, drm_fourcc=self._drm_fourcc,
                         drm_modifier=self._drm_modifier, context=self._context, parent=self, writable=self._writable)

    def __repr__(self) -> str:
        if self.released:
            return "<DMATensor released>"
        b = self._buffer
        if b.closed:  # repr never raises, and never shows a number another file may hold now
            return f"<DMATensor shape={self._info.shape} buffer closed>"
        return (f"<DMATensor fd={b._fd} offset={self._offset} shape={self._info.shape} "
                f"pitch={self._info.strides[0] if self._info.ndim else 0} {'dma-buf' if b.is_dmabuf else b.kind}>")


def trusted_plane(buffer: DMABuffer, info: TensorInfo, offset: int, drm_fourcc: int, drm_modifier: int,
                  context: Context | None = None) -> DMATensor:
    """A DMATensor in the state ``DMATensor(buffer, info, ...)`` gives, for a layout already checked against this
    buffer (the transport's cached slots): no re-validation. The tensor counts as a user of the buffer."""
    from ._fastpath import trusted

    buffer.use()
    try:
        t = trusted(DMATensor, buffer, info, context or _default_ctx(), None, buffer.fd_writable)
        t._buffer = buffer
        t._offset = offset
        t._drm_fourcc = drm_fourcc
        t._drm_modifier = drm_modifier
        t.on_release(buffer.unuse)
    except BaseException:
        buffer.unuse()
        raise
    return t


class BufferLease:
    """A frame's one hold on its buffers (a received frame's, or a FramePool frame's), shared by its planes and by
    every CPU view mapped from them.

    It uses each buffer once (so a FORGET or a closed receiver keeps the fd while the frame is held) and, when the
    last plane or view lets go of it (release() drops a plane's reference; reference counting does the rest), ends
    those uses and calls ``done(token)`` once (the DONE to the producer; nothing for a pool frame, whose buffer's
    free callback gives it back to the pool). It is a plain object with ``__del__``: a
    frame costs no finaliser registration. Not during interpreter shutdown: a DONE then would let the producer
    reuse a buffer a daemon thread of ours may still be reading."""

    __slots__ = ("bufs", "done", "token", "cut")

    def __init__(self, bufs: Sequence[DMABuffer], done: Callable[[int], None], token: int):
        self.bufs: tuple[DMABuffer, ...] = ()
        self.done: Callable[[int], None] | None = None
        self.token = token
        self.cut = False  # a plane holding this lease was released
        used = []
        for b in bufs:
            b.use()  # raises for a closed buffer: the ones already used are let go by __del__
            used.append(b)
            self.bufs = tuple(used)
        self.done = done

    def __del__(self) -> None:
        try:
            if _finalizing():
                return
            for b in self.bufs:
                b.unuse()
            if self.done is not None:
                self.done(self.token)
        except Exception:  # __del__ must not raise (Python would print it); the library logs instead
            try:
                _log.exception("ending a frame's hold on its buffers failed")
            except Exception:
                pass


_finalizing = sys.is_finalizing
_log = logging.getLogger("interop")


def _no_done(token: int) -> None:
    """A pool frame's lease ends with nothing to send: the buffer's own free callback gives it back."""


def leased_planes(lease: BufferLease, specs: Sequence[tuple[int, TensorInfo, int, int]], fourcc: int,
                  context: Context) -> list[DMATensor]:
    """The planes of a received frame whose layout was checked against these buffers (the transport's cached
    slots): ``specs`` are (buffer index in ``lease.bufs``, info, offset, DRM modifier). Each plane holds the lease
    instead of a use of its own; no re-validation, no finaliser."""
    bufs = lease.bufs
    new = DMATensor._unchecked
    out = []
    for bi, info, offset, modifier in specs:
        b = bufs[bi]
        t = new(b, info, context, None, b.fd_writable)
        t._buffer = b
        t._offset = offset
        t._drm_fourcc = fourcc
        t._drm_modifier = modifier
        t._lease = lease
        out.append(t)
    return out


def _check_layout(size: int, offset: int, info: TensorInfo, what: str) -> None:
    if not isinstance(info, TensorInfo):
        raise InvalidTensorError(f"info must be an interop.TensorInfo, not {type(info).__name__}")
    if offset < 0:
        raise InvalidTensorError(f"offset {offset} is negative: give the plane's byte offset into the buffer")
    if offset >= size and info.size:
        raise InvalidTensorError(f"offset {offset} is beyond the end of {what} ({size} bytes): check the plane offset")
    if offset + info.extent > size:
        raise InvalidTensorError(f"{what} holds {size} bytes, too short for the layout {info} at offset {offset} "
                                 f"(needs {offset + info.extent}): check shape, pitch and offset, or the buffer's size")


def buffer_from_fd(fd: int, *, size: int | None = None, take_ownership: bool = False,
                   require_sealed: bool = False, handed: list[int] | None = None, at: int = 0) -> DMABuffer:
    """Check ``fd`` and make a DMABuffer over our own dup of it (or over ``fd`` itself with take_ownership).

    ``handed`` (with take_ownership): ``fd`` is ``handed[at]``, which the buffer sets to -1 as it takes the fd over
    (see DMABuffer): a caller that closes the entries left >= 0 on error closes the fd exactly when no buffer owns
    it, wherever a Ctrl-C lands (setting the entry itself after this returns leaves a gap an interrupt can hit)."""
    if handed is not None and not take_ownership:
        raise InvalidTensorError("handed= is for take_ownership=True (the fd whose ownership is handed over)")
    if size is not None:
        size = nd.check_int(size, "size", lo=None)
        if size <= 0:
            raise InvalidTensorError(f"size {size} must be positive: give the buffer's size in bytes (or None)")
    take_ownership = _check_bool(take_ownership, "take_ownership")
    require_sealed = _check_bool(require_sealed, "require_sealed")
    fi = nd.inspect_fd(fd)
    fd = nd.check_fd(fd)
    if fi.size is None and size is None:
        raise InvalidTensorError(f"the size of fd {fd} cannot be found: pass size=")
    if size is not None:
        if fi.size is not None and size > fi.size:
            raise InvalidTensorError(f"size={size} is larger than fd {fd} ({fi.kind}, {fi.size} bytes): "
                                     f"the buffer is too short; pass its real size")
    if require_sealed and not fi.sealed:
        raise InvalidTensorError(f"fd {fd} is an unsealed {fi.kind}: a peer could truncate it and crash this process "
                                 f"with SIGBUS; allocate shared frames with interop's allocator (sealed memfds or dma-bufs)")
    if take_ownership:  # on error the fd stays the caller's (``handed[at]`` still >= 0 then)
        return DMABuffer(fd, size if size is not None else int(fi.size or 0), kind=fi.kind, is_dmabuf=fi.is_dmabuf,
                         writable=fi.writable, sealed=fi.sealed, handed=handed, at=at)
    own = [nd.dup_fd(fd)]
    try:
        return DMABuffer(own[0], size if size is not None else int(fi.size or 0), kind=fi.kind,
                         is_dmabuf=fi.is_dmabuf, writable=fi.writable, sealed=fi.sealed, handed=own)
    except BaseException:
        if own[0] >= 0:  # the buffer did not take our dup over
            os.close(own[0])
        raise


# ---- frames --------------------------------------------------------------------------------------------


def aligned_pitches(format: FrameFormat, width: int, align: int = 64) -> list[int]:
    """Row pitches for ``format``: the first plane rounded up to ``align``; subsampled planar chroma at half
    that pitch (the layout FFmpeg's yuv420p/nv12 buffers use)."""
    format = _check_format(format)
    width = nd.check_int(width, "width", lo=1, hi=MAX_DIMENSION)
    align = nd.check_int(align, "pitch_align", lo=1, hi=1 << 20)
    specs = plane_layout(format)
    first = -(-specs[0].row_bytes(width) // align) * align
    out = []
    for s in specs:
        p = first if s.sub_x == 1 or s.channels else first // s.sub_x
        out.append(max(p, s.row_bytes(width)))
    return out


def _frame_on(buf: DMABuffer, format: FrameFormat, width: int, height: int, offsets: Sequence[int],
              pitches: Sequence[int], context: Context | None, drm_modifier: int = 0) -> Frame:
    infos = plane_infos(format, width, height, list(pitches))
    code = DRM_FOURCC.get(format, 0)
    planes = [DMATensor(buf, inf, offset=off, drm_fourcc=code, drm_modifier=drm_modifier, context=context)
              for inf, off in zip(infos, offsets)]
    return dma_frame(planes, format, width, height)


def dma_frame(planes: list[DMATensor], format: FrameFormat, width: int, height: int, **kw: Any) -> Frame:
    """A Frame of DMA planes (each plane its own fd/offset/pitch, or several planes of one buffer)."""
    if isinstance(planes, (str, bytes)) or not isinstance(planes, Sequence) or not planes \
            or not all(isinstance(p, DMATensor) for p in planes):
        raise InvalidTensorError("dma_frame() takes a list of DMATensor planes")
    format = _check_format(format)
    width, height = _check_dims(width, height)
    return Frame(planes, format, width, height, context=kw.pop("context", None) or planes[0].context, **kw)


def frame_from_fds(fds: int | Sequence[int], format: FrameFormat, width: int, height: int, *,
                   offsets: Sequence[int] | None = None, pitches: Sequence[int] | None = None,
                   size: int | None = None, drm_modifier: int = 0, take_ownership: bool = False) -> Frame:
    """A Frame over a caller's fd(s): one fd for all planes, or one per plane (V4L2/VA export style).

    ``pitches`` are bytes per row of each plane (default: tight rows); ``offsets`` default to planes one after
    another. Each distinct fd is dup'ed once (unless ``take_ownership``).
    """
    format = _check_format(format)
    width, height = _check_dims(width, height)
    specs = plane_layout(format)
    if isinstance(fds, (int, np.integer)) and not isinstance(fds, bool):
        fd_list = [nd.check_fd(fds, "fd")] * len(specs)
    else:
        if not isinstance(fds, Sequence) or isinstance(fds, (str, bytes)):
            raise InvalidTensorError(f"fds must be an fd (int) or one fd per plane, not {type(fds).__name__}")
        fd_list = [nd.check_fd(fd, f"fds[{i}]") for i, fd in enumerate(fds)]
    if len(fd_list) != len(specs):
        raise InvalidTensorError(f"a {format.name} frame has {len(specs)} planes; give one fd or {len(specs)} fds")
    offsets = _int_list(offsets, "offsets")
    pitches = _int_list(pitches, "pitches")
    if size is not None:
        size = nd.check_int(size, "size", lo=1)
    drm_modifier = nd.check_int(drm_modifier, "drm_modifier (64 unsigned bits)", hi=nd.U64_MAX)
    take_ownership = _check_bool(take_ownership, "take_ownership")
    if offsets is not None and len(offsets) != len(specs):
        raise InvalidTensorError(f"a {format.name} frame has {len(specs)} planes but {len(offsets)} offsets were given: "
                                 f"give one byte offset per plane (or none, for planes one after another)")
    if pitches is not None and len(pitches) != len(specs):
        raise InvalidTensorError(f"a {format.name} frame has {len(specs)} planes but {len(pitches)} pitches were given: "
                                 f"give one pitch (bytes per row) per plane")
    if pitches is not None:
        for spec, p in zip(specs, pitches):
            if p < spec.row_bytes(width):
                raise InvalidTensorError(f"pitch {p} of plane {spec.name} is smaller than its row of {spec.row_bytes(width)} "
                                         f"bytes for a {width}-wide {format.name} frame: pass the buffer's real pitch (stride)")
    infos = plane_infos(format, width, height, list(pitches) if pitches is not None else None)
    if offsets is None:
        if len(set(fd_list)) == 1:
            offsets, _ = packed_offsets(format, width, height, [i.strides[0] for i in infos])
        else:
            offsets = [0] * len(specs)
    bufs: dict[int, DMABuffer] = {}
    try:
        for fd in fd_list:
            if fd not in bufs:
                bufs[fd] = buffer_from_fd(fd, size=size, take_ownership=take_ownership)
        planes = [DMATensor(bufs[fd], inf, offset=off, drm_fourcc=DRM_FOURCC.get(format, 0), drm_modifier=drm_modifier)
                  for fd, inf, off in zip(fd_list, infos, offsets)]
    except BaseException:
        for b in bufs.values():
            if b.users == 0:
                b.close()
        raise
    return dma_frame(planes, format, width, height)


def _int_list(values: Sequence[int] | None, what: str) -> list[int] | None:
    """A per-plane list of non-negative integers (offsets, pitches), each checked: no float is truncated."""
    if values is None:
        return None
    if not isinstance(values, Sequence) or isinstance(values, (str, bytes)):
        if not isinstance(values, np.ndarray):
            raise InvalidTensorError(f"{what} must be a list of integers (one per plane), not {type(values).__name__}")
    return [nd.check_int(v, f"{what}[{i}]") for i, v in enumerate(values)]


def buffers_of(frame: Frame) -> list[DMABuffer]:
    """The distinct buffers a DMA frame's planes live in, in plane order."""
    out: list[DMABuffer] = []
    for t in frame.tensors:
        if not isinstance(t, DMATensor):
            raise InvalidTensorError(f"expected a DMA frame, got a {frame.memory_type.name} plane")
        if not any(b is t.buffer for b in out):
            out.append(t.buffer)
    return out


# ---- frame pool with commit markers ---------------------------------------------------------------------

MARKER_MAGIC = 0x544D4349  # 'ICMT'
MARKER_WRITING, MARKER_COMMITTED = 1, 2
MARKER_SIZE = 16  # u32 magic, u32 state, u64 sequence


def marker_words(address: int) -> memoryview:
    """The commit marker at ``address`` as its two 64-bit words (magic | state << 32, sequence); the address must be
    8-byte aligned, so that each word is read and written whole (see store_marker)."""
    if address % 8:
        raise InvalidTensorError(f"commit marker at {address:#x} is not 8-byte aligned")
    return memoryview((ctypes.c_ubyte * MARKER_SIZE).from_address(address)).cast("B").cast("Q")


def store_marker(words: memoryview, state: int, seq: int) -> None:
    """Write a commit marker through ``marker_words``, each word one aligned 8-byte store, so a reader in another
    process sees each word before or after, never part-written (struct.pack_into clears its bytes before it writes
    them: a consumer reading while the producer committed a frame again, as it does for each consumer it sends the
    frame to, saw a zero state and dropped a complete frame). COMMITTED: the sequence first, then the state, so a
    reader that sees COMMITTED sees that commit's sequence; WRITING: the state first, so the new sequence is never
    seen beside the old COMMITTED state.

    Assumes x86-64 (stores become visible in program order; aligned 8-byte stores are single-copy atomic) and
    CPython's memoryview, whose 'Q' item get/set is one 8-byte memcpy of an aligned item."""
    if state == MARKER_COMMITTED:
        words[1] = seq
        words[0] = MARKER_MAGIC | state << 32
    else:
        words[0] = MARKER_MAGIC | state << 32
        words[1] = seq


def load_marker(words: memoryview) -> tuple[int, int, int]:
    """(magic, state, sequence) of a commit marker (``marker_words``), the state word read first."""
    w = words[0]
    return w & 0xFFFFFFFF, w >> 32, words[1]


#: the first word of a committed marker
MARKER_COMMITTED_WORD = MARKER_MAGIC | MARKER_COMMITTED << 32


def read_marker(mapping_addr: int, offset: int) -> tuple[int, int, int]:
    """(magic, state, sequence) of the commit marker at ``offset`` in a mapping."""
    return load_marker(marker_words(mapping_addr + offset))


def write_marker(mapping_addr: int, offset: int, state: int, seq: int) -> None:
    store_marker(marker_words(mapping_addr + offset), state, seq)


class PoolClosedError(InteropError):
    """The FramePool was closed: no frame can be acquired from it any more."""


class PoolTimeoutError(InteropTimeoutError):
    """``FramePool.acquire(timeout=...)`` found no free buffer in time (also a TimeoutError)."""


class PoolSlot:
    """One buffer of a FramePool: its index, the sequence number of its latest frame, where its marker lives.

    The slot holds its pool weakly, and strongly only while a frame of it is out (so that a frame taken from a pool
    nobody else holds still goes back to it, and can still be committed): pool -> buffer -> slot -> pool never
    forms a cycle at rest, and a dropped pool's fds are closed by reference counting, not by the cyclic GC.
    """

    __slots__ = ("_pool_ref", "_held_pool", "index", "_buffer_ref", "seq", "marker_offset", "__weakref__")

    def __init__(self, pool: FramePool, index: int, buffer: DMABuffer):
        self._pool_ref = weakref.ref(pool)
        self._held_pool: FramePool | None = None
        self.index = index
        self._buffer_ref = weakref.ref(buffer)
        self.seq = 0
        self.marker_offset = pool.marker_offset

    @property
    def pool(self) -> FramePool:
        p = self._held_pool or self._pool_ref()
        if p is None:
            raise InvalidTensorError("the FramePool of this buffer is gone")
        return p

    @property
    def buffer(self) -> DMABuffer:
        b = self._buffer_ref()
        if b is None:
            raise InvalidTensorError("the buffer of this pool slot is gone")
        return b


class _GiveBack:
    """A pool buffer's on-free callback. Holds the slot weakly: a buffer must not keep its pool alive at rest."""

    __slots__ = ("_slot",)

    def __init__(self, slot: PoolSlot):
        self._slot = weakref.ref(slot)

    def __call__(self) -> None:
        slot = self._slot()
        if slot is None:
            return
        pool = slot._held_pool or slot._pool_ref()
        slot._held_pool = None  # no frame of this slot is out: drop the strong reference to the pool
        if pool is not None:
            pool._give_back(slot.index)


MAX_POOL_SIZE = 4096


class FramePool:
    """A fixed set of frame buffers for a producer. ``acquire()`` gives a free frame (marked WRITING); write it
    (``interop.map(frame, CPU, mode=WRITE)``), ``commit()`` it, send or use it, ``release()`` it. A buffer is free
    again when every user let go: the producer's frame, and each consumer it was sent to (until DONE or death).

    Each buffer ends with a 16-byte commit marker (magic, state, sequence) after the planes, so a consumer can tell a
    frame whose writer died mid-write (state WRITING) from a complete one.

    Lifetime: the pool's buffers do not refer back to it (only weakly), so dropping the pool closes the fds of its
    free buffers at once; buffers of frames still held close when those frames are released. ``close()`` does the
    same explicitly (see there).
    """

    def __init__(self, format: FrameFormat, width: int, height: int, count: int = 4, *, pitch_align: int = 64,
                 context: DMAContext | None = None):
        format = _check_format(format)
        width, height = _check_dims(width, height)
        count = nd.check_int(count, "count", lo=1, hi=MAX_POOL_SIZE)
        if context is not None and not isinstance(context, DMAContext):
            raise UnsupportedTypeError(f"context must be a DMAContext or None, not {type(context).__name__}")
        self.format, self.width, self.height = format, width, height
        self.context = context or _default_ctx()
        self.pitches = aligned_pitches(format, width, pitch_align)
        self.offsets, data = packed_offsets(format, width, height, self.pitches)
        self.marker_offset = -(-data // 64) * 64
        # every frame of the pool shares these (TensorInfo is immutable): a sender recognises a layout it sent
        # before by identity
        self.infos = tuple(plane_infos(format, width, height, list(self.pitches)))
        self.buffer_size = self.marker_offset + MARKER_SIZE
        for info, off in zip(self.infos, self.offsets):  # what DMATensor() checks, once: acquire() builds unchecked
            _check_layout(self.buffer_size, off, info, "a pool buffer")
        self._specs = tuple((0, info, off, nd.DRM_FORMAT_MOD_LINEAR) for info, off in zip(self.infos, self.offsets))
        self._fourcc = DRM_FOURCC.get(format, 0)
        # Stands for this layout by identity (one object per pool, never changed): every frame acquire() makes
        # carries it beside its planes (Frame._pool_token), and a sender that planned a send of one such frame
        # knows the layout of the next without reading it again (transport.FrameSender.send).
        self._layout_token = (format, width, height, self._specs, self._fourcc, self.marker_offset)
        self._cond = threading.Condition()
        self._free: list[int] = []
        self._closed = False
        self._buffers: list[DMABuffer] = []
        self.slots: list[PoolSlot] = []
        try:
            for i in range(count):
                buf = DMABuffer.allocate(self.buffer_size, kind=self.context.device, persistent=True)
                self._buffers.append(buf)
                slot = PoolSlot(self, i, buf)
                buf.pool_slot = slot
                buf.on_free(_GiveBack(slot))
                self.slots.append(slot)
                self._free.append(i)
                write_marker(buf.mapping(True).address, self.marker_offset, MARKER_COMMITTED, 0)
        except BaseException:
            # a pool that cannot be completed (EMFILE half way) gives back every fd it took: the next one may fit
            for b in self._buffers:
                b.close()
            self._buffers.clear()
            self.slots.clear()
            raise

    @property
    def size(self) -> int:
        return len(self.slots)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def free_count(self) -> int:
        with self._cond:
            return len(self._free)

    def _give_back(self, i: int) -> None:
        with self._cond:
            if i not in self._free and not self._closed:
                self._free.append(i)
            self._cond.notify()

    def acquire(self, timeout: float | None = None) -> Frame:
        """A free frame of the pool, marked WRITING. Waits up to ``timeout`` seconds (a finite number >= 0; 0 polls;
        None waits for ever): PoolTimeoutError (a TimeoutError) when none came free. PoolClosedError after close()."""
        timeout = _check_timeout(timeout)
        with self._cond:
            if self._closed:
                raise PoolClosedError("this FramePool was closed: make a new one")
            if not self._cond.wait_for(lambda: self._free or self._closed, timeout):
                raise PoolTimeoutError(f"no free buffer in the pool of {self.size} within {timeout} s: release frames "
                                       f"(consumers must release received frames) or make a larger pool")
            if self._closed:
                raise PoolClosedError("this FramePool was closed while waiting for a free buffer: make a new one")
            i = self._free.pop(0)
            slot = self.slots[i]
            buf = self._buffers[i]
            # The frame's hold on the buffer, taken before the pool's lock is let go: a close() from here on sees a
            # user and leaves the buffer (its mapping, which the marker is written through) open until the frame
            # ends. Its planes are built unchecked (the layout was checked when the pool was made) and share this
            # one hold, as a received frame's do: no use count and no finaliser per plane. The buffer is free again
            # when the last plane, and every CPU view mapped from them, is gone (and each consumer let go).
            try:
                lease = BufferLease((buf,), _no_done, i)
            except BaseException:  # the buffer itself was closed (DMABuffer.close() by its holder), or an interrupt
                # An interrupted use() whose count turned out the last (another user came and went meanwhile) already
                # gave the slot back through the buffer's on-free callback: in the list twice, it would be handed out
                # to two frames at once.
                if i not in self._free:
                    self._free.insert(0, i)
                self._cond.notify()
                raise
            slot.seq += 1
            seq = slot.seq
            slot._held_pool = self
        try:
            write_marker(buf.mapping(True).address, self.marker_offset, MARKER_WRITING, seq)
            planes = leased_planes(lease, self._specs, self._fourcc, self.context)
        except BaseException:
            del lease  # its end gives the buffer back now, not when the traceback goes
            raise
        f = Frame._unchecked(cast("list[Tensor]", planes), self.format, self.width, self.height, self.context, None,
                             {"pool_slot": i})
        # the planes as made (a tuple of their own): one a caller replaced or released no longer matches the token
        f._pool_token = (self._layout_token, tuple(planes))
        return f

    def commit(self, frame: Frame) -> int:
        """Mark ``frame``'s buffer complete (after the payload is written). Returns its sequence number."""
        slot = self.slot_of(frame)
        write_marker(self._buffers[slot.index].mapping(True).address, self.marker_offset, MARKER_COMMITTED, slot.seq)
        return slot.seq

    def slot_of(self, frame: Frame) -> PoolSlot:
        if not isinstance(frame, Frame):
            raise UnsupportedTypeError(f"expected a Frame of this FramePool, not {type(frame).__name__}")
        bufs = buffers_of(frame)
        slot = getattr(bufs[0], "pool_slot", None)
        if slot is None or slot._pool_ref() is not self:
            raise InvalidTensorError("this frame does not come from this FramePool")
        return slot

    def close(self) -> None:
        """Close the pool: no more acquire() (waiters get PoolClosedError). Free buffers' fds are closed now; a
        buffer whose frame is still held (or mapped, or sent to a consumer) keeps its fd and mapping until the
        last user releases it, then its fd is closed: a held frame's ``fd`` is never a closed or reused number."""
        with self._cond:
            self._closed = True
            self._free.clear()
            self._cond.notify_all()
        for b in self._buffers:
            b.close_when_free()

    def __enter__(self) -> FramePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def marker_of(buf: DMABuffer) -> tuple[int, int] | None:
    """(marker offset, sequence) of a pool buffer, or None for buffers without a commit marker."""
    slot = buf.pool_slot
    if slot is None:
        return None
    return slot.marker_offset, slot.seq


# ---- doctor --------------------------------------------------------------------------------------------


def _probe() -> list[BackendReport]:
    kinds = nd.available_kinds()
    real = [k for k in kinds if k != "memfd"]
    dev = [nd.HEAP_PATH] if "dma_heap" in kinds else []
    dev += [nd.UDMABUF_PATH] if "udmabuf" in kinds else []
    detail = {"allocator": kinds[0], "real_dmabuf": bool(real)}
    if real:
        return [BackendReport("DMA-BUF", True, None, dev, "A", None, detail)]
    return [BackendReport("DMA-BUF", True, None, ["memfd stand-in (sealed)"], "A", None,
                          {**detail, "note": "no /dev/dma_heap or /dev/udmabuf: sealed memfds stand in (is_dmabuf False)"})]


BACKEND = register_backend(Backend("dma", "DMA-BUF", (MemoryType.DMA,), tier="A", probe=_probe))

__all__ = ["DMAContext", "DMATensor", "DMABuffer", "FramePool", "PoolClosedError", "PoolTimeoutError", "dma_frame", "frame_from_fds", "buffer_from_fd",
           "buffers_of", "DRM_FOURCC", "drm_fourcc_of", "format_of_fourcc", "fourcc", "aligned_pitches",
           "live_buffers"]
