"""The bootstrap: deterministic for a seed, right about what is noise and what is not, and its exact shortcuts
agree with literal resampling."""

import random
import statistics

import pytest

from controlplane.replays.figures import Ladder, nearest_rank, run_figures
from controlplane.replays.noise import (
    Figure,
    base_figures,
    binomial,
    compare_figure,
    difference_interval,
    ladder_figures,
    quantile_sampler,
    repeat_spread,
    samplers,
)
from tests.replays.comparisons.test_figures import record

P99 = Figure("latency.e2e_s.p99", "P99", "s", "lower")


def lognormal_run(seed: int, n: int, *, median: float, errors: float = 0.0):
    rng = random.Random(seed)
    rows = []
    for seq in range(n):
        failed = rng.random() < errors
        rows.append(record(seq, rng.lognormvariate(0, 0.5) * median, ok=not failed, status=503 if failed else 200))
    return rows


def interval(base_rows, other_rows, figure=P99, seed="s"):
    a = samplers(base_rows, [figure])[figure.key]
    b = samplers(other_rows, [figure])[figure.key]
    return difference_interval(a, b, seed=seed)


def test_same_seed_same_interval_other_seed_other_interval():
    a, b = lognormal_run(1, 3000, median=1.0), lognormal_run(2, 3000, median=1.0)
    assert interval(a, b, seed="x") == interval(a, b, seed="x")
    assert interval(a, b, seed="x") != interval(a, b, seed="y")


def test_two_runs_of_one_distribution_are_within_noise_and_a_shift_is_beyond():
    a, b = lognormal_run(1, 5000, median=1.0), lognormal_run(2, 5000, median=1.0)
    low, high = interval(a, b)
    assert low < 0 < high
    faster = lognormal_run(3, 5000, median=0.6)
    low, high = interval(a, faster)
    assert high < 0
    verdict = compare_figure(P99, 3.2, 1.9, (low, high))
    assert verdict["beyond_noise"] is True and verdict["direction"] == "better"
    assert verdict["diff"] == pytest.approx(-1.3) and verdict["relative"] == pytest.approx(-1.3 / 3.2)


def test_repeat_spread_wider_than_the_difference_is_noise():
    verdict = compare_figure(P99, 2.0, 1.9, (-0.15, -0.05), spreads=[0.3, None])
    assert verdict["spread"] == 0.3 and verdict["beyond_noise"] is False
    assert repeat_spread([1.0, 1.4, None, 1.2]) == pytest.approx(0.4)
    assert repeat_spread([1.0]) is None


def test_order_statistic_draws_match_literal_resampling():
    """The Beta shortcut gives the same distribution of a resample's P90 as drawing n requests does."""
    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(400)]
    ordered = sorted(values)
    k = nearest_rank(len(values), 90)
    literal = [sorted(rng.choices(values, k=len(values)))[k - 1] for _ in range(3000)]
    draw = quantile_sampler(values, 90)
    shortcut = [draw(rng) for _ in range(3000)]
    assert statistics.mean(shortcut) == pytest.approx(statistics.mean(literal), rel=0.02)
    assert statistics.stdev(shortcut) == pytest.approx(statistics.stdev(literal), rel=0.1)
    assert set(shortcut) <= set(ordered)


def test_binomial_draws_have_the_right_mean_and_variance():
    rng = random.Random(3)
    for n, p in ((1000, 0.004), (1000, 0.996), (100000, 0.3)):
        draws = [binomial(rng, n, p) for _ in range(4000)]
        assert statistics.mean(draws) == pytest.approx(n * p, rel=0.03)
        assert statistics.variance(draws) == pytest.approx(n * p * (1 - p), rel=0.1)
    assert binomial(rng, 10, 0.0) == 0 and binomial(rng, 10, 1.0) == 10


def test_every_base_figure_gets_a_sampler_and_rates_see_a_real_difference():
    a = lognormal_run(1, 4000, median=1.0, errors=0.01)
    b = lognormal_run(2, 4000, median=1.0, errors=0.05)
    figures = base_figures()
    for rows in (a, b):
        for i, row in enumerate(rows):
            row["sent_at"] = i * 0.02
    sa, sb = samplers(a, figures), samplers(b, figures)
    assert set(sa) == {f.key for f in figures}
    rate = next(f for f in figures if f.key == "errors.rate_503")
    low, _ = difference_interval(sa[rate.key], sb[rate.key], seed="r")
    assert low > 0  # four points more 503s is well beyond noise at 4,000 requests
    # A sampler on a run without values gives no interval rather than a made-up one.
    assert difference_interval(samplers([], figures)[P99.key], sa[P99.key], seed="e") is None


def ladder_run(seed: int, p99_by_step, *, per_step: int = 400):
    """A ladder run whose step k's first rounds are log-normal with their P99 near p99_by_step[k]."""
    rng = random.Random(seed)
    rows = []
    for index, target in enumerate(p99_by_step):
        for i in range(per_step):
            first = rng.lognormvariate(0, 0.3) * target / 2.0  # exp(0.3 * 2.33) ~ 2: the P99 near the target
            rows.append(record(len(rows), first + 1.0, sent=index * 10 + i * 10 / per_step, rounds=1, first=first))
    return rows


def test_sustained_qps_is_resampled_step_by_step_and_a_clear_gap_is_beyond_noise():
    ladder = Ladder(qps_steps=(10.0, 20.0, 30.0), step_s=10.0)
    figure = ladder_figures()[0]
    lower = ladder_run(1, (1.0, 2.6, 2.6))  # misses the 1.8 s line from 20 QPS
    higher = ladder_run(2, (1.0, 1.1, 1.2))  # meets it on every step
    assert run_figures(lower, ladder=ladder)["ladder"]["sustained_qps"] == 10.0
    assert run_figures(higher, ladder=ladder)["ladder"]["sustained_qps"] == 30.0
    a = samplers(lower, [figure], ladder=ladder)[figure.key]
    b = samplers(higher, [figure], ladder=ladder)[figure.key]
    assert difference_interval(a, b, seed="l") == (20.0, 20.0)
    # A step whose P99 sits on the line is a coin toss in the resamples: the difference is within noise.
    edge = ladder_run(3, (1.0, 1.8, 1.2))
    low, high = difference_interval(samplers(edge, [figure], ladder=ladder)[figure.key], b, seed="e")
    assert low <= 0 < high
    # A run without a ladder has no value to resample.
    assert samplers(lower, [figure])[figure.key](random.Random(0)) is None
