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
