"""Suggestions from the impact records of a pool: what worked before, and which fields' changes made things worse.

- improved: a measured record of this pool whose outcome is `improved`, taken at a load similar to the pool's now
  (its before-window QPS within the impact records' load tolerance of the window's mean QPS), that changed a field
  the running version has on the record's old side (a number below the new value when the change raised it, above
  when it lowered it; any other value equal to the old one): move the field to the record's new value, citing it
  (and any later records of the same field and direction);
- worsened: every field whose changes on this pool were measured `worsened` is flagged (advice, no change), and a
  suggestion that would move a field the way a worsened change did carries that record as a caution.

Field changes are read newest first, at most `MAX_CHANGES` per pool: the knowledge base of one pool over months, not its
whole history.
"""

from django.conf import settings
from django.urls import reverse

from controlplane.advice.figures import WindowFigures
from controlplane.impact.models import ImpactFieldChange, ImpactRecord
from controlplane.params import schema

MAX_CHANGES = 500


def record_link(record_id: int) -> str:
    return reverse("dashboard:impact-record", kwargs={"pk": record_id})


def measured_changes(pool) -> dict[str, list[ImpactFieldChange]]:
    """outcome -> the field changes of this pool's measured improved and worsened records, newest first (one query;
    the records' windows and verdicts stay in the database)."""
    changes = (
        ImpactFieldChange.objects.filter(
            record__pool=pool,
            record__status=ImpactRecord.Status.MEASURED,
            record__outcome__in=[ImpactRecord.Outcome.IMPROVED, ImpactRecord.Outcome.WORSENED],
        )
        .select_related("record")
        .defer("record__after", "record__conclusions", "record__source")
        .order_by("-record__changed_at", "-record_id", "id")[:MAX_CHANGES]
    )
    found: dict[str, list[ImpactFieldChange]] = {ImpactRecord.Outcome.IMPROVED: [], ImpactRecord.Outcome.WORSENED: []}
    for change in changes:
        found[change.record.outcome].append(change)
    return found


def similar_load(record: ImpactRecord, figures: WindowFigures) -> tuple[bool, float | None]:
    """Whether the record's before-window QPS (a replay comparison's: its baseline run's achieved QPS) is within the
    load tolerance of the window's; (False, None) when either is unknown."""
    then = (record.before.get("qps") or {}).get("median") or (record.load or {}).get("qps_before")
    now = figures.means.get("qps")
    if not then or now is None:
        return False, None
    ratio = now / then
    tolerance = settings.IMPACT_LOAD_TOLERANCE_PCT / 100
    return abs(ratio - 1) <= tolerance, ratio


def direction(old, new) -> int | str:
    """+1 raised, -1 lowered for numbers; otherwise the new value itself (a switch or a choice)."""
    if _is_number(old) and _is_number(new):
        return (new > old) - (new < old)
    return repr(new)


def on_old_side(current, old, new) -> bool:
    if current == new:
        return False
    if _is_number(current) and _is_number(old) and _is_number(new):
        return (new - current) * (new - old) > 0
    return current == old


def record_suggestions(
    *, changes: dict[str, list[ImpactFieldChange]], params: dict, figures: WindowFigures
) -> list[dict]:
    """One suggestion per field that an improved change on this pool, at a similar load, moved away from where the
    running version has it; and one flag per field whose changes worsened things."""
    values = schema.flatten(params)
    found: dict[str, dict] = {}
    for fc in changes[ImpactRecord.Outcome.IMPROVED]:
        field = schema.FIELDS_BY_PATH.get(fc.path)
        if field is None or field.path in schema.MODEL_REFERENCE_FIELDS or isinstance(fc.new, list | dict):
            continue
        current = values.get(fc.path)
        similar, ratio = similar_load(fc.record, figures)
        if not similar or not on_old_side(current, fc.old, fc.new):
            continue
        cited = _cite(fc, ratio)
        if fc.path in found:
            if found[fc.path]["changes"][0]["to"] == fc.new:
                found[fc.path]["records"].append(cited)
            continue
        found[fc.path] = {
            "id": f"record-{fc.path}",
            "source": "record",
            "rule": "improved-before",
            "severity": "info",
            "title": f"{fc.path}: a change to {fc.new!r} improved this pool before",
            "text": (
                f"Record {fc.record.pk} ({fc.record.changed_at:%Y-%m-%d %H:%M} UTC) moved {fc.path} from {fc.old!r} "
                f"to {fc.new!r}: {fc.record.outcome_reason or 'improved'}. The running version has {current!r}: "
                f"move it to {fc.new!r}."
            ),
            "changes": [{"path": fc.path, "from": current, "to": fc.new, "apply": field.apply}],
            "is_actionable": True,
            "evidence": [],
            "records": [cited],
            "cautions": [],
        }
    flags: dict[str, list[dict]] = {}
    for fc in changes[ImpactRecord.Outcome.WORSENED]:
        if fc.path in schema.FIELDS_BY_PATH:
            flags.setdefault(fc.path, []).append(_cite(fc, similar_load(fc.record, figures)[1]))
    flagged = [
        {
            "id": f"worsened-{path}",
            "source": "record",
            "rule": "worsened-before",
            "severity": "caution",
            "title": f"{path}: changes to this field made this pool worse",
            "text": "; ".join(f"record {c['id']}: {c['from']!r} -> {c['to']!r} ({c['outcome']})" for c in cited)
            + ". Change it only with a replay comparison first.",
            "changes": [],
            "is_actionable": False,
            "evidence": [],
            "records": cited,
            "cautions": [],
        }
        for path, cited in flags.items()
    ]
    return list(found.values()) + flagged


def add_cautions(suggestions: list[dict], *, changes: dict[str, list[ImpactFieldChange]]) -> None:
    """Attach to each change the worsened records that moved the same field the same way."""
    worsened = changes[ImpactRecord.Outcome.WORSENED]
    for item in suggestions:
        for change in item["changes"]:
            for fc in worsened:
                if fc.path == change["path"] and direction(fc.old, fc.new) == direction(change["from"], change["to"]):
                    item["cautions"].append(_cite(fc, None))


def _cite(fc: ImpactFieldChange, ratio: float | None) -> dict:
    record = fc.record
    return {
        "id": record.pk,
        "kind": record.kind,
        "path": fc.path,
        "from": fc.old,
        "to": fc.new,
        "outcome": record.outcome,
        "outcome_reason": record.outcome_reason,
        "changed_at": record.changed_at,
        "load_ratio": ratio,
        "link": record_link(record.pk),
    }


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
