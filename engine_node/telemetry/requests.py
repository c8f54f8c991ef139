"""The gateway's recent chat requests and admitted batches, as sliding windows of exact figures.

Each finished chat request is one tuple in a ring; figures are computed over the entries of the last `window_s`
seconds when a sample is built (once per second), so recording costs one append. At 50 requests per second a 10 s
window holds 500 entries: sorting them for exact percentiles takes well under a millisecond.

Outcomes: "ok" (answered), "error" (5xx from the engine, engine unreachable, a stream that failed), "rejected"
(refused by admission: 429 queue full, 503 gate closed or queue timeout) and "client_error" (the engine refused the
request with a 4xx, e.g. a prompt over max_model_len). Latency percentiles, time to first token and the length
distribution are over "ok" requests only; error and rejected rates are shares of every request in the window.
"1k tokens" is 1024, the boundary of the `le1k` bucket.

Intent figures (every outcome counts: the classifier decided before the request was admitted or refused):
`intent_classified` is how many of the window's requests the gateway's classifier labelled (a business tag or an
empty message is not a classification), `intent_below_floor_share` the share of those whose confidence was below
the template's intent confidence floor at decision time (null when none was classified), and
`intent_confidence_hist` their confidences in ten fixed buckets of 0.1 (`"0-10"` is [0, 0.1), ..., `"90-100"` is
[0.9, 1.0]). A rising share below the floor means traffic the model has not learnt (controlplane/alerts,
`intent-drift`).
"""

import collections
import math
import time

OUTCOMES = ("ok", "error", "rejected", "client_error")
TIERS = ("strict", "normal", "creative")
LENGTH_BUCKETS = (("le256", 256), ("le512", 512), ("le1k", 1024), ("le2k", 2048))
LENGTH_KEYS = (*(key for key, _ in LENGTH_BUCKETS), "gt2k")
LONG_REQUEST_TOKENS = 1024
CONFIDENCE_BUCKETS = tuple(f"{10 * i}-{10 * i + 10}" for i in range(10))
MAX_ENTRIES = 100_000  # a hard bound on memory: 10 s at 10k requests per second

# Entry fields, in tuple order (a tuple per request keeps recording cheap).
_END, _E2E, _TTFT, _OUTCOME, _TOKENS, _INTENT, _TIER, _CONFIDENCE, _BELOW_FLOOR = range(9)


def percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def length_bucket(tokens: int) -> str:
    for key, bound in LENGTH_BUCKETS:
        if tokens <= bound:
            return key
    return "gt2k"


class _Window:
    """A ring of tuples whose first field is the time they were recorded, pruned to `window_s` when read."""

    def __init__(self, window_s: float, clock, max_entries: int):
        self.window_s = window_s
        self._clock = clock
        self._entries: collections.deque[tuple] = collections.deque(maxlen=max_entries)
        self._created_at = clock()

    def recent(self, now: float | None = None) -> tuple[list[tuple], float]:
        """The entries of the last window and the window's length (shorter right after start)."""
        now = self._clock() if now is None else now
        horizon = now - self.window_s
        entries = self._entries
        while entries and entries[0][0] < horizon:
            entries.popleft()
        return [entry for entry in entries if entry[0] <= now], min(self.window_s, max(now - self._created_at, 1e-9))


