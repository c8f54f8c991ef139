"""Back-pressure for live charts: each browser connection keeps only the newest pending sample per node, pool and fleet.

A browser confirms every `metrics.sample` frame it has read (`{"type": "metrics.received", "seq": n}`). At most
`WINDOW` frames may be unconfirmed: beyond that the browser (its network, its tab, or this process's loop) is not
keeping up, and samples wait here instead of in the channel layer or the socket's buffer. A newer sample of the same
node, pool or the fleet replaces a waiting one, and the replaced one is counted as thinned: the chart skips points
rather than falling behind. Frames carry `seq` and the connection's running `thinned` count, which the page shows.

Only samples are coalesced. ACKs, NACKs, rollout progress and alerts travel on other consumers (pool and alert
events), each event forwarded as it comes; their durable record is the database row written before the event is sent.
"""

from collections import Counter

# Unconfirmed frames per connection. The fleet page gets about four frames a second (one per ingestor flush), so a
# browser that keeps up never reaches this; a stalled one costs at most this many frames in its socket's buffer. The
# consumers take settings.METRICS_LIVE_UNCONFIRMED_FRAMES, whose default this is.
WINDOW = 8
RECEIPT_TYPE = "metrics.received"

# Process-wide, for the control plane's own /metrics.
counters: Counter = Counter()


class LiveSampleCoalescer:
    """One per browser connection: `offer` samples, `confirm` receipts, send what `frames_ready` gives."""

    def __init__(self, *, window: int = WINDOW):
        if window < 1:
            raise ValueError("window: must be at least 1")
        self.window = window
        self._pending: dict[tuple[str, str], dict] = {}  # (scope, name) -> newest event; insertion order is send order
        self.sent = 0  # seq of the last frame handed out
        self.confirmed = 0  # highest seq the browser confirmed
        self.thinned = 0

    @property
    def in_flight(self) -> int:
        return self.sent - self.confirmed

    @property
    def pending(self) -> int:
        return len(self._pending)

    def offer(self, event: dict) -> None:
        """Queue a sample; a waiting one of the same node, pool or fleet is replaced (and counted as thinned)."""
        key = (event["scope"], event["name"])
        if key in self._pending:
            self.thinned += 1
            counters["live_samples_thinned"] += 1
        self._pending[key] = event

    def confirm(self, seq: int) -> None:
        """The browser has read frames up to `seq`. A receipt for a frame never sent, or an old one, opens nothing."""
        self.confirmed = max(self.confirmed, min(seq, self.sent))

    def frames_ready(self) -> list[dict]:
        """Waiting samples that fit in the window, oldest key first, each with its `seq` and the `thinned` count."""
        frames = []
        while self._pending and self.in_flight < self.window:
            key = next(iter(self._pending))
            event = self._pending.pop(key)
            self.sent += 1
            frames.append({**event, "seq": self.sent, "thinned": self.thinned})
        counters["live_samples_sent"] += len(frames)
        return frames


def receipt_seq(message) -> int | None:
    """The `seq` of a well-formed receipt, else None (anything else a browser sends is ignored)."""
    if not isinstance(message, dict) or message.get("type") != RECEIPT_TYPE:
        return None
    seq = message.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return None
    return seq
