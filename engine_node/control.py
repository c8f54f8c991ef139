"""The one WebSocket to the control plane: hello, heartbeats, pushed configs and commands, reconnects.

Reconnects back off exponentially (x1.5 per attempt from 0.5 s, capped at 30 s) with "equal jitter"
(uniform in [w/2, w]): after a short control-plane restart (< 5 s down) agents are back within ~4 s,
after a long one their reconnects spread over up to 30 s instead of arriving as one stampede. The
delay starts again from 0.5 s once a connection has held; a revoked token (close code 4401) keeps
retrying at the cap until an admin issues a new one.

With several URLs (processes of one control plane, each reachable on its own) the link starts on one picked by a
hash of the node's name, so a fleet spreads over them and a node comes back to the same process, and moves to the
next one whenever a connection fails or drops: a process that died is left within the first delay (0.25-0.5 s)
and the node says hello to a survivor, which reconciles it. The back-off grows only once every URL has failed in
turn.
"""

import asyncio
import json
import logging
import random
import zlib
from collections.abc import Awaitable, Callable

import aiohttp

from engine_node import metrics

log = logging.getLogger("engine_node.control")

BACKOFF_BASE_S = 0.5
BACKOFF_FACTOR = 1.5
BACKOFF_CAP_S = 30.0
UNAUTHORIZED = 4401
# A close handshake the other side never answers gives up after this long.
WS_TIMEOUT = aiohttp.ClientWSTimeout(ws_close=10)


def backoff_delay(attempt: int, rng: random.Random) -> float:
    """Equal jitter over the window min(cap, base * factor**attempt)."""
    window = min(BACKOFF_CAP_S, BACKOFF_BASE_S * BACKOFF_FACTOR**attempt)
    return rng.uniform(window / 2, window)


def first_url_index(node_name: str, count: int) -> int:
    """Which of `count` control-plane URLs a node tries first: stable per node, spread over a fleet."""
    return zlib.crc32(node_name.encode()) % count


class ControlLink:
    """Keeps the connection up and hands each message to the agent; `send` is safe from any task."""

    def __init__(
        self,
        *,
        urls: list[str],
        token: str,
        hello: Callable[[], dict],
        heartbeat: Callable[[], dict],
        on_message: Callable[[dict], Awaitable[None]],
        node_name: str = "",
    ):
        if not urls:
            raise ValueError("urls: at least one control-plane URL")
        self.urls = list(urls)
        self.token = token
        self._hello = hello
        self._heartbeat = heartbeat
        self._on_message = on_message
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._rng = random.Random()
        self._index = first_url_index(node_name, len(self.urls))
        self._handlers: set[asyncio.Task] = set()
        self.connected = asyncio.Event()

    async def run(self) -> None:
        """Connect, reconnect and hand over messages until cancelled; then cancel the handlers still running (a
        config being applied, a warmup) so that the agent's shut-down does not race them."""
        try:
            await self._run()
        finally:
            for task in list(self._handlers):
                task.cancel()
            if self._handlers:
                await asyncio.gather(*self._handlers, return_exceptions=True)

    @property
    def url(self) -> str:
        """The URL the link is on (connected) or tries next."""
        return self.urls[self._index]

    async def _run(self) -> None:
        attempt = 0  # rounds in which every URL failed
        failed = 0  # URLs that failed in the current round
        async with aiohttp.ClientSession() as session:
            while True:
                url, code, held = self.url, None, False
                try:
                    code, held = await self._session(session, url)
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    log.warning("control plane at %s unreachable: %s", url, exc)
                self._ws = None
                self.connected.clear()
                metrics.CONNECTED.set(0)
                if held:
                    attempt, failed = 0, 0
                else:
                    failed += 1
                # The next URL first: the process that failed or dropped this node may be gone.
                self._index = (self._index + 1) % len(self.urls)
                if code == UNAUTHORIZED:
                    log.error("control plane refused this node's token; ask an admin for a new one")
                    attempt = 100
                elif failed >= len(self.urls):
                    attempt, failed = attempt + 1, 0
                await asyncio.sleep(backoff_delay(attempt, self._rng))

    async def _session(self, session: aiohttp.ClientSession, url: str) -> tuple[int | None, bool]:
        headers = {"Authorization": f"Bearer {self.token}"}
        async with session.ws_connect(url, headers=headers, heartbeat=20, timeout=WS_TIMEOUT) as ws:
            welcome = await ws.receive(timeout=10)
            if welcome.type != aiohttp.WSMsgType.TEXT:
                return ws.close_code, False
            interval = float(json.loads(welcome.data).get("heartbeat_s", 2))
            self._ws = ws
            await self.send(self._hello())
            self.connected.set()
            metrics.CONNECTED.set(1)
            log.info("connected to the control plane at %s", url)
            beats = asyncio.create_task(self._beat(interval))
            try:
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.TEXT:
                        task = asyncio.create_task(self._handle(json.loads(message.data)))
                        self._handlers.add(task)
                        task.add_done_callback(self._handlers.discard)
                    elif message.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSED):
                        break
            finally:
                beats.cancel()
            return ws.close_code, True

    async def _handle(self, message: dict) -> None:
        try:
            await self._on_message(message)
        except Exception:
            log.exception("handling %s failed", message.get("type"))

    async def _beat(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.send(self._heartbeat())

    async def send(self, message: dict) -> None:
        ws = self._ws
        if ws is None or ws.closed:
            return
        try:
            await ws.send_json(message)
        except (ConnectionResetError, aiohttp.ClientError) as exc:
            log.warning("send failed (%s); the reconnect will reconcile", exc)
