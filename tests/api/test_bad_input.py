"""Bad input gets a 400 whose body names the field path, and stores nothing."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.helpers import error_paths, state_snapshot

pytestmark = pytest.mark.django_db

VERSIONS = "/api/v1/templates/chat/versions/"


def doc(**sections) -> dict:
    return {"inference_params": sections}


def assert_refused(response, before, path: str, message: str = "") -> dict:
    """400, the headline and the detail both name `path`, and no table changed."""
    assert response.status_code == 400, response.content[:500]
    body = response.json()
    assert path in error_paths(body), body
    assert path in body["error"], body
    assert message in body["error"], body
    assert state_snapshot() == before
    return body


DOCUMENT_CASES = {
    "unknown top-level key": ({"inference_params": {}, "extras": {}}, "extras", "unknown field"),
    "unknown section": (doc(sampling={"top_p": 0.9}), "sampling", "unknown section"),
    "unknown field": (doc(temperature={"hot": 1.5}), "temperature.hot", "unknown field"),
    "string for a number": (doc(temperature={"strict": "low"}), "temperature.strict", "must be a number"),
    "float for an integer": (doc(batch={"max_size": 8.5}), "batch.max_size", "must be an integer"),
    "string for a boolean": (doc(speculative={"enabled": "yes"}), "speculative.enabled", "must be true or false"),
    "list for a mapping": (doc(intent={"tiers": ["strict"]}), "intent.tiers", "must map intent labels"),
    "temperature out of range": (
        doc(temperature={"strict": 5}),
        "temperature.strict",
        "temperature.strict: must be between 0 and 2",
    ),
    "token count out of range": (doc(max_tokens={"default": 0}), "max_tokens.default", "must be between 1 and 32768"),
    "bad regex": (
        doc(temperature={"strict_patterns": [r"\d+", "(unclosed"]}),
        "temperature.strict_patterns[1]",
        "is not a valid regular expression",
    ),
    "batch min above max": (
        doc(batch={"min_size": 9, "max_size": 8}),
        "batch.min_size",
        "must be at most batch.max_size (8)",
    ),
    "model not in the catalog": (
        doc(engine={"model": "evil-model"}),
        "engine.model",
        "'evil-model' is not in the model catalog",
    ),
    "model that reads like a flag": (
        doc(engine={"model": "--trust-remote-code.x"}),
        "engine.model",
        "must name a model catalog entry",
    ),
    "exit threshold not below load threshold": (
        doc(degradation={"load_threshold": 0.7, "exit_threshold": 0.7}),
        "degradation.exit_threshold",
        "must be below degradation.load_threshold (0.7)",
    ),
    "unknown whitelist": (
        doc(max_tokens={"whitelist": ["legal", "vip"]}),
        "max_tokens.whitelist[1]",
        "unknown whitelist 'vip'",
    ),
}


@pytest.mark.parametrize(("document", "path", "message"), DOCUMENT_CASES.values(), ids=DOCUMENT_CASES.keys())
def test_invalid_documents_are_refused(world, api_for, document, path, message):
    before = state_snapshot()
    response = api_for("agent").post(VERSIONS, {"base_version": 2, "document": document}, format="json")
    body = assert_refused(response, before, path, message)
    assert body["code"] == "document_invalid"


def test_each_field_error_carries_its_apply_tag(world, api_for):
    document = doc(temperature={"strict": 5}, engine={"max_num_seqs": 0})
    response = api_for("agent").post(VERSIONS, {"base_version": 2, "document": document}, format="json")
    assert response.status_code == 400
    assert [(e["path"], e["apply"]) for e in response.json()["detail"]] == [
        ("temperature.strict", "hot"),
        ("engine.max_num_seqs", "cold"),
    ]


TEXT_CASES = {
    "invalid YAML": ("yaml", "inference_params:\n  temperature: [0.3, 0.7\n", "(document)", "invalid YAML at line 3"),
    "YAML that is not a mapping": ("yaml", "- just\n- a list\n", "(document)", "must be a mapping"),
    "invalid JSON": ("json", '{"inference_params": {"temperature": }}', "(document)", "invalid JSON at line 1"),
    "duplicate YAML key": (
        "yaml",
        "inference_params:\n  temperature:\n    strict: 0.3\n    strict: 0.9\n",
        "temperature.strict",
        "duplicate key at line 4",
    ),
    "duplicate JSON key": (
        "json",
        '{"inference_params": {"batch": {"max_size": 8, "max_size": 4}}}',
        "batch.max_size",
        "duplicate key",
    ),
    "YAML alias": (
        "yaml",
        "inference_params:\n  max_tokens:\n    whitelist: &w [legal]\n  intent:\n    tiers: *w\n",
        "intent.tiers",
        "YAML aliases (*name) are not allowed",
    ),
    "deeply nested JSON": ("json", "[" * 100_000 + "]" * 100_000, "(document)", "nested too deeply"),
    "YAML out of range": (
        "yaml",
        "inference_params:\n  temperature:\n    strict: 5\n",
        "temperature.strict",
        "between",
    ),
}


@pytest.mark.parametrize(("fmt", "text", "path", "message"), TEXT_CASES.values(), ids=TEXT_CASES.keys())
def test_invalid_text_is_refused(world, api_for, fmt, text, path, message):
    before = state_snapshot()
    response = api_for("agent").post(VERSIONS, {"base_version": 2, "text": text, "format": fmt}, format="json")
    assert_refused(response, before, path, message)


@pytest.mark.parametrize(("fmt", "text", "path", "message"), TEXT_CASES.values(), ids=TEXT_CASES.keys())
def test_invalid_uploads_are_refused(world, api_for, fmt, text, path, message):
    before = state_snapshot()
    upload = SimpleUploadedFile(f"chat.{fmt}", text.encode())
    response = api_for("agent").post(
        "/api/v1/templates/chat/import/", {"file": upload, "base_version": "2"}, format="multipart"
    )
    assert_refused(response, before, path, message)


def oversize_yaml() -> str:
    """A valid-looking document just over 256 KiB: a long run of comment lines."""
    text = "inference_params:\n  temperature:\n    strict: 0.3\n"
    return text + "# padding padding padding padding\n" * (256 * 1024 // 34 + 1)


def test_documents_over_256_kib_are_refused_as_text(world, api_for):
    text = oversize_yaml()
    assert len(text.encode()) > 256 * 1024
    before = state_snapshot()
    response = api_for("agent").post(VERSIONS, {"base_version": 2, "text": text}, format="json")
    assert_refused(response, before, "(document)", f"must be at most 262144 bytes, got {len(text.encode())}")


def test_documents_over_256_kib_are_refused_as_uploads(world, api_for):
    before = state_snapshot()
    upload = SimpleUploadedFile("big.yaml", oversize_yaml().encode())
    response = api_for("agent").post(
        "/api/v1/templates/chat/import/", {"file": upload, "base_version": "2"}, format="multipart"
    )
    assert_refused(response, before, "(document)", "must be at most 262144 bytes")


def test_non_utf8_upload_is_refused(world, api_for):
    before = state_snapshot()
    upload = SimpleUploadedFile("chat.yaml", "inference_params: {}\n# é".encode("latin-1"))
    response = api_for("agent").post(
        "/api/v1/templates/chat/import/", {"file": upload, "base_version": "2"}, format="multipart"
    )
    assert_refused(response, before, "(document)", "must be UTF-8 text")


def test_upload_without_a_file_is_refused(world, api_for):
    before = state_snapshot()
    response = api_for("agent").post("/api/v1/templates/chat/import/", {"base_version": "2"}, format="multipart")
    assert_refused(response, before, "file", "required")


BODY_CASES = {
    "version with unknown field": (
        VERSIONS,
        {"base_version": 2, "document": doc(), "author": "someone-else"},
        "author",
        "unknown field",
    ),
    "version with both document and text": (
        VERSIONS,
        {"base_version": 2, "document": doc(), "text": "inference_params: {}\n"},
        "document",
        "exactly one of document or text",
    ),
    "version without base": (VERSIONS, {"document": doc()}, "base_version", "required"),
    "version with unknown format": (
        VERSIONS,
        {"base_version": 2, "text": "{}", "format": "toml"},
        "format",
        "not a valid choice",
    ),
    "template with unknown field": ("/api/v1/templates/", {"name": "x", "owner": "me"}, "owner", "unknown field"),
    "template with bad name": ("/api/v1/templates/", {"name": "Chat Default"}, "name", "must be 1-64 lowercase"),
    "whitelist with bad scenario": (
        "/api/v1/whitelists/",
        {"name": "vip", "scenarios": ["VIP!"]},
        "scenarios[0]",
        "lowercase name",
    ),
    "pool with unknown field": (
        "/api/v1/pools/",
        {"name": "canary", "is_production": False, "region": "eu"},
        "region",
        "unknown field",
    ),
    "publish with unknown field": (
        "/api/v1/pools/staging/publish/",
        {"template": "chat", "version": 1, "reason": "r", "force": True},
        "force",
        "unknown field",
    ),
    "publish without reason": (
        "/api/v1/pools/staging/publish/",
        {"template": "chat", "version": 1},
        "reason",
        "required",
    ),
    "publish with blank reason": (
        "/api/v1/pools/staging/publish/",
        {"template": "chat", "version": 1, "reason": "   "},
        "reason",
        "may not be blank",
    ),
    "rollback without reason": ("/api/v1/pools/staging/rollback/", {}, "reason", "required"),
    "rollback with blank reason": ("/api/v1/pools/staging/rollback/", {"reason": ""}, "reason", "may not be blank"),
    "rollback with version but no template": (
        "/api/v1/pools/staging/rollback/",
        {"version": 1, "reason": "r"},
        "version",
        "give template and version together",
    ),
    "rollback with unknown field": (
        "/api/v1/pools/staging/rollback/",
        {"reason": "r", "dry_run": True},
        "dry_run",
        "unknown field",
    ),
    "user with unknown role": (
        "/api/v1/users/",
        {"username": "new", "password": "long-enough-pw", "role": "root"},
        "role",
        "not a valid choice",
    ),
    "user with short password": (
        "/api/v1/users/",
        {"username": "new", "password": "short", "role": "agent"},
        "password",
        "too short",
    ),
}


@pytest.mark.parametrize(("url", "body", "path", "message"), BODY_CASES.values(), ids=BODY_CASES.keys())
def test_bad_request_bodies_are_refused(world, api_for, url, body, path, message):
    before = state_snapshot()
    response = api_for("admin").post(url, body, format="json")
    assert_refused(response, before, path, message)


def test_malformed_json_body_is_a_400_not_a_500(world, api_for):
    before = state_snapshot()
    response = api_for("agent").post(VERSIONS, data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["error"]
    assert state_snapshot() == before


def test_validate_endpoint_reports_errors_without_storing(world, api_for):
    before = state_snapshot()
    response = api_for("oncall").post(
        "/api/v1/validate/", {"text": json.dumps(doc(temperature={"strict": 5})), "format": "json"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["valid"] is False
    assert response.json()["errors"][0]["path"] == "temperature.strict"
    assert state_snapshot() == before
    ok = api_for("oncall").post("/api/v1/validate/", {"document": doc()}, format="json")
    assert ok.json() == {"valid": True, "errors": []}


def test_validate_refuses_an_alias_bomb_instead_of_expanding_it(world, api_for):
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 8)}]" for i in range(1, 10)]
    text = "\n".join(lines) + "\ninference_params:\n  max_tokens:\n    whitelist: [*a9]\n"
    response = api_for("oncall").post("/api/v1/validate/", {"text": text}, format="json")
    assert response.status_code == 200
    assert response.json()["errors"][0]["message"] == "YAML aliases (*name) are not allowed"
