"""`gst:` inputs of a multi-stream run: the decode worker offers its FramePool in the appsink's ALLOCATION query, so an
element that takes it writes straight into pool buffers and the frame reaches the inference process with no copy.

What is checked: the sample's GstMemory is fd memory over a pool buffer (same inode), the content equals the same
pipeline pulled from a plain appsink, a run reports 0 copies and every frame zero-copy where the pool was taken,
a pipeline that keeps its own buffers still runs with one counted copy per frame (and says why), the worker's
buffers stay bounded while the inference side holds frames, a killed worker ends only its stream, no fd leaks, and
`interop run gst:... gst:...` end to end.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import interop  # noqa: F401 - before gi/openvino: interop sets up the runtime first
from interop import MemoryType
from tests.support.requirements import need, need_module

need("gst")
need_module("openvino")
need_module("cv2")

from interop.dma import TransportTimeoutError  # noqa: E402
from interop.elements import frames  # noqa: E402
from interop.elements.appsink import AppSinkSource  # noqa: E402
from interop.elements.pool import GstFramePool  # noqa: E402
from interop.native import gst as ng  # noqa: E402
from interop.streams import COPY_GST, _Worker, run_streams  # noqa: E402
from interop.tensors.dma import buffers_of  # noqa: E402
from interop.tensors.gst import GST_FORMATS  # noqa: E402
from tests.test_streams import _alive, _children  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BALL = "videotestsrc num-buffers={n} pattern=ball ! video/x-raw,format={fmt},width={w},height={h},framerate=30/1"
REFUSES = " ! identity drop-allocation=true"  # the ALLOCATION query never reaches upstream: it keeps its own pool


def _ball(n: int = 12, fmt: str = "I420", w: int = 320, h: int = 240) -> str:
    return BALL.format(n=n, fmt=fmt, w=w, h=h)


@pytest.fixture(scope="module")
def model() -> None:
    from interop import textdet
    from interop.errors import BackendUnavailableError

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _planes(frame: interop.Frame) -> list[np.ndarray]:
    """The visible planes of a frame, as arrays of their own (compared by value)."""
    with interop.map(frame, MemoryType.CPU) as c:
        assert isinstance(c, interop.Frame)
        return [np.array(np.asarray(t)) for t in c.tensors]


def _reference(description: str) -> list[list[np.ndarray]]:
    return [_planes(f) for f in frames(description)]


@pytest.mark.parametrize("fmt,w,h", [("I420", 320, 240), ("NV12", 854, 480), ("BGRx", 50, 30)])
def test_upstream_writes_into_the_pool_buffers_in_process(fmt, w, h):
    desc = _ball(8, fmt, w, h)
    ref = _reference(desc)
    pool = GstFramePool()
    pool.set_count(4)
    src = AppSinkSource(desc, pool=pool)
    got = []
    try:
        for gf in src:
            sample_buf = ng.pointer_of(gf.native.get_buffer(), "Gst.Buffer")
            f = pool.claim(gf.native)
            assert f is not None, "videotestsrc did not take the offered pool"
            assert f.format is GST_FORMATS[fmt] and (f.width, f.height) == (w, h)
            # pointer evidence: the sample's one memory is GstFdMemory over a pool buffer (same file)
            assert ng.n_memory(sample_buf) == 1
            fd = ng.fd_of_memory(ng.peek_memory(sample_buf, 0))
            assert fd is not None
            pool_inodes = {os.fstat(b.fd).st_ino for b in pool.frames._buffers}  # type: ignore[union-attr]
            assert os.fstat(fd).st_ino == os.fstat(buffers_of(f)[0].fd).st_ino
            assert os.fstat(fd).st_ino in pool_inodes
            got.append(_planes(f))
            f.release()
            gf.release()
    finally:
        src.close()
        pool.close()
    assert pool.acquired >= len(ref) == len(got) == 8
    for a, b in zip(got, ref):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_a_pipeline_that_keeps_its_own_buffers_is_not_claimed():
    pool = GstFramePool()
    pool.set_count(4)
    src = AppSinkSource(_ball(4) + REFUSES, pool=pool)
    try:
        claimed = [pool.claim(gf.native) for gf in src]
    finally:
        src.close()
        pool.close()
    assert len(claimed) == 4 and claimed == [None] * 4 and pool.acquired == 0


def test_stopping_a_pipeline_waiting_for_a_pool_buffer_does_not_hang():
    pool = GstFramePool()
    pool.set_count(1)
    src = AppSinkSource(_ball(100), pool=pool, max_buffers=1)
    held = src.read()  # the pool's one buffer, held: videotestsrc waits in acquire
    assert held is not None and pool.claim(held.native) is not None
    src.close()  # returns: the waiting acquire is told to flush
    held.release()
    del held
    gc.collect()
    pool.close()


def _recv_all(w: _Worker, n: int) -> list[interop.Frame]:
    out = []
    for _ in range(n):
        f = w.rx.recv(timeout=30)
        assert f is not None
        out.append(f)
    return out


def test_worker_sends_pool_frames_whose_content_is_the_pipelines():
    desc = _ball(10, "NV12", 320, 240)
    ref = _reference(desc)
    w = _Worker(0, "gst:" + desc, None)
    try:
        w.go(4)
        got = []
        for _ in range(10):
            f = w.rx.recv(timeout=30)
            assert f is not None and f.metadata.get("commit_marker") is not None  # a pool frame, committed
            got.append(_planes(f))
            f.release()
        assert w.rx.recv(timeout=30) is None  # EOS: the worker closed its socket
        w.proc.wait(30)
        done = [m for m in w.read_status() if "done" in m]
    finally:
        w.stop()
    assert w.proc.returncode == 0
    assert done and done[0]["done"]["copies"] == 0 and done[0]["done"]["zero_copy_frames"] == 10
    for a, b in zip(got, ref):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_worker_buffers_stay_bounded_while_frames_are_held():
    w = _Worker(0, "gst:" + _ball(200), None)
    try:
        w.go(3)  # a pool of 3 + the appsink's 4 + the 2 the pool's answer asks upstream to keep
        held = _recv_all(w, 3)
        while True:  # the worker may send what the appsink held; then nothing more
            try:
                f = w.rx.recv(timeout=1.5)
            except TransportTimeoutError:
                break
            assert f is not None
            held.append(f)
        assert len(held) <= 9
        held.pop(0).release()
        f = w.rx.recv(timeout=10)  # one came back: decoding goes on
        assert f is not None
        held.append(f)
        for f in held:
            f.release()
    finally:
        w.stop()
    assert not _alive(w.proc.pid)


def test_run_streams_zero_copy_where_the_pool_was_taken_counted_copy_where_not(model):
    fds = _fds()
    res = run_streams(["gst:" + _ball(12), "gst:" + _ball(9) + REFUSES], device="CPU", decode="processes")
    assert _fds() == fds, "the run left an fd open"
    assert not _children(os.getpid())
    s0, s1 = (s.to_json() for s in res.streams)
    assert s0["error"] is None and s0["frames"] == 12
    assert s0["copies"] == 0 and s0["bytes_copied"] == 0 and s0["copy"] is None and s0["zero_copy_frames"] == 12
    assert [r["index"] for r in s0["results"]] == list(range(12))
    assert s1["error"] is None and s1["frames"] == 9 and s1["zero_copy_frames"] == 0
    assert s1["copies"] == 9 and s1["bytes_copied"] == 9 * 320 * 240 * 3 // 2 and s1["copy"] == COPY_GST
    assert res.copies == 0 and res.to_json()["copies"] == 9


def test_killed_gst_worker_ends_only_its_stream(model):
    killed: list[int] = []

    def progress(k: int, done: int, total: int | None) -> None:
        if k == 0 and done == 5 and not killed:
            pid = [p for p in _children(os.getpid()) if b"identity" not in _cmdline(p)][0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    fds = _fds()
    res = run_streams(["gst:" + _ball(400), "gst:" + _ball(40) + " ! identity"], device="CPU", on_progress=progress,
                      decode="processes")
    assert killed
    dead, done = res.streams
    assert dead.error is not None and "signal 9" in dead.error and dead.run.frames < 400
    assert [r.index for r in dead.run.results()] == list(range(dead.run.frames))
    assert done.error is None and done.run.frames == 40 and done.worker_copies == 0
    assert _fds() == fds and not _children(os.getpid())


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_run_streams_in_threads_maps_gst_samples_in_place(model):
    """Decoded in threads, a gst: input's samples reach the model as they are (no pool, no copy), whether or not
    the element before the appsink would have taken a pool."""
    fds = _fds()
    res = run_streams(["gst:" + _ball(12), "gst:" + _ball(9) + REFUSES], device="CPU", decode="threads")
    assert _fds() == fds, "the run left an fd open"
    assert not _children(os.getpid())
    s0, s1 = (s.to_json() for s in res.streams)
    assert s0["error"] is None and s0["frames"] == 12 and s1["error"] is None and s1["frames"] == 9
    assert [r["index"] for r in s0["results"]] == list(range(12))
    assert s0["copies"] == s1["copies"] == 0 and res.to_json()["copies"] == 0 and res.decode == "threads"


def test_cli_runs_two_gst_inputs_zero_copy(model):
    p = subprocess.run([sys.executable, "-m", "interop", "run", "gst:" + _ball(6), "gst:" + _ball(6, "NV12"),
                        "--json", "--decode", "processes"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["frames"] == 12 and d["copies"] == 0 and len(d["streams"]) == 2
    assert all(s["error"] is None and s["frames"] == 6 and s["zero_copy_frames"] == 6 and s["copies"] == 0
               for s in d["streams"])


def test_a_claimed_frame_released_by_the_worker_keeps_the_slot_while_gstreamer_holds_the_memory() -> None:
    """Review finding: claim() hands the worker a frame sharing the lease frame's tensors; the worker releasing it
    after send gave the slot back to the FramePool while GStreamer still held the GstMemory (a decoder's reference
    picture), so the next acquire could hand the same buffer out again."""
    import gc

    from interop.elements.pool import _Lease
    from interop.tensors.dma import FramePool, PoolTimeoutError, buffers_of
    from interop.types import FrameFormat

    with FramePool(FrameFormat.NV12, 64, 32, 1) as fp:
        f = fp.acquire(timeout=1)
        lease = _Lease(f)  # what the GstFdMemory keeps while GStreamer has the buffer
        claimed = f.derive(list(f.tensors))  # GstFramePool.claim, uncropped
        claimed.release()  # the worker, once the frame is sent (and the consumer let go)
        del f, claimed
        with pytest.raises(PoolTimeoutError):
            fp.acquire(timeout=0.1)
        del lease  # GStreamer frees the memory
        gc.collect()
        g = fp.acquire(timeout=1)
        assert buffers_of(g)[0].users >= 1
        g.release()
