"""Run figures from request records: nearest-rank percentiles checked by hand, rates, throughput, intents."""

import pytest

from controlplane.replays.figures import (
    Ladder,
    latency_cdf,
    nearest_rank,
    percentile_of,
    pool_metrics_summary,
    run_figures,
)


def record(
    seq, e2e, *, ok=True, status=200, intent="order_status", sent=0.0, ttft=None, tokens=100, rounds=0, first=None
):
    return {
        "seq": seq,
        "intent": intent,
        "status_code": status,
        "ok": ok,
        "sent_at": sent,
        "e2e_s": e2e,
        "ttft_s": ttft if ttft is not None else (e2e / 10 if e2e is not None else None),
        "reply_tokens": tokens if ok else 0,
        "continuation_rounds": rounds,
        # Not continued: the first round is the whole answer.
        "first_round_s": first if first is not None else e2e,
        "scheduled_at": sent,
    }


def test_nearest_rank_by_hand():
    # ceil(P/100 * n): 10 values -> P50 rank 5, P95 rank 10, P90 rank 9; 1000 values -> P99.9 rank 999.
    assert [nearest_rank(10, p) for p in (50, 90, 95, 99, 99.9)] == [5, 9, 10, 10, 10]
    assert nearest_rank(1000, 99.9) == 999
    assert nearest_rank(1000, 99) == 990
    assert nearest_rank(3, 0.1) == 1
    assert percentile_of([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    assert percentile_of([1.0, 2.0, 3.0, 4.0], 51) == 3.0
    assert percentile_of([], 50) is None
    with pytest.raises(ValueError):
        nearest_rank(0, 50)


def test_latency_percentiles_name_the_request_that_holds_them():
    # seq 1..10 with e2e 0.1 .. 1.0 sent in reverse order: the percentile's seq is the request's own.
    records = [record(seq, round(1.1 - seq / 10, 1), sent=seq) for seq in range(1, 11)]
    e2e = run_figures(records)["latency"]["e2e_s"]
    assert (e2e["p50"], e2e["p50_seq"]) == (0.5, 6)
    assert (e2e["p95"], e2e["p95_seq"]) == (1.0, 1)
    assert (e2e["p99"], e2e["p999"]) == (1.0, 1.0)
    assert e2e["count"] == 10


def test_failed_requests_count_in_rates_not_in_latency():
    records = [record(i, 1.0 + i / 100, sent=i * 0.5) for i in range(1, 9)]
    records.append(record(9, 0.002, ok=False, status=429, sent=4.5))
    records.append(record(10, 0.003, ok=False, status=503, sent=5.0))
    figures = run_figures(records)
    assert figures["requests"] == 10 and figures["ok"] == 8
    assert figures["errors"] == {
        "error_rate": 0.2,
        "rate_429": 0.1,
        "rate_503": 0.1,
        "errors": 2,
        "count_429": 1,
        "count_503": 1,
    }
    # The fastest "reply" is a 429 at 2 ms; the P50 of successful ones is rank 4 of 8: 1.04.
    assert figures["latency"]["e2e_s"]["p50"] == 1.04
    # Window: first sent at 0.5, last answer at 4.0 + 1.08 = 5.08 -> 4.58 s; 8 completed, 800 tokens.
    assert figures["window_s"] == pytest.approx(4.58)
    assert figures["throughput"]["requests_per_s"] == pytest.approx(8 / 4.58, rel=1e-5)
    assert figures["throughput"]["output_tokens_per_s"] == pytest.approx(800 / 4.58, rel=1e-5)


def test_reply_lengths_rounds_and_intents():
    records = [
        record(1, 0.5, tokens=10, intent="coupon", rounds=0),
        record(2, 3.0, tokens=20, intent="coupon", rounds=1),
        record(3, 0.4, tokens=30, intent="coupon", rounds=2),
        record(4, 0.2, tokens=40, intent="order_status", rounds=0),
        record(5, 0.3, tokens=250, intent=None, rounds=0),
    ]
    figures = run_figures(records)
    assert figures["reply_tokens"] == {"count": 5, "mean": 70.0, "p50": 30.0, "p95": 250.0}
    assert figures["continuation_rounds"] == {"0": 3, "1": 1, "2": 1}
    intents = figures["intents"]
    # Slowest P99 first: coupon's P99 (rank 3 of 3) is request 2 at 3.0 s.
    assert list(intents) == ["coupon", "(none)", "order_status"]
    assert intents["coupon"]["count"] == 3
    assert (intents["coupon"]["p50"], intents["coupon"]["p99"], intents["coupon"]["p99_seq"]) == (0.5, 3.0, 2)
    assert intents["order_status"]["p999"] == 0.2


def test_empty_run_has_no_figures_but_does_not_fail():
    figures = run_figures([])
    assert figures["requests"] == 0
    assert figures["latency"]["e2e_s"]["p99"] is None
    assert figures["throughput"]["requests_per_s"] is None
    assert figures["errors"]["error_rate"] is None


def test_pool_metrics_summary_keeps_each_figures_mean_and_max():
    recorded = {
        "since": "2026-12-01T14:00:00+00:00",
        "until": "2026-12-01T14:05:00+00:00",
        "resolution_s": 1,
        "simulated_nodes": 3,
        "nodes": 3,
        "figures": {
            "kv_cache_usage": {"mean": 0.41, "max": 0.6, "samples": 300},
            "batch_efficiency": {"mean": 0.7, "max": 0.74, "samples": 300},
            "spec_acceptance_rate": {"mean": None, "max": None, "samples": 0},
        },
        "flag": True,
    }
    assert pool_metrics_summary(recorded) == {
        "since": "2026-12-01T14:00:00+00:00",
        "until": "2026-12-01T14:05:00+00:00",
        "resolution_s": 1.0,
        "simulated_nodes": 3.0,
        "nodes": 3.0,
        "kv_cache_usage": {"mean": 0.41, "max": 0.6},
        "batch_efficiency": {"mean": 0.7, "max": 0.74},
    }
    assert pool_metrics_summary(None) == {}


def test_latency_cdf_ends_at_one():
    records = [record(i, i / 1000) for i in range(1, 1001)]
    cdf = latency_cdf(records, points=100)
    assert cdf["y"][-1] == 1.0 and cdf["x"][-1] == 1.0
    assert len(cdf["x"]) <= 102
    assert cdf["x"] == sorted(cdf["x"])


def test_first_round_percentiles_are_what_the_user_waited_for_and_name_their_request():
    # Ten requests of 1.0 s end to end; the three continued ones showed their first round after 0.3-0.5 s.
    records = [record(seq, 1.0, sent=seq) for seq in range(7)]
    records += [record(7 + i, 1.0 + i, sent=7 + i, rounds=1, first=0.3 + i / 10) for i in range(3)]
    figures = run_figures(records)
    first, e2e = figures["latency"]["first_round_s"], figures["latency"]["e2e_s"]
    assert (e2e["p50"], e2e["p99"], e2e["p99_seq"]) == (1.0, 3.0, 9)
    # Nearest rank over 0.3, 0.4, 0.5 and seven 1.0: P50 is rank 5, P99 rank 10, both 1.0.
    assert (first["count"], first["p50"], first["p99"]) == (10, 1.0, 1.0)
    # Ties are ranked by seq: 0.3, 0.4, 0.5 (seq 7, 8, 9), then 1.0 for seq 0 .. 6; rank 5 is seq 1, rank 10 seq 6.
    assert (first["p50_seq"], first["p99_seq"], first["p95"]) == (1, 6, 1.0)
    # A run whose continued replies dominate the tail: the first round's P99 is far below the spliced answer's.
    slow = [record(seq, 2.5, sent=seq, rounds=1, first=0.8) for seq in range(20)]
    fast = [record(20 + seq, 0.5, sent=seq) for seq in range(80)]
    figures = run_figures(slow + fast)
    assert (figures["latency"]["e2e_s"]["p99"], figures["latency"]["first_round_s"]["p99"]) == (2.5, 0.8)


def test_a_ladder_sustains_its_highest_step_within_the_slo_and_no_step_after_a_missed_one():
    def step(index, first_round, *, count=100, failed=0):
        start = index * 10
        return [
            record(start * 100 + i, first_round + 1.0, sent=start + i / count, first=first_round, ok=i >= failed,
                   status=200 if i >= failed else 503)
            for i in range(count)
        ]  # fmt: skip

    ladder = Ladder(qps_steps=(10.0, 20.0, 30.0, 40.0), step_s=10.0)
    # First-round P99 1.2, 1.7 s (the spliced answer 2.7 s: the SLO judges the first round), then 1.9 s: 20 QPS.
    records = step(0, 1.2) + step(1, 1.7) + step(2, 1.9) + step(3, 1.0)
    block = run_figures(records, ladder=ladder)["ladder"]
    assert block["latency"] == "first_round_s" and (block["p99_max_s"], block["error_rate_max"]) == (1.8, 0.005)
    assert [s["qps"] for s in block["steps"]] == [10.0, 20.0, 30.0, 40.0]
    assert [s["requests"] for s in block["steps"]] == [100] * 4
    assert [s["p99_s"] for s in block["steps"]] == [1.2, 1.7, 1.9, 1.0]
    assert block["steps"][2]["violations"] == ["P99 1.900 s above 1.8 s"]
    assert block["sustained_qps"] == 20.0  # 40 QPS met the SLO, but after a missed step it does not count
    # Errors count every request of the step: one 503 in 100 is 1 %, above 0.5 %.
    records = step(0, 1.2) + step(1, 1.2, failed=1) + step(2, 1.2) + step(3, 1.2)
    block = run_figures(records, ladder=ladder)["ladder"]
    assert block["steps"][1]["violations"] == ["error rate 1.00% above 0.50%"] and block["sustained_qps"] == 10.0
    # Missing the first step sustains nothing; a run without a ladder has no ladder figures.
    assert run_figures(step(0, 2.0), ladder=ladder)["ladder"]["sustained_qps"] == 0.0
    assert "ladder" not in run_figures(step(0, 2.0))


def test_a_ladder_is_judged_against_its_own_line():
    records = [
        record(seq, 2.5, sent=seq / 10, first=first, ok=True, status=200)
        for seq, first in enumerate([1.5] * 100 + [2.1] * 100 + [2.6] * 100)
    ]
    steps = {"qps_steps": (10.0, 20.0, 30.0), "step_s": 10.0}
    # The report's 1.8 s: only the first step; a team whose SLO is 2.5 s sustains the second; 3 s every step.
    assert run_figures(records, ladder=Ladder(**steps))["ladder"]["sustained_qps"] == 10.0
    block = run_figures(records, ladder=Ladder(**steps, p99_max_s=2.5))["ladder"]
    assert block["p99_max_s"] == 2.5 and block["sustained_qps"] == 20.0
    assert block["steps"][2]["violations"] == ["P99 2.600 s above 2.5 s"]
    assert run_figures(records, ladder=Ladder(**steps, p99_max_s=3.0))["ladder"]["sustained_qps"] == 30.0
