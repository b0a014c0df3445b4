"""interop.postpool.PostPool: text boxes made in processes of their own from maps in shared memory.

Same boxes as ``textdet.boxes_from_map`` in this process, bounded slots (back-pressure), submissions from many
threads, and the faults: a child killed, a forged or malformed answer, an ``on_boxes`` that raises, a map larger than
the slots, a child given a job that is not inside the shared block. Nothing is left behind (processes, fds).
"""

from __future__ import annotations

import contextlib
import gc
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from interop import textdet
from interop.postpool import _DONE, _JOB, PostPool, PostPoolArgumentError, PostPoolError, slot_bytes

H, W = 96, 160


def _map(seed: int) -> np.ndarray:
    """A probability map with a few text-like blobs (rectangles of high probability on noise)."""
    rng = np.random.default_rng(seed)
    m = rng.random((H, W), dtype=np.float32) * 0.2
    for _ in range(1 + seed % 4):
        y, x = int(rng.integers(0, H - 20)), int(rng.integers(0, W - 50))
        m[y:y + int(rng.integers(6, 18)), x:x + int(rng.integers(15, 48))] = 0.5 + 0.5 * rng.random(dtype=np.float32)
    return m


def _same(a: list, b: list) -> bool:
    return [(x.points.tolist(), x.score) for x in a] == [(x.points.tolist(), x.score) for x in b]


def _fds() -> int:
    gc.collect()  # fds held by earlier tests' garbage (a collected Popen's pipes) go now, not inside a count
    return len(os.listdir("/proc/self/fd"))


@contextlib.contextmanager
def _bare_child(slots: int, **popen: Any) -> Iterator[tuple[subprocess.Popen, socket.socket, mmap.mmap]]:
    """A post-processing process started as PostPool starts one, over a block of ``slots`` slots of an H x W map
    (mapped here too, to write maps into), after it said it is ready: (process, our socket end, the block)."""
    size = slot_bytes(H * W)
    fd = os.memfd_create("t", os.MFD_CLOEXEC)
    os.ftruncate(fd, size * slots)
    mem = mmap.mmap(fd, size * slots)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        p = subprocess.Popen([sys.executable, "-m", "interop.postpool", str(theirs.fileno()), str(fd), str(size),
                              str(slots)], pass_fds=[theirs.fileno(), fd], **popen)
        theirs.close()
        assert ours.recv(64) == b"R"  # ready
        yield p, ours, mem
    finally:
        ours.close()
        mem.close()
        os.close(fd)


def test_boxes_are_those_made_in_process_for_every_key_with_back_pressure() -> None:
    fds = _fds()
    got: dict[int, list] = {}
    maps = [_map(s) for s in range(40)]
    pool = PostPool(lambda k, b: got.__setitem__(k, b), H * W, processes=2, slots=3)
    procs = [c.proc for c in pool._children]
    pool.wait_ready()
    assert all(c.ready for c in pool._children)
    with pool:
        for i, m in enumerate(maps):  # more maps than slots: submit waits for answers
            pool.submit(m[None, None], i, 640, 384)
    assert sorted(got) == list(range(len(maps)))
    for i, m in enumerate(maps):
        assert _same(got[i], textdet.boxes_from_map(m, 640, 384))
    assert any(got[i] for i in got)
    assert pool.bytes_copied == len(maps) * H * W * 4
    assert all(p.poll() is not None for p in procs)  # children gone
    assert _fds() == fds


