"""The last good config on the node's disk, written atomically, read at start-up without the control plane."""

import json
import os
import tempfile
from pathlib import Path

from engine_node.config import ConfigRejected, NodeConfig


class LastGoodStore:
    """One JSON file; a crash mid-write leaves the previous file intact (write, fsync, rename)."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "last_good_config.json"

    def load(self) -> NodeConfig | None:
        try:
            message = json.loads(self.path.read_text(encoding="utf-8"))
            return NodeConfig.from_message(message)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, ConfigRejected):
            # A corrupt or tampered file is ignored rather than trusted; the control plane re-sends.
            return None

    def save(self, config: NodeConfig) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".last_good.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(config.as_message(), handle, ensure_ascii=False)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
