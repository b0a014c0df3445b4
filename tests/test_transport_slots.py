"""Hand-off by slot reference: a pool buffer's fd crosses once, later frames name it by (slot index, generation).

The consumer keeps each buffer it was sent open and mapped; the producer's FORGET (its buffer closed or collected)
or a reassigned slot lets it go. References the consumer does not hold, replayed generations and changed sizes are
ProtocolErrors that leave the receiver working and keep no fd. Fan-out: a frame sent to several consumers returns
to its pool when the last of them released it.
"""

from __future__ import annotations

import array
import gc
import os
import socket
import time

import numpy as np
import pytest

import interop
from interop import AccessMode, FrameFormat, InvalidTensorError, MemoryType
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, FramePool, buffers_of, frame_from_fds, live_buffers
from interop.transport import (
    _FRAME,
    _HEAD,
    MAX_SLOTS,
    REF_FD,
    FrameReceiver,
    FrameSender,
    ProtocolError,
    TransportTimeoutError,
    _encode_slots,
    _forget_message,
    seqpacket_pair,
)
from tests.dma_peer import read_line, spawn


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _write(frame, value: int) -> None:
    with interop.map(frame, MemoryType.CPU, mode=AccessMode.WRITE) as c:
        for t in c:
            np.asarray(t)[:] = value


def _first_byte(frame) -> int:
    with interop.map(frame, MemoryType.CPU) as c:
        return int(np.asarray(c[0])[0, 0])


def _pair(slots: int | None = None):
    a, b = seqpacket_pair()
    tx = FrameSender(a) if slots is None else FrameSender(a, slots=slots)
    rx = FrameReceiver(b)
    return tx, rx


def _cycle(pool, tx, rx, value: int) -> int:
    f = pool.acquire(timeout=5)
    _write(f, value)
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    got = _first_byte(g)
    g.release()
    assert tx.wait_returned(5)
    return got


def test_each_buffer_crosses_once_then_frames_go_by_reference():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    tx, rx = _pair()
    rx._done.start()
    values = [_cycle(pool, tx, rx, i) for i in range(1, 3)]
    fds = _fd_count()
    values += [_cycle(pool, tx, rx, i) for i in range(3, 21)]
    assert values == list(range(1, 21))  # every frame shows what the producer wrote into it, never an older one
    assert tx.fds_sent == 2 and rx.fds_received == 2 and rx.slots_held == 2
    assert _fd_count() == fds  # no fd comes or goes after the first frame of each buffer
    assert pool.free_count == pool.size
    tx.close()
    assert rx.recv(timeout=5) is None
    assert rx.slots_held == 0
    rx.close()
    pool.close()


def test_slots_zero_sends_the_fds_with_every_frame():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    tx, rx = _pair(slots=0)
    assert [_cycle(pool, tx, rx, i) for i in range(1, 7)] == list(range(1, 7))
    assert tx.fds_sent == 6 and rx.fds_received == 6 and rx.slots_held == 0
    tx.close()
    rx.close()
    pool.close()


@pytest.mark.parametrize("bad", [-1, 1, 7, MAX_SLOTS + 1, True, 2.5, "8"])
def test_slots_argument_is_checked(bad):
    a, b = seqpacket_pair()
    with pytest.raises(InvalidTensorError, match="slots"):
        FrameSender(a, slots=bad)
    a.close()
    b.close()


def test_more_buffers_than_slots_reassigns_the_least_recently_sent():
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 10)
    tx, rx = _pair(slots=8)
    held = [pool.acquire() for _ in range(10)]
    for round_ in range(3):
        for i, f in enumerate(held):
            _write(f, 10 * round_ + i)
            tx.send(f)
            g = rx.recv(timeout=5)
            assert _first_byte(g) == 10 * round_ + i
            g.release()
            assert rx.slots_held <= 8
    assert tx.wait_returned(5)
    assert tx.fds_sent == 30  # 10 buffers cycling through 8 slots: each comes back after its slot was taken
    for f in held:
        f.release()
    tx.close()
    rx.close()
    pool.close()


def test_closed_pool_makes_the_consumer_let_go_of_its_fds():
    pool = FramePool(FrameFormat.NV12, 64, 48, 3)
    tx, rx = _pair()
    rx._done.start()
    fds = _fd_count()
    for i in range(6):
        _cycle(pool, tx, rx, i)
    assert rx.slots_held == 3 and _fd_count() == fds + 3
    pool.close()  # the producer's buffers close: FORGET for each
    with pytest.raises(TransportTimeoutError):
        rx.recv(timeout=0.3)  # handles the FORGETs, no frame
    assert rx.slots_held == 0
    assert _fd_count() == fds - 3  # the pool's own fds and the consumer's copies are all gone
    tx.close()
    rx.close()


def test_collected_buffer_is_forgotten_too():
    tx, rx = _pair()
    rx._done.start()
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    tx.send(f)
    g = rx.recv(timeout=5)
    g.release()
    assert tx.wait_returned(5) and rx.slots_held == 1
    f.release()
    del f
    gc.collect()
    with pytest.raises(TransportTimeoutError):
        rx.recv(timeout=0.3)
    assert rx.slots_held == 0
    tx.close()
    rx.close()