def test_submit_from_many_threads() -> None:
    got: dict[tuple[int, int], list] = {}
    lock = threading.Lock()

    def on_boxes(k: tuple[int, int], b: list) -> None:
        with lock:
            got[k] = b

    with PostPool(on_boxes, H * W, processes=2, slots=4) as pool:
        def feed(t: int) -> None:
            for i in range(15):
                pool.submit(_map(t * 100 + i), (t, i), W, H)
        threads = [threading.Thread(target=feed, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(got) == 60
    assert all(_same(got[(t, i)], textdet.boxes_from_map(_map(t * 100 + i), W, H)) for t, i in got)


def test_a_killed_child_fails_the_pool_with_a_typed_error_not_a_hang() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2)
    pool.submit(_map(1), 0, W, H)
    os.kill(pool._children[0].proc.pid, signal.SIGKILL)
    with pytest.raises(PostPoolError, match=r"post-processing process \d+ exited killed by signal 9"):
        for i in range(100):  # the reader notices the death; then submit refuses
            pool.submit(_map(i), i, W, H)
    with pytest.raises(PostPoolError):
        pool.close()


def test_a_child_that_dies_before_it_is_ready_fails_wait_ready() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=1)
    os.kill(pool._children[0].proc.pid, signal.SIGKILL)  # long before it has imported OpenCV
    with pytest.raises(PostPoolError, match="exited"):
        pool.wait_ready()
    with pytest.raises(PostPoolError):
        pool.close()
    pool.close()  # closed once: nothing more to do


def test_an_on_boxes_error_ends_the_pool_and_is_raised_as_it_is_by_check_and_close() -> None:
    def bad(k: int, b: list) -> None:
        raise KeyError("the caller's bug")

    pool = PostPool(bad, H * W, processes=1)
    pool.submit(_map(2), 0, W, H)
    with pytest.raises(PostPoolError, match="stopped: KeyError"):  # the feeding threads learn that the pool ended
        for i in range(100):
            pool.submit(_map(2), i, W, H)
            time.sleep(0.01)
    assert isinstance(pool.error, KeyError)
    with pytest.raises(KeyError, match="the caller's bug") as e:
        pool.check()
    assert any(tb.name == "bad" for tb in e.traceback)  # where it happened, not where it was re-raised
    with pytest.raises(KeyError, match="the caller's bug"):
        pool.close()


def _stopped(processes: int, slots: int) -> tuple[PostPool, subprocess.Popen]:
    """A pool with a one-second timeout whose first child is stopped (SIGSTOP: alive, answering nothing)."""
    pool = PostPool(lambda k, b: None, H * W, processes=processes, slots=slots, timeout=1.0)
    pool.wait_ready()
    stopped = pool._children[0].proc
    os.kill(stopped.pid, signal.SIGSTOP)
    return pool, stopped


def test_one_stopped_child_of_two_ends_the_pool_within_the_timeout() -> None:
    """The other child keeps taking maps, so no slot wait would notice: the reader finds the overdue answer."""
    pool, stopped = _stopped(2, 8)
    t0 = time.monotonic()
    with pytest.raises(PostPoolError, match="stopped"):
        while time.monotonic() - t0 < 10:
            pool.submit(_map(1), 0, W, H)
            time.sleep(0.02)
    with pytest.raises(PostPoolError, match=f"process {stopped.pid} has not answered"):
        pool.check()
    with pytest.raises(PostPoolError):
        pool.close()
    assert stopped.poll() is not None


def test_close_from_on_boxes_is_refused_not_a_deadlock() -> None:
    holder: list[PostPool] = []
    pool = PostPool(lambda k, b: holder[0].close(), H * W, processes=1, timeout=5.0)
    holder.append(pool)
    pool.submit(_map(1), 0, W, H)
    with pytest.raises(PostPoolError, match="from on_boxes"):
        pool.close()


def test_a_child_whose_parent_resets_its_socket_exits_quietly() -> None:
    with _bare_child(1, stderr=subprocess.PIPE) as (p, ours, _):
        ours.send(_JOB.pack(1, 0, H, W, W, H))
        ours.close()  # gone before the answer: the child's send fails
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0 and b"Traceback" not in err, err


def test_a_child_that_hangs_fails_submit_within_the_timeout_not_for_ever() -> None:
    pool, child = _stopped(1, 2)
    t0 = time.monotonic()
    with pytest.raises(PostPoolError, match="hangs") as e:
        for i in range(3):  # two slots: the third waits for an answer that never comes
            pool.submit(_map(i), i, W, H)
    assert time.monotonic() - t0 < 10
    assert f"pid {child.pid}" in str(e.value)
    with pytest.raises(PostPoolError):
        pool.close()
    assert child.poll() is not None  # killed, stopped as it was


