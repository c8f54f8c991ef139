"""No statement empties or rewrites the audit table below the application: Postgres refuses TRUNCATE (its own or one
cascading from a table the audit rows point at) and SQLite refuses an INSERT that reuses an existing row's id.

On SQLite, `INSERT OR REPLACE` / `REPLACE INTO` / an upsert with an existing id deletes that row and inserts another,
and the delete fires no DELETE trigger unless the connection turned `recursive_triggers` on; refusing the insert
itself holds whatever the connection's pragmas. On Postgres, TRUNCATE fires no row trigger, only a statement one.
Schema changes (DROP TRIGGER, ALTER TABLE ... DISABLE TRIGGER) stay with the database's owner: docs/security.md.
"""

from django.db import migrations

SQLITE_CREATE = """
CREATE TRIGGER IF NOT EXISTS audit_entry_no_replace BEFORE INSERT ON audit_auditentry
WHEN EXISTS (SELECT 1 FROM audit_auditentry WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'audit entries are append-only'); END
"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS audit_entry_no_replace"
POSTGRES_CREATE = """
CREATE TRIGGER audit_entry_no_truncate
  BEFORE TRUNCATE ON audit_auditentry
  FOR EACH STATEMENT EXECUTE FUNCTION audit_entry_append_only();
"""
POSTGRES_DROP = "DROP TRIGGER IF EXISTS audit_entry_no_truncate ON audit_auditentry"


def forwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(SQLITE_CREATE)
    elif vendor == "postgresql":
        schema_editor.execute(POSTGRES_CREATE)


def backwards(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(SQLITE_DROP)
    elif vendor == "postgresql":
        schema_editor.execute(POSTGRES_DROP)


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_sqlite_append_only")]
    operations = [migrations.RunPython(forwards, backwards)]
