"""What the agent tells the control plane and its own /health about itself: hello, heartbeats, health. A mixin of
the Agent, which holds the engine, the gate, the applied config and the pushed documents these report."""

import platform
import socket
import time

from engine_node import __version__
from engine_node.engine import LOG_LINE_CHARS
from engine_node.policy.masking import mask

LOG_TAIL_PERIOD_S = 10.0
# Unsure messages for the review queue go in batches at most this often (the sampler bounds how many there are).
REVIEW_PERIOD_S = 5.0


class NodeReports:
    """The node's hello, heartbeat and health documents."""

    def hello(self) -> dict:
        self._sent_model_name = self.engine.model_name
        return {
            "type": "hello",
            "node": self.settings.node_name,
            "hostname": socket.gethostname(),
            "gateway_url": self.gateway_url,
            # The `model` clients must send: the engine's served model name (a cold config can change it).
            "served_model_name": self._sent_model_name,
            "speculation": self.speculation_state(),
            "backend": self.settings.backend,
            "engine_version": self.engine.version,
            "agent_version": __version__,
            "platform": platform.platform(),
            "gpus": self.gpus,
            "status": self.status,
            "applied_version": self.config.version if self.config else None,
            "applied_hash": self.config.hash if self.config else "",
            "policy_hash": self.bundle["hash"] if self.bundle else "",
            "intent_model_sha256": self.intent_model_sha256,
            "warmup_sha256": self.warmup_dataset["sha256"] if self.warmup_dataset else "",
            "warmup": self.warmup.progress,
        }

    def heartbeat(self) -> dict:
        message = {
            "type": "heartbeat",
            "status": self.status,
            "in_flight": self.admission.in_flight,
            "speculation": self.speculation_state(),
        }
        if self.engine.model_name != self._sent_model_name:
            message["served_model_name"] = self._sent_model_name = self.engine.model_name
        tail = list(self.engine.log_tail)[-20:]
        # The log moves with every request; shipping it at most every 10 s keeps heartbeats small.
        now = time.monotonic()
        if tail != self._sent_log_tail and now - self._log_sent_at >= LOG_TAIL_PERIOD_S:
            message["log_tail"] = [mask(line, limit=LOG_LINE_CHARS) for line in tail]
            self._sent_log_tail = tail
            self._log_sent_at = now
        return message

    def review_samples(self) -> dict | None:
        """The next batch of masked review samples, when there are some and the last batch went REVIEW_PERIOD_S ago.
        Taken from the buffer only when it is about to be sent (the caller holds a connected link)."""
        now = time.monotonic()
        if not len(self.gateway.review) or now - self._review_sent_at < REVIEW_PERIOD_S:
            return None
        self._review_sent_at = now
        return {"type": "review_samples", "samples": self.gateway.review.batch()}

    def health(self) -> dict:
        return {
            "status": self.status,
            "node": self.settings.node_name,
            "backend": self.settings.backend,
            "served_model_name": self.engine.model_name,
            "applied": self.config.label if self.config else None,
            "in_flight": self.admission.in_flight,
            "engine_pid": self.engine.pid,
            "engine_version": self.engine.version,
            "sample": self.telemetry.last,
            "memory": self.memory_cleanup.last_reading,
            # Each of the engine's GPUs with its own figures (engine_node/telemetry/gpu_devices.py).
            "gpus": self.telemetry.gpu.devices() if self.telemetry.gpu is not None else [],
            "last_cleanup": self.memory_cleanup.last_result,
            "warmup": self.warmup.progress,
            "speculation": self.speculation_state(),
        }
