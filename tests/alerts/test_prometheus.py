"""Prometheus: `promtool check metrics` on the control plane's and an engine node's /metrics, `check rules` on the
exported rule file, and who may read /metrics."""

import json
import re
import shutil
import subprocess
import urllib.request
from collections import Counter

import pytest
import yaml
from django.core.management import call_command
from django.db import OperationalError
from django.test import Client

from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.export import alert_name
from controlplane.alerts.models import AlertRule
from controlplane.lib import loop_health
from controlplane.metrics import coalescing
from tests.engine_node.test_gateway_policy import start_node

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# The one lint we accept, and only for vLLM's own naming (`vllm:`) and the simulator's copy of it (`sim:`).
COLON_LINT = re.compile(r"^(vllm|sim):[a-z0-9_]+ metric names should not contain ':'$")


def promtool(*args: str, text: bytes | None = None) -> subprocess.CompletedProcess:
    if not shutil.which(PROMTOOL):
        pytest.fail("promtool not found: install Debian's prometheus package (make system-packages)")
    return subprocess.run([PROMTOOL, *args], input=text, capture_output=True, timeout=60)


@pytest.fixture
def busy_fleet(fleet, clock):
    """Two nodes with samples, pool and fleet aggregates, and open alerts: every family has series."""
    fleet.add("gpu-1")
    fleet.add("gpu-2", pool=fleet.staging)
    values = {
        "qps": 12.5, "latency_p50_s": 0.4, "latency_p99_s": 1.9, "latency_p999_s": 3.1, "kv_cache_usage": 0.6,
        "batch_efficiency": 0.7, "batch_idle_ratio": 0.1, "fragmentation_ratio": 0.22, "engine_restarts": 2,
        "long_request_share": 0.06, "length_hist": {"le256": 30, "le512": 10, "le1k": 5, "le2k": 2, "gt2k": 1},
    }  # fmt: skip
    fleet.sample("gpu-1", clock.now, **values)
    fleet.sample("gpu-2", clock.now, **values)
    fleet.aggregate("pool", "prod-main", clock.now, **values)
    fleet.aggregate("fleet", "fleet", clock.now, **values)
    evaluate(now=clock.now)
    return fleet


@pytest.mark.subprocess
@pytest.mark.django_db
def test_control_plane_metrics_pass_promtool(busy_fleet, settings, clock, monkeypatch):
    settings.METRICS_API_KEY = "scrape-key-123"
    monkeypatch.setattr(loop_health, "_records", {})
    monkeypatch.setattr(loop_health, "_logs", {})
    loop_health.loop_register("scrape-test-loop", description="a background loop", period_s=1.0)
    loop_health.loop_failed("scrape-test-loop", OperationalError("database is locked"), context="a test")
    monkeypatch.setattr(coalescing, "counters", Counter())
    slow_tab = coalescing.LiveSampleCoalescer(window=1)
    for qps in (1.0, 2.0, 3.0, 4.0):  # one goes out; of the three that wait for a receipt, two are replaced
        slow_tab.offer({"type": "metrics.sample", "scope": "fleet", "name": "fleet", "t": qps, "values": {}})
        slow_tab.frames_ready()
    response = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-key-123")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    text = response.content
    checked = promtool("check", "metrics", text=text)
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
    body = text.decode()
    assert 'controlplane_node_latency_p99_seconds{node="gpu-1",pool="prod-main"} 1.9' in body
    assert 'controlplane_pool_requests_per_second{pool="prod-main"} 12.5' in body
    assert "controlplane_fleet_kv_cache_usage_ratio 0.6" in body
    assert 'controlplane_pool_requests_by_length{bucket="gt2k",pool="prod-main"} 1.0' in body
    assert 'controlplane_node_engine_restarts_total{node="gpu-1",pool="prod-main"} 2.0' in body
    assert 'controlplane_nodes{pool="prod-main",state="connected"} 1.0' in body
    assert 'controlplane_alerts{rule="p99-latency",severity="warning",state="pending"} 2.0' in body
    process = loop_health.process_name()
    assert f'controlplane_loop_up{{loop="scrape-test-loop",process="{process}"}} 0.0' in body
    assert f'controlplane_loop_consecutive_failures{{loop="scrape-test-loop",process="{process}"}} 1.0' in body
    assert f'controlplane_live_samples_sent_total{{process="{process}"}} 1.0' in body
    assert f'controlplane_live_samples_thinned_total{{process="{process}"}} 2.0' in body


