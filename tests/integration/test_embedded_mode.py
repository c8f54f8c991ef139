"""`make run`'s embedded mode on a machine with no services: SQLite, in-memory layer, eager tasks."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory):
    var = tmp_path_factory.mktemp("embedded-var")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env["CONTROLPLANE_VAR_DIR"] = str(var)
    manage = [sys.executable, "manage.py"]
    for command in (["migrate", "--noinput", "-v0"], ["seed_demo"], ["seed_demo"]):
        subprocess.run(manage + command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    port = _free_port()
    log = var / "daphne.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "controlplane.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}", var
    process.terminate()
    process.wait(timeout=10)


def test_fresh_start_serves_the_seeded_dashboard_and_api(embedded_server):
    base, var = embedded_server
    assert (var / "controlplane.sqlite3").exists()
    jar = CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{base}/login/").read()
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    form = urlencode({"username": "sre", "password": "sre-demo-pass", "csrfmiddlewaretoken": csrf}).encode()
    request = urllib.request.Request(f"{base}/login/", data=form, headers={"Referer": f"{base}/login/"})
    page = opener.open(request).read().decode()
    assert "prod-main" in page and "staging" in page

    token_request = urllib.request.Request(
        f"{base}/api/v1/auth/token/",
        data=json.dumps({"username": "agent", "password": "agent-demo-pass"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    token = json.loads(urllib.request.urlopen(token_request).read())["token"]

    def get(path: str) -> bytes:
        request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Token {token}"})
        return urllib.request.urlopen(request).read()

    export = get("/api/v1/templates/chat-default/versions/1/export/?format=yaml")
    assert export == (ROOT / "controlplane/params/fixtures/seed_inference_params.yaml").read_bytes()
    pools = json.loads(get("/api/v1/pools/"))
    assert {p["name"]: p["is_production"] for p in pools["results"]} == {"prod-main": True, "staging": False}


def test_training_an_intent_model_runs_beside_the_server_without_blocking_the_request(embedded_server):
    """Eager Celery in embedded mode: the training request returns at once and the model trains in the background."""
    base, _ = embedded_server
    token_request = urllib.request.Request(
        f"{base}/api/v1/auth/token/",
        data=json.dumps({"username": "agent", "password": "agent-demo-pass"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    token = json.loads(urllib.request.urlopen(token_request).read())["token"]

    def call(path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{base}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        )
        return json.loads(urllib.request.urlopen(request, timeout=30).read())

    seeded = call("/api/v1/intent-datasets/shop-intents/")
    assert (seeded["row_count"], seeded["duplicates_removed"], seeded["has_templates"]) == (21_558, 42, True)
    # An epoch over 21,558 messages, and one for calibration, take seconds; the request must not wait for them: it
    # answers while the model is still queued or training.
    queued = call("/api/v1/intent-datasets/shop-intents/models/", {"epochs": 1})
    assert queued["status"] in ("queued", "training")
    deadline = time.monotonic() + 180
    detail = queued
    while detail["status"] not in ("succeeded", "failed") and time.monotonic() < deadline:
        time.sleep(0.5)
        detail = call(f"/api/v1/intent-datasets/shop-intents/models/{queued['number']}/")
    assert detail["status"] == "succeeded", detail["error"]
    assert detail["evaluation"]["split"] == "template"
    assert detail["evaluation"]["held_out"] == 4314
