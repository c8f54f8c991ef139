"""Each rule at its line and either side of it, with thin data, and what it suggests changing."""

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.advice import rules
from controlplane.advice.figures import MIN_SAMPLES, WindowFigures
from controlplane.alerts.defaults import DEFAULT_RULES
from controlplane.params import schema

NOW = datetime(2026, 11, 11, 20, 0, tzinfo=UTC)
LINES = {r["name"]: (r["warn"], r["critical"]) for r in DEFAULT_RULES}
SEED = schema.effective({})


def params(**sections) -> dict:
    return schema.effective(sections)


def figures(samples: int = 600, **means) -> WindowFigures:
    return WindowFigures(
        pool="staging",
        since=NOW - timedelta(minutes=10),
        until=NOW,
        means=means,
        samples=dict.fromkeys(means, samples),
    )


def ids(found):
    return [s["id"] for s in found]


# --- batch idle (seed: 15 % warning, 25 % critical) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "expected"), [(0.1499, None), (0.15, None), (0.1501, "warning"), (0.25, "warning"), (0.2501, "critical")]
)
def test_batch_idle_fires_only_above_its_line(idle, expected):
    found = rules.batch_idle(figures(batch_idle_ratio=idle), SEED, LINES["batch-idle"])
    assert (found and found["severity"]) == expected


def test_batch_idle_thin_data_says_nothing():
    assert rules.batch_idle(figures(MIN_SAMPLES - 1, batch_idle_ratio=0.5), SEED, LINES["batch-idle"]) is None
    assert rules.batch_idle(figures(MIN_SAMPLES, batch_idle_ratio=0.5), SEED, LINES["batch-idle"]) is not None


def test_batch_idle_lowers_max_size_to_what_covers_90_percent_of_batches():
    f = figures(batch_idle_ratio=0.22)
    f.batch_size_hist = {2: 40, 3: 30, 4: 20, 5: 9, 8: 1}  # 90 % of batches held at most 4 requests
    found = rules.batch_idle(f, params(batch={"max_size": 16}), LINES["batch-idle"])
    assert found["changes"] == [{"path": "batch.max_size", "from": 16, "to": 4, "apply": "hot"}]
    assert "90 % of the batches" in found["text"]
    cited = {e["label"]: e["display"] for e in found["evidence"]}
    assert cited["batch idle ratio, window mean"] == "22.0%"
    assert cited["batch size covering 90 % of batches"] == "4"


def test_batch_idle_without_a_distribution_goes_a_quarter_lower_never_below_min_size():
    found = rules.batch_idle(figures(batch_idle_ratio=0.3), params(batch={"max_size": 16}), LINES["batch-idle"])
    assert found["changes"][0]["to"] == 12
    found = rules.batch_idle(
        figures(batch_idle_ratio=0.3), params(batch={"max_size": 3, "min_size": 3}), LINES["batch-idle"]
    )
    assert found["changes"] == [] and not found["is_actionable"]
    assert "already at batch.min_size" in found["text"]


def test_batch_idle_never_suggests_raising_max_size():
    f = figures(batch_idle_ratio=0.2)
    f.batch_size_hist = {8: 100}  # every batch full at the current max: still one lower, not the same or higher
    found = rules.batch_idle(f, params(batch={"max_size": 8}), LINES["batch-idle"])
    assert found["changes"][0]["to"] == 7


# --- long requests (seed: > 1k tokens above 5 %) --------------------------------------------------------------


@pytest.mark.parametrize(("share", "fires"), [(0.0499, False), (0.05, False), (0.0501, True)])
def test_long_requests_fire_only_above_five_percent(share, fires):
    found = rules.long_requests(figures(long_request_share=share), SEED, LINES["long-requests"])
    assert (found is not None) == fires


def test_long_requests_route_above_1k_to_the_long_queue_or_advise():
    found = rules.long_requests(figures(long_request_share=0.08), SEED, LINES["long-requests"])
    assert found["changes"] == [{"path": "batch.long_context_threshold", "from": 2048, "to": 1024, "apply": "hot"}]
    found = rules.long_requests(
        figures(long_request_share=0.08), params(batch={"long_context_threshold": 1024}), LINES["long-requests"]
    )
    assert found["changes"] == [] and "long_context_max_queue" in found["text"]


