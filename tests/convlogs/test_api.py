"""The conversation-log API: each role's allowed and refused calls, upload shapes, analyses and applying them."""

import gzip
import hashlib

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.convlogs.services.analyses import log_analysis_run
from controlplane.convlogs.synthetic import write_log
from controlplane.params.models import TemplateVersion
from tests.helpers import error_paths

pytestmark = pytest.mark.django_db


def upload(client, name, data: bytes, filename="log.jsonl"):
    file = SimpleUploadedFile(filename, data, content_type="application/octet-stream")
    return client.post("/api/v1/conversation-logs/", {"name": name, "file": file}, format="multipart")


@pytest.fixture
def log_bytes(tmp_path):
    return write_log(tmp_path / "log.jsonl", 500, seed=2).read_bytes()


def test_agent_uploads_plain_and_gzip_logs(api_for, log_bytes, log_dir):
    agent = api_for("agent")
    created = upload(agent, "june", log_bytes)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["format"], body["compression"], body["size_bytes"]) == ("jsonl", "none", len(log_bytes))
    assert body["sha256"] == hashlib.sha256(log_bytes).hexdigest() and body["created_by"] == "agent"
    packed = gzip.compress(log_bytes)
    created = upload(agent, "june-gz", packed, filename="whatever.bin")
    assert (created.json()["format"], created.json()["compression"]) == ("jsonl", "gzip")
    csv = upload(agent, "csv", b"conversation_id,role,content\n1,user,hi\n", filename="log.csv")
    assert csv.json()["format"] == "csv"
    stored = sorted(path.read_bytes() for path in log_dir.iterdir())
    assert stored == sorted([log_bytes, packed, b"conversation_id,role,content\n1,user,hi\n"])
    listed = agent.get("/api/v1/conversation-logs/").json()
    assert [item["name"] for item in listed["results"]] == ["csv", "june-gz", "june"]


def test_refused_uploads_store_nothing(api_for, log_bytes, log_dir):
    assert upload(api_for("oncall"), "june", log_bytes).status_code == 403
    assert api_for(None).get("/api/v1/conversation-logs/").status_code in {401, 403}
    agent = api_for("agent")
    not_a_log = upload(agent, "png", b"\x89PNG\r\n\x1a\n" + b"\0" * 100)
    assert not_a_log.status_code == 400 and error_paths(not_a_log.json()) == ["file"]
    broken_gzip = upload(agent, "gz", gzip.compress(log_bytes)[:200])
    assert broken_gzip.status_code == 400 and "gzip" in broken_gzip.json()["error"]
    bad_name = upload(agent, "Bad Name", log_bytes)
    assert bad_name.status_code == 400 and error_paths(bad_name.json()) == ["name"]
    empty = upload(agent, "empty", b"")
    assert empty.status_code == 400
    assert upload(agent, "june", log_bytes).status_code == 201
    duplicate = upload(agent, "june", log_bytes)
    assert duplicate.status_code == 409 and "already exists" in duplicate.json()["error"]
    assert ConversationLog.objects.count() == 1
    assert len(list(log_dir.iterdir())) == 1


