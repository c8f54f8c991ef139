"""Reads of conversation logs and their analyses."""

from controlplane.convlogs.models import ConversationLog, LogAnalysis
from controlplane.lib.errors import NotFound


def conversation_logs():
    return ConversationLog.objects.select_related("created_by")


def conversation_log_get(*, name: str) -> ConversationLog:
    log = conversation_logs().filter(name=name).first()
    if log is None:
        raise NotFound(f"log: no conversation log named {name!r}")
    return log


def log_analyses(*, log: ConversationLog):
    return LogAnalysis.objects.filter(log=log).select_related("log", "pool", "version__template", "created_by")


def log_analysis_get(*, log: ConversationLog, pk: int) -> LogAnalysis:
    analysis = log_analyses(log=log).filter(pk=pk).first()
    if analysis is None:
        raise NotFound(f"analysis: log {log.name!r} has no analysis {pk}")
    return analysis
