"""Interpreter exit with an Inference left open while its drainer thread is inside OpenVINO.

A Python thread that is inside a call of OpenVINO's bindings that lets go of the GIL (AsyncInferQueue.start_async
lets go of it while the request starts) when the interpreter begins to finalize is ended by pthread_exit as it takes
the GIL back; the unwinding meets the bindings' noexcept GIL guard and the process aborts with "terminate called
without an active exception". The drainer (the thread that starts submissions queued by completion callbacks) can
be there at exit: the request it started completes, its callback runs and wait_all() returns, all before the drainer
has the GIL again. Exit must wait for it to be back.

The window is a few milliseconds wide (a drainer descheduled at the wrong moment); the child widens it by making the
drainer, right after it starts the last queued request, run a slow inference of another model: the same kind of call
(GIL let go inside the bindings), only longer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.requirements import need_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, threading, weakref
import numpy as np
import interop  # before openvino: interop sets up the runtime first
import openvino as ov
import openvino.opset13 as ops
from interop import inference as infmod
from tests.test_inference import tiny_model, H, W
from tests.support.fanout import fan_out_past_the_pool

DROP = sys.argv[1] == "dropped"

# a model whose inference keeps one thread inside OpenVINO (the GIL let go) for a while
n = 512
a = ops.parameter([n, n], np.float32, name="a")
y = a
for _ in range(25):
    y = ops.matmul(y, a, False, False)
slow = ov.Core().compile_model(ov.Model([y], [a]), "CPU", {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1,
                                                           "INFERENCE_PRECISION_HINT": "f32"})
slow_request = slow.create_infer_request()
slow_input = np.full((n, n), 1e-3, np.float32)
caught, drained = [], []

class SlowStartQueue:
    # the pool's AsyncInferQueue, whose start_async keeps the drainer inside OpenVINO after its last queued start
    def __init__(self, queue):
        self._queue = queue
    def __getattr__(self, name):
        return getattr(self._queue, name)
    def __len__(self):
        return len(self._queue)
    def __getitem__(self, i):
        return self._queue[i]
    def is_ready(self):  # a callback finds no free request: every submission of theirs goes to the drainer
        return False if infmod._callbacks_here() else self._queue.is_ready()
    def start_async(self, inputs, job):
        drainer = threading.current_thread().name == "interop-inference-submit"
        if drainer:
            drained.append(job)
            if len(drained) == nreq * extra:  # the last one queued (noted before it starts: it may be done at once)
                caught.append(True)
        self._queue.start_async(inputs, job)
        if drainer and len(drained) == nreq * extra:
            slow_request.infer({0: slow_input})
            print(f"drainer back from OpenVINO; exit had begun: {infmod._exiting.is_set()}", file=sys.stderr,
                  flush=True)

new_queue = infmod.Inference._new_queue
infmod.Inference._new_queue = lambda self, compiled, nreq: SlowStartQueue(new_queue(self, compiled, nreq))

inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT"})
nreq = inf.pool_size()
extra = 3 * nreq + 2  # each first-level callback submits more than the pool holds: the drainer starts the rest
# the callbacks hold the Inference weakly: with DROP the drainer may hold the last reference
res = fan_out_past_the_pool(weakref.ref(inf), np.zeros((1, 3, H, W), np.float32), nreq, extra)
if DROP:  # the program lets go of the Inference
    del inf
print(json.dumps({**res, "caught": len(caught)}), flush=True)
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", _CHILD, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("mode", ["kept", "dropped"])
def test_exit_while_the_drainer_is_inside_openvino_does_not_abort(mode: str) -> None:
    need_module("openvino")
    need_module("av")
    need_module("cv2")
    for _ in range(3):  # the child's exit must begin while the drainer is inside OpenVINO; retried if it did not
        p = _run(mode)
        assert p.returncode == 0, f"exit status {p.returncode}\n{p.stderr[-3000:]}"
        res = json.loads(p.stdout.strip().splitlines()[-1])
        assert res["errors"] == [] and res["done"] == res["want"] and res["caught"] == 1, res
        # Without the line, the process ended around a drainer still inside OpenVINO: exit did not wait for it
        # (here it happened to end before the drainer took the GIL back; a little later, and it aborts).
        assert "drainer back from OpenVINO" in p.stderr, f"exit did not wait for the drainer\n{p.stderr[-3000:]}"
        if "exit had begun: True" in p.stderr:
            return
    pytest.fail("the child's exit never began while its drainer was inside OpenVINO: the test proved nothing")


_CLOSER_CHILD = r"""
import sys, threading, time
import numpy as np
import interop  # before openvino: interop sets up the runtime first
from interop import inference as infmod
from tests.test_inference import tiny_model, H, W

inf = interop.Inference(tiny_model(), "CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
x = np.zeros((1, 3, H, W), np.float32)
started, closing = threading.Event(), threading.Event()

def slow(outputs, _):  # on OpenVINO's thread: returns only once the interpreter's exit has begun
    started.set()
    exit_began = infmod._exiting.wait(30)
    time.sleep(0.02)
    print(f"callback returning; exit had begun: {exit_began}", file=sys.stderr, flush=True)

def closer():
    closing.set()
    inf.close()  # waits for the request above, on a daemon thread, while the main thread exits

inf.infer_async(x, slow)
started.wait(30)
threading.Thread(target=closer, daemon=True).start()
closing.wait(30)
time.sleep(0.05)  # the closer is inside close(), waiting for the request
"""


def test_exit_while_a_daemon_thread_closes_the_inference_does_not_abort() -> None:
    """A daemon thread closing the Inference (waiting for its requests) when the main thread exits: exit found the
    Inference closed, did not wait for that close, and the interpreter finalized with a completion callback still to
    return into OpenVINO (SIGABRT). Exit must wait for the closing thread as it waits for its own close."""
    need_module("openvino")
    need_module("av")
    need_module("cv2")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _CLOSER_CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"exit status {p.returncode}\n{p.stderr[-3000:]}"
    assert "callback returning; exit had begun: True" in p.stderr, p.stderr[-3000:]
