"""A fuzzer over every field of every frame-transport message.

FRAME messages (each header field, each field of each plane record, the message length, the fds that come with it)
are mutated and sent to a reader and to a writer receiver: each either builds a valid frame (every plane inside its
buffer, shapes agreeing with width/height and format; a writer's commit() lands inside the buffer) or raises an
InteropError subclass: never another exception, a crash or a hang; the process's fd count stays flat. DONE messages
(each field, the length, fds attached) are mutated and sent to a FrameSender: it returns a frame only for a valid DONE
of a frame in flight, keeps running, and keeps no fd.

SLOTS messages (the same fields, plus each buffer reference's slot index, flags and generation, and the fds that
come with them) go to a receiver whose slot table holds the buffers they name: each builds a valid frame over the
buffers of its slots or raises an InteropError; the receiver's fds change only by the slots it installed or let go.
FORGET messages (each field, the length, fds attached) forget the slot they name exactly, or raise a ProtocolError.
REFUSED messages (consumer -> producer; each field, the length, fds attached) make the sender send the fd of the
buffer they name again only when they are valid and name its slot's current generation; the sender keeps running
and keeps no fd.
"""

from __future__ import annotations

import array
import os
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interop import FrameFormat, InteropError
from interop.info import plane_infos
from interop.native import dmabuf as nd
from interop.tensors.dma import (
    MARKER_COMMITTED,
    MARKER_SIZE,
    DMAContext,
    FramePool,
    buffers_of,
    frame_from_fds,
    read_marker,
)
from interop.transport import (
    _FRAME,
    _HEAD,
    _PLANE,
    _REF,
    MAGIC,
    MSG_DONE,
    NO_MARKER,
    REF_FD,
    VERSION,
    FrameReceiver,
    FrameSender,
    FrameViews,
    TransportTimeoutError,
    _encode_frame,
    _encode_slots,
    _forget_message,
    _refused_message,
    commit,
    seqpacket_pair,
)
from tests.test_transport_resync import _done, _take

SETTINGS = settings(max_examples=400, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))

# (name, offset inside its struct, struct code): every field of the header, the frame part and a plane record
HEAD_FIELDS = [("magic", 0, "4s"), ("version", 4, "H"), ("type", 6, "H"), ("frame_id", 8, "Q"), ("seq", 16, "Q"),
               ("marker", 24, "Q")]
FRAME_FIELDS = [("format", 0, "8s"), ("width", 8, "I"), ("height", 12, "I"), ("fourcc", 16, "I"), ("planes", 20, "B"),
                ("fds", 21, "B"), ("colorspace", 22, "B"), ("range", 23, "B"), ("pts", 24, "q"), ("tb_num", 32, "q"),
                ("tb_den", 40, "q"), ("flags", 48, "B")]
PLANE_FIELDS = [("fd_index", 0, "B"), ("ndim", 1, "B"), ("dtype", 2, "4s"), ("pad", 6, "2s"), ("offset", 8, "Q"),
                ("size", 16, "Q"), ("modifier", 24, "Q")] + \
               [(f"shape{i}", 32 + 8 * i, "Q") for i in range(4)] + [(f"stride{i}", 64 + 8 * i, "Q") for i in range(4)]
assert struct.calcsize("<" + "".join(c for _, _, c in FRAME_FIELDS)) == _FRAME.size
assert max(o + struct.calcsize(c) for _, o, c in PLANE_FIELDS) == _PLANE.size


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _int_values(code: str) -> st.SearchStrategy[int]:
    bits = struct.calcsize(code) * 8
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if code.islower() else (0, (1 << bits) - 1)
    special = [v for v in (0, 1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 24, 32, 63, 64, 255, 256, 4095, 4096, 1 << 31, 1 << 32,
                           1 << 40, 1 << 62, 1 << 63, -1, -(1 << 62), hi, hi - 15, lo) if lo <= v <= hi]
    return st.one_of(st.sampled_from(special), st.integers(lo, hi))


def _bytes_values(code: str) -> st.SearchStrategy[bytes]:
    n = struct.calcsize(code)
    names = [s.encode().ljust(n, b"\0")[:n] for s in ("NV12", "I420", "GRAY8", "RGB", "P010", "BGRX", "|u1", "<u2",
                                                     "|O", "<f8", "|b1", "IDMA", "IDMB", "")]
    return st.one_of(st.sampled_from(names), st.binary(min_size=n, max_size=n))


