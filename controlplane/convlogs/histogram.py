"""Integer token-length histograms: exact counts per length up to a bound plus one overflow bucket, so memory stays
flat however many values are added, and percentiles below the bound are exact."""

from __future__ import annotations

import math

# Replies and prompts up to this many tokens are counted exactly; longer ones share the overflow bucket.
DEFAULT_BOUND = 16384


class TokenHistogram:
    """Counts of non-negative integer lengths; `percentile` is nearest-rank (the smallest length that at least p % of
    the values are at or below), so it is always a length that occurred."""

    __slots__ = ("bound", "count", "counts", "largest", "overflow", "total")

    def __init__(self, bound: int = DEFAULT_BOUND):
        self.bound = bound
        self.counts = [0] * (bound + 1)
        self.overflow = 0
        self.total = 0
        self.count = 0
        self.largest = 0

    def add(self, value: int) -> None:
        if value > self.bound:
            self.overflow += 1
        else:
            self.counts[value] += 1
        self.total += value
        self.count += 1
        if value > self.largest:
            self.largest = value

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def percentile(self, p: float) -> int | None:
        """The nearest-rank p-th percentile; `bound + 1` stands for "longer than the bound"."""
        if not self.count:
            return None
        rank = max(1, math.ceil(p / 100 * self.count))
        seen = 0
        for value, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return value
        return self.bound + 1

    def at_most(self, limit: int) -> int:
        """How many values are <= `limit`."""
        if limit > self.bound:
            return self.count if limit >= self.largest else self.count - self.overflow
        return sum(self.counts[: limit + 1])

    def share_above(self, limit: int) -> float | None:
        return (self.count - self.at_most(limit)) / self.count if self.count else None

    def summary(self) -> dict:
        """Count, mean, P50/P95/P99, max: what tables show."""
        mean = self.mean
        return {
            "count": self.count,
            "mean": round(mean, 1) if mean is not None else None,
            "p50": self.percentile(50),
            "p95": self.percentile(95),
            "p99": self.percentile(99),
            "max": self.largest if self.count else None,
            "overflow": self.overflow,
        }

    def bins(self, width: int, up_to: int) -> dict:
        """`{"width", "counts", "over"}`: counts per `width`-token bin from 0 to `up_to`, and how many are longer."""
        up_to = min(up_to, self.bound)
        counts = [sum(self.counts[start : min(start + width, up_to + 1)]) for start in range(0, up_to + 1, width)]
        return {"width": width, "counts": counts, "over": self.count - sum(counts)}
