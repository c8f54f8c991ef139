"""A node reports the window its samples cover. A compromised or misconfigured node that claims a shorter one (its
P99 over the last second, after a slow request has left it) could pass a canary or be credited in an impact record
on figures the control plane reads as ten seconds' worth: such a sample is refused at ingestion, counted and logged,
and never queued; the same sample over the control plane's own window is taken."""

import asyncio

from controlplane.metrics.services.ingest import SampleIngestor
from tests.metrics.conftest import sample


def test_a_sample_over_another_window_is_refused_at_ingestion_and_never_queued(caplog, settings):
    async def scenario():
        ingestor = SampleIngestor()
        flattering = {**sample(latency_p99_s=0.05), "window_s": 1}
        refused = ingestor.record(node="gpu-1", pool="prod-main", message=flattering)
        queued_after_refusal = len(ingestor._received)
        honest = ingestor.record(node="gpu-1", pool="prod-main", message=sample(latency_p99_s=0.05))
        return refused, queued_after_refusal, honest, len(ingestor._received)

    assert settings.METRICS_SAMPLE_WINDOW_S == 10
    with caplog.at_level("WARNING"):
        refused, queued_after_refusal, honest, queued = asyncio.run(scenario())
    assert (refused, queued_after_refusal) == (False, 0)
    assert (honest, queued) == (True, 1)
    reason = "window_s: 1 s, but this control plane reads 10 s sample windows"
    assert any(reason in record.getMessage() for record in caplog.records)