@st.composite
def _field_mutation(draw, n_planes: int):
    """(absolute offset, struct code, new value) for one field of the FRAME message."""
    where = draw(st.sampled_from(["head", "frame"] + ["plane"] * 3))
    if where == "head":
        name, off, code = draw(st.sampled_from(HEAD_FIELDS))
        base = 0
    elif where == "frame":
        name, off, code = draw(st.sampled_from(FRAME_FIELDS))
        base = _HEAD.size
    else:
        name, off, code = draw(st.sampled_from(PLANE_FIELDS))
        base = _HEAD.size + _FRAME.size + _PLANE.size * draw(st.integers(0, n_planes - 1))
    value = draw(_bytes_values(code) if code.endswith("s") else _int_values(code))
    return base + off, code, value


def _patch(msg: bytearray, at: int, code: str, value: object) -> None:
    struct.pack_into("<" + code, msg, at, value)


class _Bases:
    """Valid FRAME messages to mutate, with the fds they travel with."""

    def __init__(self) -> None:
        self.pool = FramePool(FrameFormat.NV12, 16, 12, 1)
        self.pool_frame = self.pool.acquire()
        seq = self.pool.commit(self.pool_frame)
        self.y, self.uv = nd.memfd_alloc(16 * 12), nd.memfd_alloc(16 * 6)
        self.two_fd = frame_from_fds([self.y, self.uv], FrameFormat.NV12, 16, 12)
        self.i420 = DMAContext().alloc_frame(FrameFormat.I420, 18, 10, pitch_align=32)
        self.messages = []
        for fr, s, m in ((self.pool_frame, seq, self.pool.marker_offset), (self.two_fd, 0, NO_MARKER),
                         (self.i420, 0, NO_MARKER)):
            bufs = buffers_of(fr)
            self.messages.append((_encode_frame(7, fr, bufs, s, m), [b.fd for b in bufs], len(fr.tensors)))

    def close(self) -> None:
        for f in (self.pool_frame, self.two_fd, self.i420):
            f.release()
        self.pool.close()
        os.close(self.y)
        os.close(self.uv)


@pytest.fixture(scope="module")
def rig():
    bases = _Bases()
    a, b = seqpacket_pair()
    aw, bw = seqpacket_pair()
    rx, rxw = FrameReceiver(b), FrameReceiver(bw, writer=True)
    rx._done.start()  # the flusher thread exists before the fd counts are taken
    rxw._done.start()
    yield bases, (a, rx), (aw, rxw)
    rx.close()
    rxw.close()
    a.close()
    aw.close()
    bases.close()


def _extra_fd(kind: str) -> tuple[int, list[int]]:
    """An fd of some kind to slip into a message; returns it and the fds to close afterwards."""
    if kind == "pipe":
        r, w = os.pipe()
        return r, [r, w]
    if kind == "unsealed":
        fd = os.memfd_create("fuzz")
        os.ftruncate(fd, 1 << 16)
        return fd, [fd]
    if kind == "small":
        fd = nd.memfd_alloc(16)
        return fd, [fd]
    fd = nd.memfd_alloc(1 << 16)  # "big": sealed, larger than any plane
    return fd, [fd]


def _drain(sock: socket.socket) -> None:
    while True:
        try:
            sock.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return


def _check_frame(frame, writer: bool) -> None:
    """A frame the receiver built is valid: planes inside their buffers, shapes from width/height and format."""
    want = plane_infos(frame.format, frame.width, frame.height, [t.info.strides[0] for t in frame.tensors])
    for t, w in zip(frame.tensors, want):
        assert t.info.shape == w.shape and t.info.dtype == w.dtype and t.info.strides == w.strides
        assert 0 <= t.offset and t.offset + t.info.extent <= t.buffer.size <= os.fstat(t.fd).st_size
    marker = frame.metadata.get("commit_marker")
    if marker is not None:
        buf = buffers_of(frame)[0]
        assert 0 <= marker <= buf.size - MARKER_SIZE
        if writer:
            commit(frame)
            _, state, seq = read_marker(buf.mapping(False).address, marker)
            assert state == MARKER_COMMITTED and seq == frame.metadata["sequence"]


