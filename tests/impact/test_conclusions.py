"""The statistics of impact records: the Mann-Whitney p, per-figure verdicts and the outcome's precedence."""

import math

import pytest

from controlplane.impact import conclusions
from controlplane.impact.conclusions import FIGURES, figure_verdict, mann_whitney_p, overall_outcome

P99 = next(f for f in FIGURES if f.key == "latency_p99_s")
KV = next(f for f in FIGURES if f.key == "kv_cache_usage")
ERRORS = next(f for f in FIGURES if f.key == "error_rate")


def test_mann_whitney_matches_the_textbook_values():
    # U = 0 for two fully separated samples of 5: z = -12.5 / sqrt(25 * 11 / 12) = -2.611, p = 0.00902 (scipy's
    # asymptotic mannwhitneyu without continuity correction gives the same).
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], dependence=1) == pytest.approx(0.00902, abs=1e-5)
    # Samples that share their requests count less: z / sqrt(4) = -1.306, p = 0.1917.
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10], dependence=4) == pytest.approx(0.1917, abs=1e-4)
    # Ties: ranks are averaged and the variance corrected; identical windows are no evidence at all.
    assert mann_whitney_p([1, 1, 2, 2], [1, 1, 2, 2], dependence=1) == pytest.approx(1.0)
    assert mann_whitney_p([3, 3, 3], [3, 3, 3]) == 1.0
    assert mann_whitney_p([], [1.0]) == 1.0


def test_a_steady_but_tiny_shift_is_no_change():
    before = [1.00 + i * 1e-4 for i in range(300)]
    after = [1.02 + i * 1e-4 for i in range(300)]  # clearly different, but 2 % is below P99's 5 %
    verdict = figure_verdict(P99, before, after)
    assert verdict["p_value"] < 1e-6 and verdict["verdict"] == "no_change"


def test_directions_and_figures_without_one():
    low, high = [0.2 + i * 1e-3 for i in range(200)], [0.6 + i * 1e-3 for i in range(200)]
    assert figure_verdict(P99, low, high)["verdict"] == "worsened"
    assert figure_verdict(P99, high, low)["verdict"] == "improved"
    assert figure_verdict(KV, low, high)["verdict"] == "changed"  # KV cache usage has no better direction
    assert figure_verdict(P99, [], high)["verdict"] == "unknown"
    zero, some = [0.0] * 200, [0.05 + i * 1e-4 for i in range(200)]
    errors = figure_verdict(ERRORS, zero, some)
    assert (
        errors["verdict"] == "worsened"
        and errors["relative_change"] is None
        and math.isclose(errors["change"], some[100] / 2 + some[99] / 2)
    )


@pytest.mark.parametrize(
    ("verdicts", "outcome"),
    [
        ({"latency_p99_s": "improved", "qps": "worsened"}, "mixed"),
        ({"latency_p99_s": "worsened", "error_rate": "improved"}, "worsened"),  # P99 leads
        ({"latency_p99_s": "no_change", "qps": "no_change", "fragmentation_ratio": "improved"}, "improved"),
        ({"latency_p99_s": "no_change", "batch_efficiency": "improved", "error_rate": "worsened"}, "mixed"),
        ({"latency_p99_s": "no_change", "kv_cache_usage": "changed"}, "no_change"),
    ],
)
def test_outcome_is_led_by_p99_and_throughput(verdicts, outcome):
    assert overall_outcome({k: {"verdict": v} for k, v in verdicts.items()}) == outcome


def test_load_check_reasons():
    steady = [10.0] * 60
    _, why = conclusions.load_check(
        qps_before=steady,
        qps_after=[11.4] * 60,
        nodes_before=[3] * 60,
        nodes_after=[3] * 60,
        tolerance=0.15,
        min_samples=60,
    )
    assert why == ""
    _, why = conclusions.load_check(
        qps_before=steady,
        qps_after=[11.6] * 60,
        nodes_before=[3] * 60,
        nodes_after=[3] * 60,
        tolerance=0.15,
        min_samples=60,
    )
    assert why.startswith("load shifted: 10.00 QPS before, 11.60 after (ratio 1.16")
    _, why = conclusions.load_check(
        qps_before=[0.0] * 60,
        qps_after=steady,
        nodes_before=[3] * 60,
        nodes_after=[3] * 60,
        tolerance=0.15,
        min_samples=60,
    )
    assert why == "no traffic before the change: nothing to compare against"
