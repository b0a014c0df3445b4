"""A Ctrl-C that a C extension swallowed (PyGObject clears errors while resolving Gst.parse_launch: `interop run`
with gst: inputs went on to the end, exit 0) stops the run at its next check: interop run's SIGINT handler remembers
it (interop._sigint)."""

from __future__ import annotations

import os
import signal

import pytest

import interop  # noqa: F401 - before openvino: interop sets up the runtime first
from interop import _sigint
from tests.support.requirements import need_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def handler():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _sigint.install()
    yield
    _sigint._requested.clear()
    signal.signal(signal.SIGINT, before)


def _swallowed_ctrl_c() -> None:
    """Ctrl-C landing in code that clears every error, as PyGObject's attribute lookup did."""
    try:
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
    except KeyboardInterrupt:
        pass


def test_a_swallowed_ctrl_c_is_raised_at_the_next_check_once(handler):
    assert signal.getsignal(signal.SIGINT) is _sigint._handler
    _sigint.check()  # nothing came: nothing raised
    _swallowed_ctrl_c()
    with pytest.raises(KeyboardInterrupt):
        _sigint.check()
    _sigint.check()  # raised once


def test_install_leaves_a_programs_own_handler():
    before = signal.getsignal(signal.SIGINT)
    mine = lambda signum, frame: None  # noqa: E731
    signal.signal(signal.SIGINT, mine)
    try:
        _sigint.install()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_run_stops_at_its_next_frame(handler):
    need_module("openvino")
    from interop.pipeline import run

    seen: list[int] = []
    _swallowed_ctrl_c()
    with pytest.raises(KeyboardInterrupt):
        run(frames=5, on_progress=lambda done, total: seen.append(done))
    assert max(seen, default=0) == 0  # stopped before its first frame's result


def test_streams_in_threads_stop(handler):
    need_module("openvino")
    from interop.clip import default_clip
    from interop.streams import run_streams

    _swallowed_ctrl_c()
    with pytest.raises(KeyboardInterrupt):
        run_streams([default_clip(), default_clip()], frames=5)


def test_installed_restores_pythons_handler_and_forgets():
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with _sigint.installed():
                assert signal.getsignal(signal.SIGINT) is _sigint._handler
                signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # a Ctrl-C raised where it landed
        # a program that ran the CLI in its own process and goes on: no second KeyboardInterrupt later
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        _sigint.check()
        mine = lambda signum, frame: None  # noqa: E731
        signal.signal(signal.SIGINT, mine)
        with _sigint.installed():
            assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_installed_takes_over_a_handler_left_by_an_earlier_run():
    # a second Ctrl-C landing in installed()'s clean-up (or one between install() and its try) leaves our handler
    # in place with the Ctrl-C remembered: the program's next run must neither keep it nor be interrupted by it
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, _sigint._handler)
    _sigint._requested.set()
    try:
        with _sigint.installed():
            try:
                _sigint.check()
            except KeyboardInterrupt:
                pytest.fail("the next run was interrupted by an earlier run's Ctrl-C")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        _sigint._requested.clear()
        signal.signal(signal.SIGINT, before)


_INTERRUPTED_IN_EXEC = """
import sys
import interop.cli as cli

def doctor(args):
    # a Ctrl-C landing while exec() runs a string (dataclasses and namedtuple build methods so during imports)
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        if sys.argv[1] == "returns":
            return 130  # as `interop run` with several inputs handles it itself
        raise

cli.cmd_doctor = doctor
sys.exit(cli.main(["doctor"]))
"""


@pytest.mark.parametrize("how", ["raises", "returns"])
def test_an_interrupted_run_exits_130_after_a_ctrl_c_inside_exec(how, tmp_path):
    """CPython marks a KeyboardInterrupt raised in exec()'d source as unhandled even when it is caught later, and
    then ended the process with SIGINT at exit (interop run with several inputs, about one Ctrl-C in twenty: the
    signal landed while a module imported). The CLI clears that mark once it handled the interrupt."""
    import subprocess
    import sys

    def default_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    # run as a module, as `python -m interop` runs (`python -c` exits inside its SystemExit and never looks at the mark)
    (tmp_path / "interrupted_in_exec.py").write_text(_INTERRUPTED_IN_EXEC)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
    p = subprocess.run([sys.executable, "-m", "interrupted_in_exec", how], capture_output=True, text=True,
                       timeout=120, preexec_fn=default_sigint, env=env)
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr
