"""The embedded SECRET_KEY is public (it is in settings.py): refused wherever a real database holds real data."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

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
