"""interop from Debian's system Python (/usr/bin/python3 with python3-gi and python3-gst-1.0, whose overrides turn
Gst.Buffer.map() into a memoryview): appsink samples map zero-copy, the numpy view's address is the mapped
GstMemory's data pointer, and the bytes match gst-python's own map."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = "/usr/bin/python3"

SCRIPT = textwrap.dedent("""
    import numpy as np
    import interop
    from interop import MemoryType
    from interop.native import gst as ng
    from interop.tensors.gst import gst
    import gi
    Gst = gst()
    assert "gi.overrides.Gst" in __import__("sys").modules, "python3-gst-1.0 overrides not loaded"
    p = Gst.parse_launch("videotestsrc num-buffers=3 pattern=ball ! video/x-raw,format=NV12,width=854,height=480 "
                         "! appsink name=s sync=false")
    s = p.get_by_name("s")
    p.set_state(Gst.State.PLAYING)
    n = 0
    while (sample := s.emit("try-pull-sample", 5 * Gst.SECOND)) is not None:
        buf = sample.get_buffer()
        with interop.copy_meter() as m:
            f = interop.map(sample, MemoryType.CPU)
        assert m.copies == 0
        y = np.asarray(f[0])
        mapping = ng.MemoryMapping(ng.peek_memory(ng.pointer_of(buf, "Gst.Buffer"), 0), False)
        assert y.ctypes.data == mapping.address, (y.ctypes.data, mapping.address)
        with buf.map(Gst.MapFlags.READ) as info:  # gst-python's override: a context manager, a memoryview
            assert isinstance(info.data, memoryview)
            raw = np.frombuffer(info.data, np.uint8)
            assert np.array_equal(y[5], raw[5 * y.strides[0]: 5 * y.strides[0] + 854])
        mapping.close()
        f.release()
        n += 1
    assert n == 3
    p.set_state(Gst.State.NULL)
    print("ok", gi.__version__, Gst.version_string())
""")


def test_system_python_maps_zero_copy():
    if not os.path.exists(PY):
        pytest.fail(f"{PY} is missing: Debian's python3 is part of the GStreamer set-up (tests/prepare.d/gstreamer.sh)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([PY, "-c", SCRIPT], capture_output=True, text=True, timeout=120, env=env, cwd="/")
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), \
        f"system Python run failed (python3-gi, python3-gst-1.0, python3-numpy: tests/prepare.d/gstreamer.sh):\n" \
        f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
