"""Node credentials: random tokens shown once, stored as sha256, compared in constant time."""

import hashlib
import hmac
import secrets

PREFIX = "cpn_"


def token_generate() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_matches(token: str, stored_hash: str) -> bool:
    return bool(stored_hash) and hmac.compare_digest(token_hash(token), stored_hash)