@SETTINGS
@given(data=st.data())
def test_mutated_frame_messages_build_valid_frames_or_raise_interop_errors(rig, data):
    bases, (a, rx), (aw, rxw) = rig
    which = data.draw(st.integers(0, len(bases.messages) - 1))
    msg0, fds0, n_planes = bases.messages[which]
    writer = data.draw(st.booleans())
    tx_sock, r = (aw, rxw) if writer else (a, rx)
    msg = bytearray(msg0)
    # mostly one kind of damage at a time, so that most messages get past the first check they would fail
    kinds = data.draw(st.sampled_from(["fields"] * 8 + ["length", "fds", "fields+fds", "all"]))
    if "fields" in kinds or kinds == "all":
        for at, code, value in data.draw(st.lists(_field_mutation(n_planes), min_size=1, max_size=3)):
            _patch(msg, at, code, value)
    if kinds in ("length", "all"):
        cut = data.draw(st.one_of(st.integers(0, len(msg) - 1), st.integers(len(msg) + 1, len(msg) + 200)))
        msg = msg[:cut] if cut < len(msg) else msg + bytes(cut - len(msg))
    fds = list(fds0)
    to_close: list[int] = []
    fd_op = "same" if "fds" not in kinds and kinds != "all" else \
        data.draw(st.sampled_from(["drop", "swap", "dup", "pipe", "unsealed", "small", "big", "replace_small",
                                   "replace_big"]))
    if fd_op == "drop" and fds:
        fds.pop()
    elif fd_op == "swap":
        fds.reverse()
    elif fd_op == "dup":
        fds.append(fds[0])
    elif fd_op in ("pipe", "unsealed", "small", "big"):
        fd, close = _extra_fd(fd_op)
        to_close += close
        fds.insert(data.draw(st.integers(0, len(fds))), fd)
    elif fd_op.startswith("replace_"):
        fd, close = _extra_fd(fd_op.split("_")[1])
        to_close += close
        fds[0] = fd

    n = _fd_count()
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    tx_sock.sendmsg([bytes(msg)], anc)
    for fd in to_close:
        os.close(fd)
    torn = r.torn
    t = time.monotonic()
    try:
        frame = r.recv(timeout=0)  # the message is queued: recv polls it, never waits
    except TransportTimeoutError:
        assert r.torn == torn + 1, "recv found nothing although a message was queued"
        frame = None
    except InteropError:
        frame = None
    assert time.monotonic() - t < 2
    if frame is not None:
        _check_frame(frame, writer)
        frame.release()
    _drain(tx_sock)
    assert _fd_count() == n - len(to_close), "a received fd was kept"
    assert not r.closed


def test_unmutated_messages_build():
    bases = _Bases()
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    for msg, fds, _ in bases.messages:
        a.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        g = rx.recv(timeout=5)
        _check_frame(g, False)
        g.release()
    rx.close()
    a.close()
    bases.close()


DONE_FIELDS = HEAD_FIELDS


@pytest.fixture(scope="module")
def sender():
    a, b = seqpacket_pair()
    tx = FrameSender(a)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    yield tx, b, f
    tx.close()
    b.close()
    f.release()


def _take_frame(b: socket.socket) -> int:
    """Read the FRAME message the sender sent (closing its fds); returns its id."""
    msg, anc, _, _ = b.recvmsg(4096, socket.CMSG_SPACE(64))
    for level, kind, data in anc:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            for fd in array.array("i", data[: len(data) - len(data) % 4]):
                os.close(fd)
    return struct.unpack_from("<4sHHQ", msg)[3]


