"""`interop run` over several inputs: decoded in threads (the default) or in worker processes, one Inference,
results per stream in order, the same as one stream's.

Faults: a stream whose input fails ends with its error and the others complete; a decode worker killed mid-frame
ends its stream with an error and the others complete; the inference process killed makes every worker exit;
SIGINT stops the run with no fd or process left behind. Back-pressure: a worker whose pool is held by the inference
side decodes nothing more until a buffer comes back.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.procs import children
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from interop.dma import TransportTimeoutError  # noqa: E402
from interop.pipeline import RunArgumentError  # noqa: E402
from interop.streams import StreamError, _Worker, run_streams, save_path  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def clip() -> str:
    from interop import textdet
    from interop.clip import default_clip
    from interop.errors import BackendUnavailableError

    try:
        textdet.model_path()
    except BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")
    return default_clip()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _children(pid: int, name: str = "interop.streams") -> list[int]:
    return children(pid, name)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def single(clip):
    from interop.pipeline import run

    return run(clip, device="CPU", frames=12)


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_streams_give_per_stream_results_in_order_same_as_one_stream(clip, single, decode):
    n = 12
    fds = _fds()
    threads = {t.ident for t in threading.enumerate()}
    res = run_streams([clip, clip], device="CPU", frames=n, decode=decode)
    assert _fds() == fds, "the run left an fd open"
    assert not _children(os.getpid()), "a decode worker is still running"
    assert not _children(os.getpid(), "interop.postpool"), "a post-processing process is still running"
    assert not [t.name for t in threading.enumerate() if t.ident not in threads and t.name.startswith("interop-stream")]
    assert res.frames == 2 * n and res.fps > 0 and res.decode == decode
    assert res.compile > 0.01 and all(res.compile > 5 * s.run.compile for s in res.streams)  # compiled before t0
    d = res.to_json()
    assert [s["index"] for s in d["streams"]] == [0, 1] and d["decode"] == decode
    frame_bytes = 640 * 480 * 3 // 2
    for s in d["streams"]:
        assert s["error"] is None and s["frames"] == n
        assert [r["index"] for r in s["results"]] == list(range(n))  # every frame, in order
        assert [r["pts"] for r in s["results"]] == [r.pts for r in single.results()]
        assert [[b["points"] for b in r["boxes"]] for r in s["results"]] == \
            [[[list(map(int, p)) for p in b.points] for b in single.boxes[i]] for i in range(n)]
        if decode == "processes":
            assert s["copies"] == n and s["bytes_copied"] == n * frame_bytes  # the one copy: decoded frame -> pool
        else:
            assert s["copies"] == 0 and s["bytes_copied"] == 0 and s["copy"] is None  # decoded frames, in place
    assert d["copies"] == (2 * n if decode == "processes" else 0)
    assert d["bytes_copied"] == (2 * n * frame_bytes if decode == "processes" else 0)
    assert res.copies == 0  # nothing copied in the inference process: frames are mapped in place


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_an_on_result_error_stops_the_run_and_is_raised_as_it_is(clip, decode):
    """The caller's callback runs on the result thread (threads) or the post-processing pool's reader (processes):
    its exception stops the run (it does not decode on), and the caller gets that exception, with nothing left
    running or open."""
    class Mine(Exception):
        pass

    seen = []

    def on_result(k, r):  # noqa: ANN001, ANN202
        seen.append(r.index)
        if len(seen) == 3:
            raise Mine("the caller's bug")

    fds = _fds()
    with pytest.raises(Mine, match="the caller's bug"):
        run_streams([clip, clip], device="CPU", on_result=on_result, decode=decode)
    assert _fds() == fds
    assert not _children(os.getpid()) and not _children(os.getpid(), "interop.postpool")
    assert not [t for t in threading.enumerate() if t.name.startswith("interop-stream")]
    assert len(seen) == 3  # the results ended at the error: no result after it


def test_an_on_result_error_stops_decoding_in_threads(clip, monkeypatch):
    """Decoded in threads, the streams stop at their next frame once the caller's callback failed: they do not
    decode the rest of the clip (150 frames each) before the error is raised."""
    import interop.pipeline as pipeline

    decoded: list[int] = []

    class Counted(pipeline._Input):
        def __init__(self, video, threads=None):
            super().__init__(video, threads)
            k, frames = len(decoded), self.it  # the streams' inputs are opened in order
            decoded.append(0)

            def counting():
                for f in frames:
                    decoded[k] += 1
                    yield f
            self.it = counting()

    def on_result(k, r):  # noqa: ANN001, ANN202
        raise RuntimeError("the caller's bug")

    monkeypatch.setattr(pipeline, "_Input", Counted)
    with pytest.raises(RuntimeError, match="the caller's bug"):
        run_streams([clip, clip], device="CPU", on_result=on_result)
    # frames already in the request pool when the error came still finish (a pool of two requests per core)
    assert len(decoded) == 2 and 0 < max(decoded) < 150, decoded


def test_the_first_layout_is_compiled_before_the_run_time_even_when_it_needs_a_conversion(tmp_path):
    """Review finding: when the first stream's frames are converted (allow_copy) the compile was left to the stream
    threads, inside the run's wall time."""
    from tests.support.ffmpeg_clips import raw_clip

    odd, plain = raw_clip(tmp_path, "yuv410p"), raw_clip(tmp_path, "yuv420p")
    res = run_streams([odd, plain], device="CPU", allow_copy=True)
    assert [s.run.frames for s in res.streams] == [3, 3] and res.streams[0].worker_copies == 3
    assert res.compile > 5 * max(s.run.compile for s in res.streams), (res.compile, [s.run.compile for s in res.streams])


