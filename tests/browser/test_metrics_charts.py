"""Live metric charts in Chromium: points arrive every second without a reload, and a stalled stream shows."""

import threading
import time

import pytest
from django.db import connection

from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from tests.browser.sessions import open_signed_in
from tests.engine_node.fleet import wait_until
from tests.live_server import Daphne
from tests.metrics.fake_agents import FakeAgents

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def register_nodes() -> dict[str, str]:
    """Three nodes: two in prod-main (one of them simulated), one in staging; their tokens. Off this thread, as
    registering publishes events and Playwright runs an event loop here."""
    tokens: dict[str, str] = {}

    def run():
        try:
            from controlplane.accounts.models import User

            sre = User.objects.get(username="sre")
            for name, pool in (("gpu-a", "prod-main"), ("sim-b", "prod-main"), ("gpu-c", "staging")):
                _, tokens[name] = node_create(actor=sre, name=name, pool=Pool.objects.get(name=pool))
            EngineNode.objects.filter(name="sim-b").update(backend="simulator")
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return tokens


def appended(page) -> int:
    return int(page.get_attribute("#metrics", "data-appended"))


def trace_points(page, chart: str, trace: int = 0) -> int:
    return page.evaluate(f"document.getElementById('chart-{chart}').data[{trace}].x.length")


def wait_for_range(page, range_s: int, *, resolution: int) -> None:
    page.wait_for_function(
        f"(d => d.loadedRange === '{range_s}' && d.resolution === '{resolution}')"
        "(document.getElementById('metrics').dataset)"
    )


def test_overview_charts_extend_every_second_and_show_a_stalled_stream(seeded, server_url, new_page, shot):
    tokens = register_nodes()

    def figures(node: str, i: int) -> dict:
        gpu = {"gpu_util": 0.6 + (i % 3) / 10, "gpu_memory_used": 0.9, "absent": {"sm_util": "no DCGM exporter"}}
        return {"qps": 1.0 + (i % 5) / 10, "latency_p99_s": 0.9 + (i % 7) / 20, "batch_timeout_rate": 0.0, **gpu}

    agents = FakeAgents(server_url.replace("http://", "ws://") + "/ws/agent/", tokens, figures)
    agents.start()
    try:
        page = new_page()
        open_signed_in(page, server_url, "oncall", "/")
        page.evaluate("window.notReloaded = true")
        page.locator("#stream-state.flowing").wait_for(timeout=15_000)
        assert "simulated: 1 of 3 nodes" in page.inner_text("[data-testid=simulated-label]").lower()

        # Live: one point a second on every chart, drawn in place.
        wait_until(lambda: appended(page) >= 2, 10, "the first live points")
        before, latency_before = appended(page), trace_points(page, "latency", 1)
        time.sleep(6)
        gained = appended(page) - before
        assert 4 <= gained <= 7, f"{gained} points in 6 s"
        assert trace_points(page, "latency", 1) - latency_before == gained
        assert trace_points(page, "qps") >= gained
        y = page.evaluate("document.getElementById('chart-qps').data[0].y.slice(-1)[0]")
        assert 3.0 <= y <= 4.21  # the fleet's QPS: the sum of three nodes' 1.0-1.4
        assert page.evaluate("window.notReloaded") is True
        assert page.locator("#stream-state").get_attribute("data-stalled") == "false"
        shot(page, "60-metrics-overview-live")

        # The agents stop: within a few seconds the page says the stream stalled, and points stop.
        agents.stop()
        page.locator("#stream-state.stalled").wait_for(timeout=8_000)
        assert "stream stalled" in page.inner_text("#stream-state")
        stalled_at = appended(page)
        time.sleep(2)
        assert appended(page) == stalled_at
        shot(page, "61-metrics-overview-stalled")

        # They come back: the indicator recovers and the charts move again, still without a reload.
        agents.start()
        page.locator("#stream-state.flowing").wait_for(timeout=10_000)
        wait_until(lambda: appended(page) >= stalled_at + 2, 10, "points after the recovery")
        assert page.evaluate("window.notReloaded") is True

        # The range picker reads history from the API: 1 h from second rows, 7 d from minute rows.
        page.click("[data-range='3600']")
        wait_for_range(page, 3600, resolution=1)
        assert trace_points(page, "latency", 1) > 10
        page.click("[data-range='604800']")
        wait_for_range(page, 604800, resolution=60)
        assert "not live" in page.inner_text("#range-note")
        page.click("[data-range='300']")
        wait_for_range(page, 300, resolution=1)
        shot(page, "62-metrics-overview-recovered")

        # Drill-downs: the pool's and a node's charts stream their own figures.
        page.goto(f"{server_url}/pools/prod-main/")
        page.locator("#stream-state.flowing").wait_for(timeout=15_000)
        wait_until(lambda: appended(page) >= 3, 10, "pool points")
        assert 2.0 <= page.evaluate("document.getElementById('chart-qps').data[0].y.slice(-1)[0]") <= 2.81
        shot(page, "63-metrics-pool")
        page.goto(f"{server_url}/nodes/sim-b/")
        page.locator("#stream-state.flowing").wait_for(timeout=15_000)
        wait_until(lambda: appended(page) >= 3, 10, "node points")
        assert page.locator("[data-testid=simulated-label]").is_visible()
        # GPU utilisation and memory used are charted; SM activity has no source on these nodes.
        gpu = page.evaluate(
            "document.getElementById('chart-gpu').data.map(t => t.y.filter(v => v !== null && v !== undefined).length)"
        )
        assert gpu[0] > 0 and gpu[1] == 0 and gpu[2] > 0, gpu
        assert page.evaluate("document.getElementById('chart-batch-timeouts').data[0].y.length") > 0
        shot(page, "64-metrics-node-simulated")
    finally:
        agents.stop()


