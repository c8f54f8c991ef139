"""A study's search space, objective and constraints, checked against the template schema (pure: no database).

A search space is a list of dimensions, each naming one template field (`controlplane/params/schema.py`):
`{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 64, "step": 8}`, `{"type": "float", "low", "high",
"step"?, "log"?}` or `{"type": "choice", "choices": [...]}`. Only fields that hold one number, a flag or one of a few
words can be searched; hot fields apply at the gateway at once, cold ones restart each node's engine (and warm it up)
per trial. The grid baseline needs every numeric dimension to have a step.
"""

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from controlplane.lib.errors import InvalidField
from controlplane.params.schema import FIELDS_BY_PATH, Field
from controlplane.replays.figures import DIGITS as FIGURE_DIGITS
from controlplane.replays.figures import percentile_of
from controlplane.replays.sustained import Constraints, ladder_value, violations

__all__ = ["Constraints", "ladder_value", "violations"]  # the SLO judgement replays and studies share

SEARCHABLE_KINDS = ("int", "float", "bool", "enum")
MAX_DIMENSIONS = 6
MAX_CHOICES = 32
MAX_GRID = 10_000
# How a trial with repeats takes its P99: the median of the repeats' P99s, or the P99 of their requests pooled.
REPEATS_P99 = ("median", "pooled")


class Objective:
    """What a trial's replay is scored by (see `objective_value`)."""

    MIN_P99 = "min_p99"  # minimise end-to-end P99 at the replay's QPS
    MAX_THROUGHPUT = "max_throughput"  # maximise output tokens per second at the replay's QPS
    MAX_QPS = "max_qps"  # maximise the highest step of the QPS ladder that meets the constraints

    ALL = (MIN_P99, MAX_THROUGHPUT, MAX_QPS)
    DIRECTION = {MIN_P99: "minimize", MAX_THROUGHPUT: "maximize", MAX_QPS: "maximize"}
    LABEL = {
        MIN_P99: "P99 end to end (s), lower is better",
        MAX_THROUGHPUT: "output tokens per second, higher is better",
        MAX_QPS: "highest sustained QPS of the ladder, higher is better",
    }


@dataclass(frozen=True)
class Dimension:
    """One searched field and its range."""

    path: str
    type: str
    apply: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    choices: tuple = ()

    def as_dict(self) -> dict:
        if self.type == "choice":
            return {"path": self.path, "type": "choice", "apply": self.apply, "choices": list(self.choices)}
        out = {"path": self.path, "type": self.type, "apply": self.apply, "low": self.low, "high": self.high}
        if self.step is not None:
            out["step"] = self.step
        if self.log:
            out["log"] = True
        return out

    def grid_values(self) -> list:
        if self.type == "choice":
            return list(self.choices)
        if self.type == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        count = math.floor((self.high - self.low) / self.step + 1e-9) + 1
        return [round(self.low + i * self.step, 10) for i in range(count)]


