"""Zero-copy frames across processes: DMA frames over a Unix socket (fds by SCM_RIGHTS, layout in a small header).

Protocol (SOCK_SEQPACKET, so a message arrives whole or not at all, with its fds):
- FRAME (producer -> consumer): header + one record per plane + the distinct buffer fds. The consumer rebuilds the
  frame zero-copy over the received fds (it owns them; they close when the frame is released).
- DONE (consumer -> producer): the consumer released frame ``frame_id``; the producer's buffers return to its pool.
A producer holds every buffer it sent until DONE or until the consumer is gone (EOF, reset): a consumer killed
mid-frame returns all its buffers to the producer's pool. Pool buffers carry a commit marker (state, sequence)
after the planes; the consumer checks it on receipt and drops (never delivers) a frame whose writer did not
finish (``torn`` counts them). A producer killed mid-write never sends; the consumer sees EOF (``recv`` -> None).
Memfds must be sealed against shrinking (``require_sealed``) so a peer cannot SIGBUS us by truncating them.
"""

from __future__ import annotations

import array
import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from fractions import Fraction
from types import TracebackType

from .errors import InteropError, InvalidTensorError
from .frame import Frame
from .info import TensorInfo
from .tensors.dma import (
    MARKER_COMMITTED,
    MARKER_MAGIC,
    DMABuffer,
    DMATensor,
    buffer_from_fd,
    buffers_of,
    dma_frame,
    read_marker,
)
from .types import ColorRange, ColorSpace, FrameFormat, MemoryType

log = logging.getLogger("interop")

MAGIC = b"IDMA"
VERSION = 1
MSG_FRAME, MSG_DONE = 1, 2
MAX_FDS = 8
NO_MARKER = (1 << 64) - 1

_HEAD = struct.Struct("<4sHHQQQ")  # magic, version, type, frame_id, seq, marker_offset
_FRAME = struct.Struct("<8sIIIBBBBqqqB")  # format, w, h, fourcc, planes, fds, colorspace, range, pts, tb num, den, flags
_PLANE = struct.Struct("<BB4s2xQQQ4Q4Q")  # fd index, ndim, dtype, offset, buffer size, modifier, shape[4], strides[4]
_CS = [None, *ColorSpace]
_CR = [None, *ColorRange]


class PeerClosedError(InteropError):
    """The process at the other end of the socket is gone (closed, crashed or killed)."""


class ProtocolError(InteropError):
    """A message that is not an interop frame transport message (wrong magic/version, truncated, too many fds)."""


# ---- encoding ------------------------------------------------------------------------------------------


