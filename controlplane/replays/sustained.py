"""Sustained QPS: the highest step of a QPS ladder whose replay stayed within the SLO (pure: plain records in).

Sustained QPS is a capacity within the SLO: the rate a deployment sustains with P99 under a line, the report's
1.8 s unless a ladder run names its own (`slo_p99_s`: a team whose SLO differs, or engines slower than the report's).
The report's own 50 -> 68 QPS, at P99 4.1 and 2.8 s, is a rate at saturation instead (docs/comparisons.md). A ladder
replays the same traffic at increasing QPS, one step after the other; the version sustains the highest step that met
the constraints with every lower step meeting them too (a step after a missed one does not count). The latency held
against the line is the **first-round P99**, what the user waits for (the continuation streams behind it); the error
rate counts every request of the step. A ladder replay run (pacing `ladder`) sends its steps back to back
(its figures: `controlplane/replays/figures.py`); tuning studies (`max_qps`) replay one run per step. Both judge
their steps with the functions here.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# The report's SLO (P99 <= 1.8 s at 50 QPS) and an error rate of at most 0.5 % (seed).
SLO_P99_S = 1.8
DEFAULT_ERROR_RATE_MAX = 0.005
SLO_LATENCY = "first_round_s"
MAX_LADDER_STEPS = 8


@dataclass(frozen=True)
class Constraints:
    """The SLO a replay (or a ladder step) must meet to count: a P99 line and an error rate."""

    p99_max_s: float
    error_rate_max: float

    def as_dict(self) -> dict:
        return {"p99_max_s": self.p99_max_s, "error_rate_max": self.error_rate_max}


def violations(values: Mapping, constraints: Constraints) -> list[str]:
    """Why a run misses the SLO, one sentence each; empty when it meets it. A run without successes misses it."""
    out = []
    p99, rate = values.get("p99_s"), values.get("error_rate")
    if p99 is None:
        out.append("no successful request")
    elif p99 > constraints.p99_max_s:
        out.append(f"P99 {p99:.3f} s above {constraints.p99_max_s:g} s")
    if rate is None:
        out.append("no request")
    elif rate > constraints.error_rate_max:
        out.append(f"error rate {rate:.2%} above {constraints.error_rate_max:.2%}")
    return out


def ladder_value(steps: Sequence[Mapping]) -> float | None:
    """The highest QPS of the consecutive ladder steps (lowest first) that met the constraints; None if none did."""
    best = None
    for step in steps:
        if step.get("violations"):
            break
        best = step["qps"]
    return best


def step_index(scheduled_at: float, step_s: float, steps: int) -> int:
    """Which step a request belongs to, by the offset it was due at (the last step keeps its own end)."""
    return min(steps - 1, max(0, math.floor(scheduled_at / step_s + 1e-9)))


def split_steps(records: Sequence[Mapping], *, steps: int, step_s: float) -> list[list[Mapping]]:
    """The records of each step, by due offset."""
    parts: list[list[Mapping]] = [[] for _ in range(steps)]
    for record in records:
        parts[step_index(float(record["scheduled_at"]), step_s, steps)].append(record)
    return parts