def _number(field: str, value, *, integer: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidField(field, f"must be a number, got {value!r}")
    if integer and value != int(value):
        raise InvalidField(field, f"must be a whole number, got {value!r}")
    return int(value) if integer else float(value)


def _in_field_range(where: str, spec: Field, value: float) -> None:
    if spec.minimum is not None and (value < spec.minimum or (spec.exclusive_minimum and value == spec.minimum)):
        raise InvalidField(
            where,
            f"{spec.path} must be {'above' if spec.exclusive_minimum else 'at least'} {spec.minimum:g}, got {value:g}",
        )
    if spec.maximum is not None and value > spec.maximum:
        raise InvalidField(where, f"{spec.path} must be at most {spec.maximum:g}, got {value:g}")


def _choice_values(where: str, spec: Field, choices) -> tuple:
    if not isinstance(choices, list) or not choices:
        raise InvalidField(f"{where}.choices", "must be a non-empty list")
    if len(choices) > MAX_CHOICES:
        raise InvalidField(f"{where}.choices", f"at most {MAX_CHOICES} choices")
    values = []
    for i, value in enumerate(choices):
        at = f"{where}.choices[{i}]"
        if spec.kind == "bool" and not isinstance(value, bool):
            raise InvalidField(at, f"{spec.path} is true or false, got {value!r}")
        if spec.kind == "enum" and value not in spec.choices and not (spec.nullable and value is None):
            raise InvalidField(at, f"{spec.path} must be one of {', '.join(spec.choices)}; got {value!r}")
        if spec.kind == "int":  # 16.0 is stored as 16: the field holds whole numbers
            value = _number(at, value, integer=True)
        if spec.kind in ("int", "float"):
            _in_field_range(at, spec, _number(at, value, integer=spec.kind == "int"))
        values.append(value)
    # Numbers compare by value (16 and 16.0 are one candidate: the sampler orders them by value), the rest by repr.
    if len({v if spec.kind in ("int", "float") else repr(v) for v in values}) != len(values):
        raise InvalidField(f"{where}.choices", "a value is listed twice")
    return tuple(values)


def dimension_check(index: int, raw) -> Dimension:
    """One dimension, or InvalidField naming `space[i].<key>` and the rule it broke."""
    where = f"space[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidField(where, "must be an object with path and type")
    unknown = set(raw) - {"path", "type", "low", "high", "step", "log", "choices"}
    if unknown:
        raise InvalidField(f"{where}.{sorted(unknown)[0]}", "unknown key")
    path = raw.get("path")
    spec = FIELDS_BY_PATH.get(path) if isinstance(path, str) else None
    if spec is None:
        raise InvalidField(f"{where}.path", f"{str(path)[:100]!r} is not a template field")
    if spec.kind not in SEARCHABLE_KINDS:
        raise InvalidField(f"{where}.path", f"{path} holds {spec.kind}; only numbers, flags and enums can be searched")
    kind = raw.get("type")
    if kind == "choice":
        return Dimension(path, "choice", spec.apply, choices=_choice_values(where, spec, raw.get("choices")))
    if kind not in ("int", "float"):
        raise InvalidField(f"{where}.type", f"must be int, float or choice; got {kind!r}")
    if spec.kind not in ("int", "float"):
        raise InvalidField(f"{where}.type", f"{path} is {spec.kind}: search it as a choice")
    if kind == "float" and spec.kind == "int":
        raise InvalidField(f"{where}.type", f"{path} is a whole number: use int")
    integer = kind == "int"
    low = _number(f"{where}.low", raw.get("low"), integer=integer)
    high = _number(f"{where}.high", raw.get("high"), integer=integer)
    _in_field_range(f"{where}.low", spec, low)
    _in_field_range(f"{where}.high", spec, high)
    if low >= high:
        raise InvalidField(f"{where}.high", f"must be above low ({low:g}), got {high:g}")
    step = raw.get("step")
    if step is not None:
        step = _number(f"{where}.step", step, integer=integer)
        if step <= 0 or step > high - low:
            raise InvalidField(
                f"{where}.step", f"must be above 0 and at most high - low ({high - low:g}); got {step:g}"
            )
    log = raw.get("log", False)
    if not isinstance(log, bool):
        raise InvalidField(f"{where}.log", f"must be true or false, got {log!r}")
    if log and (low <= 0 or step is not None):
        raise InvalidField(f"{where}.log", "a log scale needs low above 0 and no step")
    return Dimension(path, kind, spec.apply, low=low, high=high, step=step, log=log)


def space_check(raw, *, sampler: str) -> list[Dimension]:
    """The whole space: 1..MAX_DIMENSIONS distinct fields; for the grid sampler every numeric one has a step."""
    if not isinstance(raw, list) or not raw:
        raise InvalidField("space", "must be a non-empty list of fields and ranges")
    if len(raw) > MAX_DIMENSIONS:
        raise InvalidField("space", f"at most {MAX_DIMENSIONS} fields")
    dims = [dimension_check(i, item) for i, item in enumerate(raw)]
    seen: set[str] = set()
    for i, dim in enumerate(dims):
        if dim.path in seen:
            raise InvalidField(f"space[{i}].path", f"{dim.path} is searched twice")
        seen.add(dim.path)
        if sampler == "grid" and dim.type != "choice" and dim.type == "float" and dim.step is None:
            raise InvalidField(f"space[{i}].step", "the grid sampler needs a step for every float range")
    if sampler == "grid" and grid_size(dims) > MAX_GRID:
        raise InvalidField("space", f"the grid has {grid_size(dims)} points; at most {MAX_GRID}")
    return dims


def grid_size(dims: Sequence[Dimension]) -> int:
    return math.prod(len(d.grid_values()) for d in dims)


def candidate_params(base: Mapping, values: Mapping[str, object]) -> dict:
    """The base version's authored params with each searched field set (a new dict; the base is untouched)."""
    params = {section: dict(fields) for section, fields in base.items()}
    for path, value in values.items():
        section, key = path.split(".", 1)
        params.setdefault(section, {})[key] = value
    return params


def constraints_check(raw, *, default_p99_s: float, default_error_rate: float) -> Constraints:
    raw = raw or {}
    if not isinstance(raw, Mapping):
        raise InvalidField("constraints", "must be an object with p99_max_s and error_rate_max")
    unknown = set(raw) - {"p99_max_s", "error_rate_max"}
    if unknown:
        raise InvalidField(f"constraints.{sorted(unknown)[0]}", "unknown key")
    p99 = raw.get("p99_max_s", default_p99_s)
    p99 = _number("constraints.p99_max_s", p99, integer=False)
    if not 0 < p99 <= 600:
        raise InvalidField("constraints.p99_max_s", f"must be above 0 and at most 600, got {p99:g}")
    rate = _number("constraints.error_rate_max", raw.get("error_rate_max", default_error_rate), integer=False)
    if not 0 <= rate <= 1:
        raise InvalidField("constraints.error_rate_max", f"must be between 0 and 1, got {rate:g}")
    return Constraints(p99_max_s=p99, error_rate_max=rate)


def measured(figures: Mapping) -> dict:
    """The figures a study reads from one run's `run_figures` (controlplane/replays/figures.py)."""
    return {
        "p99_s": figures["latency"]["e2e_s"]["p99"],
        "error_rate": figures["errors"]["error_rate"],
        "output_tokens_per_s": figures["throughput"]["output_tokens_per_s"],
        "requests_per_s": figures["throughput"]["requests_per_s"],
        "requests": figures["requests"],
    }


def pooled_p99_of(runs_records: Sequence[Sequence[Mapping]]) -> float | None:
    """The nearest-rank end-to-end P99 of the successful requests of several runs taken together (`run_records`
    dicts). A run of ~100 requests has its P99 at its slowest request; k runs pooled put it at about the k-th
    slowest of k x 100, which one stray request does not decide. Rounded as a run's own figures are."""
    latencies = sorted(
        float(r["e2e_s"]) for records in runs_records for r in records if r["ok"] and r.get("e2e_s") is not None
    )
    p99 = percentile_of(latencies, 99)
    return None if p99 is None else round(p99, FIGURE_DIGITS)


def repeated(runs: Sequence[Mapping], *, pooled_p99: float | None = None) -> dict:
    """One figure set from the same replay repeated k times (each a `measured` dict): P99 and throughputs are the
    median of the runs' (a lone lucky or unlucky replay moves it less than a mean), the error rate is over every
    request of every run, and `requests` is their total. With `pooled_p99` (the P99 of the runs' successful requests
    taken together, `pooled_p99_of`) the P99 is that one instead. One run is returned unchanged."""
    if len(runs) == 1:
        return dict(runs[0])

    def median(key: str) -> float | None:
        values = [run[key] for run in runs if run.get(key) is not None]
        return statistics.median(values) if values else None

    requests = sum(run.get("requests") or 0 for run in runs)
    errors = sum((run.get("error_rate") or 0) * (run.get("requests") or 0) for run in runs)
    return {
        "p99_s": median("p99_s") if pooled_p99 is None else pooled_p99,
        "error_rate": errors / requests if requests else None,
        "output_tokens_per_s": median("output_tokens_per_s"),
        "requests_per_s": median("requests_per_s"),
        "requests": requests,
    }


def objective_value(objective: str, values: Mapping) -> float | None:
    """One run's score for `min_p99` or `max_throughput` (max_qps is scored over its ladder: `ladder_value`)."""
    if objective == Objective.MIN_P99:
        return values.get("p99_s")
    if objective == Objective.MAX_THROUGHPUT:
        return values.get("output_tokens_per_s")
    raise ValueError(objective)


def is_better(objective: str, value: float, than: float | None) -> bool:
    if than is None:
        return True
    return value < than if Objective.DIRECTION[objective] == "minimize" else value > than


def best_trial(objective: str, trials: Sequence[Mapping]) -> Mapping | None:
    """The feasible trial with the best value (the earliest on a tie), or None when no trial is feasible."""
    best = None
    for trial in trials:
        feasible = trial.get("is_feasible") and trial.get("value") is not None
        if feasible and (best is None or is_better(objective, trial["value"], best["value"])):
            best = trial
    return best
