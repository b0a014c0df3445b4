"""Producer and consumer stay in step when the consumer refuses a slot install, and a Ctrl-C never closes a received
fd twice nor leaves a use counted.

- A consumer that refuses the fd of a SLOTS message (an unsealed memfd, fds cut off because it ran out of them, the
  second fd of a message failing) tells the producer (a REFUSED message, before the frame's DONE): the producer sends
  that buffer's fd again with its next frame. Before, the producer believed the consumer held the fd, and every
  later frame over that buffer was refused as "not one this consumer was sent" until the slot was reassigned: one
  transient EMFILE broke a pool buffer for good. A REFUSED message is untrusted input to the producer.
- A Ctrl-C as buffer_from_fd(take_ownership=True) returned left the received fd's entry unmarked: the receiver closed
  an fd the new buffer's finaliser closed again (by then maybe another file's number). Swept over every interrupt
  point of the receive path (see tests/test_locks_sigint.py).
- A Ctrl-C at the second buffer's use() in FrameSender.send() left the first buffer's use counted for good.
"""

from __future__ import annotations

import array
import gc
import os
import resource
import socket
import struct
import sys
import threading
import weakref
from typing import Any

import pytest

import tests.test_locks_sigint as sigint
from interop import FrameFormat, InvalidTensorError
from interop.native import dmabuf as nd
from interop.tensors.dma import (
    DMABuffer,
    DMAContext,
    FramePool,
    buffer_from_fd,
    buffers_of,
    frame_from_fds,
    live_buffers,
)
from interop.transport import (
    _HEAD,
    _REF,
    MAGIC,
    MSG_DONE,
    NO_MARKER,
    REF_FD,
    VERSION,
    FrameReceiver,
    FrameSender,
    ProtocolError,
    _encode_frame,
    _encode_slots,
    _SlotTable,
    seqpacket_pair,
)
from tests.test_locks_sigint import _counting, _sweep
from tests.test_transport_review import _settle


def _refused_message(index: int, gen: int) -> bytes:
    """The REFUSED message (consumer -> producer), written out here: the wire format is what is tested."""
    return _HEAD.pack(MAGIC, VERSION, 5, 0, 0, NO_MARKER) + _REF.pack(index, 0, gen)


def _unsealed_frame(fmt: FrameFormat = FrameFormat.GRAY8, w: int = 16, h: int = 16):
    fd = os.memfd_create("unsealed")  # a peer could truncate it: a consumer that requires seals refuses it
    os.ftruncate(fd, w * h * 2)
    try:
        return frame_from_fds(fd, fmt, w, h)
    finally:
        os.close(fd)


def _pair():
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    rx._done.start()
    return tx, rx


# ---- a refused install is sent again --------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["recv", "recv_views"])
def test_a_refused_install_goes_again_with_the_next_frame_over_that_buffer(how):
    tx, rx = _pair()
    f = _unsealed_frame()
    try:
        tx.send(f)
        with pytest.raises(InvalidTensorError, match="unsealed"):
            getattr(rx, how)(timeout=5)
        assert tx.wait_returned(5), "the refused frame's DONE did not come"
        assert rx.slots_held == 0
        rx.require_sealed = False  # the cause is gone (here: the consumer accepts unsealed memory now)
        for _ in range(3):
            tx.send(f)
            got = getattr(rx, how)(timeout=5)  # before: "slot 0 generation 1 is not one this consumer was sent"
            assert got is not None
            got.release()
            assert tx.wait_returned(5)
        assert tx.fds_sent == 2 and rx.fds_received == 2, "the fd went once more, then frames went by reference"
        assert rx.slots_held == 1
        assert tx.refused == 1
    finally:
        f.release()
        tx.close()
        rx.close()


