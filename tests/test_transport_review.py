"""Frame transport: what an adversarial review found, each case failing before its fix.

- A receiver kept the commit marker's mapping of every pool buffer whose layout recv() had cached: after a FORGET,
  at EOF and after close() the producer's memory stayed mapped for as long as the receiver object lived.
- A sender added a close callback to a buffer each time it gave the buffer a slot: a buffer reassigned again and
  again (more buffers than slots) gathered one per frame, and a pool gathered one per buffer for every consumer it
  ever had (a closed sender left its callbacks behind).
- FrameReceiver.close() did not wake a thread blocked in recv()/recv_views(): it waited for ever, and the producer,
  never seeing the consumer go, kept every frame it had sent out of its pool.
- Every wait used select(), which refuses an fd above 1024: a process with many buffers' fds got a ValueError from
  recv(timeout=...), a PeerClosedError ("closed") from a send that only had to wait, and a DONE flusher that died,
  so DONEs queued while the producer was busy never went out.
- A receiver left open after EOF kept its DONE flusher's two wake-up sockets.
- recv() resolving a cached layout after another thread changed the slot table (close(), or a FORGET it handled)
  let a bare KeyError out; after close() the errors blamed the producer instead of returning None. So did a
  layout cache cleared (by close() or another thread) right after this thread stored a layout in it.
"""

from __future__ import annotations

import array
import gc
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from interop import FrameFormat, transport
from interop.native import dmabuf as nd
from interop.tensors.dma import DMAContext, FramePool


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _cycle(pool: FramePool, tx: transport.FrameSender, rx: transport.FrameReceiver, n: int) -> None:
    """``n`` frames of the pool through the pair: all acquired before any goes back, so each round names every
    buffer of the pool once."""
    frames = [pool.acquire(timeout=5) for _ in range(n)]
    for f in frames:
        tx.send(f)
        f.release()
        rx.recv(timeout=5).release()
    assert tx.wait_returned(5)


def _settle(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---- mappings of forgotten buffers --------------------------------------------------------------------


@pytest.mark.parametrize("how", ["forget", "eof", "close"])
def test_a_receiver_that_let_go_of_a_pool_buffer_keeps_no_mapping_of_it(how):
    gc.collect()
    before = nd.live_mappings()
    pool = FramePool(FrameFormat.NV12, 64, 48, 2)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
    for _ in range(3):  # later frames go by reference: recv() caches their layout
        _cycle(pool, tx, rx, 2)
    if how == "forget":
        pool.close()  # FORGET for each buffer
        with pytest.raises(transport.TransportTimeoutError):
            rx.recv(timeout=0.3)
        assert rx.slots_held == 0
    elif how == "eof":
        tx.close()
        assert rx.recv(timeout=5) is None
    else:
        rx.close()
    tx.close()
    pool.close()
    gc.collect()
    # the receiver is still referenced: what it no longer uses must be unmapped now, not when it is collected
    assert nd.live_mappings() == before, "the receiver still maps a buffer it let go of"
    rx.close()


# ---- close callbacks on the producer's buffers --------------------------------------------------------


def test_a_buffer_given_a_slot_again_and_again_carries_one_close_callback():
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 10)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a, slots=8), transport.FrameReceiver(b)  # 10 buffers, 8 slots: every frame reassigns a slot
    rx._done.start()
    fds = _fd_count()
    for _ in range(20):
        _cycle(pool, tx, rx, 10)
    assert tx.fds_sent == 200  # each frame did take a slot anew
    assert max(len(buf._on_close) for buf in pool._buffers) <= 1
    # the callbacks of the buffers the slots name now still work: closing the pool empties the consumer's table
    assert rx.slots_held == 8 and _fd_count() == fds + 8
    pool.close()
    with pytest.raises(transport.TransportTimeoutError):
        rx.recv(timeout=0.3)
    assert rx.slots_held == 0 and _fd_count() == fds - 10
    tx.close()
    rx.close()


def test_a_closed_sender_leaves_no_close_callback_on_the_pool():
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 2)
    for _ in range(5):  # consumers come and go; the pool stays
        a, b = transport.seqpacket_pair()
        tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
        _cycle(pool, tx, rx, 2)
        assert [len(buf._on_close) for buf in pool._buffers] == [1, 1]
        tx.close()
        rx.close()
        assert [len(buf._on_close) for buf in pool._buffers] == [0, 0]
    pool.close()


