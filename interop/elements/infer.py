"""InferenceTransform: an ``interop.Inference`` as a chain element. Each frame goes into the model zero-copy
(Inference routes any memory type itself); the outputs land in ``frame.metadata["inference"]`` and, with a
``postprocess(outputs, frame)``, its result in ``frame.metadata["result"]``. Last in a chain it acts as a sink
that keeps nothing (``keep=False``) or yields annotated frames."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..frame import Frame
from ..types import MemoryType
from .base import Transform


def model_input(frame: Frame) -> Frame:
    """What to hand ``Inference`` for ``frame``: a GST frame as CPU views of its memory (zero-copy, read-only),
    anything else as it is. The router costs a chain's later steps without seeing their input, so it counts
    GST -> CPU -> OPENVINO as a possible copy; given the CPU views, Inference routes CPU -> model by the views
    themselves (host memory it shares). A frame wrapped from a Gst.Sample maps through the sample: the one-step
    path, the cheapest per frame."""
    if frame.memory_type is not MemoryType.GST:
        return frame
    import interop

    native = frame.native
    src = native if native is not None and type(native).__name__ == "Sample" else frame
    return interop.map(src, MemoryType.CPU)  # type: ignore[return-value]


class InferenceTransform(Transform):
    """Runs ``inference`` (an interop.Inference) on each frame, synchronously in the chain's thread."""

    def __init__(self, inference: Any, postprocess: Callable[[dict[Any, Any], Frame], Any] | None = None,
                 *, keep: bool = True):
        self.inference = inference
        self.postprocess = postprocess
        self.keep = keep
        self.frames = 0

    def process(self, frame: Frame) -> Frame | None:
        outputs = self.inference.infer(model_input(frame))
        frame.metadata["inference"] = outputs
        if self.postprocess is not None:
            frame.metadata["result"] = self.postprocess(outputs, frame)
        self.frames += 1
        return frame if self.keep else None
