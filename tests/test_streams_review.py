"""Review of `interop run` over several streams, by testing its faults (issue 21 point 3): what tests/test_streams.py
does not already cover. Each test here failed before the fix it came with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from tests.support.procs import children
from tests.support.requirements import need_module

need_module("av")
need_module("cv2")
need_module("openvino")

from interop.streams import run_streams  # noqa: E402
from tests import test_streams  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
clip = test_streams.clip  # the bundled clip (skipped without the detector model)


def _run_child(script: str, clip: str, what: str) -> str:
    """Run ``script`` (argv[1]: the clip) in a child process; its last stdout line. A child that has not ended
    within 60 s fails the test as a hang, and it and its workers are killed (a stopped worker holds the pipes open:
    killing the child alone would leave the test waiting)."""
    p = subprocess.Popen([sys.executable, "-c", script, clip], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        for pid in children(p.pid) + children(p.pid, "interop.postpool"):
            os.kill(pid, signal.SIGKILL)
        p.kill()
        p.communicate()
        pytest.fail(f"the run hung on {what}")
    assert p.returncode == 0, err[-2000:]
    return out.strip().splitlines()[-1]


def _damaged(clip: str, tmp_path: Path) -> str:
    """The clip with bytes in its middle overwritten: some packets fail to decode, the stream ends early."""
    data = bytearray(Path(clip).read_bytes())
    data[1000:61000] = np.random.default_rng(0).integers(0, 256, 60000, dtype=np.uint8).tobytes()
    path = tmp_path / "damaged.mp4"
    path.write_bytes(bytes(data))
    return str(path)


def test_a_damaged_clip_between_good_ones_is_reported_in_processes_as_in_threads(clip, tmp_path):
    """Review finding: decoded in worker processes, a damaged clip's skipped packets and early end were counted
    (decode_errors) but never said (no warning, nothing logged), and an input that could not be opened left its
    error out of the stream's warnings, where the default (threads) says both."""
    bad, text = _damaged(clip, tmp_path), tmp_path / "notes.txt"
    text.write_text("not a video\n")
    res = run_streams([clip, bad, str(text)], device="CPU", frames=100, decode="processes")
    good, damaged, unread = res.streams
    assert good.error is None and good.run.frames == 100 and good.run.warnings == []
    assert damaged.error is None and 0 < damaged.run.frames < 100 and damaged.run.decode_errors > 0
    assert any("failed to decode and were skipped" in w for w in damaged.run.warnings), damaged.run.warnings
    assert any("ended early" in w for w in damaged.run.warnings), damaged.run.warnings
    assert unread.error_type == "VideoInputError" and unread.run.warnings == [unread.error]


_BAD_MESSAGE = textwrap.dedent("""
    import json, sys
    import interop
    from interop.transport import FrameReceiver, ProtocolError
    from interop.streams import run_streams
    real, seen = FrameReceiver.recv, []

    def recv(self, timeout=None):  # the first worker's fourth frame arrives as a message that is not a frame
        f = real(self, timeout)
        if f is not None and self is bad[0]:
            seen.append(1)
            if len(seen) == 4:
                f.release()
                raise ProtocolError("a header that is not a frame's")
        return f

    import interop.streams as st
    bad = []
    real_init = st._Worker.__init__

    def init(self, index, *a):
        real_init(self, index, *a)
        if index == 0:
            bad.append(self.rx)

    st._Worker.__init__ = init
    FrameReceiver.recv = recv
    res = run_streams([sys.argv[1], sys.argv[1]], device="CPU", frames=30, pool_size=3, decode="processes")
    print(json.dumps([[s.run.frames, s.error_type] for s in res.streams]), flush=True)
""")


def test_a_worker_that_sends_a_bad_message_ends_its_stream_not_a_hang(clip):
    """Review finding: a decode worker whose message the inference process refused (ProtocolError) was no longer
    read but left running: it waited for ever for the pool buffers its unread frames held, so its stream never ended
    and the whole run hung. Now the worker is stopped, its stream ends with the error, the other completes."""
    (frames0, error0), (frames1, error1) = json.loads(_run_child(_BAD_MESSAGE, clip, "a worker's bad message"))
    assert error0 == "ProtocolError" and frames0 == 3
    assert error1 is None and frames1 == 30


_STOPPED = textwrap.dedent("""
    import json, os, signal, sys
    import interop
    import interop.streams as st
    from tests.support.procs import children
    st.STALL_TIMEOUT = 2.0
    stopped = []

    def progress(k, done, total):  # a worker stopped mid-stream (as a decoder stuck in a loop would be)
        if done == 5 and not stopped:
            stopped.append(children(os.getpid())[0])
            os.kill(stopped[0], signal.SIGSTOP)

    # a small pool: the workers cannot decode every frame ahead and end before the fifth result (a 16-core
    # machine's default pool holds more than the 30 frames)
    res = st.run_streams([sys.argv[1], sys.argv[1]], device="CPU", frames=30, decode="processes", pool_size=4,
                         on_progress=progress)
    print(json.dumps({"streams": [[s.run.frames, s.error_type, s.error] for s in res.streams],
                      "left": children(os.getpid())}), flush=True)
""")


def test_a_worker_that_sends_nothing_ends_its_stream_not_a_hang(clip):
    """Review finding: a decode worker that stopped sending (a decoder stuck in a loop, a stopped process) while
    inference held none of its frames made the run wait for it for ever; the point of decoding in processes is to
    survive such an input. Now its stream ends with a StreamError after STALL_TIMEOUT, and the others complete."""
    d = json.loads(_run_child(_STOPPED, clip, "a stopped decode worker"))
    stuck = [s for s in d["streams"] if s[1] is not None]
    done = [s for s in d["streams"] if s[1] is None]
    assert len(stuck) == 1 and len(done) == 1 and done[0][0] == 30
    assert stuck[0][1] == "StreamError" and "sent nothing for 2 s" in stuck[0][2] and 5 <= stuck[0][0] < 30
    assert d["left"] == []  # the stopped worker was killed, not left behind


@pytest.mark.parametrize("inputs,match", [
    ("clip.mp4", r"a list of inputs, not one input: run_streams\(\['clip.mp4'\]\)"),
    (Path("clip.mp4"), "not one input"),
    (["a.mp4", None], "input 1 is NoneType None: each input is a path"),
    (["a.mp4", 3], "input 1 is int 3"),
    (7, "a list of inputs .* not int"),
])
def test_inputs_that_are_not_a_list_of_paths_are_a_typed_error(inputs, match):
    """Review finding: one path given as a str made a stream of each of its characters (a StreamError listing '/',
    'w', ...), and an input that is not a path was a TypeError raised from inside the run (worker processes) or a
    stream ending with a TypeError (threads)."""
    from interop.pipeline import RunArgumentError

    for decode in ("threads", "processes"):
        with pytest.raises(RunArgumentError, match=match):
            run_streams(inputs, device="CPU", decode=decode)


def test_path_like_inputs_give_a_json_object(clip):
    """Review finding: a pathlib.Path input ran, but the result's --json object kept the Path, which json.dumps
    refuses."""
    res = run_streams([Path(clip), clip], device="CPU", frames=1)
    d = json.loads(json.dumps(res.to_json()))
    assert d["video"] == [clip, clip] and [s["input"] for s in d["streams"]] == [clip, clip]
