"""A node on the vLLM CPU build, in Chromium: its page says which figures it cannot measure and why, and the
on-call page lists it once under "No source" with the rules it leaves uncovered (not among the healthy)."""

import time

import pytest
from django.utils import timezone

from controlplane.accounts.models import User
from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import sample_parse
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from engine_node.telemetry import memory
from tests.alerts.test_no_source import agent_sample
from tests.browser.sessions import open_signed_in
from tests.browser.test_oncall import off_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_no_source_is_shown_once_per_node(seeded, server_url, new_page, shot):
    def register():
        m = agent_sample(fragmentation=(None, memory.CPU_BUILD), dcgm=False, nvml=False)  # runs its own event loop
        install_default_rules(AlertRule, AlertRuleVersion)
        node_create(actor=User.objects.get(username="sre"), name="cpu-b1", pool=Pool.objects.get(name="prod-main"))
        now = timezone.now()
        EngineNode.objects.filter(name="cpu-b1").update(is_connected=True, last_seen_at=now, connected_at=now)
        _, values = sample_parse({"type": "sample", "t": time.time(), "window_s": 10, "m": m}, now=time.time())
        MetricSample.objects.create(scope="node", name="cpu-b1", pool="prod-main", t=now, resolution_s=1, values=values)

    off_thread(register)
    page = new_page()
    open_signed_in(page, server_url, "oncall", "/oncall/")
    section = page.locator("[data-testid=no-source]")
    assert section.locator("[data-node=cpu-b1]").count() == 1
    text = section.locator("[data-node=cpu-b1]").inner_text()
    assert "memory-fragmentation" in text and memory.CPU_BUILD in text
    shot(page, "oncall-no-source")

    page.goto(f"{server_url}/nodes/cpu-b1/")
    cell = page.locator("[data-testid=absent-figures]").inner_text()
    assert "GPU memory fragmentation" in cell and memory.CPU_BUILD in cell and "SM activity (DCGM)" in cell
    shot(page, "node-not-measured")
