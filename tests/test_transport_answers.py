"""Every frame message recv() and recv_views() take is answered with exactly one DONE, whatever single Ctrl-C lands
at any point CPython 3.11 raises one (tests.test_locks_sigint._sweep) in the receive path and the DONE channel; a
Ctrl-C before the general path takes a message's fds over leaves none open; a REFUSED that comes before the sender's
commit is settled, not dropped as stale.

Two points are C calls returning, which Python cannot see into: the receive itself (recvmsg / recvmsg_into: a
KeyboardInterrupt there drops the message before any handler can answer it), left out; and the DONE's send (it went
out, and Python cannot tell: the retry may send it again, a second DONE the producer ignores), where one or two DONEs
are accepted.
"""

from __future__ import annotations

import array
import gc
import socket
import sys
from collections.abc import Callable
from typing import Any

import pytest

import interop.transport as tr
import tests.test_locks_sigint as sigint
from interop import FrameFormat
from interop.tensors.dma import MARKER_COMMITTED, FramePool, buffers_of, write_marker
from interop.transport import (
    _PTS_AT,
    REF_FD,
    FrameReceiver,
    ProtocolError,
    TransportTimeoutError,
    _DoneChannel,
    _encode_slots,
    seqpacket_pair,
)
from tests.test_locks_sigint import _sweep
from tests.test_transport_edges import _drain

pytestmark = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")

_WATCH: tuple[Callable[..., Any], ...] = (
    FrameReceiver.recv, FrameReceiver.recv_views, FrameReceiver._message, FrameReceiver._build,
    FrameReceiver._build_slots, FrameReceiver._slots_header, FrameReceiver._torn, FrameReceiver._answer_dropped,
    FrameReceiver._views_of, FrameReceiver._learn, _DoneChannel.send, _DoneChannel._try, tr._done_message,
    tr._per_frame, tr._frame_id_of,
)


def _settle_run(state: dict[str, Any], receive: Callable[..., Any], injectors: list[Any]) -> None:
    """After one swept run: let go of what it received, receive (untraced) what a Ctrl-C before the receive left
    queued, forget the injectors' frames, collect."""
    got = state["got"]
    state["got"] = None
    if got is not None:
        got.release()
        del got
    while True:
        try:
            left = receive(timeout=0)
        except ProtocolError:
            continue
        except TransportTimeoutError:
            break
        if left is not None:
            left.release()
        del left
    for inj in injectors:
        inj.last.clear()
        inj.checks_after_call.clear()
    injectors.clear()
    gc.collect()


def _sweep_every_point(monkeypatch: pytest.MonkeyPatch, injector: type, op: Callable[[], None],
                       check: Callable[[bool, str | None], None], failures: list[str], watch: tuple[Any, ...],
                       more_than: int) -> None:
    """``op`` once uninterrupted (a warm run: every later one takes the same path, and ``check`` must pass it), then
    once with a Ctrl-C at each interrupt point of the ``watch`` functions (``injector`` raising it): no failure at any
    of more than ``more_than`` points."""
    op()
    check(False, None)
    failures.clear()
    monkeypatch.setattr(sigint, "_Interrupt", injector)
    points = _sweep(op, check, *watch)
    assert points > more_than
    assert not failures, f"{len(failures)} of {points} interrupt points:\n" + "\n".join(failures)


def _send_lines() -> set[int]:
    """Lines of transport.py holding the DONE channel's send call (see the module's doc)."""
    with open(tr.__file__) as fh:
        return {i for i, line in enumerate(fh, 1) if "self._sock.send(msg, _NOWAIT)" in line}


def _receive_lines() -> set[int]:
    """Lines of transport.py holding the receive call itself (the point left out, see the module's doc)."""
    with open(tr.__file__) as fh:
        return {i for i, line in enumerate(fh, 1) if "sock.recvmsg" in line}


def _with_pts(msg: bytes, pts: int) -> bytes:
    bad = bytearray(msg)
    bad[_PTS_AT:_PTS_AT + 8] = pts.to_bytes(8, "little")
    return bytes(bad)