def test_fds_cut_off_by_emfile_are_sent_again_once_fds_are_free():
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    tx, rx = _pair()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        f = pool.acquire(timeout=5)
        tx.send(f)
        f.release()
        lowest = os.dup(0)
        os.close(lowest)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))  # no fd can be opened: SCM_RIGHTS is cut off
        try:
            with pytest.raises(ProtocolError, match="ran out of fds"):
                rx.recv(timeout=5)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert tx.wait_returned(5)
        for value in range(3):
            f = pool.acquire(timeout=5)
            tx.send(f)
            f.release()
            g = rx.recv(timeout=5)  # before: a ProtocolError for every frame of this buffer, for good
            assert g.metadata["frame_id"] == 2 + value
            g.release()
            assert tx.wait_returned(5)
        assert tx.refused == 1 and tx.fds_sent == 2 and rx.slots_held == 1
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        tx.close()
        rx.close()
        pool.close()


def test_a_second_fd_refused_goes_again_alone():
    y = nd.memfd_alloc(16 * 12)  # sealed
    uv = os.memfd_create("unsealed-uv")
    os.ftruncate(uv, 16 * 6)
    f = frame_from_fds([y, uv], FrameFormat.NV12, 16, 12)
    os.close(y)
    os.close(uv)
    tx, rx = _pair()
    try:
        tx.send(f)
        with pytest.raises(InvalidTensorError, match="unsealed"):
            rx.recv(timeout=5)
        assert tx.wait_returned(5)
        assert rx.slots_held == 1  # the first fd was installed; the second refused
        rx.require_sealed = False
        for _ in range(2):
            tx.send(f)
            g = rx.recv(timeout=5)
            g.release()
            assert tx.wait_returned(5)
        assert tx.fds_sent == 3, "only the refused fd goes again"
        assert rx.slots_held == 2
    finally:
        f.release()
        tx.close()
        rx.close()


def test_frames_sent_before_the_producer_heard_say_the_install_was_refused():
    tx, rx = _pair()
    f = _unsealed_frame()
    try:
        tx.send(f)
        tx.send(f)  # by reference: the producer has not heard of the refusal yet
        with pytest.raises(InvalidTensorError, match="unsealed"):
            rx.recv(timeout=5)
        with pytest.raises(ProtocolError, match="this consumer refused") as e:
            rx.recv(timeout=5)
        assert "not one this consumer was sent" not in str(e.value)
        assert tx.wait_returned(5)
        rx.require_sealed = False
        tx.send(f)
        rx.recv(timeout=5).release()
        assert tx.wait_returned(5)
    finally:
        f.release()
        tx.close()
        rx.close()


# ---- REFUSED messages are untrusted input to the producer ------------------------------------------------------


def _take(b: socket.socket) -> tuple[int, int, int, int]:
    """A message the sender sent, read by hand (its fds closed): frame id, slot index, generation, fds."""
    msg, anc, _, _ = b.recvmsg(4096, socket.CMSG_SPACE(64))
    n = 0
    for level, kind, data in anc:
        if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
            for fd in array.array("i", data[: len(data) - len(data) % 4]):
                os.close(fd)
                n += 1
    index, flags, gen = _REF.unpack_from(msg, len(msg) - _REF.size)
    assert bool(flags & REF_FD) == bool(n)
    return struct.unpack_from("<Q", msg, 8)[0], index, gen, n


def _done(b: socket.socket, fid: int) -> None:
    b.send(_HEAD.pack(MAGIC, VERSION, MSG_DONE, fid, 0, NO_MARKER))


def _announced_once() -> tuple[socket.socket, socket.socket, FrameSender, Any, int, int]:
    """A sender of 8 slots that has sent one frame (its buffer's fd announced) and had it back: the pair, the
    sender, the frame, and the slot and generation it was announced under."""
    a, b = seqpacket_pair()
    tx = FrameSender(a, slots=8)
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    tx.send(f)
    fid, index, gen, n = _take(b)
    assert n == 1
    _done(b, fid)
    assert tx.wait_returned(5)
    return a, b, tx, f, index, gen


@pytest.mark.parametrize("bad", ["other slot", "newer generation", "slot beyond the sender's",
                                 "slot out of range", "generation 0", "fds attached", "short", "long"])
