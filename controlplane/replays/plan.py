"""A replay run's plan: which conversations, which requests, when each is due, to which node, in which share.

Pure functions of the run's fields and the log's conversations (as `controlplane.convlogs.reader` yields them), so
every share of a run, in any worker, draws the same plan and keeps its own part (`seq % shares == index`).

- A conversation gives one request per user message: the log's messages up to and including it (the log's earlier
  replies are the history; the replay does not wait for its own replies).
- Selection: `all`, `sample` (n conversations, uniformly, reproducible from the seed; log order kept), `top` (one
  conversation for each of the N most frequent first user messages, most frequent first; ties by first appearance).
- Pacing: `qps` (Poisson or uniform arrivals at the target rate), `ladder` (the same, at each step's rate for
  `step_s` seconds, steps back to back: a sustained-QPS measurement) or `log_times` (each conversation at its start
  time in the log, relative to the earliest, times `time_scale`; its later user turns `turn_gap_s` apart, scaled).
- Requests due after the duration cap are left out; so is everything past the settings' request cap.
"""

import heapq
import itertools
import math
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

# Roles the gateway accepts from a client; other log entries (tool calls, events) are not replayed.
REPLAYED_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Spec:
    """The run's fields the plan depends on."""

    selection: str = "all"
    sample_size: int | None = None
    sample_seed: int | None = None
    top_n: int | None = None
    pacing: str = "qps"
    qps: float | None = None
    qps_steps: tuple[float, ...] = ()
    step_s: float | None = None
    arrival: str = "poisson"
    time_scale: float | None = None
    turn_gap_s: float = 5.0
    duration_cap_s: float = 60.0
    seed: int = 0
    max_requests: int = 100_000


@dataclass(frozen=True)
class Planned:
    """One request of the plan: `at` is its due offset in seconds from the schedule's start."""

    seq: int
    at: float
    conversation_id: str
    turn: int
    messages: tuple[dict, ...]


def first_message_key(conversation) -> str | None:
    """The conversation's first user message, normalised (case, whitespace), or None without one."""
    for message in conversation.messages:
        if message.role == "user":
            return " ".join((message.text or "").split()).casefold()
    return None


def select(conversations: Iterable, spec: Spec) -> list:
    """The conversations the run replays, in the order it replays them."""
    if spec.selection == "sample":
        return _sample(conversations, spec.sample_size or 0, spec.sample_seed or 0)
    if spec.selection == "top":
        return _top(conversations, spec.top_n or 0)
    return [c for c in conversations if first_message_key(c) is not None]


def _sample(conversations: Iterable, n: int, seed: int) -> list:
    """Reservoir sampling (algorithm R) over the log in one pass; the chosen ones in log order."""
    rng = random.Random(seed)
    reservoir: list[tuple[int, object]] = []
    for index, conversation in enumerate(c for c in conversations if first_message_key(c) is not None):
        if len(reservoir) < n:
            reservoir.append((index, conversation))
        else:
            slot = rng.randint(0, index)
            if slot < n:
                reservoir[slot] = (index, conversation)
    return [conversation for _, conversation in sorted(reservoir, key=lambda pair: pair[0])]


def _top(conversations: Iterable, n: int) -> list:
    counts: dict[str, int] = {}
    first: dict[str, tuple[int, object]] = {}
    for index, conversation in enumerate(conversations):
        key = first_message_key(conversation)
        if key is None:
            continue
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, (index, conversation))
    best = heapq.nsmallest(n, counts, key=lambda key: (-counts[key], first[key][0]))
    return [first[key][1] for key in best]


def requests_of(conversation) -> Iterator[tuple[int, tuple[dict, ...]]]:
    """(turn, messages) for each user message of a conversation."""
    history: list[dict] = []
    turn = 0
    for message in conversation.messages:
        if message.role not in REPLAYED_ROLES:
            continue
        history.append({"role": message.role, "content": message.text or ""})
        if message.role == "user":
            yield turn, tuple(history)
            turn += 1


