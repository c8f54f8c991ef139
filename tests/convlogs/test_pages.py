"""Conversation log pages: upload (and analyse) through the form, the analysis page, Create version, roles."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.convlogs.services.analyses import log_analysis_run
from controlplane.convlogs.synthetic import write_log
from controlplane.nodes.models import Pool
from controlplane.params.models import TemplateVersion

pytestmark = pytest.mark.django_db


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_upload_analyse_and_create_a_version_from_the_pages(users, staging, tmp_path):
    agent = signed_in(users["agent"])
    assert "Logs</a>" in agent.get("/conversation-logs/").content.decode()
    data = write_log(tmp_path / "log.jsonl", 2000, seed=4).read_bytes()
    form = {"name": "june", "file": SimpleUploadedFile("june.jsonl", data), "pool": "staging", "coverage": "95"}
    response = agent.post("/conversation-logs/upload/", form)
    analysis = LogAnalysis.objects.get()
    assert response.status_code == 302 and response.url == f"/conversation-logs/june/analyses/{analysis.pk}/"
    log_analysis_run(analysis_id=analysis.pk)
    page = agent.get(response.url).content.decode()
    assert 'data-testid="intent-table"' in page and 'data-intent="order_status"' in page
    assert "token counts from the log" in page and 'data-testid="apply-first_turn_cap"' in page
    viewer = signed_in(users["oncall"]).get(response.url).content.decode()
    assert 'data-testid="intent-table"' in viewer and "Create version" not in viewer
    assert signed_in(users["oncall"]).post(f"{response.url}apply/", {"kind": "first_turn_cap"}).status_code == 403
    created = agent.post(f"{response.url}apply/", {"kind": "first_turn_cap"})
    assert created.status_code == 302 and created.url == "/templates/chat/v2/"
    cap = next(s for s in LogAnalysis.objects.get().suggestions if s["kind"] == "first_turn_cap")["changes"][0]["to"]
    assert TemplateVersion.objects.get(number=2).effective_params["max_tokens"]["default"] == cap
    assert Pool.objects.get(name="staging").desired_version.number == 1


def test_estimated_lengths_are_labelled_on_the_page(users, staging, tmp_path):
    agent = signed_in(users["agent"])
    line = b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello there"}]}\n'
    agent.post(
        "/conversation-logs/upload/",
        {"name": "est", "file": SimpleUploadedFile("l.jsonl", line * 30), "pool": "staging", "coverage": "90"},
    )
    analysis = LogAnalysis.objects.get()
    log_analysis_run(analysis_id=analysis.pk)
    page = agent.get(f"/conversation-logs/est/analyses/{analysis.pk}/").content.decode()
    assert "estimated: 1 token per CJK character, 1 per 4 other characters" in page


def test_oncall_cannot_upload_and_a_bad_file_stores_nothing(users, staging, tmp_path):
    refused = signed_in(users["oncall"]).post(
        "/conversation-logs/upload/", {"name": "x", "file": SimpleUploadedFile("x", b"{}")}
    )
    assert refused.status_code == 403
    bad = signed_in(users["agent"]).post(
        "/conversation-logs/upload/", {"name": "x", "file": SimpleUploadedFile("x.png", b"\x89PNG....")}
    )
    assert bad.status_code == 400 and "not a conversation log" in bad.content.decode()
    assert not ConversationLog.objects.exists()
