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
