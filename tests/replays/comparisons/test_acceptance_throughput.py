"""Acceptance, throughput: defaults vs the field report's template at a saturating QPS on three simulator agents.

The report's throughput (50 QPS at P99 4.1 s, 68 QPS at 2.8 s after the cap, +36 %) is what the deployment
completes under more load than it serves well: both P99s are past its 1.8 s line, so it is a rate at saturation, not
a capacity within the SLO. A QPS ladder judged on the SLO cannot measure it here: the demo engines would serve ~50
QPS each, and on two CPU cores a 20-80 QPS ladder kept them at 2-11 of their 64 sequences, nothing waiting, KV
cache under 4 %, while the CPUs ran at 92-100 % and the load generator sent up to 2.5 s late; its sustained QPS was
the machine's limit, not the engines' (docs/comparisons.md).

So this test slows the simulated GPU instead (tests/replays/comparisons/saturation_profile.yaml: the demo profile,
every simulated duration x 12) and gives both versions engine.max_num_seqs 16: three engines then complete about 7
requests a second, and 10 QPS offered for 26 s keeps requests waiting for a seat. The figure is the completed
requests (and their output tokens) per second whose answer arrived from 8 s (seats filled) to the end of sending
(backlog still queued), computed from the run's request rows and listed by seq. Each version is replayed twice,
alternating, and the difference counts as beyond noise by a two-sample t-test at 95 % over the repeats.

Everything here is simulated (engine_node.simulator), not a vLLM measurement.
"""

import math
import statistics

import pytest
from django.db.models import Count

from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.figure_selectors import figure_requests
from tests.engine_node.fleet import engine_cmdline, flag_value
from tests.live_server import ROOT
from tests.replays.comparisons.test_acceptance import (
    CONVERSATIONS,
    festival_log,
    publish_and_wait,
    replay,
    simulated_fleet,
    two_versions,
)
from tests.replays.logs import store_log

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

SATURATION_PROFILE = ROOT / "tests/replays/comparisons/saturation_profile.yaml"
SEATS = 16
QPS = 10
SEND_S = 26  # about 260 requests a run
WINDOW = (8.0, float(SEND_S))
T_95_DF2 = 4.303  # Student's t, two-sided 95 %, 2 degrees of freedom


@pytest.fixture
def saturation_fleet(tmp_path, sre, settings):
    with simulated_fleet(tmp_path, sre, settings, SATURATION_PROFILE) as fleet:
        yield fleet


def saturated_throughput(run) -> dict:
    """Completed requests and output tokens per second over WINDOW (answers received in it), with their seqs."""
    start, end = WINDOW
    rows = [
        r
        for r in run.requests.filter(ok=True).values("seq", "sent_at", "e2e_s", "ttft_s", "reply_tokens")
        if start <= r["sent_at"] + r["e2e_s"] < end
    ]
    span = end - start
    return {
        "seqs": sorted(r["seq"] for r in rows),
        "requests_per_s": len(rows) / span,
        "output_tokens_per_s": sum(r["reply_tokens"] or 0 for r in rows) / span,
        "ttft_p50_s": statistics.median(r["ttft_s"] for r in rows) if rows else None,
    }


def noise_verdict(baseline: list[float], compared: list[float]) -> tuple[float, float, bool]:
    """Difference of the means, its t statistic and whether it is beyond noise: a two-sample t-test with pooled
    variance at 95 % (two repeats each: 2 degrees of freedom, |t| > 4.303)."""
    diff = statistics.mean(compared) - statistics.mean(baseline)
    pooled = (statistics.variance(baseline) + statistics.variance(compared)) / 2
    se = math.sqrt(pooled * (1 / len(baseline) + 1 / len(compared)))
    t = diff / se if se else math.copysign(math.inf, diff) if diff else 0.0
    return diff, t, abs(t) > T_95_DF2


