"""Old path of the keep-warm helpers, kept for code written before they moved to ``interop.cuda`` (issue 16)."""

from __future__ import annotations

from .cuda import keep_nvdec_warm, nvdec_warm_devices, release_nvdec_warm, try_keep_nvdec_warm

__all__ = ["keep_nvdec_warm", "try_keep_nvdec_warm", "release_nvdec_warm", "nvdec_warm_devices"]
