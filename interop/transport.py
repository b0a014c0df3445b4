"""Zero-copy frames across processes: DMA frames over a Unix socket (fds by SCM_RIGHTS, layout in a small header).

Protocol (SOCK_SEQPACKET, so a message arrives whole or not at all, with its fds):
- FRAME (producer -> consumer): header + one record per plane + the distinct buffer fds. The consumer rebuilds the
  frame zero-copy over the received fds (it owns them; they close when the frame is released).
- SLOTS (producer -> consumer): a FRAME whose buffers are named by slot references (index + generation). A buffer's
  fd goes with the first message that names it (the consumer keeps it, mapped, under that index and generation);
  later frames in the same buffer send the reference alone, so a hand-off costs no fd passing, no mmap and no
  re-validation of a layout already seen. A slot index reassigned to another buffer gets a higher generation.
- FORGET (producer -> consumer): the buffer under (index, generation) is gone on the producer's side; the consumer
  closes its fd (once no frame of it is held).
- DONE (consumer -> producer): the consumer released frame ``frame_id``; the producer's buffers return to its pool.
- REFUSED (consumer -> producer): the consumer did not install the buffer a SLOTS message announced under (index,
  generation) (an unsealed fd, fds cut off because it ran out of them, a bad message): the producer lets that slot go,
  so the next frame over the buffer sends its fd again. It comes before the refused frame's DONE. A producer of an
  earlier version ignores it as a message that is not a DONE (logged); a consumer of one never sends it.
A producer holds every buffer it sent until DONE or until the consumer is gone (EOF, reset): a consumer killed
mid-frame returns all its buffers to the producer's pool. Pool buffers carry a commit marker (state, sequence)
after the planes; the consumer checks it on receipt and drops (never delivers) a frame whose writer did not
finish (``torn`` counts them). A producer killed mid-write never sends; the consumer sees EOF (``recv`` -> None).
Memfds must be sealed against shrinking (``require_sealed``) so a peer cannot SIGBUS us by truncating them.

Everything a peer sends is untrusted: every field of a FRAME message (sizes, offsets, pitches, shapes, dtype,
plane and fd counts, the commit-marker offset, width/height against the planes) is checked before any of it is
used, and a bad message is a ProtocolError. A bad DONE or REFUSED message is logged and ignored.

Every call that can wait takes a timeout (None waits for ever) and raises TransportTimeoutError (an InteropError and a
TimeoutError) when it runs out; ``timeout=0`` polls. Releasing a received frame never blocks: see FrameReceiver.
"""

from __future__ import annotations

import array
import collections
import contextlib
import errno
import logging
import math
import os
import select
import socket
import stat
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from types import TracebackType
from typing import Any

import numpy as np

from .context import Context
from .errors import InteropError, InteropTimeoutError, InvalidTensorError, UnsupportedTypeError
from .frame import Frame
from .info import TensorInfo, contiguous_strides, plane_layout
from .tensors._fastpath import trusted_frame
from .tensors.dma import (
    DRM_FOURCC,
    MARKER_COMMITTED,
    MARKER_COMMITTED_WORD,
    MARKER_MAGIC,
    MARKER_SIZE,
    BufferLease,
    DMABuffer,
    DMATensor,
    buffer_from_fd,
    buffers_of,
    dma_frame,
    leased_planes,
    load_marker,
    read_marker,
    store_marker,
    write_marker,
)
from .types import ColorRange, ColorSpace, FrameFormat, MemoryType

log = logging.getLogger("interop")

MAGIC = b"IDMA"
VERSION = 1
MSG_FRAME, MSG_DONE, MSG_SLOTS, MSG_FORGET, MSG_REFUSED = 1, 2, 3, 4, 5
MAX_FDS = 8
MAX_SLOTS = 256  # slot indexes a consumer accepts: it keeps at most this many fds per producer
DEFAULT_SLOTS = 64  # slots a FrameSender uses (more buffers than that: the least recently sent is reassigned)
NO_MARKER = (1 << 64) - 1

_HEAD = struct.Struct("<4sHHQQQ")  # magic, version, type, frame_id, seq, marker_offset
_FRAME = struct.Struct("<8sIIIBBBBqqqB")  # format, w, h, fourcc, planes, fds, colorspace, range, pts, tb num, den, flags
_PLANE = struct.Struct("<BB4s2xQQQ4Q4Q")  # fd index, ndim, dtype, offset, buffer size, modifier, shape[4], strides[4]
_REF = struct.Struct("<IIQ")  # slot index, flags, generation: one per buffer of a SLOTS message, and a FORGET's body
REF_FD = 1  # the buffer's fd comes with this message (in the order of the references that have this flag)
FLAG_PTS, FLAG_TIME_BASE = 1, 2
# Wire codes are fixed numbers, never derived from the order in which the enums are declared: adding a member to
# ColorSpace must not change what a peer running the previous version reads.
_CS_CODE: dict[ColorSpace | None, int] = {None: 0, ColorSpace.BT601: 1, ColorSpace.BT709: 2, ColorSpace.BT2020: 3,
                                          ColorSpace.SRGB: 4}
_CR_CODE: dict[ColorRange | None, int] = {None: 0, ColorRange.LIMITED: 1, ColorRange.FULL: 2}
_CS_OF = {v: k for k, v in _CS_CODE.items()}
_CR_OF = {v: k for k, v in _CR_CODE.items()}
_RECV_BYTES = 4096  # larger than any valid FRAME message (MSG_TRUNC tells a longer one)
_CMSG_BYTES = socket.CMSG_SPACE(MAX_FDS * 4)


class PeerClosedError(InteropError, ConnectionError):
    """The process at the other end of the socket is gone (closed, crashed or killed), or never listened."""


class ProtocolError(InteropError, ValueError):
    """A message that is not a valid interop frame transport message: wrong magic/version, truncated, too many fds,
    or a field (size, offset, pitch, shape, dtype, plane count, commit-marker offset ...) out of range."""


class TransportTimeoutError(InteropTimeoutError):
    """A transport call (send, recv, wait_returned, accept, connect) ran out of its ``timeout``."""


class InvalidTimeoutError(InteropError, ValueError):
    """A timeout that is not a number of seconds >= 0 (NaN, negative)."""


def _deadline(timeout: object, what: str) -> float | None:
    """The monotonic deadline of ``timeout`` seconds from now (None: no deadline); refuses NaN, negatives, non-numbers."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.integer, np.floating)):
        raise UnsupportedTypeError(f"{what}: timeout must be a number of seconds or None, not {type(timeout).__name__}")
    t = float(timeout)
    if math.isnan(t) or t < 0:
        raise InvalidTimeoutError(f"{what}: timeout must be >= 0 seconds (0 polls, None waits for ever), got {timeout!r}")
    return None if math.isinf(t) else time.monotonic() + t


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


_FD_SETSIZE = 1024


def _ready(sock: socket.socket, events: int, timeout: float | None) -> bool:
    """Whether ``sock`` is ready for ``events`` (select.POLLIN or POLLOUT; or hung up) within ``timeout`` seconds
    (None: no limit). select() refuses an fd from FD_SETSIZE up (ValueError), which a process that keeps many
    buffers' fds soon has: such an fd waits in poll(). A closed socket raises ValueError either way."""
    fd = sock.fileno()
    # a day at most per wait: poll() refuses a timeout past 2**31 - 1 ms (24.8 days), select() past about 3e9 s
    while timeout is not None and timeout > _LONGEST_WAIT:
        if _ready(sock, events, _LONGEST_WAIT):
            return True
        timeout -= _LONGEST_WAIT
    if fd < _FD_SETSIZE:  # -1 (closed) included: select() raises ValueError for it
        rd, wr = ([sock], []) if events == select.POLLIN else ([], [sock])
        r, w, _ = select.select(rd, wr, [], timeout)
        return bool(r or w)
    p = select.poll()
    p.register(fd, events)
    return bool(p.poll(None if timeout is None else math.ceil(timeout * 1000)))


_LONGEST_WAIT = 86400.0


# ---- encoding ------------------------------------------------------------------------------------------


def _encode_frame(frame_id: int, frame: Frame, bufs: list[DMABuffer], seq: int, marker: int) -> bytes:
    planes = [t for t in frame.tensors if isinstance(t, DMATensor)]
    if len(bufs) > MAX_FDS:
        raise InvalidTensorError(f"a frame over {len(bufs)} buffers cannot be sent (at most {MAX_FDS})")
    if frame.colorspace not in _CS_CODE or frame.color_range not in _CR_CODE:
        raise InvalidTensorError(f"colorspace {frame.colorspace!r} / color range {frame.color_range!r} cannot be sent: "
                                 f"use an interop.ColorSpace / interop.ColorRange or None")
    pts = frame.pts if frame.pts is not None else 0
    tb = frame.time_base
    flags = (FLAG_PTS if frame.pts is not None else 0) | (FLAG_TIME_BASE if tb is not None else 0)
    out = [_HEAD.pack(MAGIC, VERSION, MSG_FRAME, frame_id, seq, marker),
           _FRAME.pack(frame.format.value.encode(), frame.width, frame.height, planes[0].drm_fourcc, len(planes),
                       len(bufs), _CS_CODE[frame.colorspace], _CR_CODE[frame.color_range], pts,
                       tb.numerator if tb else 0, tb.denominator if tb else 1, flags)]
    for t in planes:
        info = t.info
        if info.ndim > 4:
            raise InvalidTensorError(f"a plane of {info.ndim} dimensions cannot be sent (at most 4)")
        idx = next(i for i, b in enumerate(bufs) if b is t.buffer)
        shape = list(info.shape) + [0] * (4 - info.ndim)
        strides = list(info.strides) + [0] * (4 - info.ndim)
        out.append(_PLANE.pack(idx, info.ndim, info.dtype.str.encode(), t.offset, t.size, t.drm_modifier,
                               *shape, *strides))
    return b"".join(out)


def _encode_slots(frame_id: int, frame: Frame, bufs: list[DMABuffer], seq: int, marker: int,
                  refs: list[tuple[int, int, int]]) -> bytes:
    """A SLOTS message: the FRAME message's header and planes, then one (index, flags, generation) per buffer."""
    body = bytearray(_encode_frame(frame_id, frame, bufs, seq, marker))
    struct.pack_into("<H", body, 6, MSG_SLOTS)
    return bytes(body) + b"".join(_REF.pack(*r) for r in refs)


_TEMPLATES_MAX = 256


def _slots_template(frame: Frame, bufs: list[DMABuffer], marker: int, cache: dict[tuple, bytes]) -> bytes:
    """The SLOTS message of ``frame`` with frame id, sequence and pts zero, cached by everything else it encodes:
    a pool's frames repeat a few layouts, and encoding one is most of the cost of a send."""
    # the planes were checked live by buffers_of(): their private fields are read without the checks again
    planes: list[DMATensor] = frame.tensors  # type: ignore[assignment]
    many = len(bufs) > 1
    key = (frame.format, frame.width, frame.height, frame.colorspace, frame.color_range, frame.time_base,
           frame.pts is None, marker, tuple(b.size for b in bufs),
           tuple((t._info, t._offset, t._drm_modifier, t._drm_fourcc, t._buffer if many else None) for t in planes))
    msg = cache.get(key)
    if msg is None:
        body = bytearray(_encode_frame(1, frame, bufs, 0, marker))
        struct.pack_into("<H", body, 6, MSG_SLOTS)
        struct.pack_into("<QQ", body, _FID_AT, 0, 0)
        struct.pack_into("<q", body, _PTS_AT, 0)
        msg = bytes(body)
        if len(cache) >= _TEMPLATES_MAX:
            cache.clear()
        cache[key] = msg
    return msg


def _slots_message(frame: Frame, bufs: list[DMABuffer], marker: int, refs: tuple[tuple[int, int, int], ...],
                   cache: dict[tuple, bytes]) -> bytes:
    """The whole SLOTS message of ``frame`` over buffers the consumer holds (``refs``, no fd), frame id, sequence
    and pts zero: the template and its references, cached together."""
    planes: list[DMATensor] = frame._tensors  # type: ignore[assignment]
    # a TensorInfo is keyed by what its equality compares (shape, dtype, strides): hashing those runs no Python code
    layout: tuple[tuple[object, ...], ...]
    if len(bufs) > 1:
        layout = tuple([(t._info.shape, t._info.strides, t._info.dtype, t._offset, t._drm_modifier, t._drm_fourcc,
                         bufs.index(t._buffer)) for t in planes])
    else:
        layout = tuple([(t._info.shape, t._info.strides, t._info.dtype, t._offset, t._drm_modifier, t._drm_fourcc)
                        for t in planes])
    key = (frame._format, frame._width, frame._height, frame._colorspace, frame._color_range, frame._time_base,
           frame._pts is None, marker, refs, layout)
    msg = cache.get(key)
    if msg is None:
        msg = _slots_template(frame, bufs, marker, cache) + b"".join(_REF.pack(*r) for r in refs)
        if len(cache) >= _TEMPLATES_MAX:
            cache.clear()
        cache[key] = msg
    return msg


def _buffers(frame: Frame) -> list[DMABuffer]:
    """``buffers_of(frame)`` (the distinct live buffers of a DMA frame's planes, in plane order), without its
    per-plane property calls for the usual frame: every plane a live DMATensor over one open buffer. Anything else
    (a released frame or plane, a closed buffer, several buffers, another tensor class) takes buffers_of(), which
    raises what it raises."""
    if not frame._released:
        b = None
        for t in frame._tensors:
            if type(t) is not DMATensor or t._released:
                break
            if b is None:
                b = t._buffer
            elif t._buffer is not b:
                break
        else:
            if b is not None and not b._closed:
                return [b]
    return buffers_of(frame)


def _forget_message(index: int, generation: int) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, MSG_FORGET, 0, 0, NO_MARKER) + _REF.pack(index, 0, generation)


def _refused_message(index: int, generation: int) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, MSG_REFUSED, 0, 0, NO_MARKER) + _REF.pack(index, 0, generation)