def test_throughput_at_saturation(saturation_fleet, sre, agent):
    pool, agents = saturation_fleet
    defaults, seed = two_versions(sre, engine={"max_num_seqs": SEATS})
    log = store_log(agent, festival_log(CONVERSATIONS))

    runs = {"defaults": [], "template": []}
    for name, version in (("defaults", defaults), ("template", seed)) * 2:
        publish_and_wait(sre, pool, version)
        assert {flag_value(engine_cmdline(a.health()["engine_pid"]), "--max-num-seqs") for a in agents} == {str(SEATS)}
        run = replay(agent, pool, log, f"{name} at saturation", qps=QPS, duration_cap_s=SEND_S)
        runs[name].append(run)

    print("\nSIMULATED (vLLM-protocol simulator, demo profile x 12 slower, 16 seats; not vLLM measurements)")
    figures = {}
    for name, name_runs in runs.items():
        for run in name_runs:
            value = figures[run.pk] = saturated_throughput(run)
            # Traceable: the requests counted are the run's own completed requests, listed by seq.
            completed, _ = figure_requests(run=run, figure="throughput.requests_per_s")
            assert set(value["seqs"]) <= set(completed.values_list("seq", flat=True)) and value["seqs"], run.pk
            assert run.requests.count() == run.planned > QPS * SEND_S * 0.8, (run.pk, run.planned)
            rounds = dict(run.requests.filter(ok=True).values_list("continuation_rounds").annotate(n=Count("pk")))
            failed = dict(run.requests.filter(ok=False).values_list("status_code").annotate(n=Count("pk")))
            example = run.requests.filter(ok=False).values_list("error", flat=True).first()
            print(
                f"  run {run.pk} {name:<8} {len(value['seqs'])} answers in {WINDOW[0]:g}-{WINDOW[1]:g} s: "
                f"{value['requests_per_s']:.2f} requests/s, {value['output_tokens_per_s']:.0f} output tokens/s, "
                f"TTFT P50 {value['ttft_p50_s']:.2f} s; {run.requests.filter(ok=False).count()} failed of "
                f"{run.requests.count()} (by status {failed}, e.g. {example!r}); continuation rounds {rounds}"
            )

    for key in ("requests_per_s", "output_tokens_per_s"):
        base = [figures[r.pk][key] for r in runs["defaults"]]
        compared = [figures[r.pk][key] for r in runs["template"]]
        diff, t, beyond = noise_verdict(base, compared)
        print(
            f"  {key:<20} defaults {base[0]:.2f} / {base[1]:.2f}  template {compared[0]:.2f} / {compared[1]:.2f}  "
            f"diff {diff:+.2f} ({diff / statistics.mean(base):+.1%}, t {t:+.2f}) {'beyond' if beyond else 'within'} "
            "noise"
        )
    # The stored comparison of the second pair (the first pair are its repeat runs), over each run's whole window.
    comparison = replay_comparison_create(
        actor=agent, run_ids=[runs["defaults"][1].pk, runs["template"][1].pk], label="saturation"
    )
    rows = {row["key"]: row for row in comparison.result["figures"]}
    for key in ("throughput.requests_per_s", "throughput.output_tokens_per_s", "latency.first_round_s.p99"):
        cmp = rows[key]["comparisons"][0]
        print(
            f"  stored {key:<32} {rows[key]['values']} diff {cmp['diff']} spread {cmp['spread']} "
            f"{'beyond' if cmp['beyond_noise'] else 'within'} noise"
        )
    assert comparison.result["is_simulated"] is True
    assert all(run["repeat_run_ids"] for run in comparison.result["runs"]), comparison.result["runs"]

    # No direction is asserted: two repeats of each version cannot carry one. Over fourteen replays of each on this
    # machine the template completed 8 % fewer answers (and 9 % fewer tokens) per second, yet one run put it 15.6 %
    # higher, "beyond noise" by a t-test whose variance rests on two readings a side (docs/comparisons.md). What is
    # asserted is the mechanism behind the figures: the defaults continue nothing; the template continues the replies
    # its cap cut, so it sends more engine requests for the same answers.
    for name, name_runs in runs.items():
        for run in name_runs:
            continued = run.requests.filter(ok=True, continuation_rounds__gt=0).count()
            assert (continued > 0) == (name == "template"), (run.pk, name, continued)
