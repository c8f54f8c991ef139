"""Attacks on conversation logs: reading host files through the import path, oversized uploads (the larger limit
holds for the log endpoint only), and gzip bombs. Each is refused naming the field, and nothing is stored."""

import gzip
import http.client
import json
import os

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.authtoken.models import Token

from controlplane.convlogs.models import ConversationLog
from controlplane.datasets.models import IntentDataset
from tests.helpers import error_paths
from tests.live_server import Daphne

MIB = 1 << 20
LINE = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'


@pytest.fixture
def store(tmp_path, settings):
    settings.CONVERSATION_LOG_DIR = tmp_path / "stored"
    return settings.CONVERSATION_LOG_DIR


@pytest.fixture
def import_dir(tmp_path, settings):
    root = tmp_path / "imports"
    (root / "nested").mkdir(parents=True)
    (root / "nested" / "ok.jsonl").write_bytes(LINE)
    outside = tmp_path / "secret.jsonl"
    outside.write_bytes(LINE)
    os.symlink(outside, root / "link-out.jsonl")
    os.symlink(tmp_path, root / "dir-out")
    os.symlink(root / "nested" / "ok.jsonl", root / "link-in.jsonl")
    settings.CONVERSATION_LOG_IMPORT_DIR = str(root)
    return root


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "../secret.jsonl",
        "nested/../../secret.jsonl",
        "/etc/passwd",
        "link-out.jsonl",
        "dir-out/secret.jsonl",
        "nested",
        ".",
        "missing.jsonl",
        "nested/ok.jsonl\x00.txt",
        "\ud800.jsonl",
        "",
    ],
)
def test_import_refuses_paths_outside_the_directory(api_for, import_dir, store, path, tmp_path):
    # Sent as escaped JSON: a lone surrogate is valid JSON text that no file name can hold.
    body = json.dumps({"name": "x", "path": path})
    refused = api_for("admin").post("/api/v1/conversation-logs/import/", body, content_type="application/json")
    assert refused.status_code == 400, refused.json()
    assert error_paths(refused.json()) == ["path"]
    assert not ConversationLog.objects.exists()
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.django_db
def test_import_accepts_files_and_symlinks_inside_the_directory(api_for, import_dir, store):
    admin = api_for("admin")
    for name, path in (("a", "nested/ok.jsonl"), ("b", "link-in.jsonl"), ("c", str(import_dir / "nested/ok.jsonl"))):
        created = admin.post("/api/v1/conversation-logs/import/", {"name": name, "path": path}, format="json")
        assert created.status_code == 201, created.json()
    assert ConversationLog.objects.count() == 3


@pytest.mark.django_db
def test_an_upload_over_the_log_limit_is_413_naming_the_file(api_for, settings, store):
    settings.CONVERSATION_LOG_MAX_BYTES = 1 * MIB
    big = SimpleUploadedFile("log.jsonl", LINE * (2 * MIB // len(LINE)))
    refused = api_for("agent").post("/api/v1/conversation-logs/", {"name": "big", "file": big}, format="multipart")
    assert refused.status_code == 413
    assert refused.json()["error"].startswith("file: ") and "over the limit" in refused.json()["error"]
    assert not ConversationLog.objects.exists()
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.django_db
def test_a_gzip_bomb_is_refused_by_its_decompressed_size(api_for, settings, store):
    settings.CONVERSATION_LOG_MAX_DECOMPRESSED_BYTES = 4 * MIB
    bomb = gzip.compress(LINE + b" " * (64 * MIB), compresslevel=9)
    assert len(bomb) < MIB // 8
    file = SimpleUploadedFile("log.jsonl.gz", bomb)
    refused = api_for("agent").post("/api/v1/conversation-logs/", {"name": "bomb", "file": file}, format="multipart")
    assert refused.status_code == 413
    assert error_paths(refused.json()) == ["file"] and "decompressed" in refused.json()["error"]
    assert not ConversationLog.objects.exists()
    assert not any(store.iterdir())


def multipart(name: str, field: str, data: bytes, boundary="cp-boundary") -> bytes:
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\n{name}\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="log.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_daphne_allows_the_larger_limit_on_the_log_endpoint_only(tmp_path, agent):
    server = Daphne(tmp_path, extra_env={"UPLOAD_MAX_BYTES": str(3 * MIB), "CONVERSATION_LOG_MAX_BYTES": str(6 * MIB)})
    server.start()
    token = Token.objects.create(user=agent).key
    log = LINE * (5 * MIB // len(LINE))

    def post(path: str, body: bytes) -> tuple[int, dict]:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            headers = {"Authorization": f"Token {token}", "Content-Type": "multipart/form-data; boundary=cp-boundary"}
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            connection.close()

    try:
        status, body = post("/api/v1/conversation-logs/", multipart("five", "file", log))
        assert status == 201, body
        status, body = post("/api/v1/intent-datasets/", multipart("five", "file", log))
        assert status == 413 and body["error"].startswith("file: ")
        over = multipart("seven", "file", LINE * (7 * MIB // len(LINE)))
        status, body = post("/api/v1/conversation-logs/", over)
        assert status == 413
        assert body["error"] == f"file: {len(over)} bytes is over the limit of {7 * MIB} bytes (7 MiB)"
    finally:
        server.stop()
    assert list(ConversationLog.objects.values_list("name", flat=True)) == ["five"]
    assert not IntentDataset.objects.exists()
