"""Audit rows cannot be rewritten, deleted or emptied with plain SQL, on SQLite (embedded mode) as on Postgres: not by
UPDATE or DELETE, nor by the statements that do either in passing (REPLACE, upserts, MERGE, TRUNCATE)."""

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
COLUMNS = "at, actor_name, request_id, action, target_type, target_id, target_repr, reason"
INSERT = (
    f"INSERT INTO audit_auditentry ({COLUMNS})"
    " VALUES ('2026-01-01 00:00:00', 'system', '', 'system.note', 'x', '1', 'x', 'original')"
)
# The newest row again under its own id, with another reason: what each rewriting statement below writes.
REWRITTEN = (
    f"(id, {COLUMNS}) SELECT max(id), '2026-01-01 00:00:00', 'attacker', '', 'system.note', 'x', '1', 'x', 'rewritten'"
    " FROM audit_auditentry"
)
SQLITE_REWRITES = {
    "update": "UPDATE audit_auditentry SET reason = 'rewritten'",
    "delete": "DELETE FROM audit_auditentry",
    "insert-or-replace": f"INSERT OR REPLACE INTO audit_auditentry {REWRITTEN}",
    "replace-into": f"REPLACE INTO audit_auditentry {REWRITTEN}",
    "upsert": f"INSERT INTO audit_auditentry {REWRITTEN} WHERE true ON CONFLICT(id) DO UPDATE SET reason = 'rewritten'",
    "update-or-replace": "UPDATE OR REPLACE audit_auditentry SET id = id + 1000",
}
POSTGRES_REWRITES = {
    "update": "UPDATE audit_auditentry SET reason = 'rewritten'",
    "delete": "DELETE FROM audit_auditentry",
    "truncate": "TRUNCATE audit_auditentry",
    "truncate-restart-identity": "TRUNCATE TABLE ONLY audit_auditentry RESTART IDENTITY",
    # The audit rows point at their actors: emptying the users' table with CASCADE would empty the audit table too.
    "truncate-cascading-from-users": "TRUNCATE accounts_user CASCADE",
    "upsert": f"INSERT INTO audit_auditentry {REWRITTEN} ON CONFLICT (id) DO UPDATE SET reason = 'rewritten'",
    "merge-update": (
        "MERGE INTO audit_auditentry AS a USING (SELECT max(id) AS id FROM audit_auditentry) AS s ON a.id = s.id"
        " WHEN MATCHED THEN UPDATE SET reason = 'rewritten'"
    ),
    "merge-delete": (
        "MERGE INTO audit_auditentry AS a USING audit_auditentry AS s ON a.id = s.id WHEN MATCHED THEN DELETE"
    ),
}


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


@pytest.mark.parametrize("recursive_triggers", ["OFF", "ON"])
@pytest.mark.parametrize("sql", SQLITE_REWRITES.values(), ids=SQLITE_REWRITES.keys())
def test_sqlite_refuses_rewriting_audit_rows(migrated_sqlite, sql, recursive_triggers):
    with sqlite3.connect(migrated_sqlite) as db:
        db.execute(INSERT)
    db = sqlite3.connect(migrated_sqlite)
    try:
        # REPLACE's delete fires DELETE triggers only with recursive_triggers on: the refusal must not depend on it.
        db.execute(f"PRAGMA recursive_triggers = {recursive_triggers}")
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


# Transactional: the row is committed before the attack, as it would be (TRUNCATE refuses a table with pending
# constraint checks of its own transaction for another reason). The flush after each test is the harness's.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sql", POSTGRES_REWRITES.values(), ids=POSTGRES_REWRITES.keys())
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


@pytest.mark.django_db
def test_postgres_still_appends_and_a_new_id_is_not_a_rewrite():
    with connection.cursor() as cursor:
        cursor.execute(INSERT)
        appended = REWRITTEN.replace("max(id)", "max(id) + 1")
        cursor.execute(f"INSERT INTO audit_auditentry {appended} ON CONFLICT DO NOTHING")
    assert sorted(AuditEntry.objects.values_list("reason", flat=True)) == ["original", "rewritten"]
