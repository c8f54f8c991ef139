"""The agents' WebSocket: token authentication, hello and heartbeats, config push, ACK/NACK, commands, warmup."""

import asyncio
import logging

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from django.conf import settings
from django.db import InterfaceError, OperationalError

from controlplane.lib import loop_health, realtime, throttling
from controlplane.lib.consumers import EventConsumer
from controlplane.metrics.services.ingest import sample_ingestor
from controlplane.nodes.ack_batcher import Ack, ack_batcher, seen_batcher, warmup_batcher
from controlplane.nodes.services import agent_policy, agent_sessions, cleanup, speculation
from controlplane.reviews.samples import BatchInvalid
from controlplane.reviews.services import review_samples_ingest

log = logging.getLogger(__name__)

UNAUTHORIZED = 4401
HEARTBEAT_MISSED = 4408
# The standard "internal error" close: the agent reconnects, and its hello reconciles what could not be stored.
INTERNAL_ERROR = 1011
PROTOCOL_VERSION = 1

# This process's agent connections, as one loop of the health record (`controlplane/lib/loop_health.py`).
LOOP = "agent-consumer"
# A database call for an agent's message is tried again after these pauses (a database locked past its busy timeout,
# or restarting); every try also waits out the busy timeout itself.
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)
# Reports the agent does not send again by itself: when one cannot be stored even after the retries, the connection
# is closed so the agent reconnects and its hello carries its state again. Samples, heartbeats and progress reports
# are repeated anyway; one is given up.
RECONCILE_ON_FAILURE = frozenset({"hello", "ack", "nack", "command_progress", "cleanup_request", "speculation_request"})
loop_health.loop_register(LOOP, description="agents' messages over their WebSocket (hello, heartbeats, ACK/NACK, ...)")


