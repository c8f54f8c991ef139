"""Memory cleanups in the control plane: one node of a pool at a time, by an SRE's node or pool cleanup or by a
node's own request; the lease passes on when a cleanup ends, expires or its node is lost; figures and API."""

import json
import re
import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict
from controlplane.nodes.models import EngineNode, NodeCommand
from controlplane.nodes.selectors import cleanup_figures, command_summary
from controlplane.nodes.services import agent_sessions, cleanup
from controlplane.nodes.services.engine_nodes import node_command_request, node_create
from tests.factories import pools

pytestmark = pytest.mark.django_db

RESULT = {
    "trigger": "operator",
    "before": {"fragmentation": 0.412, "kv_cache_usage": 0.31, "device": "simulated"},
    "after": {"fragmentation": 0.02, "kv_cache_usage": 0.0, "device": "simulated"},
    "duration_s": 0.84,
    "drained_s": 0.5,
}


def connect(*nodes: EngineNode) -> None:
    EngineNode.objects.filter(pk__in=[n.pk for n in nodes]).update(is_connected=True, last_seen_at=timezone.now())


@pytest.fixture
def staging(sre):
    staging, _ = pools(sre)
    nodes = [node_create(actor=sre, name=f"gpu-{i}", pool=staging)[0] for i in (1, 2, 3)]
    connect(*nodes)
    return staging, nodes


def sent(command: NodeCommand) -> bool:
    command.refresh_from_db()
    return command.sent_at is not None


def finish(command: NodeCommand, state: str = "succeeded", result: str = "") -> None:
    agent_sessions.node_command_progress(
        node_id=command.node_id, command_id=command.pk, state=state, result=result or json.dumps(RESULT)
    )


def test_a_second_node_of_the_pool_waits_until_the_first_cleanup_ends(sre, staging):
    _, (gpu1, gpu2, _) = staging
    first = node_command_request(actor=sre, node=gpu1, op="cleanup", reason="fragmentation 41 %")
    second = cleanup.node_cleanup_request(actor=sre, node=gpu2, reason="fragmentation 38 %")
    assert sent(first) and not sent(second)
    assert second.state == "pending"
    agent_sessions.node_command_progress(node_id=gpu1.pk, command_id=first.pk, state="running", progress="draining")
    assert not sent(second)
    finish(first)
    assert sent(second)
    assert [e.action for e in AuditEntry.objects.filter(action="node.cleanup")] == ["node.cleanup", "node.cleanup"]


def test_other_operations_are_not_held_by_a_cleanup_elsewhere(sre, staging):
    _, (gpu1, gpu2, _) = staging
    node_command_request(actor=sre, node=gpu1, op="cleanup", reason="fragmentation")
    restart = node_command_request(actor=sre, node=gpu2, op="restart", reason="wedged")
    assert sent(restart)
    with pytest.raises(Conflict, match="earlier command"):
        node_command_request(actor=sre, node=gpu1, op="drain", reason="maintenance")


def test_a_node_asks_for_the_lease_and_gets_it_only_when_the_pool_is_free(sre, staging):
    _, (gpu1, gpu2, _) = staging
    granted, refusal = cleanup.cleanup_lease_request(node_id=gpu1.pk, trigger="threshold", fragmentation=0.41)
    assert granted is not None and refusal == ""
    assert granted.sent_at is not None and granted.requested_by is None
    assert granted.reason == "automatic: memory fragmentation 41.0% above the template's threshold"
    entry = AuditEntry.objects.get(action="node.cleanup")
    assert (entry.actor_name, entry.target_id) == ("system", str(gpu1.pk))

    refused, refusal = cleanup.cleanup_lease_request(node_id=gpu2.pk, trigger="threshold", fragmentation=0.5)
    assert refused is None and "gpu-1 of pool staging" in refusal
    again, refusal = cleanup.cleanup_lease_request(node_id=gpu1.pk, trigger="timer")
    assert again is None and "earlier command" in refusal
    assert AuditEntry.objects.filter(action="node.cleanup").count() == 1  # refusals change nothing

    finish(granted)
    timer, _ = cleanup.cleanup_lease_request(node_id=gpu2.pk, trigger="timer")
    assert timer is not None and "cleanup.interval_s" in timer.reason


def test_a_node_request_does_not_jump_the_queue_of_a_pool_cleanup(sre, staging):
    pool, (*_, gpu3) = staging
    commands = cleanup.pool_cleanup_request(actor=sre, pool=pool, reason="weekly")
    assert [c.node.name for c in commands] == ["gpu-1", "gpu-2", "gpu-3"]
    finish(commands[0])
    assert cleanup.cleanup_lease_request(node_id=gpu3.pk, trigger="threshold", fragmentation=0.4)[0] is None