def _parse_slot_note(msg: bytes, what: str) -> tuple[int, int]:
    """(index, generation) of a valid FORGET or REFUSED message (``what``, whose magic, version and type the caller
    matched); ProtocolError otherwise."""
    if len(msg) != _HEAD.size + _REF.size:
        raise ProtocolError(f"a {what} message of {len(msg)} bytes (it has {_HEAD.size + _REF.size})")
    _, _, _, fid, seq, marker = _HEAD.unpack_from(msg)
    index, flags, gen = _REF.unpack_from(msg, _HEAD.size)
    if fid or seq or marker != NO_MARKER or flags or index >= MAX_SLOTS or gen == 0:
        raise ProtocolError(f"a {what} message with bad fields (frame id {fid}, sequence {seq}, slot {index}, flags "
                            f"{flags}, generation {gen}; slots are < {MAX_SLOTS}, generations start at 1)")
    return int(index), int(gen)


def _parse_forget(msg: bytes) -> tuple[int, int]:
    """(index, generation) of a valid FORGET message; ProtocolError otherwise."""
    return _parse_slot_note(msg, "FORGET")


def _announced(msg: bytes) -> tuple[tuple[int, int], ...]:
    """(index, generation) of each install (a reference with REF_FD) a SLOTS message announces, read from the message
    alone: for one that was refused before or while it was checked (fds cut off, a bad field), whose installs the
    producer believes made. Nothing when the message does not even have a SLOTS message's shape."""
    if len(msg) < _HEAD.size + _FRAME.size or msg[:6] != _MAGIC_VER or msg[6:8] != _KIND_SLOTS:
        return ()
    n_planes, n_refs = msg[_HEAD.size + 20], msg[_HEAD.size + 21]  # _FRAME's plane and fd counts
    at = _HEAD.size + _FRAME.size + n_planes * _PLANE.size
    if len(msg) != at + n_refs * _REF.size:
        return ()
    refs = (_REF.unpack_from(msg, at + i * _REF.size) for i in range(n_refs))
    return tuple((int(i), int(g)) for i, f, g in refs if f & REF_FD and i < MAX_SLOTS and g)


def _done_message(frame_id: int) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, MSG_DONE, frame_id, 0, NO_MARKER)


# ---- decoding: every field checked before use ----------------------------------------------------------


@dataclass(frozen=True)
class _Plane:
    fd_index: int
    info: TensorInfo
    offset: int
    modifier: int


@dataclass(frozen=True)
class _Header:
    frame_id: int
    seq: int
    marker: int
    format: FrameFormat
    width: int
    height: int
    fourcc: int
    colorspace: ColorSpace | None
    color_range: ColorRange | None
    pts: int | None
    time_base: Fraction | None
    planes: tuple[_Plane, ...]
    sizes: tuple[int, ...]  # announced size of each buffer
    refs: tuple[tuple[int, int, int], ...] = ()  # SLOTS: (slot index, flags, generation) of each buffer


def _parse_frame(msg: bytes, n_fds: int) -> _Header:
    """Decode and check a FRAME or SLOTS message that came with ``n_fds`` fds. Raises ProtocolError; uses no fd.
    In a SLOTS message the planes' fd indexes name its buffer references, and ``sizes`` is per reference."""
    if len(msg) < _HEAD.size + _FRAME.size:
        raise ProtocolError(f"a message of {len(msg)} bytes is too short for a frame header")
    magic, ver, kind, fid, seq, marker = _HEAD.unpack_from(msg)
    if magic != MAGIC or ver != VERSION or kind not in (MSG_FRAME, MSG_SLOTS):
        raise ProtocolError(f"not an interop frame message (magic {magic!r}, version {ver}, type {kind}): "
                            f"is the peer an interop FrameSender of the same version?")
    if fid == 0:
        raise ProtocolError("a frame message has frame id 0 (ids start at 1)")
    fmt_b, w, h, code, n_planes, n_fd_hdr, cs, cr, pts, tb_n, tb_d, fl = _FRAME.unpack_from(msg, _HEAD.size)
    try:
        fmt = FrameFormat(fmt_b.rstrip(b"\0").decode("ascii"))
        specs = plane_layout(fmt)
    except (ValueError, UnicodeDecodeError, InteropError):
        raise ProtocolError(f"unknown frame format {fmt_b!r} in a frame message") from None
    if n_planes != len(specs):
        raise ProtocolError(f"a {fmt.name} frame has {len(specs)} planes; the message announces {n_planes}")
    n_refs = n_fd_hdr if kind == MSG_SLOTS else 0
    if len(msg) != _HEAD.size + _FRAME.size + n_planes * _PLANE.size + n_refs * _REF.size:
        raise ProtocolError(f"a frame message of {len(msg)} bytes does not hold {n_planes} plane records"
                            + (f" and {n_refs} slot references" if kind == MSG_SLOTS else ""))
    refs: tuple[tuple[int, int, int], ...] = ()
    if kind == MSG_SLOTS:
        at = _HEAD.size + _FRAME.size + n_planes * _PLANE.size
        refs = tuple(_REF.unpack_from(msg, at + i * _REF.size) for i in range(n_refs))
        for i, (index, rflags, gen) in enumerate(refs):
            if index >= MAX_SLOTS or rflags & ~REF_FD or gen == 0:
                raise ProtocolError(f"buffer reference {i} names slot {index}, flags {rflags:#x}, generation {gen}: "
                                    f"slots are < {MAX_SLOTS}, the only flag is {REF_FD}, generations start at 1")
        if len({r[0] for r in refs}) != len(refs):
            raise ProtocolError("a frame message names one slot twice")
        with_fd = sum(r[1] & REF_FD for r in refs)
        if with_fd != n_fds:
            raise ProtocolError(f"a frame message announces {with_fd} fds for its slot references; got {n_fds} fds")
        n_fds = n_fd_hdr  # from here on, "fds" are the message's buffers
    if n_fd_hdr != n_fds or not 1 <= n_fds <= min(MAX_FDS, n_planes):
        raise ProtocolError(f"frame header announces {n_fd_hdr} fds for {n_planes} planes; got {n_fds} fds")
    if not 0 < w < 1 << 31 or not 0 < h < 1 << 31:
        raise ProtocolError(f"frame size {w}x{h} in a frame message is not a positive size")
    if code not in (0, DRM_FOURCC.get(fmt, 0)):
        raise ProtocolError(f"DRM fourcc {code:#x} does not describe a {fmt.name} frame")
    if cs not in _CS_OF or cr not in _CR_OF:
        raise ProtocolError(f"unknown colorspace {cs} or color range {cr} in a frame message")
    if fl & ~(FLAG_PTS | FLAG_TIME_BASE):
        raise ProtocolError(f"unknown flags {fl:#x} in a frame message")
    if not fl & FLAG_PTS and pts != 0:
        raise ProtocolError("a frame message without a pts carries one")
    if fl & FLAG_TIME_BASE:
        if tb_d == 0:
            raise ProtocolError("a frame message has a time base with a zero denominator")
        if tb_n <= 0 or tb_d < 0:
            raise ProtocolError(f"a frame message has a time base {tb_n}/{tb_d} that is not positive")
    elif (tb_n, tb_d) != (0, 1):
        raise ProtocolError("a frame message without a time base carries one")
    records = [_PLANE.unpack_from(msg, _HEAD.size + _FRAME.size + i * _PLANE.size) for i in range(n_planes)]
    sizes: dict[int, int] = {}
    for i, (idx, _ndim, _dt, _off, size, _mod, *_rest) in enumerate(records):
        if idx >= n_fds:
            raise ProtocolError(f"plane {i} names fd {idx}; the message carries {n_fds}")
        if size == 0 or sizes.setdefault(idx, size) != size:
            raise ProtocolError(f"plane {i} announces a buffer size of {size} for fd {idx} (0, or not what another "
                                f"plane of the same fd says)")
    if len(sizes) != n_fds:
        raise ProtocolError(f"the message carries {n_fds} fds but its planes use {len(sizes)}")
    planes = []
    for i, ((idx, ndim, dt, off, size, mod, *rest), spec) in enumerate(zip(records, specs)):
        shape, strides = spec.shape(w, h), contiguous_strides(spec.shape(w, h), spec.dtype.itemsize)
        where = f"plane {i} ({spec.name}) of a {w}x{h} {fmt.name} frame"
        if dt != spec.dtype.str.encode().ljust(4, b"\0"):
            raise ProtocolError(f"{where} has dtype {dt!r}; the format needs {spec.dtype.str}")
        if ndim != len(shape) or tuple(rest[:ndim]) != shape or any(rest[ndim:4]):
            raise ProtocolError(f"{where} has shape {tuple(rest[:min(ndim, 4)])} (ndim {ndim}); the format needs {shape}: "
                                f"width/height and planes disagree")
        pitch, inner = rest[4], tuple(rest[5:4 + ndim])
        if inner != strides[1:] or any(rest[4 + ndim:]):
            raise ProtocolError(f"{where} has strides {tuple(rest[4:4 + ndim])}; only the row pitch may differ from {strides}")
        if not spec.row_bytes(w) <= pitch <= size or pitch % spec.dtype.itemsize:
            raise ProtocolError(f"{where} has a row pitch of {pitch} bytes: it must hold a row of {spec.row_bytes(w)} "
                                f"bytes, be a multiple of {spec.dtype.itemsize} and fit the buffer of {size}")
        extent = pitch * (shape[0] - 1) + spec.row_bytes(w)
        if off >= size or extent > size - off:
            raise ProtocolError(f"{where} at offset {off} spans {extent} bytes: beyond its buffer of {size} bytes")
        try:
            info = TensorInfo(shape, spec.dtype, (pitch, *inner))
        except InteropError as e:
            raise ProtocolError(f"{where} has a layout interop refuses: {e}") from None
        planes.append(_Plane(idx, info, off, mod))
    if marker != NO_MARKER:
        if n_fds != 1:
            raise ProtocolError("a frame message over several buffers carries a commit marker (pool frames have one buffer)")
        if marker % 8 or marker > sizes[0] - MARKER_SIZE:
            raise ProtocolError(f"commit marker offset {marker} is not inside the buffer of {sizes[0]} bytes "
                                f"(or not 8-byte aligned)")
        for p in planes:
            if marker < p.offset + p.info.extent and p.offset < marker + MARKER_SIZE:
                raise ProtocolError(f"commit marker offset {marker} overlaps a plane at offset {p.offset}")
    return _Header(fid, seq, marker, fmt, w, h, code, _CS_OF[cs], _CR_OF[cr], pts if fl & FLAG_PTS else None,
                   Fraction(tb_n, tb_d) if fl & FLAG_TIME_BASE else None, tuple(planes),
                   tuple(sizes[i] for i in range(n_fds)), refs)


# The parts of a SLOTS message that change from frame to frame: frame id, sequence, pts. Everything else (layout,
# references) repeats while a pool cycles, so a message without fds is parsed once per distinct rest and cached.
_FID_AT, _SEQ_AT, _PTS_AT = 8, 16, _HEAD.size + 24
_PARSED_MAX = 256


