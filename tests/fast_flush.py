"""How the test database is emptied after each transactional test (`django_db(transaction=True)`), on Postgres.

Django empties it with one `TRUNCATE` of every table and then recreates the content types and permissions
(post_migrate). A TRUNCATE gives each of the ~60 tables and their indexes new files: 0.25-0.4 s a test on this machine,
and post_migrate another 0.1 s, for tests that wrote a few rows. Here the flush locks every table as TRUNCATE would
(ACCESS EXCLUSIVE: a daphne or agent still writing waits for the flush, as it did for TRUNCATE), deletes every row
in the same transaction (Django's foreign keys are deferred, so in any order) and keeps the content types and
permissions, which only migrations write: post_migrate would find nothing to create, so it is skipped. 15-20 ms a
test. The audit table refuses DELETE like any other change (controlplane/audit/migrations/0002); its trigger is lifted
inside the flush's own transaction, and only there. A flush that resets sequences or cascades is Django's own.
"""

from django.core.management.commands import flush as flush_command
from django.db.backends.postgresql.operations import DatabaseOperations

AUDIT_TABLE = "audit_auditentry"
NO_TRUNCATE = f"ALTER TABLE {AUDIT_TABLE} {{}} TRIGGER audit_entry_no_truncate"
APPEND_ONLY = f"ALTER TABLE {AUDIT_TABLE} {{}} TRIGGER audit_entry_append_only"
# Written by migrations (post_migrate) and by nothing else; kept, so post_migrate has nothing to do.
KEPT_TABLES = frozenset({"django_content_type", "auth_permission"})


def install() -> callable:
    """Patch the flush; returns the function that puts Django's back."""
    sql_flush = DatabaseOperations.sql_flush
    execute_sql_flush = DatabaseOperations.execute_sql_flush
    emit_post_migrate = flush_command.emit_post_migrate_signal
    fast = {"last": False}

    def deleting_sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        fast["last"] = not (reset_sequences or allow_cascade) and bool(tables)
        if not fast["last"]:
            return sql_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        emptied = sorted(set(tables) - KEPT_TABLES)
        statements = [
            f"LOCK TABLE {', '.join(self.quote_name(table) for table in emptied)} IN ACCESS EXCLUSIVE MODE",
            "SET CONSTRAINTS ALL DEFERRED",
        ]
        audit = AUDIT_TABLE in emptied
        statements += [APPEND_ONLY.format("DISABLE")] if audit else []
        statements += [f"DELETE FROM {self.quote_name(table)}" for table in emptied]
        statements += [APPEND_ONLY.format("ENABLE")] if audit else []
        return statements

    def truncating_execute_sql_flush(self, sql_list):
        """Django's own TRUNCATE (a reset of sequences, a cascade) lifts the audit table's no-truncate trigger."""
        if any(sql.startswith("TRUNCATE") and AUDIT_TABLE in sql for sql in sql_list):
            sql_list = [NO_TRUNCATE.format("DISABLE"), *sql_list, NO_TRUNCATE.format("ENABLE")]
        return execute_sql_flush(self, sql_list)

    def post_migrate_unless_kept(*args, **kwargs):
        if not fast["last"]:
            emit_post_migrate(*args, **kwargs)

    DatabaseOperations.sql_flush = deleting_sql_flush
    DatabaseOperations.execute_sql_flush = truncating_execute_sql_flush
    flush_command.emit_post_migrate_signal = post_migrate_unless_kept

    def uninstall() -> None:
        DatabaseOperations.sql_flush = sql_flush
        DatabaseOperations.execute_sql_flush = execute_sql_flush
        flush_command.emit_post_migrate_signal = emit_post_migrate

    return uninstall
