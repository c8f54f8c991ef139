"""Gateway client keys in the control plane: issued once, stored as a hash, revocable, in the pools' bundles."""

import json

import pytest
from django.urls import reverse

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.nodes.models import ClientKey
from controlplane.nodes.services.client_keys import client_key_create, client_key_revoke
from controlplane.operations.policy_bundle import policy_bundle
from engine_node.client_keys import CLIENT, KeyTable, key_sha256, parse_entries
from tests.factories import pools

pytestmark = pytest.mark.django_db


def bundle_keys(pool) -> list[dict]:
    return policy_bundle(pool)["content"]["client_keys"]


def test_a_key_is_stored_as_its_hash_and_reaches_its_pools_bundles_only(sre):
    staging, prod = pools(sre)
    client_key, key = client_key_create(actor=sre, name="web-chat", pools=[staging], business_tags=["order", "legal"])
    stored = ClientKey.objects.get(pk=client_key.pk)
    assert stored.key_hash == key_sha256(key) and stored.key_prefix == key[:12]
    assert key not in json.dumps([stored.key_hash, stored.key_prefix, stored.business_tags, stored.name])
    assert bundle_keys(prod) == []
    [entry] = bundle_keys(staging)
    assert entry == {
        "name": "web-chat",
        "prefix": key[:12],
        "sha256": key_sha256(key),
        "kind": "client",
        "business_tags": ["legal", "order"],
    }
    assert key not in json.dumps(policy_bundle(staging))
    # What the node builds from the bundle accepts the key with its grant.
    grant = KeyTable(parse_entries(bundle_keys(staging), "bundle")).find(f"Bearer {key}", CLIENT)
    assert grant.business_tags == {"order", "legal"}
    audit = AuditEntry.objects.get(action="client_key.create")
    assert audit.after["pools"] == ["staging"] and audit.after["key_prefix"] == key[:12]
    assert key not in json.dumps(audit.after)


def test_revoking_takes_the_key_out_of_every_bundle_and_changes_the_hash(sre):
    staging, prod = pools(sre)
    client_key, _ = client_key_create(actor=sre, name="shared", pools=[staging, prod])
    before = policy_bundle(staging)["hash"]
    client_key_revoke(actor=sre, client_key=client_key, reason="leaked")
    assert bundle_keys(staging) == [] and bundle_keys(prod) == []
    assert policy_bundle(staging)["hash"] != before
    with pytest.raises(Conflict, match="already revoked"):
        client_key_revoke(actor=sre, client_key=client_key, reason="again")
    with pytest.raises(InvalidField, match="reason"):
        client_key_revoke(actor=sre, client_key=client_key, reason=" ")
    # Its name is free again for a new key.
    client_key_create(actor=sre, name="shared", pools=[staging])


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": "Web Chat"}, "name: must be"),
        ({"pools": []}, "pools: name at least one pool"),
        ({"kind": "root"}, "kind: must be one of client, scrape"),
        ({"business_tags": ["ok", "not ok"]}, "business_tags: 'not ok'"),
        ({"business_tags": ["a", "a"]}, "listed twice"),
        ({"business_tags": [f"t{i}" for i in range(65)]}, "at most 64"),
        ({"kind": "scrape", "business_tags": ["legal"]}, "a scrape key"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(sre, kwargs, words):
    staging, _ = pools(sre)
    with pytest.raises(InvalidField, match=words):
        client_key_create(actor=sre, **{"name": "web", "pools": [staging], **kwargs})
    assert not ClientKey.objects.exists() and not AuditEntry.objects.filter(action="client_key.create").exists()


def test_a_second_live_key_with_the_same_name_is_a_conflict(sre):
    staging, _ = pools(sre)
    client_key_create(actor=sre, name="web", pools=[staging])
    with pytest.raises(Conflict, match="already exists"):
        client_key_create(actor=sre, name="web", pools=[staging])
    assert ClientKey.objects.count() == 1


def test_the_api_shows_the_key_once_and_never_its_hash(api_for, sre):
    pools(sre)
    client = api_for("sre")
    created = client.post(
        reverse("api:client-key-list"),
        {"name": "web", "pools": ["staging", "prod-main"], "business_tags": ["order"]},
        format="json",
    )
    assert created.status_code == 201, created.content
    key = created.json()["key"]
    assert created.json()["client_key"]["pools"] == ["prod-main", "staging"]
    listed = api_for("oncall").get(reverse("api:client-key-list"), {"pool": "staging"})
    assert listed.status_code == 200
    [row] = listed.json()["results"]
    assert row["key_prefix"] == key[:12] and row["is_active"] and row["business_tags"] == ["order"]
    assert key not in listed.content.decode() and key_sha256(key) not in listed.content.decode()
    missing = client.post(reverse("api:client-key-list"), {"name": "x", "pools": ["nowhere"]}, format="json")
    assert missing.status_code == 400 and "nowhere" in missing.json()["error"]
    revoked = client.post(reverse("api:client-key-revoke", args=[row["id"]]), {"reason": "rotated"}, format="json")
    assert revoked.status_code == 200 and revoked.json()["revoked_by"] == "sre"
    assert api_for("sre").get(reverse("api:client-key-list"), {"active": "true"}).json()["results"] == []
    refused = api_for("agent").post(reverse("api:client-key-list"), {"name": "y", "pools": ["staging"]}, format="json")
    assert refused.status_code == 403
