"""Events about tuning studies: progress of one study (trial n/N, best so far) to its page and to the study list."""

from typing import TypedDict

from controlplane.lib import realtime
from controlplane.tuning.models import TuningStudy


def study_group(study_id: int) -> str:
    """Browsers watching one study's page."""
    return f"tuning.{study_id}"


def studies_group() -> str:
    """Browsers watching the list of studies."""
    return "tuning"


class StudyProgress(TypedDict):
    type: str  # "tuning.progress": TuningEventsConsumer.tuning_progress
    study_id: int
    status: str
    trials_done: int
    trials_started: int
    budget: int
    best_trial: int | None
    best_value: float | None
    error: str


def progress_event(study: TuningStudy) -> StudyProgress:
    best = study.best_trial
    return {
        "type": "tuning.progress",
        "study_id": study.pk,
        "status": study.status,
        "trials_done": study.trials_done,
        "trials_started": study.trials.count(),
        "budget": study.budget,
        "best_trial": best.number if best else None,
        "best_value": best.value if best else None,
        "error": study.error,
    }


def study_progress(study_id: int) -> None:
    study = TuningStudy.objects.select_related("best_trial").filter(pk=study_id).first()
    if study is not None:
        realtime.send([study_group(study_id), studies_group()], progress_event(study))
