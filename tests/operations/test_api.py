"""The overrides API: set, list with filters, revoke, and errors in the one error shape naming the field."""

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.operations.models import ConversationOverride
from tests.helpers import error_paths

pytestmark = pytest.mark.django_db

LIST = reverse("api:override-list")
BODY = {"pool": "prod-main", "conversation": "conv-1", "tier": "strict", "reason": "refund dispute"}


def revoke_url(pk: int) -> str:
    return reverse("api:override-revoke", kwargs={"pk": pk})


def test_set_list_and_revoke(world, api_for):
    client = api_for("agent")
    created = client.post(LIST, {**BODY, "expires_in_minutes": 10}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in ("pool", "conversation", "tier", "temperature", "set_by", "revoked_at")} == {
        "pool": "prod-main",
        "conversation": "conv-1",
        "tier": "strict",
        "temperature": None,
        "set_by": "agent",
        "revoked_at": None,
    }
    everywhere = client.post(
        LIST, {**BODY, "pool": None, "conversation": "conv-2", "tier": None, "temperature": 0.4}, format="json"
    )
    assert everywhere.json()["pool"] is None and everywhere.json()["temperature"] == 0.4

    listed = client.get(LIST).json()["results"]
    assert [o["conversation"] for o in listed] == ["conv-2", "conv-1"]
    assert [o["conversation"] for o in client.get(LIST, {"pool": "staging"}).json()["results"]] == ["conv-2"]
    assert [o["conversation"] for o in client.get(LIST, {"conversation": "conv-1"}).json()["results"]] == ["conv-1"]

    revoked = api_for("sre").post(revoke_url(body["id"]), {"reason": "customer satisfied"}, format="json")
    assert revoked.status_code == 200
    assert (revoked.json()["revoked_by"], revoked.json()["revoke_reason"]) == ("sre", "customer satisfied")
    assert [o["conversation"] for o in client.get(LIST).json()["results"]] == ["conv-2"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"conversation": "has space"}, "conversation"),
        ({"conversation": "c" * 129}, "conversation"),
        ({"tier": "lukewarm"}, "tier"),
        ({"tier": None}, "tier"),
        ({"tier": None, "temperature": 3}, "temperature"),
        ({"temperature": 0.3}, "temperature"),
        ({"temperature": "warm"}, "temperature"),
        ({"reason": ""}, "reason"),
        ({"expires_in_minutes": 2000}, "expires_in_minutes"),
        ({"pool": "nowhere"}, "pool"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(world, api_for, changes, field):
    response = api_for("agent").post(LIST, {**BODY, **changes}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert f"{field}: " in body["error"], body
    assert field in error_paths(body)
    assert not ConversationOverride.objects.exists()
    assert not AuditEntry.objects.filter(action__startswith="override.").exists()


def test_pool_must_be_named_or_null_never_left_out(world, api_for):
    body = {k: v for k, v in BODY.items() if k != "pool"}
    response = api_for("agent").post(LIST, body, format="json")
    assert response.status_code == 400
    assert "pool" in error_paths(response.json())


def test_revoking_an_unknown_or_ended_override(world, api_for):
    client = api_for("agent")
    assert client.post(revoke_url(999_999), {"reason": "x"}, format="json").status_code == 404
    pk = client.post(LIST, BODY, format="json").json()["id"]
    assert client.post(revoke_url(pk), {"reason": "done"}, format="json").status_code == 200
    again = client.post(revoke_url(pk), {"reason": "done"}, format="json")
    assert again.status_code == 409
    assert again.json()["code"] == "override_not_active"
    assert again.json()["error"].startswith("override: ")
    missing_reason = client.post(LIST, {**BODY, "conversation": "c2"}, format="json").json()["id"]
    assert "reason" in error_paths(client.post(revoke_url(missing_reason), {}, format="json").json())


def test_unknown_pool_filter_is_a_400(world, api_for):
    response = api_for("oncall").get(LIST, {"pool": "nowhere"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("pool: no pool named 'nowhere'")
