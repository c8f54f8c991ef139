"""Embedded mode under concurrent writers: publishes and degradation switches (until each kind has had WRITES accepted),
with agents' warmup progress, heartbeats, ACKs and samples all along, against the real embedded server (`run_periodic
--serve` on an SQLite file in WAL mode, in-memory channel layer, eager tasks), driven over HTTP and WebSocket by
threads.

Nothing may answer 5xx, no agent connection may be closed by the server, every write the server accepted must be stored
(counted afterwards against what was sent), and every background loop must still be alive at the end.
"""

import asyncio
import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import aiohttp
import pytest
from django.conf import settings

from tests.live_server import ROOT, free_port, wait_for_port
from tests.metrics.conftest import sample

pytestmark = pytest.mark.sqlite

WRITES = 150  # publishes and switches each (about 20 s of writers here): they go on until both counts are reached
WRITES_WITHIN_S = 300  # a wait, not a measurement: a hung writer fails the test instead of stalling the suite
AGENTS = 6
PUBLISHERS = 2
SWITCHERS = 2
WARMUP_EVERY_S = 0.2
SAMPLE_EVERY_S = 1.0
HEARTBEAT_EVERY_S = 2.0
PUBLISH_POOLS = ("race-pub-a", "race-pub-b")
DEGRADE_POOL = "race-degrade"
AGENT_POOL = "race-agents"
VERSIONS = (1, 2, 3)


