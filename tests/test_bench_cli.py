"""`interop bench`: skipped benchmarks and parts say why (text and JSON), --md/--json outputs, option checks.

Run in-process (interop.cli.main) with fake benchmark modules, so the skip paths are taken on any machine.
"""

from __future__ import annotations

import json
import os
import types

import pytest

import interop.benchmarks as bm
from interop.cli import main


def fake(name: str, run, requires=()):  # type: ignore[no-untyped-def]
    mod = types.ModuleType(f"interop.benchmarks.{name}")
    mod.NAME, mod.SUMMARY, mod.REQUIRES, mod.run = name, f"the {name} fake benchmark", requires, run
    return mod


def ok_run(quick: bool = False) -> list[bm.Result]:
    return [bm.Result("ok", "one case", 1.5, "x", {"runs": [1.4, 1.5, 1.6]}),
            bm.skipped("ok", "the GPU part", "no GPU here")]


def skip_run(quick: bool = False) -> list[bm.Result]:
    raise bm.Skipped("no NVDEC on this machine")


def unavailable_run(quick: bool = False) -> list[bm.Result]:
    from interop.errors import BackendUnavailableError

    raise BackendUnavailableError("the Level Zero loader cannot be loaded: install it")


def never_run(quick: bool = False) -> list[bm.Result]:
    raise AssertionError("a benchmark with a missing requirement must not run")


def tuned_run(quick: bool = False, precision: str | None = None, reps: int | None = None,
              frames: int | None = None) -> list[bm.Result]:
    return [bm.Result("tuned", f"precision {precision} reps {reps} quick {quick}"
                      + (f" frames {frames}" if frames else ""), 1.0, "x")]


@pytest.fixture
def fakes(monkeypatch):
    mods = [fake("gone", never_run, requires=(("no_such_module_xyz", "the XYZ package"),)),
            fake("ok", ok_run), fake("skips", skip_run), fake("tuned", tuned_run), fake("unavailable", unavailable_run)]
    monkeypatch.setattr(bm, "modules", lambda: mods)
    return mods


def test_json_carries_every_skip_and_its_reason(fakes, capsys):
    assert main(["bench", "--json"]) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert len(lines) == 1
    data = json.loads(lines[0])
    skips = {(s["benchmark"], s["part"]): s["skipped"] for s in data["skipped"]}
    assert skips == {("gone", "all"): "needs the XYZ package (Python module 'no_such_module_xyz' is not installed)",
                     ("ok", "the GPU part"): "no GPU here",
                     ("skips", "all"): "no NVDEC on this machine",
                     ("unavailable", "all"): "the Level Zero loader cannot be loaded: install it"}
    assert [(r["benchmark"], r["case"], r["value"]) for r in data["results"]] == [
        ("ok", "one case", 1.5), ("tuned", "precision None reps None quick False", 1.0)]
    assert "skipped" not in data["results"][0]
    assert "no NVDEC on this machine" in err  # and on stderr, beside the results


