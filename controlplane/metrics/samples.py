"""The 1 Hz sample an agent sends (issue 5, contract A): its keys, their types, and the check every sample passes.

A sample that breaks a rule is dropped as a whole (never half-stored): `sample_parse` raises `SampleRejected` with a
short reason, which the ingestor counts and logs. Rules: the message has exactly `type`, `t`, `window_s` and `m`;
`m` has exactly the keys below, plus `absent` (which an older agent leaves out); numbers are finite and not
negative (a bool is not a number); nullable figures may be null; counts are integers; histogram and count maps
hold known buckets (free labels for intents) with integer counts; `absent` maps null figures to why the node has
no value for them (a short printable text each; `{}` when left out); `t` is within `MAX_CLOCK_SKEW_S` of the
control plane's clock.

The intent figures (engine_node/telemetry/requests.py) hold together: `intent_confidence_hist` has at most the ten
fixed buckets and its counts add up to `intent_classified`; `intent_below_floor_share` is a share (0 to 1), null
exactly when nothing was classified; each count is at most `MAX_WINDOW_COUNT` (a node's window holds at most 100,000
requests; a larger figure is a lie that would only distort the pool's weighted share). An agent older than these
figures leaves all three out: its sample counts as having classified nothing.
"""

import math
import re

from django.conf import settings

from controlplane.lib.errors import has_visible_text

# Figures that may be null when unknown (no GPU, no requests in the window, no speculative decoding, ...).
NULLABLE_FIGURES = (
    "latency_p50_s",
    "latency_p99_s",
    "latency_p999_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "error_rate",
    "rejected_rate",
    "requests_running",
    "requests_waiting",
    "kv_cache_usage",
    "batch_size_mean",
    "batch_efficiency",
    "batch_idle_ratio",
    "spec_acceptance_rate",
    "spec_rejection_rate",
    "fragmentation_ratio",
    "gpu_util",
    "sm_util",
    "long_request_share",
    "gpu_memory_used",
    "batch_timeout_rate",
    "intent_below_floor_share",
)
FIGURES = ("qps",)  # always a number
COUNTS = ("queue_depth_short", "queue_depth_long", "engine_restarts", "intent_classified")  # integers
FLAGS = ("degraded",)  # 0 or 1
LENGTH_BUCKETS = ("le256", "le512", "le1k", "le2k", "gt2k")
TIERS = ("strict", "normal", "creative")
CONFIDENCE_BUCKETS = tuple(f"{10 * i}-{10 * i + 10}" for i in range(10))  # [0, 0.1), ..., [0.9, 1.0]
COUNT_MAPS = ("batch_size_hist", "length_hist", "intents", "tiers", "intent_confidence_hist")
SAMPLE_KEYS = frozenset((*NULLABLE_FIGURES, *FIGURES, *COUNTS, *FLAGS, *COUNT_MAPS))
MESSAGE_KEYS = frozenset({"type", "t", "window_s", "m"})
# What an agent older than the intent figures leaves out, read as "nothing classified".
INTENT_DEFAULTS = {"intent_classified": 0, "intent_below_floor_share": None, "intent_confidence_hist": {}}
MAX_WINDOW_COUNT = 10**9
# Why a figure is null on this node: {figure: reason}. Not a figure itself (never charted or aggregated).
ABSENT = "absent"
MAX_REASON_CHARS = 300


def sample_window_s() -> int:
    """Seconds of requests each 1 s sample's request figures (latency percentiles, error rate, acceptance) cover: the
    agents' sample window (ENGINE_NODE_SAMPLE_WINDOW_S, 10 s by default), which this control plane is told as
    METRICS_SAMPLE_WINDOW_S and checks on every sample. For this long after a node changes version its samples still
    mix in requests of the version before."""
    return settings.METRICS_SAMPLE_WINDOW_S


# An agent whose clock is further off than this sends rows the history and the staleness check cannot place.
MAX_CLOCK_SKEW_S = 300.0
MAX_MAP_ENTRIES = 256
_LABEL = re.compile(r"[\w.:-]{1,64}")
_BATCH_SIZE = re.compile(r"[1-9][0-9]{0,4}")


