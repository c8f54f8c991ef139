"""Impact records on three agents running the simulator, against the real control plane (daphne, Redis, Postgres).

Open-loop traffic (engine_node.loadgen at a fixed rate, sent on schedule whatever the latency, as users arrive) runs
through three publishes, each to every node at once, with 8 s windows before and after each (the after-window from
6 s after the change, once the engines have restarted and the agents' sample windows, 2 s here as the test time
scale, hold only the new version's requests). The arrivals are evenly spaced: ten seconds of Poisson arrivals vary
by a tenth from one window to the next, which would drown the load check; even ones carry the same load in every
window, so what the check sees is the change's, not the dice's.

1. `engine.quantization: fp8` on a simulated checkpoint whose fp8 steps cost 10× (the simulator's own latency model,
   not an injected fault): the record says P99 worsened. Slow enough to be unmistakable, not so slow that the
   engines saturate: an open loop against saturated engines completes fewer requests per second, and the record
   would rightly call that a load shift;
2. back to no quantization: the record says P99 improved;
3. a hot temperature edit while a second load generator doubles the traffic: the record is inconclusive (load
   shifted), never credited.

The figures are the simulator's, not vLLM measurements; the measuring pass runs in this process, as the beat
schedule's `impact-measure` would.
"""

import os
import subprocess
import sys
import time

import pytest

from controlplane.impact.models import ImpactRecord
from controlplane.impact.services import impact_records_measure_due
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.canary_settings import pool_canary_update
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import TEST_CLIENT_KEY, AgentProcess, start_agents, stop_agents, wait_until
from tests.live_server import ROOT, Daphne

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.agents]

SLOWER_FP8_PROFILE = """
supported_quantizations:
  fp8: 10
latency:
  time_scale: 0.5
reply_length:
  median: 14
  sigma: 0.2
  min: 12
  max: 16
"""
# Eight 1 s pool rows a side, four independent 2 s sample windows (production: 600 s of 10 s windows): a P99 ten
# times higher on every row of one side reads p = 0.017 (ALPHA 0.05).
WINDOW_S = 8
SETTLE_S = 6
QPS = 10.0
# Even arrivals: a window's QPS is the rate sent, give or take a request finishing either side of its edges. The
# production default is ±15 % over 10-minute windows; the load-shift case doubles the traffic, far beyond either.
LOAD_TOLERANCE_PCT = 15


def document(strict: float = 0.3, **sections) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, "temperature": {"strict": strict}, **sections}}


def nodes_on(version) -> list[str]:
    return sorted(
        EngineNode.objects.filter(applied_hash=version.content_hash, is_connected=True).values_list("name", flat=True)
    )


