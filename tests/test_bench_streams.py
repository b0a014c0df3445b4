"""The streams benchmark's arithmetic: figures are medians over the repetitions, and the ratio to the bound is the
median of each repetition's own ratio (against the plain network measured beside it), not median fps over a bound."""

from __future__ import annotations

from interop.benchmarks.streams import _median_of, _x_bound


def test_medians_and_per_repetition_ratios():
    got = {"plain": [200.0, 300.0, 250.0],
           "s": [{"fps": 190.0}, {"fps": 240.0}, {"fps": 240.0}]}
    assert _median_of(got, "s") == 240.0
    # 0.95, 0.8, 0.96 -> 0.95; median fps over median bound would give 240 / 250 = 0.96
    assert _x_bound(got, 10_000.0, "s") == 0.95
    # the decoders bound the ratio where they are slower than the network
    assert _x_bound(got, 240.0, "s") == 1.0
    got["plain"].append(260.0)
    got["s"].append({"fps": 130.0})
    assert _median_of(got, "s") == 215.0  # an even count: the mean of the middle two
    assert _x_bound(got, 10_000.0, "s") == (0.8 + 0.95) / 2


def test_steady_fps_counts_only_the_window_where_every_run_went():
    from interop.benchmarks.streams import _count_at, steady_fps

    # run A: 10 results/s from t=0 to t=10; run B starts late (t=4) and goes 20/s until t=8
    a = [(0.0, 0)] + [(t / 10, t) for t in range(1, 101)]
    b = [(3.9, 0)] + [(4 + k / 20, k) for k in range(1, 81)]
    assert _count_at(a, 5.05) == 50.5  # linear between two marks
    assert _count_at(a, -1.0) == 0 and _count_at(a, 99.0) == 100
    # window: from B's first result (4.05) to B's last (8.0): A makes 39.5 there, B 79
    assert abs(steady_fps([a, b]) - (39.5 + 79) / (8.0 - 4.05)) < 1e-9
    # the whole-span count would be 180 / 10 = 18 fps: the steady window shows both going at once (30 fps)
    assert abs(steady_fps([a, b]) - 30.0) < 1e-9
    # runs that never went at once, or a run without a result, give no steady figure
    c = [(20.0, 0), (21.0, 5)]
    assert steady_fps([a, c]) is None
    assert steady_fps([a, [(0.0, 0)]]) is None
    assert steady_fps([]) is None
