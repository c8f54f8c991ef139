"""The demo users' password hashes, computed once per worker. Every browser test seeds the demo again (the database
is emptied after each), and hashing its six passwords at PBKDF2's full cost was most of seed_demo's time. The hashes
are the real ones daphne checks at each login (same algorithm, same iterations, verified at full cost there); only the
salt is one per worker, so a password hashed once is not hashed again."""

import functools

from django.contrib.auth.hashers import PBKDF2PasswordHasher


@functools.cache
def worker_salt() -> str:
    return PBKDF2PasswordHasher().salt()


@functools.lru_cache(maxsize=64)
def pbkdf2(password: str, salt: str, iterations: int) -> str:
    return PBKDF2PasswordHasher().encode(password, salt, iterations)


class RepeatablePBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's PBKDF2 hasher with one salt per worker and the results kept: what it stores reads as any
    `pbkdf2_sha256` hash (daphne's own hasher verifies it and sees nothing to upgrade)."""

    def salt(self) -> str:
        return worker_salt()

    def encode(self, password, salt, iterations=None):
        self._check_encode_args(password, salt)
        return pbkdf2(password, salt, iterations or self.iterations)
