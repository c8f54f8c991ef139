"""Registering models in the catalog and editing them; trust_remote_code is an admin's decision."""

from django.db import IntegrityError, transaction

from controlplane.accounts.roles import Action
from controlplane.audit.services import audit_record, mutating_service
from controlplane.catalog import values
from controlplane.catalog.models import ModelEntry
from controlplane.lib.errors import Conflict, Forbidden, InvalidField, required_text

EDITABLE = (
    "source",
    "tokenizer",
    "revision",
    "tokenizer_revision",
    "is_draft_capable",
    "trust_remote_code",
    "description",
)


def _clean(field: str, value):
    """One editable field's value, checked; raises InvalidField naming it."""
    if field == "source":
        return values.check_source(field, value)
    if field == "tokenizer":
        return values.check_source(field, value, required=False)
    if field in ("revision", "tokenizer_revision"):
        return values.check_revision(field, value)
    if field in ("is_draft_capable", "trust_remote_code"):
        if not isinstance(value, bool):
            raise InvalidField(field, "must be true or false")
        return value
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 500:
        raise InvalidField(field, "must be text of at most 500 characters")
    return value.strip()


def _check_trust_grant(actor, *, before: bool, after: bool) -> None:
    if before != after and not actor.can(Action.MODEL_TRUST_REMOTE_CODE):
        raise Forbidden("trust_remote_code: only an admin may decide whether vLLM runs a model repository's own code")


@mutating_service
def model_entry_create(
    *,
    actor,
    name: str,
    source: str,
    tokenizer: str = "",
    revision: str = "",
    tokenizer_revision: str = "",
    is_draft_capable: bool = False,
    trust_remote_code: bool = False,
    description: str = "",
) -> ModelEntry:
    """Register a model under `name`, the name templates will use for it."""
    values.check_name("name", name)
    fields = {
        key: _clean(key, value)
        for key, value in (
            ("source", source),
            ("tokenizer", tokenizer),
            ("revision", revision),
            ("tokenizer_revision", tokenizer_revision),
            ("is_draft_capable", is_draft_capable),
            ("trust_remote_code", trust_remote_code),
            ("description", description),
        )
    }
    _check_trust_grant(actor, before=False, after=fields["trust_remote_code"])
    with transaction.atomic():
        try:
            with transaction.atomic():
                entry = ModelEntry.objects.create(name=name, **fields)
        except IntegrityError:
            raise Conflict(f"name: a model named {name!r} is already in the catalog") from None
        audit_record(actor=actor, action="model.create", target=entry, after=entry.resolved())
    return entry


@mutating_service
def model_entry_update(*, actor, entry: ModelEntry, changes: dict, reason: str) -> ModelEntry:
    """Change some of an entry's fields (never its name). Template versions saved before keep the entry as it was
    then: an edit reaches the nodes with the next version saved and published."""
    reason = required_text("reason", reason)
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise InvalidField(unknown[0], f"cannot be changed; editable: {', '.join(EDITABLE)}")
    cleaned = {key: _clean(key, value) for key, value in changes.items()}
    with transaction.atomic():
        locked = ModelEntry.objects.select_for_update().get(pk=entry.pk)
        changed = {key: value for key, value in cleaned.items() if getattr(locked, key) != value}
        if not changed:
            raise InvalidField("changes", "nothing to change: every value equals the entry's")
        if "trust_remote_code" in changed:
            _check_trust_grant(actor, before=locked.trust_remote_code, after=changed["trust_remote_code"])
        before = {key: getattr(locked, key) for key in changed}
        for key, value in changed.items():
            setattr(locked, key, value)
        locked.save(update_fields=[*changed, "updated_at"])
        audit_record(actor=actor, action="model.update", target=locked, before=before, after=changed, reason=reason)
    return locked
