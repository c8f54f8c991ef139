"""Base class of the domain errors that services raise and the API maps to status codes."""

import re
import unicodedata


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


# Letters and symbols by Unicode's categories that nonetheless draw nothing: the Hangul fillers, the blank braille cell.
_BLANK_LOOKING = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def has_visible_text(value: str) -> bool:
    """Whether `value` shows anything: a letter, digit, punctuation mark or symbol that draws. Whitespace, format
    characters (zero-width spaces and joiners, bidi controls, the soft hyphen, tags), controls, private-use and
    unassigned code points, combining marks on their own and the blank-looking fillers do not."""
    return any(unicodedata.category(char)[0] in "LNPS" and char not in _BLANK_LOOKING for char in value)


def required_text(field: str, value) -> str:
    """A reason or other free text that must not be blank or look blank, stripped."""
    value = (value or "").strip()
    if not value:
        raise InvalidField(field, "required: say why")
    if not has_visible_text(value):
        raise InvalidField(field, "required: say why in visible text (this holds only invisible characters)")
    return value


def optional_text(field: str, value) -> str:
    """Free text that may be left empty (an override's reason), stripped; given, it must not look blank either, so
    that an invisible character never counts as a reason."""
    value = (value or "").strip()
    if value and not has_visible_text(value):
        raise InvalidField(field, "holds only invisible characters: say why in visible text, or leave it empty")
    return value
