"""A Ctrl-C inside FrameSender.send() never gives back a buffer the consumer may have, never leaves the slot tables
of producer and consumer apart, and never leaves the send lock held or a frame id's buffer out of its pool.

Python raises a signal's exception (KeyboardInterrupt) at the next call boundary: as a call returns or a function
starts. Each test sets Python's pending-interrupt flag (``_thread.interrupt_main()``, what a SIGINT does) at one such
moment of a send: one after the message went out must leave the frame in flight (its buffer comes back with the
consumer's release, never under its views) and the next frames must go on; one before leaves nothing sent and the
buffer free at once.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

import interop
import interop.transport as transport
from interop import AccessMode, FrameFormat, MemoryType
from interop.tensors.dma import FramePool, PoolTimeoutError
from interop.transport import FrameReceiver, FrameSender, seqpacket_pair


class _Armed:
    """Fires ``_thread.interrupt_main()`` once, at the moment a test picks (then Python raises KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.armed = False

    def fire(self) -> None:
        if self.armed:
            self.armed = False
            _thread.interrupt_main()


class _Socket:
    """The sender's socket, firing as a send returns (the message is out)."""

    def __init__(self, sock, trigger: _Armed):
        self._sock, self._trigger = sock, trigger

    def __getattr__(self, name):
        return getattr(self._sock, name)

    def send(self, *args):
        n = self._sock.send(*args)
        self._trigger.fire()
        return n

    def sendmsg(self, *args):
        n = self._sock.sendmsg(*args)
        self._trigger.fire()
        return n


class _Lock:
    """The send lock, firing as it is let go (after the lines it guarded ran)."""

    def __init__(self, lock, trigger: _Armed):
        self._lock, self._trigger = lock, trigger

    def __getattr__(self, name):
        return getattr(self._lock, name)

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        self._lock.__exit__(*exc)
        self._trigger.fire()


def _write(pool, value: int):
    f = pool.acquire(timeout=5)
    with interop.map(f, MemoryType.CPU, mode=AccessMode.WRITE) as w:
        np.asarray(w[0])[:] = value
    return f


def _send(pool, tx, value: int) -> None:
    f = _write(pool, value)
    tx.send(f)
    f.release()


def _through(pool, tx, rx, value: int) -> None:
    """A frame sent, received with its value, released and back."""
    _send(pool, tx, value)
    views = rx.recv_views(timeout=5)
    assert int(views[0][0, 0]) == value
    views.release()
    assert tx.wait_returned(5)


@contextlib.contextmanager
def _connected(buffers: int, **sender):
    """A pool of ``buffers`` GRAY8 frames, a sender (``sender``: its options) and a receiver; closed after."""
    pool = FramePool(FrameFormat.GRAY8, 32, 16, buffers)
    a, b = seqpacket_pair()
    tx, rx = FrameSender(a, **sender), FrameReceiver(b)
    try:
        yield pool, tx, rx
    finally:
        tx.close()
        rx.close()
        pool.close()


class Deadline(Exception):
    """What a program's own signal handler may raise (a SIGALRM deadline), at any call boundary as Ctrl-C is."""


def _interrupted_send(pool, tx, value: int) -> None:
    f = _write(pool, value)
    with pytest.raises((KeyboardInterrupt, Deadline)):
        tx.send(f)
        time.sleep(5)  # not reached: the interrupt comes inside send()
    f.release()


# where the interrupt comes once the message is out: (the path, how the moment is picked)
_AFTER_THE_MESSAGE = {
    "as a first send returns (fds, slot assigned)": ("first", "socket"),
    "inside the slot commit after a first send": ("first", "commit"),
    "a signal handler's own exception inside the slot commit": ("first", "commit raising"),
    "as a first send's plan is learnt": ("first", "learn"),
    "as a planned send returns": ("planned", "socket"),
    "as the lock is let go after a planned send": ("planned", "lock"),
    "as a send with fds every frame returns": ("fds every frame", "socket"),
}


@pytest.mark.parametrize("where", list(_AFTER_THE_MESSAGE))
def test_a_ctrl_c_once_the_message_is_out_keeps_the_frame_in_flight(where, monkeypatch):
    path, moment = _AFTER_THE_MESSAGE[where]
    trigger = _Armed()
    with _connected(1, **({"slots": 0} if path == "fds every frame" else {})) as (pool, tx, rx):
        if path == "planned":
            for k in range(3):  # the buffer crossed and its plan is made
                _through(pool, tx, rx, k)
        if moment == "socket":
            tx._sock = _Socket(tx._sock, trigger)
        elif moment == "lock":
            tx._send_lock = _Lock(tx._send_lock, trigger)
        elif moment.startswith("commit"):
            refs = transport._SlotAssigner.refs

            def refs_firing_in_commit(self, bufs, forgotten):
                r, fds, commit, abandon = refs(self, bufs, forgotten)

                def firing() -> None:
                    if moment == "commit raising" and trigger.armed:  # e.g. a SIGALRM deadline's handler
                        trigger.armed = False
                        raise Deadline
                    trigger.fire()  # raised as fire() returns: inside the commit, before its stores
                    commit()

                return r, fds, firing, abandon

            monkeypatch.setattr(transport._SlotAssigner, "refs", refs_firing_in_commit)
        else:
            learn = FrameSender._learn

            def learn_firing(self, *args):
                trigger.fire()
                return learn(self, *args)

            monkeypatch.setattr(FrameSender, "_learn", learn_firing)
        trigger.armed = True
        sent, fds = tx.sent, tx.fds_sent
        _interrupted_send(pool, tx, 77)
        assert not trigger.armed
        assert tx.in_flight == 1  # it went out: held for the consumer
        assert tx.sent == sent + 1, "a frame that went out is counted"
        assert tx.fds_sent == fds + (0 if path == "planned" else 1)
        with pytest.raises(PoolTimeoutError):  # so not back in the pool, where the next frame would overwrite it
            pool.acquire(timeout=0.05)
        views = rx.recv_views(timeout=5)  # the consumer has it, intact
        assert int(views[0][0, 0]) == 77
        views.release()
        assert tx.wait_returned(5) and tx.in_flight == 0
        for k in (78, 79):  # and both sides go on: the same slot table on each side
            _through(pool, tx, rx, k)
        assert tx.bad_messages == 0


def test_a_ctrl_c_as_the_frame_id_is_taken_gives_the_buffer_back_at_once():
    """The general path takes the frame's id under the lock, then sends: an interrupt as that lock is let go comes
    before anything went out."""
    trigger = _Armed()
    with _connected(1) as (pool, tx, rx):
        tx._send_lock = _Lock(tx._send_lock, trigger)
        trigger.armed = True
        _interrupted_send(pool, tx, 5)
        assert tx.in_flight == 0 and tx.wait_returned(0)
        pool.acquire(timeout=1).release()  # free at once, its use given back once
        with pytest.raises(TimeoutError):  # nothing was sent
            rx.recv_views(timeout=0.2)
        _through(pool, tx, rx, 6)
        tx.close()
        pool.acquire(timeout=1).release()  # close() gives back nothing twice


def test_a_ctrl_c_while_send_waits_for_its_lock_lets_the_lock_go():
    with _connected(2) as (pool, tx, rx):
        for k in range(3):
            _through(pool, tx, rx, k)
        lock = tx._send_lock
        lock.acquire()  # another thread's send holds it: this one waits for it

        def ctrl_c() -> None:
            time.sleep(0.2)
            _thread.interrupt_main()
            time.sleep(0.2)
            lock.release()

        threading.Thread(target=ctrl_c).start()
        f = _write(pool, 5)
        with pytest.raises(KeyboardInterrupt):
            tx.send(f)
            time.sleep(5)  # the interrupt lands in send() or, at the latest, here
        f.release()
        time.sleep(0.3)
        assert not lock.locked()
        while True:  # whatever went out reaches the consumer and comes back
            try:
                views = rx.recv_views(timeout=0.5)
            except TimeoutError:
                break
            views.release()
        assert tx.wait_returned(5) and tx.in_flight == 0
        _through(pool, tx, rx, 6)


def test_tries_that_find_the_socket_full_leave_no_close_callback_behind():
    """A first send's close callbacks are made before the message goes out (so that nothing after it needs a call):
    each try that finds the consumer's socket full takes them back."""
    pool = FramePool(FrameFormat.GRAY8, 32, 16, 64)
    a, b = seqpacket_pair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # the kernel's smallest: full after a few messages
    tx, rx = FrameSender(a), FrameReceiver(b)  # the consumer does not read
    frames = []
    try:
        for k in range(64):
            f = _write(pool, k)
            frames.append(f)
            try:
                tx.send(f, timeout=0.5)  # several tries, 0.2 s apart
            except TimeoutError:
                break
        else:
            pytest.fail("the consumer's socket never filled")
        buf = transport._buffers(f)[0]
        assert len(buf._on_close) == 0, len(buf._on_close)  # never committed: no callback at all
    finally:
        for f in frames:
            f.release()
        tx.close()
        rx.close()
        pool.close()


def test_a_first_send_interrupted_before_its_message_never_forgets_another_buffers_slot(monkeypatch):
    """Its close callback, made before the message, names a slot and generation never committed: a generation is
    never announced again, so when that buffer closes, its FORGET cannot name the slot the next buffer took."""
    other = FramePool(FrameFormat.GRAY8, 32, 16, 1)
    with _connected(1) as (pool, tx, rx):
        real = transport._slots_template
        armed = [True]

        def interrupted(*args):
            if armed[0]:
                armed[0] = False
                raise KeyboardInterrupt  # what Python raises at this call boundary on a Ctrl-C
            return real(*args)

        monkeypatch.setattr(transport, "_slots_template", interrupted)
        fx = _write(other, 1)
        with pytest.raises(KeyboardInterrupt):
            tx.send(fx)
        assert tx.in_flight == 0
        fx.release()
        _through(pool, tx, rx, 2)  # another buffer takes a slot (the same one: the first was never committed)
        other.close()  # the first buffer goes (its close callback runs)
        time.sleep(0.1)
        before = tx.fds_sent
        for k in (3, 4):  # the other buffer's slot still names it: its fd is not passed again
            _through(pool, tx, rx, k)
        assert tx.fds_sent == before


def test_a_signal_while_the_count_waits_for_the_send_lock_still_counts_the_frame():
    """slots=0: a frame that went out is counted under the send lock; a signal whose handler raises (a program's
    deadline) while that count waits for the lock (another thread's send holds it) still leaves the frame counted."""

    def handler(signum, frame):
        raise Deadline

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        with _connected(2, slots=0) as (pool, tx, rx):
            real = tx._sock

            class Contended:
                def __getattr__(self, name):
                    return getattr(real, name)

                def sendmsg(self, *args):
                    n = real.sendmsg(*args)
                    held = threading.Event()

                    def other_send() -> None:  # another thread inside send(), holding the lock a moment
                        with tx._send_lock:
                            held.set()
                            time.sleep(0.5)

                    threading.Thread(target=other_send).start()
                    held.wait(5)
                    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGUSR1)).start()  # as the count waits
                    return n

            tx._sock = Contended()
            f = _write(pool, 5)
            with pytest.raises(Deadline):
                tx.send(f)
            f.release()
            assert (tx.sent, tx.fds_sent) == (1, 1)
            views = rx.recv_views(timeout=5)
            assert int(views[0][0, 0]) == 5
            views.release()
            assert tx.wait_returned(5)
    finally:
        signal.signal(signal.SIGUSR1, old)


class _Trip(int):
    # called by the interpreter as the object is freed (no bytecode, so no check of pending signals there): Python's
    # pending-interrupt flag is set (signal 2, SIGINT) with no call boundary until the next function starts
    __del__ = _thread.interrupt_main


def test_a_signal_pending_as_the_count_starts_still_counts_the_frame():
    """slots=0: an interrupt pending as send() goes on to count a frame that went out is raised at the next call
    boundary; a count made in a function of its own would be cut off at that function's entry."""
    with _connected(2, slots=0) as (pool, tx, rx):
        real = tx._send_message

        def send_message(*args):
            real(*args)
            trip = _Trip(2)  # noqa: F841 - freed as this frame returns: the flag is set then
            return None

        tx._send_message = send_message
        f = _write(pool, 5)
        with pytest.raises(KeyboardInterrupt):
            tx.send(f)
        f.release()
        views = rx.recv_views(timeout=5)  # the frame went out
        assert int(views[0][0, 0]) == 5
        views.release()
        assert (tx.sent, tx.fds_sent) == (1, 1)
