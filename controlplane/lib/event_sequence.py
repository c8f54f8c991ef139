"""Numbers on the events browsers must not miss, so a page can tell that it missed one.

The channel layer drops a group event for a member whose channel is full (channels_redis skips it silently) and a
socket that reconnects misses what was sent while it was away. The stored rows are never lost, but a page showing
"live" would go on showing the state before the lost event. So every event to a group whose events change what a
page shows (the fleet, a pool, the alerts) carries `seq: {"group": ..., "n": ...}`, one counter per group for the
whole control plane (Redis INCR, shared by every process; a counter in this process in the embedded mode, which is
one process), and `static/js/live.js` tells the person to reload when a number never arrives.

Progress events (replays, tuning, log analyses, intent models) and live metric samples are not numbered: each
carries the whole state and the newest wins; metric frames have their own receipts (controlplane/metrics/coalescing.py).
"""

import asyncio
import itertools
import logging
import threading
import weakref
from collections import defaultdict

import redis
import redis.asyncio
from django.conf import settings

from controlplane.lib.redis_keys import control_plane_key

log = logging.getLogger(__name__)

_local_counters: dict[str, itertools.count] = defaultdict(lambda: itertools.count(1))
_local_lock = threading.Lock()
_sync_client = None
# One client per event loop (daphne runs one; a closed loop's entry goes with the loop).
_async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _key(group: str) -> str:
    return control_plane_key(f"event-seq:{group}")


def _local_next(group: str) -> int:
    with _local_lock:
        return next(_local_counters[group])


def stamped(group: str, event: dict, n: int | None) -> dict:
    return event if n is None else {**event, "seq": {"group": group, "n": n}}


def next_number(group: str) -> int | None:
    """The group's next number, or None when the counter cannot be reached (the event still goes, unnumbered)."""
    if not settings.REDIS_URL:
        return _local_next(group)
    global _sync_client
    try:
        if _sync_client is None:
            _sync_client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        return int(_sync_client.incr(_key(group)))
    except redis.RedisError as exc:
        log.warning("event number for %s not taken: %s", group, exc)
        return None


async def next_number_async(group: str) -> int | None:
    """The same from an event loop, with a client of that loop."""
    if not settings.REDIS_URL:
        return _local_next(group)
    loop = asyncio.get_running_loop()
    try:
        client = _async_clients.get(loop)
        if client is None:
            client = _async_clients[loop] = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        return int(await client.incr(_key(group)))
    except redis.RedisError as exc:
        log.warning("event number for %s not taken: %s", group, exc)
        return None
