"""The documents the control plane pushes besides configs: the policy bundle (with the pool's client keys), the
intent model, the warmup dataset.

Each is verified (hash or sha256) before it replaces the one in use and is kept on disk, so a restarted node
serves with what it had. A mixin of the Agent: it reads and sets the agent's stores and rebuilds its policy.
"""

import logging

from engine_node.client_keys import KeyTable, parse_entries
from engine_node.config import content_hash
from engine_node.policy.intent import IntentClassifier, IntentModelError
from engine_node.warmup import messages_sha256

log = logging.getLogger("engine_node.agent")


class PushedDocuments:
    """Policy bundle, intent model and warmup dataset handling of the Agent."""

    @property
    def intent_model_sha256(self) -> str:
        return self.classifier.meta.get("sha256", "") if self.classifier else ""

    def apply_policy(self, message: dict) -> None:
        """The pool's whitelists, conversation overrides and degradation state; refused unless the hash matches."""
        content = message.get("content")
        if not isinstance(content, dict) or content_hash(content) != message.get("hash"):
            log.error("policy bundle refused: content does not hash to %r", message.get("hash"))
            return
        self.bundle = {"hash": message["hash"], "content": content}
        self.policy_store.save_bundle(self.bundle)
        self._rebuild_keys()
        self._rebuild_policy()
        log.info("policy bundle %s applied", message["hash"][:12])

    def _rebuild_keys(self) -> None:
        """The gateway's key table: the bundle's `client_keys` (the pool's, revocable from the dashboard) and the
        operator's key file. A node with neither answers every /v1 request 401."""
        pushed = parse_entries((self.bundle or {}).get("content", {}).get("client_keys"), "bundle")
        self.gateway.set_client_keys(KeyTable([*pushed, *self.file_keys]))

    async def apply_intent_model(self, message: dict) -> None:
        """A published intent model (or None: back to the built-in one), refused unless its sha256 verifies."""
        document = message.get("document")
        try:
            if document is None:
                classifier = IntentClassifier.load()
                self.policy_store.forget_model()
            else:
                classifier = IntentClassifier.from_document(document, source=f"model {message.get('id')}")
                if classifier.meta.get("sha256") != message.get("sha256"):
                    raise IntentModelError(f"sha256 {classifier.meta.get('sha256')} is not {message.get('sha256')}")
                self.policy_store.save_model(document)
        except IntentModelError as exc:
            log.error("intent model refused: %s", exc)
            await self._send({"type": "intent_model_result", "sha256": message.get("sha256"), "error": str(exc)})
            return
        self.classifier = classifier
        self._rebuild_policy()
        log.info("intent model %s in use", self.intent_model_sha256[:12])
        await self._send({"type": "intent_model_result", "sha256": self.intent_model_sha256, "error": ""})

    def apply_warmup_dataset(self, message: dict) -> None:
        """The pool's warmup dataset (messages null: the pool has none), kept only when its sha256 verifies.

        The control plane answers every hello with one (`current: true` when ours is already the pool's), which
        tells a first start that waits for it whether there is anything to replay."""
        try:
            if message.get("current"):
                return
            messages = message.get("messages")
            if messages is None:
                if self.warmup_dataset is not None:
                    log.info("the pool has no warmup dataset any more")
                self.warmup_dataset = None
                self.warmup_store.forget()
                return
            if not isinstance(messages, list) or messages_sha256(messages) != message.get("sha256"):
                log.error("warmup dataset %s refused: its messages do not hash to it", message.get("version_id"))
                return
            document = {"version_id": message.get("version_id"), "sha256": message["sha256"], "messages": messages}
            self.warmup_store.save(document)
            self.warmup_dataset = document
            log.info("warmup dataset %s (%d messages) stored", message["sha256"][:12], len(messages))
        finally:
            self._warmup_synced.set()
