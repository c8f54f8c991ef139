"""Two saves on the same base version at the same moment, each on its own Postgres connection: one wins."""

import threading
from collections.abc import Callable

import pytest
from django.db import connection
from rest_framework.test import APIClient

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import PoolRelease
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.exceptions import StaleBaseVersion
from controlplane.params.models import ParameterTemplate, TemplateVersion
from controlplane.params.services.templates import template_version_create
from controlplane.params.services.whitelists import whitelist_version_create
from tests.factories import legal_whitelist, pools, template_with_versions

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def race(*calls: Callable[[], object]) -> list:
    """Run each call in its own thread, released together by a barrier; return results or exceptions in order."""
    barrier = threading.Barrier(len(calls))
    outcomes: list = [None] * len(calls)

    def run(i: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes[i] = call()
        except Exception as exc:
            outcomes[i] = exc
        finally:
            # Each thread opened its own connection; close it so the test database can be flushed.
            connection.close()

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a save hung"
    return outcomes


def strict(value: float) -> dict:
    return {"inference_params": {"temperature": {"strict": value}, "max_tokens": {"whitelist": []}}}


def test_two_service_saves_on_one_base_exactly_one_wins(agent, sre):
    assert connection.vendor == "postgresql"
    template, _ = template_with_versions(agent)
    # Several rounds, so a missing row lock shows up as an IntegrityError rather than passing by luck.
    for round_number in range(1, 6):
        outcomes = race(
            *(
                lambda actor=actor, value=value, base=round_number: template_version_create(
                    actor=actor, template=template, document=strict(value), base_number=base
                )
                for actor, value in ((agent, 0.1), (sre, 0.2))
            )
        )
        winners = [o for o in outcomes if isinstance(o, TemplateVersion)]
        losers = [o for o in outcomes if isinstance(o, StaleBaseVersion)]
        assert (len(winners), len(losers)) == (1, 1), outcomes
        assert winners[0].number == round_number + 1
        assert losers[0].detail["current_version"]["number"] == round_number + 1
    assert ParameterTemplate.objects.get(pk=template.pk).latest_number == 6
    assert TemplateVersion.objects.filter(template=template).count() == 6
    assert AuditEntry.objects.filter(action="template.version_create").count() == 6


def test_two_api_saves_on_one_base_one_gets_409_with_the_current_version(users):
    template_with_versions(users["agent"])

    def save(role: str, value: float):
        client = APIClient()
        client.force_authenticate(users[role])
        body = {"base_version": 1, "document": strict(value)}
        return client.post("/api/v1/templates/chat/versions/", body, format="json")

    responses = race(lambda: save("agent", 0.1), lambda: save("sre", 0.2))
    assert sorted(r.status_code for r in responses) == [201, 409], responses
    winner = next(r for r in responses if r.status_code == 201).json()
    loser = next(r for r in responses if r.status_code == 409).json()
    assert loser["code"] == "stale_base_version"
    current = loser["detail"]["current_version"]
    assert current["number"] == winner["number"] == 2
    assert current["author"] == winner["author"]
    assert current["document"] == winner["document"]
    assert list(TemplateVersion.objects.filter(template__name="chat").values_list("number", flat=True)) == [2, 1]


def test_two_whitelist_saves_on_one_base_exactly_one_wins(agent, sre):
    legal = legal_whitelist(agent)
    outcomes = race(
        lambda: whitelist_version_create(actor=agent, whitelist=legal, scenarios=["legal", "a"], base_number=1),
        lambda: whitelist_version_create(actor=sre, whitelist=legal, scenarios=["legal", "b"], base_number=1),
    )
    assert sorted(type(o).__name__ for o in outcomes) == ["StaleBaseVersion", "WhitelistVersion"], outcomes
    assert legal.versions.count() == 2


def test_two_publishes_to_one_pool_serialize(agent, sre, admin_user):
    _, (v1, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    staging, _ = pools(sre)
    outcomes = race(
        lambda: pool_publish(actor=sre, pool=staging, version=v1, reason="a"),
        lambda: pool_publish(actor=admin_user, pool=staging, version=v2, reason="b"),
    )
    assert all(isinstance(o, PoolRelease) for o in outcomes), outcomes
    first, second = sorted(outcomes, key=lambda r: r.id)
    # The later release saw the earlier one under the pool's row lock, so the chain has no gap.
    assert second.previous_version_id == first.version_id
    assert first.previous_version_id is None
