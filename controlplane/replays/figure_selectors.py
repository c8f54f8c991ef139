"""Reads behind run figures and comparisons: a run's request records, and the requests behind one figure."""

import re

from django.db.models import F, Q, QuerySet

from controlplane.lib.errors import InvalidField, NotFound
from controlplane.metrics.selectors import SIMULATOR_BACKEND
from controlplane.nodes.models import EngineNode
from controlplane.replays.comparison_models import ReplayComparison
from controlplane.replays.figures import NO_INTENT, latency_cdf, run_figures
from controlplane.replays.models import ReplayRequest, ReplayRun
from controlplane.replays.noise import Figure, base_figures, intent_figures, ladder_figures

RECORD_FIELDS = (
    "id",
    "seq",
    "conversation_id",
    "intent",
    "tier",
    "node_name",
    "scheduled_at",
    "sent_at",
    "status_code",
    "ok",
    "error",
    "e2e_s",
    "ttft_s",
    "first_round_s",
    "reply_tokens",
    "prompt_tokens",
    "continuation_rounds",
    "max_tokens",
)


def replay_run_get(*, pk: int) -> ReplayRun:
    run = ReplayRun.objects.select_related("pool", "template_version__template").filter(pk=pk).first()
    if run is None:
        raise NotFound(f"run: no replay run {pk}")
    return run


def run_label(run: ReplayRun) -> str:
    """How pages and verdicts name a run: its id and its label, else its template version."""
    version = str(run.template_version) if run.template_version_id else "no version"
    return f"run {run.pk} ({run.label or version})"


def run_records(*, run: ReplayRun) -> list[dict]:
    """Every request of the run as a plain record (the input of figures and noise)."""
    return list(ReplayRequest.objects.filter(run=run).order_by("seq").values(*RECORD_FIELDS))


def run_is_simulated(*, run: ReplayRun, records: list[dict] | None = None) -> bool:
    """Whether any node the run sent to runs the vLLM-protocol simulator (its figures are not vLLM measurements)."""
    recorded = run.pool_metrics or {}
    if recorded.get("simulated_nodes") or "simulat" in str(recorded.get("label", "")).lower():
        return True
    names = {r["node_name"] for r in records} if records is not None else set(run.nodes or [])
    if not names:
        names = set(EngineNode.objects.filter(pool=run.pool_id).values_list("name", flat=True))
    return EngineNode.objects.filter(name__in=names, backend=SIMULATOR_BACKEND).exists()


def run_figure_catalogue(figures: dict) -> list[Figure]:
    return base_figures() + intent_figures(list(figures["intents"])) + (ladder_figures() if "ladder" in figures else [])


