"""Entry point of `python -m engine_node.simulator`."""

import sys

from engine_node.simulator.cli import main

sys.exit(main())
