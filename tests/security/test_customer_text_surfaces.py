"""Every place that stores or shows customers' words shows them masked: a warmup dataset built from a conversation log
(its page, its API, what nodes are sent), a log analysis's report of bad lines, a replay's exported errors, and the
engine's log on the node page (masked by the agent and again by the control plane, whatever the node sends).
"""

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web

from controlplane.convlogs.models import LogAnalysis
from controlplane.convlogs.services.analyses import log_analysis_create, log_analysis_run
from controlplane.convlogs.services.logs import conversation_log_create
from controlplane.datasets.selectors import warmup_messages_text
from controlplane.datasets.services.warmup import warmup_dataset_create
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.agent_sessions import node_heartbeat
from engine_node.replay_load import Outcome, Shot, chat_once
from engine_node.settings import AgentSettings
from tests.aiohttp_apps import start_app
from tests.convlogs.conftest import log_dir, staging  # noqa: F401 - fixtures, found by name
from tests.factories import pools
from tests.reviews.factories import node_in

# Customers' data in the spellings of the masking tests, and the pieces of it none of the surfaces may show (pieces,
# so that a number half masked at a cut is caught too).
PHONE_AND_MAIL = "我的手机 +86 139 5521 7788，邮箱 zhao.lei＠example.com，订单还没到"
PHONES = ["138.0013.8000", "１３８００１３８０００", "一三八零零一三八零零零"]
SECRETS = ("5521", "7788", "zhao", "example.com", "0013", "００１３", "零零一三", "例子")


def shows_none(text: str) -> bool:
    return not any(secret in text for secret in SECRETS)


def conversation_log(*extra_lines: str) -> str:
    lines = []
    for i, phone in enumerate(PHONES):
        question = {"role": "user", "content": f"我的手机{phone}，快递到哪了"}
        lines.append(json.dumps({"messages": [question, {"role": "assistant", "content": "稍等"}]}, ensure_ascii=False))
        lines.append(json.dumps({"role": "user", "content": PHONE_AND_MAIL, "conversation_id": f"c{i}"}))
    return "\n".join([*lines, *extra_lines]) + "\n"


@pytest.mark.django_db
def test_a_warmup_dataset_built_from_a_log_holds_and_shows_no_phone_or_email(users, client):
    dataset = warmup_dataset_create(
        actor=users["agent"], name="faq", content=conversation_log(), fmt="jsonl", source="conversation_log"
    )
    version = dataset.versions.get()
    # Questions that differ only in a customer's number are one query: the warmup replays the question.
    assert version.messages == [
        {"text": "我的手机<PHONE>，快递到哪了", "count": 3},
        {"text": "我的手机 <PHONE>，邮箱 <EMAIL>，订单还没到", "count": 3},
    ]
    assert shows_none(warmup_messages_text(version.pk))  # what the pool's nodes are sent
    client.force_login(users["oncall"])  # the least trusted role that reads datasets
    for url in ("/api/v1/warmup-datasets/faq/versions/1/", "/warmup/faq/v1/"):
        response = client.get(url)
        assert response.status_code == 200
        page = response.content.decode()
        assert shows_none(page) and "快递到哪了" in page and "PHONE" in page


@pytest.mark.django_db
def test_a_log_analysis_reports_bad_lines_without_the_customer_data_they_quote(users, staging, tmp_path):  # noqa: F811
    quoting = json.dumps({"role": "user", "content": "hi", "conversation_id": "c9", "created_at": "139 5521 7788"})
    path = tmp_path / "log.jsonl"
    path.write_text(conversation_log(quoting), encoding="utf-8")
    log = conversation_log_create(actor=users["agent"], name="log", filename=path.name, chunks=[path.read_bytes()])
    analysis = log_analysis_create(actor=users["agent"], log=log, pool=staging)
    log_analysis_run(analysis_id=analysis.pk)
    analysis = LogAnalysis.objects.get(pk=analysis.pk)
    assert analysis.status == "succeeded"
    bad = analysis.result["bad_lines"]["first"]
    assert [item["field"] for item in bad] == ["created_at"]
    assert "<PHONE>" in bad[0]["message"] and shows_none(json.dumps(analysis.result, ensure_ascii=False))


def test_a_replay_error_that_quotes_the_request_is_masked_before_it_is_cut_and_exported():
    async def quoting(request):
        body = await request.json()
        # "HTTP 400: " and this put the phone number across the 300-character cut.
        message = "x" * 270 + body["messages"][0]["content"]
        return web.json_response({"error": {"message": message}}, status=400)

    async def scenario():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", quoting)
        runner, url = await start_app(app)
        outcome = Outcome(seq=0, due_s=0)
        try:
            async with aiohttp.ClientSession() as session:
                body = {"messages": [{"role": "user", "content": PHONE_AND_MAIL}], "stream": False}
                await chat_once(session, Shot(seq=0, due_s=0, url=url, body=body), outcome, time.monotonic())
        finally:
            await runner.cleanup()
        return outcome

    outcome = asyncio.run(scenario())
    assert outcome.status_code == 400 and outcome.error.startswith("HTTP 400: xxx")
    # The error column of the request export is this text: the phone across the 300-character cut is gone whole.
    assert shows_none(outcome.error) and len(outcome.error) <= 300


LOG_LINES = [
    f"INFO Received request chatcmpl-1: prompt: '{PHONE_AND_MAIL}'",
    "ERROR request failed for 用户@例子.中国 calling 138.0013.8000",
    "INFO Avg prompt throughput: 12.5 tokens/s, Running: 2 reqs",
]


@pytest.mark.django_db
def test_the_node_page_shows_a_masked_engine_log_whatever_the_node_sends(users, client):
    staging_pool, _ = pools(users["sre"])
    node = node_in(staging_pool, users["sre"])
    node_heartbeat(node_id=node.pk, heartbeat={"status": "online", "log_tail": LOG_LINES})
    stored = EngineNode.objects.get(pk=node.pk).log_tail
    assert stored[2] == LOG_LINES[2]  # an ordinary line stays readable
    assert "<PHONE>" in stored[0] and "<EMAIL>" in stored[1]
    client.force_login(users["oncall"])
    page = client.get(f"/nodes/{node.name}/").content.decode()
    assert "Avg prompt throughput: 12.5 tokens/s" in page
    assert shows_none(page)


def test_the_agent_masks_the_engine_log_before_it_leaves_the_node(tmp_path):
    from engine_node.agent import Agent

    settings = AgentSettings(
        control_plane_url="", token="", node_name="n1", backend="simulator", model="base-model",
        served_model_name="chat", state_dir=tmp_path, port=9123,
    )  # fmt: skip

    async def scenario():
        agent = Agent(settings)
        agent.engine.log_tail.extend(LOG_LINES[:2])
        return agent.heartbeat()["log_tail"], agent.engine.last_error()

    log_tail, last_error = asyncio.run(scenario())
    assert len(log_tail) == 2 and "<PHONE>" in log_tail[0] and "<EMAIL>" in log_tail[1]
    assert shows_none(" ".join(log_tail)) and shows_none(last_error) and "request failed" in last_error