@pytest.fixture
def one_frame_ahead(seeded, tmp_path):
    """daphne sending each connection one sample frame ahead of its receipts (8 by default, which a tab needs ~10 s
    of the fleet's one frame a second to fall behind)."""
    server = Daphne(tmp_path, extra_env={"METRICS_LIVE_UNCONFIRMED_FRAMES": "1"})
    server.start()
    yield server.url
    server.stop()


def test_a_tab_too_busy_to_read_thins_out_to_the_newest_sample(one_frame_ahead, new_page, shot):
    """The tab's main thread is blocked (a slow machine, a heavy page): the server sends a frame ahead, keeps only
    the newest sample meanwhile, and the page says how many it skipped instead of drawing minutes-old points."""
    server_url = one_frame_ahead
    tokens = register_nodes()
    agents = FakeAgents(server_url.replace("http://", "ws://") + "/ws/agent/", tokens)
    agents.start()
    try:
        page = new_page()
        open_signed_in(page, server_url, "oncall", "/")
        page.locator("#stream-state.flowing").wait_for(timeout=15_000)
        wait_until(lambda: appended(page) >= 2, 10, "the first live points")
        assert page.locator("#stream-thinned").is_hidden()

        page.evaluate("(() => { const end = Date.now() + 7000; while (Date.now() < end) {} })()")
        page.locator("#stream-thinned:not([hidden])").wait_for(timeout=10_000)
        thinned = int(page.get_attribute("#stream-thinned", "data-thinned"))
        assert thinned >= 1
        assert f"thinned {thinned} sample" in page.inner_text("#stream-thinned")
        # The newest sample is drawn within a couple of seconds of the tab catching up, not 7 s behind.
        wait_until(
            lambda: time.time() - float(page.get_attribute("#metrics", "data-last-t") or 0) < 4, 10, "a fresh point"
        )
        shot(page, "65-metrics-thinned")
    finally:
        agents.stop()
