"""Queueing an analysis of a log against a pool, the analysis run itself, and turning its suggestions into a new
(unpublished) template version."""

import copy
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.convlogs import realtime
from controlplane.convlogs.analysis import LogAnalyser
from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.convlogs.reader import LogReader
from controlplane.convlogs.suggestions import APPLICABLE_KINDS, suggest
from controlplane.lib import background
from controlplane.lib.errors import Conflict, DomainError, InvalidField
from controlplane.nodes.models import Pool
from controlplane.operations.policy_bundle import intent_model_section, whitelists_section
from controlplane.params.explain import intent_classifier
from controlplane.params.models import TemplateVersion, Whitelist
from controlplane.params.services.templates import template_version_create
from controlplane.params.services.whitelists import whitelist_create
from engine_node.policy.masking import mask
from engine_node.policy.rules import Policy

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5
MAX_REPORTED_BAD_LINES = 50


@mutating_service
def log_analysis_create(*, actor, log: ConversationLog, pool: Pool, coverage: int = 90) -> LogAnalysis:
    """Queue an analysis of `log` against `pool`'s active version, whitelists and intent model; it starts on commit."""
    if isinstance(coverage, bool) or not isinstance(coverage, int) or not 50 <= coverage <= 99:
        raise InvalidField("coverage", f"must be an integer percentage between 50 and 99, got {coverage!r}")
    version = pool.desired_version
    if version is None:
        raise InvalidField("pool", f"pool {pool.name!r} has no published version to analyse against")
    model = intent_model_section(pool)
    params = {
        "version": version.ref,
        "whitelists": whitelists_section(pool),
        "intent_model": model,
        "max_tokens_default": version.effective_params["max_tokens"]["default"],
        "whitelist": version.effective_params["max_tokens"]["whitelist"],
        "long_context_threshold": version.effective_params["batch"]["long_context_threshold"],
    }
    with transaction.atomic():
        analysis = LogAnalysis.objects.create(
            log=log,
            pool=pool,
            version=version,
            intent_model_id=model["id"] if model else None,
            coverage=coverage,
            created_by=actor,
            params=params,
            progress_text="queued",
        )
        audit_record(
            actor=actor,
            action="convlog.analysis_create",
            target=analysis,
            after={"log": log.name, "pool": pool.name, "version": version.ref, "coverage": coverage},
        )
        transaction.on_commit(lambda: _enqueue(analysis.pk))
    return analysis


def _enqueue(analysis_id: int) -> None:
    """Hand a queued analysis to a worker; in embedded mode (eager Celery) to a daemon thread of this process.

    A log of 100,000 conversations takes tens of seconds: the HTTP request that queued it must not wait for it.
    """
    background.start("controlplane.convlogs.tasks.log_analysis_task", analysis_id, name=f"log-analysis-{analysis_id}")


def log_analysis_run(*, analysis_id: int) -> LogAnalysis | None:
    """Run a queued analysis; None when it vanished or another worker claimed it. Any error marks it failed."""
    now = timezone.now()
    claimed = LogAnalysis.objects.filter(pk=analysis_id, status=LogAnalysis.Status.QUEUED).update(
        status=LogAnalysis.Status.RUNNING, started_at=now, progress_at=now, progress=0, progress_text="reading the log"
    )
    if not claimed:
        return None
    analysis = LogAnalysis.objects.select_related("log", "version", "pool").get(pk=analysis_id)
    realtime.log_analysis_progress(analysis)
    try:
        _run(analysis)
    except Exception as exc:
        if not isinstance(exc, DomainError):
            logger.exception("analysis %s failed", analysis)
        _end(analysis, status=LogAnalysis.Status.FAILED, error=mask(str(exc), limit=2000), progress_text="failed")
    return analysis