def test_a_first_stream_failing_at_its_first_frame_leaves_the_compile_to_the_next_one(clip, monkeypatch):
    """The first stream's first frame raises: that stream ends with the error, the model is compiled for the next
    stream's first frame before the run's time (not inside it), and that stream runs whole."""
    import interop.pipeline as pipeline

    made: list[int] = []

    class FirstFails(pipeline._Input):
        def __init__(self, video, threads=None):
            super().__init__(video, threads)
            made.append(0)
            if len(made) == 1:
                def failing():
                    raise OSError("the disk went away")
                    yield  # a generator
                self.it = failing()

    monkeypatch.setattr(pipeline, "_Input", FirstFails)
    res = run_streams([clip, clip], device="CPU", frames=5)
    bad, good = res.streams
    assert bad.error_type == "OSError" and bad.run.frames == 0
    assert good.error is None and good.run.frames == 5
    assert res.compile > 5 * good.run.compile, (res.compile, good.run.compile)


def test_a_frame_whose_request_could_not_start_is_not_counted(clip, monkeypatch):
    """Review finding: a frame was counted before its request started, so a stream that ended at a failed start
    listed a frame with no result (an empty box list that was never computed)."""
    from interop.inference import Inference

    real = Inference.infer_async

    def infer_async(self, x, callback=None, userdata=None, **kw):  # noqa: ANN001, ANN003, ANN202
        if userdata == 3:
            raise OSError("the device went away")
        return real(self, x, callback, userdata, **kw)

    monkeypatch.setattr(Inference, "infer_async", infer_async)
    res = run_streams([clip, clip], device="CPU", frames=10)
    for s in res.streams:
        assert s.error_type == "OSError" and s.run.frames == 3
        assert sorted(s.run.boxes) == [0, 1, 2]  # every counted frame has its result


def test_ctrl_c_while_stream_threads_start_is_a_keyboard_interrupt_with_nothing_left(clip, monkeypatch):
    """Review finding: a Ctrl-C inside Thread.start of the second stream came out as RuntimeError (the clean-up
    joined a thread that never started)."""
    import interop.stream_threads as st

    real = st._Stream.__init__

    for after_the_thread_exists in (False, True):
        def init(self, s, *a, late=after_the_thread_exists):  # noqa: ANN001, ANN002, ANN202
            real(self, s, *a)
            if s.index == 1:
                real_start = self.thread.start
                frames = self.src.it

                def slow():  # noqa: ANN202 - a stream still busy when the run cleans up
                    for f in frames:
                        time.sleep(0.2)
                        yield f
                self.src.it = slow()

                def start():  # noqa: ANN202
                    if late:  # the thread runs; the Ctrl-C comes while start() waits for it to say so
                        real_start()
                    raise KeyboardInterrupt
                self.thread.start = start

        monkeypatch.setattr(st._Stream, "__init__", init)
        gc.collect()
        fds = _fds()
        with pytest.raises(KeyboardInterrupt) as e:
            run_streams([clip, clip], device="CPU")
        assert e.value.result.interrupted  # type: ignore[attr-defined]
        assert not [t for t in threading.enumerate()
                    if t.name.startswith(("interop-stream-", "interop-streams-results"))], after_the_thread_exists
        del e
        gc.collect()
        assert _fds() == fds, after_the_thread_exists