def test_a_close_interrupted_by_ctrl_c_has_stopped_the_children() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=2)
    procs = [c.proc for c in pool._children]

    def interrupted() -> None:
        raise KeyboardInterrupt

    pool._drain = interrupted  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        pool.close()
    assert all(p.poll() is not None for p in procs) and not pool._reader.is_alive()
    pool.close()  # nothing left to do


@pytest.mark.parametrize("kw", [{"processes": 0}, {"slots": 0}, {"timeout": 0}, {"max_pixels": 0}])
def test_bad_arguments_are_refused_with_a_typed_error(kw: dict) -> None:
    args = {"max_pixels": H * W, **kw}
    with pytest.raises(PostPoolArgumentError):
        PostPool(lambda k, b: None, **args)


def test_a_map_that_is_not_one_channel_is_refused() -> None:
    with PostPool(lambda k, b: None, H * W, processes=1) as pool, pytest.raises(PostPoolArgumentError, match="H, W"):
        pool.submit(np.zeros((1, 2, H, W), np.float32), 0, W, H)


def test_a_map_larger_than_the_slots_is_refused() -> None:
    with PostPool(lambda k, b: None, H * W, processes=1) as pool, \
            pytest.raises(PostPoolArgumentError, match="does not fit"):
        pool.submit(np.zeros((H * 2, W * 2), np.float32), 0, W, H)


@pytest.mark.parametrize("case", ["unknown job", "wrong slot", "short", "length", "too many", "not a number"])
def test_forged_answers_are_refused(case: str) -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2)
    try:
        with pool._cond:  # a job as submit records it, without a child working on it
            pool._pending[7] = ("key", 1, 0)
        box = np.array([1, 2, 3, 2, 3, 4, 1, 4, 0.9])
        msg = {"unknown job": _DONE.pack(8, 1, 1) + box.tobytes(),
               "wrong slot": _DONE.pack(7, 0, 1) + box.tobytes(),
               "short": b"\x07\x00",
               "length": _DONE.pack(7, 1, 2) + box.tobytes(),
               "too many": _DONE.pack(7, 1, textdet.MAX_CANDIDATES + 1) + box.tobytes() * (textdet.MAX_CANDIDATES + 1),
               "not a number": _DONE.pack(7, 1, 1) + np.where(np.arange(9) == 3, np.nan, box).tobytes()}[case]
        with pytest.raises(PostPoolError):
            pool._parse(msg, 0)
    finally:
        with pool._cond:
            pool._pending.clear()
        pool.close(raise_error=False)


def test_a_forged_answer_parses_to_the_boxes_it_carries() -> None:
    """The check above refuses what is wrong; a right answer gives back exactly the boxes sent."""
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2)
    try:
        with pool._cond:
            pool._pending[7] = ("key", 1, 0)
            pool._free.remove(1)
        box = np.array([1, 2, 3, 2, 3, 4, 1, 4, 0.9])
        key, boxes = pool._parse(_DONE.pack(7, 1, 1) + box.tobytes(), 0)
        assert key == "key" and len(boxes) == 1 and boxes[0].score == 0.9
        assert boxes[0].points.dtype == np.float32 and boxes[0].points.tolist() == [[1, 2], [3, 2], [3, 4], [1, 4]]
        assert 1 in pool._free
    finally:
        pool.close(raise_error=False)


@pytest.mark.parametrize("job", [_JOB.pack(1, 9, H, W, W, H), _JOB.pack(1, 0, H * 4, W * 4, W, H),
                                 _JOB.pack(1, 0, H, W, 0, H), b"\x01\x02\x03"])
def test_a_child_given_a_job_outside_its_block_exits_with_status_2(job: bytes) -> None:
    with _bare_child(2) as (p, ours, _):
        ours.send(job)
        assert p.wait(60) == 2
        assert ours.recv(64) == b""  # nothing answered


