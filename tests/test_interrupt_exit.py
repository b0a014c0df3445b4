"""A run stopped with requests still running, and an Inference dropped with requests running, never abort the
process at exit: OpenVINO's completion callbacks entering Python while the interpreter is torn down end it
("FATAL: exception not rethrown", "terminate called ..."). Each case runs in a child process, which must exit on its
own terms with nothing from the C++ runtime on stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ABORT_MARKS = ("FATAL", "terminate called", "Aborted", "core dumped")

# interop.pipeline.run (what `interop run CLIP` runs) interrupted by Ctrl-C once results come: the caller catches the
# KeyboardInterrupt and exits normally, as the CLI does
_RUN_CHILD = textwrap.dedent("""
    import sys
    from interop.pipeline import run

    def progress(done, total):
        if done == 2:
            print("running", flush=True)

    try:
        run(on_progress=progress)
        print("finished before the interrupt", flush=True)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")

# an Inference dropped with a full pool of requests running, then the interpreter exits at once
_DROP_CHILD = textwrap.dedent("""
    import numpy as np
    import interop
    from interop import textdet

    inf = interop.Inference(textdet.model_path(), "CPU", input_size=(960, 544))
    x = np.zeros((1, 3, 544, 960), np.float32)
    n = inf.pool_size(x)
    for i in range(n):
        inf.infer_async(x, lambda outputs, i: None, i)
    print("pending", inf.pending, flush=True)
    del inf
""")


def _clean_exit(p: subprocess.CompletedProcess | subprocess.Popen, err: str) -> None:
    assert p.returncode == 0, f"exit status {p.returncode}: {err[-1500:]}"
    assert not any(m in err for m in ABORT_MARKS), err[-1500:]


@pytest.mark.parametrize("attempt", range(3))
def test_run_interrupted_with_requests_running_exits_cleanly(attempt: int) -> None:
    p = subprocess.Popen([sys.executable, "-c", _RUN_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    assert p.stdout is not None
    line = p.stdout.readline()
    assert "running" in line, line
    p.send_signal(signal.SIGINT)  # the loop goes on starting frames: requests are running
    out, err = p.communicate(timeout=120)
    assert "interrupted" in out, out
    _clean_exit(p, err)


@pytest.mark.parametrize("attempt", range(3))
def test_inference_dropped_with_requests_running_exits_cleanly(attempt: int) -> None:
    p = subprocess.run([sys.executable, "-c", _DROP_CHILD], capture_output=True, text=True, timeout=120, cwd=ROOT)
    pending = int(p.stdout.split("pending", 1)[1].split()[0]) if "pending" in p.stdout else 0
    assert pending > 0, p.stdout  # the exit came with requests running
    _clean_exit(p, p.stderr)
