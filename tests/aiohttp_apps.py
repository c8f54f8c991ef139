"""Small real HTTP servers for tests that stand in for something outside our code (an engine, an exporter, a control
plane endpoint): an aiohttp application served on a free port of 127.0.0.1."""

from aiohttp import web


async def start_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve `app` on 127.0.0.1; returns the runner (await `runner.cleanup()` when done) and its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
