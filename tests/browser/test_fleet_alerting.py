"""The metrics and alerting loop end to end, nothing faked: three agents on the simulator under load send their 1 Hz
samples to daphne, the periodic evaluator (`manage.py run_periodic`) runs the default rule pack (the P99 rule's `for`
set to 2 s), and Chromium watches the overview charts grow and the on-call page change without a reload.

Stopping a node fires "node lost"; raising one simulator's step latency fires the P99 warning, then the critical
level, and lowering it again resolves the incident."""

import json
import os
import subprocess
import sys
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from controlplane.alerts.models import AlertGroup, AlertRule
from controlplane.alerts.services.rules import alert_rule_version_create
from controlplane.audit.models import AuditEntry
from controlplane.dashboard.management.commands.seed_demo import FESTIVAL_LOG
from controlplane.datasets.models import WarmupDatasetVersion
from controlplane.datasets.services.warmup import pool_warmup_assign, warmup_dataset_create
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import AgentProcess, Traffic, wait_until
from tests.live_server import ROOT, free_port, subprocess_database_url

pytestmark = [pytest.mark.browser, pytest.mark.agents, pytest.mark.django_db(transaction=True)]

# Every reply is 10 tokens at full simulated speed (~0.1 s); a latency factor then sets P99 almost exactly.
STEADY = """
latency:
  time_scale: 1.0
reply_length:
  median: 10
  sigma: 0.01
  min: 10
  max: 10
"""
WARN_FACTOR = 18  # ~1.75-1.9 s end to end: above the 1.6 s warning line, below the 2.0 s critical one
CRITICAL_FACTOR = 30  # ~3 s
P99_FOR_S = 2


def off_thread(work):
    """ORM work in another thread: Playwright's event loop runs in this one."""
    result, errors = [], []

    def run():
        try:
            result.append(work())
        except Exception as exc:  # re-raised in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def set_faults(engine_port: int, **faults) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{engine_port}/sim/faults",
        data=json.dumps(faults).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=5).read()


def p99(agent: AgentProcess) -> float | None:
    """The node's own last 1 Hz sample, as its /healthz shows it (503 with the same body while it is not online)."""
    return (agent.health().get("sample") or {}).get("m", {}).get("latency_p99_s")


