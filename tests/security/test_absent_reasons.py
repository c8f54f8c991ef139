"""A node reports why its figures are absent: that text is the node's, so it is bounded, checked and escaped.

A compromised or buggy node must not put markup into the on-call page, flood the store with long texts, hide a
value behind a "reason", give a reason that shows nothing, or point the agent's DCGM scrape at a URL carrying
credentials. People's reasons are held to the same: wherever a reason is required, one that only looks like text
(whitespace, zero-width and other format characters, blank fillers) is refused naming the field.
"""

import time

import pytest
from django.test import Client

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import InvalidField, optional_text, required_text
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import MAX_REASON_CHARS, SampleRejected, sample_parse
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.replays.models import ReplayRun
from engine_node.settings import from_args
from tests.alerts import conftest as alerts_fixtures
from tests.alerts.conftest import blank_sample
from tests.factories import pools, template_with_versions
from tests.replays.logs import log_lines, store_log

NOW = time.time()
# The alerts tests' fleet of nodes, with the default rules, on a hand-moved clock.
clock = alerts_fixtures.clock
default_rules = alerts_fixtures.default_rules
fleet = alerts_fixtures.fleet


def message(**m) -> dict:
    return {"type": "sample", "t": NOW, "window_s": 10, "m": blank_sample(**m)}


@pytest.mark.parametrize(
    "absent",
    [
        {"sm_util": "x" * (MAX_REASON_CHARS + 1)},  # a flood
        {"sm_util": "no DCGM\nFAKE-ALERT: all clear"},  # a forged second line in logs and pages
        {"sm_util": "ok\x1b[2J"},  # terminal control sequences
        {"latency_p99_s": None},  # not a text
        {"__proto__": "x"},  # not a figure
        {"sm_util": ""},  # no reason at all
        {"sm_util": "   "},  # blank
        {"sm_util": "\u200b\u200d"},  # zero-width characters only
        {"sm_util": "\u2800\u3164"},  # blank braille cell, Hangul filler: printable, and blank
    ],
)
def test_hostile_reasons_are_refused_whole(absent):
    with pytest.raises(SampleRejected) as refused:
        sample_parse(message(absent=absent), now=NOW)
    assert refused.value.reason.startswith("absent")


def test_a_reason_cannot_hide_a_value():
    with pytest.raises(SampleRejected, match="the figure has a value"):
        sample_parse(message(fragmentation_ratio=0.5, absent={"fragmentation_ratio": "no allocator"}), now=NOW)


def test_markup_in_a_reason_is_shown_as_text(fleet, clock, users):
    fleet.add("gpu-x")
    _, m = sample_parse(message(absent={"fragmentation_ratio": "<script>alert(1)</script>"}), now=NOW)
    MetricSample.objects.create(scope="node", name="gpu-x", pool=fleet.prod.name, t=clock.now, resolution_s=1, values=m)
    fleet.heartbeat("gpu-x", at=clock.now)
    client = Client()
    client.force_login(users["oncall"])
    for url in ("/oncall/", "/nodes/gpu-x/"):
        page = client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.parametrize(
    "url", ["http://user:secret@127.0.0.1:9400/metrics", "file:///etc/passwd", "http://127.0.0.1:9400/m?x=1"]
)
def test_the_dcgm_exporter_url_must_be_a_plain_http_url(url, capsys):
    with pytest.raises(SystemExit):
        from_args(["--backend", "simulator", "--dcgm-exporter-url", url])
    assert "--dcgm-exporter-url" in capsys.readouterr().err


BLANK_LOOKING = {
    "spaces": "  \t ",
    "ideographic-space": "\u3000",
    "zero-width": "\u200b\u200c\u200d\u2060",
    "byte-order-mark": "\ufeff",
    "bidi-controls": "\u202e\u2066\u2069",
    "soft-hyphen": "\u00ad",
    "tags": "\U000e0041\U000e0020",
    "combining-marks-alone": "\u0301\u034f\ufe0f",
    "fillers": "\u3164\u115f\uffa0\u2800",
    "line-separators": "\u2028\u2029\u0085",
}
VISIBLE_ENOUGH = ["ok", "\u200b。", "🔥", "٣", "\u3164x"]


@pytest.mark.parametrize("text", BLANK_LOOKING.values(), ids=BLANK_LOOKING.keys())
def test_a_blank_looking_reason_is_refused_by_the_shared_check(text):
    with pytest.raises(InvalidField, match=r"^reason: required"):
        required_text("reason", text)
    if not text.strip():  # whitespace: an override left empty, so the gate stays closed
        assert optional_text("override_reason", f" {text} ") == ""
        return
    with pytest.raises(InvalidField, match=r"^override_reason: "):
        optional_text("override_reason", f" {text} ")


@pytest.mark.parametrize("text", VISIBLE_ENOUGH)
def test_a_reason_with_anything_visible_is_kept_stripped(text):
    assert required_text("reason", f" {text}\n") == text
    assert optional_text("override_reason", "") == ""


@pytest.mark.django_db
@pytest.mark.parametrize("text", ["\u200b", "\u2800", "\u202e\u00ad"], ids=["zero-width", "braille-blank", "format"])
def test_the_api_refuses_blank_looking_reasons_and_overrides_and_changes_nothing(
    users, api_for, settings, text, tmp_path
):
    settings.CONVERSATION_LOG_DIR = tmp_path
    staging, _ = pools(users["sre"])
    node_create(actor=users["sre"], name="gpu-1", pool=staging)
    _, (version,) = template_with_versions(users["sre"])
    store_log(users["agent"], log_lines(2))
    audited = AuditEntry.objects.count()
    sre = api_for("sre")

    revoke = sre.post("/api/v1/nodes/gpu-1/revoke/", {"reason": text}, format="json")
    replay = api_for("agent").post(
        "/api/v1/replays/", {"pool": "staging", "log": "festival-log", "qps": 5, "reason": text}, format="json"
    )
    # A production pool's gate is closed for a version never run on staging: an invisible override must not open it.
    publish = sre.post(
        "/api/v1/pools/prod-main/publish/",
        {"template": "chat", "version": version.number, "reason": "release", "override_reason": text},
        format="json",
    )
    override = api_for("sre").post(
        "/api/v1/replays/",
        {"pool": "prod-main", "log": "festival-log", "qps": 5, "reason": "x", "production_override_reason": text},
        format="json",
    )

    for response, field in ((revoke, "reason"), (replay, "reason"), (publish, "override_reason")):
        assert response.status_code == 400, response.content
        assert response.json()["error"].startswith(f"{field}: "), response.json()
    assert override.status_code == 400 and override.json()["error"].startswith(("production_override_reason", "pool"))
    assert EngineNode.objects.get(name="gpu-1").has_token
    assert not ReplayRun.objects.exists() and Pool.objects.get(name="prod-main").desired_version is None
    assert AuditEntry.objects.count() == audited