def test_frame_held_by_the_consumer_outlives_forget_and_close():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    tx, rx = _pair()
    f = pool.acquire()
    _write(f, 0x42)
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    pool.close()  # the producer's buffer stays open: the consumer holds the frame (no FORGET yet)
    rx.close()  # the receiver's table lets go, the frame keeps its buffer
    assert _first_byte(g) == 0x42
    before = live_buffers()
    g.release()
    gc.collect()
    assert live_buffers() < before  # the consumer's copy of the fd closed with the last user
    tx.close()


def _frame_message(pool, refs):
    f = pool.acquire()
    bufs = buffers_of(f)
    slot = bufs[0].pool_slot
    msg = _encode_slots(5, f, bufs, slot.seq, pool.marker_offset, refs)
    pool.commit(f)
    return f, msg, bufs[0]


def _send(sock, msg, fds=()):
    sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else [])


def _done_ids(sock) -> list[int]:
    out = []
    while True:
        try:
            out.append(int.from_bytes(sock.recv(64, socket.MSG_DONTWAIT)[8:16], "little"))
        except BlockingIOError:
            return out


@pytest.mark.parametrize("case", ["unknown slot", "old generation", "replayed generation", "size changed",
                                  "fd without flag", "flag without fd", "slot out of range", "generation 0"])
def test_bad_references_are_protocol_errors_that_keep_no_fd(case):
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 2)
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    f, install, buf = _frame_message(pool, [(3, REF_FD, 5)])
    _send(a, install, [buf.fd])
    rx.recv(timeout=5).release()
    assert rx.slots_held == 1
    refs, fds, match = {
        "unknown slot": ([(4, 0, 1)], [], "not one this consumer was sent"),
        "old generation": ([(3, 0, 4)], [], "not one this consumer was sent"),
        "replayed generation": ([(3, REF_FD, 5)], [buf.fd], "not newer"),
        "size changed": (None, [], "holds a buffer of"),
        "fd without flag": ([(3, 0, 5)], [buf.fd], "announces 0 fds"),
        "flag without fd": ([(3, REF_FD, 6)], [], "announces 1 fds"),
        "slot out of range": ([(MAX_SLOTS, REF_FD, 1)], [buf.fd], "slots are <"),
        "generation 0": ([(3, 0, 0)], [], "generations start at 1"),
    }[case]
    if case == "size changed":
        msg = bytearray(_encode_slots(9, f, [buf], 1, pool.marker_offset, [(3, 0, 5)]))
        at = _HEAD.size + _FRAME.size + 16  # the buffer size of the plane record
        msg[at:at + 8] = (buf.size + 64).to_bytes(8, "little")
        msg = bytes(msg)
    else:
        msg = _encode_slots(9, f, [buf], 1, pool.marker_offset, refs)
    n = _fd_count()
    _send(a, msg, fds)
    with pytest.raises(ProtocolError, match=match):
        rx.recv(timeout=5)
    assert _fd_count() == n, "a refused message's fd was kept"
    assert 9 in _done_ids(a)  # the producer gets its buffers back
    assert rx.slots_held == 1 and not rx.closed
    _send(a, _encode_slots(10, f, [buf], 1, pool.marker_offset, [(3, 0, 5)]))  # a good reference still works
    g = rx.recv(timeout=5)
    assert g.metadata["frame_id"] == 10
    g.release()
    f.release()
    rx.close()
    a.close()
    pool.close()


def test_one_slot_named_for_two_buffers_is_a_protocol_error():
    y, uv = nd.memfd_alloc(16 * 12), nd.memfd_alloc(16 * 6)
    f = frame_from_fds([y, uv], FrameFormat.NV12, 16, 12)
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    bufs = buffers_of(f)
    n = _fd_count()
    _send(a, _encode_slots(4, f, bufs, 0, 2**64 - 1, [(1, REF_FD, 1), (1, REF_FD, 1)]), [bufs[0].fd, bufs[1].fd])
    with pytest.raises(ProtocolError, match="one slot twice"):
        rx.recv(timeout=5)
    assert _fd_count() == n and rx.slots_held == 0
    _send(a, _encode_slots(5, f, bufs, 0, 2**64 - 1, [(1, REF_FD, 1), (2, REF_FD, 1)]), [bufs[0].fd, bufs[1].fd])
    g = rx.recv(timeout=5)
    assert rx.slots_held == 2 and {t.buffer for t in g.tensors} == set(rx._table.entries[i].buf for i in (1, 2))
    g.release()
    f.release()
    rx.close()
    a.close()
    os.close(y)
    os.close(uv)