# ---- close() during recv() ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["recv", "recv_views"])
def test_close_wakes_a_thread_blocked_in_recv(how):
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
    f = pool.acquire()
    tx.send(f)
    f.release()
    held = getattr(rx, how)(timeout=5)  # the consumer holds a frame as it closes
    got: dict[str, object] = {}

    def receive() -> None:
        try:
            got["value"] = getattr(rx, how)()  # no timeout: waits for the next frame
        except BaseException as e:  # noqa: BLE001 - reported below
            got["error"] = e

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    time.sleep(0.2)
    rx.close()
    t.join(5)
    assert not t.is_alive(), "close() left a thread blocked in " + how
    assert got == {"value": None}
    assert _settle(lambda: not tx.alive), "the producer never saw the consumer go"
    assert tx.wait_returned(5) and tx.in_flight == 0  # the frame it held goes back to the pool
    held.release()
    assert pool.free_count == 1
    tx.close()
    pool.close()


# ---- sockets above FD_SETSIZE -------------------------------------------------------------------------

_HIGH = 1100  # above select()'s FD_SETSIZE (1024)


@pytest.fixture
def high_fds() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < _HIGH + 64:
        if hard != resource.RLIM_INFINITY and hard < _HIGH + 64:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is below {_HIGH + 64}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (_HIGH + 64, hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _high(s: socket.socket) -> socket.socket:
    """``s`` moved to the first free fd number from _HIGH up."""
    fd = _HIGH
    while True:
        try:
            os.fstat(fd)
        except OSError:
            break
        fd += 1
    os.dup2(s.fileno(), fd, inheritable=False)
    out = socket.socket(fileno=fd)
    s.close()
    return out


def test_waits_on_a_socket_above_fd_setsize_time_out_as_on_any_other(high_fds, tmp_path):
    a, b = transport.seqpacket_pair()
    rx = transport.FrameReceiver(_high(b))
    for how in ("recv", "recv_views"):
        with pytest.raises(transport.TransportTimeoutError):
            getattr(rx, how)(timeout=0.1)
    rx.close()
    a.close()

    a, b = transport.seqpacket_pair()
    a = _high(a)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # full after a few messages; the consumer does not read
    tx = transport.FrameSender(a)
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 64)
    frames = []
    try:
        for _ in range(64):
            frames.append(pool.acquire())
            try:
                tx.send(frames[-1], timeout=0.3)
            except transport.TransportTimeoutError:
                break
            except transport.PeerClosedError as e:
                pytest.fail(f"a send that had to wait was told the consumer is gone: {e}")
        else:
            pytest.fail("the consumer's socket never filled")
        assert tx.alive
    finally:
        for f in frames:
            f.release()
        tx.close()
        b.close()
        pool.close()

    srv = transport.FrameServer(str(tmp_path / "high.sock"))
    srv._sock = _high(srv._sock)
    with pytest.raises(transport.TransportTimeoutError):
        srv.accept(timeout=0.1)
    srv.close()