def arrivals(spec: Spec) -> Iterator[float]:
    """Due offsets of a `qps` plan: Poisson (exponential gaps, seeded) or evenly spaced; the first at 0."""
    if spec.pacing == "ladder":
        yield from _ladder_arrivals(spec)
        return
    if spec.arrival == "uniform":
        for k in itertools.count():
            yield k / spec.qps
        return
    rng = random.Random(spec.seed)
    t = 0.0
    while True:
        yield t
        t += rng.expovariate(spec.qps)


def _ladder_arrivals(spec: Spec) -> Iterator[float]:
    """Each step at its own rate from its own start: evenly spaced, or Poisson (memoryless, so restarting the gaps
    at a step's start gives exactly a Poisson process whose rate steps up); past the last step, its rate goes on."""
    rng = random.Random(spec.seed)
    steps = spec.qps_steps
    for index, qps in enumerate(steps):
        start = index * spec.step_s
        end = start + spec.step_s if index < len(steps) - 1 else math.inf
        if spec.arrival == "uniform":
            for k in itertools.count():
                if start + k / qps >= end:
                    break
                yield start + k / qps
        else:
            t = start
            while t < end:
                yield t
                t += rng.expovariate(qps)


def plan(conversations: Iterable, spec: Spec) -> list[Planned]:
    """Every request of the run, in due order, numbered from 0."""
    chosen = select(conversations, spec)
    if spec.pacing == "log_times":
        return _log_times_plan(chosen, spec)
    planned: list[Planned] = []
    times = arrivals(spec)
    for conversation in chosen:
        for turn, messages in requests_of(conversation):
            at = next(times)
            if at > spec.duration_cap_s or len(planned) >= spec.max_requests:
                return planned
            planned.append(Planned(len(planned), at, str(conversation.id), turn, messages))
    return planned


def _log_times_plan(chosen: list, spec: Spec) -> list[Planned]:
    scale = spec.time_scale if spec.time_scale is not None else 1.0
    starts = [c.started_at for c in chosen if c.started_at is not None and math.isfinite(c.started_at)]
    origin = min(starts) if starts else 0.0
    timed: list[tuple[float, int, str, int, tuple[dict, ...]]] = []
    previous = 0.0
    for order, conversation in enumerate(chosen):
        started = conversation.started_at
        # A conversation without a start time follows the one before it in the log.
        offset = (started - origin) if started is not None and math.isfinite(started) else previous
        previous = offset
        for turn, messages in requests_of(conversation):
            timed.append(((offset + turn * spec.turn_gap_s) * scale, order, str(conversation.id), turn, messages))
    timed.sort(key=lambda item: (item[0], item[1], item[3]))
    planned: list[Planned] = []
    for at, _, conversation_id, turn, messages in timed:
        if at > spec.duration_cap_s or len(planned) >= spec.max_requests:
            break
        planned.append(Planned(len(planned), at, conversation_id, turn, messages))
    return planned


def share_of(planned: list[Planned], *, index: int, shares: int) -> list[Planned]:
    """One share's part: every `shares`-th request from `index`, so each share keeps the whole run's pace / shares."""
    return [request for request in planned if request.seq % shares == index]


def node_for(seq: int, nodes: list[str]) -> str:
    """Round robin over the run's nodes, as a load balancer in front of the pool would spread them."""
    return nodes[seq % len(nodes)]


def shares_for(planned: list[Planned], *, per_share_qps: float, max_shares: int) -> int:
    """How many shares carry the plan: enough that none sends faster than `per_share_qps` at the plan's peak second."""
    if not planned:
        return 1
    peak = max(_per_second(planned).values())
    return max(1, min(max_shares, math.ceil(peak / per_share_qps)))


def _per_second(planned: list[Planned]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for request in planned:
        second = int(request.at)
        counts[second] = counts.get(second, 0) + 1
    return counts


def mean_rate(planned: list[Planned]) -> float | None:
    """The plan's own rate: requests per second between its first and last due time."""
    if len(planned) < 2 or planned[-1].at <= planned[0].at:
        return None
    return (len(planned) - 1) / (planned[-1].at - planned[0].at)
