"""Gateway client keys: who may call the node's /v1 routes (and, with a scrape key, its /metrics), and which business
tags each caller may send.

A key is `cpk_` plus 43 random URL-safe characters, shown once where it is made (the dashboard, or `new` below) and
known to the node only as its sha256. Keys reach a node in its pool's policy bundle (`client_keys`, pushed by the
control plane, so a revocation lands within seconds) and, for nodes without a control plane, from an operator's key
file (`--client-keys-file`) in the same shape; the node accepts the union of both. A node that knows no client key
answers every /v1 request 401: it never serves open.

Per request: one sha256 of the presented key, one dict lookup by its public prefix, one constant-time comparison.

    python -m engine_node.client_keys new --name ops-probe --business-tag legal --file /etc/engine-node/keys.json
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("engine_node.client_keys")

KEY_PREFIX = "cpk_"
# The public part of a key (`cpk_` and 8 characters): shown in the dashboard, and what the node looks a key up by.
PREFIX_LENGTH = 12
CLIENT, SCRAPE = "client", "scrape"
KINDS = (CLIENT, SCRAPE)
MAX_TAGS = 64
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_BEARER = "bearer "


class KeyEntryInvalid(ValueError):
    """A key entry (bundle section or key file) that the node cannot use; the message names the field."""


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_sha256(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def key_entry(key: str, *, name: str, kind: str = CLIENT, business_tags=()) -> dict:
    """The entry a bundle or key file holds for `key`: everything but the key itself."""
    entry = {
        "name": name,
        "prefix": key[:PREFIX_LENGTH],
        "sha256": key_sha256(key),
        "kind": kind,
        "business_tags": sorted(set(business_tags)),
    }
    parse_entry(entry)
    return entry


@dataclass(frozen=True, slots=True)
class KeyGrant:
    """One key the node accepts: its name (a metric label), what it may call and which business tags it may send."""

    name: str
    prefix: str
    digest: bytes
    kind: str
    business_tags: frozenset[str]
    source: str  # "bundle" or "file"

    @property
    def owner(self) -> str:
        """Who a stream session belongs to: the key's sha256, so only the same key resumes it."""
        return self.digest.hex()


def parse_entry(entry: object, source: str = "bundle") -> KeyGrant:
    if not isinstance(entry, dict):
        raise KeyEntryInvalid("must be an object")
    name, prefix, digest = entry.get("name"), entry.get("prefix"), entry.get("sha256")
    kind, tags = entry.get("kind", CLIENT), entry.get("business_tags", [])
    if not isinstance(name, str) or not _NAME.match(name):
        raise KeyEntryInvalid(f"name: must be 1-64 lowercase letters, digits, - or _, got {name!r}")
    if not isinstance(prefix, str) or len(prefix) != PREFIX_LENGTH or not prefix.startswith(KEY_PREFIX):
        raise KeyEntryInvalid(f"{name}: prefix: must be the key's first {PREFIX_LENGTH} characters ({KEY_PREFIX}...)")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise KeyEntryInvalid(f"{name}: sha256: must be 64 lowercase hex digits")
    if kind not in KINDS:
        raise KeyEntryInvalid(f"{name}: kind: must be one of {', '.join(KINDS)}, got {kind!r}")
    tags_valid = isinstance(tags, list) and all(isinstance(t, str) and _TAG.match(t) for t in tags)
    if not tags_valid or len(tags) > MAX_TAGS:
        raise KeyEntryInvalid(
            f"{name}: business_tags: must be a list of at most {MAX_TAGS} tags of letters, digits or _.:-"
        )
    if kind == SCRAPE and tags:
        raise KeyEntryInvalid(f"{name}: business_tags: a scrape key sends no chat requests, so it takes no tags")
    return KeyGrant(name, prefix, bytes.fromhex(digest), kind, frozenset(tags), source)


