"""The transport at its edges: a wait longer than poll() takes on a socket at fd >= 1024, and a Ctrl-C at any point
of receiving a slot install, which must still answer the frame with exactly one DONE and the install not made with a
REFUSED.
"""

from __future__ import annotations

import array
import gc
import os
import socket
import struct
import sys
import threading

import pytest

import tests.test_locks_sigint as sigint
from interop import FrameFormat
from interop.tensors.dma import DMAContext, buffers_of
from interop.transport import (
    _HEAD,
    _REF,
    MSG_DONE,
    NO_MARKER,
    REF_FD,
    FrameReceiver,
    FrameSender,
    _encode_slots,
    _SlotTable,
    seqpacket_pair,
)
from tests.test_locks_sigint import _sweep

MSG_REFUSED = 5


def _high(sock: socket.socket) -> socket.socket:
    """The same socket moved to an fd >= 1024 (select() refuses those: _ready() waits in poll() there)."""
    fd = os.dup2(sock.fileno(), 1500 + sock.fileno())  # well above FD_SETSIZE, below the usual soft limit
    sock.close()
    return socket.socket(fileno=fd)


# ---- poll() for fds >= 1024 ----------------------------------------------------------------------------------


def test_a_long_timeout_on_a_socket_at_fd_1024_or_more_waits_like_one_below():
    """_ready() (651dbbc) hands poll() the timeout in milliseconds: poll() refuses more than 2**31 - 1 of them
    (24.8 days) with a bare OverflowError, which select() (fds below 1024) takes. recv(timeout=3e6) (a long wait,
    35 days) on a receiver whose socket is at fd >= 1024 raised OverflowError at once instead of waiting for the
    frame."""
    if os.sysconf("SC_OPEN_MAX") < 3000:
        pytest.skip("needs an fd limit above 3000")
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a), FrameReceiver(_high(b))
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    t = threading.Timer(0.3, lambda: tx.send(f))
    t.start()
    try:
        got = rx.recv(timeout=3e6)  # OverflowError('timeout is too large') before the frame came
        assert got is not None
        got.release()
    finally:
        t.join()
        tx.close()
        rx.close()
        f.release()


# ---- Ctrl-C between the receive and _build_slots's try: neither REFUSED nor DONE -----------------------------


