"""A run's child processes (decode workers, post-processing processes) start with Ctrl-C ignored: a terminal's
Ctrl-C reaches the whole process group, and a child still importing printed a KeyboardInterrupt traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from interop._spawn import ignoring_ctrl_c
from tests.support.procs import children

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_child_starts_with_sigint_ignored():
    p = subprocess.run(ignoring_ctrl_c([sys.executable, "-c", "import signal, sys; print(signal.getsignal("
                                        "signal.SIGINT) is signal.SIG_IGN, sys.argv[1:])", "a b", "c"]),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "True ['a b', 'c']"  # the arguments pass through the shell untouched


def _workers(pid: int) -> list[int]:
    # the worker once it is Python (not the shell that starts it, which sets the trap first)
    return children(pid, "interop.streams", python_only=True)


def _ignores_sigint(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        ign = next(int(ln.split()[1], 16) for ln in f if ln.startswith("SigIgn:"))
    return bool(ign & (1 << (signal.SIGINT - 1)))


def test_ctrl_c_to_the_group_while_workers_start_prints_no_traceback():
    clip = os.path.join(ROOT, "interop", "data", "text.mp4")
    p = subprocess.Popen([sys.executable, "-m", "interop", "run", "--no-progress", clip, clip, "--decode",
                          "processes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not _workers(p.pid) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    workers = _workers(p.pid)
    assert workers, "no decode worker started"
    # a worker found the moment it exists (still importing interop) already ignores SIGINT
    assert all(_ignores_sigint(w) for w in workers if os.path.exists(f"/proc/{w}"))
    os.killpg(p.pid, signal.SIGINT)  # what a terminal does: every process of the group, workers still importing
    out, err = p.communicate(timeout=120)
    # 130 every time: a Ctrl-C landing while a module imports (inside source that exec() runs) no longer ends the
    # process by SIGINT at exit (test_sigint's exec test)
    assert p.returncode == 130 and "interrupted" in err, (p.returncode, err[-2000:])
    assert "Traceback" not in err and "KeyboardInterrupt\n" not in err, err[-2000:]
