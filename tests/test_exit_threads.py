"""Interpreter exit while daemon threads wait inside the library's other blocking calls.

tests/test_dma_exit.py covers DMA views and FramePool.acquire(); here: the transport (recv on a silent producer,
send to a consumer that never reads, wait_returned, accept on an idle server, a frame held while its DONE would go
to a producer that reads none) and Inference (infer and wait_all while requests run). Each child process must exit
with status 0 within its time limit: no signal, no hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.requirements import need_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PRELUDE = """
import threading, time
import numpy as np
import interop
from interop import FrameFormat, MemoryType
from interop.tensors.dma import FramePool
from interop.transport import FrameReceiver, FrameSender, FrameServer, seqpacket_pair
ready = threading.Event()

def daemon(fn):
    def run():
        ready.set()
        fn()
    threading.Thread(target=run, daemon=True).start()
    ready.wait(10)
    time.sleep(0.2)  # let the thread get inside the call
"""

SCENARIOS = {
    # a consumer waits for a frame that never comes
    "recv_silent_producer": """
a, b = seqpacket_pair()
sender, receiver = FrameSender(a), FrameReceiver(b)
daemon(lambda: receiver.recv())
""",
    # a producer sends to a consumer that never reads: send() blocks once the socket is full
    "send_to_stalled_consumer": """
a, b = seqpacket_pair()
sender, receiver = FrameSender(a), FrameReceiver(b)
pool = FramePool(FrameFormat.GRAY8, 64, 64, 64)
def flood():
    while True:
        sender.send(pool.acquire(timeout=30))
daemon(flood)
""",
    # a producer waits for its frames to come back while the consumer holds them
    "wait_returned_held": """
a, b = seqpacket_pair()
sender, receiver = FrameSender(a), FrameReceiver(b)
pool = FramePool(FrameFormat.NV12, 320, 240, 2)
sender.send(pool.acquire())
held = receiver.recv(timeout=10)
view = np.asarray(interop.map(held, MemoryType.CPU)[0])
daemon(lambda: sender.wait_returned())
""",
    # a server waits for a consumer that never connects
    "accept_idle": """
import tempfile
path = tempfile.mktemp(suffix=".sock")
server = FrameServer(path)
daemon(lambda: server.accept())
""",
    # a consumer thread reads a received frame while the producer never reads DONE messages
    "read_received_frame": """
a, b = seqpacket_pair()
sender, receiver = FrameSender(a), FrameReceiver(b)
pool = FramePool(FrameFormat.NV12, 320, 240, 2)
sender.send(pool.acquire())
frame = receiver.recv(timeout=10)
y = np.asarray(interop.map(frame, MemoryType.CPU)[0])
def spin():
    while True:
        int(y.sum())
daemon(spin)
""",
}

_INFERENCE = """
import openvino as ov
from openvino import opset13 as ops
x = ops.parameter([1, 3, 256, 256], ov.Type.f32, name="x")
m = ov.Model([ops.relu(ops.convolution(x, ops.constant(np.ones((16, 3, 3, 3), np.float32)), [1, 1], [1, 1], [1, 1],
                                      [1, 1]))], [x])
inf = interop.Inference(m, "CPU")
data = np.ones((1, 3, 256, 256), np.float32)
"""

INFERENCE_SCENARIOS = {
    # a thread runs inferences back to back
    "infer_loop": _INFERENCE + """
def loop():
    while True:
        inf.infer(data)
daemon(loop)
""",
    # a thread submits asynchronously and waits for all of them
    "wait_all_loop": _INFERENCE + """
def loop():
    while True:
        for _ in range(8):
            inf.infer_async(data)
        inf.wait_all()
daemon(loop)
""",
}


def _run(body: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(_PRELUDE) + textwrap.dedent(body) + "\nprint('main thread ends', flush=True)\n"
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_exit_with_a_daemon_thread_inside_a_transport_call(name: str) -> None:
    for _ in range(2):
        p = _run(SCENARIOS[name])
        assert "main thread ends" in p.stdout, p.stderr[-3000:]
        assert p.returncode == 0, f"{name}: exit status {p.returncode}\n{p.stderr[-3000:]}"


@pytest.mark.parametrize("name", sorted(INFERENCE_SCENARIOS))
def test_exit_with_a_daemon_thread_inside_inference(name: str) -> None:
    need_module("openvino")
    p = _run(INFERENCE_SCENARIOS[name])
    assert "main thread ends" in p.stdout, p.stderr[-3000:]
    assert p.returncode == 0, f"{name}: exit status {p.returncode}\n{p.stderr[-3000:]}"


_CLOSED_AT_EXIT = """
import atexit, threading, time
go = threading.Event()
done = threading.Event()
atexit.register(lambda: (go.set(), done.wait(10)))  # registered first: runs after interop's exit handler, joins
import numpy as np
import interop
import openvino as ov
from openvino import opset13 as ops
x = ops.parameter([1, 3, 64, 64], ov.Type.f32, name="x")
inf = interop.Inference(ov.Model([ops.relu(x)], [x]), "CPU")
data = np.ones((1, 3, 64, 64), np.float32)
inf.infer(data)

def late():
    go.wait()
    print("calling", flush=True)
    try:
        inf.infer_async(data)  # the Inference was closed by exit meanwhile
    except interop.InteropError as e:
        print("refused:", e, flush=True)
    done.set()

threading.Thread(target=late, daemon=True).start()
print("main thread ends", flush=True)
"""


def test_a_thread_calling_an_inference_exit_closed_is_told_so_and_can_end() -> None:
    """Exit closes every Inference; a thread that calls one afterwards (here one the program's own exit handler
    joins) gets an InteropError that names the exit, never a wait for good: the join returns."""
    need_module("openvino")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _CLOSED_AT_EXIT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "calling" in p.stdout, p.stdout
    assert "refused: the interpreter is exiting" in p.stdout, p.stdout + p.stderr[-3000:]


_JOINED_AT_EXIT = """
import atexit, threading, time
stop = threading.Event()
holder = []
def join():  # registered first: runs after interop's exit handler
    stop.set()
    holder[0].join(20)
    print("joined" if not holder[0].is_alive() else "still alive", flush=True)
atexit.register(join)
import numpy as np
import interop
import openvino as ov
from openvino import opset13 as ops
x = ops.parameter([1, 3, 64, 64], ov.Type.f32, name="x")
inf = interop.Inference(ov.Model([ops.relu(x)], [x]), "CPU")
data = np.ones((1, 3, 64, 64), np.float32)
inf.infer(data)

def loop():
    while not stop.is_set():
        try:
            inf.infer(data)
        except interop.InteropError as e:
            print("refused:", e, flush=True)
            return

holder.append(threading.Thread(target=loop, daemon=True))
holder[0].start()
time.sleep(0.3)
print("main thread ends", flush=True)
"""


def test_a_thread_inside_an_inference_loop_at_exit_is_told_so_and_can_be_joined() -> None:
    """A thread that keeps calling an Inference as the interpreter exits parks while exit closes it (it must not
    enter OpenVINO then), and once closed gets the exit's InteropError: an exit handler joining it returns."""
    need_module("openvino")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", _JOINED_AT_EXIT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "joined" in p.stdout, p.stdout + p.stderr[-3000:]