def test_pool_cleanup_goes_node_by_node_and_skips_lost_and_busy_nodes(sre, staging):
    pool, (_, gpu2, gpu3) = staging
    EngineNode.objects.filter(pk=gpu3.pk).update(is_connected=False)
    commands = cleanup.pool_cleanup_request(actor=sre, pool=pool, reason="weekly cleanup")
    assert [c.node.name for c in commands] == ["gpu-1", "gpu-2"]
    assert [sent(c) for c in commands] == [True, False]
    entry = AuditEntry.objects.get(action="pool.cleanup")
    assert entry.after["skipped"] == ["gpu-3"] and entry.reason == "weekly cleanup"

    # gpu-2 is lost before its turn: it is failed, not sent, and the lease stays free.
    EngineNode.objects.filter(pk=gpu2.pk).update(is_connected=False)
    finish(commands[0], state="failed", result="drain did not finish")
    commands[1].refresh_from_db()
    assert commands[1].state == "failed" and commands[1].sent_at is None
    assert "not connected when its turn came" in commands[1].result
    connect(gpu2, gpu3)
    assert cleanup.cleanup_lease_request(node_id=gpu3.pk, trigger="timer")[0] is not None

    # A busy node is left out; the others wait for gpu-3's cleanup to end.
    again = cleanup.pool_cleanup_request(actor=sre, pool=pool, reason="again")
    assert [(c.node.name, sent(c)) for c in again] == [("gpu-1", False), ("gpu-2", False)]
    assert AuditEntry.objects.filter(action="pool.cleanup").last().after["skipped"] == ["gpu-3"]


def test_pool_cleanup_needs_a_connected_node(sre):
    staging, _ = pools(sre)
    node_create(actor=sre, name="gpu-1", pool=staging)
    with pytest.raises(Conflict, match="no connected node"):
        cleanup.pool_cleanup_request(actor=sre, pool=staging, reason="weekly")
    assert not AuditEntry.objects.filter(action="pool.cleanup").exists()


def test_a_lease_whose_end_never_came_expires_and_the_next_node_goes(sre, staging):
    _, (gpu1, gpu2, _) = staging
    first = node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    second = node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    assert not sent(second)
    # Still within max_duration_s (default 60) + grace: nothing moves.
    assert cleanup.cleanup_dispatch_next(pool_id=gpu1.pool_id) is None
    NodeCommand.objects.filter(pk=first.pk).update(sent_at=timezone.now() - timedelta(seconds=91))
    assert cleanup.cleanup_dispatch_next(pool_id=gpu1.pool_id) == second
    first.refresh_from_db()
    assert first.state == "failed" and "lease expired" in first.result


def test_a_node_lost_during_its_cleanup_hands_the_lease_on(sre, staging):
    _, (gpu1, gpu2, _) = staging
    first = node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    second = node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    EngineNode.objects.filter(pk=gpu1.pk).update(session_id="s1")
    agent_sessions.node_disconnected(node_id=gpu1.pk, session_id="s1")
    first.refresh_from_db()
    assert first.state == "failed" and "lost" in first.result
    assert sent(second)