class LoadGen:
    """`python -m engine_node.loadgen` at a fixed rate over the agents' gateways, stopped on exit."""

    def __init__(self, agents, qps: float, log_path):
        urls = [agent.url for agent in agents]
        self.args = [sys.executable, "-m", "engine_node.loadgen", "--qps", str(qps), "--arrivals", "even", *urls]
        self.log_path = log_path
        self.process = None

    def __enter__(self):
        env = {**os.environ, "LOADGEN_API_KEY": TEST_CLIENT_KEY}
        with open(self.log_path, "a") as out:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(self.args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        return self

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def fleet(tmp_path, sre, settings, short_sample_window):
    """daphne + pool `staging` (publishes go to every node at once) on three agents, all on chat v1."""
    settings.IMPACT_WINDOW_BEFORE_S = settings.IMPACT_WINDOW_AFTER_S = WINDOW_S
    settings.IMPACT_SETTLE_S = SETTLE_S
    settings.IMPACT_MIN_SAMPLES = WINDOW_S - 2  # a pool row or two may be missing on a loaded machine
    settings.IMPACT_LOAD_TOLERANCE_PCT = LOAD_TOLERANCE_PCT
    profile = tmp_path / "slower-fp8.yaml"
    profile.write_text(SLOWER_FP8_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="staging", is_production=False)
    pool = pool_canary_update(
        actor=sre, pool=pool, canary_stages=[{"percent": 100}], analysis_window_s=5, reason="every node at once"
    )
    template = template_create(actor=sre, name="chat")
    v1 = template_version_create(actor=sre, template=template, document=document(), base_number=None)
    pool_publish(actor=sre, pool=pool, version=v1, reason="first")
    agents = []
    for i in range(1, 4):
        node, token = node_create(actor=sre, name=f"gpu-{i}", pool=pool)
        agents.append(
            AgentProcess(
                name=node.name, token=token, control_plane_url=server.ws_agent_url, work=tmp_path, profile=profile
            )
        )
    try:
        start_agents(agents)
        wait_until(lambda: nodes_on(v1) == ["gpu-1", "gpu-2", "gpu-3"], 60, "three agents to connect and apply v1")
        yield {"pool": pool, "template": template, "v1": v1, "agents": agents, "tmp": tmp_path}
    finally:
        stop_agents(agents)
        server.stop()


def publish_and_wait(sre, pool, version, reason: str) -> ImpactRecord:
    pool_publish(actor=sre, pool=pool, version=version, reason=reason)
    record = ImpactRecord.objects.filter(kind="publish", version_after=version).get()
    wait_until(lambda: nodes_on(version) == ["gpu-1", "gpu-2", "gpu-3"], 60, f"every node to apply {version}")
    time.sleep(max(0.0, record.after_until.timestamp() + 1 - time.time()))  # the window's last pool row stored
    return record


def test_records_credit_a_slower_and_a_faster_version_and_not_a_load_shift(fleet, sre):
    pool, template, agents, tmp = fleet["pool"], fleet["template"], fleet["agents"], fleet["tmp"]
    fp8 = template_version_create(
        actor=sre, template=template, document=document(engine={"quantization": "fp8"}), base_number=1
    )
    plain = template_version_create(actor=sre, template=template, document=document(strict=0.25), base_number=2)
    cooler = template_version_create(actor=sre, template=template, document=document(strict=0.2), base_number=3)
    with LoadGen(agents, QPS, tmp / "loadgen.log"):
        time.sleep(WINDOW_S + 2)  # a full window of v1 before the first change (and the loadgen's first)
        slower = publish_and_wait(sre, pool, fp8, "fp8 to fit more sequences")
        faster = publish_and_wait(sre, pool, plain, "fp8 was slower: back to unquantized")
        with LoadGen(agents, 2 * QPS, tmp / "loadgen-extra.log"):
            shifted = publish_and_wait(sre, pool, cooler, "cooler strict tier during the evening peak")
    assert impact_records_measure_due() >= 3
    for record in ImpactRecord.objects.filter(pk__in=[slower.pk, faster.pk, shifted.pk]).order_by("pk"):
        print(f"record {record.pk} {record.reason!r}: {record.outcome_reason}")  # the measured figures, for the log

    slower.refresh_from_db()
    assert slower.status == "measured" and slower.outcome == "worsened", (slower.outcome_reason, slower.load)
    assert slower.conclusions["latency_p99_s"]["verdict"] == "worsened"
    assert abs(slower.load["qps_ratio"] - 1) <= LOAD_TOLERANCE_PCT / 100
    assert slower.after["latency_p99_s"]["median"] > 2 * slower.before["latency_p99_s"]["median"]
    assert [(c.path, c.new) for c in slower.field_changes.all()] == [("engine.quantization", "fp8")]

    faster.refresh_from_db()
    assert faster.outcome == "improved", (faster.outcome_reason, faster.load, faster.conclusions["latency_p99_s"])
    assert faster.conclusions["latency_p99_s"]["verdict"] == "improved"

    shifted.refresh_from_db()
    assert shifted.outcome == "inconclusive", (shifted.outcome_reason, shifted.load)
    assert shifted.outcome_reason.startswith("load shifted:")
    assert shifted.load["qps_ratio"] > 1 + LOAD_TOLERANCE_PCT / 100
