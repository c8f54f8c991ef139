"""The sample's `fragmentation_ratio` on vLLM: the worker extension's reading, cached between reads, or its absence.

vLLM exports no fragmentation series. The automatic-cleanup check (engine_node/cleanup.py) already reads the
worker extension every CHECK_PERIOD_S (2 s) while the node is online, through one dev-mode `collective_rpc` (with
no engine-side timeout: engine_node/fragmentation.py), to decide whether a cleanup is due; the sample shows that
same reading, so the 1 Hz sample adds no call to the engine. What one call every 2 s costs the engine: vLLM's engine
core answers a utility call between two scheduler steps, and in each worker the extension walks the CUDA caching
allocator's segment list (`torch.cuda.memory_snapshot` without history: host-side, no kernel launch, no device
synchronisation) and reports the time it took as `read_ms`. While the node is online and no request has started
since the last reading, the allocator has not changed and the check reuses that reading (cleanup.SETTLED_REREAD_S):
such a settled reading is shown whatever its age. Any other reading older than STALE_S (the check skips reads
while the engine drains, restarts or warms up) is not shown.

On the simulator the figure comes from its own `sim:memory_fragmentation_ratio` series (engine_scrape.py), scraped
every second and labelled simulated there.
"""

STALE_S = 10.0

NO_READING = "no reading from the engine's worker extension yet"
NOT_ANSWERED = "the engine answered neither the worker extension's call nor /metrics at the last read"
STALE = "no fresh reading: the engine is not serving (draining, restarting or warming up)"
CPU_BUILD = "the vLLM CPU build has no CUDA caching allocator, so there is no fragmentation to read"


def fragmentation_figure(
    reading: dict | None, read_at: float | None, now: float, *, settled: bool = False
) -> tuple[float | None, str | None]:
    """(fragmentation 0..1, None) from a fresh (or settled) worker-extension reading, else (None, why it is absent)."""
    if read_at is None:
        return None, NO_READING
    if reading is None:
        return None, NOT_ANSWERED
    if now - read_at > STALE_S and not settled:
        return None, STALE
    value = reading.get("fragmentation")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return min(1.0, max(0.0, float(value))), None
    if reading.get("device") == "cpu":
        return None, CPU_BUILD
    if reading.get("error"):
        return None, f"the worker extension failed: {str(reading['error'])[:200]}"
    return None, "the engine's workers reported no allocator statistics"