class Api:
    """Token-authenticated JSON calls; every status is counted, a 5xx or a failed connection kept with its body."""

    def __init__(self, base: str, token: str = ""):
        self.base, self.token = base, token
        self.statuses: Counter = Counter()
        self.failures: list[str] = []

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.base}{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except OSError as exc:
            self.failures.append(f"{method} {path}: {exc}")
            self.statuses["connection-error"] += 1
            return 0, {}
        self.statuses[status] += 1
        if status >= 500:
            self.failures.append(f"{method} {path}: {status} {raw[:300]!r}")
        try:
            return status, json.loads(raw) if raw else {}
        except ValueError:
            return status, {}

    def all_pages(self, path: str) -> list[dict]:
        results, url = [], path
        while url:
            status, page = self.call("GET", url)
            assert status == 200, (url, page)
            results.extend(page["results"])
            url = page.get("next") and page["next"].removeprefix(self.base)
        return results


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    """`make run`'s server without the demo fleet: migrate, seed, then run_periodic --serve on a fresh var dir."""
    var = tmp_path_factory.mktemp("sqlite-var")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    # This run is a load test of the database, not of the API's rate limits: the per-user throttle is lifted.
    env.update(
        CONTROLPLANE_VAR_DIR=str(var), DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost", API_THROTTLE_USER="100000/minute"
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    manage = [sys.executable, "manage.py"]
    for command in (["migrate", "--noinput", "-v0"], ["seed_demo"]):
        subprocess.run(manage + command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    port = free_port()
    log_path = var / "server.log"
    with open(log_path, "w") as out:
        server = subprocess.Popen(
            [*manage, "run_periodic", "--serve", f"127.0.0.1:{port}"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, 60, server)
        yield f"http://127.0.0.1:{port}", var, log_path
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _token(base: str, username: str) -> str:
    status, body = Api(base).call(
        "POST", "/api/v1/auth/token/", {"username": username, "password": f"{username}-demo-pass"}
    )
    assert status in (200, 201), body
    return body["token"]


def _set_up(admin: Api) -> dict[str, str]:
    """Versions 2 and 3 of chat-default, the race's pools, and the agents' nodes; returns node -> token."""
    for number, strict in ((2, 0.2), (3, 0.25)):
        document = {"inference_params": {"temperature": {"strict": strict}, "max_tokens": {"whitelist": []}}}
        status, body = admin.call(
            "POST", "/api/v1/templates/chat-default/versions/", {"base_version": number - 1, "document": document}
        )
        assert status == 201 and body["number"] == number, body
    for pool in (*PUBLISH_POOLS, DEGRADE_POOL, AGENT_POOL):
        status, body = admin.call("POST", "/api/v1/pools/", {"name": pool, "is_production": False})
        assert status == 201, body
    tokens = {}
    for i in range(1, AGENTS + 1):
        status, body = admin.call("POST", "/api/v1/nodes/", {"name": f"race-node-{i}", "pool": AGENT_POOL})
        assert status == 201, body
        tokens[f"race-node-{i}"] = body["token"]
    return tokens


class Agents:
    """Agent sockets in one thread's event loop: hello, then warmup progress, samples and heartbeats; ACK pushes."""

    def __init__(self, ws_url: str, tokens: dict[str, str]):
        self.ws_url, self.tokens = ws_url, tokens
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.sent: Counter = Counter()
        self.samples_t: dict[str, list[float]] = {node: [] for node in tokens}
        self.last_done: dict[str, int] = {}
        self.acked: Counter = Counter()
        self.closed_by_server: list[str] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            sockets = {}
            for node, token in self.tokens.items():
                ws = await session.ws_connect(
                    self.ws_url, headers={"Authorization": f"Bearer {token}"}, max_msg_size=0, autoping=True
                )
                assert (await ws.receive_json())["type"] == "welcome"
                await ws.send_json(_hello(node))
                sockets[node] = ws
            self.ready.set()
            readers = [asyncio.create_task(self._read(node, ws)) for node, ws in sockets.items()]
            try:
                await asyncio.gather(*(self._drive(node, ws) for node, ws in sockets.items()))
            except Exception as exc:  # reported by the test, not swallowed
                self.errors.append(repr(exc))
            await asyncio.sleep(2)  # the last messages' answers, before the sockets close
            for ws in sockets.values():
                with contextlib.suppress(Exception):
                    await ws.close()
            for reader in readers:
                reader.cancel()

    async def _drive(self, node: str, ws) -> None:
        started = time.monotonic()
        done = 0
        next_sample = next_heartbeat = started
        while not self.stop.is_set():
            now = time.monotonic()
            done += 1
            await ws.send_json(_warmup(state="running", done=done))
            self.sent["warmup_progress"] += 1
            if now >= next_sample:
                message = sample(t=round(time.time(), 3))
                await ws.send_json(message)
                self.samples_t[node].append(message["t"])
                self.sent["sample"] += 1
                next_sample += SAMPLE_EVERY_S
            if now >= next_heartbeat:
                await ws.send_json({"type": "heartbeat", "status": "online", "in_flight": 0})
                self.sent["heartbeat"] += 1
                next_heartbeat += HEARTBEAT_EVERY_S
            await asyncio.sleep(WARMUP_EVERY_S)
        await ws.send_json(_warmup(state="passed", done=done + 1))
        self.sent["warmup_progress"] += 1
        self.last_done[node] = done + 1

    async def _read(self, node: str, ws) -> None:
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            body = json.loads(message.data)
            if body.get("type") == "config":
                await ws.send_json({"type": "ack", "hash": body["hash"], "version": body["version"]})
                self.acked[node] += 1
        if not self.stop.is_set():
            self.closed_by_server.append(f"{node}: close code {ws.close_code}")


def _hello(node: str) -> dict:
    return {
        "type": "hello",
        "node": node,
        "hostname": "race-host",
        "backend": "simulator",
        "engine_version": "simulated",
        "agent_version": "test",
        "gpus": [],
        "status": "online",
        "applied_version": None,
        "applied_hash": "",
        "policy_hash": "",
        "intent_model_sha256": "",
        "warmup_sha256": "",
        "warmup": {},
    }


def _warmup(*, state: str, done: int) -> dict:
    return {
        "type": "warmup_progress",
        "state": state,
        "trigger": "start",
        "done": done,
        "total": 100_000,
        "p50": 0.2,
        "p99": 0.9,
        "concurrency": 2,
    }


def _publisher(api: Api, stop: threading.Event, accepted: list, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        pool, version = rng.choice(PUBLISH_POOLS), rng.choice(VERSIONS)
        body = {"template": "chat-default", "version": version, "reason": f"race {seed}"}
        status, answer = api.call("POST", f"/api/v1/pools/{pool}/publish/", body)
        if status == 201:
            accepted.append((pool, answer["id"]))
        else:
            _expect_conflict(api, status, answer)


def _switcher(api: Api, stop: threading.Event, accepted: list, seed: int) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        active = rng.random() < 0.5
        status, answer = api.call(
            "POST", f"/api/v1/pools/{DEGRADE_POOL}/degradation/", {"active": active, "reason": f"race {seed}"}
        )
        if status == 200:
            accepted.append(active)
        else:
            _expect_conflict(api, status, answer)


def _expect_conflict(api: Api, status: int, answer: dict) -> None:
    """A refused write is a 409 in the API's error shape (5xx and lost connections are counted by `Api.call`)."""
    if 0 < status < 500 and (status != 409 or not {"error", "detail"} <= set(answer)):
        api.failures.append(f"unexpected {status}: {answer}")


def test_concurrent_writers_lose_nothing_and_answer_no_5xx(embedded):
    base, _, log_path = embedded
    admin = Api(base, _token(base, "admin"))
    tokens = _set_up(admin)
    status, body = admin.call(
        "POST",
        f"/api/v1/pools/{AGENT_POOL}/publish/",
        {"template": "chat-default", "version": 1, "reason": "race: agents' config"},
    )
    assert status == 201, body
    sre_token = _token(base, "sre")

    agents = Agents(base.replace("http", "ws") + "/ws/agent/", tokens)
    agents.thread.start()
    assert agents.ready.wait(30), "the agents did not connect"
    stop = threading.Event()
    published: list = []
    switched: list = []
    apis = [Api(base, sre_token) for _ in range(PUBLISHERS + SWITCHERS)]
    threads = [threading.Thread(target=_publisher, args=(apis[i], stop, published, i)) for i in range(PUBLISHERS)]
    threads += [
        threading.Thread(target=_switcher, args=(apis[PUBLISHERS + i], stop, switched, i)) for i in range(SWITCHERS)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    deadline = started + WRITES_WITHIN_S
    while (len(published) < WRITES or len(switched) < WRITES) and time.monotonic() < deadline:
        time.sleep(0.5)
    stop.set()
    agents.stop.set()
    for thread in threads:
        thread.join(timeout=90)
    agents.thread.join(timeout=60)
    duration = time.monotonic() - started
    assert not any(t.is_alive() for t in threads) and not agents.thread.is_alive(), "a writer hung"

    statuses = sum((api.statuses for api in apis), Counter())
    failures = [failure for api in apis for failure in api.failures]
    print(
        f"\n{duration:.0f} s: HTTP {dict(statuses)} "
        f"({len(published)} publishes and {len(switched)} switches accepted); "
        f"agent messages {dict(agents.sent)}; ACKs {sum(agents.acked.values())}"
    )
    assert not failures, failures[:5]
    assert not agents.errors and not agents.closed_by_server, (agents.errors, agents.closed_by_server)
    assert len(published) >= WRITES and len(switched) >= WRITES, (len(published), len(switched))

    check = Api(base, sre_token)
    # Publishes: one release and one audit entry per 201, in one unbroken chain per pool.
    for pool in PUBLISH_POOLS:
        releases = sorted(check.all_pages(f"/api/v1/pools/{pool}/releases/"), key=lambda r: r["id"])
        assert sorted(r["id"] for r in releases) == sorted(i for p, i in published if p == pool)
        for earlier, later in itertools.pairwise(releases):
            assert later["previous_version"]["number"] == earlier["version"]["number"], (earlier, later)
        audited = check.all_pages(f"/api/v1/audit/?action=pool.publish&target={pool}")
        assert len(audited) == len(releases)
    # Degradation: one audit entry per 200, alternating on and off, as many as the switches accepted.
    entries = check.all_pages(f"/api/v1/audit/?target={DEGRADE_POOL}")
    switches = [e["action"] for e in sorted(entries, key=lambda e: e["id"]) if e["action"].startswith("pool.degrade")]
    assert len(switches) == len(switched)
    assert switches == ["pool.degrade", "pool.degrade_end"] * (len(switches) // 2) + ["pool.degrade"] * (
        len(switches) % 2
    )
    status, state = check.call("GET", f"/api/v1/pools/{DEGRADE_POOL}/degradation/")
    assert status == 200 and state["active"] == (len(switches) % 2 == 1), state
    # Agents: the last warmup report of each node is what the node shows; every ACK stored; every sample kept.
    for node in tokens:
        status, summary = check.call("GET", f"/api/v1/nodes/{node}/")
        assert status == 200
        assert (summary["warmup"]["state"], summary["warmup"]["done"]) == ("passed", agents.last_done[node]), node
        assert summary["applied"]["number"] == 1 and summary["in_sync"], summary
    deadline = time.monotonic() + 15
    while True:
        stored = {node: _sample_times(check, node, started) for node in tokens}
        if all(len(stored[node]) == len(agents.samples_t[node]) for node in tokens) or time.monotonic() > deadline:
            break
        time.sleep(1)
    for node in tokens:
        assert stored[node] == sorted(agents.samples_t[node]), node

    # Every loop alive: the periodic entries and the agents' loops are ok, none failed along the way.
    with urllib.request.urlopen(f"{base}/healthz", timeout=30) as response:
        health = json.loads(response.read())
    loops = {loop["loop"]: loop for loop in health["loops"]}
    expected = {
        *settings.CELERY_BEAT_SCHEDULE,
        "agent-consumer",
        "agent-acks",
        "agent-heartbeats",
        "agent-warmup-progress",
    }
    expected |= {"metrics-ingest", "metrics-store"}
    assert expected <= set(loops), sorted(loops)
    for name in expected:
        assert loops[name]["state"] == "ok" and loops[name]["failures"] == 0, loops[name]
        assert loops[name]["last_success_at"] is not None, loops[name]
    log = log_path.read_text()
    assert "Traceback" not in log and "database is locked" not in log, log[-3000:]
    assert "succeeded in" not in log, "a log line per task run"


def _sample_times(api: Api, node: str, started: float) -> list[float]:
    since = time.time() - (time.monotonic() - started) - 30
    status, history = api.call(
        "GET", f"/api/v1/metrics/node/{node}/?metric=qps&since={since:.0f}&until={time.time() + 30:.0f}"
    )
    assert status == 200, history
    return sorted(round(t, 3) for t in history["t"])
