"""Analysing a log against a pool: figures per intent, exact percentiles, estimates, suggestions and applying them."""

import io
import json

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.convlogs.histogram import TokenHistogram
from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.convlogs.services.analyses import log_analysis_apply, log_analysis_create, log_analysis_run
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.convlogs.suggestions import sensible_cap, sensible_threshold
from controlplane.convlogs.synthetic import write_log
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion, Whitelist

REPORT = {"order_status": (78, 120), "return_refund": (145, 210), "product_recommendation": (210, 350)}


def store(actor, path, name="log"):
    data = path.read_bytes()
    chunks = (data[i : i + 65536] for i in range(0, len(data), 65536))
    return conversation_log_create(actor=actor, name=name, filename=path.name, chunks=chunks)


def analyse(actor, log, pool, **kwargs) -> LogAnalysis:
    analysis = log_analysis_create(actor=actor, log=log, pool=pool, **kwargs)
    log_analysis_run(analysis_id=analysis.pk)
    analysis.refresh_from_db()
    return analysis


def test_percentiles_are_exact_nearest_rank():
    histogram = TokenHistogram(bound=100)
    for value in range(1, 101):
        histogram.add(value)
    assert (histogram.percentile(50), histogram.percentile(95), histogram.percentile(99)) == (50, 95, 99)
    assert histogram.mean == 50.5
    histogram.add(5000)
    assert histogram.overflow == 1 and histogram.percentile(100) == 101 and histogram.largest == 5000
    assert histogram.share_above(100) == pytest.approx(1 / 101)


def test_sensible_values():
    assert [sensible_cap(v) for v in (1, 243, 256, 257, 600)] == [32, 256, 256, 288, 640]
    assert [sensible_threshold(v) for v in (10, 600, 2048, 2049)] == [512, 1024, 2048, 4096]


def test_synthetic_log_reproduces_the_report_and_suggests_the_cap(users, staging, tmp_path):
    log = store(users["agent"], write_log(tmp_path / "log.jsonl", 20000, seed=3))
    analysis = analyse(users["agent"], log, staging)
    assert analysis.status == "succeeded", analysis.error
    result = analysis.result
    assert result["conversations"] == 20000 and analysis.token_source == "log"
    by_intent = {row["intent"]: row for row in result["intents"]}
    for intent, (mean, p95) in REPORT.items():
        assert abs(by_intent[intent]["replies"]["mean"] - mean) <= 5, intent
        assert abs(by_intent[intent]["replies"]["p95"] - p95) <= 10, intent
    assert by_intent["legal_policy"]["whitelist"] == "legal"
    assert 0.88 <= 1 - result["replies"]["all"]["above"]["256"] <= 0.94
    assert result["replies"]["all"]["above"]["512"] < 0.012
    suggestions = {item["kind"]: item for item in analysis.suggestions}
    cap = suggestions["first_turn_cap"]
    assert cap["changes"][0]["to"] == 256 and not cap["applicable"]
    assert cap["evidence"]["covered"] >= 0.9
    whitelisted = [item["intent"] for item in suggestions["whitelist"]["evidence"]["intents"]]
    assert whitelisted == ["copywriting", "product_recommendation"]
    assert suggestions["strict_patterns"]["evidence"]["with_hit"] > 0
    log.refresh_from_db()
    assert log.conversation_count == 20000 and log.bad_line_count == 0


def test_estimates_are_labelled_and_bad_lines_reported(users, staging, tmp_path):
    lines = [
        json.dumps(
            {"messages": [{"role": "user", "content": "我的订单到哪了"}, {"role": "assistant", "content": "好" * 40}]}
        )
        for _ in range(100)
    ]
    lines[10] = "{broken"
    lines[20] = json.dumps({"messages": [{"role": "assistant", "content": "x", "usage": {"completion_tokens": "9"}}]})
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    analysis = analyse(users["agent"], store(users["agent"], path), staging)
    assert analysis.status == "succeeded"
    assert analysis.token_source == "estimated"
    assert analysis.result["tokens"]["replies_estimated"] == 98
    assert analysis.result["replies"]["all"]["p50"] == 40
    bad = analysis.result["bad_lines"]
    assert bad["count"] == 2
    assert [(item["line"], item["field"]) for item in bad["first"]] == [
        (11, "json"),
        (21, "messages[0].usage.completion_tokens"),
    ]


