"""`python -m engine_node`: run the agent until interrupted."""

import asyncio
import contextlib
import logging
import sys

from engine_node.agent import Agent
from engine_node.engine import EngineStartFailed
from engine_node.settings import from_args


def main(argv: list[str] | None = None) -> int:
    settings = from_args(argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {settings.node_name} %(name)s %(message)s")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(Agent(settings).run())
    except EngineStartFailed as exc:
        logging.getLogger("engine_node").error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