def _encode_frame(frame_id: int, frame: Frame, bufs: list[DMABuffer], seq: int, marker: int) -> bytes:
    planes = [t for t in frame.tensors if isinstance(t, DMATensor)]
    if len(bufs) > MAX_FDS:
        raise InvalidTensorError(f"a frame over {len(bufs)} buffers cannot be sent (at most {MAX_FDS})")
    pts = frame.pts if frame.pts is not None else 0
    tb = frame.time_base
    flags = (frame.pts is not None) | (tb is not None) << 1
    out = [_HEAD.pack(MAGIC, VERSION, MSG_FRAME, frame_id, seq, marker),
           _FRAME.pack(frame.format.value.encode(), frame.width, frame.height, planes[0].drm_fourcc, len(planes),
                       len(bufs), _CS.index(frame.colorspace), _CR.index(frame.color_range), pts,
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


def _send_done(sock: socket.socket, lock: threading.Lock, frame_id: int) -> None:
    with lock:
        try:
            sock.send(_HEAD.pack(MAGIC, VERSION, MSG_DONE, frame_id, 0, NO_MARKER), socket.MSG_NOSIGNAL)
        except OSError:  # the producer is gone: nothing to return the buffer to
            pass


def seqpacket_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair of SOCK_SEQPACKET Unix sockets (for a producer and a consumer; pass one to a child)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


# ---- producer side -------------------------------------------------------------------------------------


class FrameSender:
    """Sends DMA frames to one consumer over a connected SOCK_SEQPACKET socket (this object owns the socket).

    Every buffer sent is held (kept out of its pool) until the consumer's DONE, or until the consumer is gone:
    a background thread reads DONE messages and notices a dead consumer, then returns everything it held.
    """

    def __init__(self, sock: socket.socket):
        if sock.type != socket.SOCK_SEQPACKET or sock.family != socket.AF_UNIX:
            raise InvalidTensorError("FrameSender needs a connected AF_UNIX SOCK_SEQPACKET socket "
                                     "(interop.transport.seqpacket_pair() or FrameServer.accept())")
        self._sock = sock
        self._lock = threading.Lock()
        self._returned = threading.Condition(self._lock)
        self._in_flight: dict[int, list[DMABuffer]] = {}
        self._next_id = 1
        self._closed = threading.Event()
        self.sent = 0
        self.returned = 0
        self._reader = threading.Thread(target=self._read_loop, name="interop-frame-sender", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """False once the consumer is gone or close() was called."""
        return not self._closed.is_set()

    @property
    def in_flight(self) -> int:
        """Frames sent and not yet released by the consumer."""
        with self._lock:
            return len(self._in_flight)

    def send(self, frame: Frame, *, commit: bool = True) -> int:
        """Send a DMA frame; returns its id. Its buffers stay held until the consumer releases the frame.

        ``commit=True`` (the usual case: this process wrote the frame) marks a pool frame complete first;
        with ``commit=False`` the commit marker is left as the writer set it (a writer in another process that
        died mid-write leaves WRITING, and the consumer then drops the frame).
        Raises PeerClosedError when the consumer is gone.
        """
        if not isinstance(frame, Frame) or frame.memory_type is not MemoryType.DMA:
            raise InvalidTensorError("send() takes a DMA Frame: interop.map(frame, MemoryType.DMA) or a FramePool frame")
        if self._closed.is_set():
            raise PeerClosedError("the consumer is gone (its socket closed); accept a new consumer")
        bufs = buffers_of(frame)
        seq, marker = 0, NO_MARKER
        slot = bufs[0].pool_slot
        if slot is not None and len(bufs) == 1:
            seq = slot.pool.commit(frame) if commit else slot.seq
            marker = slot.pool.marker_offset
        for b in bufs:
            b.use()
        with self._lock:
            fid = self._next_id
            self._next_id += 1
            self._in_flight[fid] = bufs
        try:
            msg = _encode_frame(fid, frame, bufs, seq, marker)
            fds = array.array("i", [b.fd for b in bufs])
            with self._lock:
                self._sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)], socket.MSG_NOSIGNAL)
        except BaseException as e:
            self._return(fid)
            if isinstance(e, OSError) and e.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
                self._closed.set()
                raise PeerClosedError(f"the consumer is gone ({e.strerror}); its buffers went back to the pool") from None
            raise
        self.sent += 1
        return fid

    def _return(self, fid: int) -> bool:
        with self._lock:
            bufs = self._in_flight.pop(fid, None)
        if bufs is None:
            return False
        for b in bufs:
            b.unuse()
        with self._returned:
            self._returned.notify_all()
        return True

    def _read_loop(self) -> None:
        try:
            while True:
                try:
                    data = self._sock.recv(64)
                except OSError:
                    break
                if not data:
                    break
                if len(data) < _HEAD.size:
                    continue
                magic, ver, kind, fid, _, _ = _HEAD.unpack_from(data)
                if magic == MAGIC and kind == MSG_DONE and self._return(fid):
                    self.returned += 1
        finally:
            self._closed.set()
            with self._lock:
                ids = list(self._in_flight)
            for fid in ids:
                self._return(fid)
            with self._returned:
                self._returned.notify_all()

    def wait_returned(self, timeout: float | None = None) -> bool:
        """Wait until every frame sent came back (released by the consumer, or reclaimed because it is gone)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._returned:
            while self._in_flight and not self._closed.is_set():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._returned.wait(left)
        if self._closed.is_set():
            self._reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.in_flight == 0

    def close(self) -> None:
        """Disconnect; every buffer still held for the consumer goes back to its pool."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._reader.join(5)
        self._sock.close()

    def __enter__(self) -> FrameSender:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


# ---- consumer side -------------------------------------------------------------------------------------


