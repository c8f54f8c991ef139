"""Creating warmup datasets, saving their versions (an upload or a conversation log's top queries), assigning pools."""

from django.db import IntegrityError, transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.datasets import realtime
from controlplane.datasets.conversation_logs import DEFAULT_TOP_N, derive_top_queries
from controlplane.datasets.models import PoolWarmup, WarmupDataset, WarmupDatasetVersion
from controlplane.datasets.selectors import pool_warmup_dataset
from controlplane.datasets.warmup_uploads import WarmupContent, parse_warmup_upload
from controlplane.impact import hooks as impact_hooks
from controlplane.lib.errors import Conflict, InvalidField, check_slug, required_text
from controlplane.nodes.models import Pool
from controlplane.params.exceptions import StaleBaseVersion

Source = WarmupDatasetVersion.Source


def warmup_content_read(*, content: bytes | str, fmt: str, source: str, top_n: int = DEFAULT_TOP_N) -> WarmupContent:
    """Validate an upload of `source` kind: a message file as is, or a conversation log reduced to its top queries."""
    if source == Source.UPLOAD:
        return parse_warmup_upload(content, fmt)
    if source == Source.CONVERSATION_LOG:
        return derive_top_queries(content, fmt, top_n=top_n)
    raise InvalidField("source", f"must be one of {', '.join(Source.values)}, got {source!r}")


@mutating_service
def warmup_dataset_create(
    *,
    actor,
    name: str,
    content: bytes | str,
    fmt: str,
    source: str = Source.UPLOAD,
    top_n: int = DEFAULT_TOP_N,
    description: str = "",
    comment: str = "",
) -> WarmupDataset:
    """A new warmup dataset with its version 1; any bad row refuses the whole upload and stores nothing."""
    check_slug("name", name)
    if WarmupDataset.objects.filter(name=name).exists():
        raise Conflict(f"name: a warmup dataset named {name!r} already exists")
    parsed = warmup_content_read(content=content, fmt=fmt, source=source, top_n=top_n)
    with transaction.atomic():
        try:
            with transaction.atomic():
                dataset = WarmupDataset.objects.create(
                    name=name, description=description, created_by=actor, latest_number=1
                )
        except IntegrityError:
            raise Conflict(f"name: a warmup dataset named {name!r} already exists") from None
        version = _version(dataset, parsed, number=1, base_number=None, actor=actor, comment=comment)
        audit_record(
            actor=actor,
            action="warmup_dataset.create",
            target=dataset,
            after={"name": name, **version_summary(version)},
            reason=comment,
        )
    return dataset


@mutating_service
def warmup_version_create(
    *,
    actor,
    dataset: WarmupDataset,
    base_number: int | None,
    content: bytes | str,
    fmt: str,
    source: str = Source.UPLOAD,
    top_n: int = DEFAULT_TOP_N,
    comment: str = "",
) -> WarmupDatasetVersion:
    """Save the next version, made from `base_number`; a stale base raises 409 and stores nothing."""
    parsed = warmup_content_read(content=content, fmt=fmt, source=source, top_n=top_n)
    with transaction.atomic():
        # The row lock orders concurrent saves on one dataset; the loser sees the new latest.
        locked = WarmupDataset.objects.select_for_update().get(pk=dataset.pk)
        if base_number != locked.latest_number:
            current = locked.versions.defer("messages_json").get(number=locked.latest_number)
            stale = f"version {base_number} is stale" if base_number is not None else "none given"
            raise StaleBaseVersion(
                f"base_version: {stale}; the latest is {locked.latest_number}",
                detail={"current_version": version_summary(current)},
            )
        before = locked.versions.defer("messages_json").get(number=base_number)
        version = _version(
            locked, parsed, number=locked.latest_number + 1, base_number=base_number, actor=actor, comment=comment
        )
        locked.latest_number = version.number
        locked.save(update_fields=["latest_number"])
        audit_record(
            actor=actor,
            action="warmup_dataset.version_create",
            target=version,
            before=version_summary(before),
            after=version_summary(version),
            reason=comment,
        )
    dataset.latest_number = locked.latest_number
    return version


def _version(
    dataset: WarmupDataset, parsed: WarmupContent, *, number: int, base_number: int | None, actor, comment: str
) -> WarmupDatasetVersion:
    return WarmupDatasetVersion.objects.create(
        dataset=dataset,
        number=number,
        base_number=base_number,
        author=actor,
        comment=comment,
        source=parsed.source,
        source_format=parsed.source_format,
        message_count=len(parsed.messages),
        duplicates_removed=parsed.duplicates_removed,
        intent_counts=parsed.intent_counts,
        derived_from=parsed.derived_from,
        messages_json=parsed.messages_json,
        sha256=parsed.sha256,
    )


def version_summary(version: WarmupDatasetVersion | None) -> dict | None:
    """How audit entries, conflicts and events name a version (never its messages)."""
    if version is None:
        return None
    return {
        "dataset": version.dataset.name,
        "number": version.number,
        "source": version.source,
        "format": version.source_format,
        "messages": version.message_count,
        "duplicates_removed": version.duplicates_removed,
        "derived_from": version.derived_from,
        "sha256": version.sha256,
    }


@mutating_service
def pool_warmup_assign(*, actor, pool: Pool, version: WarmupDatasetVersion, reason: str) -> PoolWarmup:
    """Make `version` the dataset the pool's nodes replay to warm up; the previous assignment stays as history."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        # The pool row lock orders concurrent assignments to one pool; the partial unique constraint backs it up.
        locked = Pool.objects.select_for_update().get(pk=pool.pk)
        current = pool_warmup_dataset(locked)
        if current is not None and current.pk == version.pk:
            raise Conflict(f"version: pool {locked.name} already warms up with {version}")
        PoolWarmup.objects.filter(pool=locked, is_active=True).update(is_active=False)
        assignment = PoolWarmup.objects.create(
            pool=locked, version=version, assigned_by=actor, reason=reason, is_active=True
        )
        audit_record(
            actor=actor,
            action="warmup.assign",
            target=locked,
            before={"warmup": version_summary(current)},
            after={"warmup": version_summary(version)},
            reason=reason,
        )
        impact_hooks.warmup(
            pool=locked, before=current, after=version, actor=actor, reason=reason, assignment_id=assignment.pk
        )
        transaction.on_commit(lambda: realtime.warmup_assigned(locked, version))
    return assignment
