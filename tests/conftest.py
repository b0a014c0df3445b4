"""Shared test set-up: markers, --soak, the skip policy (tests/support/requirements.py) and shared fixtures."""

from __future__ import annotations

import os

import pytest

#: shared fixtures and the skip policy (tests/support/requirements.py: the `needs` marker, torch on CUDA machines)
pytest_plugins = ["tests.support.requirements", "tests.support.ffmpeg_clips", "tests.support.va_fake",
                  "tests.support.transport_link"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="run the long soaks (100,000 cycles)")


@pytest.fixture(scope="session")
def soak(request: pytest.FixtureRequest) -> bool:
    """True when the full soak was asked for (pytest --soak)."""
    return bool(request.config.getoption("--soak"))


def cycles(request_or_flag: object, short: int, full: int = 100_000) -> int:
    flag = request_or_flag if isinstance(request_or_flag, bool) else False
    return full if flag else short


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from tests.support.devices import cuda_device, hardware_devices
    from tests.support.requirements import HARDWARE

    cuda = cuda_device()
    hw = hardware_devices()
    for item in items:
        if "gpu" in item.keywords and cuda is None:
            item.add_marker(pytest.mark.skip(reason=f"needs {HARDWARE['cuda']} (tier B): none found on this machine"))
        if "hardware" in item.keywords:
            needs = [m.args[0] for m in item.iter_markers("hardware") if m.args] or ["any"]
            for need in needs:
                if need == "any" and not any(hw.values()) or need != "any" and not hw.get(need):
                    what = HARDWARE.get(need, "VA-API, Level Zero or an NPU")
                    item.add_marker(pytest.mark.skip(reason=f"needs {what} (tier C): none found on this machine"))
                    break


os.environ.setdefault("OPENVINO_LOG_LEVEL", "1")
