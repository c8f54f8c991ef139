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
from controlplane.convlogs.reader import LogReader
from controlplane.convlogs.services.analyses import log_analysis_create, log_analysis_run
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.datasets.models import IntentDataset
from controlplane.nodes.services.pools import pool_publish
from tests.factories import pools, template_with_versions
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


GOOD_CONVERSATION = {
    "messages": [{"role": "user", "content": "我的订单到哪了"}, {"role": "assistant", "content": "好的"}]
}
# Each one line of its own in a log of good ones: a bad line named by number and problem, the rest analysed.
HOSTILE_LOG_LINES = [
    ("[" * 100_000 + "]" * 100_000, "json", "nested deeper than 32 levels"),
    ('{"messages": ' + "[" * 5_000 + "]" * 5_000 + "}", "json", "nested deeper than 32 levels"),
    ('{"conversation_id": ' + "7" * 5_000 + ', "role": "user", "content": "hi"}', "json", "more than 30 digits"),
    # Under Python's own digit limit, but 10^3999 seconds overflowed the timestamp's float conversion.
    ('{"conversation_id": "c", "role": "user", "content": "hi", "created_at": ' + "9" * 4_000 + "}", "json", "digits"),
    ('{"conversation_id": "c", "role": "user", "content": "hi", "created_at": 1e999}', "json", "too large for a float"),
    ('{"conversation_id": "c", "role": "user", "content": "hi", "timestamp": NaN}', "json", "NaN is not"),
    ('{"conversation_id": "c", "role": "user", "content": "hi", "tokens": Infinity}', "json", "Infinity is not"),
]


@pytest.fixture
def staging(users):
    """Pool `staging`, running a published version: what an analysis compares a log against."""
    staging, _ = pools(users["sre"])
    _, versions = template_with_versions(users["sre"])
    pool_publish(actor=users["sre"], pool=staging, version=versions[0], reason="first")
    staging.refresh_from_db()
    return staging


@pytest.mark.django_db
def test_one_hostile_line_is_counted_as_a_bad_line_and_the_log_is_analysed(users, store, staging):
    lines = []
    for hostile, _, _ in HOSTILE_LOG_LINES:
        lines += [json.dumps({**GOOD_CONVERSATION, "id": f"c{len(lines)}"}), hostile]
    lines.append(json.dumps({**GOOD_CONVERSATION, "id": "last"}))
    log = store_log_file(users["agent"], "\n".join(lines).encode() + b"\n", "hostile.jsonl")
    analysis = log_analysis_create(actor=users["agent"], log=log, pool=staging)
    log_analysis_run(analysis_id=analysis.pk)
    analysis.refresh_from_db()

    assert analysis.status == "succeeded", analysis.error
    assert analysis.result["conversations"] == len(HOSTILE_LOG_LINES) + 1
    bad = analysis.result["bad_lines"]
    assert bad["count"] == len(HOSTILE_LOG_LINES)
    assert [item["line"] for item in bad["first"]] == [2 * (i + 1) for i in range(len(HOSTILE_LOG_LINES))]
    for item, (_, field, problem) in zip(bad["first"], HOSTILE_LOG_LINES, strict=True):
        assert item["field"] == field and problem in item["message"], item


@pytest.mark.django_db
def test_a_csv_count_that_only_looks_like_digits_is_a_bad_line(users, store):
    header = "conversation_id,role,content,tokens\n"
    rows = ["c1,user,hi,3", "c1,assistant,hello,²", "c2,user,hi," + "9" * 5_000, "c3,user,hi,12"]
    log = store_log_file(users["agent"], (header + "\n".join(rows) + "\n").encode(), "log.csv")
    reader = LogReader(log)
    conversations = [conversation.id for conversation in reader]
    assert conversations == ["c1", "c3"]
    assert [(error.row, error.field) for error in reader.errors.row_errors] == [(3, "tokens"), (4, "tokens")]


def store_log_file(actor, data: bytes, filename: str):
    return conversation_log_create(actor=actor, name=filename.split(".")[0], filename=filename, chunks=[data])