def test_a_refused_message_that_names_no_current_slot_changes_nothing(bad):
    a, b, tx, f, index, gen = _announced_once()
    try:
        msg, fds = {
            "other slot": (_refused_message(index + 1, gen), []),
            "newer generation": (_refused_message(index, gen + 1), []),
            "slot beyond the sender's": (_refused_message(8, gen), []),
            "slot out of range": (_HEAD.pack(MAGIC, VERSION, 5, 0, 0, NO_MARKER) + _REF.pack(1 << 20, 0, gen), []),
            "generation 0": (_HEAD.pack(MAGIC, VERSION, 5, 0, 0, NO_MARKER) + _REF.pack(index, 0, 0), []),
            "fds attached": (_refused_message(index, gen), [nd.memfd_alloc(64)]),
            "short": (_refused_message(index, gen)[:-1], []),
            "long": (_refused_message(index, gen) + b"\0", []),
        }[bad]
        count = len(os.listdir("/proc/self/fd"))
        handled = tx.refused + tx.bad_messages
        b.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])
        for fd in fds:
            os.close(fd)
        assert _settle(lambda: tx.refused + tx.bad_messages == handled + 1)
        assert tx.alive
        assert len(os.listdir("/proc/self/fd")) == count - len(fds), "the sender kept an fd the consumer attached"
        tx.send(f)
        fid, index2, gen2, n = _take(b)
        assert (index2, gen2, n) == (index, gen, 0), "the fd went again for a REFUSED that names another slot"
        _done(b, fid)
        # the one that names it does resend it
        b.send(_refused_message(index, gen))
        assert _settle(lambda: tx.refused == 1 + (bad in ("other slot", "newer generation")))
        tx.send(f)
        fid, index3, gen3, n = _take(b)
        assert n == 1 and gen3 > gen
        _done(b, fid)
        assert tx.wait_returned(5)
    finally:
        f.release()
        tx.close()
        b.close()


