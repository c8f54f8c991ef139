"""What the node keeps on its disk to serve without the control plane: the last good config, the policy bundle and
the pushed intent model, each written atomically and read at start-up."""

import json
import logging
import os
import tempfile
from pathlib import Path

from engine_node.config import ConfigRejected, NodeConfig, content_hash
from engine_node.policy.intent import IntentClassifier, IntentModelError

log = logging.getLogger("engine_node.state")


def write_atomically(path: Path, document: dict) -> None:
    """Write, fsync, rename, fsync the directory: a crash mid-write leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, ensure_ascii=False)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class LastGoodStore:
    """The last config the node applied and confirmed."""

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
        write_atomically(self.path, config.as_message())


class PolicyStore:
    """The pool's policy bundle (`{hash, content}`) and the pushed intent model document, if any."""

    def __init__(self, state_dir: Path):
        self.bundle_path = Path(state_dir) / "policy_bundle.json"
        self.model_path = Path(state_dir) / "intent_model.json"

    def load_bundle(self) -> dict | None:
        try:
            message = json.loads(self.bundle_path.read_text(encoding="utf-8"))
            if content_hash(message["content"]) != message["hash"]:
                raise ValueError("hash mismatch")
            return message
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the stored policy bundle: %s", exc)
            return None

    def save_bundle(self, message: dict) -> None:
        write_atomically(self.bundle_path, {"hash": message["hash"], "content": message["content"]})

    def load_model(self) -> IntentClassifier | None:
        if not self.model_path.exists():
            return None
        try:
            return IntentClassifier.load(self.model_path)
        except IntentModelError as exc:
            log.warning("ignoring the stored intent model: %s", exc)
            return None

    def save_model(self, document: dict) -> None:
        write_atomically(self.model_path, document)

    def forget_model(self) -> None:
        self.model_path.unlink(missing_ok=True)