def _drain(a: socket.socket) -> tuple[list[int], set[tuple[int, int]]]:
    """DONE frame ids (each time one came) and REFUSED (slot, generation) the consumer sent, read off the producer's
    end."""
    done: list[int] = []
    refused: set[tuple[int, int]] = set()
    while True:
        try:
            msg = a.recv(64, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return done, refused
        kind, fid = struct.unpack_from("<HQ", msg, 6)
        if kind == MSG_DONE:
            done.append(fid)
        elif kind == MSG_REFUSED:
            index, _, gen = _REF.unpack_from(msg, _HEAD.size)
            refused.add((index, gen))


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the interrupt points are CPython 3.11's")
def test_a_ctrl_c_anywhere_in_the_receive_of_an_install_answers_the_frame_and_the_install(monkeypatch):
    """605e138's promise: a slot install the consumer did not make is REFUSED (else the producer believes the consumer
    holds the fd and every later frame over that buffer is refused), and every frame is answered with DONE (else the
    producer's buffer is held until the connection closes). A Ctrl-C that lands in _build before _build_slots's try
    (in _slots_header, in _SlotTable.check, at _build_slots's entry, as Context.default returns) escapes
    ``except ProtocolError``: _message closes the fd, and neither the REFUSED nor the DONE is ever sent. The commit's
    own sweep (test_transport_resync) watches the same functions but checks only how often the fd was closed."""
    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    buf = buffers_of(f)[0]
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    rx._done.start()
    state: dict[str, object] = {"fid": 0, "got": None}
    injectors: list[sigint._Interrupt] = []

    class _Injector(sigint._Interrupt):
        def __init__(self, *args: object) -> None:
            super().__init__(*args)  # type: ignore[arg-type]
            injectors.append(self)

    def op() -> None:
        state["fid"] = fid = int(state["fid"]) + 1  # type: ignore[call-overload]
        msg = _encode_slots(fid, f, [buf], 0, NO_MARKER, [(0, REF_FD, fid)])
        a.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        state["got"] = rx.recv(timeout=5)

    failures: list[str] = []

    def check(interrupted: bool, where: str | None) -> None:
        got = state["got"]
        state["got"] = None
        if got is not None:
            got.release()  # type: ignore[attr-defined]
            del got
        for inj in injectors:
            inj.last.clear()
            inj.checks_after_call.clear()
        injectors.clear()
        gc.collect()
        fid = int(state["fid"])  # type: ignore[call-overload]
        e = rx._table.entries.get(0)
        installed = e is not None and e.gen == fid
        done, refused = _drain(a)
        if fid not in done:
            failures.append(f"{where}: no DONE for frame {fid} (its buffer is held until the connection closes)")
        elif done.count(fid) > 1:
            failures.append(f"{where}: {done.count(fid)} DONEs for frame {fid} (the producer logs the extra as bad)")
        elif not installed and (0, fid) not in refused:
            failures.append(f"{where}: the install of slot 0 generation {fid} was neither made nor REFUSED")
        rx._table.close()
        rx._table.refused.clear()

    try:
        op()  # warm: the receiver's context made once, so every run takes the same path
        check(False, None)
        failures.clear()
        monkeypatch.setattr(sigint, "_Interrupt", _Injector)
        points = _sweep(op, check, FrameReceiver._build, FrameReceiver._slots_header, _SlotTable.check,
                        FrameReceiver._build_slots)
        assert points > 10
        assert not failures, f"{len(failures)} of {points} interrupt points:\n" + "\n".join(failures)
    finally:
        monkeypatch.undo()
        rx.close()
        a.close()
        f.release()


@pytest.mark.parametrize("call, step", [("recv", "_per_frame"), ("recv_views", "_spare_views")])
def test_a_ctrl_c_on_the_fast_path_before_the_frame_is_held_still_answers_it(monkeypatch: pytest.MonkeyPatch,
                                                                            call: str, step: str) -> None:
    """The fast path of a frame over buffers the receiver holds, in a layout it checked: a Ctrl-C before the frame's
    lease or the views' hold takes the answer over (in the per-frame check, as recv_views() makes its views) left
    the frame unanswered, its buffer held until the connection closed. It is answered once."""
    import gc
    import time

    import interop.transport as tr

    f = DMAContext().alloc_frame(FrameFormat.GRAY8, 16, 16)
    buf = buffers_of(f)[0]
    a, b = seqpacket_pair()
    rx = FrameReceiver(b)
    receive = getattr(rx, call)
    try:
        # frame 1 installs slot 0 (its fd); frame 2 refers to it (its layout checked and cached); frame 3 takes the
        # fast path
        a.sendmsg([_encode_slots(1, f, [buf], 1, NO_MARKER, [(0, REF_FD, 1)])],
                  [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [buf.fd]))])
        for fid in (1, 2, 3):
            if fid > 1:
                a.send(_encode_slots(fid, f, [buf], fid, NO_MARKER, [(0, 0, 1)]))
            if fid < 3:
                got = receive(timeout=5)
                assert got is not None
                got.release()
                del got
                continue
            rx._spares.clear()  # recv_views() makes its views after the receive, not before the wait
            rx._spare_next = None
            real = getattr(tr, step)

            def interrupted(*args: object, real: object = real) -> object:
                monkeypatch.setattr(tr, step, real)
                raise KeyboardInterrupt

            monkeypatch.setattr(tr, step, interrupted)
            with pytest.raises(KeyboardInterrupt):
                receive(timeout=5)
        gc.collect()
        time.sleep(0.2)  # the DONE channel's flusher
        done, _ = _drain(a)
        assert done.count(3) == 1, f"frame 3 answered {done.count(3)} times (DONEs: {done})"
    finally:
        rx.close()
        a.close()
        f.release()


