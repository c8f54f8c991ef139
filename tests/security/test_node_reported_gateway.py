"""A node reports where its gateway is and which model clients send; the node page shows both with an example call,
and replays send their key and customers' logged messages there.

An engine node is trusted less than the people reading its page and less than the control plane: whatever its agent
reports, the page gets no script, no `javascript:` link, and an example command that runs exactly one curl with the
reported model name as data, never as shell code; and the control plane sends to no address the operator did not
allow (by default the node's own), never to a metadata or link-local address, neither when the address is stored nor
when a replay uses it, and follows no redirect.
"""

import asyncio
import http.server
import shlex
import threading
import time

import aiohttp
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from controlplane.asgi import application
from controlplane.lib.gateway_addresses import allowed_parse, ports_parse
from controlplane.nodes.models import EngineNode
from controlplane.nodes.selectors import node_client_example
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.replays.lifecycle import StartFailed, replay_start, wait_for_key
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.services import replay_run_create
from controlplane.replays.shares import replay_share
from engine_node.replay_load import Outcome, Shot, chat_once
from tests.engine_node.fleet import wait_until
from tests.factories import pools
from tests.replays.logs import log_lines, store_log

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE_MODEL = "chat'; touch /tmp/pwned; echo '</pre><script>alert(1)</script>"


def send_hello(token: str, hello: dict, *, client: str = "10.0.0.7") -> None:
    """The hello over the real agent consumer, from a WebSocket whose peer address is `client`."""

    async def scenario():
        socket = WebsocketCommunicator(
            application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())]
        )
        socket.scope["client"] = (client, 50123)
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
    assert "gateway address this node reported was refused" in page

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


HOSTILE_GATEWAYS = {
    "metadata-ipv4": "http://169.254.169.254",
    "metadata-ipv4-port-path": "http://169.254.169.254:80/latest/meta-data/",
    "metadata-ecs": "http://169.254.170.2",
    "metadata-ipv6": "http://[fd00:ec2::254]",
    "metadata-alibaba": "http://100.100.100.200",
    "metadata-name": "http://metadata.google.internal",
    "metadata-name-trailing-dot": "http://METADATA.google.internal.:80",
    "metadata-decimal": "http://2852039166",
    "metadata-hex": "http://0xa9fea9fe:9000",
    "metadata-octal": "http://0251.0376.0251.0376",
    "metadata-short-form": "http://169.254.43518",
    "metadata-ipv4-mapped": "http://[::ffff:169.254.169.254]",
    "metadata-nat64": "http://[64:ff9b::a9fe:a9fe]",
    "link-local-v6": "http://[fe80::1]:9000",
    "link-local-v6-zone": "http://[fe80::1%25eth0]:9000",
    "another-host": "http://10.0.0.8:9000",
    "control-plane-loopback": "http://127.0.0.1:6379",
    "control-plane-localhost": "http://localhost:8000",
    "control-plane-loopback-v6": "http://[::1]:9000",
    "this-network": "http://0.0.0.0:9000",
    "multicast": "http://224.0.0.1:9000",
    "broadcast": "http://255.255.255.255:9000",
    "a-name-not-allowed": "http://gpu-1.example.com:9000",
    "fullwidth-name": "http://ｍetadata.google.internal",
    "path": "http://10.0.0.7:9000/admin",
    "traversal": "http://10.0.0.7:9000/v1/../sleep",
    "empty-query": "http://10.0.0.7:9000/?",
    "query": "http://10.0.0.7:9000?x=1",
    "fragment": "http://10.0.0.7:9000/#frag",
    "fragment-hiding-a-host": "http://10.0.0.7:9000#@169.254.169.254",
    "userinfo": "http://user:pass@10.0.0.7:9000",
    "userinfo-hiding-a-host": "http://10.0.0.7:9000@169.254.169.254",
    "backslash-userinfo": "http://10.0.0.7:9000\\@169.254.169.254",
    "header-injection": "http://10.0.0.7:9000\r\nHost: 169.254.169.254",
    "scheme-file": "file:///etc/passwd",
    "scheme-gopher": "gopher://10.0.0.7:9000/_PING",
    "port-zero": "http://10.0.0.7:0",
    "port-out-of-range": "http://10.0.0.7:99999",
    "not-a-string": ["http://10.0.0.7:9000"],
}


def stored(name: str = "gpu-1") -> tuple[str, str]:
    node = EngineNode.objects.get(name=name)
    return node.gateway_url, node.gateway_url_refused


@pytest.fixture
def gpu1(sre):
    staging, _ = pools(sre)
    _, token = node_create(actor=sre, name="gpu-1", pool=staging)
    return token


