"""Errors of templates, versions and whitelists."""

from controlplane.lib.errors import Conflict, DomainError
from controlplane.params.schema import FieldError


class DocumentInvalid(DomainError):
    """The document failed parsing or the schema; `errors` names each field and rule."""

    code = "document_invalid"

    def __init__(self, message: str, *, errors: list[FieldError]):
        super().__init__(f"{message}: {errors[0]}" if errors else message, detail=[e.as_dict() for e in errors])
        self.errors = errors


class StaleBaseVersion(Conflict):
    """A save named a base version that is no longer the latest."""

    code = "stale_base_version"