def _end(analysis: LogAnalysis, **fields) -> bool:
    """Store a running analysis's end (only while it is still running: one the reaper failed stays failed)."""
    fields["finished_at"] = timezone.now()
    ended = LogAnalysis.objects.filter(pk=analysis.pk, status=LogAnalysis.Status.RUNNING).update(**fields)
    if not ended:
        logger.warning("analysis %s ended after it was failed as stalled; its result is not stored", analysis.pk)
        analysis.refresh_from_db()
    else:
        for name, value in fields.items():
            setattr(analysis, name, value)
    realtime.log_analysis_progress(analysis)
    return bool(ended)


def log_analyses_reap(*, now=None) -> list[int]:
    """Fail running analyses that reported no progress for LOG_ANALYSIS_STALL_S (their worker stopped or the
    embedded process restarted): otherwise they would show "running" for ever. Returns their ids."""
    now = now or timezone.now()
    stall = settings.LOG_ANALYSIS_STALL_S
    stale = list(
        LogAnalysis.objects.filter(
            status=LogAnalysis.Status.RUNNING, progress_at__lt=now - timedelta(seconds=stall)
        ).values_list("pk", flat=True)
    )
    for analysis_id in stale:
        error = f"no progress for {stall} s: the worker running it stopped (restarted or killed); start it again"
        ended = LogAnalysis.objects.filter(pk=analysis_id, status=LogAnalysis.Status.RUNNING).update(
            status=LogAnalysis.Status.FAILED, error=error, progress_text="failed", finished_at=now
        )
        if ended:
            realtime.log_analysis_progress(LogAnalysis.objects.select_related("log").get(pk=analysis_id))
    return stale


def _run(analysis: LogAnalysis) -> None:
    model = analysis.params.get("intent_model")
    classifier = intent_classifier(model["id"] if model else None)
    policy = Policy(analysis.version.effective_params, {"whitelists": analysis.params["whitelists"]}, classifier)
    analyser = LogAnalyser(policy)
    reader = LogReader(analysis.log)
    last = time.monotonic()
    for conversation in reader:
        analyser.add(conversation)
        if time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            _progress(analysis, reader, analyser)
    result = analyser.result()
    # A bad line's message quotes a piece of it (a value that is no timestamp, say): masked like any customer text.
    result["bad_lines"] = {
        "count": reader.errors.row_count,
        "first": [
            {"line": error.row, "field": mask(error.field), "message": mask(error.message)}
            for error in reader.errors.row_errors[:MAX_REPORTED_BAD_LINES]
        ],
        "file": [{"field": mask(error.field), "message": mask(error.message)} for error in reader.errors.file_errors],
    }
    result["split_conversations"] = reader.split_conversations
    result["lines"] = reader.lines
    if reader.errors.file_errors or not analyser.conversations:
        problems = "; ".join(f"{e.field}: {e.message}" for e in reader.errors.file_errors) or "no conversations"
        raise InvalidField("file", problems)
    ended = _end(
        analysis,
        result=result,
        suggestions=suggest(analyser, coverage=analysis.coverage),
        token_source=analyser.token_source(),
        status=LogAnalysis.Status.SUCCEEDED,
        progress=100,
        progress_text=f"{analyser.conversations} conversations analysed",
    )
    if not ended:
        return
    # The counts are facts of the file, the same for every analysis: filled once, never changed after.
    ConversationLog.objects.filter(pk=analysis.log_id, conversation_count__isnull=True).update(
        conversation_count=analyser.conversations,
        message_count=analyser.messages,
        bad_line_count=reader.errors.row_count,
    )


def _progress(analysis: LogAnalysis, reader: LogReader, analyser: LogAnalyser) -> None:
    analysis.progress = min(99, int(100 * reader.bytes_read / max(1, reader.size)))
    analysis.progress_text = f"{analyser.conversations} conversations read"
    LogAnalysis.objects.filter(pk=analysis.pk).update(
        progress=analysis.progress, progress_text=analysis.progress_text, progress_at=timezone.now()
    )
    realtime.log_analysis_progress(analysis)