_FID_SEQ = struct.Struct("<QQ")
_PTS = struct.Struct("<q")
_PTS_MIN, _PTS_MAX = -(1 << 63), (1 << 63) - 1
_PER_FRAME = struct.Struct(f"<{_FID_AT}xQQ{_PTS_AT - _SEQ_AT - 8}xq")  # frame id, sequence, pts: one unpack
# plain ints: socket's flags are IntFlag members, and combining or testing those runs Python code on every message
_TRUNCATED = int(socket.MSG_CTRUNC | socket.MSG_TRUNC)
_MSG_TRUNC = int(socket.MSG_TRUNC)
_NOWAIT = int(socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
_CLOEXEC = int(socket.MSG_CMSG_CLOEXEC)
_CLOEXEC_NOWAIT = int(socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
_MAGIC_VER = MAGIC + struct.pack("<H", VERSION)
_KIND_SLOTS = struct.pack("<H", MSG_SLOTS)
_KIND_FORGET = struct.pack("<H", MSG_FORGET)
_KIND_REFUSED = struct.pack("<H", MSG_REFUSED)


def _check_pts(pts: int) -> None:
    """A pts the message carries: a signed 64-bit integer (FFmpeg's and GStreamer's own range)."""
    if not _PTS_MIN <= pts <= _PTS_MAX:
        raise InvalidTensorError(f"pts {pts} does not fit a signed 64-bit integer (the range FFmpeg and GStreamer "
                                 f"use): give a pts from -2**63 to 2**63 - 1, or None")


def _layout_key(msg: bytes) -> bytes:
    """Everything in a SLOTS message but frame id, sequence and pts (magic, version and type included: a message
    whose key was parsed and checked before is a valid SLOTS message of that layout whatever those three say)."""
    return msg[:_FID_AT] + msg[_SEQ_AT + 8:_PTS_AT] + msg[_PTS_AT + 8:]


def _per_frame(rec: _Received, msg: bytes) -> tuple[int, int, int | None]:
    """The frame id, sequence and pts of a SLOTS message whose layout ``rec`` was checked before: the only fields
    left to check."""
    fid, seq, pts = _PER_FRAME.unpack_from(msg)
    if fid == 0:
        raise ProtocolError("a frame message has frame id 0 (ids start at 1)")
    if rec.hdr.pts is None:
        if pts != 0:
            raise ProtocolError("a frame message without a pts carries one")
        return fid, seq, None
    return fid, seq, pts


def _parse_done(msg: bytes) -> int | None:
    """The frame id of a valid DONE message, else None."""
    if len(msg) != _HEAD.size:
        return None
    magic, ver, kind, fid, seq, marker = _HEAD.unpack(msg)
    if magic != MAGIC or ver != VERSION or kind != MSG_DONE or seq != 0 or marker != NO_MARKER or fid == 0:
        return None
    return int(fid)


def seqpacket_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of SOCK_SEQPACKET Unix sockets (for a producer and a consumer; pass one to a child)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


# ---- producer side -------------------------------------------------------------------------------------


def _frame_id_of(msg: bytes) -> int:
    """The frame id of a message whose header reads as a FRAME message, else 0 (nothing to answer)."""
    if len(msg) < _HEAD.size:
        return 0
    magic, ver, kind, fid, _, _ = _HEAD.unpack_from(msg)
    return int(fid) if (magic, ver) == (MAGIC, VERSION) and kind in (MSG_FRAME, MSG_SLOTS) else 0


def _take_off(ref: weakref.ref[DMABuffer] | None, cb: Callable[..., None] | None) -> None:
    """Remove the close callback ``cb`` from the buffer ``ref`` names, if both are still there."""
    b = None if ref is None or cb is None else ref()
    if b is not None:
        try:
            b._on_close.remove(cb)  # type: ignore[arg-type]
        except ValueError:  # closed since: its callbacks ran
            pass


class _SlotAssigner:
    """The producer's half of the slot table: the buffer each slot index names, under which generation, and whether
    the consumer has its fd. Used under FrameSender._send_lock only (the forget callbacks merely queue)."""

    def __init__(self, size: int):
        self.size = size
        self._buf: list[weakref.ref[DMABuffer] | None] = [None] * size
        self._gen = [0] * size
        # the last generation a try announced for each slot, sent or not: a generation is never announced twice, so a
        # close callback left by a try that sent nothing can never name a slot that holds another buffer since
        self._staged = [0] * size
        self._used = [0] * size  # when each slot was last named (least recently used is reassigned first)
        self._tick = 0
        # id(buffer) -> slot; an entry counts only while that slot's weak reference still gives the same buffer
        # (an id is reused once its object is gone), so stale entries are harmless and dropped on reassignment
        self._index: dict[int, int] = {}
        self._ids = [0] * size
        # the close callback each slot's buffer carries for this sender, and those of the buffers the last try's new
        # slots displace: retire() takes them off those buffers once the try committed (see retire)
        self._cbs: list[Callable[..., None] | None] = [None] * size
        self._displaced: list[tuple[int, weakref.ref[DMABuffer] | None, Callable[..., None] | None]] = []

    def _holds(self, i: int) -> DMABuffer | None:
        r = self._buf[i]
        b = r() if r is not None else None
        return b if b is not None and not b.closed else None

    def refs(self, bufs: list[DMABuffer], forgotten: Callable[[int, int], None]
             ) -> tuple[list[tuple[int, int, int]], list[int], Callable[[], None], Callable[[], None]]:
        """(references, fds to attach, commit, abandon): ``commit()`` once the message went out records the new
        slots; ``abandon()`` when it did not go out takes back the close callbacks made for them."""
        refs: list[tuple[int, int, int]] = []
        fds: list[int] = []
        fresh: list[tuple[int, int, DMABuffer]] = []
        taken: set[int] = set()
        self._displaced = []
        for b in bufs:
            i = self._index.get(id(b))
            if i is not None and self._holds(i) is b:
                refs.append((i, 0, self._gen[i]))
            else:
                i = self._pick(taken)
                fds.append(b.fd)  # a closed buffer raises here: nothing is announced
                gen = self._staged[i] = max(self._staged[i], self._gen[i]) + 1
                refs.append((i, REF_FD, gen))
                fresh.append((i, gen, b))
            taken.add(i)
            self._tick += 1
            self._used[i] = self._tick
        weak_cb = weakref.WeakMethod(forgotten)  # type: ignore[arg-type]
        # Everything that needs a call is made now, before the message goes out; commit() after it is plain stores,
        # so a Ctrl-C (raised only at a call boundary or a loop's back edge) cannot stop it half way through one
        # slot. The callbacks are registered now too: one left by a try that sent nothing queues a FORGET that
        # _flush_forgets drops (still() is False: that generation is never committed, nor announced again).
        staged: list[tuple[int, int, weakref.ref[DMABuffer], int, Callable[..., None]]] = []
        registered: list[tuple[DMABuffer, Callable[..., None]]] = []
        displaced = []
        for i, gen, b in fresh:
            def gone(*_: object, i: int = i, gen: int = gen) -> None:
                cb = weak_cb()
                if cb is not None:
                    cb(i, gen)

            b.on_close(gone)
            registered.append((b, gone))
            staged.append((i, gen, weakref.ref(b, gone), id(b), gone))
            displaced.append((i, self._buf[i], self._cbs[i]))
        self._displaced = displaced

        def abandon() -> None:  # a try that sent nothing (the socket full): no callback left per try
            for b, gone in registered:
                with contextlib.suppress(ValueError):
                    b._on_close.remove(gone)

        def commit() -> None:  # idempotent: may run again after an interrupt at its loop's back edge
            index, ids, cbs = self._index, self._ids, self._cbs
            for i, gen, ref, bid, gone in staged:
                self._buf[i] = ref
                self._gen[i] = gen
                cbs[i] = gone
                old = ids[i]
                if old in index and index[old] == i:
                    del index[old]
                ids[i] = bid
                index[bid] = i
        return refs, fds, commit, abandon

    def retire(self) -> None:
        """After a try that committed: take the close callbacks of the buffers its new slots displaced off those
        buffers. Each announcement of a buffer adds one; a buffer reassigned to a slot again and again (more buffers
        than slots) gathered one per frame for as long as it lived. A displaced callback only ever queued a FORGET
        that _flush_forgets drops (the slot names another generation), so one left by an interrupt is harmless."""
        displaced, self._displaced = self._displaced, []
        for i, ref, cb in displaced:
            if self._cbs[i] is not cb:  # committed: slot i names another buffer now
                _take_off(ref, cb)

    def detach(self) -> None:
        """Take this sender's close callbacks off the buffers its slots name (FrameSender.close(): a pool that
        outlives its consumers gathered one per buffer for every consumer it ever had)."""
        for i in range(self.size):
            _take_off(self._buf[i], self._cbs[i])

    def known(self, bufs: list[DMABuffer]) -> tuple[tuple[int, int, int], ...] | None:
        """The references of ``bufs`` when the consumer holds every one of them (no fd to send), else None."""
        refs = []
        for b in bufs:
            i = self._index.get(id(b))
            if i is None:
                return None
            r = self._buf[i]
            if r is None or r() is not b or b._closed:
                return None
            refs.append((i, 0, self._gen[i]))
        tick = self._tick
        for i, _, _ in refs:
            tick += 1
            self._used[i] = tick
        self._tick = tick
        return tuple(refs)

    def _pick(self, taken: set[int]) -> int:
        free = [i for i in range(self.size) if i not in taken and self._holds(i) is None]
        if free:
            return free[0]
        return min((i for i in range(self.size) if i not in taken), key=self._used.__getitem__)

    def still(self, i: int, gen: int) -> bool:
        """Whether slot ``i`` still names the buffer it had under ``gen``."""
        return self._gen[i] == gen and self._buf[i] is not None

    def release(self, i: int, gen: int) -> None:
        if self._gen[i] == gen:
            self._buf[i] = None

    def refused(self, i: int, gen: int) -> bool:
        """The consumer did not install slot ``i`` under ``gen`` (its REFUSED message, untrusted: any index and
        generation). If the slot still names that announcement's buffer it lets the buffer go (its close callback
        taken off: the buffer lives on), so the next frame over it gets a slot anew, fd and all, under a newer
        generation. False when there is nothing to let go (another slot's index, a generation since replaced)."""
        if not 0 <= i < self.size or self._gen[i] != gen or self._buf[i] is None:
            return False
        _take_off(self._buf[i], self._cbs[i])
        self._buf[i] = None
        self._cbs[i] = None
        return True


class _SendPlan:
    """What FrameSender.send() checks a frame against, and the message it sends for it: the layout of the last frame
    sent from one buffer (format, size, colour, time base, whether it has a pts, commit-marker offset, each plane's
    info, offset, modifier and fourcc), the slot naming that buffer (its weak reference in the slot table: a slot
    reassigned or let go holds another), and that frame's SLOTS message, frame id, sequence and pts left to write.
    ``layout``: the pool's layout token when that frame was a FramePool frame as acquire() made it (its layout is the
    pool's), else None; ``slot``: the buffer's PoolSlot (None outside a pool); ``words``: its commit marker."""

    __slots__ = ("ref", "index", "gen", "n", "planes", "format", "width", "height", "colorspace", "color_range",
                 "time_base", "no_pts", "marker_at", "msg", "mark", "words", "layout", "slot")

    def __init__(self, ref: weakref.ref[DMABuffer], index: int, gen: int,
                 planes: tuple[tuple[TensorInfo, int, int, int], ...], frame: Frame, marker_at: int, msg: bytearray,
                 mark: tuple[object, memoryview] | None, layout: object, slot: Any):
        self.ref, self.index, self.gen = ref, index, gen
        self.n, self.planes = len(planes), planes
        self.format, self.width, self.height = frame._format, frame._width, frame._height
        self.colorspace, self.color_range, self.time_base = frame._colorspace, frame._color_range, frame._time_base
        self.no_pts = frame._pts is None
        self.marker_at = marker_at
        self.msg = msg
        self.mark = mark  # (mapping, view) of the commit marker: the mapping stays while the view is written
        self.words = None if mark is None else mark[1]
        self.layout = layout
        self.slot = slot


def _intact(frame: Frame) -> tuple[object, BufferLease] | None:
    """(layout token, lease) of a FramePool frame whose planes are still the live ones acquire() made, else None."""
    tok = frame._pool_token
    if tok is None:
        return None
    lease = tok[1][0]._lease  # type: ignore[attr-defined]
    if lease is None or lease.cut or tuple(frame._tensors) != tok[1]:
        return None
    return tok[0], lease


# Ctrl-C inside FrameSender.send(). Python raises a signal's exception (KeyboardInterrupt) at the next call
# boundary: as any call returns or a function starts, so also as the system call that sent a message returns, with the
# message out. Whether a frame went out is therefore kept as state, never inferred from where an exception came from:
# ``out[0]`` is set just before the send call (no call between them) and cleared by the errors that mean nothing was
# sent (a full socket, a closed or broken one); a non-blocking send on the sender's blocking socket never waits, so a
# signal never interrupts one before it sent. A frame out stays held for the consumer whatever is raised after; one
# not out gives its buffers back. What must follow a message that went out (the slot table's commit) is completed
# even when Ctrl-C lands inside it.


def _send_once(send: Callable[..., object], args: tuple[object, ...], out: list[bool]) -> bool:
    """``send(*args)`` on FrameSender's socket (MSG_DONTWAIT): True once the message is out, False when the socket was
    full (nothing sent). ``out[0]`` says whether it is (or may be) out, set before the call, so that an interrupt
    raised as the call returns finds it set (see "Ctrl-C inside FrameSender.send()"). The planned send writes the same
    steps out inline: it is the per-frame path."""
    out[0] = True
    try:
        send(*args)
    except BlockingIOError:
        out[0] = False
        return False
    except ValueError:  # our socket was closed under us (close() from another thread)
        out[0] = False
        raise PeerClosedError("this FrameSender was closed") from None
    except OSError:
        out[0] = False
        raise
    return True


class FrameSender:
    """Sends DMA frames to one consumer over a connected SOCK_SEQPACKET socket (this object owns the socket).

    Every buffer sent is held (kept out of its pool) until the consumer's DONE, or until the consumer is gone:
    a background thread reads DONE messages and notices a dead consumer, then returns everything it held.
    A DONE message that is not valid (or names a frame not in flight) is logged and ignored; fds a consumer
    attaches to one are closed. A consumer's REFUSED message (it did not install a buffer's fd) makes the next frame
    over that buffer send the fd again (``refused`` counts them); one that names no slot's current generation changes
    nothing.

    ``slots`` (default DEFAULT_SLOTS, at most MAX_SLOTS): how many buffers the consumer keeps mapped between frames.
    A buffer sent once is named by its slot (index + generation) afterwards: no fd, no mmap, no layout check on the
    consumer's side. With more distinct buffers than slots the least recently sent buffer's slot is reassigned (its
    fd is sent again the next time). ``slots=0`` sends every buffer's fd with every frame (FRAME messages).
    """

    def __init__(self, sock: socket.socket, *, slots: int = DEFAULT_SLOTS):
        if not isinstance(sock, socket.socket) or sock.type != socket.SOCK_SEQPACKET or sock.family != socket.AF_UNIX:
            raise InvalidTensorError("FrameSender needs a connected AF_UNIX SOCK_SEQPACKET socket "
                                     "(interop.transport.seqpacket_pair() or FrameServer.accept())")
        if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or \
                not (slots == 0 or MAX_FDS <= slots <= MAX_SLOTS):
            raise InvalidTensorError(f"slots must be 0 (send fds with every frame) or an integer from {MAX_FDS} to "
                                     f"{MAX_SLOTS}, got {slots!r}")
        sock.setblocking(True)  # the reader thread blocks in recvmsg; sends never block (MSG_DONTWAIT + select)
        self._sock = sock
        self._lock = threading.Lock()  # guards the counters below; never held while waiting on the socket
        self._returned = threading.Condition(self._lock)
        # frame id -> what holds its buffers until DONE: the uses send() took, or a pool frame's own lease. Added
        # under _send_lock (with the id), taken out under _lock: each a single dict operation.
        self._in_flight: dict[int, list[DMABuffer] | BufferLease] = {}
        self._next_id = 1  # under _send_lock
        self._closed = threading.Event()
        self.sent = 0
        self.returned = 0
        self.bad_messages = 0  # messages from the consumer that were not valid DONEs or REFUSED messages
        # valid REFUSED messages: slot installs the consumer did not make (those buffers' fds go again with their next
        # frame; one naming a generation since replaced changes nothing)
        self.refused = 0
        self.fds_sent = 0  # buffer fds passed (once per buffer and slot with slots, once per buffer and frame without)
        self._slots = _SlotAssigner(int(slots))
        self._send_lock = threading.Lock()  # orders slot assignment with the message that announces it; never waits
        self._forgets: collections.deque[tuple[int, int]] = collections.deque()
        self._templates: dict[tuple, bytes] = {}
        self._gone = False  # mirrors _closed, read without a call on the planned path
        self._plans: dict[int, _SendPlan] = {}  # id(buffer) -> the plan of the last frame sent from it
        self._reader = threading.Thread(target=self._read_loop, name="interop-frame-sender", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """False once the consumer is gone or close() was called."""
        return not self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Frames sent and not yet released by the consumer (never waits on a send in progress)."""
        with self._lock:
            return len(self._in_flight)

    def send(self, frame: Frame, *, commit: bool = True, timeout: float | None = None) -> int:
        """Send a DMA frame; returns its id. Its buffers stay held until the consumer releases the frame.

        ``commit=True`` (the usual case: this process wrote the frame) marks a pool frame complete first;
        with ``commit=False`` the commit marker is left as the writer set it (a writer in another process that
        died mid-write leaves WRITING, and the consumer then drops the frame).
        ``timeout``: seconds to wait while the consumer's socket is full (it stopped reading); None waits for ever,
        0 sends only if that needs no wait. Raises TransportTimeoutError (a TimeoutError) when it runs out: nothing
        was sent and the buffers are not held. Raises PeerClosedError when the consumer is gone.

        A Ctrl-C (KeyboardInterrupt, or SystemExit from a signal handler) that Python raises as the message goes out
        is raised once the frame is sent and held for the consumer (its buffers come back with the consumer's release,
        never under its views); one raised earlier leaves nothing sent and the buffers free.
        """
        # A frame over one buffer in a layout this sender already sent from that buffer (a pool cycling its frames)
        # goes out as the plan's message with frame id, sequence and pts written in. A pool frame as acquire() made
        # it (its own planes, none released: its layout is the pool's) is matched to the plan by the pool's layout
        # token, and only what a caller may change on it (colour, pts present, time base) is compared; any other
        # frame is checked field by field (_fitting_plan). Anything that does not fit takes the general path.
        if type(frame) is Frame and timeout is None and frame._attr_src is None:
            pts = frame._pts
            if pts is not None and not _PTS_MIN <= pts <= _PTS_MAX:
                _check_pts(pts)
            tok = frame._pool_token
            plan = None
            if tok is not None:
                planes = tok[1]
                p0: DMATensor = planes[0]  # type: ignore[assignment]
                # the frame's own hold on its buffer, shared by its planes and views: None once the first plane was
                # released, cut once any plane was (a released frame's planes are)
                lease = p0._lease
                if lease is not None and not lease.cut and tuple(frame._tensors) == planes:
                    b = lease.bufs[0]  # not p0._buffer: a release() on another thread may have taken it meanwhile
                    plan = self._plans.get(id(b))
                    tb = frame._time_base
                    if plan is None or plan.layout is not tok[0] or b._closed or plan.ref() is not b \
                            or frame._colorspace is not plan.colorspace or frame._color_range is not plan.color_range \
                            or (frame._pts is None) is not plan.no_pts \
                            or (tb is not plan.time_base and tb != plan.time_base):
                        plan = None
                    else:  # held while the consumer has the frame: no use count to take, no lock
                        held: BufferLease | list[DMABuffer] = lease
            if plan is None and not frame._released:
                plan = self._fitting_plan(frame)
                if plan is not None:
                    got = getattr(frame._tensors[0], "_buffer", None)
                    if got is None:  # released on another thread since the check
                        raise InvalidTensorError("the frame was released while it was being sent")
                    b = got
                    b.use()  # refuses a buffer closed since the check
                    held = [b]
            if plan is not None:
                if self._gone:
                    if type(held) is list:
                        b.unuse()
                    raise PeerClosedError("the consumer is gone (its socket closed); accept a new consumer")
                slot = plan.slot
                seq = 0 if slot is None else slot.seq
                words = plan.words
                if commit and words is not None:  # what FramePool.commit() does (store_marker, COMMITTED order)
                    words[1] = seq
                    words[0] = MARKER_COMMITTED_WORD
                out = [False]  # the message is (or may be) out: see "Ctrl-C inside FrameSender.send()"
                fid = 0  # no id yet (ids start at 1)
                try:
                    # the frame id, its record in flight and its message, under one lock (a with statement: a Ctrl-C
                    # that lands as the lock is taken is raised inside it, so the lock is let go)
                    with self._send_lock:
                        fid = self._next_id
                        self._next_id = fid + 1
                        self._in_flight[fid] = held
                        i = plan.index
                        slots = self._slots
                        if not self._forgets and slots._buf[i] is plan.ref:  # the slot still names the buffer
                            body = plan.msg
                            _FID_SEQ.pack_into(body, _FID_AT, fid, seq)
                            if pts is not None:
                                _PTS.pack_into(body, _PTS_AT, pts)
                            out[0] = True
                            try:
                                self._sock.send(body, _NOWAIT)
                            except BlockingIOError:
                                out[0] = False
                            except ValueError:
                                out[0] = False
                                raise PeerClosedError("this FrameSender was closed") from None
                            except OSError:
                                out[0] = False
                                raise
                            finally:
                                if out[0]:  # no call here: nothing can interrupt the count
                                    slots._tick = slots._used[i] = slots._tick + 1
                                    self.sent += 1
                    if not out[0]:
                        self._send_slots(fid, frame, [b], seq, plan.marker_at, None, None, out)
                except BaseException as e:
                    if out[0]:  # the message is out: the frame stays held for the consumer (its DONE gives it back)
                        raise
                    if fid:  # nothing went out
                        self._failed(fid, e)
                    elif type(held) is list:  # interrupted while taking the lock: the use taken above goes back
                        b.unuse()
                    raise
                if self._forgets:  # queued while the lock was held: they must not wait for a next send
                    self._after_send()
                return fid
        if not isinstance(frame, Frame) or frame.memory_type is not MemoryType.DMA:
            raise InvalidTensorError("send() takes a DMA Frame: interop.map(frame, MemoryType.DMA) or a FramePool frame")
        if frame.pts is not None:
            _check_pts(frame.pts)
        deadline = None if timeout is None else _deadline(timeout, "FrameSender.send")
        if self._gone:
            raise PeerClosedError("the consumer is gone (its socket closed); accept a new consumer")
        bufs = _buffers(frame)
        seq, marker = 0, NO_MARKER
        slot = bufs[0].pool_slot
        if slot is not None and len(bufs) == 1:
            seq, marker = slot.seq, slot.marker_offset
            if commit:  # what FramePool.commit() does, for the buffer already found
                m, view = bufs[0].marker_view(marker, True)  # m keeps the mapping while the view is written
                store_marker(view, MARKER_COMMITTED, seq)
                del m
        fid = 0  # no id yet (ids start at 1)
        used = 0  # uses taken: use() counts exactly when it returns, and nothing can interrupt the count after it
        try:
            for b in bufs:
                b.use()
                used += 1
            with self._send_lock:
                fid = self._next_id
                self._next_id += 1
                self._in_flight[fid] = bufs
        except BaseException as e:  # a buffer closed meanwhile, or interrupted before the id: nothing went out
            if fid:
                self._failed(fid, e)
            else:
                for b in bufs[:used]:
                    b.unuse()
            raise
        out = [False]  # the message is (or may be) out: see "Ctrl-C inside FrameSender.send()"
        try:
            if self._slots.size:
                self._send_slots(fid, frame, bufs, seq, marker, deadline, timeout, out)
            else:
                msg = _encode_frame(fid, frame, bufs, seq, marker)
                fds = array.array("i", [b.fd for b in bufs])
                n_fds = len(fds)
                try:
                    self._send_message(msg, fds, deadline, timeout, out)
                finally:
                    # counted however the send ends once the message is out (a Ctrl-C as it returns), written out:
                    # a function's entry is itself a point where a signal's exception is raised. Taking the lock may
                    # be interrupted (a signal while another thread holds it): tried once more then, the count made
                    # once (``done``: no call between it and the stores)
                    if out[0]:
                        done = False
                        try:
                            with self._send_lock:
                                self.sent += 1
                                self.fds_sent += n_fds
                                done = True
                        except BaseException:
                            if not done:
                                with self._send_lock:
                                    self.sent += 1
                                    self.fds_sent += n_fds
                            raise
        except BaseException as e:
            if not out[0]:  # nothing went out; a frame out stays held for the consumer (its DONE gives it back)
                self._failed(fid, e)
            raise
        return fid

    def _fitting_plan(self, frame: Frame) -> _SendPlan | None:
        """The plan of ``frame``'s buffer when the frame (a Frame, not released, no pending attribute source) is
        over that one buffer in the plan's layout, checked field by field; else None."""
        ts = frame._tensors
        t = ts[0]
        if type(t) is not DMATensor or t._released:
            return None
        b = t._buffer
        plan = self._plans.get(id(b))
        if plan is None:
            return None
        slot = b.pool_slot
        if plan.ref() is not b or b._closed or len(ts) != plan.n or frame._format is not plan.format \
                or frame._width != plan.width or frame._height != plan.height \
                or frame._colorspace is not plan.colorspace or frame._color_range is not plan.color_range \
                or (frame._pts is None) is not plan.no_pts \
                or (frame._time_base is not plan.time_base and frame._time_base != plan.time_base) \
                or (NO_MARKER if slot is None else slot.marker_offset) != plan.marker_at:
            return None
        for t, (info, off, mod, cc) in zip(ts, plan.planes):
            if type(t) is not DMATensor or t._released or t._buffer is not b \
                    or (t._info is not info and t._info != info) or t._offset != off \
                    or t._drm_modifier != mod or t._drm_fourcc != cc:
                return None
        return plan

    def _failed(self, fid: int, e: BaseException) -> None:
        """A send of ``fid`` failed with ``e``: its buffers go back; a consumer gone is a PeerClosedError."""
        self._return(fid)
        if isinstance(e, OSError) and not isinstance(e, InteropError) and \
                e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
            self._set_gone()
            raise PeerClosedError(f"the consumer is gone ({e.strerror}); its buffers went back to the pool") from None

    def _set_gone(self) -> None:
        self._gone = True
        self._closed.set()

    def _learn(self, frame: Frame, b: DMABuffer, marker: int) -> None:
        """After a frame over the one buffer ``b`` went out by the general path (under _send_lock): remember its
        layout and message for send()'s planned path."""
        slots = self._slots
        i = slots._index.get(id(b))
        ref = None if i is None else slots._buf[i]
        if i is None or ref is None or ref() is not b or b._closed or frame._attr_src is not None:
            return
        planes = []
        for t in frame._tensors:
            if type(t) is not DMATensor or t._released or t._buffer is not b:
                return
            planes.append((t._info, t._offset, t._drm_modifier, t._drm_fourcc))
        msg = bytearray(_slots_template(frame, [b], marker, self._templates))
        msg += _REF.pack(i, 0, slots._gen[i])
        mark = b.marker_view(marker, True) if marker != NO_MARKER else None
        if len(self._plans) >= 2 * MAX_SLOTS:
            self._plans.clear()
        intact = _intact(frame)
        self._plans[id(b)] = _SendPlan(ref, i, slots._gen[i], tuple(planes), frame, marker, msg, mark,
                                       None if intact is None else intact[0], b.pool_slot)

    def _send_slots(self, fid: int, frame: Frame, bufs: list[DMABuffer], seq: int, marker: int,
                    deadline: float | None, timeout: object, out: list[bool]) -> None:
        """Send a SLOTS message. ``out[0]``: set once it is (or may be) out (see "Ctrl-C inside FrameSender.send()")."""
        # Each try assigns the slots and sends under _send_lock, without waiting: a consumer never sees a reference
        # before the message that carries its fd, and a try that would block has sent nothing and announced nothing.
        pts = frame._pts if frame._attr_src is None else frame.pts
        while True:
            with self._send_lock:
                if self._forgets:
                    self._flush_forgets()
                known = self._slots.known(bufs)
                if known is not None:  # every buffer already crossed: the whole message is cached but for 3 fields
                    body = bytearray(_slots_message(frame, bufs, marker, known, self._templates))
                    fds: list[int] = []
                    commit = abandon = None
                else:
                    refs, fds, commit, abandon = self._slots.refs(bufs, self._forgotten)
                    body = bytearray(_slots_template(frame, bufs, marker, self._templates))
                    body += b"".join(_REF.pack(*r) for r in refs)
                _FID_SEQ.pack_into(body, _FID_AT, fid, seq)
                if pts is not None:
                    _PTS.pack_into(body, _PTS_AT, pts)
                n_fds = len(fds)  # made before the send: counted with no call after it
                anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else None
                late: BaseException | None = None
                try:
                    if anc is not None:
                        _send_once(self._sock.sendmsg, ([body], anc, _NOWAIT), out)
                    else:
                        _send_once(self._sock.send, (body, _NOWAIT), out)
                finally:
                    if not out[0]:
                        if abandon is not None:
                            abandon()
                    else:  # out: counted, and its new slots committed to the end whatever Ctrl-C lands meanwhile
                        self.sent += 1  # counted under _send_lock, beside the message
                        self.fds_sent += n_fds
                        if commit is not None:  # plain stores (see _SlotAssigner.refs); idempotent
                            # nested, not a loop: nothing that can raise a signal's exception sits outside a try
                            try:
                                commit()
                            except BaseException as e:  # noqa: B036 - raised below, once the table is whole
                                late = e
                                try:
                                    commit()
                                except BaseException:  # noqa: B036 - a third signal: the first is raised
                                    commit()
                if late is not None:
                    try:
                        raise late
                    finally:  # no cycle frame -> exception -> traceback -> frame
                        late = None
                if out[0]:
                    if commit is not None:
                        self._slots.retire()
                    if len(bufs) == 1:
                        self._learn(frame, bufs[0], marker)
                    break
            self._wait_writable(deadline, timeout)
        if self._forgets:  # queued while we held the lock (a buffer collected or closed meanwhile): send them now
            self._after_send()

    def _forgotten(self, index: int, gen: int) -> None:
        """A buffer that had a slot was closed or collected: tell the consumer to let its fd go (never blocks)."""
        self._forgets.append((index, gen))
        for k, plan in list(self._plans.items()):  # a plan keeps the marker's mapping: let it go with the buffer
            if plan.index == index and plan.gen == gen:
                self._plans.pop(k, None)
        self._after_send()

    def _after_send(self) -> None:
        """Send the queued FORGETs if _send_lock is free. Whoever lets go of _send_lock calls this too: a FORGET
        queued while the lock was held (by a finaliser inside the critical section, or on another thread) must not
        wait for a next send, which at the end of a stream never comes."""
        # Again after letting go: a FORGET queued by another thread whose try came while we held the lock.
        while self._forgets and self._send_lock.acquire(blocking=False):
            try:
                blocked = self._flush_forgets()
            finally:
                self._send_lock.release()
            if blocked:  # the consumer's socket is full: the reader thread retries when a DONE comes back
                return

    def _flush_forgets(self) -> bool:
        """Send queued FORGETs (under _send_lock); True when the socket is full and some are left."""
        while self._forgets:
            index, gen = self._forgets[0]
            if not self._slots.still(index, gen):  # reassigned since: the consumer replaces the old fd itself
                self._forgets.popleft()
                continue
            try:
                self._sock.send(_forget_message(index, gen), _NOWAIT)
            except BlockingIOError:
                return True  # sent after a later DONE, or with a later frame
            except (OSError, ValueError):
                self._forgets.clear()
                return False
            self._slots.release(index, gen)
            self._forgets.popleft()
        return False

    def _wait_writable(self, deadline: float | None, timeout: object) -> None:
        if self._closed.is_set():
            raise PeerClosedError("the consumer is gone (its socket closed); accept a new consumer")
        left = _left(deadline)
        if left == 0:
            raise TransportTimeoutError(f"the consumer did not read within {timeout} s (its socket is full): "
                                        f"it is stalled; the frame was not sent and its buffers are free")
        try:  # wake now and then to notice close() and a consumer that went away
            _ready(self._sock, select.POLLOUT, 0.2 if left is None else min(left, 0.2))
        except (OSError, ValueError):
            raise PeerClosedError("this FrameSender was closed") from None

    def _send_message(self, msg: bytes, fds: array.array, deadline: float | None, timeout: object,
                      out: list[bool]) -> None:
        """Send a FRAME message. ``out[0]``: set once it is (or may be) out (see "Ctrl-C inside FrameSender.send()")."""
        # A SEQPACKET message is sent whole or not at all, so sends from several threads need no lock, and a send
        # that runs out of time has sent nothing.
        anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
        while not _send_once(self._sock.sendmsg, ([msg], anc, _NOWAIT), out):
            self._wait_writable(deadline, timeout)

    def _return(self, fid: int) -> bool:
        with self._lock:
            held = self._in_flight.pop(fid, None)
        if held is None:
            return False
        if type(held) is list:  # uses taken by send()
            for b in held:
                b.unuse()
        del held  # a pool frame's lease: its end (when the producer let go of the frame too) frees the buffer
        with self._returned:
            self._returned.notify_all()
        return True

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data, anc, flags, _ = self._sock.recvmsg(64, _CMSG_BYTES, _CLOEXEC)
                except InterruptedError:
                    continue
                except (OSError, ValueError):
                    break
                fds = _fds_of(anc)
                for fd in fds:  # a DONE carries no fds: never keep what a consumer attaches
                    _close_quiet(fd)
                if not data and not fds and _hung_up(self._sock):
                    break
                fid = None if fds or flags & _TRUNCATED else _parse_done(data)
                if fid is not None and self._return(fid):
                    with self._lock:
                        self.returned += 1
                    if self._forgets:  # left when the socket was full: the consumer reads again
                        self._after_send()
                    continue
                if fid is None and not fds and not flags & _TRUNCATED and data[6:8] == _KIND_REFUSED \
                        and data[:6] == _MAGIC_VER and self._on_refused(data):
                    continue
                with self._lock:
                    self.bad_messages += 1
                log.warning("ignored a message from the consumer that is not a DONE for a frame in flight nor a "
                            "valid REFUSED (%d bytes, %d fds, frame id %s)", len(data), len(fds), fid)
        except Exception:  # never let the reader die with buffers still held
            log.exception("the frame sender's reader failed; returning every buffer held for the consumer")
        finally:
            self._set_gone()
            with self._lock:
                ids = list(self._in_flight)
            for fid in ids:
                self._return(fid)
            with self._returned:
                self._returned.notify_all()

    def _on_refused(self, msg: bytes) -> bool:
        """A REFUSED message from the consumer (on the reader thread): the slot it names lets its buffer go, so the
        buffer's next frame sends the fd again. False when the message is not a valid one (a bad message)."""
        try:
            index, gen = _parse_slot_note(msg, "REFUSED")
        except ProtocolError as e:
            log.warning("ignored a REFUSED message from the consumer: %s", e)
            return False
        if index >= self._slots.size:
            return False
        hit = False
        # A generation other than the slot's own is stale (generations only grow) and changes nothing: answered
        # without the send lock, so a consumer sending such messages in a loop never holds the sends back.
        if self._slots._gen[index] <= gen <= self._slots._staged[index]:
            # a generation staged and not yet committed (the consumer refused it before the send's commit ran) is
            # settled under the lock too: the commit comes first there
            # under the send lock, as every change of the slot table: a try that announced this generation committed
            # it before letting go, and the planned send compares the slot's buffer under it (no other per-frame check)
            with self._send_lock:
                hit = self._slots.refused(index, gen)
                if hit:
                    for k, plan in list(self._plans.items()):
                        if plan.index == index and plan.gen == gen:
                            self._plans.pop(k, None)
        if hit:
            log.info("the consumer refused the fd of slot %d generation %d: it goes again with the next frame over that "
                     "buffer", index, gen)
        else:
            log.debug("the consumer refused the fd of slot %d generation %d, since replaced: nothing to do", index, gen)
        with self._lock:
            self.refused += 1
        if self._forgets:  # queued while we held the send lock
            self._after_send()
        return True

    def wait_returned(self, timeout: float | None = None) -> bool:
        """Wait until every frame sent came back (released by the consumer, or reclaimed because it is gone).
        Returns False if some are still out after ``timeout`` seconds (None waits for ever, 0 polls)."""
        deadline = _deadline(timeout, "FrameSender.wait_returned")
        with self._returned:
            while self._in_flight and not self._closed.is_set():
                left = _left(deadline)
                if left == 0:
                    return False
                self._returned.wait(left)
        if self._closed.is_set():
            self._reader.join(_left(deadline))
        return self.in_flight == 0

    def close(self) -> None:
        """Disconnect; every buffer still held for the consumer goes back to its pool. Frames sent and not yet read
        stay in the socket, and the consumer may still read them: stop every writer of those buffers (close the
        pool, stop the element writing into it) before closing the sender, or a buffer handed out again is written
        under the consumer's eyes (it drops such a frame as torn)."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except (OSError, ValueError):
            pass
        if threading.current_thread() is not self._reader:
            self._reader.join(5)
        self._set_gone()
        self._plans.clear()
        self._slots.detach()
        self._sock.close()

    def __enter__(self) -> FrameSender:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


# ---- consumer side -------------------------------------------------------------------------------------


class _DoneChannel:
    """Sends DONE (and REFUSED) messages to the producer without ever blocking the caller (release() and GC
    finalizers call it), in the order they were given.

    A DONE goes out with MSG_DONTWAIT. If the producer's socket is full (it stopped reading), the DONE is queued and a
    flusher thread sends it once the producer reads again. Past MAX_PENDING queued DONEs the producer is treated as
    gone: the queue is dropped with a warning and later DONEs are not sent (a producer gets every buffer back when
    the connection closes). No lock is taken on the sending path: a SEQPACKET send is atomic, and a finalizer may run
    on a thread that is already inside this object.
    """

    MAX_PENDING = 1024

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._pending: collections.deque[bytes] = collections.deque()
        # made here, not when the flusher starts, so receiving frames opens no fd beyond the frames' own
        self._wake: tuple[socket.socket, socket.socket] | None = socket.socketpair()
        for w in self._wake:
            w.setblocking(False)
        self._thread: threading.Thread | None = None
        self.closed = False
        self.gone = False
        self.dropped = 0
        self._last = 0  # the frame id of the last DONE (0 is never one)

    def start(self) -> None:
        """Make the flusher ready; called from recv() (never from a finalizer) before any frame can be released."""
        if self._thread is not None or self.closed:
            return
        self._thread = threading.Thread(target=self._flush_loop, name="interop-frame-done", daemon=True)
        self._thread.start()

    def send(self, fid: int) -> None:
        """Send DONE for ``fid`` now, or queue it; never blocks. A frame has one DONE: the same frame id again right
        after is dropped (a Ctrl-C as a frame's lease was made answers it twice: the lease as it goes, the handler)."""
        if self.closed or self.gone or fid == self._last:
            return
        msg = _done_message(fid)
        # _last only once the DONE went out or was queued: a Ctrl-C before that leaves the retry free to send it
        # (no interrupt point between a Python method's return and the store)
        if not self._pending and self._try(msg):
            self._last = fid
            return
        self._queue(msg)
        self._last = fid

    def refuse(self, index: int, gen: int) -> None:
        """Tell the producer the install of slot ``index`` under ``gen`` was not made (before the frame's DONE)."""
        if self.closed or self.gone:
            return
        msg = _refused_message(index, gen)
        if not self._pending and self._try(msg):
            return
        self._queue(msg)

    def _queue(self, msg: bytes) -> None:
        if len(self._pending) >= self.MAX_PENDING:
            self.gone = True
            self.dropped += len(self._pending) + 1
            self._pending.clear()
            log.warning("the producer has not read %d DONE messages: treating it as gone and dropping them "
                        "(it gets its buffers back when the connection closes)", self.MAX_PENDING)
            self._poke()
            return
        self._pending.append(msg)
        self._poke()

    def _try(self, msg: bytes) -> bool:
        """True when the message needs no more work (sent, or the producer is gone)."""
        try:
            self._sock.send(msg, _NOWAIT)
        except BlockingIOError:
            return False
        except (OSError, ValueError):  # the producer is gone, or our socket closed: nothing to return buffers to
            self.gone = True
        return True

    def _poke(self) -> None:
        w = self._wake
        if w is not None:
            try:
                w[1].send(b"\0")
            except (OSError, ValueError):  # full (a wake-up is already pending) or closed
                pass

    def _flush_loop(self) -> None:
        assert self._wake is not None
        r = self._wake[0]
        try:
            while not self.closed and not self.gone:
                try:  # poll(): select() refuses an fd from FD_SETSIZE up (see _ready)
                    p = select.poll()
                    p.register(r, select.POLLIN)
                    if self._pending:
                        p.register(self._sock, select.POLLOUT)
                    if p.poll(1000):
                        r.recv(4096)
                except BlockingIOError:  # the producer's socket was the one ready
                    pass
                except (OSError, ValueError):
                    break
                while self._pending and not self.closed:
                    if not self._try(self._pending[0]):
                        break
                    self._pending.popleft()
        finally:
            # the wake-up pair goes with the thread: a receiver left open after EOF (which ends the flusher) keeps
            # no fd but its socket; a later _poke() on a closed pair fails quietly
            for s in self._wake or ():
                s.close()

    def close(self, wait: bool = True) -> None:
        """Stop the flusher (a last non-blocking try for queued DONEs first)."""
        while self._pending and not self.gone and self._try(self._pending[0]):
            self._pending.popleft()
        self.closed = True
        self._poke()
        t = self._thread
        if wait and t is not None and t is not threading.current_thread():
            t.join(2)
        if self._wake is not None and (t is None or not t.is_alive()):
            for s in self._wake:
                s.close()


class _SlotEntry:
    """A buffer the producer named by a slot: kept open and mapped between frames. Each received frame over it holds
    it through the frame's BufferLease, which sends that frame's DONE when the last plane and view let go."""

    __slots__ = ("gen", "buf")

    def __init__(self, gen: int, buf: DMABuffer):
        self.gen = gen
        self.buf = buf


class _Received:
    """A SLOTS layout seen before: its checked header and, while the slot table is unchanged (``version``), the
    buffers its references name, each plane's (buffer, info, offset, modifier) and the commit marker's view."""

    __slots__ = ("hdr", "version", "bufs", "specs", "marker")

    def __init__(self, hdr: _Header):
        self.hdr = hdr
        self.version = -1
        self.bufs: tuple[DMABuffer, ...] = ()
        self.specs = tuple((p.fd_index, p.info, p.offset, p.modifier) for p in hdr.planes)
        self.marker: tuple[object, memoryview] | None = None


class _SlotTable:
    """The consumer's half of the slot table. Replaced, forgotten and (at close) all buffers are closed once no frame
    over them is held."""

    def __init__(self) -> None:
        self.entries: dict[int, _SlotEntry] = {}
        self.forgotten = 0
        self.version = 0  # changes with every install / forget / close: cached references are checked again
        # slot -> the generation whose install this consumer refused (and told the producer): frames over it that
        # were sent before the producer heard are refused with that said, not as a disagreement of the tables
        self.refused: dict[int, int] = {}

    def check(self, hdr: _Header) -> None:
        """Refuse references that do not fit this table, before any fd of the message is taken."""
        for i, (index, rflags, gen) in enumerate(hdr.refs):
            e = self.entries.get(index)
            if rflags & REF_FD:
                if e is not None and gen <= e.gen:
                    raise ProtocolError(f"slot {index} is announced again with generation {gen}, not newer than "
                                        f"{e.gen}: the producer's slot table and ours disagree")
            elif e is None or e.gen != gen:
                if self.refused.get(index) == gen:
                    raise ProtocolError(f"slot {index} generation {gen} names a buffer whose fd this consumer refused "
                                        f"(see the error of an earlier frame): the frame is dropped; the producer was "
                                        f"told, and sends the fd again with its next frame over that buffer")
                raise ProtocolError(f"slot {index} generation {gen} is not one this consumer was sent (it has "
                                    f"{'nothing' if e is None else f'generation {e.gen}'} there)")
            elif e.buf.size != hdr.sizes[i]:
                raise ProtocolError(f"slot {index} holds a buffer of {e.buf.size} bytes; the message says "
                                    f"{hdr.sizes[i]}")

    def install(self, index: int, gen: int, buf: DMABuffer) -> _SlotEntry:
        buf.persistent = True
        old = self.entries.get(index)
        e = self.entries[index] = _SlotEntry(gen, buf)
        self.version += 1
        if self.refused:
            self.refused.pop(index, None)
        if old is not None:
            old.buf.close_when_free()
        return e

    def refuse(self, index: int, gen: int) -> bool:
        """The install of slot ``index`` under ``gen`` was not made. True when it was not (nor since): the producer is
        to be told. What the slot holds stays (a bad message changes no slot): the producer's next install replaces
        it."""
        e = self.entries.get(index)
        if e is not None and e.gen == gen:
            return False
        self.refused[index] = gen
        return True

    def forget(self, index: int, gen: int) -> bool:
        e = self.entries.get(index)
        if e is None or e.gen != gen:
            return False
        del self.entries[index]
        self.version += 1
        self.forgotten += 1
        e.buf.close_when_free()
        return True

    def close(self) -> None:
        entries, self.entries = self.entries, {}
        self.version += 1
        for e in entries.values():
            e.buf.close_when_free()


_AGAIN = object()  # FrameReceiver._message: nothing to hand over (a FORGET, a torn frame): receive again
_NO_LAYOUTS = [None] * MAX_SLOTS
_MIN_SLOTS = _HEAD.size + _FRAME.size  # shorter messages are never a SLOTS frame
_REF_SIZE = _REF.size  # a SLOTS message ends with its last reference: the slot index starts this far from the end
_finalizing = sys.is_finalizing
_new = object.__new__
_asarray = np.asarray
_ndarray = np.ndarray


class _ViewShape:
    """What FrameViews show beside the planes, shared by every frame of one layout."""

    __slots__ = ("format", "width", "height", "time_base", "colorspace", "color_range", "marker", "marker_at",
                 "writer")

    def __init__(self, fmt: FrameFormat, width: int, height: int, time_base: Fraction | None,
                 colorspace: ColorSpace | None, color_range: ColorRange | None, marker: memoryview | None,
                 marker_at: int | None, writer: bool):
        self.format, self.width, self.height, self.time_base = fmt, width, height, time_base
        self.colorspace, self.color_range = colorspace, color_range
        self.marker, self.marker_at, self.writer = marker, marker_at, writer


class _ViewLayout(_ViewShape):
    """A SLOTS message without fds, built and checked once by the general path, as recv_views() compares the next
    ones with it: the message cut around frame id, sequence and pts, the slot table version its buffers were
    resolved under, and each plane's base array over the buffer's mapping (made once: a frame's views are views of
    these, see _HeldPlane)."""

    __slots__ = ("size", "version", "unpack", "head", "mid", "tail", "has_pts", "bases", "maps", "check", "done")

    def __init__(self, msg: bytes, rec: _Received, version: int, writer: bool, done: Callable[[Any], None]):
        hdr = rec.hdr
        maps: list[object] = [b.mapping(writer) for b in rec.bufs]
        marker = None
        if hdr.marker != NO_MARKER:
            m, marker = rec.bufs[0].marker_view(hdr.marker, writer)
            maps.append(m)
        super().__init__(hdr.format, hdr.width, hdr.height, hdr.time_base, hdr.colorspace, hdr.color_range, marker,
                         None if hdr.marker == NO_MARKER else hdr.marker, writer)
        self.size = len(msg)
        self.version = version
        # one unpack gives the three per-frame fields and the bytes around them, compared as bytes
        self.unpack = struct.Struct(f"<8sQQ{_PTS_AT - _SEQ_AT - 8}sq{len(msg) - _PTS_AT - 8}s").unpack_from
        self.head, _, _, self.mid, _, self.tail = self.unpack(msg)
        self.has_pts = hdr.pts is not None
        self.bases = tuple(_asarray(_PlaneView({"version": 3, "shape": info.shape, "typestr": info.dtype.str,
                                                "data": (maps[bi].address + offset, not writer),  # type: ignore[attr-defined]
                                                "strides": info.strides}, maps[bi])).view(_LayoutPlane)
                           for bi, info, offset, _ in rec.specs)
        self.maps = tuple(maps)
        self.check = None if writer else marker  # a writer's frames are not written yet: no commit check
        self.done = done


class _ViewHold:
    """One received frame's hold, shared by its FrameViews and every numpy view of it: when the last of them is
    gone, ``done(token)`` (the DONE to the producer, or the release of the frame behind the views). It keeps the
    mappings the views read. A plain object with ``__del__``: a frame costs no finaliser registration. Not during
    interpreter shutdown: a DONE then would let the producer reuse a buffer a daemon thread may still be reading."""

    __slots__ = ("done", "token", "keep")

    def __init__(self, done: Callable[[Any], None], token: object, keep: object):
        self.done = done
        self.token = token
        self.keep = keep

    def __del__(self) -> None:
        try:
            if not _finalizing():
                self.done(self.token)
        except Exception:  # __del__ must not raise (Python would print it); the library logs instead
            try:
                log.exception("ending a received frame's hold failed")
            except Exception:
                pass


class _PlaneView:
    """The base object of one plane's numpy array: its array interface (a copy: a caller who edits this one changes
    nothing else) and what the array must keep alive (the frame's hold, or a layout's mapping)."""

    __slots__ = ("__array_interface__", "hold")

    def __init__(self, iface: dict[str, object], hold: object):
        self.__array_interface__ = iface.copy()
        self.hold = hold


class _LayoutPlane(np.ndarray):
    """A _ViewLayout's base array of one plane, over the buffer's mapping (see _HeldPlane). A type of its own, neither
    _HeldPlane nor ndarray: numpy then never shortens a frame's view's base chain past the _HeldPlane above it."""

    __slots__ = ()


class _HeldPlane(np.ndarray):
    """The link between a frame's plane view and the frame's hold, so a view costs two array views of a base made
    once per layout (building an array from an ``__array_interface__`` costs several times more).

    A _ViewLayout's base of each plane is a _LayoutPlane over the mapping; per frame, ``p = base.view(_HeldPlane)``
    (``p.hold`` set to the frame's hold) and the caller gets ``p.view(np.ndarray)``. numpy shortens a new view's base
    chain only through arrays of the new view's own type and stops before one of another type, so every view taken
    from a caller's array (slices, ``np.asarray``, views of views) keeps ``p`` as its base or its base's base, and
    with it the hold; so does every view of ``p`` itself (the caller's ``array.base``), as the layout's base above it
    is of a third type. Only a view of the layout's base (``array.base.base``) holds no frame."""

    __slots__ = ("hold",)
    hold: _ViewHold


def _release_frame(frame: object) -> None:
    frame.release()  # type: ignore[attr-defined]


def _no_done(token: object) -> None:
    """A spare's hold ends with nothing to tell: it holds no frame until recv_views() hands it out."""


def _spare_views(lay: _ViewLayout) -> FrameViews:
    """FrameViews of ``lay`` made ahead of the frame (recv_views() makes one before it waits): the plane views over
    a hold that holds nothing yet (``done`` a no-op, so one dropped unused sends no DONE). Handing it out fills in
    the hold's token and ``done`` and the per-frame fields."""
    hold = _new(_ViewHold)
    hold.token, hold.done = None, _no_done
    planes = []
    for base in lay.bases:  # see _HeldPlane: the view's base holds the frame
        p = base.view(_HeldPlane)
        p.hold = hold
        planes.append(p.view(_ndarray))
    views = _new(FrameViews)
    views.planes, views._hold, views._shape = tuple(planes), hold, lay
    return views


class FrameViews:
    """A received frame as numpy views of its planes, from :meth:`FrameReceiver.recv_views`.

    ``planes`` (also ``views[i]``, ``len``, iteration): one numpy array per plane, in the frame format's plane
    order and shapes (NV12: Y (H, W), UV (H/2, W/2, 2)), with the producer's row pitch; read-only, writable for a
    ``writer`` receiver. ``frame_id``, ``sequence``, ``pts``, ``time_base``, ``format``, ``width``, ``height``,
    ``colorspace``, ``color_range``, ``metadata``.

    The frame stays out of the producer's pool while this object is not released or any view of it (or view of a
    view) is alive: ``release()`` (or the end of ``with``, or dropping this object) lets go of this object's hold;
    the producer gets the buffer back once the last view is gone too. A writer calls ``commit()`` after its last
    write."""

    __slots__ = ("planes", "frame_id", "sequence", "pts", "_hold", "_shape")

    def __init__(self, planes: list[np.ndarray], hold: _ViewHold, frame_id: int, sequence: int, pts: int | None,
                 shape: _ViewShape):
        self.planes: tuple[np.ndarray, ...] = tuple(planes)
        self.frame_id = frame_id
        self.sequence = sequence
        self.pts = pts
        self._hold: _ViewHold | None = hold
        self._shape = shape

    format = property(lambda self: self._shape.format, doc="FrameFormat of the frame")
    width = property(lambda self: self._shape.width, doc="visible width in pixels")
    height = property(lambda self: self._shape.height, doc="visible height in pixels")
    time_base = property(lambda self: self._shape.time_base, doc="time base of pts (a Fraction), or None")
    colorspace = property(lambda self: self._shape.colorspace, doc="ColorSpace, or None when unknown")
    color_range = property(lambda self: self._shape.color_range, doc="ColorRange, or None when unknown")

    @property
    def metadata(self) -> dict[str, object]:
        """``frame_id``, ``sequence`` and (pool frames) ``commit_marker``, as a received Frame's metadata has them
        (a new dict each time)."""
        meta: dict[str, object] = {"frame_id": self.frame_id, "sequence": self.sequence}
        if self._shape.marker_at is not None:
            meta["commit_marker"] = self._shape.marker_at
        return meta

    @property
    def released(self) -> bool:
        return self._hold is None

    def __len__(self) -> int:
        return len(self.planes)

    def __getitem__(self, i: int) -> np.ndarray:
        if self._hold is None:
            raise InvalidTensorError("these frame views were released: keep the arrays you need before release(), "
                                     "or receive the next frame")
        return self.planes[i]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.planes)

    def release(self) -> None:
        """Let go of this object's hold (idempotent). Views taken before keep the frame until they are gone."""
        self.planes = ()
        self._hold = None

    def commit(self) -> None:
        """Mark the frame complete after writing it (writer receivers, pool frames): the consumer it goes to next
        checks this marker."""
        sh = self._shape
        if not sh.writer:
            raise InvalidTensorError("commit() is for frames of a writer receiver (FrameReceiver(sock, writer=True))")
        if self._hold is None:
            raise InvalidTensorError("these frame views were released: commit before release()")
        if sh.marker is None:
            raise InvalidTensorError("this frame has no commit marker (it does not come from a FramePool)")
        store_marker(sh.marker, MARKER_COMMITTED, self.sequence)

    def __enter__(self) -> FrameViews:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        sh = self._shape
        state = " released" if self._hold is None else ""
        return f"<FrameViews {sh.format.name} {sh.width}x{sh.height} frame {self.frame_id} seq {self.sequence}{state}>"


class FrameReceiver:
    """Receives DMA frames from one producer. ``recv()`` returns a Frame over the producer's memory (zero-copy),
    or None once the producer is gone. Release each frame when done (``with`` or ``release()``): that sends DONE
    and the producer reuses the buffer. Frames whose commit marker says the write did not finish are dropped
    (counted in ``torn``), never returned.

    Releasing never blocks (it also runs from GC finalizers): the DONE is sent without waiting, and if the producer
    stopped reading it is queued and sent by a background thread when the producer reads again. If the producer
    leaves more than ``_DoneChannel.MAX_PENDING`` DONEs unread it is treated as gone: they are dropped with a
    warning (``dropped_done`` counts them) and no more are sent; it gets its buffers back when the connection closes.

    The receiver makes ``sock`` blocking (a timeout set on it with ``settimeout()`` is dropped): the ``timeout`` of
    ``recv()`` and ``recv_views()`` is the one that counts. Do not set one on it afterwards: CPython would wait that
    long inside every call on the socket, a poll and a DONE included.
    """

    def __init__(self, sock: socket.socket, *, require_sealed: bool = True, writer: bool = False):
        if not isinstance(sock, socket.socket) or sock.type != socket.SOCK_SEQPACKET or sock.family != socket.AF_UNIX:
            raise InvalidTensorError("FrameReceiver needs a connected AF_UNIX SOCK_SEQPACKET socket "
                                     "(interop.transport.seqpacket_pair() or connect(path))")
        # blocking, with no timeout of its own: the caller's timeout rules every receive (a socket timeout makes
        # CPython wait that long inside every call, a non-blocking one too: a poll, or a DONE, would wait)
        sock.setblocking(True)
        self._sock = sock
        self._done = _DoneChannel(sock)
        self.require_sealed = require_sealed
        self.writer = writer  # a writer process receives empty buffers to fill: no commit check, commit() after
        self.received = 0
        self.torn = 0
        self.fds_received = 0
        self.closed = False
        self._table = _SlotTable()
        self._parsed: dict[bytes, _Received] = {}
        self._ctx: Context | None = None
        self._entered = False  # set by _build_slots as its handler takes over answering a frame (see there)
        self._fds_taken = False  # set by _message as its handler takes over closing a message's fds
        self._rbufs: list[bytearray] = [bytearray(_RECV_BYTES)]  # recv_views() receives into one of these
        self._view_layouts: list[_ViewLayout | None] = [None] * MAX_SLOTS  # by the last reference's slot index
        self._layouts_version = 0
        # recv_views(): per layout, a FrameViews made before the wait (see _spare_views); taken with dict.pop, one
        # step under the GIL, so two threads never get the same one
        self._spares: dict[_ViewLayout, FrameViews] = {}
        self._spare_next: _ViewLayout | None = None  # the layout a spare is made for on the next call
        self._fin = weakref.finalize(self, self._done.close, False)
        self._fin_table = weakref.finalize(self, self._table.close)

    @property
    def dropped_done(self) -> int:
        """DONE messages dropped because the producer stopped reading them (see the class docstring)."""
        return self._done.dropped

    def recv(self, timeout: float | None = None) -> Frame | None:
        """The next complete frame; None when the producer is gone (or this receiver was closed).

        ``timeout``: seconds to wait (None waits for ever; 0 polls: a frame already queued is returned).
        Raises TransportTimeoutError (a TimeoutError) when no frame came in time, ProtocolError for a message
        that is not a valid frame (the receiver goes on working: call recv() again)."""
        deadline = None if timeout is None else _deadline(timeout, "FrameReceiver.recv")
        if self._done._thread is None:
            self._done.start()
        sock = self._sock
        blocking = deadline is None and sock.gettimeout() is None
        poll = timeout is not None and timeout == 0
        while True:
            if self.closed:
                return None
            try:
                if blocking:
                    # no deadline on a blocking socket: wait in recvmsg itself (one system call per frame)
                    msg, anc, flags, _ = sock.recvmsg(_RECV_BYTES, _CMSG_BYTES, _CLOEXEC)
                else:  # try first: a frame already queued needs no select()
                    try:
                        msg, anc, flags, _ = sock.recvmsg(_RECV_BYTES, _CMSG_BYTES, _CLOEXEC_NOWAIT)
                    except BlockingIOError:
                        # a poll (timeout 0) ends here: a frame that comes meanwhile is the next call's
                        if poll or not _ready(sock, select.POLLIN, _left(deadline)):
                            msg = None
                        else:
                            continue
            except (BlockingIOError, InterruptedError):  # another thread took the message
                continue
            except ConnectionResetError:
                msg, anc, flags = b"", [], 0
            except (OSError, ValueError):
                if self.closed:
                    return None
                raise
            if msg is None:
                raise TransportTimeoutError(f"no frame within {timeout} s: the producer sent nothing")
            self._entered = False  # no callee has taken the answer to this message over yet (see _build_slots)
            self._fds_taken = False  # nor its fds (see _message)
            try:
                if not anc and not flags & _TRUNCATED:
                    # a frame over buffers this receiver holds, in a layout checked before: one lookup, one unpack
                    rec = self._parsed.get(msg[:_FID_AT] + msg[_SEQ_AT + 8:_PTS_AT] + msg[_PTS_AT + 8:])
                    if rec is not None and rec.version == self._table.version:
                        try:
                            fid, seq, pts = _per_frame(rec, msg)
                        except ProtocolError:
                            rec = None  # the general path below raises it, and answers the frame id
                        if rec is not None:
                            frame = self._build_slots(rec, fid, seq, pts, [])
                            if frame is not None:
                                self.received += 1
                                return frame
                            continue
                got = self._message(msg, anc, flags)
            except BaseException:
                self._drop_unanswered(msg, anc)
                raise
            if got is not _AGAIN:
                return got  # type: ignore[return-value]

    def _drop_unanswered(self, msg: bytes, anc: list[tuple[int, int, bytes]]) -> None:
        """A receive cut short (a Ctrl-C, an error) before a callee took the message over: its fds are closed and
        the frame is answered (DONE, REFUSED) here."""
        if anc and not self._fds_taken:
            for fd in _fds_of(anc):
                _close_quiet(fd)
        if not self._entered:
            self._answer_dropped(msg)
            self._entered = True

    def _message(self, msg: bytes, anc: list[tuple[int, int, bytes]], flags: int) -> Frame | None | object:
        """Handle one message by the general path: a Frame, None at EOF, or _AGAIN (a FORGET, a torn frame)."""
        fds = _fds_of(anc) if anc else []
        self._fds_taken = True  # closed by the handler below from here on (no interrupt point since the call)
        if not msg and not fds and not _hung_up(self._sock):
            raise ProtocolError("an empty message from the producer (a SEQPACKET EOF looks the same; the "
                                "producer is still connected, so it is not one)")
        if not msg and not fds:
            self.closed = True
            self._done.close(wait=False)
            self._table.close()
            self._drop_layouts()  # their mappings go now, not when this receiver is closed or collected
            self._parsed.clear()
            return None
        try:
            self.fds_received += len(fds)  # inside: a Ctrl-C as len() returns must not skip the fds' close below
            if msg[6:8] == _KIND_FORGET and msg[:6] == _MAGIC_VER:
                self._forget(msg, fds)
                if self._table.version != self._layouts_version:  # the forgotten buffer's layouts go now, not later
                    self._layouts_version = self._table.version
                    self._drop_layouts()
                return _AGAIN
            self._entered = False
            frame = self._build(msg, fds, flags)
        except BaseException as e:
            if not self._entered:  # interrupted at _build's entry, before its handlers could answer the frame
                self._answer_dropped(msg)
                self._entered = True  # answered here: not again by recv() (set once it is: a Ctrl-C meanwhile)
            for fd in fds:  # what _build did not hand to a DMABuffer (it marks those -1)
                _close_quiet(fd)
            if self.closed and isinstance(e, InteropError):
                # close() on another thread while this message was handled took the slot table with it: the error
                # is not the producer's, and a closed receiver's recv() returns None
                return None
            raise
        if self._table.version != self._layouts_version:  # layouts of recv_views() over buffers let go: drop them
            self._layouts_version = self._table.version
            self._drop_layouts()
        if frame is None:
            return _AGAIN
        self.received += 1
        return frame

    def recv_views(self, timeout: float | None = None) -> FrameViews | None:
        """The next complete frame as numpy views of its planes (a :class:`FrameViews`); None when the producer is
        gone (or this receiver was closed). Timeouts and errors as :meth:`recv`.

        The fast way to read a frame on the CPU: no Frame, no tensors, no ``interop.map()``. A frame over buffers
        this receiver holds, in a layout it checked before, costs one receive into a buffer kept for it, one unpack
        and a comparison of the message with that layout, a commit-marker check, and per plane a view of an array
        made when the layout was first seen (each plane is a plain ``numpy.ndarray``); those views are made before the
        wait, for the layout of the frame received last, so after it such a frame only fills in its fields. The views
        are read-only (writable for a ``writer`` receiver, which calls ``FrameViews.commit()`` after writing). Each
        view holds the frame: the producer gets the buffer back (DONE) once ``release()`` was called (or the
        FrameViews dropped) and the last view, and every view of a view, is gone. A view never shows a later frame's data."""
        deadline = None if timeout is None else _deadline(timeout, "FrameReceiver.recv_views")
        if self._done._thread is None:
            self._done.start()
        spares = self._spares
        nxt = self._spare_next
        table = self._table
        if nxt is not None and nxt.version != table.version:  # its buffers were let go: nothing kept for it
            self._spare_next = nxt = None
        if nxt is not None and nxt not in spares and not self.closed:
            # the views of the next frame in the layout last used, made before the wait: after it, a frame in that
            # layout only fills in its fields (work right after a wake-up runs cold)
            spares[nxt] = _spare_views(nxt)
            if self.closed:  # closed meanwhile by another thread: its spares go with it
                spares.clear()
            elif nxt.version != table.version:  # its buffers let go meanwhile (another thread's FORGET): not kept
                spares.pop(nxt, None)
        # take the receive buffer atomically (list.pop is one step under the GIL): two threads in recv_views at once
        # must never receive into the same bytes
        try:
            buf = self._rbufs.pop()
        except IndexError:  # another thread is receiving into ours
            buf = bytearray(_RECV_BYTES)
        # one function from the receive to the views (no call per stage): after a wake-up this code runs cold
        try:
            sock = self._sock
            into = [buf]
            cache = self._view_layouts
            blocking = deadline is None and sock.gettimeout() is None
            poll = timeout is not None and timeout == 0
            while True:
                if self.closed:
                    return None
                try:
                    if blocking:  # wait in the receive itself: one system call per frame, nothing between wake-up and it
                        n, anc, flags, _ = sock.recvmsg_into(into, _CMSG_BYTES, _CLOEXEC)
                    else:  # try first: a frame already queued needs no select()
                        try:
                            n, anc, flags, _ = sock.recvmsg_into(into, _CMSG_BYTES, _CLOEXEC_NOWAIT)
                        except BlockingIOError:
                            # a poll (timeout 0) ends here: a frame that comes meanwhile is the next call's
                            if poll or not _ready(sock, select.POLLIN, _left(deadline)):
                                raise TransportTimeoutError(f"no frame within {timeout} s: the producer sent "
                                                            f"nothing") from None
                            continue
                except (BlockingIOError, InterruptedError):
                    continue
                except ConnectionResetError:
                    n, anc, flags = 0, [], 0
                except (OSError, ValueError):
                    if self.closed:
                        return None
                    raise
                if not anc and not flags & _TRUNCATED and n > _MIN_SLOTS:
                    answered = False  # the views' hold answers the frame once it is armed (hold.done)
                    try:
                        # Everything but frame id, sequence and pts must equal a layout checked before, over the slot's
                        # buffer this receiver still holds under that generation (the references are part of the
                        # compared bytes): then only those three fields and the commit marker are left to check.
                        lay = cache[buf[n - _REF_SIZE]]
                        if lay is not None and lay.size == n and lay.version == table.version:
                            head, fid, seq, mid, pts, tail = lay.unpack(buf)
                            if head == lay.head and mid == lay.mid and tail == lay.tail and fid \
                                    and (pts == 0 or lay.has_pts):
                                marker = lay.check
                                if marker is not None:
                                    word, wrote = marker[0], marker[1]  # the state word first (store_marker)
                                    if word != MARKER_COMMITTED_WORD or wrote != seq:
                                        self._torn(fid, word >> 32, wrote, seq)
                                        continue
                                # this layout's spare, taken in one step (no other thread gets it), else made now
                                views = spares.pop(lay, None)
                                if views is None:
                                    views = _spare_views(lay)
                                hold: _ViewHold = views._hold  # type: ignore[assignment]
                                hold.token = fid  # before done: the hold sends no DONE until both are this frame's
                                hold.done = lay.done  # the views' bases keep the mappings
                                answered = True
                                views.frame_id, views.sequence, views.pts = fid, seq, pts if lay.has_pts else None
                                self.received += 1
                                self._spare_next = lay
                                return views
                    except BaseException:
                        if not answered:  # a Ctrl-C before the hold was armed: the frame is answered here
                            self._answer_dropped(bytes(memoryview(buf)[:n]))
                        raise
                self._entered = False
                self._fds_taken = False
                try:
                    msg = bytes(memoryview(buf)[:n])
                    got = self._message(msg, anc, flags)
                except BaseException:
                    self._drop_unanswered(bytes(memoryview(buf)[:n]), anc)
                    raise
                if got is _AGAIN:
                    continue
                if got is None:
                    return None
                frame: Frame = got  # type: ignore[assignment]
                try:
                    views = self._views_of(frame)
                except BaseException:
                    frame.release()
                    raise
                if not anc and msg[6:8] == _KIND_SLOTS:
                    self._learn(msg)
                return views
        finally:
            if not self._rbufs:
                self._rbufs.append(buf)

    def _torn(self, fid: int, state: int, got: int, seq: int) -> None:
        self.torn += 1
        log.warning("dropped frame %d: its writer did not finish it (marker state %d, seq %d, expected %d)",
                    fid, state, got, seq)
        self._done.send(fid)

    def _learn(self, msg: bytes) -> None:
        """Remember the layout of a SLOTS message without fds that was just built, for recv_views' fast path."""
        rec = self._parsed.get(_layout_key(msg))
        if rec is None or rec.version != self._table.version:
            return
        lay = _ViewLayout(msg, rec, self._table.version, self.writer, self._done.send)
        i = msg[-_REF.size]
        old = self._view_layouts[i]
        self._view_layouts[i] = lay
        if old is not None:
            self._spares.pop(old, None)
        self._spare_next = lay

    def _drop_layouts(self) -> None:
        """Forget recv_views()' layouts and their spares (views handed out keep what they need)."""
        self._view_layouts[:] = _NO_LAYOUTS
        self._spare_next = None
        self._spares.clear()
        # recv()'s layouts resolved under an older table hold its buffers and a commit marker's mapping: a forgotten
        # pool buffer's memory stayed mapped while its layout was cached. Each is replaced by one that holds nothing
        # (resolved again on its next frame); a thread using the old one keeps it whole.
        version = self._table.version
        parsed = self._parsed
        for key, rec in list(parsed.items()):
            if rec.bufs and rec.version != version:
                parsed[key] = _Received(rec.hdr)

    def _views_of(self, frame: Frame) -> FrameViews:
        """FrameViews over a frame built by the general path; the frame is released with the last view."""
        writer = self.writer
        keep: list[object] = [frame]
        ifaces = []
        for t in frame.tensors:
            assert isinstance(t, DMATensor)
            m = t.buffer.mapping(writer)
            keep.append(m)
            info = t.info
            ifaces.append({"version": 3, "shape": info.shape, "typestr": info.dtype.str,
                           "data": (m.address + t.offset, not writer), "strides": info.strides})
        marker_at = frame.metadata.get("commit_marker")
        marker = None
        if isinstance(marker_at, int):
            mk = buffers_of(frame)[0].marker_view(marker_at, writer)
            keep.append(mk[0])
            marker = mk[1]
        hold = _ViewHold(_release_frame, frame, keep)
        seq = frame.metadata.get("sequence", 0)
        shape = _ViewShape(frame.format, frame.width, frame.height, frame.time_base, frame.colorspace,
                           frame.color_range, marker, marker_at if isinstance(marker_at, int) else None, writer)
        return FrameViews([np.asarray(_PlaneView(i, hold)) for i in ifaces], hold,
                          int(frame.metadata.get("frame_id", 0)),  # type: ignore[call-overload]
                          int(seq), frame.pts, shape)  # type: ignore[call-overload]

    def _forget(self, msg: bytes, fds: list[int]) -> None:
        if fds:
            raise ProtocolError(f"a FORGET message came with {len(fds)} fds (it has none)")
        index, gen = _parse_forget(msg)
        if not self._table.forget(index, gen):
            log.info("FORGET for slot %d generation %d, which this consumer does not hold", index, gen)

    def _refuse(self, installs: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> None:
        """Tell the producer which of the installs (index, generation) a SLOTS message announced this consumer did
        not make, before the frame's DONE: it sends those buffers' fds again with their next frame (else every later
        frame over them would be refused until their slot was reassigned)."""
        table = self._table
        for index, gen in installs:
            if table.refuse(index, gen):
                self._done.refuse(index, gen)

    def _answer_dropped(self, msg: bytes) -> None:
        """A frame message dropped before a buffer lease could answer it: its installs not made are REFUSED, then
        its DONE goes (an honest producer, of another version too, gets its buffers back)."""
        if msg[6:8] == _KIND_SLOTS and not self.closed:
            self._refuse(_announced(msg))
        fid = _frame_id_of(msg)
        if fid:
            self._done.send(fid)

    def _build(self, msg: bytes, fds: list[int], flags: int) -> Frame | None:
        self._entered = True  # its handlers answer the frame from here on (see _message)
        rec: _Received | None = None
        try:
            if flags & _TRUNCATED:
                if flags & _MSG_TRUNC:
                    raise ProtocolError("a frame message was truncated (longer than any valid one): peer and "
                                        "library versions differ?")
                raise ProtocolError("the fds of a frame message were cut off (MSG_CTRUNC): this process ran out of fds "
                                    "(see ulimit -n; release frames you hold, close files): the frame is dropped, "
                                    "and the producer sends the fds again with its next frames")
            if msg[6:8] == _KIND_SLOTS and msg[:6] == _MAGIC_VER:
                rec, fid, seq, pts = self._slots_header(msg, len(fds))
                if rec.version != self._table.version:
                    self._table.check(rec.hdr)
            else:
                hdr = _parse_frame(msg, len(fds))
        except BaseException:  # a bad message, or a Ctrl-C: the frame is answered either way
            self._entered = False  # a Ctrl-C in the answer leaves it to the callers
            self._answer_dropped(msg)
            self._entered = True
            raise
        if rec is not None:
            self._entered = False
            try:
                return self._build_slots(rec, fid, seq, pts, fds)
            except BaseException:
                if not self._entered:  # interrupted before _build_slots' own handler could answer the frame
                    self._answer_dropped(msg)
                    self._entered = True  # answered here: not again by _message
                raise
        fid = hdr.frame_id
        # ownership of the fds passes to DMABuffers one by one, each marking its entry -1 as it takes the fd over
        # (handed=: no gap for a Ctrl-C); the caller closes what is left (>= 0) on error
        bufs: list[DMABuffer] = []
        planes: list[DMATensor] = []
        try:
            for i, fd in enumerate(fds):
                bufs.append(buffer_from_fd(fd, size=hdr.sizes[i], take_ownership=True,
                                           require_sealed=self.require_sealed, handed=fds, at=i))
            if hdr.marker != NO_MARKER and not self.writer:
                mg, state, got = read_marker(bufs[0].mapping(False).address, hdr.marker)
                if mg != MARKER_MAGIC or state != MARKER_COMMITTED or got != hdr.seq:
                    self.torn += 1
                    log.warning("dropped frame %d: its writer did not finish it (marker state %d, seq %d, expected %d)",
                                fid, state, got, hdr.seq)
                    for b in bufs:
                        b.close()
                    self._done.send(fid)
                    return None
            for p in hdr.planes:
                planes.append(DMATensor(bufs[p.fd_index], p.info, offset=p.offset, drm_fourcc=hdr.fourcc,
                                        drm_modifier=p.modifier))
            frame = dma_frame(planes, hdr.format, hdr.width, hdr.height, colorspace=hdr.colorspace,
                              color_range=hdr.color_range, pts=hdr.pts, time_base=hdr.time_base)
        except BaseException:
            self._entered = False  # a Ctrl-C before the DONE below leaves the answer to the callers
            for t in planes:
                t.release()
            for b in bufs:
                b.close()
            self._done.send(fid)
            self._entered = True
            raise
        done = _DoneOnce(self._done, fid, len(bufs))
        for b in bufs:
            b.on_free(done)
        frame.metadata["frame_id"] = fid
        frame.metadata["sequence"] = hdr.seq
        if hdr.marker != NO_MARKER:
            frame.metadata["commit_marker"] = hdr.marker
        return frame

    def _slots_header(self, msg: bytes, n_fds: int) -> tuple[_Received, int, int, int | None]:
        """The checked layout of a SLOTS message, and its frame id, sequence and pts. A message without fds whose
        layout and references were seen before is not parsed again: only its per-frame fields are checked."""
        if n_fds:
            hdr = _parse_frame(msg, n_fds)
            return _Received(hdr), hdr.frame_id, hdr.seq, hdr.pts
        key = _layout_key(msg)
        rec = self._parsed.get(key)
        if rec is None:
            hdr = _parse_frame(msg, 0)
            if len(self._parsed) >= _PARSED_MAX:
                self._parsed.clear()
            # one lookup-free return: close() or another receiving thread may clear the cache right after the store
            rec = self._parsed[key] = _Received(hdr)
            return rec, hdr.frame_id, hdr.seq, hdr.pts
        fid, seq, pts = _per_frame(rec, msg)
        return rec, fid, seq, pts

    def _build_slots(self, rec: _Received, fid: int, seq: int, pts: int | None, fds: list[int]) -> Frame | None:
        hdr = rec.hdr
        table = self._table
        # From here on the handler below answers the frame (DONE, REFUSED); an interrupt before (at this function's
        # entry) leaves it to the caller, which reads this flag (a store: no point where CPython raises one).
        self._entered = True
        try:
            ctx = self._ctx
            if ctx is None:
                ctx = self._ctx = Context.default(MemoryType.DMA)
            if rec.version != table.version:  # new fds, or the table changed since this layout was resolved
                bufs: list[DMABuffer] = []
                k = 0
                for i, (index, rflags, gen) in enumerate(hdr.refs):
                    if rflags & REF_FD:
                        # the buffer marks fds[k] -1 as it takes the fd over (handed=: no gap for a Ctrl-C)
                        buf = buffer_from_fd(fds[k], size=hdr.sizes[i], take_ownership=True,
                                             require_sealed=self.require_sealed, handed=fds, at=k)
                        k += 1
                        bufs.append(table.install(index, gen, buf).buf)
                    else:
                        # checked against the table before (table.check), but another thread's close() or FORGET may
                        # have changed it since: a KeyError escaped here
                        e = table.entries.get(index)
                        if e is None or e.gen != gen or e.buf.size != hdr.sizes[i]:
                            raise ProtocolError(f"slot {index} generation {gen} was let go as this frame was handled "
                                                f"(a FORGET or close() on another thread): the frame is dropped")
                        bufs.append(e.buf)
                rec.bufs = tuple(bufs)
                rec.marker = bufs[0].marker_view(hdr.marker, False) if hdr.marker != NO_MARKER else None
                if not fds:  # a cached layout: valid until the table changes again
                    rec.version = table.version
            marker = rec.marker
            if marker is not None and not self.writer:
                mg, state, got = load_marker(marker[1])
                if mg != MARKER_MAGIC or state != MARKER_COMMITTED or got != seq:
                    self.torn += 1
                    log.warning("dropped frame %d: its writer did not finish it (marker state %d, seq %d, expected %d)",
                                fid, state, got, seq)
                    self._done.send(fid)
                    return None
            # from here on the lease sends this frame's DONE when the frame (or what is left of it) is gone
            lease = BufferLease(rec.bufs, self._done.send, fid)
        except BaseException as e:
            self._entered = False  # a Ctrl-C before the DONE below leaves the answer to the callers
            if fds and not self.closed:  # installs announced and not made (a refused fd): the producer sends them again
                self._refuse([(index, gen) for index, rflags, gen in hdr.refs if rflags & REF_FD])
            self._done.send(fid)
            self._entered = True
            if self.closed and isinstance(e, InteropError):  # closed meanwhile (see _message): recv() returns None
                return None
            raise
        planes = leased_planes(lease, rec.specs, hdr.fourcc, ctx)
        meta: dict[str, object] = {"frame_id": fid, "sequence": seq}
        if hdr.marker != NO_MARKER:
            meta["commit_marker"] = hdr.marker
        return trusted_frame(planes, hdr.format, hdr.width, hdr.height, context=ctx, native=None,
                             colorspace=hdr.colorspace, color_range=hdr.color_range, pts=pts,
                             time_base=hdr.time_base, metadata=meta, parent=None)

    @property
    def slots_held(self) -> int:
        """Buffers of the producer this receiver keeps open between frames (named by slot references)."""
        return len(self._table.entries)

    def close(self) -> None:
        """Disconnect. Frames still held stay valid; their DONE is not sent (the producer reclaims them at EOF).
        Buffers kept between frames are closed once no frame over them is held."""
        self.closed = True
        self._done.close()
        self._table.close()
        self._drop_layouts()  # their mappings: views handed out keep their own
        self._parsed.clear()
        # shut down before closing: close() alone wakes no thread blocked in recv()/recv_views() on this socket (the
        # call keeps the socket open), so that thread waited for ever and the producer never saw this consumer go
        with contextlib.suppress(OSError, ValueError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def __enter__(self) -> FrameReceiver:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def commit(frame: Frame) -> None:
    """Mark a received pool frame complete: for writer processes (``FrameReceiver(writer=True)``) that fill
    buffers of another process's pool. Call it after the last byte is written."""

    marker = frame.metadata.get("commit_marker")
    seq = frame.metadata.get("sequence")
    if marker is None:
        raise InvalidTensorError("this frame has no commit marker (it does not come from a FramePool over the transport)")
    buf = buffers_of(frame)[0]
    # metadata is a user-writable dict: check again what the receiver checked, right before the write
    if type(marker) is not int or type(seq) is not int or not 0 <= marker <= buf.size - MARKER_SIZE \
            or not 0 <= seq < 1 << 64:
        raise InvalidTensorError(f"commit marker offset {marker!r} (sequence {seq!r}) is not inside this frame's buffer "
                                 f"of {buf.size} bytes: do not change frame.metadata['commit_marker'] or ['sequence']")
    write_marker(buf.mapping(True).address, marker, MARKER_COMMITTED, seq)


class _DoneOnce:
    """Sends DONE when every buffer of one received frame is free."""

    def __init__(self, channel: _DoneChannel, fid: int, n: int):
        self.channel, self.fid, self.left = channel, fid, n
        self._count_lock = threading.Lock()  # buffers may be freed on different threads (GC, OpenVINO callbacks)

    def __call__(self) -> None:
        with self._count_lock:
            self.left -= 1
            last = self.left == 0
        if last:
            self.channel.send(self.fid)


def _fds_of(anc: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[: len(data) - len(data) % a.itemsize])
            fds.extend(a)
    return fds


def _hung_up(sock: socket.socket) -> bool:
    """Whether the peer closed (or shut down its side): a zero-length read is EOF only then, never when a peer sends
    an empty message."""
    try:
        p = select.poll()
        p.register(sock, select.POLLIN | select.POLLRDHUP)
        return any(ev & (select.POLLHUP | select.POLLRDHUP | select.POLLERR | select.POLLNVAL) for _, ev in p.poll(0))
    except (OSError, ValueError):
        return True


def _close_quiet(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


# ---- rendezvous by path --------------------------------------------------------------------------------


class ServerPathError(InteropError, OSError):
    """FrameServer(path) cannot listen at ``path`` (a missing directory, no permission, a path too long)."""


class PathInUseError(ServerPathError, FileExistsError):
    """FrameServer(path): something other than a stale socket is at ``path`` (a file, a live server's socket)."""


def _remove_stale_socket(path: str) -> None:
    """Remove ``path`` only if it is a socket nobody listens on; refuse anything else with PathInUseError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise ServerPathError(e.errno, f"cannot inspect {path}: {e.strerror}; pass another path") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise PathInUseError(errno.EEXIST, f"{path} exists and is not a socket: FrameServer will not remove it; "
                                           f"pass another path, or remove the file yourself if it is not needed")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    probe.setblocking(False)
    try:
        probe.connect(path)
    except ConnectionRefusedError:  # a socket file left by a process that is gone
        log.info("removing the stale socket %s (nobody listens on it)", path)
        os.unlink(path)
        return
    except BlockingIOError:  # a live listener whose backlog is full
        pass
    except OSError as e:  # a socket of another kind (EPROTOTYPE), no permission ...: not ours to remove
        raise PathInUseError(errno.EEXIST, f"{path} is a socket FrameServer cannot probe ({e.strerror}): it belongs to "
                                           f"another program; pass another path") from None
    finally:
        probe.close()
    raise PathInUseError(errno.EADDRINUSE, f"a live server is listening at {path}: stop it first, or pass another path")


class FrameServer:
    """A listening SOCK_SEQPACKET socket at ``path``; ``accept()`` gives a FrameSender per consumer.

    A stale socket at ``path`` (one nobody listens on, left by a process that died) is replaced; anything else there
    (a regular file, a live server's socket) raises PathInUseError and is left alone. ``close()`` removes the socket
    file only while it is still the one this server made."""

    def __init__(self, path: str, backlog: int = 4):
        self.path = os.fspath(path)
        _remove_stale_socket(self.path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.bind(self.path)
            self._sock.listen(backlog)
            self._sock.setblocking(False)  # accept() waits in select() with its timeout
            self._ino = os.stat(self.path).st_ino
        except OSError as e:
            self._sock.close()
            if e.errno == errno.EADDRINUSE:
                raise PathInUseError(errno.EADDRINUSE, f"{self.path} was taken while this server started: "
                                                       f"pass another path") from None
            raise ServerPathError(e.errno, f"cannot listen at {self.path}: {e.strerror or e}; pass a path in an "
                                           f"existing, writable directory (at most 107 bytes)") from None

    def accept(self, timeout: float | None = None) -> FrameSender:
        """Wait for a consumer (``connect(path)``) and return a FrameSender for it. None waits for ever, 0 polls;
        TransportTimeoutError (a TimeoutError) when none connected in time."""
        deadline = _deadline(timeout, "FrameServer.accept")
        while True:
            try:
                ready = _ready(self._sock, select.POLLIN, _left(deadline))
            except (OSError, ValueError):
                raise PeerClosedError(f"the FrameServer at {self.path} was closed") from None
            if not ready:
                raise TransportTimeoutError(f"no consumer connected to {self.path} within {timeout} s: start the "
                                            f"consumer (interop.transport.connect(path))")
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):  # taken by another thread, or gone
                continue
            try:  # a consumer that hung up before we accepted (or FrameServer's probe of a live path): skip it
                gone = conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                gone = False
            except OSError:
                gone = True
            if gone:
                conn.close()
                continue
            conn.setblocking(True)
            return FrameSender(conn)

    def close(self) -> None:
        self._sock.close()
        try:
            if os.stat(self.path).st_ino == self._ino:  # never remove a socket another server bound since
                os.unlink(self.path)
        except OSError:
            pass

    def __enter__(self) -> FrameServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(path: str, timeout: float | None = 10.0, *, require_sealed: bool = True) -> FrameReceiver:
    """Connect to a FrameServer at ``path``, waiting up to ``timeout`` s for it to appear and accept.

    PeerClosedError when nobody listens at ``path`` by then; TransportTimeoutError (a TimeoutError) when a server is
    there but never takes the connection (its backlog is full: it does not call accept())."""
    deadline = _deadline(timeout, "connect")
    path = os.fspath(path)
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.setblocking(False)  # a listener whose backlog is full makes a blocking connect wait for ever
        busy = False
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
        except BlockingIOError:
            s.close()
            busy = True
        except OSError as e:
            s.close()
            raise PeerClosedError(f"cannot connect to {path}: {e.strerror or e} (is it a FrameServer's socket?)") from None
        else:
            s.setblocking(True)
            return FrameReceiver(s, require_sealed=require_sealed)
        left = _left(deadline)
        if left == 0:
            if busy:
                raise TransportTimeoutError(f"the producer at {path} did not accept the connection within {timeout} s")
            raise PeerClosedError(f"no producer is listening at {path}: start it first")
        time.sleep(0.02 if left is None else min(0.02, left))


__all__ = ["FrameSender", "FrameReceiver", "FrameViews", "FrameServer", "connect", "commit", "seqpacket_pair", "PeerClosedError",
           "ProtocolError", "TransportTimeoutError", "InvalidTimeoutError", "ServerPathError", "PathInUseError"]
