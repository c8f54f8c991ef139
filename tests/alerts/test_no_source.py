"""A figure the node has no source for is "no source", never healthy: evaluation, the on-call page, the node page.

The samples here are built by the agent's own Telemetry (engine_node), with a DCGM exporter served over real HTTP
and an injected NVML reading standing in for the driver, then checked by the control plane's sample contract.
"""

import asyncio
import time
from datetime import timedelta

from django.test import Client

from controlplane.alerts import coverage
from controlplane.alerts.evaluation import evaluate
from controlplane.alerts.models import Alert
from controlplane.metrics import selectors as metrics
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import sample_parse
from engine_node import telemetry
from engine_node.admission import Admission
from engine_node.telemetry import BatchLog, EngineScraper, GpuUtilisation, RequestLog, SmActivity, Telemetry, memory
from engine_node.telemetry import gpu as gpu_figures
from tests.engine_node.test_gpu_figures import DCGM_TEXT, _exporter


def agent_sample(*, fragmentation, dcgm: bool, nvml: bool) -> dict:
    """An agent's `m` as its Telemetry builds it, after the control plane's contract check."""

    async def build():
        runner, url = await _exporter(DCGM_TEXT)
        sm = SmActivity(url if dcgm else "", has_gpu=nvml)
        gpu = GpuUtilisation(read=lambda: {0: 0.9}) if nvml else None
        try:
            if dcgm:
                await sm.scrape()
            if gpu is not None:
                gpu.start()
                while gpu.value() is None:
                    await asyncio.sleep(0.05)
            telemetry = Telemetry(
                requests=RequestLog(),
                batches=BatchLog(),
                admission=Admission(5),
                scraper=EngineScraper(lambda: "http://127.0.0.1:9"),
                gpu=gpu,
                sm=sm,
                fragmentation=lambda: fragmentation,
                degraded=lambda: False,
                engine_restarts=lambda: 0,
            )
            return telemetry.build_sample()
        finally:
            if gpu is not None:
                await gpu.close()
            await sm.close()
            await runner.cleanup()

    _, m = sample_parse(asyncio.run(build()), now=time.time())
    return m


def store(fleet, name: str, at, m: dict) -> None:
    pool = fleet.prod.name
    MetricSample.objects.create(scope="node", name=name, pool=pool, t=at, resolution_s=1, values=m)
    fleet.heartbeat(name, at=at)


def alert_of(rule: str, node: str) -> Alert | None:
    return Alert.objects.filter(rule__name=rule, name=node).exclude(state="resolved").first()


def test_the_cpu_build_is_no_source_not_green(fleet, clock, users):
    fleet.add("cpu-1")
    cpu_build = agent_sample(fragmentation=(None, memory.CPU_BUILD), dcgm=False, nvml=False)
    assert cpu_build["absent"]["fragmentation_ratio"] == memory.CPU_BUILD
    assert cpu_build["absent"]["sm_util"] == gpu_figures.NO_GPU
    store(fleet, "cpu-1", clock.now, cpu_build)
    report = evaluate(now=clock.now)
    assert report.no_source >= 1 and alert_of("memory-fragmentation", "cpu-1") is None

    client = Client()
    client.force_login(users["oncall"])
    oncall = client.get("/oncall/").content.decode()
    section = oncall[oncall.index('data-testid="no-source"') :]
    section = section[: section.index("</section>")]
    assert section.count('data-node="cpu-1"') == 1  # once per node, however many rules it leaves uncovered
    assert "memory-fragmentation" in section and memory.CPU_BUILD in section

    page = client.get("/nodes/cpu-1/").content.decode()
    cell = page[page.index('data-testid="absent-figures"') :]
    cell = cell[: cell.index("</td>")]
    assert "GPU memory fragmentation" in cell and memory.CPU_BUILD in cell and gpu_figures.NO_GPU in cell

    # The same, for machines: the REST API (with its filters) and the control plane's /metrics.
    rows = client.get("/api/v1/alerts/no-source/", {"node": "cpu-1"}).json()
    fragmentation = next(r for r in rows if r["rule"] == "memory-fragmentation")
    assert fragmentation == {
        "node": "cpu-1",
        "pool": fleet.prod.name,
        "rule": "memory-fragmentation",
        "metric": "fragmentation_ratio",
        "label": fragmentation["label"],
        "reason": memory.CPU_BUILD,
    }
    assert client.get("/api/v1/alerts/no-source/", {"pool": "no-such-pool"}).json() == []
    exposition = client.get("/metrics").content.decode()
    assert (
        f'controlplane_alert_rule_no_source{{metric="fragmentation_ratio",node="cpu-1",pool="{fleet.prod.name}",'
        f'rule="memory-fragmentation"}} 1.0' in exposition
    )


def test_a_firing_alert_is_not_resolved_when_its_source_goes(fleet, clock):
    fleet.add("gpu-1")
    for _ in range(35):
        store(fleet, "gpu-1", clock.tick(2), agent_sample(fragmentation=(0.4, None), dcgm=False, nvml=True))
        evaluate(now=clock.now)
    alert = alert_of("memory-fragmentation", "gpu-1")
    assert (alert.state, alert.severity) == ("firing", "critical")

    store(fleet, "gpu-1", clock.tick(2), agent_sample(fragmentation=(None, memory.STALE), dcgm=False, nvml=True))
    evaluate(now=clock.now)
    alert.refresh_from_db()
    assert alert.state == "firing" and alert.is_stale  # unknown, not healthy

    store(fleet, "gpu-1", clock.tick(2), agent_sample(fragmentation=(0.05, None), dcgm=False, nvml=True))
    evaluate(now=clock.now)
    alert.refresh_from_db()
    assert alert.state == "resolved"  # a measured healthy value resolves it


def test_the_control_plane_and_the_agent_agree_on_the_sourced_figures():
    # engine_node never imports the control plane (nor the reverse): the two lists are kept in step by this test.
    assert frozenset(telemetry.SOURCED_FIGURES) == coverage.SOURCED_FIGURES


def test_a_null_without_a_reason_is_no_source_too(fleet, clock):
    fleet.add("old-1")
    fleet.sample("old-1", clock.now)  # an older agent: fragmentation null, no `absent` map
    report = evaluate(now=clock.now)
    assert report.no_source >= 1


def test_dcgm_and_nvml_figures_flow_to_the_charts(fleet, clock):
    fleet.add("gpu-2")
    m = agent_sample(fragmentation=(0.27, None), dcgm=True, nvml=True)
    assert m["absent"] == {}
    store(fleet, "gpu-2", clock.now, m)
    since = clock.now - timedelta(seconds=5)
    until = clock.now + timedelta(seconds=1)
    sm = metrics.series(scope="node", name="gpu-2", metric="sm_util", since=since, until=until)
    util = metrics.series(scope="node", name="gpu-2", metric="gpu_util", since=since, until=until)
    fragmentation = metrics.series(scope="node", name="gpu-2", metric="fragmentation_ratio", since=since, until=until)
    assert [v for _, v in sm] == [0.5] and [v for _, v in util] == [0.9] and [v for _, v in fragmentation] == [0.27]
    report = evaluate(now=clock.now)
    assert report.no_source == 0
    assert alert_of("memory-fragmentation", "gpu-2").state == "pending"  # 0.27 > the seed's 20 % warning line
