"""A node reports where its gateway is and which model clients send; the node page shows both with an example call.

An engine node is trusted less than the people reading its page: whatever its agent reports, the page gets no
script, no `javascript:` link, and an example command that runs exactly one curl with the reported model name as
data, never as shell code.
"""

import shlex

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client

from controlplane.asgi import application
from controlplane.nodes.models import EngineNode
from controlplane.nodes.selectors import node_client_example
from controlplane.nodes.services.engine_nodes import node_create
from tests.factories import pools

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_MODEL = "chat'; touch /tmp/pwned; echo '</pre><script>alert(1)</script>"


def send_hello(token: str, hello: dict) -> None:
    async def scenario():
        socket = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
        )
        ok, code = await socket.connect()
        assert ok, code
        assert (await socket.receive_json_from(timeout=5))["type"] == "welcome"
        await socket.send_json_to({"type": "hello", "applied_hash": "", **hello})
        # Messages are handled in order: the answer to this one means the hello is stored.
        await socket.send_json_to({"type": "after-hello"})
        while (await socket.receive_json_from(timeout=5)).get("error") != "unknown message type 'after-hello'":
            pass
        await socket.disconnect()

    async_to_sync(scenario)()


def node_page(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/nodes/gpu-1/")
    assert response.status_code == 200
    return response.content.decode()


def test_a_javascript_gateway_url_is_dropped_and_a_hostile_model_name_stays_data(sre, oncall):
    staging, _ = pools(sre)
    _, token = node_create(actor=sre, name="gpu-1", pool=staging)

    send_hello(token, {"gateway_url": "javascript:alert(document.cookie)//", "served_model_name": HOSTILE_MODEL})

    node = EngineNode.objects.get(name="gpu-1")
    assert (node.gateway_url, node.served_model_name) == ("", HOSTILE_MODEL)
    page = node_page(oncall)
    assert "javascript:" not in page
    assert "has not reported its gateway address" in page

    send_hello(token, {"gateway_url": "http://10.0.0.7:9000", "served_model_name": HOSTILE_MODEL})

    page = node_page(oncall)
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    example = node_client_example(node=EngineNode.objects.get(name="gpu-1"))
    words = shlex.split(example["curl"].replace("\\\n", " "))
    assert len(words) == 8 and (words[0], words[-2]) == ("curl", "-d")
    assert words[1] == "http://10.0.0.7:9000/v1/chat/completions"
    assert HOSTILE_MODEL in words[-1]
    assert "Bearer <your client key>" in words[3]