@pytest.fixture
def fleet(seeded, server_url, tmp_path):
    profile = tmp_path / "steady.yaml"
    profile.write_text(STEADY)

    def register():
        from controlplane.accounts.models import User

        sre = User.objects.get(username="sre")
        pool = Pool.objects.get(name="prod-main")
        # The time scales of this test, set as an SRE would: prod-main warms up on the festival's ten top questions
        # (the demo's hundred took three nodes at full simulated speed ~13 s), and the P99 rule's `for` is 2 s
        # instead of 10 (its thresholds, the evaluator and the incident's life are the default pack's).
        warmup = warmup_dataset_create(
            actor=sre,
            name="faq-top-10",
            content=FESTIVAL_LOG.read_bytes(),
            fmt="jsonl",
            source=WarmupDatasetVersion.Source.CONVERSATION_LOG,
            top_n=10,
        )
        pool_warmup_assign(actor=sre, pool=pool, version=warmup.versions.get(), reason="a short warmup")
        rule = AlertRule.objects.get(name="p99-latency")
        fields = {**rule.versions.get(number=rule.latest_number).fields(), "for_s": P99_FOR_S}
        alert_rule_version_create(actor=sre, rule=rule, base_number=rule.latest_number, comment="short", **fields)
        return [node_create(actor=sre, name=f"live-{i}", pool=pool)[1] for i in range(1, 4)]

    tokens = off_thread(register)
    agents = []
    for i, token in enumerate(tokens, start=1):
        engine_port = free_port()
        agent = AgentProcess(
            name=f"live-{i}",
            token=token,
            control_plane_url=server_url.replace("http://", "ws://") + "/ws/agent/",
            work=tmp_path,
            backend_args=[
                "--backend",
                "simulator",
                "--simulator-profile",
                str(profile),
                "--engine-port",
                str(engine_port),
            ],
        )
        agent.engine_port = engine_port
        agents.append(agent)
    evaluator = subprocess.Popen(
        [sys.executable, "manage.py", "run_periodic", "--only", "alerts-evaluate"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": subprocess_database_url()},
        stdout=open(tmp_path / "periodic.log", "a"),  # noqa: SIM115 - kept open for the process's life
        stderr=subprocess.STDOUT,
    )
    try:
        with ThreadPoolExecutor(len(agents)) as starting:  # side by side: each start waits for its gateway's port
            list(starting.map(AgentProcess.start, agents))
        connected = EngineNode.objects.filter(name__startswith="live-", is_connected=True)
        wait_until(lambda: off_thread(connected.count) == 3, 30, "three agents to connect")
        yield agents
    finally:
        evaluator.terminate()
        evaluator.wait(timeout=10)
        for agent in agents:
            agent.stop()


def test_live_charts_node_lost_and_p99_warning_critical_resolution(fleet, server_url, new_page, shot):
    agents = fleet
    # Nodes warm up before they take traffic: wait for all three to serve, so the charts show real load.
    wait_until(lambda: all(a.health().get("status") == "online" for a in agents), 60, "three warmed-up nodes")
    with Traffic(agents, per_agent_threads=1):
        page = new_page()
        open_signed_in(page, server_url, "oncall", "/")
        page.wait_for_function("document.getElementById('chart-qps') && document.getElementById('chart-qps').data")
        points = "document.getElementById('chart-qps').data[0].x.length"
        page.wait_for_function(f"{points} >= 2", timeout=15_000)
        before = page.evaluate(points)
        page.wait_for_timeout(3200)
        assert page.evaluate(points) >= before + 2, "the overview charts must gain a point about every second"
        shot(page, "70-overview-live-three-nodes")

        # Node lost: stop one agent; the on-call page shows it without a reload, within the rule's window.
        page.goto(f"{server_url}/oncall/")
        page.locator("#live-state.on").wait_for()
        agents[2].stop()
        card = page.locator('[data-testid="incident-node-lost"]')
        card.wait_for(timeout=30_000)
        assert "live-3" in card.locator('[data-field="affected"]').inner_text()

        card.locator("form.ack-form input[name=note]").fill("host live-3 is being replaced")
        card.locator("form.ack-form button").click()
        page.wait_for_url(f"{server_url}/oncall/")
        card = page.locator('[data-testid="incident-node-lost"]')
        silence = card.locator("form.silence-form")
        silence.locator("input[name=reason]").fill("hardware swap in progress")
        silence.locator("button").click()
        page.wait_for_url(f"{server_url}/oncall/")
        page.locator('[data-testid="incident-node-lost"] [data-field="silenced"]').wait_for()
        assert off_thread(lambda: AuditEntry.objects.filter(action="alert.acknowledge").count()) == 1
        assert off_thread(lambda: AuditEntry.objects.filter(action="silence.create").count()) == 1
        shot(page, "71-oncall-node-lost-acked-silenced")

        # P99: slow one simulator down to ~1.8 s (warning), then ~3 s (critical), then back (resolved). Its window
        # must first be free of the slow start-up requests (queued while the node warmed up).
        slow = agents[0]
        wait_until(lambda: (p99(slow) or 0) < 1.0, 30, "a normal P99 on the node to slow down")
        page.locator('[data-testid="incident-p99-latency"]').wait_for(state="detached", timeout=30_000)
        set_faults(slow.engine_port, latency_factor=WARN_FACTOR)
        page.wait_for_function(
            "(document.querySelector('[data-testid=incident-p99-latency] [data-field=severity]') || {}).innerText"
            " && document.querySelector('[data-testid=incident-p99-latency] [data-field=severity]')"
            ".innerText.toLowerCase() === 'warning'",
            timeout=60_000,
        )
        shot(page, "72-oncall-p99-warning")
        set_faults(slow.engine_port, latency_factor=CRITICAL_FACTOR)
        page.wait_for_function(
            "(document.querySelector('[data-testid=incident-p99-latency] [data-field=severity]') || {innerText: ''})"
            ".innerText.toLowerCase() === 'critical'",
            timeout=60_000,
        )
        shot(page, "73-oncall-p99-critical")
        set_faults(slow.engine_port, latency_factor=1.0)
        page.locator('[data-testid="incident-p99-latency"]').wait_for(state="detached", timeout=60_000)
        group = off_thread(lambda: AlertGroup.objects.filter(rule__name="p99-latency").latest("pk"))
        assert group.state == "resolved"
        shot(page, "74-oncall-p99-resolved")