class _CountingLock:
    """A lock that counts how often it was taken (FrameSender's send lock, watched)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> bool:
        self._lock.acquire()
        self.taken += 1
        return True

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def acquire(self, *a: object, **kw: object) -> bool:
        got = self._lock.acquire(*a, **kw)  # type: ignore[arg-type]
        self.taken += got
        return got

    def release(self) -> None:
        self._lock.release()


def test_stale_refused_messages_in_a_loop_never_take_the_send_lock():
    """A consumer sending REFUSED messages for a generation since replaced, in a loop: each changes nothing, and the
    reader thread answered each under the send lock (logging there), holding the sends back (a FrameFanout's sends
    serve every consumer). Stale ones are answered without it."""
    a, b, tx, f, index, gen = _announced_once()
    try:
        watched = _CountingLock()
        tx._send_lock = watched  # type: ignore[assignment]
        for _ in range(200):
            b.send(_refused_message(index, gen + 1))  # a generation the slot does not hold
        assert _settle(lambda: tx.refused == 200)
        assert watched.taken == 0, f"the send lock was taken {watched.taken} times for stale REFUSED messages"
    finally:
        f.release()
        tx.close()
        b.close()


def test_the_refusal_comes_before_the_frames_done():
    """A producer that sends the buffer again as soon as it came back (a pool of one) must already know."""
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    f = _unsealed_frame()
    buf = buffers_of(f)[0]
    try:
        a.sendmsg([_encode_slots(1, f, [buf], 0, NO_MARKER, [(2, REF_FD, 1)])],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        with pytest.raises(InvalidTensorError, match="unsealed"):
            rx.recv(timeout=5)
        assert a.recv(64) == _refused_message(2, 1)
        assert a.recv(64) == _HEAD.pack(MAGIC, VERSION, MSG_DONE, 1, 0, NO_MARKER)
    finally:
        f.release()
        rx.close()
        a.close()


def test_the_consumers_table_notes_a_refusal_only_for_an_install_it_did_not_make():
    table = _SlotTable()
    buf = DMABuffer.allocate(4096)
    table.install(3, 5, buf)
    assert not table.refuse(3, 5)
    assert table.refuse(3, 6) and table.refused == {3: 6}
    assert table.entries[3].buf is buf, "a refusal changes no slot (a bad message must not)"
    table.install(3, 7, DMABuffer.allocate(4096))
    assert table.refused == {}
    table.close()


# ---- Ctrl-C as a received fd changes hands -----------------------------------------------------------------


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")
@pytest.mark.parametrize("kind", ["slots", "frame"])
def test_a_ctrl_c_anywhere_in_the_receive_closes_the_received_fd_exactly_once(kind, monkeypatch):
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    buf = buffers_of(f)[0]
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    closes: dict[int, int] = {}
    real_close = os.close

    def counting_close(fd: int) -> None:
        closes[fd] = closes.get(fd, 0) + 1
        real_close(fd)

    state = {"fid": 0, "fd": -1, "got": None}
    injectors: list[sigint._Interrupt] = []

    class _Injector(sigint._Interrupt):
        """The sweep's injector, kept at hand: the frames it records (the trace stops at the interrupt it raises,
        so they are never let go) hold the objects of the interrupted run, whose finalisers must run in check()."""

        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            injectors.append(self)

    def message() -> bytes:
        state["fid"] += 1
        fid = state["fid"]
        if kind == "slots":
            return _encode_slots(fid, f, [buf], 0, NO_MARKER, [(0, REF_FD, fid)])
        return _encode_frame(fid, f, [buf], 0, NO_MARKER)

    def op() -> None:
        msg = message()
        probe = os.dup(0)  # the lowest free number: the one the received fd gets
        real_close(probe)
        state["fd"] = probe
        a.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        state["got"] = rx.recv(timeout=5)

    def check(interrupted: bool, where: str | None) -> None:
        got = state["got"]
        state["got"] = None
        if got is not None:
            assert buffers_of(got)[0].fd == state["fd"]
            got.release()
            del got
        for inj in injectors:
            inj.last.clear()
            inj.checks_after_call.clear()
        injectors.clear()
        rx._table.close()  # the slot the message installed (if it did): every run starts from an empty table
        gc.collect()
        while True:  # DONEs (and REFUSED) to the producer: read so the socket never fills
            try:
                a.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
        fd = state["fd"]
        n = closes.pop(fd, 0)
        assert n == 1, f"interrupted at {where}: the received fd {fd} was closed {n} times"
        assert live_buffers() == before, f"interrupted at {where}: {live_buffers() - before} buffer(s) left counted"

    try:
        # warm: the receiver's context and the frame's layout made once, so every run takes the same path
        op()
        state["got"].release()
        state["got"] = None
        rx._table.close()
        gc.collect()
        before = live_buffers()
        monkeypatch.setattr(os, "close", counting_close)
        monkeypatch.setattr(sigint, "_Interrupt", _Injector)
        points = _sweep(op, check, FrameReceiver._build, FrameReceiver._build_slots, _SlotTable.install,
                        buffer_from_fd, DMABuffer.__init__, weakref.finalize.__init__)
        assert points > 20
    finally:
        monkeypatch.undo()
        rx.close()
        a.close()
        f.release()


# ---- Ctrl-C as FrameSender.send() takes its uses ------------------------------------------------------------


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")
def test_a_ctrl_c_anywhere_in_a_send_over_two_buffers_leaves_no_use_counted():
    y, uv = nd.memfd_alloc(16 * 12), nd.memfd_alloc(16 * 6)
    f = frame_from_fds([y, uv], FrameFormat.NV12, 16, 12)
    os.close(y)
    os.close(uv)
    bufs = buffers_of(f)
    base = [x.users for x in bufs]
    a, b = seqpacket_pair()
    tx = FrameSender(a, slots=0)  # fds with every frame: every run takes the same path

    def check(interrupted: bool, where: str | None) -> None:
        while True:  # what went out: the consumer gives it back
            try:
                msg, anc, _, _ = b.recvmsg(4096, socket.CMSG_SPACE(64), socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            for level, kind, data in anc:
                if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                    for fd in array.array("i", data[: len(data) - len(data) % 4]):
                        os.close(fd)
            _done(b, struct.unpack_from("<Q", msg, 8)[0])
        assert _settle(lambda: tx.in_flight == 0), f"interrupted at {where}: a frame stayed in flight"
        assert [x.users for x in bufs] == base, f"interrupted at {where}: uses {[x.users for x in bufs]}, not {base}"

    try:
        points = _sweep(lambda: tx.send(f), check, FrameSender.send, *_counting(DMABuffer))
        assert points > 10
    finally:
        tx.close()
        b.close()
        f.release()