@pytest.mark.parametrize("mutate", ["length", "flags", "frame id", "fds"])
def test_bad_forget_messages_are_protocol_errors(mutate):
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    f, install, buf = _frame_message(pool, [(0, REF_FD, 1)])
    _send(a, install, [buf.fd])
    rx.recv(timeout=5).release()
    msg = bytearray(_forget_message(0, 1))
    fds: list[int] = []
    if mutate == "length":
        msg = msg[:-1]
    elif mutate == "flags":
        msg[-12:-8] = (1).to_bytes(4, "little")
    elif mutate == "frame id":
        msg[8:16] = (3).to_bytes(8, "little")
    else:
        fds = [buf.fd]
    n = _fd_count()
    _send(a, bytes(msg), fds)
    with pytest.raises(ProtocolError):
        rx.recv(timeout=5)
    assert _fd_count() == n and rx.slots_held == 1
    _send(a, _forget_message(0, 1))
    with pytest.raises(TransportTimeoutError):
        rx.recv(timeout=0.2)
    assert rx.slots_held == 0
    f.release()
    rx.close()
    a.close()
    pool.close()


def test_fan_out_returns_a_frame_when_the_last_consumer_released_it():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    pairs = [_pair() for _ in range(3)]
    f = pool.acquire()
    _write(f, 7)
    for tx, _ in pairs:
        tx.send(f)
    f.release()
    got = [rx.recv(timeout=5) for _, rx in pairs]
    assert [_first_byte(g) for g in got] == [7, 7, 7]
    for g in got[:2]:
        g.release()
    time.sleep(0.2)
    assert pool.free_count == 0  # the third consumer still holds it
    got[2].release()
    assert all(tx.wait_returned(5) for tx, _ in pairs)
    assert pool.free_count == 1
    for tx, rx in pairs:
        tx.close()
        rx.close()
    pool.close()


def test_a_process_receives_each_buffer_once():
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    p, sock = spawn("consume_slots", "12")
    tx = FrameSender(sock)
    for i in range(1, 13):
        f = pool.acquire(timeout=10)
        _write(f, i)
        tx.send(f)
        f.release()
    assert read_line(p) == "values " + " ".join(str(i) for i in range(1, 13))
    assert read_line(p) == "fds 2 slots 2"
    assert p.wait(10) == 0
    assert tx.wait_returned(10) and pool.free_count == 2
    tx.close()
    pool.close()


def test_a_received_frame_registers_no_finalizer_and_its_views_hold_the_buffer():
    # steady state (every buffer already crossed): receiving, mapping and viewing a frame registers no
    # weakref.finalize; the frame's DONE waits for the last plane and the last numpy view, then goes out once
    import weakref

    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    tx, rx = _pair()
    assert _cycle(pool, tx, rx, 1) == 1  # the buffer's fd crosses, its mapping is made
    f = pool.acquire(timeout=5)
    _write(f, 9)
    tx.send(f)
    f.release()
    before = len(weakref.finalize._registry)  # type: ignore[attr-defined]
    g = rx.recv(timeout=5)
    c = interop.map(g, MemoryType.CPU)
    y = np.asarray(c[0])
    uv = np.asarray(c[1])
    assert len(weakref.finalize._registry) == before  # type: ignore[attr-defined]
    assert not y.flags.writeable
    with pytest.raises(ValueError):
        y.flags.writeable = True  # a READ view stays read-only
    c.release()
    g.release()
    time.sleep(0.2)
    assert tx.in_flight == 1 and pool.free_count == 0  # the views still read this frame: no DONE yet
    assert int(y[0, 0]) == 9 and int(uv[0, 0, 0]) == 9
    del y
    time.sleep(0.1)
    assert tx.in_flight == 1  # one view is enough
    del uv
    assert tx.wait_returned(5) and pool.free_count == 1
    assert tx.returned == 2 and tx.bad_messages == 0  # one DONE per frame
    assert _cycle(pool, tx, rx, 3) == 3
    tx.close()
    rx.close()
    pool.close()


@pytest.mark.parametrize("first", [True, False], ids=["first frame of a buffer", "later frame"])
def test_a_numpy_view_held_past_release_keeps_the_frame_from_the_producer(first):
    # the first view of a buffer takes the general mapping path (it learns whether the fd needs DMA_BUF_IOCTL_SYNC),
    # later ones the cached one: either way the producer gets the buffer back only once the view is gone
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 1)
    tx, rx = _pair()
    if not first:
        assert _cycle(pool, tx, rx, 1) == 1
    f = pool.acquire(timeout=5)
    _write(f, 5)
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    with interop.map(g, MemoryType.CPU) as c:
        y = np.asarray(c[0])
    g.release()
    time.sleep(0.2)
    assert tx.in_flight == 1 and pool.free_count == 0
    assert int(y[3, 3]) == 5
    del y
    assert tx.wait_returned(5) and pool.free_count == 1
    tx.close()
    rx.close()
    pool.close()


def test_a_dropped_received_frame_sends_its_done():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    tx, rx = _pair()
    assert _cycle(pool, tx, rx, 1) == 1
    f = pool.acquire(timeout=5)
    tx.send(f)
    f.release()
    g = rx.recv(timeout=5)
    plane = g[1]
    del g  # never released: the plane still holds the frame
    time.sleep(0.1)
    assert tx.in_flight == 1
    del plane
    assert tx.wait_returned(5) and pool.free_count == 1
    tx.close()
    rx.close()
    pool.close()
