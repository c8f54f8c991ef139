"""Audit rows cannot be rewritten or deleted with plain SQL, on SQLite (embedded mode) as on Postgres."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import DatabaseError, connection, transaction

from controlplane.audit.models import AuditEntry

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
INSERT = (
    "INSERT INTO audit_auditentry (at, actor_name, request_id, action, target_type, target_id, target_repr, reason)"
    " VALUES ('2026-01-01 00:00:00', 'system', '', 'system.note', 'x', '1', 'x', 'original')"
)


@pytest.fixture(scope="module")
def migrated_sqlite(tmp_path_factory) -> Path:
    """A fresh embedded database, migrated from scratch by `manage.py migrate` with DATABASE_URL unset."""
    var = tmp_path_factory.mktemp("sqlite-var")
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "CELERY_TASK_ALWAYS_EAGER"}}
    env["CONTROLPLANE_VAR_DIR"] = str(var)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    return var / "controlplane.sqlite3"


@pytest.mark.parametrize(
    "sql",
    ["UPDATE audit_auditentry SET reason = 'rewritten'", "DELETE FROM audit_auditentry"],
    ids=["update", "delete"],
)
def test_sqlite_refuses_rewriting_audit_rows(migrated_sqlite, sql):
    with sqlite3.connect(migrated_sqlite) as db:
        db.execute(INSERT)
    db = sqlite3.connect(migrated_sqlite)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="audit entries are append-only"):
            db.execute(sql)
        db.rollback()
        reasons = [row[0] for row in db.execute("SELECT reason FROM audit_auditentry")]
    finally:
        db.close()
    assert reasons and set(reasons) == {"original"}


def test_sqlite_still_appends(migrated_sqlite):
    with sqlite3.connect(migrated_sqlite) as db:
        before = db.execute("SELECT count(*) FROM audit_auditentry").fetchone()[0]
        db.execute(INSERT)
        assert db.execute("SELECT count(*) FROM audit_auditentry").fetchone()[0] == before + 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sql",
    ["UPDATE audit_auditentry SET reason = 'rewritten'", "DELETE FROM audit_auditentry"],
    ids=["update", "delete"],
)
def test_postgres_refuses_rewriting_audit_rows(sql):
    assert connection.vendor == "postgresql", "make test runs on Postgres; its trigger is what this test is about"
    with connection.cursor() as cursor:
        cursor.execute(INSERT)
    with (
        pytest.raises(DatabaseError, match="audit entries are append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert list(AuditEntry.objects.values_list("reason", flat=True)) == ["original"]
