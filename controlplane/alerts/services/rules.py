"""Creating alert rules and saving new versions of them (SREs; versioned and audited like templates)."""

import math

from django.db import IntegrityError, transaction

from controlplane.alerts import runbooks, signals
from controlplane.alerts.exceptions import StaleRuleVersion
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, InvalidField, check_slug

MAX_FOR_S = 3600


def alert_rule_fields_check(fields: dict) -> dict:
    """Every field of a rule version, checked and normalised; raises InvalidField naming the first bad one."""
    metric = fields.get("metric")
    if metric not in signals.SIGNALS:
        raise InvalidField("metric", f"unknown metric {metric!r}; one of {', '.join(signals.SIGNALS)}")
    signal = signals.SIGNALS[metric]
    scope = fields.get("scope")
    if scope not in signal.scopes:
        raise InvalidField("scope", f"{metric} exists at scope {' or '.join(signal.scopes)}, not {scope!r}")
    comparison = fields.get("comparison")
    if comparison not in AlertRuleVersion.Comparison.values:
        raise InvalidField("comparison", "must be one of gt, ge, lt, le")
    warn = _number("warn", fields.get("warn"))
    critical = fields.get("critical")
    critical = None if critical in (None, "") else _number("critical", critical)
    if critical is not None:
        upward = comparison in ("gt", "ge")
        if (upward and critical < warn) or (not upward and critical > warn):
            word = "at or above" if upward else "at or below"
            raise InvalidField(
                "critical", f"must be {word} the warning threshold ({warn:g}) for comparison {comparison}"
            )
    for_s = fields.get("for_s")
    if isinstance(for_s, bool) or not isinstance(for_s, int) or not 0 <= for_s <= MAX_FOR_S:
        raise InvalidField("for_s", f"must be a whole number of seconds between 0 and {MAX_FOR_S}")
    runbook = fields.get("runbook") or ""
    if not runbooks.runbook_exists(runbook):
        raise InvalidField("runbook", f"no runbook named {runbook!r} in docs/runbooks/")
    summary = (fields.get("summary") or "").strip()
    if not summary:
        raise InvalidField("summary", "required: what the alert means, in one line")
    if len(summary) > 300:
        raise InvalidField("summary", "at most 300 characters")
    is_enabled = fields.get("is_enabled", True)
    if not isinstance(is_enabled, bool):
        raise InvalidField("is_enabled", "must be true or false")
    return {
        "metric": metric,
        "scope": scope,
        "comparison": comparison,
        "warn": warn,
        "critical": critical,
        "for_s": for_s,
        "runbook": runbook,
        "summary": summary,
        "is_enabled": is_enabled,
    }


def _number(field: str, value) -> float:
    if isinstance(value, bool):
        raise InvalidField(field, "must be a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidField(field, f"must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidField(field, "must be a finite number")
    return number


@mutating_service
def alert_rule_create(*, actor, name: str, comment: str = "", **fields) -> AlertRuleVersion:
    """A new rule with its version 1."""
    check_slug("name", name)
    checked = alert_rule_fields_check(fields)
    with transaction.atomic():
        try:
            with transaction.atomic():
                rule = AlertRule.objects.create(name=name, latest_number=1)
        except IntegrityError:
            raise Conflict(f"name: an alert rule named {name!r} already exists") from None
        version = AlertRuleVersion.objects.create(rule=rule, number=1, author=actor, comment=comment, **checked)
        audit_record(actor=actor, action="alert_rule.create", target=version, after=checked, reason=comment)
    return version


@mutating_service
def alert_rule_version_create(
    *, actor, rule: AlertRule, base_number: int | None, comment: str = "", **fields
) -> AlertRuleVersion:
    """Save the rule's next version, edited from `base_number`; a stale base raises 409 and stores nothing.

    The audit entry's before/after hold only the fields that changed: the diff of the edit.
    """
    checked = alert_rule_fields_check(fields)
    with transaction.atomic():
        # The row lock orders concurrent edits of one rule; the loser sees the new latest number.
        locked = AlertRule.objects.select_for_update().get(pk=rule.pk)
        if (base_number or 0) != locked.latest_number:
            current = locked.versions.filter(number=locked.latest_number).first()
            raise StaleRuleVersion(
                f"base_version: version {base_number} is stale; the latest is {locked.latest_number}",
                detail={"current_version": alert_rule_version_summary(current) if current else None},
            )
        base = locked.versions.get(number=base_number) if base_number else None
        before = base.fields() if base else {}
        changed = [key for key in AlertRuleVersion.EDITABLE if before.get(key) != checked[key]]
        version = AlertRuleVersion.objects.create(
            rule=locked,
            number=locked.latest_number + 1,
            base_number=base_number,
            author=actor,
            comment=comment,
            **checked,
        )
        locked.latest_number = version.number
        locked.save(update_fields=["latest_number"])
        audit_record(
            actor=actor,
            action="alert_rule.version_create",
            target=version,
            before={key: before.get(key) for key in changed},
            after={key: checked[key] for key in changed},
            reason=comment,
        )
    rule.latest_number = locked.latest_number
    return version


def alert_rule_version_summary(version: AlertRuleVersion) -> dict:
    return {
        "rule": version.rule.name,
        "number": version.number,
        "base_number": version.base_number,
        "author": version.author.get_username() if version.author else "system",
        "created_at": version.created_at.isoformat(),
        "comment": version.comment,
        **version.fields(),
    }
