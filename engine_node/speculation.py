"""The node's speculative-decoding rule (the field report's): back off after sustained rejection, come back when
generation is slow.

The agent feeds every 1 Hz engine scrape to `SpeculationGuard.observe`. Figures are vLLM's own counters, read as
deltas over fixed windows of `speculative.window_s`: rejection is 1 - accepted / drafted tokens
(vllm:spec_decode_num_accepted_tokens_total over vllm:spec_decode_num_draft_tokens_total), generation speed is
requests' tokens per second, count / sum of vllm:request_time_per_output_token_seconds. A window with fewer than
MIN_DRAFT_TOKENS drafted counts neither way. After `speculative.backoff_windows` consecutive windows above
`speculative.rejection_threshold` the node asks for speculation off (a drained restart without
--speculative-config, granted by the control plane one node of a pool at a time).

While it is off vLLM drafts nothing, so nothing on the node can say whether drafts would be accepted again. The
rule is a probe: after `speculative.probe_after_s` off, and only while generation is slower than
`speculative.resume_below_tokens_per_s`, the node asks for speculation back on and measures again. A probe that is
rejected for `backoff_windows` windows turns it off again and doubles the wait (up to 8x); one accepted window
ends the probing and resets the wait.
"""

import time
from dataclasses import dataclass

MIN_DRAFT_TOKENS = 20
MAX_PROBE_BACKOFF = 8
# Asked-for changes are asked again after this long when the control plane neither grants nor answers.
REQUEST_RETRY_S = 10.0
KEEP_WINDOWS = 6
# Defaults of the template fields (controlplane/params/schema.py, which engine_node never imports; a unit test
# compares them).
DEFAULTS = {
    "rejection_threshold": 0.4,
    "backoff_windows": 3,
    "window_s": 10,
    "resume_below_tokens_per_s": 15.0,
    "probe_after_s": 300,
}


def speculation_params(content: dict | None) -> dict:
    """The rule's fields of the applied config's `speculative` section over the defaults, and whether it is on."""
    section = (content or {}).get("speculative")
    section = section if isinstance(section, dict) else {}
    params = {key: section.get(key, default) for key, default in DEFAULTS.items()}
    params["enabled"] = section.get("enabled") is True
    return params


@dataclass
class Window:
    """One closed window of vLLM's counters."""

    end: float
    drafted: float
    accepted: float
    tokens_per_s: float | None

    @property
    def rejection(self) -> float | None:
        if self.drafted < MIN_DRAFT_TOKENS:
            return None
        return 1.0 - min(1.0, max(0.0, self.accepted / self.drafted))

    def as_dict(self) -> dict:
        rejection = self.rejection
        return {
            "drafted": int(self.drafted),
            "rejection": None if rejection is None else round(rejection, 4),
            "tokens_per_s": None if self.tokens_per_s is None else round(self.tokens_per_s, 2),
        }


