"""Events to the fleet, a pool and the alerts are numbered per group; other groups' events are not."""

import asyncio
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from controlplane.lib import event_sequence, realtime

EVENT = {"type": "nodes.updated", "nodes": []}


def received(layer, channel, count):
    async def run():
        return [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(count)]

    return async_to_sync(run)()


def test_sequenced_groups_are_the_page_state_groups():
    assert realtime.is_sequenced(realtime.fleet_group())
    assert realtime.is_sequenced(realtime.pool_group("prod-main"))
    assert realtime.is_sequenced(realtime.alerts_group())
    for group in (
        realtime.agents_group("prod-main"),
        realtime.node_group(7),
        realtime.metrics_pool_group("prod-main"),
        realtime.metrics_fleet_group(),
        realtime.conversation_logs_group(),
    ):
        assert not realtime.is_sequenced(group), group


@pytest.mark.django_db
def test_numbers_follow_each_other_per_group_from_sync_and_async_senders():
    layer = get_channel_layer()
    pool = f"seq-{uuid.uuid4().hex[:8]}"  # a group of its own: counters are shared by everything on this Redis
    channel = async_to_sync(layer.new_channel)()
    for group in (realtime.pool_group(pool), realtime.agents_group(pool)):
        async_to_sync(layer.group_add)(group, channel)

    realtime.send([realtime.pool_group(pool)], EVENT)
    async_to_sync(realtime.send_async)([realtime.pool_group(pool)], EVENT)
    realtime.send([realtime.pool_group(pool), realtime.agents_group(pool)], EVENT)
    events = received(layer, channel, 4)

    numbered = [e["seq"] for e in events if "seq" in e]
    assert [s["group"] for s in numbered] == [realtime.pool_group(pool)] * 3
    start = numbered[0]["n"]
    assert [s["n"] for s in numbered] == [start, start + 1, start + 2]
    assert start == 1  # a new group's counter starts at 1
    assert sum("seq" not in e for e in events) == 1  # the agents' copy carries none
    assert all(e["type"] == "nodes.updated" and e["nodes"] == [] for e in events)


def test_stamped_leaves_the_event_alone_without_a_number():
    assert event_sequence.stamped("fleet", EVENT, None) is EVENT
    assert event_sequence.stamped("fleet", EVENT, 4) == {**EVENT, "seq": {"group": "fleet", "n": 4}}
    assert "seq" not in EVENT


@pytest.mark.django_db
def test_current_numbers_read_without_taking_from_sync_and_async_callers():
    pool = f"seq-{uuid.uuid4().hex[:8]}"
    group, other = realtime.pool_group(pool), realtime.pool_group(pool + "-other")
    assert event_sequence.current_numbers([group, other]) == {group: 0, other: 0}  # nothing taken yet
    realtime.send([group], EVENT)
    realtime.send([group], EVENT)
    assert event_sequence.current_numbers([group, other]) == {group: 2, other: 0}
    assert async_to_sync(event_sequence.current_number_async)(group) == 2
    assert event_sequence.current_numbers([group]) == {group: 2}  # reading takes nothing
    assert event_sequence.next_number(group) == 3


def test_the_embedded_counter_reads_the_same_way(settings):
    settings.REDIS_URL = ""
    group = f"pool.seq-{uuid.uuid4().hex[:8]}"
    assert event_sequence.current_numbers([group]) == {group: 0}
    assert [event_sequence.next_number(group), event_sequence.next_number(group)] == [1, 2]
    assert event_sequence.current_numbers([group]) == {group: 2}
    assert async_to_sync(event_sequence.current_number_async)(group) == 2


def test_an_unreachable_counter_leaves_the_page_without_numbers(settings, monkeypatch):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    monkeypatch.setattr(event_sequence, "_sync_client", None)
    assert event_sequence.current_numbers(["fleet"]) == {}
    assert async_to_sync(event_sequence.current_number_async)("fleet") is None
