"""Elements: Source / Transform / Sink and the Chain that runs them, plus GStreamer's appsink/appsrc, a PyAV
decoder and Inference as elements. Framework modules load when an element is built, never on import."""

from __future__ import annotations

from typing import Any

from .base import Chain, Element, PipelineError, PipelineTimeoutError, Sink, Source, Transform

__all__ = ["AppSinkSource", "AppSrcSink", "Chain", "Element", "InferenceTransform", "PipelineError",
           "PipelineTimeoutError", "PyAVDecoderSource", "Sink", "Source", "Transform", "frames"]

_LAZY = {"AppSinkSource": "appsink", "frames": "appsink", "AppSrcSink": "appsrc", "PyAVDecoderSource": "decoder",
         "InferenceTransform": "infer"}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'interop.elements' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