@SETTINGS
@given(data=st.data())
def test_mutated_done_messages_never_return_a_wrong_frame_or_keep_an_fd(sender, data):
    tx, b, f = sender
    if tx.in_flight == 0:
        tx.send(f)
        tx._fuzz_fid = _take_frame(b)  # type: ignore[attr-defined]
    fid = tx._fuzz_fid  # type: ignore[attr-defined]
    msg = bytearray(_HEAD.pack(MAGIC, VERSION, MSG_DONE, fid, 0, NO_MARKER))
    for _ in range(data.draw(st.integers(0, 2))):
        name, off, code = data.draw(st.sampled_from(DONE_FIELDS))
        _patch(msg, off, code, data.draw(_bytes_values(code) if code.endswith("s") else _int_values(code)))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(msg) - 1), st.integers(len(msg) + 1, len(msg) + 64)))
    if cut is not None:
        msg = msg[:cut] if cut < len(msg) else msg + bytes(cut - len(msg))
    n_fds = data.draw(st.integers(0, 3))
    extra = [nd.memfd_alloc(64) for _ in range(n_fds)]
    n = _fd_count()
    before = tx.returned + tx.bad_messages
    b.sendmsg([bytes(msg)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", extra))] if extra else [])
    for fd in extra:
        os.close(fd)
    deadline = time.monotonic() + 5
    while tx.returned + tx.bad_messages == before and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert tx.returned + tx.bad_messages == before + 1, "the sender did not handle the message"
    valid = not extra and bytes(msg) == _HEAD.pack(MAGIC, VERSION, MSG_DONE, fid, 0, NO_MARKER)
    assert tx.in_flight == (0 if valid else 1)
    assert tx.alive
    assert _fd_count() == n - n_fds, "the sender kept an fd a consumer attached"


# ---- SLOTS and FORGET ----------------------------------------------------------------------------------

REF_FIELDS = [("index", 0, "I"), ("flags", 4, "I"), ("generation", 8, "Q")]
assert max(o + struct.calcsize(c) for _, o, c in REF_FIELDS) == _REF.size


class _SlotBases(_Bases):
    """The same frames as SLOTS messages: installs (fds attached) and references to the installed slots."""

    INSTALLED = {0: 1, 1: 1, 2: 1, 3: 1}  # slot -> generation the receiver holds before each example

    def __init__(self) -> None:
        super().__init__()
        self.installs = []
        self.slot_messages = []
        frames = ((self.pool_frame, self.pool.commit(self.pool_frame), self.pool.marker_offset, [0]),
                  (self.two_fd, 0, NO_MARKER, [1, 2]), (self.i420, 0, NO_MARKER, [3]))
        for fr, s, m, idx in frames:
            bufs = buffers_of(fr)
            fds = [b.fd for b in bufs]
            n = len(fr.tensors)
            self.installs.append((_encode_slots(7, fr, bufs, s, m, [(i, REF_FD, 1) for i in idx]), fds))
            self.slot_messages.append((_encode_slots(7, fr, bufs, s, m, [(i, 0, 1) for i in idx]), [], n, len(idx)))
            # a new generation of the same slots, with the fds (replaces what the receiver holds)
            self.slot_messages.append((_encode_slots(7, fr, bufs, s, m, [(i, REF_FD, 2) for i in idx]), fds, n,
                                       len(idx)))
            # fresh slots, with the fds
            self.slot_messages.append((_encode_slots(7, fr, bufs, s, m, [(i + 100, REF_FD, 1) for i in idx]), fds, n,
                                       len(idx)))


@pytest.fixture(scope="module")
def slot_rig():
    bases = _SlotBases()
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    yield bases, a, rx
    rx.close()
    a.close()
    bases.close()


def _reset_slots(bases: _SlotBases, a: socket.socket, rx: FrameReceiver) -> None:
    """Put the receiver's slot table back to the installed state (an earlier example may have replaced slots)."""
    table = rx._table
    if {i: e.gen for i, e in table.entries.items()} == _SlotBases.INSTALLED:
        return
    table.close()
    for msg, fds in bases.installs:
        a.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        rx.recv(timeout=5).release()
    _drain(a)
    assert {i: e.gen for i, e in table.entries.items()} == _SlotBases.INSTALLED


@st.composite
def _slot_mutation(draw, n_planes: int, n_refs: int):
    """(absolute offset, struct code, new value) for one field of a SLOTS message, reference fields included."""
    if draw(st.integers(0, 2)) == 0:
        name, off, code = draw(st.sampled_from(REF_FIELDS))
        at = _HEAD.size + _FRAME.size + _PLANE.size * n_planes + _REF.size * draw(st.integers(0, n_refs - 1)) + off
        if name == "index":
            value = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 100, 101, 103, 255, 256, 1 << 31]), _int_values(code)))
        elif name == "generation":
            value = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 1 << 63]), _int_values(code)))
        else:
            value = draw(st.one_of(st.sampled_from([0, REF_FD, 2, 3]), _int_values(code)))
        return at, code, value
    return draw(_field_mutation(n_planes))


