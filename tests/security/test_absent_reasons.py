"""A node reports why its figures are absent: that text is the node's, so it is bounded, checked and escaped.

A compromised or buggy node must not put markup into the on-call page, flood the store with long texts, hide a
value behind a "reason", or point the agent's DCGM scrape at a URL carrying credentials.
"""

import time

import pytest
from django.test import Client

from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import MAX_REASON_CHARS, SampleRejected, sample_parse
from engine_node.settings import from_args
from tests.alerts import conftest as alerts_fixtures
from tests.alerts.conftest import blank_sample

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
