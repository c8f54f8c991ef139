"""Numbers on the events browsers must not miss, so a page can tell that it missed one.

The channel layer drops a group event for a member whose channel is full (channels_redis skips it silently) and a
socket that reconnects misses what was sent while it was away. The stored rows are never lost, but a page showing
"live" would go on showing the state before the lost event. So every event to a group whose events change what a
page shows (the fleet, a pool, the alerts) carries `seq: {"group": ..., "n": ...}`, one counter per group for the
whole control plane (Redis INCR, shared by every process; a counter in this process in the embedded mode, which is
one process), and `static/js/live.js` tells the person to reload when a number never arrives.

Two more readings close the gaps a page cannot see from the events alone: the page carries each group's number as
it was read *before* the page's state (`current_numbers`: whatever comes later is an event the page must receive),
and a browser consumer, once subscribed, sends the number taken so far (`sequence.taken`): every number up to it
that has not arrived within the grace period was sent between the render and the subscription, or while a
reconnecting socket was away, and is counted as missed even when no later event ever comes.

Progress events (replays, tuning, log analyses, intent models) and live metric samples are not numbered: each
carries the whole state and the newest wins; metric frames have their own receipts (controlplane/metrics/coalescing.py).
"""

import asyncio
import logging
import threading
import weakref
from collections import defaultdict

import redis
import redis.asyncio
from django.conf import settings

from controlplane.lib.redis_keys import control_plane_key

log = logging.getLogger(__name__)

_local_counters: dict[str, int] = defaultdict(int)  # the last number taken per group
_local_lock = threading.Lock()
_sync_client = None
# One client per event loop (daphne runs one; a closed loop's entry goes with the loop).
_async_clients: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _key(group: str) -> str:
    return control_plane_key(f"event-seq:{group}")


def _local_next(group: str) -> int:
    with _local_lock:
        _local_counters[group] += 1
        return _local_counters[group]


def stamped(group: str, event: dict, n: int | None) -> dict:
    return event if n is None else {**event, "seq": {"group": group, "n": n}}


def next_number(group: str) -> int | None:
    """The group's next number, or None when the counter cannot be reached (the event still goes, unnumbered)."""
    if not settings.REDIS_URL:
        return _local_next(group)
    try:
        return int(_sync_client_get().incr(_key(group)))
    except redis.RedisError as exc:
        log.warning("event number for %s not taken: %s", group, exc)
        return None


def current_numbers(groups: list[str]) -> dict[str, int]:
    """The last number taken in each group (0: none yet); a group whose counter cannot be read is left out."""
    if not settings.REDIS_URL:
        with _local_lock:
            return {group: _local_counters[group] for group in groups}
    try:
        values = _sync_client_get().mget([_key(group) for group in groups])
    except redis.RedisError as exc:
        log.warning("event numbers of %s not read: %s", groups, exc)
        return {}
    return {group: int(value or 0) for group, value in zip(groups, values, strict=True)}


async def current_number_async(group: str) -> int | None:
    """The last number taken in the group (0: none yet), from an event loop; None when it cannot be read."""
    if not settings.REDIS_URL:
        with _local_lock:
            return _local_counters[group]
    try:
        value = await _async_client().get(_key(group))
    except redis.RedisError as exc:
        log.warning("event number of %s not read: %s", group, exc)
        return None
    return int(value or 0)


def _sync_client_get():
    global _sync_client
    if _sync_client is None:
        _sync_client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    return _sync_client


def _async_client():
    loop = asyncio.get_running_loop()
    client = _async_clients.get(loop)
    if client is None:
        client = _async_clients[loop] = redis.asyncio.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    return client


async def next_number_async(group: str) -> int | None:
    """The same from an event loop, with a client of that loop."""
    if not settings.REDIS_URL:
        return _local_next(group)
    try:
        return int(await _async_client().incr(_key(group)))
    except redis.RedisError as exc:
        log.warning("event number for %s not taken: %s", group, exc)
        return None