class FrameReceiver:
    """Receives DMA frames from one producer. ``recv()`` returns a Frame over the producer's memory (zero-copy),
    or None once the producer is gone. Release each frame when done (``with`` or ``release()``): that sends DONE
    and the producer reuses the buffer. Frames whose commit marker says the write did not finish are dropped
    (counted in ``torn``), never returned.
    """

    def __init__(self, sock: socket.socket, *, require_sealed: bool = True, writer: bool = False):
        if sock.type != socket.SOCK_SEQPACKET or sock.family != socket.AF_UNIX:
            raise InvalidTensorError("FrameReceiver needs a connected AF_UNIX SOCK_SEQPACKET socket "
                                     "(interop.transport.seqpacket_pair() or connect(path))")
        self._sock = sock
        self._lock = threading.Lock()
        self.require_sealed = require_sealed
        self.writer = writer  # a writer process receives empty buffers to fill: no commit check, commit() after
        self.received = 0
        self.torn = 0
        self.closed = False

    def recv(self, timeout: float | None = None) -> Frame | None:
        """The next complete frame; None when the producer is gone. TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.closed:
                return None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._sock], [], [], left)[0]:
                    raise TimeoutError(f"no frame within {timeout} s")
            try:
                msg, anc, flags, _ = self._sock.recvmsg(4096, socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC)
            except ConnectionResetError:
                msg, anc, flags = b"", [], 0
            fds = _fds_of(anc)
            if not msg and not fds:
                self.closed = True
                return None
            try:
                frame = self._build(msg, fds, flags)
            except BaseException:
                for fd in fds:  # what _build did not hand to a DMABuffer (it marks those -1 or drops them)
                    _close_quiet(fd)
                raise
            if frame is not None:
                self.received += 1
                return frame

    def _build(self, msg: bytes, fds: list[int], flags: int) -> Frame | None:
        if flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
            raise ProtocolError("a frame message was truncated (too many fds or too long): peer and library versions differ?")
        if len(msg) < _HEAD.size + _FRAME.size:
            raise ProtocolError(f"a message of {len(msg)} bytes is too short for a frame header")
        magic, ver, kind, fid, seq, marker = _HEAD.unpack_from(msg)
        if magic != MAGIC or ver != VERSION or kind != MSG_FRAME:
            raise ProtocolError(f"not an interop frame message (magic {magic!r}, version {ver}, type {kind})")
        fmt_b, w, h, code, n_planes, n_fds, cs, cr, pts, tb_n, tb_d, fl = _FRAME.unpack_from(msg, _HEAD.size)
        if n_fds != len(fds) or len(msg) < _HEAD.size + _FRAME.size + n_planes * _PLANE.size:
            raise ProtocolError(f"frame header announces {n_fds} fds and {n_planes} planes; got {len(fds)} fds")
        # ownership of the fds passes to DMABuffers one by one; the caller closes what is left on error
        bufs: list[DMABuffer] = []
        records = [_PLANE.unpack_from(msg, _HEAD.size + _FRAME.size + i * _PLANE.size) for i in range(n_planes)]
        try:
            fmt = FrameFormat(fmt_b.rstrip(b"\0").decode())
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError(f"unknown frame format {fmt_b!r} in a frame message") from None
        if any(r[0] >= n_fds or not 0 < r[1] <= 4 for r in records):
            raise ProtocolError("a plane record names an fd that was not sent, or has a bad number of dimensions")
        if cs >= len(_CS) or cr >= len(_CR):
            raise ProtocolError(f"unknown colorspace {cs} or color range {cr} in a frame message")
        if fl & 2 and tb_d == 0:
            raise ProtocolError("a frame message has a time base with a zero denominator")
        try:
            dtypes = [r[2].rstrip(b"\0").decode("ascii") for r in records]
        except UnicodeDecodeError:
            raise ProtocolError("a plane record has a dtype that is not an ASCII numpy type string") from None
        sizes = {r[0]: r[4] for r in records}
        try:
            for i, fd in enumerate(fds):
                bufs.append(buffer_from_fd(fd, size=sizes.get(i), take_ownership=True, require_sealed=self.require_sealed))
                fds[i] = -1
        except BaseException:
            for b in bufs:
                b.close()
            _send_done(self._sock, self._lock, fid)
            raise
        fds[:] = [fd for fd in fds if fd >= 0]
        if marker != NO_MARKER and not self.writer:
            m = bufs[0].mapping(False)
            mg, state, got = read_marker(m.address, marker) if marker + 16 <= bufs[0].size else (0, 0, 0)
            if mg != MARKER_MAGIC or state != MARKER_COMMITTED or got != seq:
                self.torn += 1
                log.warning("dropped frame %d: its writer did not finish it (marker state %d, seq %d, expected %d)",
                            fid, state, got, seq)
                for b in bufs:
                    b.close()
                _send_done(self._sock, self._lock, fid)
                return None
        done = _DoneOnce(self._sock, self._lock, fid, len(bufs))
        for b in bufs:
            b.on_free(done)
        try:
            planes = []
            for (idx, ndim, _dt, off, _size, mod, *rest), dt in zip(records, dtypes):
                info = TensorInfo(tuple(rest[:ndim]), dt, tuple(rest[4:4 + ndim]))
                planes.append(DMATensor(bufs[idx], info, offset=off, drm_fourcc=code, drm_modifier=mod))
            frame = dma_frame(planes, fmt, w, h,
                              colorspace=_CS[cs], color_range=_CR[cr], pts=pts if fl & 1 else None,
                              time_base=Fraction(tb_n, tb_d) if fl & 2 else None)
        except BaseException:
            for b in bufs:
                if b.users == 0:
                    b.close()
            _send_done(self._sock, self._lock, fid)
            raise
        frame.metadata["frame_id"] = fid
        frame.metadata["sequence"] = seq
        if marker != NO_MARKER:
            frame.metadata["commit_marker"] = marker
        return frame

    def close(self) -> None:
        self.closed = True
        self._sock.close()

    def __enter__(self) -> FrameReceiver:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def commit(frame: Frame) -> None:
    """Mark a received pool frame complete: for writer processes (``FrameReceiver(writer=True)``) that fill
    buffers of another process's pool. Call it after the last byte is written."""
    from .tensors.dma import MARKER_COMMITTED, write_marker

    marker = frame.metadata.get("commit_marker")
    if marker is None:
        raise InvalidTensorError("this frame has no commit marker (it does not come from a FramePool over the transport)")
    buf = buffers_of(frame)[0]
    write_marker(buf.mapping(True).address, marker, MARKER_COMMITTED, frame.metadata["sequence"])


