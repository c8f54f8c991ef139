"""Typed readers for settings that come from the environment; each fails loudly on a bad value."""

import os

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class EnvError(RuntimeError):
    """An environment variable holds a value its setting cannot use."""


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name}: expected one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EnvError(f"{name}: expected an integer; got {raw!r}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


# A key shorter than this, or drawn from fewer distinct characters, is a placeholder or a word, not a random value.
MIN_SECRET_KEY_CHARS = 32
MIN_SECRET_KEY_DISTINCT = 10


def weak_secret_key(value: str, *, public_keys: tuple[str, ...]) -> str:
    """Why `value` is no secret key for real data ("" when it will do): empty, a public key in any spelling, Django's
    `django-insecure-` placeholder, too short, or too few distinct characters."""
    key = value.strip()
    if not key:
        return "not set"
    if any(public.casefold() in key.casefold() for public in public_keys):
        return "it holds the embedded key, which is public"
    if key.startswith("django-insecure-"):
        return "a django-insecure- key is a placeholder"
    if len(key) < MIN_SECRET_KEY_CHARS:
        return f"{len(key)} characters is shorter than {MIN_SECRET_KEY_CHARS}"
    if len(set(key)) < MIN_SECRET_KEY_DISTINCT:
        return f"{len(set(key))} distinct characters are fewer than {MIN_SECRET_KEY_DISTINCT}"
    return ""
