"""Schemathesis against a live daphne: every operation of the OpenAPI description, with data as the demo has it.

As an agent (a spot check: most writes are refused, and the 403s must be documented) and then as an admin (every
operation, positive and negative inputs): no 5xx, every status, content type, header and body as documented, 405
for methods a route does not have, 401 without credentials. The operations are read from the served description,
so a new endpoint is fuzzed without being listed here; its path parameters draw on the objects that exist
(`tests/api/schemathesis_hooks.py`).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token

from controlplane.accounts.roles import Role
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.services.lifecycle import silence_create
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_command_request, node_create
from controlplane.nodes.services.pools import pool_publish
from controlplane.operations.services import override_set
from controlplane.params.models import ParameterTemplate
from controlplane.params.services.templates import template_version_create
from tests.conftest import make_user
from tests.datasets.factories import easy_dataset, train_now
from tests.live_server import Daphne

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# The users the fuzzer acts as are left out of the known path values, so it never demotes or deactivates itself.
FUZZ_USERS = {Role.ADMIN: "fuzz-admin", Role.AGENT: "fuzz-agent"}
# Deterministic generation (no seed to record) and a bound per operation: the run takes a few minutes on 2 cores.
COMMON_ARGS = [
    "--generation-deterministic",
    "--no-shrink",
    "--workers=1",
    "--request-timeout=30",
    "--no-color",
    "--suppress-health-check=all",
]


@pytest.fixture
def demo_world(tmp_path):
    """The demo's data (seed_demo) and more of everything: a second template version on staging, a node per pool
    with a command, an override, a trained intent model, an incident and a silence; a token per fuzzing user."""
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    tokens = {role: Token.objects.create(user=make_user(role, name)).key for role, name in FUZZ_USERS.items()}
    admin = make_user(Role.ADMIN, "ops")
    template = ParameterTemplate.objects.get(name="chat-default")
    v1 = template.versions.get(number=1)
    document = {"inference_params": {**v1.params, "temperature": {**v1.params["temperature"], "strict": 0.25}}}
    v2 = template_version_create(actor=admin, template=template, document=document, base_number=1, comment="cooler")
    staging, prod = Pool.objects.get(name="staging"), Pool.objects.get(name="prod-main")
    pool_publish(actor=admin, pool=staging, version=v2, reason="cooler strict tier")
    for name, pool in (("gpu-1", staging), ("gpu-2", prod)):
        node_create(actor=admin, name=name, pool=pool)
    EngineNode.objects.update(is_connected=True, last_seen_at=timezone.now())
    node_command_request(actor=admin, node=EngineNode.objects.get(name="gpu-1"), op="drain", reason="maintenance")
    override_set(actor=admin, pool=staging, conversation="conv-1", tier="strict", reason="refund dispute")
    train_now(admin, easy_dataset(admin, "shop", templates_per_label=2), epochs=1)
    EngineNode.objects.filter(name="gpu-2").update(is_connected=False, last_seen_at=None)
    evaluate()  # gpu-2 is lost: an alert and its incident
    silence_create(actor=admin, node="gpu-9", duration_minutes=60, reason="maintenance")
    return tokens


@pytest.fixture
def server(demo_world, tmp_path):
    # Training runs go to the broker instead of threads of this server: the fuzzer queues many.
    daphne = Daphne(tmp_path, extra_env={"CELERY_TASK_ALWAYS_EAGER": "0"})
    daphne.start()
    yield daphne
    daphne.stop()
    from controlplane.celery import app

    app.control.purge()


def known_path_values(base_url: str, token: str, schema: dict) -> dict[str, dict[str, list]]:
    """For each path with parameters, values that name existing objects, read from the collection each parameter
    indexes: `/templates/{name}/versions/{number}/` takes names from GET /templates/ and numbers from
    GET /templates/<name>/versions/. A path whose collection has no GET (e.g. /metrics/) keeps random values."""
    known: dict[str, dict[str, list]] = {}
    headers = {"Authorization": f"Token {token}"}
    pages: dict[str, list[dict]] = {}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
        for path in schema["paths"]:
            prefixes = [{}]
            values: dict[str, set] = {}
            segments = path.split("/")
            for index, segment in enumerate(segments):
                if not (segment.startswith("{") and segment.endswith("}")):
                    continue
                param = segment[1:-1]
                collection = "/".join(segments[:index]) + "/"
                if collection not in schema["paths"] or "get" not in schema["paths"][collection]:
                    break
                found = []
                for bound in prefixes[:3]:
                    url = collection.format(**bound)
                    if url not in pages:
                        pages[url] = _rows(client.get(url))
                    for row in pages[url]:
                        value = row.get("id" if param == "pk" else param)
                        if value is not None and value not in FUZZ_USERS.values():
                            found.append({**bound, param: value})
                values[param] = {row[param] for row in found}
                prefixes = found
            if values:
                known[path] = {param: sorted(v, key=str) for param, v in values.items() if v}
    return known


def _rows(response) -> list[dict]:
    if response.status_code != 200:
        return []
    body = response.json()
    rows = body.get("results", []) if isinstance(body, dict) else body
    return [row for row in rows if isinstance(row, dict)]


def run_schemathesis(name: str, server, token: str, known: dict, tmp_path: Path, *args: str):
    known_file = tmp_path / "known.json"
    known_file.write_text(json.dumps(known))
    report = tmp_path / f"report-{time.monotonic_ns()}.xml"
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "FUZZ_KNOWN_PATH_VALUES": str(known_file),
    }
    command = [
        str(SCHEMATHESIS),
        "run",
        f"{server.url}/api/v1/schema/",
        f"--header=Authorization: Token {token}",
        "--report=junit",
        f"--report-junit-path={report}",
        *COMMON_ARGS,
        *args,
    ]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    log = ARTIFACTS / f"schemathesis-{name}.log"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr)
    print(f"schemathesis as {name}: {time.monotonic() - started:.0f} s, exit {result.returncode}, output in {log}")
    return result


def test_every_operation_answers_as_documented(server, demo_world, tmp_path):
    schema = yaml.safe_load(
        httpx.get(f"{server.url}/api/v1/schema/", headers={"Authorization": f"Token {demo_world[Role.ADMIN]}"}).text
    )
    known = known_path_values(server.url, demo_world[Role.ADMIN], schema)
    result = run_schemathesis(
        "admin",
        server,
        demo_world[Role.ADMIN],
        known,
        tmp_path,
        "--checks=all",
        "--exclude-checks=positive_data_acceptance",
        *os.environ.get("FUZZ_EXTRA_ARGS", "--max-examples=10").split(),
    )
    assert result.returncode == 0, result.stdout[-20000:]
