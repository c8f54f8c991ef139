"""Creating an intent dataset from an uploaded CSV or JSON Lines file."""

from django.db import IntegrityError, transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.datasets.models import IntentDataset
from controlplane.datasets.uploads import parse_upload
from controlplane.lib.errors import Conflict, check_slug


@mutating_service
def intent_dataset_create(*, actor, name: str, content: bytes | str, fmt: str, description: str = "") -> IntentDataset:
    """Validate every row, drop duplicates and store the canonical rows; any bad row refuses the whole upload."""
    check_slug("name", name)
    if IntentDataset.objects.filter(name=name).exists():
        raise Conflict(f"name: an intent dataset named {name!r} already exists")
    parsed = parse_upload(content, fmt)
    with transaction.atomic():
        try:
            with transaction.atomic():
                dataset = IntentDataset.objects.create(
                    name=name,
                    description=description,
                    created_by=actor,
                    source_format=fmt,
                    row_count=len(parsed.rows),
                    duplicates_removed=parsed.duplicates_removed,
                    label_counts=parsed.label_counts,
                    has_templates=parsed.has_templates,
                    sha256=parsed.sha256,
                    rows_json=parsed.rows_json,
                )
        except IntegrityError:
            raise Conflict(f"name: an intent dataset named {name!r} already exists") from None
        audit_record(
            actor=actor,
            action="intent_dataset.create",
            target=dataset,
            after={
                "name": name,
                "format": fmt,
                "rows": dataset.row_count,
                "duplicates_removed": dataset.duplicates_removed,
                "label_counts": dataset.label_counts,
                "sha256": dataset.sha256,
            },
        )
    return dataset
