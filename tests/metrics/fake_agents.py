"""Agent sockets that send a contract-A sample every second, from a thread of their own (the browser tests' event
loop belongs to Playwright). They speak the agent protocol as far as samples go: token, welcome, samples."""

import asyncio
import contextlib
import threading
import time

import aiohttp

from tests.metrics.conftest import sample


class FakeAgents:
    """`start()` connects every node and sends a sample a second each until `stop()`; `start()` again resumes."""

    def __init__(self, ws_url: str, tokens: dict[str, str], figures=None):
        self.ws_url = ws_url
        self.tokens = tokens
        # figures(node, i) -> overrides of the i-th sample's figures
        self.figures = figures or (lambda node, i: {"qps": 1.0 + (i % 5) / 10, "latency_p99_s": 0.9 + (i % 7) / 20})
        self.sent = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()

    def start(self, timeout_s: float = 15) -> None:
        self._stop.clear()
        self._ready.clear()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        assert self._ready.wait(timeout_s), "the fake agents did not connect"

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    async def _run(self) -> None:
        async with aiohttp.ClientSession() as session:
            sockets = {}
            for node, token in self.tokens.items():
                ws = await session.ws_connect(self.ws_url, headers={"Authorization": f"Bearer {token}"})
                assert (await ws.receive_json())["type"] == "welcome"
                sockets[node] = ws
            self._ready.set()
            i = 0
            while not self._stop.is_set():
                for node, ws in sockets.items():
                    await ws.send_json(sample(t=time.time(), **self.figures(node, i)))
                    self.sent += 1
                i += 1
                await asyncio.sleep(1)
            for ws in sockets.values():
                with contextlib.suppress(Exception):
                    await ws.close()