class _DoneOnce:
    """Sends DONE when every buffer of one received frame is free."""

    def __init__(self, sock: socket.socket, lock: threading.Lock, fid: int, n: int):
        self.sock, self.lock, self.fid, self.left = sock, lock, fid, n
        self._count_lock = threading.Lock()  # buffers may be freed on different threads (GC, OpenVINO callbacks)

    def __call__(self) -> None:
        with self._count_lock:
            self.left -= 1
            last = self.left == 0
        if last:
            _send_done(self.sock, self.lock, self.fid)


def _fds_of(anc: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[: len(data) - len(data) % a.itemsize])
            fds.extend(a)
    return fds


def _close_quiet(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


# ---- rendezvous by path --------------------------------------------------------------------------------


class FrameServer:
    """A listening SOCK_SEQPACKET socket at ``path``; ``accept()`` gives a FrameSender per consumer."""

    def __init__(self, path: str, backlog: int = 4):
        self.path = path
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.bind(path)
        self._sock.listen(backlog)

    def accept(self, timeout: float | None = None) -> FrameSender:
        self._sock.settimeout(timeout)
        try:
            conn, _ = self._sock.accept()
        except TimeoutError:
            raise TimeoutError(f"no consumer connected to {self.path} within {timeout} s") from None
        conn.settimeout(None)
        return FrameSender(conn)

    def close(self) -> None:
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def __enter__(self) -> FrameServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(path: str, timeout: float = 10.0, *, require_sealed: bool = True) -> FrameReceiver:
    """Connect to a FrameServer at ``path`` (waiting up to ``timeout`` s for it to appear)."""
    deadline = time.monotonic() + timeout
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(path)
            return FrameReceiver(s, require_sealed=require_sealed)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            s.close()
            if time.monotonic() > deadline:
                raise PeerClosedError(f"no producer is listening at {path}: start it first") from e
            time.sleep(0.02)


__all__ = ["FrameSender", "FrameReceiver", "FrameServer", "connect", "commit", "seqpacket_pair", "PeerClosedError",
           "ProtocolError"]
