"""Base class of the domain errors that services raise and the API maps to status codes."""

import re


class DomainError(Exception):
    """A refused operation: `code` is stable for clients, `detail` says what to fix."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, detail=None):
        super().__init__(message)
        self.message = message
        self.detail = detail


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class Conflict(DomainError):
    status_code = 409
    code = "conflict"


class Forbidden(DomainError):
    status_code = 403
    code = "forbidden"


class InvalidField(DomainError):
    """One input field broke one rule."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}", detail=[{"path": field, "message": message}])


SLUG_RULE = "must be 1-64 lowercase letters, digits, - or _, starting with a letter or digit"
SLUG_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"


def check_slug(field: str, value) -> str:
    if not isinstance(value, str) or not re.fullmatch(SLUG_PATTERN, value):
        raise InvalidField(field, SLUG_RULE)
    return value


def required_text(field: str, value) -> str:
    """A reason or other free text that must not be blank, stripped."""
    value = (value or "").strip()
    if not value:
        raise InvalidField(field, "required: say why")
    return value