def _check_views(views, rx: FrameReceiver) -> None:
    """Views recv_views() gave are valid: each plane's bytes inside the mapping of a buffer the receiver holds in its
    slot table, shapes and dtype from width/height and format, a commit marker inside the buffer."""
    want = plane_infos(views.format, views.width, views.height, [p.strides[0] for p in views.planes])
    spans = []
    for e in rx._table.entries.values():
        m = e.buf.mapping(False)
        spans.append((m.address, m.address + e.buf.size))
    within = []
    for p, w in zip(views.planes, want, strict=True):
        assert p.shape == w.shape and p.dtype == w.dtype and p.strides == w.strides and not p.flags.writeable
        start = p.__array_interface__["data"][0]
        end = start + w.extent
        within.append([(lo, hi) for lo, hi in spans if lo <= start and end <= hi])
        assert within[-1], "a view outside every slot buffer"
    marker = views.metadata.get("commit_marker")
    if marker is not None:  # pool frames: one buffer, the marker inside it
        lo, hi = within[0][0]
        assert 0 <= marker <= hi - lo - MARKER_SIZE


@SETTINGS
@given(data=st.data())
@pytest.mark.parametrize("how", ["recv", "recv_views"])
def test_mutated_slot_messages_build_valid_frames_or_raise_interop_errors(slot_rig, how, data):
    """``recv_views``: the receiver has taken the unmutated message's layout by its fast path first (when it
    travels without fds), so a mutated one is compared with a known layout before anything else."""
    bases, a, rx = slot_rig
    _reset_slots(bases, a, rx)
    msg0, fds0, n_planes, n_refs = data.draw(st.sampled_from(bases.slot_messages))
    if how == "recv_views" and not fds0:
        for _ in range(2):  # the first learns the layout (general path), the second takes the fast path
            a.send(msg0)
            rx.recv_views(timeout=5).release()
        assert any(lay is not None for lay in rx._view_layouts)
        _drain(a)
    msg = bytearray(msg0)
    kinds = data.draw(st.sampled_from(["fields"] * 8 + ["length", "fds", "fields+fds"]))
    if "fields" in kinds:
        for at, code, value in data.draw(st.lists(_slot_mutation(n_planes, n_refs), min_size=1, max_size=3)):
            _patch(msg, at, code, value)
    if kinds == "length":
        cut = data.draw(st.one_of(st.integers(0, len(msg) - 1), st.integers(len(msg) + 1, len(msg) + 64)))
        msg = msg[:cut] if cut < len(msg) else msg + bytes(cut - len(msg))
    fds = list(fds0)
    to_close: list[int] = []
    if "fds" in kinds:
        op = data.draw(st.sampled_from(["drop", "add_own", "pipe", "unsealed", "small", "big"]))
        if op == "drop" and fds:
            fds.pop()
        elif op == "add_own":
            fds.append(bases.installs[0][1][0])
        elif op != "drop":
            fd, close = _extra_fd(op)
            to_close += close
            fds.insert(data.draw(st.integers(0, len(fds))), fd)
    n = _fd_count()
    held = len(rx._table.entries)
    a.sendmsg([bytes(msg)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
    for fd in to_close:
        os.close(fd)
    torn = rx.torn
    t = time.monotonic()
    try:
        frame = rx.recv(timeout=0) if how == "recv" else rx.recv_views(timeout=0)
    except TransportTimeoutError:
        assert rx.torn == torn + 1, "recv found nothing although a message was queued"
        frame = None
    except InteropError:
        frame = None
    assert time.monotonic() - t < 2
    if isinstance(frame, FrameViews):
        _check_views(frame, rx)
        frame.release()
    elif frame is not None:
        _check_frame(frame, False)
        slot_bufs = {id(e.buf) for e in rx._table.entries.values()}
        assert all(id(t.buffer) in slot_bufs for t in frame.tensors), "a frame over a buffer of no slot"
        frame.release()
    _drain(a)
    installed = len(rx._table.entries) - held  # replaced slots close their old fd: only new slots add one
    assert _fd_count() == n - len(to_close) + installed, "a received fd was kept beyond the slots installed"
    assert not rx.closed


def _mutated_note(msg: bytearray, data) -> bytearray:
    """A FORGET or REFUSED message (a header and one reference) with up to two fields changed, maybe cut or lengthened."""
    for _ in range(data.draw(st.integers(0, 2))):
        if data.draw(st.booleans()):
            name, off, code = data.draw(st.sampled_from(HEAD_FIELDS))
        else:
            name, off, code = data.draw(st.sampled_from(REF_FIELDS))
            off += _HEAD.size
        if off + struct.calcsize(code) <= len(msg):
            _patch(msg, off, code, data.draw(_bytes_values(code) if code.endswith("s") else _int_values(code)))
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(msg) - 1), st.integers(len(msg) + 1, len(msg) + 64)))
    if cut is not None:
        msg = msg[:cut] if cut < len(msg) else msg + bytes(cut - len(msg))
    return msg