def test_dones_queued_on_a_socket_above_fd_setsize_go_out(high_fds):
    """The producer reads no DONE for a while (its socket fills, DONEs queue); once it reads, every one arrives."""
    prod, b = transport.seqpacket_pair()
    rx = transport.FrameReceiver(_high(b))
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    buf = f[0].buffer
    n = 400  # more DONEs than the producer's socket holds
    for i in range(1, n + 1):
        prod.sendmsg([transport._encode_frame(i, f, [buf], 0, 2**64 - 1)],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        rx.recv(timeout=5).release()
    got: list[int] = []
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        try:
            got.append(int.from_bytes(prod.recv(64, socket.MSG_DONTWAIT)[8:16], "little"))
        except BlockingIOError:
            time.sleep(0.01)
    assert sorted(got) == list(range(1, n + 1))
    rx.close()
    prod.close()
    f.release()


# ---- fds of a receiver left open after EOF ------------------------------------------------------------


def test_a_receiver_left_open_after_eof_keeps_only_its_socket():
    gc.collect()
    a, b = transport.seqpacket_pair()
    before = set(os.listdir("/proc/self/fd"))  # both ends of the pair

    def opened() -> set[str]:  # fds opened since (by the receiver), still open
        return set(os.listdir("/proc/self/fd")) - before

    rx = transport.FrameReceiver(b)
    assert len(opened()) == 2  # its DONE flusher's wake-up pair
    a.close()
    assert rx.recv(timeout=5) is None
    assert _settle(lambda: not opened()), f"{len(opened())} fds of the receiver beyond its socket"
    rx.close()


# ---- close() while a received message is handled ------------------------------------------------------


@pytest.mark.parametrize("path", ["general", "cached"])
def test_a_message_handled_as_another_thread_closes_the_receiver_gives_none(path, monkeypatch):
    """close() on another thread between the receive and the slot lookup: the table it closed is not the producer's
    fault, and a closed receiver's recv() returns None (it raised a ProtocolError blaming the producer, or, for a
    layout recv() had cached, a bare KeyError)."""
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
    for _ in range(3):  # the buffer crossed; its layout is cached by recv()
        _cycle(pool, tx, rx, 1)
    if path == "general":
        rx._parsed.clear()  # the next frame's layout is parsed and checked against the table again
        real = transport._parse_frame

        def closing(*args):  # type: ignore[no-untyped-def]
            rx.close()
            return real(*args)

        monkeypatch.setattr(transport, "_parse_frame", closing)
    else:
        real_pf = transport._per_frame

        def closing_pf(*args):  # type: ignore[no-untyped-def]
            rx.close()
            return real_pf(*args)

        monkeypatch.setattr(transport, "_per_frame", closing_pf)
    f = pool.acquire(timeout=5)
    tx.send(f)
    f.release()
    assert rx.recv(timeout=5) is None
    assert tx.wait_returned(5) and pool.free_count == 1  # the producer saw the consumer go and got its buffer
    tx.close()
    pool.close()


def test_a_slot_forgotten_by_another_thread_as_a_frame_over_it_is_handled_is_a_protocol_error(monkeypatch):
    """Two threads receiving: one handles a FORGET (a producer that closed a buffer it had just sent) while the other
    resolves the frame over that buffer from its cached layout. A ProtocolError, the frame's DONE sent, the receiver
    still working (a bare KeyError escaped)."""
    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
    for _ in range(3):
        _cycle(pool, tx, rx, 1)
    real = transport._per_frame
    armed = [True]

    def forgetting(*args):  # type: ignore[no-untyped-def]
        if armed[0]:
            armed[0] = False
            (index, entry), = rx._table.entries.items()
            rx._table.forget(index, entry.gen)  # what the other thread's FORGET does
        return real(*args)

    monkeypatch.setattr(transport, "_per_frame", forgetting)
    f = pool.acquire(timeout=5)
    tx.send(f)
    f.release()
    with pytest.raises(transport.ProtocolError, match="let go as this frame was handled"):
        rx.recv(timeout=5)
    assert tx.wait_returned(5)  # its DONE went out
    assert not rx.closed
    tx.close()
    rx.close()
    pool.close()


def test_a_layout_cache_cleared_by_another_thread_right_after_a_store_is_no_key_error():
    """Another receiving thread (the cache full) or close() clears recv()'s layout cache right after this thread
    stored a layout in it: the frame is still built (the store was read back from the cache: a KeyError)."""

    class ClearedAfterEachStore(dict):  # type: ignore[type-arg]
        def __setitem__(self, key, value):  # type: ignore[no-untyped-def]
            super().__setitem__(key, value)
            self.clear()

    pool = FramePool(FrameFormat.GRAY8, 16, 16, 1)
    a, b = transport.seqpacket_pair()
    tx, rx = transport.FrameSender(a), transport.FrameReceiver(b)
    _cycle(pool, tx, rx, 1)  # the fd crossed; the next frames go by reference, their layout parsed and cached
    rx._parsed = ClearedAfterEachStore()
    for _ in range(2):
        _cycle(pool, tx, rx, 1)
    tx.close()
    rx.close()
    pool.close()
