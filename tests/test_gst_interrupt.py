"""A Ctrl-C that lands while PyGObject returns a value arrives as "SystemError: ... returned a result with an
exception set" (the KeyboardInterrupt as its cause): interop raises it as the KeyboardInterrupt it is, so a run's
Ctrl-C is never taken for a stream's error (a multi-stream run went on with the other streams and exited 1)."""

from __future__ import annotations

from typing import Any

import pytest

import interop  # noqa: F401 - before gi/openvino: interop sets up the runtime first
from interop.elements.interrupt import emit, interrupt_of
from tests.support.requirements import need, need_module


def _pygobject_interrupt() -> SystemError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise SystemError("<method 'emit' of 'gi._gi.GObject' objects> returned a result with an exception "
                              "set") from ki
    except SystemError as e:
        return e


class _Emitter:
    def __init__(self, error: BaseException | None = None):
        self.error = error

    def emit(self, name: str, *args: Any) -> Any:
        if self.error is not None:
            raise self.error
        return (name, args)


def test_interrupt_of_finds_the_keyboard_interrupt_only():
    e = _pygobject_interrupt()
    assert isinstance(interrupt_of(e), KeyboardInterrupt)
    assert isinstance(interrupt_of(KeyboardInterrupt()), KeyboardInterrupt)
    assert interrupt_of(SystemError("another")) is None and interrupt_of(ValueError("x")) is None


def test_emit_raises_the_interrupt_and_passes_everything_else():
    assert emit(_Emitter(), "try-pull-sample", 5) == ("try-pull-sample", (5,))
    with pytest.raises(KeyboardInterrupt):
        emit(_Emitter(_pygobject_interrupt()), "try-pull-sample", 5)
    with pytest.raises(SystemError, match="another"):
        emit(_Emitter(SystemError("another")), "try-pull-sample", 5)


def test_appsink_source_pull_raises_the_interrupt(tmp_path):
    need("gst")
    from interop.elements.appsink import AppSinkSource

    src = AppSinkSource("videotestsrc num-buffers=5 ! video/x-raw,format=I420,width=64,height=48 ! appsink")
    try:
        src.start()
        src.sink = _Emitter(_pygobject_interrupt())  # the pull, as PyGObject ends it when Ctrl-C lands there
        with pytest.raises(KeyboardInterrupt):
            src.read()
    finally:
        src.sink = None
        src.close()


def test_a_run_whose_first_pull_is_interrupted_raises_keyboard_interrupt():
    need("gst")
    need_module("openvino")
    from interop import stream_threads

    class _Src:
        is_gst = True
        convertible = False

        def __init__(self) -> None:
            def it():
                raise _pygobject_interrupt()
                yield  # pragma: no cover
            self.it = it()

    with pytest.raises(KeyboardInterrupt):  # not kept as the stream's error (the run would go on)
        stream_threads._compile_first(None, [_Src()], False)