class RequestLog(_Window):
    """Recent finished chat requests; `stats()` gives the sample's request figures over the window."""

    def __init__(self, window_s: float = 10.0, *, clock=time.monotonic, max_entries: int = MAX_ENTRIES):
        super().__init__(window_s, clock, max_entries)

    def record(
        self,
        *,
        e2e_s: float,
        outcome: str,
        ttft_s: float | None = None,
        tokens: int | None = None,
        intent: str = "none",
        tier: str = "normal",
        confidence: float | None = None,
        below_floor: bool = False,
        end: float | None = None,
    ) -> None:
        """One finished request; `confidence` is the classifier's (None when it did not decide), `below_floor` whether
        that was below the template's floor; `end` defaults to now on the log's clock."""
        self._entries.append(
            (
                self._clock() if end is None else end,
                e2e_s,
                ttft_s,
                outcome,
                tokens,
                intent,
                tier,
                confidence,
                below_floor,
            )
        )

    def stats(self, now: float | None = None) -> dict:
        entries, span = self.recent(now)
        counts = dict.fromkeys(OUTCOMES, 0)
        latencies: list[float] = []
        ttfts: list[float] = []
        lengths = dict.fromkeys(LENGTH_KEYS, 0)
        intents: dict[str, int] = {}
        tiers = dict.fromkeys(TIERS, 0)
        confidences = [0] * len(CONFIDENCE_BUCKETS)
        below_floor = 0
        for entry in entries:
            outcome = entry[_OUTCOME]
            counts[outcome] = counts.get(outcome, 0) + 1
            intents[entry[_INTENT]] = intents.get(entry[_INTENT], 0) + 1
            tiers[entry[_TIER]] = tiers.get(entry[_TIER], 0) + 1
            confidence = entry[_CONFIDENCE]
            if confidence is not None and 0.0 <= confidence <= 1.0:  # NaN is no reading
                confidences[int(confidence * 10) if confidence < 1.0 else 9] += 1
                below_floor += entry[_BELOW_FLOOR]
            if outcome != "ok":
                continue
            latencies.append(entry[_E2E])
            if entry[_TTFT] is not None:
                ttfts.append(entry[_TTFT])
            if entry[_TOKENS] is not None:
                lengths[length_bucket(entry[_TOKENS])] += 1
        latencies.sort()
        ttfts.sort()
        total = len(entries)
        sized = sum(lengths.values())
        classified = sum(confidences)
        return {
            "qps": (total - counts["rejected"]) / span,
            "latency_p50_s": percentile(latencies, 0.50),
            "latency_p99_s": percentile(latencies, 0.99),
            "latency_p999_s": percentile(latencies, 0.999),
            "ttft_p50_s": percentile(ttfts, 0.50),
            "ttft_p99_s": percentile(ttfts, 0.99),
            "error_rate": counts["error"] / total if total else None,
            "rejected_rate": counts["rejected"] / total if total else None,
            "length_hist": lengths,
            "long_request_share": (lengths["le2k"] + lengths["gt2k"]) / sized if sized else None,
            "intents": intents,
            "tiers": tiers,
            "intent_classified": classified,
            "intent_below_floor_share": below_floor / classified if classified else None,
            "intent_confidence_hist": dict(zip(CONFIDENCE_BUCKETS, confidences, strict=True)),
        }


class BatchLog(_Window):
    """Batch sizes as admission releases them (Admission.on_batch) and its batch timeouts (on_batch_timeouts);
    `stats()` gives the window's size distribution and the share of requests whose batch timeout was exceeded."""

    def __init__(self, window_s: float = 10.0, *, clock=time.monotonic, max_entries: int = MAX_ENTRIES):
        super().__init__(window_s, clock, max_entries)

    def observe(self, queue: str, size: int) -> None:
        self._entries.append((self._clock(), size, 0, 0))

    def observe_timeouts(self, queue: str, overdue: int, refused: int) -> None:
        """`overdue` requests of a batch just released waited past their timeout; `refused` ones gave up waiting."""
        self._entries.append((self._clock(), 0, overdue, refused))

    def stats(self, now: float | None = None) -> dict:
        entries, _ = self.recent(now)
        hist: dict[str, int] = {}
        batches = sizes = overdue = refused = 0
        for _, size, late, gave_up in entries:
            if size:
                hist[str(size)] = hist.get(str(size), 0) + 1
                batches += 1
                sizes += size
            overdue += late
            refused += gave_up
        left = sizes + refused  # every request that left the queues in the window, admitted or refused
        return {
            "batch_size_mean": sizes / batches if batches else None,
            "batch_size_hist": dict(sorted(hist.items(), key=lambda item: int(item[0]))),
            "batch_timeout_rate": (overdue + refused) / left if left else None,
        }
