"""Schemathesis against a live daphne: every operation of the OpenAPI description, with data as the demo has it.

First as an agent (a spot check: most writes are refused, and the 403s must be documented), then as an admin (every
operation, positive and negative inputs): no 5xx, every status, content type, header and body as documented, 405
for methods a route does not have, 401 without credentials. The operations are read from the served description,
so a new endpoint is fuzzed without being listed here; its path parameters draw on the objects that exist.
Each run's full output lands in test-artifacts/schemathesis-<role>.log.
"""

import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import timedelta
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from django.core.management import call_command
from django.utils import timezone
from rest_framework.authtoken.models import Token

from controlplane.accounts.roles import Role
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import AlertGroup
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

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.subprocess]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
# The users the fuzzer acts as are left out of the known path values, so it never demotes or deactivates itself.
FUZZ_USERS = {Role.ADMIN: "fuzz-admin", Role.AGENT: "fuzz-agent"}
# Every check by name but two. `positive_data_acceptance` expects any schema-valid body to succeed: domain rules (a
# password's strength, a document's semantics, a name that must exist) rightly refuse some with a 400.
# `max_response_time`, which `--checks=all` turns on with a 10 s limit, is a stopwatch: it reads the machine's load,
# not the API (speed is make bench's), and the CLI cannot exclude it, so the checks are listed instead of "all".
CHECKS = [
    "--checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
    "response_schema_conformance,negative_data_rejection,missing_required_header,unsupported_method,"
    "allow_header_conformance,use_after_free,ensure_resource_availability,ignored_auth,object_level_authorization"
]
# Deterministic generation (no seed to record, the same cases every run) and a bound per operation.
COMMON_ARGS = [
    "--generation-deterministic",
    "--no-shrink",
    "--workers=1",
    "--request-timeout=30",
    "--no-color",
    "--suppress-health-check=all",
]
ADMIN_ARGS = ["--max-examples=8"]
AGENT_ARGS = ["--phases=fuzzing", "--max-examples=3"]
# Collections whose rows name their objects by another key than the path parameter.
ROW_KEYS = {"/api/v1/alert-rules/": {"name": "rule"}}


@pytest.fixture
def demo_world():
    """The demo's data (seed_demo) and more of everything: a second template version on staging, a node per pool
    with a command, an override, a trained intent model, a firing incident and a silence; a token per fuzzing user."""
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
    evaluate()
    evaluate(now=timezone.now() + timedelta(minutes=10))  # gpu-2 is lost: its alert fires, an incident opens
    assert AlertGroup.objects.filter(state=AlertGroup.State.FIRING).exists()
    silence_create(actor=admin, node="gpu-9", duration_minutes=60, reason="maintenance")
    return tokens


@pytest.fixture
def server(demo_world, tmp_path):
    # Training runs go to the broker instead of threads of this server: the fuzzer queues many, nobody runs them.
    daphne = Daphne(tmp_path, extra_env={"CELERY_TASK_ALWAYS_EAGER": "0"})
    daphne.start()
    yield daphne
    daphne.stop()
    from controlplane.celery import app

    app.control.purge()


def known_path_values(client: httpx.Client, schema: dict) -> dict[str, dict[str, list]]:
    """For each path with parameters, values that name existing objects, read from the collection each parameter
    indexes: `/templates/{name}/versions/{number}/` takes names from GET /templates/ and numbers from
    GET /templates/<name>/versions/. A path whose collection has no GET (/metrics/) takes the names of every
    pool and node, and `fleet`."""
    pages: dict[str, list[dict]] = {}

    def rows(url: str) -> list[dict]:
        if url not in pages:
            response = client.get(url)
            body = response.json() if response.status_code == 200 else []
            found = body.get("results", []) if isinstance(body, dict) else body
            pages[url] = [row for row in found if isinstance(row, dict)]
        return pages[url]

    entities = [row["name"] for url in ("/api/v1/pools/", "/api/v1/nodes/") for row in rows(url)] + ["fleet"]
    known: dict[str, dict[str, list]] = {}
    for path in schema["paths"]:
        segments = path.split("/")
        bound_prefixes: list[dict] = [{}]
        values: dict[str, list] = {}
        for index, segment in enumerate(segments):
            if not (segment.startswith("{") and segment.endswith("}")):
                continue
            param = segment[1:-1]
            collection = "/".join(segments[:index]) + "/"
            if "get" not in schema["paths"].get(collection, {}):
                values[param] = entities if param == "name" else []
                continue
            key = ROW_KEYS.get(collection, {}).get(param, param)
            found = [
                {**bound, param: row[key]}
                for bound in bound_prefixes[:3]
                for row in rows(collection.format(**bound))
                if row.get(key) is not None and row[key] not in FUZZ_USERS.values()
            ]
            values[param] = list(dict.fromkeys(b[param] for b in found))
            bound_prefixes = found
        if any(values.values()):
            known[path] = {param: v for param, v in values.items() if v}
    return known


def run_schemathesis(role: str, server, token: str, known: dict, tmp_path: Path, *args: str) -> set[str]:
    """Run the CLI; return the operations it reports as tested (from its JUnit report)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    known_file = ARTIFACTS / "schemathesis-known-values.json"
    known_file.write_text(json.dumps(known, indent=1, sort_keys=True))
    config = tmp_path / "schemathesis.toml"
    config.write_text("[cache]\nenabled = false\n")  # the same cases every run, nothing replayed from an earlier one
    report = tmp_path / f"schemathesis-{role}.xml"
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.api.schemathesis_hooks",
        "FUZZ_KNOWN_PATH_VALUES": str(known_file),
    }
    command = [
        str(SCHEMATHESIS),
        f"--config-file={config}",
        "run",
        f"{server.url}/api/v1/schema/",
        f"--header=Authorization: Token {token}",
        "--report=junit",
        f"--report-junit-path={report}",
        *COMMON_ARGS,
        *CHECKS,
        *args,
    ]
    started = time.monotonic()
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    log = ARTIFACTS / f"schemathesis-{role}.log"
    log.write_text(result.stdout + result.stderr)
    print(f"schemathesis as {role}: {time.monotonic() - started:.0f} s, exit {result.returncode}, output in {log}")
    assert result.returncode == 0, (result.stdout + result.stderr)[-20000:]
    return {case.get("name") for case in ET.parse(report).iter("testcase")} - {"Stateful tests"}


def test_every_operation_answers_as_documented(server, demo_world, tmp_path):
    admin = {"Authorization": f"Token {demo_world[Role.ADMIN]}"}
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as client:
        schema = yaml.safe_load(client.get("/api/v1/schema/").text)
        known = known_path_values(client, schema)
    operations = {f"{method.upper()} {path}" for path, item in schema["paths"].items() for method in item}
    assert known["/api/v1/templates/{name}/versions/{number}/"] == {"name": ["chat-default"], "number": [2, 1]}
    assert "staging" in known["/api/v1/metrics/{scope}/{name}/"]["name"]

    tested = run_schemathesis("agent", server, demo_world[Role.AGENT], known, tmp_path, *AGENT_ARGS)
    assert tested == operations
    tested = run_schemathesis("admin", server, demo_world[Role.ADMIN], known, tmp_path, *ADMIN_ARGS)
    assert tested == operations