def parse_entries(entries: object, source: str) -> list[KeyGrant]:
    """The usable grants of a bundle section; an unusable entry is logged and left out, never half-trusted."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        log.error("client keys (%s): not a list; no key from it is accepted", source)
        return []
    grants = []
    for entry in entries:
        try:
            grants.append(parse_entry(entry, source))
        except KeyEntryInvalid as exc:
            log.error("client keys (%s): entry refused: %s", source, exc)
    return grants


def load_key_file(path: Path) -> list[KeyGrant]:
    """An operator's key file, `{"client_keys": [entry, ...]}`: every entry must be valid (start-up fails loudly)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KeyEntryInvalid(f"{path}: {exc}") from None
    entries = document.get("client_keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise KeyEntryInvalid(f"{path}: must be a JSON object with a client_keys list")
    grants = []
    for index, entry in enumerate(entries):
        try:
            grants.append(parse_entry(entry, "file"))
        except KeyEntryInvalid as exc:
            raise KeyEntryInvalid(f"{path}: client_keys[{index}]: {exc}") from None
    return grants


class KeyTable:
    """The keys a node accepts, by their public prefix; `find()` is the per-request check."""

    __slots__ = ("_by_prefix", "client_count", "requires_scrape_key")

    def __init__(self, grants: list[KeyGrant] = ()):
        by_prefix: dict[str, tuple[KeyGrant, ...]] = {}
        for grant in grants:
            by_prefix[grant.prefix] = (*by_prefix.get(grant.prefix, ()), grant)
        self._by_prefix = by_prefix
        self.client_count = sum(grant.kind == CLIENT for grant in grants)
        # /metrics asks for a key once the node knows a scrape key (docs/gateway-access.md).
        self.requires_scrape_key = any(grant.kind == SCRAPE for grant in grants)

    def find(self, authorization: str | None, kind: str) -> KeyGrant | None:
        """The grant of the `Authorization: Bearer <key>` header's key if it is of `kind`, else None."""
        if not authorization or authorization[:7].lower() != _BEARER:
            return None
        key = authorization[7:].strip()
        # Hashed whatever the prefix, so a miss costs what a hit does.
        digest = hashlib.sha256(key.encode("utf-8", "replace")).digest()
        found = None
        for grant in self._by_prefix.get(key[:PREFIX_LENGTH], ()):
            if hmac.compare_digest(grant.digest, digest) and grant.kind == kind:
                found = grant
        return found


def _new(args) -> int:
    """Make a key, add its entry to the key file (created 0600), print the key once."""
    key = new_key()
    try:
        entry = key_entry(key, name=args.name, kind=args.kind, business_tags=args.business_tag or [])
    except KeyEntryInvalid as exc:
        print(f"client_keys: {exc}", file=sys.stderr)
        return 2
    path = Path(args.file)
    entries = []
    if path.exists():
        try:
            load_key_file(path)
        except KeyEntryInvalid as exc:
            print(f"client_keys: {exc}", file=sys.stderr)
            return 2
        entries = json.loads(path.read_text(encoding="utf-8"))["client_keys"]
    if any(existing.get("name") == args.name for existing in entries):
        print(f"client_keys: {path} already has a key named {args.name!r}", file=sys.stderr)
        return 2
    entries.append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"client_keys": entries}, handle, indent=2)
    os.replace(tmp, path)
    print(key)
    print(f"(shown once; {path} holds its sha256 as key {args.name!r}; restart the agent to load it)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine_node.client_keys", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="make a key for a stand-alone node and add it to a key file")
    new.add_argument("--name", required=True, help="the key's name (lowercase letters, digits, - or _)")
    new.add_argument("--kind", choices=KINDS, default=CLIENT, help="client: /v1 routes; scrape: /metrics")
    new.add_argument("--business-tag", action="append", help="a business tag the key may send, repeatable")
    new.add_argument("--file", required=True, help="the key file the agent reads with --client-keys-file")
    args = parser.parse_args(argv)
    return _new(args)


if __name__ == "__main__":
    sys.exit(main())