@pytest.mark.parametrize("url", HOSTILE_GATEWAYS.values(), ids=HOSTILE_GATEWAYS.keys())
def test_a_gateway_the_control_plane_must_not_call_is_refused_when_stored(gpu1, oncall, url):
    send_hello(gpu1, {"gateway_url": "http://10.0.0.7:9000", "served_model_name": "chat"})
    assert stored() == ("http://10.0.0.7:9000", "")

    send_hello(gpu1, {"gateway_url": url, "served_model_name": "chat"})

    gateway_url, refused = stored()
    assert gateway_url == "" and refused.startswith("gateway_url: "), refused
    page = node_page(oncall)
    assert 'data-testid="gateway-refused"' in page and 'data-testid="example-curl"' not in page
    assert "169.254.169.254/" not in page


@pytest.mark.parametrize(
    ("client", "url", "kept"),
    [
        ("10.0.0.7", "http://10.0.0.7:9000/", "http://10.0.0.7:9000"),
        ("10.0.0.7", "https://10.0.0.7", "https://10.0.0.7"),
        ("::ffff:10.0.0.7", "http://10.0.0.7:9000", "http://10.0.0.7:9000"),
        ("2001:db8::7", "http://[2001:db8::7]:9000", "http://[2001:db8::7]:9000"),
        ("127.0.0.1", "http://127.0.0.1:9000", "http://127.0.0.1:9000"),
        ("127.0.0.1", "http://localhost:9000", "http://localhost:9000"),
        ("::1", "http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ],
)
def test_by_default_the_gateway_is_where_the_node_connected_from(gpu1, client, url, kept):
    send_hello(gpu1, {"gateway_url": url}, client=client)
    assert stored() == (kept, "")


def test_the_operators_allow_list_decides_hosts_and_ports_but_never_metadata_or_loopback(gpu1, settings):
    settings.NODE_GATEWAY_ALLOWED = ["10.20.0.0/16", "gw-1.example.com", "*.gpu.example.com"]
    settings.NODE_GATEWAY_PORTS = ["9000-9099", "443"]
    for url in ("http://10.20.3.4:9000", "https://gw-1.example.com", "http://node-7.gpu.example.com:9099"):
        send_hello(gpu1, {"gateway_url": url})
        assert stored() == (url, ""), url
    for url in (
        "http://10.21.0.1:9000",  # outside the networks
        "http://10.20.3.4:9100",  # outside the ports
        "http://10.20.3.4",  # port 80 is not listed either
        "http://gpu.example.com:9000",  # *.suffix is for names under it
        "http://evil-gpu.example.com:9000",
        "http://10.0.0.7:9000",  # the node's own address no longer counts once the operator lists what does
    ):
        send_hello(gpu1, {"gateway_url": url})
        assert stored()[0] == "" and "gateway_url" in stored()[1], url
    settings.NODE_GATEWAY_ALLOWED = ["0.0.0.0/0", "::/0"]
    settings.NODE_GATEWAY_PORTS = []
    for url in ("http://169.254.169.254", "http://[fd00:ec2::254]", "http://127.0.0.1:6379", "http://[fe80::1]"):
        send_hello(gpu1, {"gateway_url": url})
        assert stored()[0] == "", url


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NODE_GATEWAY_ALLOWED", "10.0.0.0/8,not a host"),
        ("NODE_GATEWAY_ALLOWED", "ｍetadata.example.com"),
        ("NODE_GATEWAY_PORTS", "9000-8000"),
        ("NODE_GATEWAY_PORTS", "http"),
        ("NODE_GATEWAY_PORTS", "70000"),
    ],
)
def test_a_malformed_allow_list_is_refused_naming_the_entry(name, value):
    with pytest.raises(ValueError) as refused:
        (allowed_parse if name == "NODE_GATEWAY_ALLOWED" else ports_parse)(value.split(","))
    assert repr(value.split(",")[-1]) in str(refused.value)


class Listener:
    """A plain HTTP server on loopback that records every request; `redirect_to` makes it answer 307 there."""

    def __init__(self, redirect_to: str = ""):
        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                requests.append((self.command, self.path, self.headers.get("Authorization"), self.rfile.read(length)))
                if redirect_to:
                    self.send_response(307)
                    self.send_header("Location", redirect_to + self.path)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listeners():
    started = []

    def start(redirect_to: str = "") -> Listener:
        started.append(Listener(redirect_to))
        return started[-1]

    yield start
    for listener in started:
        listener.close()


@pytest.fixture
def replay_world(users, settings, tmp_path):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, _ = pools(users["sre"])
    node_create(actor=users["sre"], name="gpu-1", pool=staging)
    log = store_log(users["agent"], log_lines(3))
    return staging, log


