"""Comparing stored runs: what may be compared, the verdict against the SLO lines, noise, repeats, traceability."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import InvalidField
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.figure_selectors import figure_requests
from controlplane.replays.models import ReplayRun
from tests.replays.factories import finished_run

pytestmark = pytest.mark.django_db


def _row(result, key):
    return next(row for row in result["figures"] if row["key"] == key)


def test_tuned_version_beats_the_baseline_beyond_noise_and_meets_the_slo(agent, staging, versions):
    v1, v2 = versions
    # lognormal(sigma 0.4): P99 = median * e^(2.326*0.4) ~ 2.5 x median: v1 ~3 s (critical), v2 ~1.3 s (ok).
    slow = finished_run(actor=agent, pool=staging, version=v1, median_s=1.2, n=1500, seed=1, slow_intent="coupon")
    fast = finished_run(actor=agent, pool=staging, version=v2, median_s=0.5, n=1500, seed=2)
    comparison = replay_comparison_create(actor=agent, run_ids=[slow.pk, fast.pk], label="v2 vs v1")
    result = comparison.result
    p99 = _row(result, "latency.e2e_s.p99")
    [vs] = p99["comparisons"]
    assert p99["values"][0] > 2.0 > 1.6 > p99["values"][1]
    assert vs["beyond_noise"] is True and vs["direction"] == "better"
    assert vs["ci"][1] < 0 and vs["diff"] == pytest.approx(p99["values"][1] - p99["values"][0], abs=1e-6)
    slo = result["slo"]
    assert (slo["warn_s"], slo["critical_s"], slo["target_s"]) == (1.6, 2.0, 1.8)
    assert [r["level"] for r in slo["runs"]] == ["critical", "ok"]
    [sentence] = result["verdict"]
    first = next(row for row in result["figures"] if row["key"] == "latency.first_round_s.p99")
    fast_p99, slow_p99 = p99["values"][1], p99["values"][0]
    assert sentence == (
        f"Run {fast.pk} (chat v2) meets the P99 SLO, run {slow.pk} (chat v1) does not "
        f"(run {fast.pk} (chat v2): {fast_p99:.3f} s, at or below the 1.6 s warning line; "
        f"run {slow.pk} (chat v1): {slow_p99:.3f} s, above the 2 s critical line); "
        f"run {fast.pk} (chat v2) P99 {fast_p99 - slow_p99:+.3f} s vs run {slow.pk} (chat v1) (beyond noise); "
        f"first-round P99 {first['values'][1] - first['values'][0]:+.3f} s (beyond noise)."
    )
    # The version diff beside it, from params/diff.py.
    [diff] = result["version_diffs"]
    assert {"path": "temperature.strict", "old": 0.3, "new": 0.2, "apply": "hot"} in diff["changes"]
    # The slow intent of the baseline leads its per-intent table.
    assert next(iter(result["runs"][0]["figures"]["intents"])) == "coupon"
    assert [m.run_id for m in comparison.members.all()] == [slow.pk, fast.pk]
    entry = AuditEntry.objects.get(action="replay.compare")
    assert entry.actor_name == "agent" and entry.after["runs"] == [slow.pk, fast.pk]


def test_two_runs_of_the_same_version_are_within_noise(agent, staging, versions):
    v1, _ = versions
    a = finished_run(actor=agent, pool=staging, version=v1, median_s=1.0, n=1500, seed=5)
    b = finished_run(actor=agent, pool=staging, version=v1, median_s=1.0, n=1500, seed=6)
    result = replay_comparison_create(actor=agent, run_ids=[a.pk, b.pk]).result
    assert _row(result, "latency.e2e_s.p99")["comparisons"][0]["beyond_noise"] is False
    assert _row(result, "latency.e2e_s.p50")["comparisons"][0]["beyond_noise"] is False
    assert "(within noise)" in result["verdict"][0]


def test_same_seed_same_result_and_repeats_widen_the_noise(agent, staging, versions):
    v1, v2 = versions
    base = finished_run(actor=agent, pool=staging, version=v1, median_s=1.0, n=600, seed=1)
    other = finished_run(actor=agent, pool=staging, version=v2, median_s=0.9, n=600, seed=2)
    first = replay_comparison_create(actor=agent, run_ids=[base.pk, other.pk], resamples=300).result
    again = replay_comparison_create(actor=agent, run_ids=[base.pk, other.pk], resamples=300).result
    assert first["figures"] == again["figures"]
    # A repeat of v1 that came out much slower: the spread of v1's repeats now dwarfs the difference.
    repeat = finished_run(actor=agent, pool=staging, version=v1, median_s=2.0, n=600, seed=3)
    result = replay_comparison_create(actor=agent, run_ids=[base.pk, other.pk], resamples=300).result
    assert result["runs"][0]["repeat_run_ids"] == [repeat.pk]
    p50 = _row(result, "latency.e2e_s.p50")
    assert p50["spreads"][0] > abs(p50["comparisons"][0]["diff"])
    assert p50["comparisons"][0]["beyond_noise"] is False


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda a, b: [a.pk], "name between 2 and 6 runs"),
        (lambda a, b: [a.pk, a.pk], "more than once"),
        (lambda a, b: [a.pk, 999999], "no replay run 999999"),
        (lambda a, b: [a.pk, "2"], "must be a list of replay run ids"),
        (lambda a, b: [a.pk, 2**70], "must be a list of replay run ids"),
        (lambda a, b: [a.pk, -1], "must be a list of replay run ids"),
    ],
)
def test_bad_run_lists_are_refused_naming_runs(agent, staging, versions, make, message):
    a = finished_run(actor=agent, pool=staging, version=versions[0], n=20)
    b = finished_run(actor=agent, pool=staging, version=versions[1], n=20)
    with pytest.raises(InvalidField) as error:
        replay_comparison_create(actor=agent, run_ids=make(a, b))
    assert error.value.detail[0]["path"] == "runs" and message in error.value.message
    assert not ReplayComparison.objects.exists()


def test_unfinished_runs_and_different_logs_are_refused(agent, staging, versions):
    v1, v2 = versions
    done = finished_run(actor=agent, pool=staging, version=v1, n=20)
    running = finished_run(actor=agent, pool=staging, version=v2, n=20, status=ReplayRun.Status.RUNNING)
    with pytest.raises(InvalidField, match=f"runs: only finished runs can be compared: run {running.pk} is running"):
        replay_comparison_create(actor=agent, run_ids=[done.pk, running.pk])
    other_log = finished_run(actor=agent, pool=staging, version=v2, n=20, log_name="weekday")
    with pytest.raises(InvalidField, match="runs: the runs replayed different traffic"):
        replay_comparison_create(actor=agent, run_ids=[done.pk, other_log.pk])
    with pytest.raises(InvalidField, match="reason: required with force"):
        replay_comparison_create(actor=agent, run_ids=[done.pk, other_log.pk], force=True)
    forced = replay_comparison_create(actor=agent, run_ids=[done.pk, other_log.pk], force=True, reason="what-if")
    assert forced.forced_reason == "what-if"
    assert ReplayComparison.objects.count() == 1


def test_every_figure_lists_the_requests_behind_it(agent, staging, versions):
    run = finished_run(actor=agent, pool=staging, version=versions[0], n=1000, errors=0.02, slow_intent="coupon")
    result = replay_comparison_create(
        actor=agent, run_ids=[run.pk, finished_run(actor=agent, pool=staging, version=versions[1], n=50).pk]
    ).result
    figures = result["runs"][0]["figures"]
    e2e = figures["latency"]["e2e_s"]
    above, info = figure_requests(run=run, figure="latency.e2e_s.p99")
    # Nearest rank: the P99 of n ok requests is rank ceil(0.99 n); it and every slower one are listed.
    ok = figures["ok"]
    assert above.count() == ok - (ok * 99 + 99) // 100 + 1
    assert above.first().e2e_s == max(r.e2e_s for r in run.requests.filter(ok=True))
    assert e2e["p99_seq"] in set(above.values_list("seq", flat=True))
    assert info["value"] == pytest.approx(e2e["p99"], abs=1e-6)
    coupon, _ = figure_requests(run=run, figure="intents.coupon.count")
    assert coupon.count() == figures["intents"]["coupon"]["count"]
    coupon_tail, _ = figure_requests(run=run, figure="intents.coupon.p999")
    assert set(coupon_tail.values_list("intent", flat=True)) == {"coupon"}
    failed, _ = figure_requests(run=run, figure="errors.rate_503")
    assert failed.count() == figures["errors"]["count_503"] > 0
    with pytest.raises(InvalidField, match="figure: unknown figure"):
        figure_requests(run=run, figure="latency.e2e_s.p42")
    with pytest.raises(InvalidField, match="figure: no figure"):
        figure_requests(run=run, figure="intents.nope.p99")
