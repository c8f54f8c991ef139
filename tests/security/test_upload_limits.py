"""Oversized uploads are refused before they are read whole: by Content-Length, or by a counted read of a chunked
body, with an error naming the field and the limit, and nothing stored. Inside Django (test client) and through a
real daphne, where the ASGI middleware answers before Django spools or parses the body."""

import http.client
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.authtoken.models import Token

from controlplane.datasets.models import IntentDataset, WarmupDataset
from tests.live_server import Daphne

MIB = 1 << 20


@pytest.mark.django_db
def test_a_json_body_over_the_limit_is_refused_naming_the_field_and_the_limit(api_for, settings):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    body = {"name": "big", "format": "csv", "content": "text,label\n" + "x" * limit}
    refused = api_for("agent").post("/api/v1/intent-datasets/", body, format="json")
    assert refused.status_code == 413
    assert refused.json()["error"].startswith("content: ")
    expected = f"over the limit of {limit} bytes (2.5 MiB); send a larger dataset as a multipart `file`"
    assert expected in refused.json()["error"]
    template = api_for("agent").post("/api/v1/validate/", {"document": {"x": "y" * limit}}, format="json")
    assert template.status_code == 413
    assert template.json()["error"].startswith("body: ")
    assert template.json()["error"].endswith(f"bytes is over the limit of {limit} bytes (2.5 MiB)")
    assert not IntentDataset.objects.exists()


@pytest.mark.django_db
def test_a_multipart_file_over_the_limit_is_refused_before_its_parts_are_read(api_for, settings, users):
    settings.UPLOAD_MAX_BYTES = 3 * MIB
    big = SimpleUploadedFile("log.csv", b"text,intent\n" + b"x" * (3 * MIB + 10), content_type="text/csv")
    refused = api_for("agent").post("/api/v1/warmup-datasets/", {"name": "faq", "file": big}, format="multipart")
    assert refused.status_code == 413
    assert refused.json()["error"].startswith("file: ")
    assert f"over the limit of {3 * MIB} bytes (3 MiB)" in refused.json()["error"]
    client = Client()
    client.force_login(users["agent"])
    big.seek(0)
    page = client.post("/intents/", {"name": "shop", "format": "csv", "file": big})
    assert page.status_code in {400, 413}
    assert not IntentDataset.objects.exists() and not WarmupDataset.objects.exists()


@pytest.fixture
def daphne(tmp_path, agent):
    server = Daphne(tmp_path)
    server.start()
    try:
        yield {"port": server.port, "token": Token.objects.create(user=agent).key}
    finally:
        server.stop()


def post(daphne, path: str, body, headers: dict) -> tuple[int, dict]:
    connection = http.client.HTTPConnection("127.0.0.1", daphne["port"], timeout=60)
    try:
        connection.request(
            "POST",
            path,
            body=body,
            headers={"Authorization": f"Token {daphne['token']}", **headers},
            encode_chunked=not isinstance(body, bytes),
        )
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_daphne_refuses_by_content_length_and_by_counting_a_chunked_body(daphne, settings):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    # Declared: a multipart body of 22 MiB (over UPLOAD_MAX_BYTES) gets 413 naming the file and the limit.
    boundary = "cp-test-boundary"
    multipart = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.csv"\r\n'
            "Content-Type: text/csv\r\n\r\n"
        ).encode()
        + b"x" * (22 * MIB)
        + f"\r\n--{boundary}--\r\n".encode()
    )
    status, body = post(
        daphne,
        "/api/v1/intent-datasets/",
        multipart,
        {"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert status == 413
    assert body["error"] == (
        f"file: {len(multipart)} bytes is over the limit of {settings.UPLOAD_MAX_BYTES} bytes (21 MiB)"
    )

    # Chunked, no Content-Length: counted as it arrives and cut at the limit.
    def chunks():
        yield b'{"document": {"x": "'
        for _ in range(4):
            yield b"y" * MIB
        yield b'"}}'

    status, body = post(daphne, "/api/v1/validate/", chunks(), {"Content-Type": "application/json"})
    assert status == 413
    assert body == {
        "error": f"body: the body is over the limit of {limit} bytes (2.5 MiB)",
        "code": "too_large",
        "detail": {"limit_bytes": limit},
    }

    # Under the limits, the same endpoints answer as usual: the server keeps serving.
    status, body = post(
        daphne,
        "/api/v1/validate/",
        json.dumps({"document": {"inference_params": {}}}).encode(),
        {"Content-Type": "application/json"},
    )
    assert status == 200, body
    assert not IntentDataset.objects.exists()


# One hostile line among good ones: each is a bad row of its own, named by line, and never a 500.
HOSTILE_LINES = {
    "deep-array": "[" * 100_000 + "]" * 100_000,
    "deep-inside-a-field": '{"text": "hi", "intent": ' + "[" * 5_000 + "]" * 5_000 + "}",
    "deep-but-parseable": '{"text": "hi", "intent": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}",
    "5000-digit-integer": '{"text": "hi", "intent": ' + "9" * 5_000 + "}",
    "4000-digit-integer": '{"text": "hi", "intent": -' + "9" * 4_000 + "}",
    "huge-float": '{"text": "hi", "intent": 1e999}',
    "nan": '{"text": "hi", "intent": NaN}',
    "infinity": '{"text": "hi", "intent": -Infinity}',
}


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ["/api/v1/warmup-datasets/", "/api/v1/intent-datasets/"])
def test_one_hostile_json_line_is_a_bad_row_naming_its_line_and_the_rest_is_read(api_for, endpoint):
    field = "label" if endpoint == "/api/v1/intent-datasets/" else "intent"
    hostile = [line.replace('"intent"', f'"{field}"') for line in HOSTILE_LINES.values()]
    # A good line, then each hostile one, then a line with an ordinary mistake that must still be reported.
    lines = [f'{{"text": "我的订单到哪了", "{field}": "order_status"}}', *hostile, '{"text": "cut short"']
    file = SimpleUploadedFile("rows.jsonl", "\n".join(lines).encode(), content_type="application/jsonl")
    refused = api_for("agent").post(endpoint, {"name": "hostile", "format": "jsonl", "file": file}, format="multipart")
    assert refused.status_code == 400, refused.content
    # (An intent dataset also says, without a row, that one good row is too few to train on.)
    rows = {item["row"]: item for item in refused.json()["detail"]["errors"] if item["row"] is not None}
    assert sorted(rows) == list(range(2, len(lines) + 1))
    problems = [rows[row]["message"] for row in range(2, 2 + len(HOSTILE_LINES))]
    assert problems[:3] == ["nested deeper than 32 levels"] * 3
    assert problems[3:5] == ["a number of more than 30 digits"] * 2
    assert problems[5] == "a number too large for a float"
    assert problems[6:] == ["NaN is not a JSON number", "-Infinity is not a JSON number"]
    assert rows[len(lines)]["message"].startswith("not valid JSON")
    assert not IntentDataset.objects.exists() and not WarmupDataset.objects.exists()
