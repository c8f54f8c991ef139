"""What the node keeps on its disk to serve without the control plane: the last good config (and the one before it,
where a failed warmup rolls back to), the policy bundle, the pushed intent model and the warmup dataset, each written
atomically and read at start-up."""

import json
import logging
import os
import tempfile
from pathlib import Path

from engine_node.config import ConfigRejected, NodeConfig, content_hash
from engine_node.policy.intent import IntentClassifier, IntentModelError
from engine_node.warmup import messages_sha256

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
    """The last config the node applied and confirmed, and the good one before it."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "last_good_config.json"
        self.previous_path = Path(state_dir) / "previous_good_config.json"

    def load(self) -> NodeConfig | None:
        return self._load(self.path)

    def load_previous(self) -> NodeConfig | None:
        return self._load(self.previous_path)

    @staticmethod
    def _load(path: Path) -> NodeConfig | None:
        try:
            message = json.loads(path.read_text(encoding="utf-8"))
            return NodeConfig.from_message(message)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, ConfigRejected):
            # A corrupt or tampered file is ignored rather than trusted; the control plane re-sends.
            return None

    def save(self, config: NodeConfig, *, previous: NodeConfig | None = None) -> None:
        """Record `config` as the last good one; `previous` (the one it replaced) becomes the one before it."""
        if previous is not None and previous.hash != config.hash:
            write_atomically(self.previous_path, previous.as_message())
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


class WarmupStore:
    """The pool's warmup dataset version: `{version_id, sha256, messages}`, trusted only when the sha256 verifies."""

    def __init__(self, state_dir: Path):
        self.path = Path(state_dir) / "warmup_dataset.json"

    def load(self) -> dict | None:
        try:
            document = json.loads(self.path.read_text(encoding="utf-8"))
            if messages_sha256(document["messages"]) != document["sha256"]:
                raise ValueError("sha256 mismatch")
            return document
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the stored warmup dataset: %s", exc)
            return None

    def save(self, document: dict) -> None:
        write_atomically(
            self.path,
            {"version_id": document["version_id"], "sha256": document["sha256"], "messages": document["messages"]},
        )

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)