@pytest.mark.django_db(transaction=True)
def test_simultaneous_requests_of_two_nodes_get_one_lease(sre):
    staging, _ = pools(sre)
    nodes = [node_create(actor=sre, name=f"gpu-{i}", pool=staging)[0] for i in (1, 2, 3, 4)]
    connect(*nodes)
    barrier = threading.Barrier(len(nodes))
    outcomes: list = []

    def ask(node):
        try:
            barrier.wait()
            outcomes.append(cleanup.cleanup_lease_request(node_id=node.pk, trigger="threshold", fragmentation=0.5)[0])
        finally:
            connection.close()

    threads = [threading.Thread(target=ask, args=(n,)) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(outcomes) == 4
    assert sum(1 for granted in outcomes if granted is not None) == 1
    assert NodeCommand.objects.filter(op="cleanup").count() == 1


def test_figures_of_a_cleanup_result():
    figures = cleanup_figures(result=json.dumps(RESULT))
    assert (figures["fragmentation_before"], figures["fragmentation_after"]) == (0.412, 0.02)
    assert figures["text"] == "fragmentation 41.2 % → 2.0 % · KV cache 31.0 % → 0.0 % · 0.8 s"
    cpu = {**RESULT, "before": {"fragmentation": None, "kv_cache_usage": 0.1, "device": "cpu"}, "after": None}
    text = cleanup_figures(result=json.dumps(cpu))["text"]
    assert text.startswith("fragmentation n/a → n/a (no allocator statistics on cpu) · KV cache 10.0 % → n/a")
    failed = {**RESULT, "error": "did not finish within cleanup.max_duration_s (5s)"}
    assert cleanup_figures(result=json.dumps(failed))["text"].endswith("(5s)")
    assert cleanup_figures(result="gate open, serving") is None
    assert cleanup_figures(result="{not json") is None


def test_api_commands_carry_the_figures_and_automatic_requester(api_for, sre, staging):
    _, (gpu1, _, _) = staging
    client = api_for("sre")
    url = reverse("api:node-command-list", kwargs={"name": "gpu-1"})
    response = client.post(url, {"op": "cleanup", "reason": "fragmentation 41 %"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["op"] == "cleanup" and response.json()["sent_at"]
    finish(NodeCommand.objects.get(pk=response.json()["id"]))
    granted, _ = cleanup.cleanup_lease_request(node_id=gpu1.pk, trigger="timer")
    rows = client.get(url).json()["results"]
    assert rows[0]["id"] == granted.pk and rows[0]["requested_by"] == "automatic" and rows[0]["figures"] is None
    assert rows[1]["figures"]["fragmentation_after"] == 0.02
    refused = client.post(
        reverse("api:pool-cleanup", kwargs={"name": "prod-main"}), {"reason": "weekly"}, format="json"
    )
    assert refused.status_code == 409 and "no connected node" in refused.json()["error"]


def waiting(command: NodeCommand) -> str:
    command = NodeCommand.objects.select_related("node__pool").get(pk=command.pk)
    return command_summary(command=command)["waiting_for"]


def test_a_waiting_cleanup_says_which_node_holds_the_lease_and_until_when(sre, staging):
    _, (gpu1, gpu2, gpu3) = staging
    first = node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    second = node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    third = node_command_request(actor=sre, node=gpu3, op="cleanup", reason="three")
    assert re.fullmatch(r"sent at \d\d:\d\d:\d\d UTC; waiting for gpu-1 to start it", waiting(first)), waiting(first)
    agent_sessions.node_command_progress(node_id=gpu1.pk, command_id=first.pk, state="running", progress="draining")
    assert waiting(first) == ""  # it runs: its progress says what it does
    assert re.fullmatch(
        r"waiting for the pool's cleanup lease, held by gpu-1 since \d\d:\d\d:\d\d UTC: draining; it ends when that "
        r"cleanup does, by \d\d:\d\d:\d\d UTC at the latest",
        waiting(second),
    ), waiting(second)
    assert waiting(third).endswith("; 1 earlier cleanup(s) of the pool go first (next: gpu-2)")
    first.refresh_from_db()
    bound = first.sent_at + timedelta(seconds=60 + cleanup.LEASE_GRACE_S)  # the template default max_duration_s
    assert f"by {bound:%H:%M:%S} UTC at the latest" in waiting(second)


def test_a_waiting_cleanup_of_an_offline_node_says_it_waits_for_it_to_reconnect(sre, staging):
    _, (gpu1, gpu2, _) = staging
    node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    second = node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    EngineNode.objects.filter(pk=gpu2.pk).update(is_connected=False)
    assert waiting(second).startswith("waiting for gpu-2 to reconnect (offline)")


def test_a_sent_command_says_what_the_node_is_busy_with(sre, staging):
    _, (gpu1, _, _) = staging
    restart = node_command_request(actor=sre, node=gpu1, op="restart", reason="wedged")
    agent_sessions.node_command_progress(
        node_id=gpu1.pk, command_id=restart.pk, state="pending", progress="waiting: the node is warming up a new config"
    )
    assert waiting(restart).endswith("waiting for gpu-1 to start it (waiting: the node is warming up a new config)")
    EngineNode.objects.filter(pk=gpu1.pk).update(is_connected=False)
    assert waiting(restart).endswith("waiting for gpu-1 to start it (the node is offline)")


def test_the_periodic_pass_expires_a_silent_lease_without_any_other_event(sre, staging):
    """A cleanup whose end never arrived held its pool's lease until some other cleanup event came along."""
    _, (gpu1, gpu2, _) = staging
    first = node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    second = node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    assert cleanup.cleanups_dispatch_due() == 0 and not sent(second)
    NodeCommand.objects.filter(pk=first.pk).update(sent_at=timezone.now() - timedelta(seconds=91))
    assert cleanup.cleanups_dispatch_due() == 1
    assert sent(second)
    first.refresh_from_db()
    assert first.state == "failed" and "lease expired" in first.result
    assert waiting(second).startswith("sent at ")


def test_api_commands_say_what_they_wait_for(api_for, sre, staging):
    _, (gpu1, gpu2, _) = staging
    node_command_request(actor=sre, node=gpu1, op="cleanup", reason="one")
    node_command_request(actor=sre, node=gpu2, op="cleanup", reason="two")
    [body] = api_for("sre").get("/api/v1/nodes/gpu-2/commands/").json()["results"]
    assert body["state"] == "pending"
    assert body["waiting_for"].startswith("waiting for the pool's cleanup lease, held by gpu-1 since ")
