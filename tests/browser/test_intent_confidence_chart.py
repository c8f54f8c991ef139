"""The pool page's intent confidence chart in Chromium: the confidence histogram as shares per bucket and the pool's
share below the floor, weighted by each node's classified requests, live from the nodes' samples."""

import pytest

from tests.browser.sessions import open_signed_in
from tests.browser.test_metrics_charts import appended, register_nodes
from tests.engine_node.fleet import wait_until
from tests.metrics.fake_agents import FakeAgents

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# gpu-a: 90 classified, 10 % below the floor; sim-b: 10 classified, half of them below. The pool: 14 %.
FIGURES = {
    "gpu-a": {
        "intent_classified": 90,
        "intent_below_floor_share": 0.1,
        "intent_confidence_hist": {"90-100": 81, "50-60": 9},
    },
    "sim-b": {
        "intent_classified": 10,
        "intent_below_floor_share": 0.5,
        "intent_confidence_hist": {"90-100": 5, "10-20": 5},
    },
    "gpu-c": {},
}


def last_y(page, trace: int) -> float | None:
    return page.evaluate(f"document.getElementById('chart-intent').data[{trace}].y.slice(-1)[0]")


def test_the_pool_page_charts_its_share_below_the_floor_and_the_confidence_histogram(
    seeded, server_url, new_page, shot
):
    tokens = register_nodes()
    agents = FakeAgents(
        server_url.replace("http://", "ws://") + "/ws/agent/",
        tokens,
        figures=lambda node, i: {"qps": 1.0, **FIGURES[node]},
    )
    agents.start()
    try:
        page = new_page()
        open_signed_in(page, server_url, "oncall", "/pools/prod-main/")
        page.locator("#stream-state.flowing").wait_for(timeout=15_000)
        wait_until(lambda: appended(page) >= 3 and last_y(page, 10) is not None, 15, "intent points")
        names = page.evaluate("document.getElementById('chart-intent').data.map(t => t.name)")
        assert names[0] == "0-10 %" and names[9] == "90-100 %" and names[10] == "below the floor"
        assert last_y(page, 10) == pytest.approx((9 + 5) / 100)  # not the nodes' mean, 30 %
        assert last_y(page, 9) == pytest.approx(86 / 100)  # 90-100 %
        assert last_y(page, 5) == pytest.approx(9 / 100) and last_y(page, 1) == pytest.approx(5 / 100)
        assert "below the template's confidence floor" in page.inner_text("[data-testid=intent-chart]")
        page.locator("[data-testid=intent-chart]").scroll_into_view_if_needed()
        shot(page, "65-metrics-pool-intent-confidence")
    finally:
        agents.stop()
