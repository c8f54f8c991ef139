"""The embedded SECRET_KEY is public (it is in settings.py): refused wherever a real database holds real data, and so
is any key that is no secret either (short, a word, one character repeated, the embedded key in another spelling)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane.lib.env import weak_secret_key

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
EMBEDDED_KEY = "embedded-insecure-key-set-DJANGO_SECRET_KEY-in-production"
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/controlplane"


def manage_check(tmp_path: Path, **overrides: str | None) -> subprocess.CompletedProcess:
    """`manage.py check` in a fresh process, with the environment changed as given (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "DJANGO_SECRET_KEY", "REDIS_URL"}}
    env["CONTROLPLANE_VAR_DIR"] = str(tmp_path)
    for name, value in overrides.items():
        if value is not None:
            env[name] = value
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_postgres_without_a_key_refuses_to_start_and_names_the_variable(tmp_path):
    result = manage_check(tmp_path, DATABASE_URL=POSTGRES_URL)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr
    assert "DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr, "one line naming the variable, not a traceback"


def test_the_embedded_key_given_explicitly_is_refused_too(tmp_path):
    result = manage_check(tmp_path, DATABASE_URL=POSTGRES_URL, DJANGO_SECRET_KEY=EMBEDDED_KEY)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_postgres_with_a_key_starts(tmp_path):
    result = manage_check(tmp_path, DATABASE_URL=POSTGRES_URL, DJANGO_SECRET_KEY="a-real-random-key-" + "x" * 40)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_the_embedded_sqlite_mode_keeps_the_embedded_key(tmp_path):
    assert manage_check(tmp_path).returncode == 0
    sqlite_url = f"sqlite:///{tmp_path / 'explicit.sqlite3'}"
    result = manage_check(tmp_path, DATABASE_URL=sqlite_url)
    assert result.returncode == 0, result.stderr


WEAK_KEYS = {
    "one-letter": "x",
    "changeme": "changeme",
    "embedded-plus-a-space": EMBEDDED_KEY + " ",
    "embedded-in-other-case": EMBEDDED_KEY.upper(),
    "embedded-with-a-suffix": EMBEDDED_KEY + "-2",
    "whitespace": "     ",
    "repeated-letter": "x" * 64,
    "repeated-word": "changeme" * 8,
    "django-placeholder": "django-insecure-" + "k3J9x_Qm2Lp8Zr5Tv7Wb1Nc4Hd6Fg0Ys",
    "short-but-random": "q7R2vK9xL3mZ8pW1tN6",
}


@pytest.mark.parametrize("key", WEAK_KEYS.values(), ids=WEAK_KEYS.keys())
def test_a_weak_key_is_named_for_what_makes_it_weak(key):
    assert weak_secret_key(key, public_keys=(EMBEDDED_KEY,))


def test_a_long_random_key_is_not_weak():
    assert weak_secret_key(secrets.token_urlsafe(50), public_keys=(EMBEDDED_KEY,)) == ""


@pytest.mark.parametrize("name", ["one-letter", "changeme", "embedded-plus-a-space", "repeated-word"])
def test_a_weak_key_refuses_to_start_with_a_database_server(tmp_path, name):
    result = manage_check(tmp_path, DATABASE_URL=POSTGRES_URL, DJANGO_SECRET_KEY=WEAK_KEYS[name])
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY" in result.stderr and "Traceback" not in result.stderr
    assert name == "one-letter" or WEAK_KEYS[name].strip() not in result.stderr, "the key is not echoed"


def test_the_embedded_sqlite_mode_accepts_a_short_key(tmp_path):
    result = manage_check(tmp_path, DJANGO_SECRET_KEY="x")
    assert result.returncode == 0, result.stderr
