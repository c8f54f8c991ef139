"""Errors of the model catalog and of the model references templates make."""

from controlplane.lib.errors import DomainError


class ModelReferenceRefused(DomainError):
    """A version's model references cannot go to the nodes as they are; `detail` names each field and problem."""

    code = "model_reference_refused"

    def __init__(self, problems: list[tuple[str, str]]):
        path, message = problems[0]
        super().__init__(f"{path}: {message}", detail=[{"path": p, "message": m} for p, m in problems])
        self.problems = problems
