"""GPU and memory figures of the sample: SM activity from a DCGM exporter (a real little HTTP server serving
Prometheus text), utilisation from an injected NVML reading, fragmentation from the worker extension's reading,
and the reason carried for each figure that is absent."""

import asyncio

from aiohttp import web

from engine_node.admission import Admission
from engine_node.telemetry import BatchLog, EngineScraper, GpuUtilisation, RequestLog, SmActivity, Telemetry, memory
from engine_node.telemetry import gpu as gpu_figures
from tests.aiohttp_apps import start_app

DCGM_TEXT = """# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a",device="nvidia0",modelName="NVIDIA H200",Hostname="h"} 0.250000
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-b",device="nvidia1",modelName="NVIDIA H200",Hostname="h"} 0.750000
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 100
"""
DCGM_WITHOUT_PROFILING = """# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-a"} 100
"""


async def _exporter(body: str) -> tuple[web.AppRunner, str]:
    async def metrics(request):
        return web.Response(text=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner, base_url = await start_app(app)
    return runner, f"{base_url}/metrics"


def _telemetry(*, gpu=None, sm, fragmentation=None) -> Telemetry:
    return Telemetry(
        requests=RequestLog(),
        batches=BatchLog(),
        admission=Admission(5),
        scraper=EngineScraper(lambda: "http://127.0.0.1:9"),
        gpu=gpu,
        sm=sm,
        fragmentation=fragmentation,
        degraded=lambda: False,
        engine_restarts=lambda: 0,
    )


def test_sm_activity_comes_from_the_dcgm_exporter():
    async def scenario():
        runner, url = await _exporter(DCGM_TEXT)
        sm = SmActivity(url, has_gpu=True)
        try:
            before = sm.reason()
            await sm.scrape()
            return before, _telemetry(sm=sm).build_sample()["m"]
        finally:
            await sm.close()
            await runner.cleanup()

    before, m = asyncio.run(scenario())
    assert before.startswith("DCGM exporter http://127.0.0.1:") and "no answer" in before
    assert m["sm_util"] == 0.5  # the mean over the two GPUs; DCGM_FI_DEV_GPU_UTIL is not taken for it
    assert "sm_util" not in m["absent"]


def test_an_exporter_without_profiling_metrics_or_down_is_a_reason_not_a_value():
    async def scenario():
        runner, url = await _exporter(DCGM_WITHOUT_PROFILING)
        sm = SmActivity(url, has_gpu=True)
        down = SmActivity("http://127.0.0.1:9/metrics", has_gpu=True)
        try:
            await sm.scrape()
            await down.scrape()
            return _telemetry(sm=sm).build_sample()["m"], _telemetry(sm=down).build_sample()["m"]
        finally:
            await sm.close()
            await down.close()
            await runner.cleanup()

    no_profiling, unreachable = asyncio.run(scenario())
    assert no_profiling["sm_util"] is None
    assert "no DCGM_FI_PROF_SM_ACTIVE series" in no_profiling["absent"]["sm_util"]
    assert unreachable["sm_util"] is None and "unreachable" in unreachable["absent"]["sm_util"]


def test_nvml_utilisation_is_gpu_util_never_sm_activity():
    async def scenario():
        gpu = GpuUtilisation(read=lambda: {0: 0.30, 1: 0.50})
        gpu.start()
        try:
            for _ in range(50):
                await asyncio.sleep(0.05)
                if gpu.value() is not None:
                    break
            return _telemetry(gpu=gpu, sm=SmActivity(has_gpu=True)).build_sample()["m"]
        finally:
            await gpu.close()

    m = asyncio.run(scenario())
    assert round(m["gpu_util"], 6) == 0.4
    assert m["sm_util"] is None and m["absent"]["sm_util"] == gpu_figures.NO_DCGM
    assert "gpu_util" not in m["absent"]


def test_fragmentation_from_the_worker_extension_is_cached_and_goes_stale():
    cuda = {"device": "cuda", "fragmentation": 0.27, "reserved_bytes": 100, "inactive_split_bytes": 27}
    assert memory.fragmentation_figure(cuda, 100.0, 105.0) == (0.27, None)
    assert memory.fragmentation_figure(cuda, 100.0, 100.0 + memory.STALE_S + 1) == (None, memory.STALE)
    # Settled (online, nothing started on the engine since): the allocator has not changed, the reading stands.
    assert memory.fragmentation_figure(cuda, 100.0, 100.0 + memory.STALE_S + 1, settled=True) == (0.27, None)
    assert memory.fragmentation_figure(None, None, 1.0) == (None, memory.NO_READING)
    assert memory.fragmentation_figure(None, 1.0, 2.0) == (None, memory.NOT_ANSWERED)
    cpu = {"device": "cpu", "fragmentation": None}
    assert memory.fragmentation_figure(cpu, 1.0, 2.0) == (None, memory.CPU_BUILD)
    failed = {"device": None, "fragmentation": None, "error": "collective_rpc fragmentation_stats: HTTP 404"}
    assert "HTTP 404" in memory.fragmentation_figure(failed, 1.0, 2.0)[1]

    with_value = _telemetry(sm=SmActivity(has_gpu=True), fragmentation=lambda: (0.27, None)).build_sample()["m"]
    assert with_value["fragmentation_ratio"] == 0.27 and "fragmentation_ratio" not in with_value["absent"]
    on_cpu = _telemetry(sm=SmActivity(has_gpu=False), fragmentation=lambda: (None, memory.CPU_BUILD)).build_sample()
    assert on_cpu["m"]["fragmentation_ratio"] is None
    assert on_cpu["m"]["absent"]["fragmentation_ratio"] == memory.CPU_BUILD