def test_a_gzip_bomb_fails_the_analysis_not_the_process(users, staging, tmp_path, settings):
    path = write_log(tmp_path / "log.gz", 2000, seed=1, compress=True)
    log = store(users["agent"], path)
    settings.CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES = 10_000
    analysis = analyse(users["agent"], log, staging)
    assert analysis.status == "failed" and "decompressed" in analysis.error


def test_applying_suggestions_saves_an_unpublished_version(users, staging, tmp_path):
    agent = users["agent"]
    log = store(agent, write_log(tmp_path / "log.jsonl", 3000, seed=5))
    analysis = analyse(agent, log, staging, coverage=95)
    suggestions = {item["kind"]: item for item in analysis.suggestions}
    assert suggestions["first_turn_cap"]["applicable"]
    new_cap = suggestions["first_turn_cap"]["changes"][0]["to"]
    version = log_analysis_apply(actor=agent, analysis=analysis, comment="from the June logs")
    assert version.number == 2 and version.author == agent
    assert version.effective_params["max_tokens"]["default"] == new_cap
    whitelist = f"log-analysis-{analysis.pk}"
    assert version.effective_params["max_tokens"]["whitelist"] == ["legal", whitelist]
    assert Whitelist.objects.get(name=whitelist).versions.get().scenarios == ["copywriting", "product_recommendation"]
    assert f"analysis {analysis.pk}" in version.comment and "from the June logs" in version.comment
    assert Pool.objects.get(pk=staging.pk).desired_version.number == 1
    entry = AuditEntry.objects.get(action="template.version_create", target_id=str(version.pk))
    assert f"analysis {analysis.pk}" in entry.reason and entry.actor == agent
    assert AuditEntry.objects.filter(action="whitelist.create", target_repr=whitelist).exists()
    with pytest.raises(Conflict):
        log_analysis_apply(actor=agent, analysis=analysis, kinds=["first_turn_cap"], base_number=1)
    with pytest.raises(InvalidField, match="unknown kind"):
        log_analysis_apply(actor=agent, analysis=analysis, kinds=["temperature"])
    assert TemplateVersion.objects.count() == 2


def test_a_pool_without_a_version_and_a_bad_coverage_are_refused(users, staging, tmp_path):
    from controlplane.nodes.services.pools import pool_create

    log = store(users["agent"], write_log(tmp_path / "log.jsonl", 10))
    empty = pool_create(actor=users["sre"], name="empty", is_production=False)
    with pytest.raises(InvalidField, match="pool: pool 'empty' has no published version"):
        log_analysis_create(actor=users["agent"], log=log, pool=empty)
    with pytest.raises(InvalidField, match="coverage"):
        log_analysis_create(actor=users["agent"], log=log, pool=staging, coverage=100)
    assert not LogAnalysis.objects.exists()


def test_logs_are_immutable(users, tmp_path):
    log = store(users["agent"], write_log(tmp_path / "log.jsonl", 10))
    log.description = "changed"
    with pytest.raises(Conflict):
        log.save()
    assert ConversationLog.objects.get().description == ""
    assert log.path.read_bytes() == (tmp_path / "log.jsonl").read_bytes()
    assert io.BytesIO(log.path.read_bytes()).read(1) == b"{"


def test_a_cap_below_the_templates_floors_is_raised_to_them(users, staging, tmp_path):
    line = json.dumps(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "tokens": 5}]}
    )
    path = tmp_path / "short.jsonl"
    path.write_text((line + "\n") * 50, encoding="utf-8")
    analysis = analyse(users["agent"], store(users["agent"], path), staging)
    cap = next(item for item in analysis.suggestions if item["kind"] == "first_turn_cap")
    assert cap["evidence"]["percentile_tokens"] == 5
    assert cap["changes"][0]["to"] == 200 and cap["evidence"]["raised_to"] == "max_tokens.streaming_threshold"
    version = log_analysis_apply(actor=users["agent"], analysis=analysis, kinds=["first_turn_cap"])
    assert version.effective_params["max_tokens"]["default"] == 200