class SpeculationGuard:
    """Per-node state of the rule: the windows, whether speculation is off, the probe's wait."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self.off = False
        self.off_since: float | None = None
        self.probing = False
        self.failed_probes = 0
        self.rejected_windows = 0
        self.windows: list[Window] = []
        self.last_change = ""
        self._start: tuple[float, float, float, float, float] | None = None
        self._requested: tuple[str, float] | None = None

    # --- figures ----------------------------------------------------------------------------------------------

    def observe(self, figures: dict | None, params: dict, now: float | None = None) -> Window | None:
        """Take one scrape's counters; returns the window it closed, if any. A scrape without the counters
        (engine restarting, speculation off) or with counters that went back (a new engine) starts a window anew."""
        now = self._clock() if now is None else now
        point = _point(figures, now)
        start = self._start
        if point is None or start is None or any(b < a for a, b in zip(start[1:], point[1:], strict=True)):
            self._start = point
            return None
        if now - start[0] < params["window_s"]:
            return None
        self._start = point
        tpot_count, tpot_sum = point[3] - start[3], point[4] - start[4]
        window = Window(
            end=now,
            drafted=point[1] - start[1],
            accepted=point[2] - start[2],
            tokens_per_s=tpot_count / tpot_sum if tpot_count > 0 and tpot_sum > 0 else None,
        )
        self.windows = [*self.windows, window][-KEEP_WINDOWS:]
        rejection = window.rejection
        if not self.off and rejection is not None:
            if rejection > params["rejection_threshold"]:
                self.rejected_windows += 1
            else:
                self.rejected_windows = 0
                if self.probing:
                    self.probing, self.failed_probes = False, 0
        return window

    def tokens_per_s(self) -> float | None:
        """Generation speed of the last window that finished requests."""
        for window in reversed(self.windows):
            if window.tokens_per_s is not None:
                return window.tokens_per_s
        return None

    # --- decisions --------------------------------------------------------------------------------------------

    def hold_s(self, params: dict) -> float:
        return params["probe_after_s"] * min(MAX_PROBE_BACKOFF, 2**self.failed_probes)

    def due(self, params: dict, now: float | None = None) -> tuple[str, str] | None:
        """("off" or "on", reason with the figures) when the node should ask for a change now, else None."""
        now = self._clock() if now is None else now
        if not params["enabled"]:
            return None
        if self._requested is not None and now - self._requested[1] < REQUEST_RETRY_S:
            return None
        if not self.off:
            if self.rejected_windows < params["backoff_windows"]:
                return None
            shares = ", ".join(
                f"{w.rejection:.0%}" for w in self.windows[-params["backoff_windows"] :] if w.rejection is not None
            )
            probe = " (a probe after an earlier back-off)" if self.probing else ""
            return "off", (
                f"draft rejection above {params['rejection_threshold']:.0%} for {self.rejected_windows} consecutive "
                f"{params['window_s']} s windows ({shares}){probe}"
            )
        if self.off_since is None or now - self.off_since < self.hold_s(params):
            return None
        speed = self.tokens_per_s()
        if speed is None or speed >= params["resume_below_tokens_per_s"]:
            return None
        return "on", (
            f"generation at {speed:.1f} tokens/s, below {_num(params['resume_below_tokens_per_s'])}, after "
            f"{now - self.off_since:.0f} s off: probing whether drafts are accepted again"
        )

    def requested(self, action: str, now: float | None = None) -> None:
        self._requested = (action, self._clock() if now is None else now)

    def denied(self) -> None:
        """The control plane refused (another node of the pool holds the lease): ask again after the retry delay."""

    def applied(self, action: str, reason: str, now: float | None = None) -> None:
        """The drained restart for `action` is done: start counting afresh."""
        now = self._clock() if now is None else now
        self._requested = None
        self.rejected_windows = 0
        self._start = None
        self.last_change = reason
        if action == "off":
            if self.probing:
                self.failed_probes += 1
            self.off, self.off_since, self.probing = True, now, False
        else:
            self.off, self.off_since, self.probing = False, None, True

    def state(self, params: dict, now: float | None = None) -> dict:
        """What the node page shows."""
        now = self._clock() if now is None else now
        if not params["enabled"]:
            status = "not configured"
        elif self.off:
            status = "off"
        else:
            status = "probing" if self.probing else "on"
        return {
            "state": status,
            "rejected_windows": self.rejected_windows,
            "backoff_windows": params["backoff_windows"],
            "off_for_s": round(now - self.off_since) if self.off and self.off_since is not None else None,
            "probe_after_s": round(self.hold_s(params)) if self.off else None,
            "tokens_per_s": None if self.tokens_per_s() is None else round(self.tokens_per_s(), 2),
            "windows": [w.as_dict() for w in self.windows[-3:]],
            "last_change": self.last_change,
        }


def _point(figures: dict | None, now: float) -> tuple[float, float, float, float, float] | None:
    """(time, drafted, accepted, TPOT count, TPOT sum); absent counters (speculation off) read 0."""
    if not figures:
        return None
    values = [figures.get(key) for key in ("draft_tokens", "accepted_tokens", "tpot_count", "tpot_sum")]
    if all(value is None for value in values):
        return None
    return (now, *(float(value or 0.0) for value in values))


def _num(value: float) -> str:
    return f"{value:g}"
