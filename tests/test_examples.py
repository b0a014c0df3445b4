"""Every example runs here (tier A, on small inputs) or, for a tier-B example without a GPU, exits with one line naming
what is missing; examples run on odd frame sizes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.requirements import need_module

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIER_B = ("cuda_infer.py", "cuda_opencl.py", "nvdec_cpu_infer.py")


def _example(name: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _odd_clip(path: Path, width: int = 853, height: int = 479, frames: int = 3) -> str:
    """yuv420p at an odd size (FFV1 keeps it; libx264 wants even sizes)."""
    av = need_module("av")
    try:  # the helpers are moving to tests/support
        from tests.support.ffmpeg_clips import pattern
    except ImportError:
        from tests.ffmpeg_clips import pattern

    with av.open(str(path), "w") as o:
        s = o.add_stream("ffv1", rate=25)
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        for i in range(frames):
            for pkt in s.encode(av.VideoFrame.from_ndarray(pattern(width, height, i), format="rgb24")):
                o.mux(pkt)
        for pkt in s.encode():
            o.mux(pkt)
    return str(path)


def _needs_or_skip(p: subprocess.CompletedProcess) -> None:
    """An example that says it cannot run here (one line on stderr, exit 2) is skipped with its reason."""
    if p.returncode == 2 and "cannot run here" in p.stderr:
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        pytest.skip(lines[0])


# examples tested in a module of their own
ELSEWHERE = {"gst_infer.py": "test_example_gst_infer.py"}


def test_every_example_is_covered() -> None:
    covered = {"decode_infer.py", "opencl_preprocess.py", "dma_producer.py", "dma_consumer.py", "many_streams.py",
               *TIER_B, *ELSEWHERE}
    assert {p.name for p in EXAMPLES.glob("*.py")} == covered  # a new example gets a test here
    for example, module in ELSEWHERE.items():
        assert f'"{example}"' in (ROOT / "tests" / module).read_text(), f"tests/{module} does not run {example}"


def test_decode_infer_runs() -> None:
    p = _example("decode_infer.py", "--frames", "3")
    _needs_or_skip(p)
    assert p.returncode == 0, p.stderr
    assert "copies 0 (0 bytes)" in p.stdout and p.stdout.count("text boxes") == 3


def test_decode_infer_on_an_odd_size(tmp_path: Path) -> None:
    p = _example("decode_infer.py", _odd_clip(tmp_path / "odd.mkv"), "--frames", "2")
    _needs_or_skip(p)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("text boxes") == 2


def test_many_streams_example_gives_each_stream_the_single_stream_box_count(tmp_path: Path) -> None:
    """Two odd-size streams and one that cannot be opened: the good ones finish with the boxes `interop.pipeline.run`
    finds on the same clip, the bad one ends with its error, nothing is copied (decoded in threads; in worker
    processes one counted copy per frame into the pool), and the exit status says a stream failed."""
    from interop.clip import encode, render

    odd = str(tmp_path / "odd_text.mkv")  # the bundled clip's text pattern at 853x479 (FFV1 keeps odd sizes)
    encode(odd, 3, 853, 479, codec="ffv1", pattern=lambda i, w, h: render(i, w, h), array_format="bgr24")
    from interop.pipeline import run

    single = None
    for decode, copies in (("threads", 0), ("processes", 3)):
        p = _example("many_streams.py", odd, str(tmp_path / "missing.mp4"), odd, "--frames", "3", "--decode", decode)
        _needs_or_skip(p)
        assert p.returncode == 1, p.stderr
        single = single or run(odd, frames=3)
        boxes = sum(len(single.boxes.get(i, [])) for i in range(single.frames))
        assert boxes > 0  # the pattern has text: the comparison below says something
        lines = p.stdout.splitlines()
        for k in (0, 2):
            assert any(ln.startswith(f"stream {k} {odd}: 3 frames, {boxes} text boxes, {copies} counted copies")
                       for ln in lines), p.stdout
        assert any(ln.startswith("stream 1 ") and "0 frames" in ln and "ended early: VideoInputError" in ln
                   for ln in lines), p.stdout
        assert f"decoded in {decode}" in p.stdout and f"copies {2 * copies}" in p.stdout
        assert "[stream 0] 3/3 frames" in p.stdout
    bad = _example("many_streams.py", odd, "--frames", "0")  # a usage error, not a traceback
    assert bad.returncode == 2 and "--frames must be at least 1" in bad.stderr and "Traceback" not in bad.stderr


def test_opencl_preprocess_on_an_odd_size(tmp_path: Path) -> None:
    """It crashed in its own OpenCV check (a reshape to (H*3/2, W)) on a 853x479 video."""
    p = _example("opencl_preprocess.py", _odd_clip(tmp_path / "odd.mkv"), "--frames", "2", "--size", "97", "61")
    _needs_or_skip(p)
    assert p.returncode == 0, p.stderr
    assert "2 frames on" in p.stdout and "mapper copies 0" in p.stdout
    diff = int(p.stdout.split("max |diff| ")[1].split(",")[0])
    assert diff <= 2  # the kernel and OpenCV agree on the odd edge too


def test_opencl_preprocess_default_clip() -> None:
    p = _example("opencl_preprocess.py", "--frames", "2", "--size", "64", "48")
    _needs_or_skip(p)
    assert p.returncode == 0, p.stderr
    assert "mapper copies 0 (0 bytes)" in p.stdout


def _gpu_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.parametrize("name", TIER_B)
def test_tier_b_example_without_a_gpu_is_one_line(name: str) -> None:
    if _gpu_here():
        pytest.skip("a CUDA GPU is here: the example runs (tests/test_*cuda* and the GPU machine's runs cover it)")
    p = _example(name, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name[:-3]}: cannot run here: needs "), p.stderr
    assert "GPU" in lines[0] or "CUDA" in lines[0]
    assert "Traceback" not in p.stderr and p.stdout == ""


def _nvdec_example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """examples/nvdec_cpu_infer.py with host stand-ins for NVDEC and the GPU kernel (software frames, pre-processed by
    OpenCV): its own logic - the result thread, the look-ahead, the counts - runs on any machine."""
    need_module("av")
    need_module("cv2")
    need_module("openvino")
    import importlib.util

    import av

    import interop
    from interop import textdet
    from tests.test_accuracy import naive_input

    try:
        textdet.model_path()
    except interop.BackendUnavailableError as e:
        pytest.skip(f"needs the PP-OCRv4 model: {e}")
    spec = importlib.util.spec_from_file_location("nvdec_cpu_infer", Path(__file__).parents[1] / "examples" /
                                                  "nvdec_cpu_infer.py")
    ex = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(ex)  # type: ignore[union-attr]
    monkeypatch.setattr(ex, "missing", lambda: None)
    monkeypatch.setattr("interop.cuda.open_nvdec", lambda path: av.open(path))
    monkeypatch.setattr(interop.Inference, "gpu_preprocess",
                        lambda self, vf: naive_input(vf, textdet.input_size_for(vf.width, vf.height)))
    return ex


def test_nvdec_example_counts_every_frames_boxes(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _nvdec_example(monkeypatch)
    out = ex.main(["--frames", "20"])
    assert out["frames"] == 20 and out["boxes_per_frame"] == 6.0  # the bundled clip's six text lines, every frame


def test_nvdec_example_raises_a_result_threads_error_without_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _nvdec_example(monkeypatch)

    def broken(*a: Any, **k: Any) -> Any:
        raise ValueError("boxes failed")

    monkeypatch.setattr("interop.textdet.boxes_from_map", broken)
    with pytest.raises(ValueError, match="boxes failed"):
        ex.main(["--frames", "100"])  # more frames than the queue holds: callbacks must not wait on it
