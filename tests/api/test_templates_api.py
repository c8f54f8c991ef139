"""Templates over REST: import/export round trips, versions, diffs, the fields table and stale saves."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from controlplane.params import codec, schema
from controlplane.params.models import TemplateVersion
from tests.factories import legal_whitelist

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(api_for, agent):
    legal_whitelist(agent)
    return api_for("agent")


def create(client, name: str) -> None:
    assert client.post("/api/v1/templates/", {"name": name}, format="json").status_code == 201


def upload(client, name: str, text: str, filename: str, base=None):
    data = {"file": SimpleUploadedFile(filename, text.encode("utf-8"))}
    if base is not None:
        data["base_version"] = str(base)
    return client.post(f"/api/v1/templates/{name}/import/", data, format="multipart")


def export(client, name: str, number: int, fmt: str):
    response = client.get(f"/api/v1/templates/{name}/versions/{number}/export/", {"format": fmt})
    assert response.status_code == 200, response.content[:300]
    return response


def test_seed_yaml_upload_exports_byte_for_byte(client, seed_yaml):
    create(client, "seed")
    response = upload(client, "seed", seed_yaml, "seed_inference_params.yaml")
    assert response.status_code == 201, response.content
    assert response.json()["number"] == 1
    exported = export(client, "seed", 1, "yaml")
    assert exported.content == seed_yaml.encode("utf-8")
    assert exported["Content-Type"] == "application/yaml; charset=utf-8"
    assert exported["Content-Disposition"] == 'attachment; filename="seed-v1.yaml"'


def test_seed_yaml_posted_as_text_exports_byte_for_byte(client, seed_yaml):
    create(client, "seed")
    response = client.post(
        "/api/v1/templates/seed/versions/", {"base_version": None, "text": seed_yaml, "format": "yaml"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert export(client, "seed", 1, "yaml").content == seed_yaml.encode("utf-8")


def test_json_export_import_round_trip(client, seed_yaml):
    create(client, "seed")
    upload(client, "seed", seed_yaml, "seed.yaml")
    first_json = export(client, "seed", 1, "json").content
    assert json.loads(first_json) == codec.parse(seed_yaml, "yaml")

    create(client, "copy")
    response = upload(client, "copy", first_json.decode(), "seed-v1.json")
    assert response.status_code == 201, response.content
    assert export(client, "copy", 1, "json").content == first_json
    original, copy = (TemplateVersion.objects.get(template__name=n, number=1) for n in ("seed", "copy"))
    assert copy.content_hash == original.content_hash
    assert copy.document == original.document
    # The generated YAML of the JSON import parses back to the same document.
    assert codec.parse(export(client, "copy", 1, "yaml").content, "yaml") == original.document


def test_version_detail_shows_document_hash_and_every_field(client, seed_yaml):
    create(client, "seed")
    upload(client, "seed", seed_yaml, "seed.yaml")
    body = client.get("/api/v1/templates/seed/versions/1/").json()
    version = TemplateVersion.objects.get(template__name="seed")
    assert body["hash"] == version.content_hash
    assert body["document"] == codec.parse(seed_yaml, "yaml")
    assert body["author"] == "agent"
    table = {row["path"]: row for row in body["fields_table"]}
    assert list(table) == [f.path for f in schema.FIELDS]
    assert table["temperature.strict"] == {
        "path": "temperature.strict",
        "value": 0.3,
        "apply": "hot",
        "is_default": False,
    }
    assert table["engine.max_num_seqs"] == {
        "path": "engine.max_num_seqs",
        "value": 64,
        "apply": "cold",
        "is_default": True,
    }


def test_fields_endpoint_lists_every_field_with_hot_or_cold(api_for, users):
    rows = api_for("oncall").get("/api/v1/fields/").json()
    assert [r["path"] for r in rows] == [f.path for f in schema.FIELDS]
    by_path = {r["path"]: r for r in rows}
    assert {r["apply"] for r in rows} == {"hot", "cold"}
    assert by_path["temperature.strict"]["apply"] == "hot"
    assert by_path["speculative.enabled"]["apply"] == "cold"
    assert by_path["temperature.strict"]["minimum"] == 0
    assert by_path["temperature.strict"]["maximum"] == 2
    assert by_path["speculative.method"]["choices"] == list(schema.SPECULATIVE_METHODS)
    assert by_path["max_tokens.whitelist"]["default"] == ["legal"]


def save(client, name: str, base, **temperature):
    document = {"inference_params": {"temperature": temperature}} if temperature else {"inference_params": {}}
    return client.post(
        f"/api/v1/templates/{name}/versions/", {"base_version": base, "document": document}, format="json"
    )


def test_versions_are_numbered_per_template_and_listed_newest_first(client):
    create(client, "chat")
    create(client, "mail")
    numbers = [save(client, "chat", base, strict=s).json()["number"] for base, s in [(None, 0.3), (1, 0.2), (2, 0.1)]]
    assert numbers == [1, 2, 3]
    assert save(client, "mail", None).json()["number"] == 1
    listed = client.get("/api/v1/templates/chat/versions/").json()["results"]
    assert [(v["number"], v["base_version"]) for v in listed] == [(3, 2), (2, 1), (1, None)]
    assert client.get("/api/v1/templates/chat/").json()["latest_number"] == 3
    assert client.get("/api/v1/templates/mail/").json()["latest_number"] == 1


def test_stale_save_is_409_with_the_current_version(client, api_for):
    create(client, "chat")
    save(client, "chat", None, strict=0.3)
    save(api_for("sre"), "chat", 1, strict=0.2)
    response = save(client, "chat", 1, strict=0.1)
    assert response.status_code == 409
    body = response.json()
    assert body["code"] == "stale_base_version"
    assert body["error"] == "base_version: version 1 is stale; the latest is 2"
    current = body["detail"]["current_version"]
    assert (current["number"], current["author"]) == (2, "sre")
    assert current["document"]["inference_params"]["temperature"]["strict"] == 0.2
    assert TemplateVersion.objects.filter(template__name="chat").count() == 2


def test_diff_lists_path_old_new_and_apply(client):
    create(client, "chat")
    save(client, "chat", None, strict=0.3)
    document = {"inference_params": {"temperature": {"strict": 0.1}, "engine": {"max_num_seqs": 32}}}
    client.post("/api/v1/templates/chat/versions/", {"base_version": 1, "document": document}, format="json")
    response = client.get("/api/v1/templates/chat/diff/", {"from": 1, "to": 2})
    assert response.json() == {
        "changes": [
            {"path": "temperature.strict", "old": 0.3, "new": 0.1, "apply": "hot"},
            {"path": "engine.max_num_seqs", "old": 64, "new": 32, "apply": "cold"},
        ]
    }
    assert client.get("/api/v1/templates/chat/diff/", {"from": 2, "to": 2}).json() == {"changes": []}


def test_diff_with_a_missing_or_malformed_version(client):
    create(client, "chat")
    save(client, "chat", None)
    assert client.get("/api/v1/templates/chat/diff/", {"from": 1, "to": 9}).status_code == 404
    response = client.get("/api/v1/templates/chat/diff/", {"from": "one", "to": 1})
    assert response.status_code == 400
    assert response.json()["detail"][0]["path"] == "version"


def test_content_hash_is_stable_across_saves_of_equal_parameters(client):
    create(client, "chat")
    first = save(client, "chat", None).json()["hash"]
    second = save(client, "chat", 1, strict=0.3).json()["hash"]  # the default, spelled out
    third = save(client, "chat", 2, strict=0.25).json()["hash"]
    assert first == second != third
    assert client.get("/api/v1/templates/chat/versions/1/").json()["hash"] == first


def test_export_of_unknown_format_is_400(client):
    create(client, "chat")
    save(client, "chat", None)
    response = client.get("/api/v1/templates/chat/versions/1/export/", {"format": "xml"})
    assert response.status_code == 400
    assert response.json()["detail"][0]["path"] == "format"


def test_unknown_template_or_version_is_404(client):
    assert client.get("/api/v1/templates/nope/").status_code == 404
    create(client, "chat")
    assert client.get("/api/v1/templates/chat/versions/4/").status_code == 404
    assert save(client, "nope", None).status_code == 404


def test_whitelist_versions_over_rest(client, api_for):
    response = client.post(
        "/api/v1/whitelists/legal/versions/", {"base_version": 1, "scenarios": ["legal", "tax"]}, format="json"
    )
    assert response.status_code == 201
    assert client.get("/api/v1/whitelists/legal/").json()["scenarios"] == ["legal", "tax"]
    stale = api_for("sre").post(
        "/api/v1/whitelists/legal/versions/", {"base_version": 1, "scenarios": ["x"]}, format="json"
    )
    assert stale.status_code == 409
    assert stale.json()["detail"]["current_version"] == 2