def test_a_child_answers_a_valid_job_then_exits_when_the_socket_closes() -> None:
    m = _map(3)
    with _bare_child(2) as (p, ours, mem):
        off = slot_bytes(H * W) // 4  # slot 1
        np.frombuffer(mem, np.float32)[off:off + H * W] = m.reshape(-1)
        ours.send(_JOB.pack(5, 1, H, W, 320, 192))
        msg = ours.recv(1 << 16)
        seq, slot, n = _DONE.unpack_from(msg)
        ref = textdet.boxes_from_map(m, 320, 192)
        assert (seq, slot, n) == (5, 1, len(ref)) and n > 0
        vals = np.frombuffer(msg, np.float64, offset=_DONE.size).reshape(n, 9)
        assert vals[:, :8].reshape(n, 4, 2).tolist() == [b.points.tolist() for b in ref]
        assert vals[:, 8].tolist() == [b.score for b in ref]
        ours.close()
        assert p.wait(60) == 0


def test_wait_done_waits_for_every_on_boxes_and_keeps_the_pool_open() -> None:
    got: list[int] = []
    gate = threading.Event()

    def on_boxes(k: int, b: list) -> None:
        gate.wait(10)
        got.append(k)

    with PostPool(on_boxes, H * W, processes=1, slots=4) as pool:
        for i in range(3):
            pool.submit(_map(i), i, W, H)
        threading.Timer(0.2, gate.set).start()
        pool.wait_done()  # returns only once on_boxes returned for all three, not when the answers arrive
        assert got == [0, 1, 2]
        pool.submit(_map(3), 3, W, H)  # still open
        pool.wait_done()
        assert got == [0, 1, 2, 3]


def test_wait_done_raises_what_ended_the_pool_and_a_hang_past_its_timeout() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2)
    pool.submit(_map(1), 0, W, H)
    os.kill(pool._children[0].proc.pid, signal.SIGSTOP)  # stopped: answers nothing
    try:
        pool.submit(_map(2), 1, W, H)
        with pytest.raises(PostPoolError, match="2 maps still without boxes after 0.3 s"):
            pool.wait_done(timeout=0.3)
        with pytest.raises(PostPoolError, match="without boxes"):
            pool.wait_done()  # the pool has ended: said again at once
    finally:
        os.kill(pool._children[0].proc.pid, signal.SIGCONT)
        pool.close(raise_error=False)


def test_children_cpu_is_counted_and_kept_after_close() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=2, slots=4)
    pool.wait_ready()
    c0 = pool.cpu_seconds()
    for i in range(40):
        pool.submit(_map(i), i, W, H)
    pool.wait_done()
    c1 = pool.cpu_seconds()
    assert c1 > c0 > 0  # their imports, then the boxes
    pool.close()
    assert pool.cpu_seconds() >= c1  # as they were when close() stopped them, not 0
    assert pool.cpu_seconds() == pool.cpu_seconds()


def test_a_child_starts_no_blas_thread_pool() -> None:
    # numpy's OpenBLAS and the one OpenCV's wheel bundles each start one thread per CPU at import, which spin through
    # OpenCV's calls on the cores the inference needs: the children are started without them
    with PostPool(lambda k, b: None, H * W, processes=1) as pool:
        pool.wait_ready()
        pid = pool._children[0].proc.pid
        assert len(os.listdir(f"/proc/{pid}/task")) == 1
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        assert b"OPENBLAS_NUM_THREADS=1" in env


def test_a_map_of_a_type_that_does_not_cast_is_refused_and_keeps_no_slot() -> None:
    got: list[int] = []
    with PostPool(lambda k, b: got.append(k), H * W, processes=1, slots=1, timeout=5) as pool:
        with pytest.raises(PostPoolArgumentError, match="float32"):
            pool.submit(_map(1).astype(np.complex64), 0, W, H)
        pool.submit(_map(2), 1, W, H)  # the one slot is still free
        pool.wait_done()
    assert got == [1]