class SampleRejected(ValueError):
    """The sample breaks a rule of the contract; `reason` names the key and the rule."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(key: str, value, *, nullable: bool) -> float | None:
    if value is None and nullable:
        return None
    if not _is_number(value):
        raise SampleRejected(f"{key}: expected a number{' or null' if nullable else ''}, got {type(value).__name__}")
    if value < 0:
        raise SampleRejected(f"{key}: must not be negative")
    return value


def _count(key: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SampleRejected(f"{key}: expected an integer, got {type(value).__name__}")
    if value < 0:
        raise SampleRejected(f"{key}: must not be negative")
    return value


def _count_map(key: str, value, allowed_key) -> dict[str, int]:
    if not isinstance(value, dict):
        raise SampleRejected(f"{key}: expected an object, got {type(value).__name__}")
    if len(value) > MAX_MAP_ENTRIES:
        raise SampleRejected(f"{key}: more than {MAX_MAP_ENTRIES} entries")
    for bucket, n in value.items():
        if not allowed_key(bucket):
            raise SampleRejected(f"{key}: unknown bucket {str(bucket)[:40]!r}")
        _count(f"{key}.{bucket}", n)
    return value


_MAP_KEYS = {
    "batch_size_hist": lambda k: bool(_BATCH_SIZE.fullmatch(k)),
    "length_hist": lambda k: k in LENGTH_BUCKETS,
    "intents": lambda k: bool(_LABEL.fullmatch(k)),
    "tiers": lambda k: k in TIERS,
    "intent_confidence_hist": lambda k: k in CONFIDENCE_BUCKETS,
}


def sample_parse(message, *, now: float) -> tuple[float, dict]:
    """(t, m) of a valid sample message; raises SampleRejected otherwise. `now` is the control plane's unix time."""
    if not isinstance(message, dict):
        raise SampleRejected("message: expected an object")
    if set(message) != MESSAGE_KEYS:
        raise SampleRejected(_key_difference("message", set(message), MESSAGE_KEYS))
    t = _number("t", message["t"], nullable=False)
    if abs(t - now) > MAX_CLOCK_SKEW_S:
        raise SampleRejected(f"t: {t - now:+.0f} s from the control plane's clock (more than {MAX_CLOCK_SKEW_S:.0f})")
    window_s = _number("window_s", message["window_s"], nullable=False)
    if window_s <= 0:
        raise SampleRejected("window_s: must be positive")
    if window_s != sample_window_s():
        raise SampleRejected(
            f"window_s: {window_s:g} s, but this control plane reads {sample_window_s()} s sample windows "
            "(its METRICS_SAMPLE_WINDOW_S and the agent's ENGINE_NODE_SAMPLE_WINDOW_S must say the same)"
        )
    m = message["m"]
    if not isinstance(m, dict):
        raise SampleRejected(f"m: expected an object, got {type(m).__name__}")
    m.setdefault(ABSENT, {})
    if not any(key in m for key in INTENT_DEFAULTS):
        m.update(INTENT_DEFAULTS)
    if set(m) - {ABSENT} != SAMPLE_KEYS:
        raise SampleRejected(_key_difference("m", set(m) - {ABSENT}, SAMPLE_KEYS))
    for key in FIGURES:
        _number(key, m[key], nullable=False)
    for key in NULLABLE_FIGURES:
        _number(key, m[key], nullable=True)
    for key in COUNTS:
        _count(key, m[key])
    for key in FLAGS:
        if m[key] not in (0, 1) or isinstance(m[key], float):
            raise SampleRejected(f"{key}: expected 0 or 1")
        m[key] = int(m[key])
    for key in COUNT_MAPS:
        _count_map(key, m[key], _MAP_KEYS[key])
    _intent_figures(m)
    _absent(m)
    return float(t), m


def _intent_figures(m: dict) -> None:
    classified, share, hist = m["intent_classified"], m["intent_below_floor_share"], m["intent_confidence_hist"]
    if classified > MAX_WINDOW_COUNT:
        raise SampleRejected(f"intent_classified: a window counts at most {MAX_WINDOW_COUNT} requests")
    if sum(hist.values()) != classified:
        raise SampleRejected("intent_confidence_hist: its counts must add up to intent_classified")
    if (share is None) != (classified == 0):
        raise SampleRejected("intent_below_floor_share: null exactly when intent_classified is 0")
    if share is not None and share > 1:
        raise SampleRejected("intent_below_floor_share: a share, at most 1")


def _absent(m: dict) -> None:
    absent = m[ABSENT]
    if not isinstance(absent, dict):
        raise SampleRejected(f"{ABSENT}: expected an object, got {type(absent).__name__}")
    for key, reason in absent.items():
        if key not in NULLABLE_FIGURES:
            raise SampleRejected(f"{ABSENT}: {str(key)[:40]!r} is not a figure that may be null")
        if m[key] is not None:
            raise SampleRejected(f"{ABSENT}.{key}: the figure has a value, so it cannot be absent")
        if not isinstance(reason, str) or not reason or not reason.isprintable() or len(reason) > MAX_REASON_CHARS:
            raise SampleRejected(f"{ABSENT}.{key}: expected a printable text of 1 to {MAX_REASON_CHARS} characters")
        if not has_visible_text(reason):
            raise SampleRejected(f"{ABSENT}.{key}: the reason shows nothing (blank or invisible characters only)")


def _key_difference(where: str, got: set, wanted: frozenset) -> str:
    missing = sorted(str(k) for k in wanted - got)
    unknown = sorted(str(k)[:40] for k in got - wanted)
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing[:5]) + ("…" if len(missing) > 5 else ""))
    if unknown:
        parts.append("unknown " + ", ".join(unknown[:5]) + ("…" if len(unknown) > 5 else ""))
    return f"{where}: " + "; ".join(parts)