@pytest.mark.parametrize("call", ["recv", "recv_views"])
@pytest.mark.parametrize("case", ["good", "torn", "bad-pts"])
def test_every_frame_is_answered_once_whatever_single_ctrl_c(monkeypatch: pytest.MonkeyPatch, call: str,
                                                              case: str) -> None:
    pool = FramePool(FrameFormat.NV12, 64, 32, 1)
    pf = pool.acquire(timeout=5)
    buf = buffers_of(pf)[0]
    off = pool.marker_offset
    address = buf.mapping(True).address
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    receive = getattr(rx, call)
    state: dict[str, Any] = {"fid": 10, "got": None}
    injectors: list[sigint._Interrupt] = []
    skip = _receive_lines()

    class _Injector(sigint._Interrupt):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            injectors.append(self)

    def message(fid: int, seq: int, refs: list[tuple[int, int, int]]) -> bytes:
        return _encode_slots(fid, pf, [buf], seq, off, refs)

    try:
        # frame 1 installs slot 0 generation 1, frame 2 refers to it: its layout is checked and cached (fast path)
        write_marker(address, off, MARKER_COMMITTED, 1)
        a.sendmsg([message(1, 1, [(0, REF_FD, 1)])],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        receive(timeout=5).release()
        write_marker(address, off, MARKER_COMMITTED, 2)
        a.send(message(2, 2, [(0, 0, 1)]))
        receive(timeout=5).release()
        gc.collect()
        _drain(a)[0]

        def op() -> None:
            state["fid"] = fid = state["fid"] + 1
            if case == "good":
                write_marker(address, off, MARKER_COMMITTED, fid)
                a.send(message(fid, fid, [(0, 0, 1)]))
            elif case == "torn":  # the marker still holds an older sequence
                a.send(message(fid, fid, [(0, 0, 1)]))
            else:  # a pts in a layout without one: a ProtocolError, the frame id answered
                a.send(_with_pts(message(fid, fid, [(0, 0, 1)]), 5))
            try:
                state["got"] = receive(timeout=0)
            except (TransportTimeoutError, ProtocolError):
                pass

        failures: list[str] = []

        def check(interrupted: bool, where: str | None) -> None:
            _settle_run(state, receive, injectors)
            fid = state["fid"]
            done = _drain(a)[0]
            if where is not None and any(f" line {n}:" in where for n in skip):
                return
            sent_unseen = where is not None and any(f" line {n}:" in where for n in _send_lines())
            if done.count(fid) not in ((1, 2) if sent_unseen else (1,)):
                failures.append(f"{where}: {done.count(fid)} DONEs for frame {fid}")

        _sweep_every_point(monkeypatch, _Injector, op, check, failures, _WATCH, more_than=5)
    finally:
        monkeypatch.undo()
        rx.close()
        a.close()
        pf.release()
        pool.close()


def test_a_refused_that_comes_before_the_senders_commit_is_not_dropped_as_stale() -> None:
    """86b9e98 reads the slot's generation without the send lock, but the sender records an install's generation
    (commit()) only after its message went out: a consumer that refuses the install at once (fds cut off, an unsealed
    buffer) sends a REFUSED the reader thread can take before that commit. It then reads the old generation, drops the
    valid REFUSED as stale, and the producer believes the consumer holds the fd: every later frame over that buffer
    names a slot the consumer never installed. Under the lock (before 86b9e98) the reader waited for the commit."""
    import threading

    from interop.transport import FrameSender, _refused_message
    from tests.support.transport_link import _SendObserved

    pool = FramePool(FrameFormat.NV12, 64, 32, 1)
    a, b = seqpacket_pair()
    tx = FrameSender(a)
    readers: list[threading.Thread] = []
    real = tx._sock.sendmsg
    announced: list[tuple[int, int]] = []

    def sendmsg(bufs: Any, anc: Any = (), flags: int = 0) -> Any:
        n = real(bufs, anc, flags)
        msg = bytes(bufs[0])
        installs = tr._announced(msg)
        if installs:
            announced.extend(installs)
            # the consumer refused the install at once; the reader thread takes its REFUSED while send() goes on
            t = threading.Thread(target=tx._on_refused, args=(_refused_message(*installs[0]),), daemon=True)
            t.start()
            t.join(0.5)
            readers.append(t)
        return n

    tx._sock = _SendObserved(tx._sock, None)
    tx._sock.sendmsg = sendmsg  # type: ignore[method-assign]
    try:
        f = pool.acquire(timeout=5)
        tx.send(f)
        f.release()
        for t in readers:
            t.join(5)
        assert announced
        index, gen = announced[0]
        assert tx._slots._buf[index] is None, (
            f"the REFUSED of slot {index} generation {gen} was dropped as stale: the producer believes the consumer "
            f"holds the fd")
    finally:
        tx.close()
        b.close()
        pool.close()


def _open_fds() -> set[int]:
    import os

    return {int(x) for x in os.listdir("/proc/self/fd")}


@pytest.mark.parametrize("call", ["recv", "recv_views"])
def test_a_ctrl_c_before_the_general_path_takes_the_fds_closes_them(monkeypatch: pytest.MonkeyPatch,
                                                                    call: str) -> None:
    """recv()'s and recv_views()' handlers answer a message a Ctrl-C interrupted before _message's try, but the fds
    that came with it (in the ancillary data, not yet a list) are never closed: one leaked fd per such Ctrl-C (the
    producer's buffer stays referenced by this process)."""
    pool = FramePool(FrameFormat.NV12, 64, 32, 1)
    pf = pool.acquire(timeout=5)
    buf = buffers_of(pf)[0]
    off = pool.marker_offset
    write_marker(buf.mapping(True).address, off, MARKER_COMMITTED, 1)
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    receive = getattr(rx, call)
    state: dict[str, Any] = {"fid": 0, "got": None, "before": set()}
    injectors: list[sigint._Interrupt] = []
    skip = _receive_lines()

    class _Injector(sigint._Interrupt):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            injectors.append(self)

    def op() -> None:
        state["fid"] = fid = state["fid"] + 1
        write_marker(buf.mapping(True).address, off, MARKER_COMMITTED, fid)
        a.sendmsg([_encode_slots(fid, pf, [buf], fid, off, [(0, REF_FD, fid)])],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        state["got"] = receive(timeout=5)

    failures: list[str] = []

    def check(interrupted: bool, where: str | None) -> None:
        _settle_run(state, receive, injectors)
        rx._drop_layouts()
        rx._table.close()
        rx._table.refused.clear()
        gc.collect()
        _drain(a)[0]
        leaked = _open_fds() - state["before"]
        if leaked and not (where is not None and any(f" line {n}:" in where for n in skip)):
            failures.append(f"{where}: {len(leaked)} fd(s) left open")
        state["before"] = _open_fds()

    try:
        state["before"] = _open_fds()
        _sweep_every_point(monkeypatch, _Injector, op, check, failures,
                           (FrameReceiver.recv, FrameReceiver.recv_views, FrameReceiver._message, tr._fds_of),
                           more_than=3)
    finally:
        monkeypatch.undo()
        rx.close()
        a.close()
        pf.release()
        pool.close()