def test_a_send_that_fails_to_a_live_process_says_why() -> None:
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2)
    pool.wait_ready()
    child = pool._children[0]
    os.kill(child.proc.pid, signal.SIGSTOP)  # alive, and not reading
    try:
        child.sock.shutdown(socket.SHUT_WR)  # our sends now fail while the process lives
        with pytest.raises(PostPoolError, match=rf"could not be sent to post-processing process {child.proc.pid} \("):
            pool.submit(_map(1), 0, W, H)
    finally:
        os.kill(child.proc.pid, signal.SIGCONT)
        pool.close(raise_error=False)


def test_a_submit_interrupted_before_its_job_went_gives_its_slot_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import interop.postpool as pp

    got: list[int] = []
    with PostPool(lambda k, b: got.append(k), H * W, processes=1, slots=1, timeout=5) as pool:
        class Interrupted:  # a Ctrl-C on the submitting thread once the map is copied, before the job is sent
            size = _JOB.size

            @staticmethod
            def pack(*args: Any) -> bytes:
                raise KeyboardInterrupt

        monkeypatch.setattr(pp, "_JOB", Interrupted)
        with pytest.raises(KeyboardInterrupt):
            pool.submit(_map(1), 0, W, H)
        monkeypatch.undo()
        pool.submit(_map(2), 1, W, H)  # the one slot is free again, and nothing waits for the first job
        pool.wait_done(timeout=5)
    assert got == [1]


def test_a_callback_that_does_not_return_is_named_not_the_processes() -> None:
    gate = threading.Event()
    pool = PostPool(lambda k, b: gate.wait(10), H * W, processes=1, slots=2, timeout=5)
    try:
        pool.wait_ready()
        for i in range(2):
            pool.submit(_map(i), i, W, H)
        deadline = time.monotonic() + 5
        while pool._in_on_boxes is None and time.monotonic() < deadline:  # the reader is inside on_boxes
            time.sleep(0.01)
        with pytest.raises(PostPoolError, match=r"on_boxes \(the caller's callback\) has been running for"):
            pool.wait_done(timeout=0.3)
    finally:
        gate.set()
        pool.close(raise_error=False)


def _closes_at_once_saying(pool: PostPool, match: str) -> None:
    """close() raises the PostPoolError that ended the pool, without waiting the pool's timeout (30 s here) for an
    answer that may never come."""
    t0 = time.monotonic()
    with pytest.raises(PostPoolError, match=match):
        pool.close()
    assert time.monotonic() - t0 < 10


def test_a_submit_interrupted_once_its_map_went_ends_the_pool_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A Ctrl-C pending during the send surfaces once it returns: the datagram went, the process has the job
    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2, timeout=30)
    try:
        pool.wait_ready()

        class SentThenInterrupted:
            def __init__(self, sock: socket.socket) -> None:
                self.sock = sock

            def send(self, data: bytes) -> int:
                self.sock.send(data)
                raise KeyboardInterrupt

            def __getattr__(self, name: str) -> Any:
                return getattr(self.sock, name)

        child = pool._children[0]
        monkeypatch.setattr(child, "sock", SentThenInterrupted(child.sock))
        with pytest.raises(KeyboardInterrupt):
            pool.submit(_map(1), 0, W, H)
        monkeypatch.undo()
        # not the slot given back and reused under the process's answer ('answered job 1, which it was not given')
        _closes_at_once_saying(pool, "interrupted while it took a slot, sent its map")
    finally:
        pool.close(raise_error=False)


def test_an_empty_map_is_refused_before_a_slot_is_taken() -> None:
    with PostPool(lambda k, b: None, H * W, processes=1, slots=1, timeout=5) as pool:
        with pytest.raises(PostPoolArgumentError, match="at least one pixel"):
            pool.submit(np.zeros((0, W), np.float32), 0, W, H)
        pool.submit(_map(2), 1, W, H)  # the process is alive, the slot free
        pool.wait_done()


