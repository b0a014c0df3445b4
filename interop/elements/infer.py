"""InferenceTransform: an ``interop.Inference`` as a chain element. Each frame goes into the model zero-copy
(Inference routes any memory type itself); the outputs land in ``frame.metadata["inference"]`` and, with a
``postprocess(outputs, frame)``, its result in ``frame.metadata["result"]``. Last in a chain it acts as a sink
that keeps nothing (``keep=False``) or yields annotated frames."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..frame import Frame
from .base import Transform


class InferenceTransform(Transform):
    """Runs ``inference`` (an interop.Inference) on each frame, synchronously in the chain's thread."""

    def __init__(self, inference: Any, postprocess: Callable[[dict[Any, Any], Frame], Any] | None = None,
                 *, keep: bool = True):
        self.inference = inference
        self.postprocess = postprocess
        self.keep = keep
        self.frames = 0

    def process(self, frame: Frame) -> Frame | None:
        outputs = self.inference.infer(frame)
        frame.metadata["inference"] = outputs
        if self.postprocess is not None:
            frame.metadata["result"] = self.postprocess(outputs, frame)
        self.frames += 1
        return frame if self.keep else None
