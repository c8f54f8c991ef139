"""One fleet (daphne, agents) for all the transactional tests of a module, instead of one per test.

A transactional test ends with the database emptied (docs/testing.md); the module's processes outlive it. The module
fixture builds its world inside `module_database()` (committed at once, as a transactional test's writes are) and
calls `rows.keep()` once the fleet is up; each test's fixture calls `rows.restore()` first and `rows.carry()` last:

- `keep` serializes the rows of the control plane's apps (the metric samples and the audit trail excepted: no test
  reads those of the fleet's start);
- `restore`, once a flush has emptied the tables, writes those rows back with their own primary keys: the control
  plane's connections hold their nodes' ids, so the agents carry on as if nothing happened. Each node then gets
  its connection as it stood at the end of the test before (`carry`): its session, whether it is connected and
  when it was last heard from, the config it runs, so that a disconnect, an ACK or a command reads the truth.

What the agents themselves carry from one test to the next (faults set on their engines, the config they run, a
command under way) is for the module's fixture to reset, explicitly, before the test.
"""

import contextlib

from django.apps import apps
from django.core import serializers
from django.db import transaction

from controlplane.nodes.models import EngineNode
from controlplane.params.models import TemplateVersion

SKIPPED_APPS = frozenset({"metrics", "audit"})
# A node's connection as the control plane knows it from the agent (hello, heartbeats, ACKs, disconnect). Not its
# token (a test may have revoked it: the rows kept have the one its agent holds), nor NACKs and warmups, which
# describe what a test before published.
CONNECTION = (
    "hostname", "backend", "engine_version", "agent_version", "gpus", "gateway_url", "gateway_url_refused",
    "agent_address", "served_model_name", "reported_status", "is_connected", "session_id", "connected_at",
    "last_seen_at", "applied_hash", "applied_at", "speculation",
)  # fmt: skip


@contextlib.contextmanager
def module_database(django_db_blocker):
    """Database access for a module-scoped fixture (pytest-django's blocker, lifted while it builds the fleet)."""
    with django_db_blocker.unblock():
        yield


class SharedRows:
    def __init__(self):
        self._rows: str | None = None
        self._connections: dict[int, dict] = {}

    def keep(self) -> None:
        self._rows = serializers.serialize("json", _objects())

    def carry(self) -> None:
        """Note every node's connection as it stands now (at the end of a test, before the flush)."""
        self._connections = {row.pop("pk"): row for row in EngineNode.objects.values("pk", *CONNECTION)}

    def restore(self) -> bool:
        """Write the kept rows back if a flush emptied the tables; True when it did."""
        if self._rows is None or EngineNode.objects.exists():
            return False
        with transaction.atomic():  # the foreign keys are checked at commit: any order will do
            for row in serializers.deserialize("json", self._rows):
                row.save()
            versions = {version.content_hash: version for version in TemplateVersion.objects.all()}
            for pk, connection in self._connections.items():
                version = versions.get(connection["applied_hash"])  # one the test before made is gone
                EngineNode.objects.filter(pk=pk).update(**connection, applied_version=version)
        return True


def _objects():
    for app_config in apps.get_app_configs():
        if not app_config.name.startswith("controlplane.") or app_config.label in SKIPPED_APPS:
            continue
        for model in app_config.get_models():
            if model._meta.proxy or not model._meta.managed:
                continue
            yield from model._base_manager.order_by(model._meta.pk.name).iterator()