def test_analysis_and_apply_through_the_api(api_for, staging, log_bytes):
    agent = api_for("agent")
    upload(agent, "june", log_bytes)
    assert api_for("oncall").post("/api/v1/conversation-logs/june/analyses/", {"pool": "staging"}).status_code == 403
    missing = agent.post("/api/v1/conversation-logs/june/analyses/", {"pool": "nope"}, format="json")
    assert missing.status_code == 404
    queued = agent.post("/api/v1/conversation-logs/june/analyses/", {"pool": "staging", "coverage": 95}, format="json")
    assert queued.status_code == 201, queued.json()
    assert (queued.json()["status"], queued.json()["version"], queued.json()["coverage"]) == ("queued", "chat:1", 95)
    pk = queued.json()["id"]
    too_early = agent.post(f"/api/v1/conversation-logs/june/analyses/{pk}/apply/", {}, format="json")
    assert too_early.status_code == 409
    log_analysis_run(analysis_id=pk)
    detail = api_for("oncall").get(f"/api/v1/conversation-logs/june/analyses/{pk}/").json()
    assert detail["status"] == "succeeded" and detail["token_source"] == "log"
    assert detail["result"]["conversations"] == 500
    assert {item["kind"] for item in detail["suggestions"]} >= {"first_turn_cap", "whitelist"}
    log = agent.get("/api/v1/conversation-logs/june/").json()
    assert log["conversation_count"] == 500 and [a["id"] for a in log["analyses"]] == [pk]
    apply_url = f"/api/v1/conversation-logs/june/analyses/{pk}/apply/"
    assert api_for("oncall").post(apply_url, {}, format="json").status_code == 403
    wrong = agent.post(apply_url, {"suggestions": ["temperature"]}, format="json")
    assert wrong.status_code == 400 and error_paths(wrong.json()) == ["suggestions"]
    applied = agent.post(apply_url, {"suggestions": ["first_turn_cap"], "comment": "june"}, format="json")
    assert applied.status_code == 201, applied.json()
    assert applied.json()["ref"] == "chat:2" and applied.json()["is_published"] is False
    cap = next(s for s in detail["suggestions"] if s["kind"] == "first_turn_cap")["changes"][0]["to"]
    assert TemplateVersion.objects.get(number=2).effective_params["max_tokens"]["default"] == cap
    assert LogAnalysis.objects.count() == 1


def test_import_is_for_operators_and_off_by_default(api_for, settings, tmp_path, log_bytes):
    source = tmp_path / "imports"
    source.mkdir()
    (source / "june.jsonl").write_bytes(log_bytes)
    body = {"name": "june", "path": "june.jsonl"}
    assert api_for("agent").post("/api/v1/conversation-logs/import/", body, format="json").status_code == 403
    off = api_for("sre").post("/api/v1/conversation-logs/import/", body, format="json")
    assert off.status_code == 403 and "CONVERSATION_LOG_IMPORT_DIR" in off.json()["error"]
    settings.CONVERSATION_LOG_IMPORT_DIR = str(source)
    imported = api_for("sre").post("/api/v1/conversation-logs/import/", body, format="json")
    assert imported.status_code == 201, imported.json()
    assert imported.json()["source"] == "import" and imported.json()["original_filename"] == "june.jsonl"
    assert ConversationLog.objects.get().path.read_bytes() == log_bytes


def test_an_analysis_whose_worker_stopped_is_failed_and_a_late_finish_does_not_overwrite_it(
    api_for, staging, log_bytes, settings
):
    """A worker killed mid-run (or the embedded process restarted) left the analysis "running" for ever."""
    from datetime import timedelta

    from django.utils import timezone

    from controlplane.convlogs.services import analyses

    settings.LOG_ANALYSIS_STALL_S = 300
    agent = api_for("agent")
    upload(agent, "june", log_bytes)
    stalled, fresh = (
        agent.post("/api/v1/conversation-logs/june/analyses/", {"pool": "staging"}, format="json").json()["id"]
        for _ in range(2)
    )
    now = timezone.now()
    LogAnalysis.objects.filter(pk=stalled).update(
        status="running", started_at=now - timedelta(seconds=400), progress_at=now - timedelta(seconds=301)
    )
    LogAnalysis.objects.filter(pk=fresh).update(
        status="running", started_at=now - timedelta(seconds=400), progress_at=now - timedelta(seconds=299)
    )
    assert analyses.log_analyses_reap(now=now) == [stalled]
    detail = api_for("oncall").get(f"/api/v1/conversation-logs/june/analyses/{stalled}/").json()
    assert detail["status"] == "failed" and detail["error"].startswith("no progress for 300 s")
    assert LogAnalysis.objects.get(pk=fresh).status == "running"
    assert analyses.log_analyses_reap(now=now) == []

    # The stopped worker comes back and finishes after all: the analysis stays failed, the log's counts unset.
    analyses._run(LogAnalysis.objects.select_related("log", "version", "pool").get(pk=stalled))
    reaped = LogAnalysis.objects.get(pk=stalled)
    assert reaped.status == "failed" and reaped.result is None
    assert ConversationLog.objects.get(name="june").conversation_count is None
    # The running one finishes normally.
    analyses._run(LogAnalysis.objects.select_related("log", "version", "pool").get(pk=fresh))
    assert LogAnalysis.objects.get(pk=fresh).status == "succeeded"
    assert ConversationLog.objects.get(name="june").conversation_count == 500