def test_ctrl_c_while_the_last_results_are_made_stops_the_result_thread(clip, monkeypatch):
    """Review finding: interrupted while it waited for the result thread, the run forgot that thread, which went on
    calling the caller's callbacks after run_streams had raised."""
    import interop.stream_results as sr

    real = sr._Results.close
    calls = []

    def close(self):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # as a Ctrl-C arriving while close() joins the result thread
        real(self)

    monkeypatch.setattr(sr._Results, "close", close)
    with pytest.raises(KeyboardInterrupt):
        run_streams([clip, clip], device="CPU", frames=5)
    assert len(calls) == 2  # closed again by the clean-up
    assert not [t for t in threading.enumerate() if t.name == "interop-streams-results" and t.is_alive()]


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_on_stream_end_comes_after_the_streams_last_result(clip, decode):
    """on_stream_end saw a stream whose decoding had ended but whose last results were still being made: frames
    without their boxes, and the CLI's "done" line before the stream's last progress line."""
    events: list[tuple[str, int, int]] = []
    seen: list[tuple[int, int, int]] = []

    def progress(k: int, done: int, total: int | None) -> None:
        if done == 24:
            time.sleep(0.2)  # the last callback is still running: the stream has not ended for its caller yet
        events.append(("progress", k, done))

    def end(s) -> None:  # noqa: ANN001
        events.append(("end", s.index, s.run.frames))
        seen.append((s.index, s.run.frames, len(s.run.boxes)))

    run_streams([clip, clip], device="CPU", frames=24, decode=decode, on_progress=progress, on_stream_end=end)
    assert sorted(seen) == [(0, 24, 24), (1, 24, 24)]  # every frame's boxes were in when the stream ended
    for k in (0, 1):
        mine = [e for e in events if e[1] == k]
        assert mine[-1] == ("end", k, 24) and mine[-2] == ("progress", k, 24)


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_a_failed_request_still_ends_every_stream_before_the_run_raises(clip, decode, monkeypatch):
    """Review finding: a request that failed inside the runtime (no result ever comes for it) made the run raise
    without calling on_stream_end for the streams still waiting for their last results, healthy ones included."""
    from interop.inference import Inference, _Job

    real = Inference._submit_inside

    def submit(self, x, job_cb, userdata, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        if userdata in (3, (0, 3)):  # frame 3 of stream 0 (threads: the frame index; processes: (stream, frame))
            if decode == "processes" or threading.current_thread().name == "interop-stream-0":
                job = _Job(None, None, userdata, None, None)
                with self._cond:
                    self._pending += 1
                    self._finish(job, RuntimeError("the device failed this request"))
                return job
        return real(self, x, job_cb, userdata, *a, **kw)

    monkeypatch.setattr(Inference, "_submit_inside", submit)
    ended: list[int] = []
    with pytest.raises(Exception, match="the device failed this request"):
        run_streams([clip, clip], device="CPU", frames=24, decode=decode, on_stream_end=lambda s: ended.append(s.index))
    assert sorted(ended) == [0, 1]


@pytest.mark.parametrize("decode", ["threads", "processes"])
def test_an_input_that_cannot_be_read_ends_its_stream_others_go_on(clip, tmp_path, decode):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a video\n")
    ended = []
    res = run_streams([str(bad), clip], device="CPU", frames=5, decode=decode,
                      on_stream_end=lambda s: ended.append(s.index))
    s0, s1 = res.streams
    assert s0.error_type == "VideoInputError" and "text file" in (s0.error or "") and s0.run.frames == 0
    assert s1.error is None and s1.run.frames == 5
    assert 1 in ended


def test_every_input_unreadable_is_one_stream_error(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a video\n")
    with pytest.raises(StreamError, match="no input could be opened.*text file"):
        run_streams([str(bad), str(tmp_path / "missing.mp4")], device="CPU")


def test_a_stream_that_fails_mid_run_ends_alone_in_threads(clip, monkeypatch):
    """A stream's thread that raises after frames went out (here: its decoder fails at the third frame) ends that
    stream with the error and its whole frames' results; the other stream completes."""
    import interop.pipeline as pipeline

    class Broken(pipeline._Input):
        def __init__(self, video, threads=None):
            super().__init__(video, threads)
            if video.endswith("#broken"):
                frames = self.it

                def failing():
                    for i, f in enumerate(frames):
                        if i == 3:
                            raise OSError("the disk went away")
                        yield f
                self.it = failing()

    real_open = pipeline.open_video
    monkeypatch.setattr(pipeline, "open_video", lambda p, *a: real_open(p.removesuffix("#broken"), *a))
    monkeypatch.setattr(pipeline, "_Input", Broken)
    res = run_streams([clip + "#broken", clip], device="CPU", frames=10)
    bad, good = res.streams
    assert bad.error_type == "OSError" and "disk went away" in (bad.error or "") and bad.run.frames == 3
    assert [r.index for r in bad.run.results()] == [0, 1, 2]
    assert good.error is None and good.run.frames == 10


def test_arguments_are_checked():
    with pytest.raises(RunArgumentError, match="at least one input"):
        run_streams([])
    with pytest.raises(RunArgumentError, match="positive"):
        run_streams(["a.mp4"], frames=0)
    with pytest.raises(RunArgumentError, match="pool_size"):
        run_streams(["a.mp4"], pool_size=2)
    with pytest.raises(RunArgumentError, match="decode='processes'"):
        run_streams(["a.mp4"], pool_size=6, decode="threads")
    with pytest.raises(RunArgumentError, match="'threads' or 'processes'"):
        run_streams(["a.mp4"], decode="fibers")
    assert save_path("out/x.png", 1, 3) == "out/x-1.png" and save_path("x.png", 0, 1) == "x.png"


def test_worker_stops_decoding_while_its_pool_is_held(clip):
    w = _Worker(0, clip, None)
    w.go(3)
    try:
        held = [w.rx.recv(timeout=30) for _ in range(3)]
        assert all(f is not None for f in held)
        with pytest.raises(TransportTimeoutError):
            w.rx.recv(timeout=1.0)  # the worker waits for a buffer: nothing more is decoded or sent
        held.pop(0).release()
        f = w.rx.recv(timeout=10)  # one came back: one more frame
        assert f is not None
        held.append(f)
        with pytest.raises(TransportTimeoutError):
            w.rx.recv(timeout=0.5)
        for f in held:
            f.release()
    finally:
        w.stop()
    assert not _alive(w.proc.pid)


def test_worker_killed_mid_frame_ends_its_stream_with_an_error_others_complete(clip):
    killed: list[int] = []

    def progress(k: int, done: int, total: int | None) -> None:
        if done == 5 and not killed:  # one worker, mid-stream (it is decoding or writing its next frames)
            pid = _children(os.getpid())[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    fds = _fds()
    res = run_streams([clip, clip], device="CPU", frames=60, on_progress=progress, decode="processes")
    assert killed
    dead = [s for s in res.streams if s.error is not None]
    done = [s for s in res.streams if s.error is None]
    assert len(dead) == 1 and len(done) == 1
    assert "signal 9" in (dead[0].error or "") and dead[0].run.frames < 60
    assert [r.index for r in dead[0].run.results()] == list(range(dead[0].run.frames))  # whole frames, in order
    assert done[0].run.frames == 60
    assert _fds() == fds and not _children(os.getpid())


_CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    import interop
    from interop.streams import run_streams
    clip, decode = sys.argv[1], sys.argv[2]
    before = len(os.listdir("/proc/self/fd"))
    print(json.dumps({"ready": os.getpid()}), flush=True)
    try:
        run_streams([clip, clip], device="CPU", decode=decode, on_progress=lambda k, d, t: d == 3 and k == 0 and print(
            json.dumps({"running": True}), flush=True))
        print(json.dumps({"finished": True}), flush=True)
    except KeyboardInterrupt as e:
        time.sleep(0.2)
        print(json.dumps({"interrupted": True, "fds_before": before,
                          "fds_after": len(os.listdir("/proc/self/fd")),
                          "frames": [s.run.frames for s in e.result.streams],
                          "stream_threads": [t.name for t in threading.enumerate()
                                             if t.name.startswith("interop-stream-")]}), flush=True)
        sys.exit(130)
""")


def _start_child(clip: str, decode: str = "processes") -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _CHILD, clip, decode], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout is not None
    assert "ready" in p.stdout.readline()
    assert "running" in p.stdout.readline()
    return p


def test_sigint_stops_every_worker_and_leaks_no_fd(clip):
    p = _start_child(clip)
    workers = _children(p.pid)
    assert len(workers) == 2
    post = _children(p.pid, "interop.postpool")
    assert post  # and the text boxes' processes (one per few cores)
    workers += post
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130
    last = json.loads(out.strip().splitlines()[-1])
    assert last["interrupted"] and last["fds_after"] == last["fds_before"]
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers)


def test_sigint_stops_every_stream_thread_and_leaks_no_fd(clip):
    p = _start_child(clip, "threads")
    assert not _children(p.pid) and not _children(p.pid, "interop.postpool")  # decoded in threads: no process
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 130
    last = json.loads(out.strip().splitlines()[-1])
    assert last["interrupted"] and last["fds_after"] == last["fds_before"] and last["stream_threads"] == []
    assert max(last["frames"]) < 60, last["frames"]  # stopped at the next frame, not at the clip's end (150)
    assert time.monotonic() - t0 < 20


def test_inference_process_killed_every_worker_exits(clip):
    p = _start_child(clip)
    workers = _children(p.pid)
    assert len(workers) == 2
    post = _children(p.pid, "interop.postpool")
    assert post  # and the text boxes' processes (one per few cores)
    workers += post
    p.kill()
    p.wait(10)
    deadline = time.monotonic() + 15
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(w) for w in workers), "a decode worker outlived the inference process"


def test_cli_runs_several_inputs_with_a_json_entry_per_stream(clip, tmp_path):
    save = tmp_path / "last.png"
    p = subprocess.run([sys.executable, "-m", "interop", "run", clip, clip, "--frames", "4", "--json", "--save",
                        str(save), "--decode", "processes"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["frames"] == 8 and len(d["streams"]) == 2 and d["copies"] == 8 and d["decode"] == "processes"
    assert all(s["error"] is None and len(s["results"]) == 4 for s in d["streams"])
    assert "[stream 0]" in p.stderr and "[stream 1]" in p.stderr and "4/4 frames" in p.stderr
    assert (tmp_path / "last-0.png").stat().st_size > 0 and (tmp_path / "last-1.png").stat().st_size > 0
    one = subprocess.run([sys.executable, "-m", "interop", "run", clip, "--frames", "3", "--json", "--decode",
                          "processes"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert one.returncode == 0, one.stderr  # one input, asked for a worker process: it runs in one
    d = json.loads(one.stdout.strip().splitlines()[-1])
    assert d["decode"] == "processes" and d["frames"] == 3 and d["copies"] == 3 and len(d["streams"]) == 1
    bundled = subprocess.run([sys.executable, "-m", "interop", "run", "--frames", "3", "--json", "--decode",
                              "processes"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bundled.returncode == 0, bundled.stderr  # no input: the bundled clip, in a worker process as asked
    d = json.loads(bundled.stdout.strip().splitlines()[-1])
    assert d["decode"] == "processes" and d["copies"] == 3 and len(d["streams"]) == 1
    assert os.path.basename(d["streams"][0]["input"]) == "text.mp4"
    bad = subprocess.run([sys.executable, "-m", "interop", "run", clip, str(tmp_path / "missing.mp4"), "--frames",
                          "2", "--json"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert bad.returncode == 1  # a stream failed; the other ran
    d = json.loads(bad.stdout.strip().splitlines()[-1])
    assert d["decode"] == "threads" and d["copies"] == 0  # the default: decoded in threads, frames in place
    assert d["streams"][0]["error"] is None and d["streams"][0]["frames"] == 2
    assert d["streams"][1]["error"]["type"] == "VideoInputError"
