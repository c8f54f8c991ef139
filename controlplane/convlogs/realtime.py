"""Events about conversation-log analyses: their progress, to browsers."""

from controlplane.convlogs.models import LogAnalysis
from controlplane.lib import realtime


def log_analysis_progress(analysis: LogAnalysis) -> None:
    event: realtime.LogAnalysisProgress = {
        "type": "log_analysis.progress",
        "analysis_id": analysis.pk,
        "log": analysis.log.name,
        "status": analysis.status,
        "progress": analysis.progress,
        "progress_text": analysis.progress_text,
    }
    realtime.send([realtime.conversation_logs_group()], event)
