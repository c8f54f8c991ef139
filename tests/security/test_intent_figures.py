"""A hostile node's intent figures (share below the confidence floor, confidence histogram): refused whole, naming
the field, so that no node can lift or hide its pool's share below the floor or flood the store with buckets.

- negative counts, NaN or infinite shares, booleans and strings are refused like every figure;
- a share above 1, a share with nothing classified (or none with something), a histogram whose counts do not add up
  to the classified count, an unknown or an eleventh bucket, or a count no window can hold are refused;
- through the real ASGI app the refused sample stores nothing and reaches no browser, the next good one does, and
  the pool's share stays the classified-weighted share of what the nodes really sent.
"""

import math
import time

import pytest
from asgiref.sync import async_to_sync

from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import MAX_WINDOW_COUNT, SampleRejected, sample_parse
from tests.metrics.conftest import browser_headers, fleet_nodes, sample
from tests.metrics.test_ingest import agent, connected, next_event, rows_stored

NOW = time.time()
fleet_nodes = fleet_nodes  # pools staging and prod-main; nodes sim-1, gpu-1 and gpu-2 with their tokens
HIST = {"90-100": 9, "50-60": 3}


@pytest.mark.parametrize(
    ("figures", "reason"),
    [
        ({"intent_classified": -12}, "intent_classified: must not be negative"),
        ({"intent_classified": 12.0}, "intent_classified: expected an integer, got float"),
        ({"intent_classified": True}, "intent_classified: expected an integer, got bool"),
        ({"intent_below_floor_share": math.nan}, "intent_below_floor_share: expected a number or null, got float"),
        ({"intent_below_floor_share": math.inf}, "intent_below_floor_share: expected a number or null, got float"),
        ({"intent_below_floor_share": -0.1}, "intent_below_floor_share: must not be negative"),
        ({"intent_below_floor_share": "0.1"}, "intent_below_floor_share: expected a number or null, got str"),
        ({"intent_below_floor_share": 1.0001}, "intent_below_floor_share: a share, at most 1"),
        ({"intent_below_floor_share": None}, "intent_below_floor_share: null exactly when intent_classified is 0"),
        (
            {"intent_classified": 0, "intent_confidence_hist": {}, "intent_below_floor_share": 0.9},
            "intent_below_floor_share: null exactly when intent_classified is 0",
        ),
        ({"intent_confidence_hist": {**HIST, "50-60": -3}}, "intent_confidence_hist.50-60: must not be negative"),
        ({"intent_confidence_hist": {"90-100": 9}}, "intent_confidence_hist: its counts must add up"),
        ({"intent_confidence_hist": {**HIST, "100-110": 0}}, "intent_confidence_hist: unknown bucket '100-110'"),
        ({"intent_confidence_hist": {**HIST, "__proto__": 0}}, "intent_confidence_hist: unknown bucket '__proto__'"),
        (
            {"intent_confidence_hist": {str(i): 0 for i in range(300)}},
            "intent_confidence_hist: more than 256 entries",
        ),
        ({"intent_confidence_hist": [9, 3]}, "intent_confidence_hist: expected an object, got list"),
        (
            {
                "intent_classified": MAX_WINDOW_COUNT + 1,
                "intent_confidence_hist": {"90-100": MAX_WINDOW_COUNT + 1},
            },
            "intent_classified: a window counts at most",
        ),
    ],
)
def test_hostile_intent_figures_are_refused_naming_the_field(figures, reason):
    with pytest.raises(SampleRejected) as refused:
        sample_parse(sample(t=NOW, **figures), now=NOW)
    assert refused.value.reason.startswith(reason)


def test_half_the_intent_figures_are_not_an_older_agent():
    message = sample(t=NOW)
    del message["m"]["intent_confidence_hist"]
    with pytest.raises(SampleRejected, match="m: missing intent_confidence_hist"):
        sample_parse(message, now=NOW)


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_refused_sample_stores_nothing_and_the_pool_share_is_what_the_nodes_sent(users, fleet_nodes):
    sre = browser_headers(users["sre"])

    async def scenario():
        pool = await connected("/ws/metrics/pools/prod-main/", sre)
        gpu1, gpu2 = await agent(fleet_nodes["gpu-1"]), await agent(fleet_nodes["gpu-2"])
        # gpu-2 tries to pass off a huge share and a histogram of its own making.
        await gpu2.send_json_to(sample(intent_classified=10**12, intent_below_floor_share=50.0))
        await gpu2.send_json_to(sample(intent_confidence_hist={**HIST, "10-20": 10**6}))
        assert await pool.receive_nothing(timeout=0.6), "a refused sample reached a browser"
        await gpu1.send_json_to(
            sample(intent_classified=90, intent_below_floor_share=0.1, intent_confidence_hist={"90-100": 90})
        )
        await gpu2.send_json_to(
            sample(intent_classified=10, intent_below_floor_share=0.5, intent_confidence_hist={"10-20": 10})
        )
        event = await next_event(pool, lambda e: e["values"].get("nodes") == 2)
        await rows_stored(2, scope="node", pool="prod-main")
        for socket in (gpu1, gpu2, pool):
            await socket.disconnect()
        return event

    event = async_to_sync(scenario)()
    values = event["values"]
    assert values["intent_classified"] == 100
    assert values["intent_below_floor_share"] == pytest.approx((9 + 5) / 100)
    assert values["intent_confidence_hist"] == {"90-100": 90, "10-20": 10}
    assert MetricSample.objects.filter(scope="node", name="gpu-2").count() == 1
