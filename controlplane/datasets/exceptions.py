"""Errors of intent datasets, training and publishing."""

from dataclasses import dataclass

from controlplane.lib.errors import Conflict, DomainError


@dataclass(frozen=True)
class RowError:
    """One problem in an upload: `row N: field: problem`, or `field: problem` for the file as a whole."""

    row: int | None
    field: str
    message: str

    def __str__(self) -> str:
        prefix = f"row {self.row}: " if self.row is not None else ""
        return f"{prefix}{self.field}: {self.message}"

    def as_dict(self) -> dict:
        return {"row": self.row, "field": self.field, "message": self.message, "text": str(self)}


class DatasetInvalid(DomainError):
    """An upload broke one or more rules; nothing was stored. `errors` holds the first ones, `more` the rest's count."""

    code = "dataset_invalid"

    def __init__(self, errors: list[RowError], *, more: int = 0):
        total = len(errors) + more
        headline = f"dataset refused, nothing stored: {total} problem{'s' if total != 1 else ''}; first: {errors[0]}"
        super().__init__(headline, detail={"errors": [e.as_dict() for e in errors], "more": more})
        self.errors = errors
        self.more = more


class ModelNotPublishable(Conflict):
    """Only a model whose training succeeded can be published."""

    code = "model_not_publishable"


class AccuracyBelowFloor(DomainError):
    """The model's held-out accuracy is below the floor of the pool's active template version."""

    status_code = 409
    code = "accuracy_below_floor"
