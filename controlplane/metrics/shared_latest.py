"""The nodes' latest samples, shared by every ASGI process through Redis.

Each process terminates some agents' connections and receives only their samples. So that a pool's and the fleet's
figures cover every node whichever process holds it, every flush of an ingestor writes its nodes' newest samples into
one Redis hash (field: node; value: pool, the agent's time, the figures, and when a process received it) and reads
the whole hash back in the same round trip: the aggregates are computed over that. Entries a process has not
refreshed for `max_age_s` (by the receiving process's wall clock: keep the control-plane hosts' clocks in sync, as
NTP does) leave the figures, as a lost node leaves them in one process; entries a minute old are deleted (never
sooner: a process must not delete an entry its owner is refreshing at that moment).

Every process computes the same pool and fleet rows for a second (upserted, so the last writer's complete view wins)
and sends live events for the pools it received samples of; a browser on any process gets them through the channel
layer. Without Redis (the embedded mode) there is one process and nothing to share.
"""

import json
import time

import redis.asyncio as redis

from controlplane.lib.redis_keys import control_plane_key

KEY_TTL_S = 60  # the hash outlives no process by more than a minute
DELETE_AFTER_S = 60.0  # an entry this old belongs to a node no process has heard from for a minute


def shared_key() -> str:
    """One hash per control plane."""
    return control_plane_key("metrics:latest")


class SharedLatest:
    """One per event loop (the ingestor's): a Redis connection of its own, since asyncio clients are loop-bound."""

    def __init__(self, url: str, *, key: str | None = None):
        self._redis = redis.Redis.from_url(url)
        self.key = key or shared_key()

    async def exchange(
        self, newest: dict[str, tuple[str, float, dict]], *, max_age_s: float, now: float | None = None
    ) -> dict[str, tuple[str, float, dict]]:
        """Publish this process's newest samples ({node: (pool, t, m)}) and return every process's fresh ones."""
        now = time.time() if now is None else now
        pipe = self._redis.pipeline(transaction=False)
        if newest:
            pipe.hset(
                self.key,
                mapping={node: json.dumps([pool, t, m, now]) for node, (pool, t, m) in newest.items()},
            )
            pipe.expire(self.key, KEY_TTL_S)
        pipe.hgetall(self.key)
        stored = (await pipe.execute())[-1]
        fresh: dict[str, tuple[str, float, dict]] = {}
        stale: list[bytes] = []
        for field, value in stored.items():
            try:
                pool, t, m, received_at = json.loads(value)
            except (ValueError, TypeError):
                stale.append(field)
                continue
            age = now - received_at
            if age <= max_age_s:
                fresh[field.decode()] = (pool, t, m)
            elif age > DELETE_AFTER_S:
                stale.append(field)
        if stale:
            await self._redis.hdel(self.key, *stale)
        return fresh

    async def clear(self) -> None:
        await self._redis.delete(self.key)

    async def close(self) -> None:
        await self._redis.aclose()
