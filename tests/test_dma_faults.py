"""Faults across processes: consumers and producers killed mid-frame, hostile peers truncating shared buffers."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import interop
from interop import FrameFormat, MemoryType
from interop.tensors.dma import FramePool, live_buffers
from interop.transport import FrameReceiver, FrameSender, PeerClosedError, seqpacket_pair
from tests.dma_peer import fill as _fill
from tests.dma_peer import read_line, spawn


def _serve(pool: FramePool, tx: FrameSender, values: list[int]) -> None:
    for v in values:
        f = pool.acquire(timeout=10)
        _fill(f, v)
        tx.send(f)
        f.release()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_consumer_killed_mid_frame_leaves_producer_and_pool_intact():
    pool = FramePool(FrameFormat.NV12, 64, 48, 3)
    fds0, bufs0 = _fds(), live_buffers()
    p, sock = spawn("hold_and_hang", "2")
    tx = FrameSender(sock)
    _serve(pool, tx, [1, 2])
    assert read_line(p) == "holding 2"  # the consumer has both frames mapped
    assert pool.free_count == 1 and tx.in_flight == 2
    p.send_signal(signal.SIGKILL)
    assert p.wait(10) == -signal.SIGKILL
    assert tx.wait_returned(10)  # the dead consumer's buffers came back
    assert not tx.alive and pool.free_count == 3
    with pytest.raises(PeerClosedError):
        _serve(pool, tx, [3])
    assert pool.free_count == 3
    tx.close()
    # the producer keeps working: a new consumer gets correct frames from the same pool
    p2, sock2 = spawn("consume", "5")
    tx2 = FrameSender(sock2)
    _serve(pool, tx2, [10, 11, 12, 13, 14])
    assert read_line(p2) == "values 10 11 12 13 14"
    assert tx2.wait_returned(10) and pool.free_count == 3
    assert p2.wait(10) == 0
    tx2.close()
    p.stdout.close()
    p2.stdout.close()
    assert _fds() == fds0 and live_buffers() == bufs0  # nothing leaked on the producer's side
    # and the pool's own mappings still work
    f = pool.acquire()
    _fill(f, 99)
    with interop.map(f, MemoryType.CPU) as c:
        assert np.all(np.asarray(c[0]) == 99)
    f.release()


def test_truncation_attempt_by_peer_cannot_sigbus_us():
    pool = FramePool(FrameFormat.NV12, 64, 48, 1)
    f = pool.acquire()
    _fill(f, 5)
    view = interop.map(f, MemoryType.CPU)
    p, sock = spawn("truncate")
    tx = FrameSender(sock)
    tx.send(f)
    line = read_line(p)
    assert line == "attempts shrink=EPERM grow=EPERM seal_write=EPERM", line
    assert p.wait(10) == 0
    # our mapping is whole: touching every page would SIGBUS had the file shrunk
    y = np.asarray(view[0])
    assert int(y.sum()) == 5 * y.size and os.fstat(f[0].fd).st_size == f[0].size
    view.release()
    f.release()
    tx.close()


def test_producer_killed_mid_write_consumer_gets_no_torn_frame_and_keeps_working():
    fds0, bufs0 = _fds(), live_buffers()
    p, sock = spawn("produce_then_die")
    rx = FrameReceiver(sock)
    f = rx.recv(timeout=10)
    with interop.map(f, MemoryType.CPU) as c:
        assert np.all(np.asarray(c[0]) == 1)  # the complete frame
    assert read_line(p) == "writing"
    p.send_signal(signal.SIGKILL)
    assert p.wait(10) == -signal.SIGKILL
    assert rx.recv(timeout=10) is None  # EOF: the half-written frame was never delivered
    assert rx.torn == 0 and rx.received == 1
    # frames already received outlive their producer
    with interop.map(f, MemoryType.CPU) as c:
        assert np.all(np.asarray(c[0]) == 1)
    f.release()
    rx.close()
    # the consumer keeps working with a new producer
    p2, sock2 = spawn("produce", "4")
    rx2 = FrameReceiver(sock2)
    vals = []
    for _ in range(4):
        g = rx2.recv(timeout=10)
        with interop.map(g, MemoryType.CPU) as c:
            vals.append(int(np.asarray(c[0])[0, 0]))
        g.release()
    assert vals == [1, 2, 3, 4]
    assert read_line(p2) == "sent 4 returned True free 2"
    assert p2.wait(10) == 0
    rx2.close()
    p.stdout.close()
    p2.stdout.close()
    assert _fds() == fds0 and live_buffers() == bufs0  # the consumer holds nothing of the dead producer


def test_writer_process_killed_mid_write_frame_is_detected_by_commit_marker_and_dropped():
    """A writer process fills the producer's pool buffer and dies half way: the commit marker still says WRITING,
    so a consumer that is sent the buffer anyway drops it (never delivers it torn) and takes the next one."""
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    f = pool.acquire()  # marker: WRITING
    p, sock = spawn("write_half_and_hang")
    to_writer = FrameSender(sock)
    to_writer.send(f, commit=False)  # the writer commits, not us
    assert read_line(p) == "writing"
    p.send_signal(signal.SIGKILL)
    assert p.wait(10) == -signal.SIGKILL
    assert to_writer.wait_returned(10)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(b)
    tx.send(f, commit=False)  # a dispatcher that does not vouch for the write
    good = pool.acquire()
    _fill(good, 42)
    tx.send(good)  # committed
    g = rx.recv(timeout=5)
    assert rx.torn == 1 and rx.received == 1
    with interop.map(g, MemoryType.CPU) as c:
        assert np.all(np.asarray(c[0]) == 42)
    g.release()
    assert tx.wait_returned(5)  # the dropped frame was returned too
    f.release()
    good.release()
    assert pool.free_count == 2
    # a writer that finishes and commits: its frame goes through
    h = pool.acquire()
    p2, sock2 = spawn("write_and_commit", "7")
    to_writer2 = FrameSender(sock2)
    to_writer2.send(h, commit=False)
    assert read_line(p2) == "committed" and p2.wait(10) == 0
    tx.send(h, commit=False)
    g = rx.recv(timeout=5)
    assert rx.torn == 1 and np.all(np.asarray(interop.map(g, MemoryType.CPU)[0]) == 7)
    g.release()
    h.release()
    to_writer2.close()
    tx.close()
    rx.close()
    to_writer.close()