@SETTINGS
@given(data=st.data())
def test_mutated_forget_messages_forget_exactly_their_slot_or_raise(slot_rig, data):
    bases, a, rx = slot_rig
    _reset_slots(bases, a, rx)
    index = data.draw(st.sampled_from([0, 1, 2, 3, 7]))
    msg = _mutated_note(bytearray(_forget_message(index, 1)), data)
    extra = [nd.memfd_alloc(64) for _ in range(data.draw(st.integers(0, 2)))]
    before = {i: e.gen for i, e in rx._table.entries.items()}
    n = _fd_count()
    a.sendmsg([bytes(msg)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", extra))] if extra else [])
    for fd in extra:
        os.close(fd)
    try:
        rx.recv(timeout=0)
        raise AssertionError("a FORGET message gave a frame")
    except TransportTimeoutError:
        pass
    except InteropError:
        pass
    after = {i: e.gen for i, e in rx._table.entries.items()}
    gone = set(before) - set(after)
    expect: set[int] = set()
    if not extra and len(msg) == _HEAD.size + _REF.size:
        i, _, g = _REF.unpack_from(msg, _HEAD.size)
        if bytes(msg) == _forget_message(i, g) and before.get(i) == g:  # a valid FORGET, maybe of another slot
            expect = {i}
    assert gone == expect, "a FORGET let go of a slot it does not name, or kept the one it names"
    assert _fd_count() == n - len(extra) - len(gone)
    assert not rx.closed


# ---- REFUSED (consumer -> producer) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def refusing_consumer():
    a, b = seqpacket_pair()
    tx = FrameSender(a, slots=8)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    yield tx, b, f
    tx.close()
    b.close()
    f.release()


def _round_trip(tx: FrameSender, b: socket.socket, f) -> tuple[int, int, bool]:
    """Send ``f`` and give it back as a consumer would: (slot index, generation, whether its fd came)."""
    tx.send(f)
    fid, index, gen, n = _take(b)
    _done(b, fid)
    assert tx.wait_returned(5)
    return index, gen, bool(n)


@SETTINGS
@given(data=st.data())
def test_mutated_refused_messages_resend_only_the_slot_they_name(refusing_consumer, data):
    tx, b, f = refusing_consumer
    i, g, _ = _round_trip(tx, b, f)  # the slot and generation the consumer holds f's buffer under
    index = data.draw(st.sampled_from([i, (i + 1) % 8, 8, 255, 256]))
    gen = data.draw(st.sampled_from([g, g + 1, max(g - 1, 1), 0]))
    msg = _mutated_note(bytearray(_refused_message(index, gen)), data)
    extra = [nd.memfd_alloc(64) for _ in range(data.draw(st.integers(0, 2)))]
    n = _fd_count()
    refused, bad = tx.refused, tx.bad_messages
    b.sendmsg([bytes(msg)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", extra))] if extra else [])
    for fd in extra:
        os.close(fd)
    deadline = time.monotonic() + 5
    while tx.refused + tx.bad_messages == refused + bad and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert tx.refused + tx.bad_messages == refused + bad + 1, "the sender did not handle the message"
    valid = False
    if not extra and len(msg) == _HEAD.size + _REF.size:
        ri, _, rg = _REF.unpack_from(msg, _HEAD.size)
        valid = bytes(msg) == _refused_message(ri, rg) and ri < 8 and rg != 0  # a sender of 8 slots
    assert tx.refused == refused + valid
    applied = valid and (ri, rg) == (i, g)
    i2, g2, fd_again = _round_trip(tx, b, f)
    assert fd_again == applied, "the fd went again for a REFUSED that does not name its slot, or not for one that does"
    assert g2 > g if applied else (i2, g2) == (i, g)
    assert tx.alive
    assert _fd_count() == n - len(extra), "the sender kept an fd a consumer attached"
