"""What agents report: authentication by token, hello/reconcile, ACK/NACK, and connection bookkeeping."""

import pytest

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services import agent_sessions
from controlplane.nodes.services.engine_nodes import node_create, node_token_revoke, node_token_rotate
from controlplane.nodes.services.pools import pool_publish
from tests.factories import pools, template_with_versions

pytestmark = pytest.mark.django_db


@pytest.fixture
def node_and_token(sre):
    staging, _ = pools(sre)
    _, versions = template_with_versions(sre, temperatures=(0.3, 0.2))
    pool_publish(actor=sre, pool=staging, version=versions[0], reason="first")
    node, token = node_create(actor=sre, name="gpu-1", pool=staging)
    return node, token, versions


def test_only_the_current_token_authenticates(sre, node_and_token):
    node, token, _ = node_and_token
    assert agent_sessions.node_authenticate(token=token) == node
    assert agent_sessions.node_authenticate(token=token[:-1] + "x") is None
    assert agent_sessions.node_authenticate(token="not-a-node-token") is None
    new_token = node_token_rotate(actor=sre, node=node, reason="rotation")
    assert agent_sessions.node_authenticate(token=token) is None
    assert agent_sessions.node_authenticate(token=new_token) == node
    node_token_revoke(actor=sre, node=node, reason="stolen laptop")
    assert agent_sessions.node_authenticate(token=new_token) is None
    assert EngineNode.objects.get(pk=node.pk).token_hash == ""


def test_hello_returns_the_desired_config_until_the_node_runs_it(node_and_token):
    node, _, versions = node_and_token
    push = agent_sessions.node_hello(node_id=node.pk, session_id="s1", hello={"applied_hash": ""})
    assert push["hash"] == versions[0].content_hash
    applied = {"applied_hash": versions[0].content_hash, "applied_version": {"template": "chat", "number": 1}}
    assert agent_sessions.node_hello(node_id=node.pk, session_id="s2", hello=applied) is None
    assert EngineNode.objects.get(pk=node.pk).applied_version == versions[0]


def test_a_version_claimed_with_the_wrong_hash_is_not_trusted(node_and_token):
    node, _, _ = node_and_token
    claim = {"applied_hash": "f" * 64, "applied_version": {"template": "chat", "number": 1}}
    agent_sessions.node_hello(node_id=node.pk, session_id="s1", hello=claim)
    assert EngineNode.objects.get(pk=node.pk).applied_version is None


def test_nack_keeps_the_applied_version_and_ack_clears_the_error(node_and_token):
    node, _, (v1, v2) = node_and_token
    agent_sessions.node_config_result(node_id=node.pk, ok=True, content_hash=v1.content_hash, version=None)
    agent_sessions.node_config_result(
        node_id=node.pk, ok=False, content_hash=v2.content_hash, version=None, error="max_model_len too large"
    )
    node.refresh_from_db()
    assert (node.applied_hash, node.last_nack_hash, node.last_nack_error) == (
        v1.content_hash,
        v2.content_hash,
        "max_model_len too large",
    )
    agent_sessions.nodes_config_acked(node_ids=[node.pk], content_hash=v2.content_hash, version_id=v2.pk)
    node.refresh_from_db()
    assert (node.applied_version, node.last_nack_hash, node.last_nack_error) == (v2, "", "")


def test_a_late_disconnect_of_an_older_connection_does_not_mark_the_node_lost(node_and_token):
    node, _, _ = node_and_token
    agent_sessions.node_hello(node_id=node.pk, session_id="old", hello={})
    agent_sessions.node_hello(node_id=node.pk, session_id="new", hello={})
    agent_sessions.node_disconnected(node_id=node.pk, session_id="old")
    assert EngineNode.objects.get(pk=node.pk).is_connected
    agent_sessions.node_disconnected(node_id=node.pk, session_id="new")
    assert not EngineNode.objects.get(pk=node.pk).is_connected


def test_hello_records_the_gateway_url_and_model_name_and_a_heartbeat_updates_a_renamed_model(node_and_token):
    node, _, _ = node_and_token
    hello = {"gateway_url": "http://10.0.0.7:9000/", "served_model_name": "chat"}
    agent_sessions.node_hello(node_id=node.pk, session_id="s1", hello=hello, address="10.0.0.7")
    node.refresh_from_db()
    assert (node.gateway_url, node.served_model_name) == ("http://10.0.0.7:9000", "chat")
    assert (node.agent_address, node.gateway_url_refused) == ("10.0.0.7", "")
    agent_sessions.node_heartbeat(node_id=node.pk, heartbeat={"status": "online", "served_model_name": "support-bot"})
    agent_sessions.node_heartbeat(node_id=node.pk, heartbeat={"status": "online"})
    node.refresh_from_db()
    assert node.served_model_name == "support-bot"
    assert node.gateway_url == "http://10.0.0.7:9000"