class AgentConsumer(EventConsumer):
    """One connection per engine node; the consumer forwards, the agent_sessions services decide."""

    node_id: int | None = None
    node_name = "(not authenticated)"
    handling = False

    async def dispatch(self, message):
        """Every handler's failure is recorded with the node and event it concerns; the connection lives on."""
        try:
            await super().dispatch(message)
        except StopConsumer:
            raise
        except Exception as exc:
            kind = message.get("type")
            loop_health.loop_failed(LOOP, exc, context=f"node {self.node_name}: {kind}")
            if kind == "websocket.disconnect":
                raise StopConsumer() from exc
            if kind == "websocket.connect":
                await self.close(code=INTERNAL_ERROR)

    async def connect(self):
        # Failed token attempts are counted per client address (behind a proxy, run daphne with --proxy-headers);
        # once over the limit the address is refused unheard, valid token or not, until its window moves on.
        address = (self.scope.get("client") or ("unknown",))[0]
        if await database_sync_to_async(throttling.agent_auth_blocked)(address):
            log.warning("refusing %s: too many failed node-token attempts", address)
            await self.close(code=UNAUTHORIZED)
            return
        node = await self._db(agent_sessions.node_authenticate, token=_bearer(self.scope))
        if node is None:
            await database_sync_to_async(throttling.agent_auth_failed)(address)
            await self.close(code=UNAUTHORIZED)
            return
        self.node_id = node.pk
        self.node_name, self.pool_name = node.name, node.pool.name
        self.address = address  # by default the node's gateway must be here (controlplane/lib/gateway_addresses.py)
        # hash -> (version id, version ref) of configs pushed on this connection; the latest is desired.
        self.pushed: dict[str, tuple[int, dict]] = {}
        self.desired_hash = ""
        self.reported_status = None
        self.model_sha256 = ""
        self.warmup_sha256 = ""
        self.groups_joined = [realtime.agents_group(node.pool.name), realtime.node_group(node.pk)]
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json(
            {
                "type": "welcome",
                "protocol": PROTOCOL_VERSION,
                "node": node.name,
                "pool": node.pool.name,
                "heartbeat_s": settings.NODE_HEARTBEAT_S,
            }
        )
        self.heard = asyncio.Event()
        self.watchdog = asyncio.create_task(self._watch_heartbeats())

    async def disconnect(self, code):
        if self.node_id is None:
            return
        self.watchdog.cancel()
        for group in self.groups_joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        await self._db(agent_sessions.node_disconnected, node_id=self.node_id, session_id=self.channel_name)

    async def receive_json(self, content, **kwargs):
        kind = content.get("type") if isinstance(content, dict) else None
        self.heard.set()
        self.handling = True
        try:
            await self._handle(kind, content)
        except Exception as exc:
            loop_health.loop_failed(LOOP, exc, context=f"node {self.node_name}: {kind} message")
            if kind in RECONCILE_ON_FAILURE:
                await self.close(code=INTERNAL_ERROR)
        else:
            loop_health.loop_succeeded(LOOP)
        finally:
            self.handling = False

    async def _db(self, func, /, **kwargs):
        """Call a service in the database thread; a database error is recorded and tried again after a pause."""
        for delay in RETRY_DELAYS_S:
            try:
                return await database_sync_to_async(func)(**kwargs)
            except (OperationalError, InterfaceError) as exc:
                loop_health.loop_failed(
                    LOOP, exc, context=f"node {self.node_name}: {func.__name__} (trying again in {delay:g} s)"
                )
                await asyncio.sleep(delay)
        return await database_sync_to_async(func)(**kwargs)

    async def _handle(self, kind, content) -> None:
        if kind == "hello":
            self.reported_status = content.get("status")
            push = await self._db(
                agent_sessions.node_hello,
                node_id=self.node_id,
                session_id=self.channel_name,
                hello=content,
                address=self.address,
            )
            if push is not None:
                await self.config_push(push)
            await self._sync_policy(
                policy_hash=str(content.get("policy_hash", "")),
                model_sha256=str(content.get("intent_model_sha256", "")),
            )
            # Always answered: a node on its first start waits for this to know whether there is a dataset to replay.
            self.warmup_sha256 = str(content.get("warmup_sha256", ""))
            await self._send_warmup_dataset()
        elif kind == "sample":
            # Once a second per node: queued in memory, stored and broadcast in batches (never a DB call here).
            sample_ingestor().record(node=self.node_name, pool=self.pool_name, message=content)
        elif kind == "heartbeat" and content.get("status") == self.reported_status and "log_tail" not in content:
            seen_batcher().record(self.node_id)
        elif kind == "heartbeat":
            self.reported_status = content.get("status")
            await self._db(agent_sessions.node_heartbeat, node_id=self.node_id, heartbeat=content)
        elif kind == "ack" and content.get("hash") in self.pushed:
            content_hash = content["hash"]
            version_id, version = self.pushed[content_hash]
            await ack_batcher().record(
                Ack(
                    node_id=self.node_id,
                    node=self.node_name,
                    pool=self.pool_name,
                    content_hash=content_hash,
                    version_id=version_id,
                    version=version,
                    in_sync=content_hash == self.desired_hash,
                )
            )
        elif kind in {"ack", "nack"}:
            await self._db(
                agent_sessions.node_config_result,
                node_id=self.node_id,
                ok=kind == "ack",
                content_hash=str(content.get("hash", "")),
                version=content.get("version"),
                error=str(content.get("error", "")),
            )
        elif kind == "intent_model_result":
            if content.get("error"):
                log.error(
                    "node %s refused intent model %s: %s", self.node_name, content.get("sha256"), content["error"]
                )
            else:
                self.model_sha256 = str(content.get("sha256", ""))
        elif kind == "cleanup_request":
            # The node's own cleanup (fragmentation threshold or timer) needs its pool's lease; a grant arrives
            # as a cleanup command through node_command, a refusal is answered here.
            command, refusal = await self._db(
                cleanup.cleanup_lease_request,
                node_id=self.node_id,
                trigger=str(content.get("trigger", "")),
                fragmentation=content.get("fragmentation"),
            )
            if command is None:
                await self.send_json({"type": "cleanup_denied", "reason": refusal})
        elif kind == "speculation_request":
            # The node's speculative-decoding rule wants a drained restart (off or back on): one node of the pool
            # at a time, granted as a command through node_command, a refusal answered here.
            command, refusal = await self._db(
                speculation.speculation_lease_request,
                node_id=self.node_id,
                action=str(content.get("action", "")),
                reason=str(content.get("reason", "")),
                state=content.get("state"),
            )
            if command is None:
                await self.send_json({"type": "speculation_denied", "reason": refusal})
        elif kind == "warmup_progress":
            # Twice a second per warming node: stored in batches with the other nodes' reports.
            warmup_batcher().record(self.node_id, content)
        elif kind == "review_samples":
            # At most a few dozen masked messages per node every few seconds (engine_node/review_sampling.py); every
            # field is checked again here, a bad sample refused by name, the rest of its batch kept.
            try:
                result = await self._db(review_samples_ingest, node_id=self.node_id, samples=content.get("samples"))
            except BatchInvalid as exc:
                await self.send_json({"type": "error", "error": f"review_samples: {exc}"})
            else:
                if result is not None and result.errors:
                    await self.send_json({"type": "error", "error": "review_samples: " + "; ".join(result.errors)})
        elif kind == "command_progress":
            await self._db(
                agent_sessions.node_command_progress,
                node_id=self.node_id,
                command_id=int(content.get("id", 0)),
                state=str(content.get("state", "")),
                progress=str(content.get("progress", "")),
                result=str(content.get("result", "")),
            )
        else:
            await self.send_json({"type": "error", "error": f"unknown message type {kind!r}"})

    async def config_push(self, event):
        self.pushed[event["hash"]] = (event["version_id"], event["version"])
        self.desired_hash = event["hash"]
        await self.send(text_data=event["text"])

    async def policy_push(self, event):
        canary = event.get("canary")
        await self.send(text_data=canary["text"] if canary and self.node_name in canary["nodes"] else event["text"])

    async def intent_model_published(self, event):
        wanted = event["sha256"] or agent_policy.builtin_intent_model_sha256()
        if wanted != self.model_sha256:
            text = await self._db(agent_policy.intent_model_text, model_id=event["model_id"], sha256=event["sha256"])
            await self.send(text_data=text)

    async def warmup_assigned(self, event):
        """A new version assigned to the pool: the agent stores it and replays it at its next (re)start."""
        if event["sha256"] != self.warmup_sha256:
            await self._send_warmup_dataset()

    async def _send_warmup_dataset(self) -> None:
        text, self.warmup_sha256 = await self._db(
            agent_policy.warmup_dataset_text, pool_name=self.pool_name, agent_sha256=self.warmup_sha256
        )
        await self.send(text_data=text)

    async def _sync_policy(self, *, policy_hash: str, model_sha256: str) -> None:
        """After hello: send the bundle and the intent model unless the agent already has them."""
        self.model_sha256 = model_sha256
        text, current_hash, model_ref = await self._db(
            agent_policy.policy_text, pool_name=self.pool_name, node_name=self.node_name
        )
        if current_hash != policy_hash:
            await self.send(text_data=text)
        await self.intent_model_published(
            {"model_id": model_ref["id"] if model_ref else None, "sha256": model_ref["sha256"] if model_ref else None}
        )

    async def node_command(self, event):
        await self.send_json({"type": "command", "id": event["id"], "op": event["op"]})

    async def node_revoke(self, event):
        await self.close(code=UNAUTHORIZED)

    async def _watch_heartbeats(self):
        """Close a connection that went silent, so the node shows as lost instead of stale."""
        while True:
            self.heard.clear()
            try:
                await asyncio.wait_for(self.heard.wait(), timeout=settings.NODE_LOST_AFTER_S)
            except TimeoutError:
                if self.handling:
                    continue  # its messages wait behind one being stored (a database retry), not a silent agent
                log.warning("node %s missed its heartbeats; closing", self.node_name)
                await self.close(code=HEARTBEAT_MISSED)
                return


def _bearer(scope) -> str:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin1").partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return ""
