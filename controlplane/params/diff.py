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


def params_diff(old: dict, new: dict) -> list[FieldChange]:
    """Changed leaves in schema order; a list or mapping field counts as one leaf."""
    before, after = schema.flatten(old), schema.flatten(new)
    return [
        FieldChange(spec.path, before.get(spec.path), after.get(spec.path), spec.apply)
        for spec in schema.FIELDS
        if before.get(spec.path) != after.get(spec.path)
    ]


def needs_restart(changes: list[FieldChange]) -> bool:
    return any(change.apply == "cold" for change in changes)
