"""How a pool's publishes roll out: its canary stages, analysis window and soak (rollouts.py runs them)."""

from django.db import transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import InvalidField, required_text
from controlplane.nodes.models import Pool

MAX_STAGES = 10
MAX_WINDOW_S = 3600
# A non-production soak longer than a day would hold every production publish back for days.
MAX_SOAK_S = 86400


def canary_stages_check(stages) -> list[dict]:
    """A list of 1-10 stages, each `{"nodes": n}` or `{"percent": p}`, growing, the last `{"percent": 100}`."""
    if not isinstance(stages, list) or not 1 <= len(stages) <= MAX_STAGES:
        raise InvalidField("canary_stages", f"give a list of 1 to {MAX_STAGES} stages")
    checked: list[dict] = []
    for i, stage in enumerate(stages):
        if not isinstance(stage, dict) or len(stage) != 1 or not ({"nodes", "percent"} & set(stage)):
            raise InvalidField("canary_stages", f'stage {i + 1}: give {{"nodes": n}} or {{"percent": p}}')
        key, value = next(iter(stage.items()))
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise InvalidField("canary_stages", f"stage {i + 1}: {key} must be a whole number")
        value = int(value)
        if key == "nodes" and value < 1:
            raise InvalidField("canary_stages", f"stage {i + 1}: nodes must be at least 1")
        if key == "percent" and not 1 <= value <= 100:
            raise InvalidField("canary_stages", f"stage {i + 1}: percent must be between 1 and 100")
        checked.append({key: value})
    if checked[-1] != {"percent": 100}:
        raise InvalidField("canary_stages", 'the last stage must be {"percent": 100}, or the rollout never ends')
    percents = [s["percent"] for s in checked if "percent" in s]
    if percents != sorted(set(percents)):
        raise InvalidField("canary_stages", "percentages must grow from stage to stage")
    return checked


@mutating_service
def pool_canary_update(
    *, actor, pool: Pool, canary_stages, analysis_window_s, reason: str, soak_s: int | None = None
) -> Pool:
    """Change how the pool's next publishes roll out: the stages and the analysis window; and, `soak_s`, how long
    one of its nodes must run a version healthy before the version may go to production (None: unchanged)."""
    reason = required_text("reason", reason)
    stages = canary_stages_check(canary_stages)
    _check_seconds("analysis_window_s", analysis_window_s, MAX_WINDOW_S)
    if soak_s is not None:
        _check_seconds("soak_s", soak_s, MAX_SOAK_S)
    with transaction.atomic():
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        soak_s = locked.soak_s if soak_s is None else soak_s
        before = {
            "canary_stages": locked.canary_stages,
            "analysis_window_s": locked.analysis_window_s,
            "soak_s": locked.soak_s,
        }
        locked.canary_stages, locked.analysis_window_s, locked.soak_s = stages, analysis_window_s, soak_s
        locked.save(update_fields=["canary_stages", "analysis_window_s", "soak_s"])
        after = {"canary_stages": stages, "analysis_window_s": analysis_window_s, "soak_s": soak_s}
        audit_record(actor=actor, action="pool.canary_update", target=locked, before=before, after=after, reason=reason)
    return locked


def _check_seconds(field: str, value, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(field, "must be a whole number of seconds")
    if not 1 <= value <= most:
        raise InvalidField(field, f"must be between 1 and {most} seconds")