# Not registered as a mutating service of its own: it writes through template_version_create (and
# whitelist_create), each of which writes its audit entry.
def log_analysis_apply(
    *, actor, analysis: LogAnalysis, kinds: list[str] | None = None, base_number: int | None = None, comment: str = ""
) -> TemplateVersion:
    """Save the suggestions `kinds` (all applicable ones by default) as the next version of the analysed version's
    template, edited from its latest version (or `base_number`; a stale one is 409). Nothing is published.

    A whitelist suggestion creates a new whitelist holding the suggested intents and names it in the version, so no
    pool's gateways change until that version is published. The audit entries are the version's (and the
    whitelist's), whose comment cites the analysis."""
    if analysis.status != LogAnalysis.Status.SUCCEEDED:
        raise Conflict(f"analysis: analysis {analysis.pk} is {analysis.status}, not succeeded")
    by_kind = {item["kind"]: item for item in analysis.suggestions or []}
    if kinds is None:
        kinds = [kind for kind in APPLICABLE_KINDS if by_kind.get(kind, {}).get("applicable")]
    if not isinstance(kinds, list) or not all(isinstance(kind, str) for kind in kinds):
        raise InvalidField("suggestions", "must be a list of suggestion kinds")
    for kind in kinds:
        if kind not in APPLICABLE_KINDS:
            raise InvalidField("suggestions", f"unknown kind {kind!r}; expected some of {', '.join(APPLICABLE_KINDS)}")
        if not by_kind.get(kind, {}).get("applicable"):
            raise InvalidField("suggestions", f"{kind}: this analysis has nothing to change there")
    if not kinds:
        raise InvalidField("suggestions", "this analysis suggests no change to the version")
    template = analysis.version.template
    template.refresh_from_db()
    comment = (comment or "").strip()[:500]
    base = template.versions.filter(number=base_number or template.latest_number).first()
    if base is None:
        raise InvalidField("base_version", f"template {template.name!r} has no version {base_number}")
    with transaction.atomic():
        params = copy.deepcopy(base.params)
        notes = []
        for kind in kinds:
            notes.append(_apply(actor, analysis, by_kind[kind], params))
        cited = (
            f"From conversation log {analysis.log.name!r}, analysis {analysis.pk} "
            f"(pool {analysis.pool.name}, {analysis.version.ref}): " + "; ".join(notes)
        )
        version = template_version_create(
            actor=actor,
            template=template,
            document={"inference_params": params},
            base_number=base_number or template.latest_number,
            comment=f"{cited}. {comment}".strip() if comment else cited,
        )
    return version


def _apply(actor, analysis: LogAnalysis, suggestion: dict, params: dict) -> str:
    kind = suggestion["kind"]
    if kind == "whitelist":
        scenarios = suggestion["changes"][0]["add_scenarios"]
        name = f"log-analysis-{analysis.pk}"
        if not Whitelist.objects.filter(name=name).exists():
            whitelist_create(
                actor=actor,
                name=name,
                scenarios=scenarios,
                description=f"Intents whose P95 reply exceeds the cap in log {analysis.log.name!r}",
                comment=f"conversation log analysis {analysis.pk}",
            )
        section = params.setdefault("max_tokens", {})
        names = list(section.get("whitelist", analysis.version.effective_params["max_tokens"]["whitelist"]))
        if name not in names:
            names.append(name)
        section["whitelist"] = names
        return f"whitelist {', '.join(scenarios)} (as whitelist {name})"
    change = suggestion["changes"][0]
    section_name, field = change["path"].split(".")
    params.setdefault(section_name, {})[field] = change["to"]
    if kind == "first_turn_cap":
        covered = suggestion["evidence"]["covered"]
        return f"max_tokens.default {change['from']} -> {change['to']} (covers {covered:.1%} of first-turn replies)"
    return f"{change['path']} {change['from']} -> {change['to']}"
