"""Text-box post-processing in processes of its own, fed through shared memory.

``interop run`` turns each frame's probability map into text boxes (``textdet.boxes_from_map``). Done on a thread of
the process that runs inference, that work holds the GIL the decode loop, the frame hand-off and OpenVINO's
completion callbacks all want, on cores the inference streams keep busy: each hand-over of the GIL waits for a
core. ``PostPool`` runs it in ``processes`` child processes instead. A completion callback copies the map into a
free slot of one shared memory block (the children map it once) and sends the slot's number; a child makes the
boxes and sends them back; a thread of this process hands them to ``on_boxes`` and frees the slot.

Bounded: ``slots`` maps are in flight at most; ``submit`` waits for a free slot (back-pressure on inference, never
memory growth), ``timeout`` seconds at most: no slot free for that long (a child stopped or stuck, or the caller's
``on_boxes`` holding the thread that reads the answers: the error says which) ends the pool, as does a map a child
leaves unanswered for that long. Everything a child sends is checked (sequence number, slot, box count, finite
coordinates): a wrong message or a child that dies ends the pool with PostPoolError, raised by the next ``submit``
and by ``close``; an exception of ``on_boxes`` (the caller's own) ends it too and is raised as it is. Children exit
when this process closes their socket or dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._spawn import ignoring_ctrl_c
from .errors import InteropError
from .textdet import MAX_CANDIDATES, TextBox

log = logging.getLogger(__name__)

#: what the parent sends: sequence number, slot, map height and width, the frame's width and height
_JOB = struct.Struct("<IIIIII")
#: what a child answers: sequence number, slot, box count; then count x 9 float64 (4 corner points, score: the
#: float32 points and the float score exactly as boxes_from_map made them)
_DONE = struct.Struct("<III")
_BOX_FLOATS = 9
#: what a child sends once it can take maps (its imports done, the block mapped)
_READY = b"R"
#: seconds ``close`` waits for outstanding maps, ``submit`` for a free slot and ``wait_ready`` for children to start,
#: before the pool gives up on its children
CLOSE_TIMEOUT = 60.0


class PostPoolError(InteropError, RuntimeError):
    """A post-processing process died, hangs, or sent a message that is not an answer to what it was given."""


class PostPoolArgumentError(InteropError, ValueError):
    """A PostPool made or fed with values it cannot work with."""


def slot_bytes(max_pixels: int) -> int:
    """Bytes of one slot of the shared block: a float32 map of ``max_pixels``, rounded up to whole pages."""
    return mmap.PAGESIZE * -(-max_pixels * 4 // mmap.PAGESIZE)


def default_processes() -> int:
    """One process per eight CPUs, 1 to 4: the boxes of one frame take about a millisecond of one core."""
    return max(1, min(4, (os.cpu_count() or 1) // 8))


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    sock: socket.socket
    outstanding: int = 0
    alive: bool = True
    ready: bool = False


class PostPool:
    """``submit(prob, key, frame_width, frame_height)`` from any thread; ``on_boxes(key, boxes)`` is called on the
    pool's reader thread for each, in the order the children finish. ``max_pixels``: the largest map (H x W) that
    will be submitted. An exception from ``on_boxes`` ends the pool: ``check`` and ``close`` raise it as it is,
    ``submit`` a PostPoolError saying the pool stopped. ``timeout``: seconds a submit waits for a free slot and
    ``close`` (or ``wait_done``) for the last answers. The children start in the background (importing OpenCV takes
    a while): ``wait_ready`` waits for them, so that a timed loop does not count their start; maps submitted before
    then wait in the socket."""

    def __init__(self, on_boxes: Callable[[Any, list[Any]], None], max_pixels: int, *,
                 processes: int | None = None, slots: int | None = None, timeout: float = CLOSE_TIMEOUT):
        n = default_processes() if processes is None else processes
        nslots = 4 * n + 4 if slots is None else slots
        if n < 1 or nslots < 1 or max_pixels < 1 or not timeout > 0:
            raise PostPoolArgumentError(f"a PostPool needs at least one process, one slot, one pixel and a positive "
                                        f"timeout, not processes={n}, slots={nslots}, max_pixels={max_pixels}, "
                                        f"timeout={timeout}")
        self._on_boxes = on_boxes
        self._timeout = timeout
        self._slot_bytes = slot_bytes(max_pixels)
        self._nslots = nslots
        self._cond = threading.Condition()
        self._free = list(range(self._nslots))
        self._pending: dict[int, tuple[Any, int, int, float]] = {}  # seq -> (key, slot, child, submitted at)
        self._seq = 0
        self.bytes_copied = 0  # map bytes copied into the shared slots (results read out of the requests)
        self._error: BaseException | None = None
        self._error_tb: Any = None  # the traceback where the error was first raised (re-raised with it)
        self._final_cpu: float | None = None  # the children's CPU seconds when close() stopped them
        self._unfinished = 0  # maps submitted whose on_boxes has not returned
        self._in_on_boxes: float | None = None  # time.monotonic() when the reader went into on_boxes (None: not in it)
        self._closed = False
        self._shut = False
        self._close_lock = threading.Lock()  # one close at a time; a close that was interrupted can run again
        size = self._slot_bytes * self._nslots
        fd = os.memfd_create("interop-postpool", os.MFD_CLOEXEC)
        self._children: list[_Child] = []
        try:
            os.ftruncate(fd, size)
            self._mem = mmap.mmap(fd, size)
            self._maps = np.frombuffer(self._mem, np.float32)
            for _ in range(n):
                self._children.append(self._spawn(fd, self._slot_bytes, self._nslots))
        except BaseException:
            self._stop_children()
            raise
        finally:
            os.close(fd)
        self._sel = selectors.DefaultSelector()
        for k, c in enumerate(self._children):
            self._sel.register(c.sock, selectors.EVENT_READ, k)
        self._reader = threading.Thread(target=self._read_loop, name="interop-postpool-reader", daemon=True)
        self._reader.start()

    @staticmethod
    def _spawn(fd: int, slot_bytes: int, nslots: int) -> _Child:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(ignoring_ctrl_c([sys.executable, "-m", "interop.postpool", str(theirs.fileno()),
                                                     str(fd), str(slot_bytes), str(nslots)]), pass_fds=[theirs.fileno(), fd],
                                    stdin=subprocess.DEVNULL, env=_child_env())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return _Child(proc, ours)

    def __enter__(self) -> PostPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(raise_error=exc[0] is None)

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every child can take maps (PostPoolError past ``timeout`` seconds, the pool's by default, or
        when one died)."""
        timeout = self._timeout if timeout is None else timeout
        with self._cond:
            ready = self._cond.wait_for(lambda: self._error is not None or all(c.ready for c in self._children),
                                        timeout)
            self._raise_if_failed()
            if not ready:
                raise PostPoolError(f"the post-processing processes did not start within {timeout:g} s")

    def submit(self, prob: Any, key: Any, frame_width: int, frame_height: int) -> None:
        """Queue one probability map ((H, W), (1, H, W) or (1, 1, H, W) float32) for boxes in a frame of that size;
        waits while every slot is in use. Copies the map (into shared memory), so ``prob`` may be a view that is
        valid only during the call."""
        p = np.asarray(prob)
        if p.ndim < 2 or p.size != p.shape[-2] * p.shape[-1]:
            raise PostPoolArgumentError(f"a probability map is (H, W), (1, H, W) or (1, 1, H, W), not {p.shape}")
        if not np.can_cast(p.dtype, np.float32, "same_kind"):
            raise PostPoolArgumentError(f"a probability map is float32 (or a type that casts to it), not {p.dtype}")
        h, w = int(p.shape[-2]), int(p.shape[-1])
        if h < 1 or w < 1:
            raise PostPoolArgumentError(f"a probability map has at least one pixel, not {w}x{h}")
        if h * w * 4 > self._slot_bytes:
            raise PostPoolArgumentError(f"a {w}x{h} map does not fit the pool's slots ({self._slot_bytes} bytes): "
                                        f"make the pool for the largest map the model makes")
        for name, v in (("frame_width", frame_width), ("frame_height", frame_height)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 0xFFFFFFFF:
                raise PostPoolArgumentError(f"{name} is the frame's size in pixels (1 to 4294967295), not {v!r}")
        # How far this submit got, for an interruption (a Ctrl-C on this thread) to be undone exactly: "reserving"
        # (the pool's books are being changed), "reserved" (a slot, the job and its counts taken, not sent), "sending"
        # (the datagram may have gone: no telling), "sent"
        state = ""
        try:
            with self._cond:
                if not self._cond.wait_for(lambda: self._free or self._error is not None or self._closed,
                                           self._timeout):
                    # no slot came back: the blame says whether the processes or the caller's on_boxes hold them
                    self._error = PostPoolError(f"no post-processing slot came free for {self._timeout:g} s: "
                                                f"{self._blame()}; the run stops")
                    self._cond.notify_all()
                self._raise_if_failed()
                alive = [k for k, c in enumerate(self._children) if c.alive]
                if not alive:  # the reader has not said so yet
                    raise PostPoolError("every post-processing process has exited: the run cannot make text boxes")
                k = min(alive, key=lambda j: self._children[j].outstanding)
                seq = (self._seq + 1) & 0xFFFFFFFF
                state = "reserving"
                slot = self._free.pop()
                self._seq = seq
                self._pending[seq] = (key, slot, k, time.monotonic())
                self._unfinished += 1
                self._children[k].outstanding += 1
                self.bytes_copied += h * w * 4
                state = "reserved"
                maps = self._maps  # this view keeps the mapping valid even if the pool closes meanwhile
            off = slot * self._slot_bytes // 4
            try:
                np.copyto(maps[off:off + h * w].reshape(h, w), p.reshape(h, w), casting="same_kind")
            finally:
                del maps  # not in a traceback: a view held there would keep the block mapped
            job = _JOB.pack(seq, slot, h, w, frame_width, frame_height)
            state = "sending"
            try:
                self._children[k].sock.send(job)  # one datagram: sent whole or not at all
            except OSError as e:
                state = "giving back"  # a failed send sent nothing
                self._give_back(seq, slot, k, h * w * 4)
                state = ""
                self._child_died(self._children[k], e)  # the reader may say so too: the first to say it is kept
                self._raise_if_failed()
                raise PostPoolError(f"a map could not be sent to a post-processing process ({e})") from None
            state = "sent"
        except BaseException:
            if state == "reserved":  # interrupted before the job went: its slot goes back, the pool goes on
                state = "giving back"
                try:
                    self._give_back(seq, slot, k, h * w * 4)
                except BaseException:  # interrupted again, half way: the books cannot be told
                    self._interrupted()
                    raise
            elif state in ("reserving", "sending", "giving back"):  # the books, or what the process got, cannot be
                # told: the pool ends (at once: close() then waits for nothing)
                self._interrupted()
            raise

    def _interrupted(self) -> None:
        self._fail(PostPoolError("a submit was interrupted while it took a slot, sent its map or gave the slot back: "
                                 "the pool cannot tell what its process got, and stops"))

    def _give_back(self, seq: int, slot: int, k: int, nbytes: int) -> None:
        """Undo the reservation of a job that was never sent."""
        with self._cond:
            if self._pending.pop(seq, None) is not None:
                self._free.append(slot)
                self._unfinished -= 1
                self._children[k].outstanding -= 1
                self.bytes_copied -= nbytes
                self._cond.notify_all()

    @property
    def error(self) -> BaseException | None:
        """What ended the pool (PostPoolError, or the caller's on_boxes exception), None while it works."""
        return self._error

    def _stuck(self) -> str:
        return ", ".join(f"pid {c.proc.pid}: {c.outstanding} maps unanswered" for c in self._children if c.outstanding)

    def _blame(self) -> str:
        """Who holds the pool up, as far as one look can tell: the caller's on_boxes (the reader inside it: answers
        wait unread in the sockets, and still count as unanswered), the processes with maps unanswered, or neither
        (every map answered: the reader is behind)."""
        since, stuck = self._in_on_boxes, self._stuck()
        if since is not None:
            return (f"on_boxes (the caller's callback) has been running for {time.monotonic() - since:.1f} s; "
                    f"{stuck or 'no map unanswered'}")
        return f"a post-processing process hangs ({stuck})" if stuck else "every map answered: the reader is behind"

    def _raise_if_failed(self) -> None:
        """On the threads that feed the pool (OpenVINO's callbacks): a PostPoolError that says the pool ended, from
        what ended it (the caller gets that itself, with its own traceback, from ``check``/``close``)."""
        err = self._error
        if err is not None:
            raise PostPoolError(f"the post-processing pool has stopped: {type(err).__name__}: {err}") from None
        if self._closed:
            raise PostPoolError("the post-processing pool is closed")

    def check(self) -> None:
        """Raise what ended the pool, as it is (a PostPoolError, or the caller's on_boxes exception) with the
        traceback of where it happened; nothing while the pool works."""
        err = self._error
        if err is not None:
            raise err.with_traceback(self._error_tb)

    def _fail(self, e: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = e
                self._error_tb = e.__traceback__
            self._cond.notify_all()

    def _check_overdue(self) -> None:
        """End the pool when a map has waited for its answer past the timeout (a child stopped or stuck: the
        others may still take new maps, so a full pool would never say so)."""
        with self._cond:
            if not self._pending:
                return
            _, _, k, t = min(self._pending.values(), key=lambda job: job[3])
            if time.monotonic() - t <= self._timeout:
                return
        pid = self._children[k].proc.pid
        self._fail(PostPoolError(f"post-processing process {pid} has not answered a map for {self._timeout:g} s "
                                 f"({self._stuck()}): it hangs (stopped or stuck); the run stops"))

    def _read_loop(self) -> None:
        while True:
            with self._cond:
                if (self._closed and not self._pending) or self._error is not None:
                    return
            for skey, _ in self._sel.select(timeout=0.2):
                k = skey.data
                c = self._children[k]
                try:
                    msg = c.sock.recv(_DONE.size + 8 * _BOX_FLOATS * (MAX_CANDIDATES + 1))
                except OSError:
                    msg = b""
                if not msg:
                    self._sel.unregister(c.sock)
                    self._child_died(c)
                    return
                if msg == _READY and not c.ready:
                    with self._cond:
                        c.ready = True
                        self._cond.notify_all()
                    continue
                try:
                    key, boxes = self._parse(msg, k)
                    if self._error is not None:  # ended by another thread, within one read of several answers:
                        return  # on_boxes is not called once the reader has seen that
                    self._in_on_boxes = time.monotonic()
                    self._on_boxes(key, boxes)
                except BaseException as e:  # noqa: B036 - ends the pool; close() re-raises it
                    self._fail(e)
                    return
                finally:
                    self._in_on_boxes = None
                with self._cond:
                    self._unfinished -= 1
                    if not self._unfinished:
                        self._cond.notify_all()
            if not self._sel.select(timeout=0):  # nothing left to read: a map still without its answer this long is
                # overdue (after a slow on_boxes, the answers that came meanwhile are read first)
                self._check_overdue()

    def _child_died(self, c: _Child, send_error: OSError | None = None) -> None:
        """End the pool for a child that is gone (its socket closed, or a send to it failed: ``send_error``): its
        exit status in the error, set in the same step that marks it dead, so that no submit in between says less."""
        try:
            code: int | None = c.proc.wait(1)
        except subprocess.TimeoutExpired:
            code = None
        if code is None and send_error is not None:  # not gone (yet): the send's own failure says what happened
            with self._cond:
                self._fail(PostPoolError(f"a map could not be sent to post-processing process {c.proc.pid} "
                                         f"({send_error}): the run cannot make text boxes"))
            return
        how = "without an exit status" if code is None else (
            f"killed by signal {-code}" if code < 0 else f"with status {code}")
        with self._cond:
            c.alive = False
            self._fail(PostPoolError(f"post-processing process {c.proc.pid} exited {how} with {c.outstanding} maps "
                                     f"unanswered: the run cannot make text boxes"))

    def _parse(self, msg: bytes, k: int) -> tuple[Any, list[TextBox]]:
        if len(msg) < _DONE.size:
            raise PostPoolError(f"a post-processing process sent {len(msg)} bytes, not an answer")
        seq, slot, n = _DONE.unpack_from(msg)
        if n > MAX_CANDIDATES or len(msg) != _DONE.size + 8 * _BOX_FLOATS * n:
            raise PostPoolError(f"a post-processing answer says {n} boxes in {len(msg)} bytes")
        with self._cond:
            job = self._pending.get(seq)
            if job is None or job[1] != slot or job[2] != k:
                raise PostPoolError(f"a post-processing process answered job {seq} (slot {slot}), which it was not "
                                    f"given")
            del self._pending[seq]
            self._free.append(slot)
            self._children[k].outstanding -= 1
            self._cond.notify_all()
        vals = np.frombuffer(msg, np.float64, offset=_DONE.size).reshape(n, _BOX_FLOATS)
        if not np.isfinite(vals).all():
            raise PostPoolError("a post-processing process sent a box with a coordinate that is not a number")
        return job[0], [TextBox(v[:8].reshape(4, 2).astype(np.float32), float(v[8])) for v in vals]

    def close(self, raise_error: bool = True) -> None:
        """Wait for every submitted map's boxes (the pool's timeout at most), stop the children, free the memory;
        re-raise the first error (``raise_error``). Once closed, closing again does nothing; a close that was
        interrupted (KeyboardInterrupt) has still stopped the children, and can be called again. Refused from
        ``on_boxes`` (the reader thread, which close waits for)."""
        if threading.current_thread() is self._reader:
            raise PostPoolError("PostPool.close() was called from on_boxes, whose thread close() waits for: close "
                                "the pool from another thread")
        with self._close_lock:
            if self._shut:
                return
            try:
                self._drain()
            finally:
                with self._cond:
                    self._closed = True
                    self._cond.notify_all()
                self._reader.join(self._timeout)
                if self._reader.is_alive():  # stuck in on_boxes (the caller's code): the children go anyway
                    log.warning("PostPool: on_boxes has not returned for %.0f s; closing without it", self._timeout)
                self._sel.close()
                self._final_cpu = self.cpu_seconds()
                self._stop_children()
                self._maps = np.empty(0, np.float32)
                with contextlib.suppress(BufferError):  # a view still held elsewhere: the mapping goes with it
                    self._mem.close()
                self._shut = True
        if raise_error:
            self.check()

    @property
    def closed(self) -> bool:
        """Whether close() has begun: submit refuses from then on."""
        return self._closed

    def wait_done(self, timeout: float | None = None) -> None:
        """Wait until on_boxes has returned for every map submitted so far (``timeout`` seconds at most, the pool's
        by default: past it a process hangs, and the pool ends), then raise what ended the pool, if anything. The pool
        stays open: close() also stops the processes."""
        timeout = self._timeout if timeout is None else timeout
        with self._cond:
            done = self._cond.wait_for(lambda: not self._unfinished or self._error is not None or self._closed,
                                       timeout)
            why = "" if done else f"{self._unfinished} maps still without boxes after {timeout:g} s: {self._blame()}"
        if not done:
            self._fail(PostPoolError(why))
        self.check()

    def cpu_seconds(self) -> float:
        """CPU seconds the pool's processes have used (all their threads; 0.0 where /proc cannot tell), read while
        they run, and as they were when close() stopped them: the boxes' CPU, which the parent's own clocks miss."""
        if self._final_cpu is not None:
            return self._final_cpu
        return sum(_process_cpu(c.proc.pid) for c in self._children if c.proc.returncode is None)  # a reaped
        # child's pid may be another process's by now

    def _drain(self) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._pending or self._error is not None or self._closed,
                                       self._timeout):
                # unanswered, or answered but unread while on_boxes holds the reader: the blame says which
                self._error = PostPoolError(f"{len(self._pending)} maps still without boxes after {self._timeout:g} s: "
                                            f"{self._blame()}")

    def _stop_children(self) -> None:
        for c in self._children:
            c.sock.close()  # the child reads EOF and exits
        for c in self._children:
            try:
                c.proc.wait(5)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()


def _child_env() -> dict[str, str]:
    """A child's environment: no BLAS thread pools. numpy's OpenBLAS and the one OpenCV's wheel bundles each start a
    pool of threads at import that spin through OpenCV's calls, on the cores the inference runs on; the boxes use no
    BLAS."""
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def _process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (0.0 for a process that is gone): its live threads' nanosecond scheduler
    counters (/proc/PID/task/*/schedstat: a child runs one thread), or where the kernel keeps none its user + system
    time in clock ticks (/proc/PID/stat, too coarse for a few frames' boxes)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    total, read = 0, False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
            read = True
        except (OSError, ValueError, IndexError):
            continue
    if read:
        return total / 1e9
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _child(sock_fd: int, mem_fd: int, slot_bytes: int, nslots: int) -> int:
    """A post-processing process: maps in the shared block -> boxes, until the parent closes the socket. A message
    that does not describe a map inside the block ends it (exit status 2): the parent reports that."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it closes our socket
    with contextlib.suppress(OSError, AttributeError):  # Linux: die with the parent
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    import cv2

    from .textdet import boxes_from_map

    cv2.setNumThreads(1)  # one frame per process at a time: OpenCV's pool would only spin on the inference's cores
    sock = socket.socket(fileno=sock_fd)
    mem = mmap.mmap(mem_fd, slot_bytes * nslots, prot=mmap.PROT_READ)
    os.close(mem_fd)
    maps = np.frombuffer(mem, np.float32)
    try:
        sock.send(_READY)
    except OSError:  # the parent is gone already
        return 0
    while True:
        try:
            msg = sock.recv(64)
        except OSError:  # the parent reset the socket (it stopped the pool with maps unread): nothing to answer
            return 0
        if not msg:
            return 0
        if len(msg) != _JOB.size:
            return 2
        seq, slot, h, w, fw, fh = _JOB.unpack(msg)
        if slot >= nslots or not 0 < h * w * 4 <= slot_bytes or fw < 1 or fh < 1:
            return 2
        off = slot * slot_bytes // 4
        boxes = boxes_from_map(maps[off:off + h * w].reshape(h, w), fw, fh)
        out = np.empty((len(boxes), _BOX_FLOATS), np.float64)
        for j, b in enumerate(boxes):
            out[j, :8] = b.points.reshape(8)
            out[j, 8] = b.score
        try:
            sock.send(_DONE.pack(seq, slot, len(boxes)) + out.tobytes())
        except OSError:  # the parent is gone or stopped the pool
            return 0


if __name__ == "__main__":
    if len(sys.argv) == 5:
        raise SystemExit(_child(*(int(a) for a in sys.argv[1:])))
    raise SystemExit("usage: python -m interop.postpool SOCKET_FD MEMORY_FD SLOT_BYTES SLOTS (started by interop run)")
