"""Guessing passwords and tokens is throttled by maintained libraries: failed logins lock a user name on one client
address out for a while (django-axes: dashboard form and token endpoint), the REST API answers 429 past its rates
(DRF throttles), and an address that keeps failing node-token attempts is refused on the agents' WebSocket (`limits`,
on the real Redis). After the window the legitimate user gets in."""

import asyncio
import random
import time
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from controlplane.asgi import application
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create
from tests.conftest import PASSWORD

# Throttle counters in this process's memory, so these tests neither see nor leave counts in the shared Redis cache.
LOCAL_CACHE = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "throttle-tests"}}
COOLOFF_S = 2


@pytest.fixture
def tight(settings):
    settings.CACHES = LOCAL_CACHE
    settings.AXES_FAILURE_LIMIT = 3
    settings.AXES_COOLOFF_TIME = timedelta(seconds=COOLOFF_S)
    from django.core.cache import cache

    cache.clear()
    return settings


def login(client: Client, username: str, password: str, address: str = "127.0.0.1"):
    return client.post(reverse("dashboard:login"), {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.django_db
def test_the_login_form_locks_a_user_out_after_failures_and_lets_them_in_after_the_cooloff(tight, users):
    client = Client()
    assert [login(client, "sre", "guess-1").status_code, login(client, "sre", "guess-2").status_code] == [200, 200]
    assert login(client, "sre", "guess-3").status_code == 429, "the third failure locks the pair out"
    locked = login(client, "sre", PASSWORD)
    assert locked.status_code == 429, "the right password does not help while locked out"
    assert "_auth_user_id" not in client.session
    # The lockout is for this user name on this address: a colleague, or the same user elsewhere, signs in.
    assert login(Client(), "oncall", PASSWORD).status_code == 302
    assert login(Client(), "sre", PASSWORD, address="192.0.2.7").status_code == 302

    time.sleep(COOLOFF_S + 0.2)
    signed_in = login(client, "sre", PASSWORD)
    assert signed_in.status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.django_db
def test_the_token_endpoint_locks_out_the_same_way(tight, users):
    api = APIClient()

    def issue(password: str):
        return api.post("/api/v1/auth/token/", {"username": "oncall", "password": password}, format="json")

    assert [issue("a").status_code, issue("b").status_code, issue("c").status_code] == [401, 401, 429]
    assert issue(PASSWORD).status_code == 429
    time.sleep(COOLOFF_S + 0.2)
    issued = issue(PASSWORD)
    assert issued.status_code == 201
    assert APIClient(HTTP_AUTHORIZATION=f"Token {issued.json()['token']}").get("/api/v1/me/").status_code == 200


@pytest.mark.django_db
def test_the_api_answers_429_past_the_per_user_rate_and_serves_again_after_the_window(tight, api_for):
    tight.API_THROTTLE_USER = "3/second"
    oncall, sre = api_for("oncall"), api_for("sre")
    assert [oncall.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    refused = oncall.get("/api/v1/me/")
    assert refused.status_code == 429
    assert refused.json()["error"].startswith("Request was throttled")
    assert int(refused["Retry-After"]) >= 1
    assert sre.get("/api/v1/me/").status_code == 200, "per user: another user is not affected"
    time.sleep(1.1)
    assert oncall.get("/api/v1/me/").status_code == 200


@pytest.mark.django_db
def test_anonymous_requests_are_throttled_per_address_but_refused_ones_do_not_count(tight, users):
    tight.API_THROTTLE_ANON = "2/second"
    anonymous = APIClient()
    # Requests refused by authentication or permissions never reach the throttle: they cannot lock anyone out.
    assert {anonymous.get("/api/v1/templates/").status_code for _ in range(5)} == {401}
    body = {"username": "oncall", "password": PASSWORD}
    statuses = [anonymous.post("/api/v1/auth/token/", body, format="json").status_code for _ in range(3)]
    assert statuses == [201, 201, 429]
    other = APIClient(REMOTE_ADDR="192.0.2.8")
    assert other.post("/api/v1/auth/token/", body, format="json").status_code == 201
    time.sleep(1.1)
    assert anonymous.post("/api/v1/auth/token/", body, format="json").status_code == 201


def agent_socket(token: str, address: str) -> WebsocketCommunicator:
    socket = WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])
    socket.scope["client"] = (address, 50000)
    return socket


async def attempt(token: str, address: str) -> bool:
    socket = agent_socket(token, address)
    connected, _ = await socket.connect(timeout=5)
    if connected:
        await socket.disconnect()
    return connected


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_an_address_that_keeps_failing_node_tokens_is_refused_then_let_in_after_the_window(settings, sre):
    settings.AGENT_AUTH_FAILURE_RATE = "3/second"
    assert settings.REDIS_URL, "the production path: counts kept in Redis, shared by every ASGI process"
    _, token = node_create(actor=sre, name="gpu-1", pool=pool_create(actor=sre, name="staging", is_production=False))
    # An address of its own per run: counts in Redis outlive the test database.
    attacker = f"198.51.100.{random.randint(1, 254)}"
    wrong = "cpn_" + "0" * 40

    async def scenario():
        assert [await attempt(wrong, attacker) for _ in range(3)] == [False, False, False]
        refused_valid = await attempt(token, attacker)
        elsewhere = await attempt(token, "203.0.113.9")
        await asyncio.sleep(1.1)
        return refused_valid, elsewhere, await attempt(token, attacker)

    refused_valid, elsewhere, after_window = async_to_sync(scenario)()
    assert refused_valid is False, "over the limit, even the right token is refused from that address"
    assert elsewhere is True, "per address: the node itself, elsewhere, connects"
    assert after_window is True
