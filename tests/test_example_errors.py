"""Every example answers ``--help``, and ordinary bad input (a missing or unreadable video, a container other than
MP4, no producer to connect to) gives one line on stderr saying what to do, in the CLI's style
(``<example>: error: Type: message``), exit status 1 (2 for a usage error): never a Python traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.requirements import need_module

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
ALL = sorted(p.name for p in EXAMPLES.glob("*.py"))


def _example(name: str, *args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def _one_error_line(p: subprocess.CompletedProcess, name: str, *expected: str) -> str:
    """The run failed with exit status 1 and one line on stderr, ``<example>: error: ...``, holding ``expected``."""
    if p.returncode == 2 and "cannot run here" in p.stderr:
        pytest.skip(p.stderr.strip())
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1, p.stderr
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"{name[:-3]}: error: "), lines[0]
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def text_file(tmp_path: Path) -> str:
    p = tmp_path / "notes.mp4"  # a text file named like a video
    p.write_text("this is not a video\n" * 20)
    return str(p)


@pytest.fixture
def mkv_clip(tmp_path: Path) -> str:
    """A short H.264 clip with text in a Matroska container (not MP4: a hard-coded qtdemux cannot read it). Not NUT:
    GStreamer's NUT demuxer (gst-libav's avdemux_nut) stalls on such files, in gst-launch-1.0 too."""
    from interop.clip import encode, render

    path = str(tmp_path / "clip.mkv")
    encode(path, 4, 320, 240, codec="libx264", pattern=lambda i, w, h: render(i, w, h), array_format="bgr24")
    return path


@pytest.mark.parametrize("name", ALL)
def test_every_example_prints_its_help(name: str) -> None:
    """--help works everywhere, on a machine without torch or CUDA too (the tier-B examples said 'cannot run here')."""
    p = _example(name, "--help", timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: ") and "--help" in p.stdout, p.stdout
    assert "Traceback" not in p.stderr and "cannot run here" not in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["decode_infer.py", "gst_infer.py", "dma_producer.py", "many_streams.py",
                                  "opencl_preprocess.py"])
def test_a_bad_option_value_is_a_usage_error(name: str) -> None:
    p = _example(name, "--frames", "many", *(["--socket", "/tmp/x.sock"] if name == "dma_producer.py" else []))
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"{name}: error: argument --frames"), p.stderr


@pytest.mark.parametrize("name", ["decode_infer.py", "opencl_preprocess.py"])
def test_a_missing_video_is_one_line(name: str, tmp_path: Path) -> None:
    need_module("av")
    missing = str(tmp_path / "nosuch.mp4")
    _one_error_line(_example(name, missing), name, repr(missing), "give a video file")


@pytest.mark.parametrize("name", ["decode_infer.py", "opencl_preprocess.py"])
def test_a_text_file_as_the_video_is_one_line(name: str, text_file: str) -> None:
    need_module("av")
    _one_error_line(_example(name, text_file), name, repr(text_file), "give a video file")


def test_dma_producer_missing_or_unreadable_video_is_one_line(tmp_path: Path, text_file: str) -> None:
    need_module("av")
    sock = str(tmp_path / "p.sock")
    missing = str(tmp_path / "nosuch.mp4")
    _one_error_line(_example("dma_producer.py", "--socket", sock, missing), "dma_producer.py", repr(missing),
                    "give a video file")
    _one_error_line(_example("dma_producer.py", "--socket", sock, text_file), "dma_producer.py", repr(text_file),
                    "give a video file")
    assert not Path(sock).exists()  # refused before it listened


def test_dma_producer_socket_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    need_module("av")
    sock = str(tmp_path / "no" / "such" / "p.sock")
    _one_error_line(_example("dma_producer.py", "--socket", sock, "--accept-timeout", "1"), "dma_producer.py", sock)


def test_dma_producer_without_a_consumer_says_how_to_start_one(tmp_path: Path) -> None:
    need_module("av")
    sock = str(tmp_path / "p.sock")
    p = _example("dma_producer.py", "--socket", sock, "--accept-timeout", "1")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stderr
    last = p.stderr.strip().splitlines()[-1]  # after its "listening on" line
    assert last.startswith("dma_producer: error: ") and f"examples/dma_consumer.py --socket {sock}" in last, p.stderr


def test_dma_consumer_without_a_producer_says_how_to_start_one(tmp_path: Path) -> None:
    sock = str(tmp_path / "none.sock")
    p = _example("dma_consumer.py", "--socket", sock, "--timeout", "1")
    _one_error_line(p, "dma_consumer.py", sock, f"examples/dma_producer.py --socket {sock}")


def _gst_or_skip() -> None:
    need_module("gi")
    need_module("openvino")
    from interop import textdet

    if not textdet.model_status()[0]:
        pytest.skip("needs the PP-OCRv4 model")


def test_gst_infer_missing_or_unreadable_video_is_one_line(tmp_path: Path, text_file: str) -> None:
    _gst_or_skip()
    out = str(tmp_path / "out.mp4")
    missing = str(tmp_path / "nosuch.mp4")
    _one_error_line(_example("gst_infer.py", missing, "--out", out), "gst_infer.py", repr(missing), "give a video file")
    _one_error_line(_example("gst_infer.py", text_file, "--out", out), "gst_infer.py", repr(text_file))


def test_gst_infer_output_in_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    _gst_or_skip()
    out = str(tmp_path / "no" / "such" / "out.mp4")
    _one_error_line(_example("gst_infer.py", "--out", out, "--frames", "2"), "gst_infer.py", repr(out))


def test_gst_infer_output_named_other_than_mp4_is_one_line(tmp_path: Path) -> None:
    """The example muxes MP4: an --out named .txt got an MP4 file under that name, silently."""
    _gst_or_skip()
    out = str(tmp_path / "out.txt")
    _one_error_line(_example("gst_infer.py", "--out", out, "--frames", "2"), "gst_infer.py", repr(out), ".mp4")
    assert not Path(out).exists()


def test_gst_infer_reads_a_container_other_than_mp4(tmp_path: Path, mkv_clip: str) -> None:
    """The demuxer is not hard-coded (qtdemux failed on anything but MP4): an MKV file decodes, zero-copy into the
    model as before (the only copies are the drawn frames, one per frame), and its path may hold a space."""
    import json

    _gst_or_skip()
    av = need_module("av")
    spaced = tmp_path / "my clips" / "clip.mkv"
    spaced.parent.mkdir()
    Path(mkv_clip).rename(spaced)
    out = tmp_path / "out dir" / "boxes.mp4"
    out.parent.mkdir()
    p = _example("gst_infer.py", str(spaced), "--out", str(out))
    assert p.returncode == 0, p.stderr[-3000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["frames"] == 4 and res["boxes"] > 0
    assert res["copies"] == 4 and res["bytes_copied"] == 4 * 320 * 240 * 3 // 2  # one drawn copy per frame, no other
    with av.open(str(out)) as c:
        assert sum(1 for _ in c.decode(video=0)) == 4
