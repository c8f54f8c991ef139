"""On SQLite, triggers refuse UPDATE and DELETE on the audit table, whatever the client (as 0002 does on Postgres).

A later migration that makes Django rebuild this table on SQLite (most AlterField/RemoveField do) drops these
triggers with the old table and must create them again; tests/security/test_audit_append_only.py migrates a fresh
SQLite database from scratch and fails if they are missing.
"""

from django.db import migrations

CREATE = [
    """
    CREATE TRIGGER IF NOT EXISTS audit_entry_no_update BEFORE UPDATE ON audit_auditentry
    BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS audit_entry_no_delete BEFORE DELETE ON audit_auditentry
    BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END
    """,
]
DROP = ["DROP TRIGGER IF EXISTS audit_entry_no_update", "DROP TRIGGER IF EXISTS audit_entry_no_delete"]


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in CREATE:
            schema_editor.execute(statement)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        for statement in DROP:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_postgres_append_only")]
    operations = [migrations.RunPython(forwards, backwards)]
