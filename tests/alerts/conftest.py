"""A small fleet for alert tests: pools, registered and connected nodes, samples written at a fake clock."""

from datetime import UTC, datetime, timedelta

import pytest

from controlplane.alerts.defaults import install_default_rules
from controlplane.alerts.models import AlertRule, AlertRuleVersion
from controlplane.metrics.models import MetricSample
from controlplane.metrics.samples import SAMPLE_KEYS
from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from tests.factories import pools


def blank_sample(**values) -> dict:
    """Every key of the agent's sample (contract A): figures null, counts zero, maps empty, then `values`."""
    sample: dict = {key: None for key in SAMPLE_KEYS}
    sample.update(qps=0.0, queue_depth_short=0, queue_depth_long=0, engine_restarts=0, degraded=0)
    sample.update(batch_size_hist={}, length_hist={}, intents={}, tiers={}, intent_classified=0)
    sample.update(intent_confidence_hist={})
    sample.update(values)
    return sample


class Clock:
    """The evaluator's `now`, moved by hand; samples are written at it.

    It starts at the real time: services (silences, acknowledgements) stamp the real clock.
    """

    def __init__(self, start: datetime | None = None):
        self.now = start or datetime.now(UTC).replace(microsecond=0)

    def tick(self, seconds: float = 2) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Fleet:
    def __init__(self, sre, staging, prod):
        self.sre, self.staging, self.prod = sre, staging, prod

    def add(self, name: str, pool=None, *, connected_at: datetime | None = None) -> EngineNode:
        node, _ = node_create(actor=self.sre, name=name, pool=pool or self.prod)
        self.connect(name, at=connected_at or datetime.now(UTC).replace(microsecond=0))
        return node

    def connect(self, name: str, *, at: datetime) -> None:
        EngineNode.objects.filter(name=name).update(is_connected=True, connected_at=at, last_seen_at=at)

    def heartbeat(self, *names: str, at: datetime) -> None:
        EngineNode.objects.filter(name__in=names).update(last_seen_at=at)

    def disconnect(self, name: str) -> None:
        EngineNode.objects.filter(name=name).update(is_connected=False)

    def sample(self, name: str, at: datetime, **values) -> None:
        """A node's 1 s row at `at` (and its heartbeat): what ingestion stores for one agent sample."""
        pool = EngineNode.objects.filter(name=name).values_list("pool__name", flat=True).first() or ""
        MetricSample.objects.create(
            scope="node", name=name, pool=pool, t=at, resolution_s=1, values=blank_sample(**values)
        )
        self.heartbeat(name, at=at)

    def aggregate(self, scope: str, name: str, at: datetime, **values) -> None:
        MetricSample.objects.create(
            scope=scope, name=name, pool=name if scope == "pool" else "", t=at, resolution_s=1,
            values=blank_sample(**values),
        )  # fmt: skip


@pytest.fixture
def default_rules(db):
    """The default pack; the migration installs it, but a transactional test before this one flushed it."""
    install_default_rules(AlertRule, AlertRuleVersion)


@pytest.fixture
def fleet(users, default_rules) -> Fleet:
    staging, prod = pools(users["sre"])
    return Fleet(users["sre"], staging, prod)
