"""`python -m engine_node`: run the agent until interrupted, on uvloop where it is installed."""

import asyncio
import contextlib
import logging
import signal
import sys

try:
    # libuv's event loop: the gateway's sockets, timers and callbacks at a fraction of the default loop's CPU
    # (docs/benchmarks.md, *gateway*). Optional: the standard loop serves where it is not installed.
    from uvloop import new_event_loop as loop_factory
except ImportError:
    loop_factory = None

from engine_node.agent import Agent
from engine_node.client_keys import KeyEntryInvalid, load_key_file
from engine_node.engine import EngineStartFailed
from engine_node.settings import from_args, parser


def main(argv: list[str] | None = None) -> int:
    settings = from_args(argv)
    if settings.client_keys_file:
        # The key file is read before anything starts: a broken one is a usage error, as a bad flag is.
        try:
            load_key_file(settings.client_keys_file)
        except KeyEntryInvalid as exc:
            parser().error(f"--client-keys-file: {exc}")
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {settings.node_name} %(name)s %(message)s")
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_serve(Agent(settings)))
    except EngineStartFailed as exc:
        logging.getLogger("engine_node").error("%s", exc)
        return 1
    return 0


async def _serve(agent: Agent) -> None:
    """Run until SIGTERM or SIGINT, then stop the engine too: it runs in its own session and would outlive us.

    Only the first signal cancels; a second one (supervisors often send two) must not interrupt the
    engine's shut-down half way.
    """
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    running = asyncio.create_task(agent.run())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if running.done():
        stopping.cancel()
        running.result()
        return
    # Shutting down from here on: later signals are ignored (SIGKILL still ends a hung shut-down).
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_IGN)
    running.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running


if __name__ == "__main__":
    sys.exit(main())