@pytest.mark.parametrize("size", [0, -1, 1 << 32, 2.5, True])
def test_a_frame_size_that_is_not_pixels_is_refused_before_a_slot_is_taken(size: Any) -> None:
    with PostPool(lambda k, b: None, H * W, processes=1, slots=1, timeout=5) as pool:
        with pytest.raises(PostPoolArgumentError, match="frame_width is the frame's size in pixels"):
            pool.submit(_map(1), 0, size, H)
        with pytest.raises(PostPoolArgumentError, match="frame_height is the frame's size in pixels"):
            pool.submit(_map(1), 0, W, size)
        pool.submit(_map(2), 1, W, H)  # the one slot is still free
        pool.wait_done()


def test_a_slow_on_boxes_does_not_make_an_answered_map_overdue() -> None:
    got: list[int] = []

    def on_boxes(k: int, b: list) -> None:
        if k == 0:
            time.sleep(1.6)  # longer than the pool's timeout; the second map's answer comes meanwhile
        got.append(k)

    with PostPool(on_boxes, H * W, processes=1, slots=4, timeout=1) as pool:
        pool.wait_ready()
        pool.submit(_map(0), 0, W, H)
        pool.submit(_map(1), 1, W, H)
        pool.wait_done(timeout=10)
    assert got == [0, 1]


def test_a_submit_held_up_by_a_slow_on_boxes_names_on_boxes() -> None:
    release = threading.Event()

    def on_boxes(k: int, b: list) -> None:
        release.wait(10)  # the caller's callback holds the reader: answers wait unread, the slots stay taken

    pool = PostPool(on_boxes, H * W, processes=1, slots=1, timeout=1)
    try:
        pool.wait_ready()
        pool.submit(_map(0), 0, W, H)
        with pytest.raises(PostPoolError) as e:
            for i in range(1, 4):
                pool.submit(_map(i), i, W, H)
        msg = str(e.value)
        assert "on_boxes (the caller's callback) has been running" in msg and "no post-processing slot came free" in msg
        assert "answer" not in msg.split(":")[0]  # not said to be the processes' silence
    finally:
        release.set()
        pool.close(raise_error=False)


def test_no_on_boxes_after_the_pool_ended_even_within_one_read() -> None:
    got: list[int] = []
    pool: PostPool

    def on_boxes(k: int, b: list) -> None:
        got.append(k)
        # another thread ends the pool while this one runs (a submit's timeout, a failed send)
        t = threading.Thread(target=pool._fail, args=(PostPoolError("ended elsewhere"),))
        t.start()
        t.join()

    pool = PostPool(on_boxes, H * W, processes=2, slots=4, timeout=10)
    try:
        pool.wait_ready()
        sel = pool._sel
        real_select = sel.select

        def late_select(timeout: float | None = None) -> Any:
            if hold:  # the first read once the maps go out waits for both answers: it returns both
                hold.clear()
                deadline = time.monotonic() + 10
                while (len(select.select([c.sock for c in pool._children], [], [], 0.05)[0]) < 2
                       and time.monotonic() < deadline):
                    pass
            return real_select(timeout)

        hold: list[bool] = []
        sel.select = late_select  # type: ignore[method-assign]
        time.sleep(0.5)  # the reader's select under way before (0.2 s at most) has returned
        hold.append(True)
        time.sleep(0.5)  # a read under way as hold was set (0.2 s at most) has returned: the reader waits in the next
        pool.submit(_map(0), 0, W, H)  # one map to each process
        pool.submit(_map(1), 1, W, H)
        deadline = time.monotonic() + 10
        while pool.error is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        assert len(got) == 1
    finally:
        pool.close(raise_error=False)


def test_a_submit_interrupted_while_it_takes_a_slot_ends_the_pool_at_once() -> None:
    class Interrupting(dict):  # a Ctrl-C half way through the pool's books: the slot taken, the job not yet noted
        def __setitem__(self, key: Any, value: Any) -> None:
            raise KeyboardInterrupt

    pool = PostPool(lambda k, b: None, H * W, processes=1, slots=2, timeout=30)
    try:
        pool.wait_ready()
        pool._pending = Interrupting()
        with pytest.raises(KeyboardInterrupt):
            pool.submit(_map(1), 0, W, H)
        pool._pending = {}
        _closes_at_once_saying(pool, "interrupted while it took a slot")
    finally:
        pool.close(raise_error=False)
