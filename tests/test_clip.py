"""interop.clip.encode: the one synthetic-clip encoder (paths and file objects, patterns and frames, typed errors)."""

from __future__ import annotations

import ast
import io
import logging
from pathlib import Path

import numpy as np
import pytest

import interop
from interop import clip
from interop.clip import encode, gradient
from tests.support.requirements import need_module

av = need_module("av")


def _decode(src: Path | io.BytesIO) -> list:
    with av.open(src if isinstance(src, io.BytesIO) else str(src)) as c:
        return list(c.decode(video=0))


def test_a_count_of_pattern_frames_to_a_path(tmp_path: Path) -> None:
    out = encode(tmp_path / "sub" / "g.mp4", 5, 64, 48)  # the folder is made
    assert out == tmp_path / "sub" / "g.mp4"
    frames = _decode(out)
    assert len(frames) == 5 and (frames[0].width, frames[0].height) == (64, 48)
    assert frames[0].format.name == "yuv420p"
    rgb = frames[3].to_ndarray(format="rgb24").astype(int)
    assert np.abs(rgb - gradient(3, 64, 48)).mean() < 12  # the pattern's frame 3, through a lossy codec
    assert list(tmp_path.joinpath("sub").iterdir()) == [out]  # no temporary file left behind


def test_frames_given_as_arrays_and_video_frames_to_a_file_object() -> None:
    grey = np.full((48 * 3 // 2, 64), 128, np.uint8)
    pictures = [grey, av.VideoFrame.from_ndarray(grey, format="yuv420p")]
    buf = encode(io.BytesIO(), pictures, 64, 48, array_format="yuv420p", fps=1)
    assert buf.getvalue()[4:8] == b"ftyp"  # MP4 by default for a file object
    frames = _decode(io.BytesIO(buf.getvalue()))
    assert len(frames) == 2 and abs(float(frames[1].to_ndarray().mean()) - 128) < 1


def test_own_pattern_codec_pix_fmt_and_container(tmp_path: Path) -> None:
    def bars(i: int, w: int, h: int) -> np.ndarray:
        img = np.zeros((h, w, 3), np.uint8)
        img[:, : (i + 1) * 4] = 255
        return img

    out = encode(tmp_path / "c.ts", 10, 64, 32, pattern=bars, pix_fmt="yuvj420p", container="mpegts")
    frames = _decode(out)
    assert len(frames) == 10 and frames[0].format.name == "yuvj420p"
    g = frames[9].to_ndarray(format="gray")
    assert g[:, :32].mean() > 200 and g[:, 48:].mean() < 40


def test_deterministic_and_make_clip_uses_it(tmp_path: Path) -> None:
    a = encode(tmp_path / "a.mp4", 4, 64, 48).read_bytes()
    b = encode(tmp_path / "b.mp4", 4, 64, 48).read_bytes()
    assert a == b
    need_module("cv2")
    p = clip.make_clip(str(tmp_path / "t.mp4"), 96, 64, 3, preset="ultrafast")
    assert p == str(tmp_path / "t.mp4") and len(_decode(Path(p))) == 3


def test_make_clip_is_the_same_bytes_every_time_at_a_preset_with_lookahead(tmp_path: Path) -> None:
    need_module("cv2")
    # veryfast (the benchmarks' clips) plans bits over a lookahead; with x264's macroblock tree that plan came out
    # differently from one encode to the next
    runs = [Path(clip.make_clip(str(tmp_path / f"v{k}.mp4"), 320, 192, 40, crf=23, preset="veryfast")).read_bytes()
            for k in range(3)]
    assert runs[0] == runs[1] == runs[2]


def test_reuse_keeps_an_existing_clip_and_plain_encode_replaces_it(tmp_path: Path) -> None:
    p = tmp_path / "r.mp4"
    p.write_bytes(b"not a clip")
    assert encode(p, 2, 32, 32, reuse=True) == p and p.read_bytes() == b"not a clip"
    encode(p, 2, 32, 32)
    assert len(_decode(p)) == 2


def test_a_failed_encode_leaves_no_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.mp4"
    with pytest.raises(interop.InvalidTensorError, match="picture 1 is 32x16"):
        encode(p, [np.zeros((32, 32, 3), np.uint8), np.zeros((16, 32, 3), np.uint8)], 32, 32)
    assert list(tmp_path.iterdir()) == []


def test_a_picture_of_another_size_is_refused_not_rescaled() -> None:
    with pytest.raises(ValueError, match="make every picture the clip's size"):
        encode(io.BytesIO(), [np.zeros((48, 64, 3), np.uint8)], 32, 24)


@pytest.mark.parametrize("kwargs,error,match", [
    ({"width": 0}, interop.InvalidTensorError, "width must be a positive int"),
    ({"height": 2.5}, interop.InvalidTensorError, "height must be a positive int"),
    ({"fps": 0}, interop.InvalidTensorError, "fps must be a positive int"),
    ({"frames": 0}, interop.InvalidTensorError, "positive count"),
    ({"frames": True}, interop.InvalidTensorError, "positive count"),
    ({"frames": "abc"}, interop.UnsupportedTypeError, "count or an iterable"),
    ({"pattern": "plaid"}, interop.InvalidTensorError, "unknown pattern 'plaid'; known: gradient, text"),
    ({"pattern": 3}, interop.UnsupportedTypeError, "pattern must be a name"),
    ({"dest": 42}, interop.UnsupportedTypeError, "dest must be a path or a writable binary file"),
])
def test_bad_arguments(kwargs: dict, error: type, match: str) -> None:
    args = {"dest": io.BytesIO(), "frames": 2, "width": 32, "height": 32, **kwargs}
    with pytest.raises(error, match=match):
        encode(args.pop("dest"), args.pop("frames"), args.pop("width"), args.pop("height"), **args)


def test_what_this_ffmpeg_cannot_encode_is_an_unsupported_format() -> None:
    with pytest.raises(interop.UnsupportedFormatError, match="no_such_codec") as e:
        encode(io.BytesIO(), 1, 32, 32, codec="no_such_codec")
    assert isinstance(e.value, ValueError)
    with pytest.raises(interop.UnsupportedFormatError, match="4:2:0 needs even sizes"):
        encode(io.BytesIO(), 1, 33, 32)  # libx264 refuses an odd 4:2:0 width


def test_the_script_logs_instead_of_printing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    need_module("cv2")
    out = tmp_path / "m.mp4"
    with caplog.at_level(logging.INFO, logger="interop"):
        assert clip.main([str(out), "64", "48", "2"]) == 0
    assert capsys.readouterr() == ("", "")
    assert f"{out}: {out.stat().st_size} bytes" in caplog.text


@pytest.mark.parametrize("module", ["clip.py", *sorted(p.name for p in (Path(clip.__file__).parent / "benchmarks")
                                                           .glob("*.py"))])
def test_library_modules_do_not_print(module: str) -> None:
    """clip.py and the benchmarks (code the CLI runs, but library code) log or return; the CLI prints."""
    root = Path(clip.__file__).parent
    path = root / module if module == "clip.py" else root / "benchmarks" / module
    calls = [n.lineno for n in ast.walk(ast.parse(path.read_text()))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "print"]
    assert not calls, f"{path.name} calls print() at lines {calls}: log to the 'interop' logger or return the text"
