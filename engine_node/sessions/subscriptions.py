"""What a client reads from a session: a live relay's chunks as they are published, or a stored session's replay."""

from __future__ import annotations

from engine_node.sessions.framing import DONE
from engine_node.sessions.stores import INTERRUPTED, TERMINAL


class Subscription:
    """One client's view of a live session: chunks after `after_seq`, then live ones, then the end.

    Use as `async with relay.subscribe(n) as stream: async for data in stream: ...`; leaving the block (or
    close()) detaches the client, and when the last client is gone the grace period starts.
    """

    def __init__(self, relay, after_seq: int):
        """`relay`: the SessionRelay whose published entries, state and change event this subscription reads."""
        self._relay = relay
        self.headers = relay.headers
        # A reconnect after an interruption gets the interrupted event, not the abandoned text.
        self._pos = len(relay._entries) if relay.state == INTERRUPTED else after_seq
        self._event_sent = False
        self._done = False
        self._attached = relay.state not in TERMINAL
        if self._attached:
            relay._attach()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> bytes:
        while not self._done:
            data = self._next_now()
            if data is not None:
                return data
            await self._relay._changed.wait()
        raise StopAsyncIteration

    def take_ready(self) -> bytes:
        """Everything the client is due that is already here, as one block (b"" when nothing is): the writer sends
        it with the item it just got, in one socket write, and waits for nothing more."""
        ready = []
        while not self._done and (data := self._next_now()) is not None:
            ready.append(data)
        return b"".join(ready)

    def _next_now(self) -> bytes | None:
        relay = self._relay
        if self._pos < len(relay._entries):
            self._pos += 1
            return relay._entries[self._pos - 1]
        if relay.state == INTERRUPTED and not self._event_sent:
            self._event_sent = True
            return relay.interrupted_event()
        if relay.state in TERMINAL:
            self._done = True
            self.close()
            return DONE
        return None

    def close(self) -> None:
        if self._attached:
            self._attached = False
            self._relay._detach()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()


class Replay:
    """SSE bytes of a session no longer generating here, read from the store."""

    def __init__(self, items: list[bytes], headers: dict[str, str]):
        self._items = iter(items)
        self.headers = headers

    def __aiter__(self) -> Replay:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._items)
        except StopIteration:
            raise StopAsyncIteration from None

    def take_ready(self) -> bytes:
        """The rest of the replay in one block."""
        return b"".join(self._items)

    def close(self) -> None:
        self._items = iter(())

    async def __aenter__(self) -> Replay:
        return self

    async def __aexit__(self, *exc_info) -> None:
        self.close()
