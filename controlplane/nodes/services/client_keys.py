"""Audited writes to gateway client keys: issue one for some pools (shown once), revoke it.

Both push the pools' policy bundle on commit, so their nodes accept a new key, or refuse a revoked one, within
seconds (engine_node/client_keys.py is the node's side; docs/gateway-access.md the whole story).
"""

import re

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, InvalidField, check_slug, required_text
from controlplane.nodes.models import ClientKey, Pool
from controlplane.operations.policy_bundle import push_policy
from engine_node.client_keys import MAX_TAGS, PREFIX_LENGTH, key_sha256, new_key

# The gateway's own rule for a business tag (engine_node.policy.explain.checked_name).
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_TAG_RULE = "must be 1-64 letters, digits or _.:- (starting with a letter or digit)"


def _checked_tags(kind: str, business_tags) -> list[str]:
    if not isinstance(business_tags, list | tuple):
        raise InvalidField("business_tags", "must be a list of business tags")
    tags = []
    for tag in business_tags:
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise InvalidField("business_tags", f"{tag!r}: {_TAG_RULE}")
        if tag in tags:
            raise InvalidField("business_tags", f"{tag!r} is listed twice")
        tags.append(tag)
    if len(tags) > MAX_TAGS:
        raise InvalidField("business_tags", f"at most {MAX_TAGS} tags, got {len(tags)}")
    if kind == ClientKey.Kind.SCRAPE and tags:
        raise InvalidField("business_tags", "a scrape key reads /metrics only and takes no business tags")
    return sorted(tags)


def _snapshot(key: ClientKey, pools: list[Pool]) -> dict:
    return {
        "name": key.name,
        "kind": key.kind,
        "key_prefix": key.key_prefix,
        "pools": sorted(pool.name for pool in pools),
        "business_tags": key.business_tags,
    }


def _push(pools: list[Pool]) -> None:
    push_policy(pools)


@mutating_service
def client_key_create(
    *, actor, name: str, pools: list[Pool], kind: str = ClientKey.Kind.CLIENT, business_tags=()
) -> tuple[ClientKey, str]:
    """Issue a key valid on the nodes of `pools`; it is returned once and only its sha256 is kept."""
    check_slug("name", name)
    if kind not in ClientKey.Kind.values:
        raise InvalidField("kind", f"must be one of {', '.join(ClientKey.Kind.values)}; got {kind!r}")
    if not pools:
        raise InvalidField("pools", "name at least one pool whose nodes accept the key")
    tags = _checked_tags(kind, list(business_tags))
    key = new_key()
    with transaction.atomic():
        try:
            with transaction.atomic():
                client_key = ClientKey.objects.create(
                    name=name,
                    kind=kind,
                    business_tags=tags,
                    key_hash=key_sha256(key),
                    key_prefix=key[:PREFIX_LENGTH],
                    created_by=actor,
                )
        except IntegrityError:
            raise Conflict(f"name: a live client key named {name!r} already exists; revoke it first") from None
        client_key.pools.set(pools)
        audit_record(actor=actor, action="client_key.create", target=client_key, after=_snapshot(client_key, pools))
        transaction.on_commit(lambda: _push(list(pools)))
    return client_key, key


@mutating_service
def client_key_revoke(*, actor, client_key: ClientKey, reason: str) -> ClientKey:
    """Revoke the key now: its pools' nodes stop accepting it as soon as their new bundle arrives."""
    reason = required_text("reason", reason)
    with transaction.atomic():
        locked = ClientKey.objects.select_for_update().get(pk=client_key.pk)
        if locked.revoked_at is not None:
            raise Conflict(f"client key: {locked.name} ({locked.key_prefix}…) is already revoked")
        pools = list(locked.pools.all())
        locked.revoked_at = timezone.now()
        locked.revoked_by = actor
        locked.revoke_reason = reason
        locked.save(update_fields=["revoked_at", "revoked_by", "revoke_reason"])
        audit_record(
            actor=actor, action="client_key.revoke", target=locked, before=_snapshot(locked, pools), reason=reason
        )
        transaction.on_commit(lambda: _push(pools))
    return locked
