"""Field-by-field difference between two sets of effective parameters."""

from dataclasses import asdict, dataclass
from typing import Any

from controlplane.params import schema


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any
    apply: str

    def as_dict(self) -> dict:
        return asdict(self)


def params_diff(
    old: dict, new: dict, *, old_models: dict | None = None, new_models: dict | None = None
) -> list[FieldChange]:
    """Changed leaves in schema order; a list or mapping field counts as one leaf. With the versions' pinned model
    catalog entries, a reference whose name stayed but whose entry changed (another revision, say) shows as
    `<field> (catalog entry)`, cold: the nodes restart for it."""
    before, after = schema.flatten(old), schema.flatten(new)
    changes = [
        FieldChange(spec.path, before.get(spec.path), after.get(spec.path), spec.apply)
        for spec in schema.FIELDS
        if before.get(spec.path) != after.get(spec.path)
    ]
    if old_models is not None and new_models is not None:
        for path in schema.MODEL_REFERENCE_FIELDS:
            was, now = old_models.get(path), new_models.get(path)
            if before.get(path) == after.get(path) and was != now:
                changes.append(FieldChange(f"{path} (catalog entry)", was, now, "cold"))
    return changes


def needs_restart(changes: list[FieldChange]) -> bool:
    return any(change.apply == "cold" for change in changes)