def test_long_requests_thin_data_says_nothing():
    assert rules.long_requests(figures(10, long_request_share=0.5), SEED, LINES["long-requests"]) is None


# --- speculative rejection (seed: 40 % warning, 60 % critical) ------------------------------------------------

SPEC = {"enabled": True, "num_speculative_tokens": 5}


@pytest.mark.parametrize(("rate", "fires"), [(0.3999, False), (0.40, False), (0.4001, True)])
def test_spec_rejection_fires_only_above_its_line(rate, fires):
    found = rules.speculative_rejection(
        figures(spec_rejection_rate=rate), params(speculative=SPEC), LINES["spec-decode-rejection"]
    )
    assert (found is not None) == fires


def test_spec_rejection_one_token_fewer_then_off():
    line = LINES["spec-decode-rejection"]
    found = rules.speculative_rejection(figures(spec_rejection_rate=0.5), params(speculative=SPEC), line)
    assert found["changes"] == [{"path": "speculative.num_speculative_tokens", "from": 5, "to": 4, "apply": "cold"}]
    at_fewest = params(speculative={"enabled": True, "num_speculative_tokens": 3})
    found = rules.speculative_rejection(figures(spec_rejection_rate=0.5), at_fewest, line)
    assert found["changes"] == [{"path": "speculative.enabled", "from": True, "to": False, "apply": "cold"}]
    found = rules.speculative_rejection(figures(spec_rejection_rate=0.6001), params(speculative=SPEC), line)
    assert found["severity"] == "critical" and found["changes"][0]["path"] == "speculative.enabled"


def test_spec_rejection_ignored_when_speculative_decoding_is_off():
    line = LINES["spec-decode-rejection"]
    assert rules.speculative_rejection(figures(spec_rejection_rate=0.9), SEED, line) is None


def test_spec_rejection_thin_data_says_nothing():
    line = LINES["spec-decode-rejection"]
    assert rules.speculative_rejection(figures(5, spec_rejection_rate=0.9), params(speculative=SPEC), line) is None


# --- P99 above the SLO at load above the degradation line ------------------------------------------------------


def loaded(p99: float, seconds: int = 120) -> WindowFigures:
    f = figures()
    f.loaded_seconds, f.loaded_p99_s, f.load_mean = seconds, p99, 0.85
    return f


@pytest.mark.parametrize(("p99", "fires"), [(1.5999, False), (1.6, False), (1.6001, True)])
def test_p99_under_load_fires_only_above_the_slo_line(p99, fires):
    found = rules.p99_under_load(loaded(p99), params(degradation={"max_tokens": 256}), LINES["p99-latency"])
    assert (found is not None) == fires


def test_p99_under_load_suggests_the_degradation_settings():
    found = rules.p99_under_load(
        loaded(2.1),
        params(degradation={"max_tokens": 256, "speculative_decoding": True}, speculative=SPEC),
        LINES["p99-latency"],
    )
    assert found["severity"] == "critical"
    assert {c["path"]: (c["from"], c["to"]) for c in found["changes"]} == {
        "degradation.load_threshold": (0.8, 0.7),
        "degradation.max_tokens": (256, 128),
        "degradation.speculative_decoding": (True, False),
    }


def test_p99_under_load_keeps_the_entry_line_above_the_exit_line():
    found = rules.p99_under_load(
        loaded(1.9), params(degradation={"load_threshold": 0.7, "exit_threshold": 0.62}), LINES["p99-latency"]
    )
    assert found["changes"] == [] and "capacity" in found["text"]


def test_p99_under_load_needs_enough_loaded_seconds():
    assert rules.p99_under_load(loaded(3.0, seconds=MIN_SAMPLES - 1), SEED, LINES["p99-latency"]) is None


def test_quiet_figures_give_no_suggestion():
    quiet = figures(batch_idle_ratio=0.05, long_request_share=0.01, spec_rejection_rate=0.1)
    assert rules.rule_suggestions(quiet, params(speculative=SPEC), LINES) == []