def test_text_says_why_a_part_was_skipped(fakes, capsys):
    assert main(["bench", "--only", "ok,skips"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert any(line.startswith("ok") and "the GPU part" in line and line.endswith("skipped: no GPU here") for line in lines)
    assert any(line.startswith("skips") and line.endswith("skipped: no NVDEC on this machine") for line in lines)
    assert any(line.startswith("ok") and "one case" in line and "1.5" in line for line in lines)
    assert "gone" not in out  # --only honoured


def test_md_names_machine_date_command_and_skips(fakes, capsys):
    assert main(["bench", "--only", "ok,skips", "--md"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.startswith("Machine: ") and "UTC" in head and "`interop bench --only ok,skips`" in head
    assert "| one case | 1.5 | x | 1.4 1.5 1.6 |" in out
    assert "Part 'the GPU part' skipped: no GPU here" in out and "Skipped: no NVDEC on this machine" in out


def test_json_and_md_to_files(fakes, tmp_path, capsys):
    j, m = tmp_path / "b.json", tmp_path / "b.md"
    assert main(["bench", "--only", "ok", "--json", str(j), "--md", str(m)]) == 0
    out = capsys.readouterr().out
    assert "one case" in out  # the text table still goes to stdout
    assert json.loads(j.read_text())["results"][0]["case"] == "one case"
    assert "| one case |" in m.read_text()


def test_json_and_md_cannot_both_go_to_stdout(fakes, capsys):
    assert main(["bench", "--json", "--md"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "PATH" in err


def test_unknown_name_with_json_prints_one_json_error_line(fakes, capsys):
    assert main(["bench", "--only", "ok,nonsense", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["type"] == "UnknownBenchmarkError"
    assert len(err.strip().splitlines()) == 1 and "'nonsense'" in err and "known: gone, ok, skips" in err


def test_unknown_benchmark_error_is_a_value_error(fakes):
    from interop.errors import InteropError

    with pytest.raises(bm.UnknownBenchmarkError) as e:
        bm.select("ok,nope")
    assert isinstance(e.value, ValueError) and isinstance(e.value, InteropError)


def test_options_reach_the_benchmarks_that_take_them(fakes, capsys):
    assert main(["bench", "--only", "tuned,ok", "--quick", "--precision", "f32", "--reps", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in data["results"] if r["benchmark"] == "tuned"] == ["precision f32 reps 4 quick True"]
    assert data["command"] == "interop bench --only tuned,ok --quick --precision f32 --reps 4"


def test_frames_reach_the_benchmark_and_the_command(fakes, capsys):
    assert main(["bench", "--only", "tuned", "--frames", "900", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["case"] for r in data["results"]] == ["precision None reps None quick False frames 900"]
    assert data["command"] == "interop bench --only tuned --frames 900"
    assert main(["bench", "--only", "ok", "--frames", "900"]) == 2  # no selected benchmark takes it
    assert "--frames applies only to tuned" in capsys.readouterr().err


def test_the_pipeline_benchmark_takes_frames_and_makes_a_longer_clip_once(monkeypatch, tmp_path):
    from interop.benchmarks import pipeline as bp

    assert "frames" in bm.options_of(bp)
    made: list[tuple[str, int]] = []

    def make_clip(path: str, width: int, height: int, frames: int, fps: int, **kw: object) -> str:
        made.append((os.path.basename(path), frames))
        open(path, "wb").close()
        return path

    monkeypatch.setenv("INTEROP_BENCH_DIR", str(tmp_path))
    monkeypatch.setattr("interop.clip.make_clip", make_clip)
    longer = bp.clip_path(900)
    assert bp.clip_path(900) == longer and "_900f_" in longer  # made once, then taken from the cache
    assert bp.clip_path(120) == bp.clip_path() and f"_{bp.CLIP['frames']}f_" in bp.clip_path()  # fewer: the pinned
    assert [f for _, f in made] == [900, bp.CLIP["frames"]]


def test_an_option_no_selected_benchmark_takes_is_refused(fakes, capsys):
    assert main(["bench", "--only", "ok", "--precision", "f32"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--precision applies only to tuned" in err


def test_real_catalogue_has_summaries_and_requirements():
    for mod in bm.modules():
        assert isinstance(mod.SUMMARY, str) and "\n" not in mod.SUMMARY and mod.SUMMARY
        assert all(isinstance(m, str) and isinstance(p, str) for m, p in mod.REQUIRES)
        assert callable(mod.run)


@pytest.mark.parametrize(("quick", "frames", "asked"), [(False, None, 300), (True, None, 120), (True, 500, 500),
                                                              (False, 900, 900), (False, 100, 100)])
def test_the_pipeline_benchmark_runs_the_frames_asked_for(monkeypatch, quick, frames, asked):
    from interop.benchmarks import pipeline as bp

    got: list[int | None] = []

    class Stop(Exception):
        pass

    def no_inference(precision):
        raise Stop

    monkeypatch.setattr(bp, "clip_path", lambda n=None: got.append(n) or "clip.mp4")
    monkeypatch.setattr(bp, "_inference", no_inference)
    with pytest.raises(Stop):
        bp.run(quick=quick, frames=frames)
    assert got == [asked]  # the frames run() asks clip_path for (fewer than 300: the pinned clip, cut); --frames wins
    # over --quick's 120


def test_a_longer_clip_keeps_the_pinned_recipe(monkeypatch, tmp_path):
    from interop.benchmarks import pipeline as bp

    got: list[dict[str, object]] = []

    def make_clip(path: str, width: int, height: int, frames: int, fps: int, **kw: object) -> str:
        got.append({"size": (width, height), "fps": fps, **kw})
        open(path, "wb").close()
        return path

    monkeypatch.setenv("INTEROP_BENCH_DIR", str(tmp_path))
    monkeypatch.setattr("interop.clip.make_clip", make_clip)
    bp.clip_path()
    bp.clip_path(600)
    c = bp.CLIP
    assert got[0] == got[1] == {"size": (c["width"], c["height"]), "fps": c["fps"], "crf": c["crf"],
                                "preset": c["preset"], "seed": c["seed"]}