def figure_requests(*, run: ReplayRun, figure: str) -> tuple[QuerySet, dict]:
    """The requests behind one figure of the run, most extreme first, and what they are.

    Percentiles: the successful requests at or above the figure's value (the figure's own request first among
    equals); `intents.<intent>.count`: that intent's successful requests; rates: the requests they count;
    throughput: the completed requests; `continuation_rounds.<k>`: successful requests continued k times.
    """
    figures = run_figures(run_records(run=run), pool_metrics=run.pool_metrics, ladder=run.ladder)
    requests = ReplayRequest.objects.filter(run=run)
    parts = figure.split(".")
    if figure.startswith("intents.") and len(parts) >= 3:
        intent, stat = figure[len("intents.") :].rsplit(".", 1)
        block = figures["intents"].get(intent)
        if block is None or stat not in block or stat.endswith("_seq"):
            raise InvalidField("figure", f"no figure {figure!r} in this run (intents: {', '.join(figures['intents'])})")
        subset = requests.filter(ok=True, intent="" if intent == NO_INTENT else intent)
        if stat == "count":
            return subset.order_by("-e2e_s", "seq"), {"figure": figure, "value": block["count"], "at_or_above": None}
        value = _exact(requests, block.get(f"{stat}_seq"), "e2e_s")
        return _at_or_above(subset, "e2e_s", value), {"figure": figure, "value": value, "at_or_above": value}
    if len(parts) == 3 and parts[0] == "latency" and parts[1] in figures["latency"]:
        block = figures["latency"][parts[1]]
        if parts[2] in block and not parts[2].endswith("_seq") and parts[2] != "count":
            value = _exact(requests, block.get(f"{parts[2]}_seq"), parts[1])
            return _at_or_above(requests.filter(ok=True), parts[1], value), {
                "figure": figure,
                "value": value,
                "at_or_above": value,
            }
    if len(parts) == 2 and parts[0] == "reply_tokens" and parts[1] in ("p50", "p95", "mean"):
        value = figures["reply_tokens"][parts[1]]
        subset = requests.filter(ok=True)
        if parts[1] == "mean":
            return subset.order_by("-reply_tokens", "seq"), {"figure": figure, "value": value, "at_or_above": None}
        return _at_or_above(subset, "reply_tokens", value), {"figure": figure, "value": value, "at_or_above": value}
    if len(parts) == 2 and parts[0] == "errors" and parts[1] in ("error_rate", "rate_429", "rate_503"):
        condition = {"error_rate": Q(ok=False), "rate_429": Q(status_code=429), "rate_503": Q(status_code=503)}
        return requests.filter(condition[parts[1]]).order_by("seq"), {
            "figure": figure,
            "value": figures["errors"][parts[1]],
            "at_or_above": None,
        }
    if len(parts) == 2 and parts[0] == "throughput" and parts[1] in ("requests_per_s", "output_tokens_per_s"):
        return requests.filter(ok=True).order_by("seq"), {
            "figure": figure,
            "value": figures["throughput"][parts[1]],
            "at_or_above": None,
        }
    if figure == "ladder.sustained_qps" and "ladder" in figures:
        # The step the run sustained (the first step, which missed, when it sustained none), slowest first round first.
        ladder, block = run.ladder, figures["ladder"]
        index = next((i for i, s in enumerate(block["steps"]) if s["qps"] == block["sustained_qps"]), 0)
        subset = requests.filter(scheduled_at__gte=index * ladder.step_s - 1e-9)
        if index < len(block["steps"]) - 1:
            subset = subset.filter(scheduled_at__lt=(index + 1) * ladder.step_s - 1e-9)
        return subset.order_by(F("first_round_s").desc(nulls_last=True), "seq"), {
            "figure": figure,
            "value": block["sustained_qps"],
            "at_or_above": None,
        }
    # ASCII digits only, and few: str.isdigit() also says yes to "²" and to 5,000 nines, which int() refuses.
    if len(parts) == 2 and parts[0] == "continuation_rounds" and re.fullmatch(r"[0-9]{1,3}", parts[1]):
        rounds = int(parts[1])
        subset = requests.filter(ok=True)
        subset = (
            subset.filter(Q(continuation_rounds=rounds) | Q(continuation_rounds__isnull=True))
            if rounds == 0
            else (subset.filter(continuation_rounds=rounds))
        )
        return subset.order_by("seq"), {
            "figure": figure,
            "value": figures["continuation_rounds"].get(parts[1], 0),
            "at_or_above": None,
        }
    raise InvalidField(
        "figure",
        f"unknown figure {figure!r}; e.g. latency.e2e_s.p99, latency.ttft_s.p999, intents.<intent>.p99, "
        "intents.<intent>.count, errors.rate_429, throughput.requests_per_s, reply_tokens.p95, continuation_rounds.1, "
        "latency.first_round_s.p99, ladder.sustained_qps (ladder runs)",
    )


def _exact(requests: QuerySet, seq: int | None, column: str):
    """The stored value of the request that holds a percentile (the figures round theirs to 6 digits)."""
    if seq is None:
        return None
    return requests.filter(seq=seq).values_list(column, flat=True).first()


def _at_or_above(queryset: QuerySet, column: str, value) -> QuerySet:
    if value is None:
        return queryset.none()
    return queryset.filter(**{f"{column}__gte": value}).order_by(f"-{column}", "seq")


def comparison_get(*, pk: int) -> ReplayComparison:
    comparison = ReplayComparison.objects.select_related("created_by").filter(pk=pk).first()
    if comparison is None:
        raise NotFound(f"comparison: no replay comparison {pk}")
    return comparison


def comparisons() -> QuerySet:
    return ReplayComparison.objects.select_related("created_by").prefetch_related("members__run")


SIMULATED_NOTE = "simulated: these figures come from the vLLM-protocol simulator, not from vLLM"


def run_figures_payload(*, run: ReplayRun) -> dict:
    """The run figures endpoint's body: the run, whether it was simulated, its figures and latency CDF."""
    records = run_records(run=run)
    simulated = run_is_simulated(run=run, records=records)
    return {
        "run_id": run.pk,
        "label": run_label(run),
        "status": run.status,
        "pool": run.pool.name,
        "template_version": str(run.template_version) if run.template_version_id else None,
        "is_simulated": simulated,
        "simulated_note": SIMULATED_NOTE if simulated else "",
        "figures": run_figures(records, pool_metrics=run.pool_metrics, ladder=run.ladder),
        "latency_cdf": latency_cdf(records),
    }