@pytest.mark.django_db
def test_metrics_need_the_key_or_a_signed_in_user(users, settings):
    settings.METRICS_API_KEY = "scrape-key-123"
    assert Client().get("/metrics").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert Client().get("/metrics")["WWW-Authenticate"].startswith("Bearer")
    signed_in = Client()
    signed_in.force_login(users["agent"])
    assert signed_in.get("/metrics").status_code == 200
    settings.METRICS_API_KEY = ""  # no key configured: no key opens it
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


@pytest.mark.agents
def test_engine_node_gateway_metrics_pass_promtool_but_for_vllms_colons(tmp_path_factory):
    node = start_node(tmp_path_factory, "metrics-node")
    try:
        request = urllib.request.Request(
            f"{node.url}/v1/chat/completions",
            data=json.dumps(
                {"model": "simulated-chat-model", "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            headers=node.headers,
        )
        urllib.request.urlopen(request, timeout=30).read()
        text = urllib.request.urlopen(f"{node.url}/metrics", timeout=10).read()
    finally:
        node.stop()
    assert b"vllm:num_requests_running" in text and b"engine_node_gateway_requests_total" in text
    checked = promtool("check", "metrics", text=text)
    output = (checked.stdout + checked.stderr).decode().splitlines()
    other = [line for line in output if line.strip() and not COLON_LINT.match(line.strip())]
    assert other == [], other  # no parse error, no other lint: only the colon warnings
    assert checked.returncode in (0, 3)  # 3: lint warnings (the colons) and nothing worse


@pytest.mark.subprocess
@pytest.mark.django_db
def test_exported_rules_pass_promtool_and_say_what_the_rules_say(default_rules, tmp_path):
    rules, dashboard = tmp_path / "rules.yml", tmp_path / "dashboard.json"
    call_command("export_monitoring", "--rules", str(rules), "--grafana", str(dashboard))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, (checked.stdout + checked.stderr).decode()
    exported = {r["alert"]: r for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]}
    warn, critical = exported["P99LatencyWarning"], exported["P99LatencyCritical"]
    assert warn["expr"] == "controlplane_node_latency_p99_seconds > 1.6" and warn["for"] == "10s"
    assert (
        critical["expr"] == "controlplane_node_latency_p99_seconds > 2" and critical["labels"]["severity"] == "critical"
    )
    assert warn["annotations"]["runbook_url"].endswith("/runbooks/p99-latency/")
    assert exported["EngineRestartingWarning"]["expr"] == "increase(controlplane_node_engine_restarts_total[10m]) >= 3"
    assert "LongRequestsCritical" not in exported  # warning-only rule
    assert "for" not in exported["NodeLostCritical"]
    enabled = AlertRule.objects.count()
    # long-requests, rollout-nacked, metrics-stale, pool-degraded, warmup-failed, canary-rolled-back and
    # intent-unsure only warn
    assert len(exported) == enabled * 2 - 7
    assert exported["IntentDriftCritical"]["expr"] == "controlplane_pool_intent_drift_rise_ratio >= 0.2"
    assert alert_name("spec-decode-rejection", "warning") == "SpecDecodeRejectionWarning"

    board = json.loads(dashboard.read_text())
    assert board["uid"] == "controlplane-overview" and len(board["panels"]) == 8
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p["targets"])
    for series in ("controlplane_pool_latency_p99_seconds", "controlplane_pool_batch_efficiency_ratio"):
        assert series in exprs