def online(url: str, agent_address: str | None) -> None:
    """gpu-1 online with this gateway row, as a row written before the stored-address check would hold it."""
    EngineNode.objects.filter(name="gpu-1").update(
        is_connected=True,
        last_seen_at=timezone.now(),
        reported_status="online",
        gateway_url=url,
        agent_address=agent_address,
    )


def queued_run(users, replay_world, settings) -> ReplayRun:
    """A run queued as the API queues it, for the test to start itself (replay_start). Eagerly (make test, embedded
    mode) the service's own start runs on a background thread once the row is committed; it is awaited and its
    outcome undone first, so the test's start is the only one running (two would race for the same row)."""
    staging, log = replay_world
    run = replay_run_create(actor=users["agent"], pool=staging, log=log, reason="gateway check", qps=5)
    if settings.CELERY_TASK_ALWAYS_EAGER:
        ended = ReplayRun.objects.filter(pk=run.pk, status__in=ReplayRun.FINISHED)
        wait_until(ended.exists, 30, "the run's own start to end it")
        assert not ReplayRequest.objects.filter(run=run).exists()
        ended.update(status=ReplayRun.Status.QUEUED, error="", started_at=None, finished_at=None)
        run.refresh_from_db()
    return run


@pytest.mark.parametrize(
    ("url", "agent_address"),
    [
        ("http://169.254.169.254", "169.254.169.254"),
        ("http://[fd00:ec2::254]", "10.0.0.7"),
        ("http://metadata.google.internal", "10.0.0.7"),
        ("http://10.0.0.7:9000/latest/meta-data", "10.0.0.7"),
        ("LOOPBACK", "10.0.0.7"),  # the listener itself: the control plane's loopback, reported by a remote node
        ("LOOPBACK", None),  # a row stored before the node's address was recorded
    ],
)
def test_a_replay_start_checks_the_stored_gateway_again_and_sends_nothing(
    users, replay_world, listeners, settings, url, agent_address
):
    listener = listeners()
    online(listener.url if url == "LOOPBACK" else url, agent_address)
    run = queued_run(users, replay_world, settings)

    assert replay_start(run.pk) == []

    run.refresh_from_db()
    assert run.status == ReplayRun.Status.FAILED and run.error.startswith("pool: "), run.error
    assert "gpu-1 (gateway_url: " in run.error
    assert run.client_key_id is None and run.targets == []
    assert listener.requests == []


def test_a_name_the_operator_allows_is_resolved_before_sending(users, replay_world, settings):
    settings.NODE_GATEWAY_ALLOWED = ["*.invalid"]
    online("http://gpu-1.invalid:9000", "10.0.0.7")
    run = queued_run(users, replay_world, settings)
    replay_start(run.pk)
    run.refresh_from_db()
    assert run.status == ReplayRun.Status.FAILED and "gpu-1.invalid does not resolve" in run.error


def test_the_sender_checks_each_stored_target_again_before_its_first_request(users, replay_world, listeners, settings):
    listener = listeners()
    run = queued_run(users, replay_world, settings)
    # Targets as stored by a start that accepted them (the node at loopback then); the row now says it is remote.
    ReplayRun.objects.filter(pk=run.pk).update(
        status=ReplayRun.Status.RUNNING,
        shares=1,
        schedule_start=0,
        targets=[{"name": "gpu-1", "url": listener.url, "model": "chat", "agent": "10.0.0.7"}],
    )

    replay_share(run.pk, 0, "cpk_replay-key")

    run.refresh_from_db()
    assert run.status == ReplayRun.Status.FAILED and run.shares_finished == 1
    assert run.error.startswith("share 0: nodes: gpu-1: gateway_url: 127.0.0.1 is the control plane's own host")
    assert listener.requests == [] and not ReplayRequest.objects.filter(run=run).exists()


def test_neither_the_key_check_nor_the_sender_follows_a_redirect(listeners):
    elsewhere = listeners()
    gateway = listeners(redirect_to=elsewhere.url)

    with pytest.raises(StartFailed, match="did not accept"):
        wait_for_key([{"name": "gpu-1", "url": gateway.url}], "cpk_replay-key", timeout_s=0, cancelled=lambda: False)

    async def one_chat() -> Outcome:
        outcome = Outcome(seq=0, due_s=0.0)
        shot = Shot(0, 0.0, gateway.url, {"model": "chat", "messages": [{"role": "user", "content": "my card"}]})
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer cpk_replay-key"}) as session:
            await chat_once(session, shot, outcome, time.monotonic())
        return outcome

    outcome = asyncio.run(one_chat())

    assert outcome.status_code == 307
    assert [(method, path) for method, path, *_ in gateway.requests] == [
        ("GET", "/v1/models"),
        ("POST", "/v1/chat/completions"),
    ]
    assert elsewhere.requests == []
