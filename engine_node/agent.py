"""The agent: starts the engine on the last good config, serves the gateway, applies pushed configs.

A config whose engine flags equal the running ones is hot: the gateway swaps its parameters and no
request notices. Otherwise it is cold: drain, restart the engine with the new flags, confirm it serves,
warm it up, resume. A config that cannot be applied is NACKed and the node goes back to (and keeps serving) the
last good one; so is one whose warmup fails (engine_node/warmup.py): the node restarts on the config it ran
before, warms that one up and serves.

The gate opens to user traffic only after a warmup: on start (status "warming" until the pool's warmup dataset
has been replayed, or skipped when the pool has none), after every cold restart and on an operator's command. While
warming, requests get 503 "warming up" at once with a short Retry-After; while a cold restart drains and restarts
the engine they wait in the queue (bounded by the queue timeout), as a hot change never makes them wait at all.
"""

import asyncio
import logging

from aiohttp import web

from engine_node import metrics
from engine_node.admission import Admission
from engine_node.agent_documents import PushedDocuments
from engine_node.agent_operations import NodeOperations
from engine_node.agent_reports import NodeReports
from engine_node.agent_speculation import SpeculationControl
from engine_node.cleanup import MemoryCleanup
from engine_node.client_keys import load_key_file
from engine_node.config import ConfigRejected, NodeConfig, engine_args
from engine_node.config_checks import check_config
from engine_node.control import ControlLink
from engine_node.engine import EngineProcess, EngineStartFailed
from engine_node.gateway import Gateway
from engine_node.gpus import gpu_inventory
from engine_node.model_sources import ModelAllowList
from engine_node.policy.intent import IntentClassifier
from engine_node.policy.patterns import PatternRejected
from engine_node.policy.rules import DEFAULT_STRICT_PATTERNS, Policy
from engine_node.sessions import MemorySessionStore, RedisSessionStore, StreamSessions
from engine_node.settings import AgentSettings, gateway_url
from engine_node.speculation import SpeculationGuard
from engine_node.state import LastGoodStore, PolicyStore, WarmupStore
from engine_node.telemetry import BatchLog, EngineScraper, GpuUtilisation, RequestLog, SmActivity, Telemetry
from engine_node.telemetry.gpu_devices import engine_devices
from engine_node.warmup import WarmupRunner

log = logging.getLogger("engine_node.agent")

SAMPLE_PERIOD_S = 1.0
# On SIGTERM the gateway stops accepting and gives the requests it holds this long to finish (a reply at the report's
# P99 of 1.4 s does), then cancels them and waits as long again at most (aiohttp's shut-down), then stops the engine:
# under 10 s in all (aiohttp's default would allow 60 s twice). A planned stop of a busy node drains first (the drain
# command); this only bounds an abrupt one.
SHUTDOWN_GRACE_S = 3.0


class Agent(PushedDocuments, NodeOperations, SpeculationControl, NodeReports):
    """One engine node: the engine, its gateway and the link to the control plane."""

    def __init__(self, settings: AgentSettings):
        self.settings = settings
        self.status = "starting"
        # The gateway's port: the flag's, or the one the OS picked for --port 0 once it listens.
        self.port = settings.port
        self._background: set[asyncio.Task] = set()
        self.store = LastGoodStore(settings.state_dir)
        self.policy_store = PolicyStore(settings.state_dir)
        self.warmup_store = WarmupStore(settings.state_dir)
        self.warmup_dataset: dict | None = self.warmup_store.load()
        self.warmup = WarmupRunner(engine_url=lambda: self.engine.base_url)
        self._warmup_synced = asyncio.Event()
        self.config: NodeConfig | None = None
        self.allow_list = ModelAllowList(
            model_dirs=settings.model_dirs,
            allowed=settings.allowed_models,
            own_model=settings.model,
            allow_trust_remote_code=settings.allow_trust_remote_code,
        )
        self.bundle: dict | None = None
        self.classifier: IntentClassifier | None = None
        # The operator's stand-alone keys (--client-keys-file), accepted besides the pool's (docs/gateway-access.md).
        self.file_keys = load_key_file(settings.client_keys_file) if settings.client_keys_file else []
        self.engine = EngineProcess(settings, on_state=self._engine_state)
        self.admission = Admission(settings.queue_timeout_s)
        self.requests = RequestLog(window_s=settings.sample_window_s)
        self.gateway = Gateway(
            requests=self.requests,
            engine_url=lambda: self.engine.base_url,
            admission=self.admission,
            status=self.health,
            node_name=settings.node_name,
            sessions=StreamSessions(
                RedisSessionStore(settings.session_redis_url, node=settings.node_name)
                if settings.session_redis_url
                else MemorySessionStore(),
                grace_s=settings.session_grace_s,
                ttl_s=settings.session_ttl_s,
            ),
        )
        self.link: ControlLink | None = None
        self.gpus = gpu_inventory()
        # Engine restarts since the agent started: planned ones (config, operator, recovery) here, crash restarts
        # in the engine's own count.
        self.restarts = 0
        batches = BatchLog(window_s=settings.sample_window_s)
        self.admission.on_batch = batches.observe
        self.admission.on_batch_timeouts = batches.observe_timeouts
        self.telemetry = Telemetry(
            requests=self.requests,
            batches=batches,
            admission=self.admission,
            scraper=EngineScraper(lambda: self.engine.base_url, window_s=settings.sample_window_s),
            # The figures of the GPUs the engine uses (its workers say which), never the host's mean.
            gpu=GpuUtilisation(devices=lambda: engine_devices(self.gpus, self.memory_cleanup.last_workers))
            if self.gpus
            else None,
            sm=SmActivity(settings.dcgm_exporter_url, has_gpu=bool(self.gpus)),
            # The simulator exports its fragmentation on /metrics; on vLLM it is the worker extension's reading.
            fragmentation=(lambda: self.memory_cleanup.fragmentation_figure()) if settings.backend == "vllm" else None,
            degraded=lambda: self.gateway.policy.degraded,
            engine_restarts=lambda: self.restarts + self.engine.crash_restarts,
            window_s=settings.sample_window_s,
        )
        self._logged_errors: set[str] = set()
        self._runner: web.AppRunner | None = None
        self._apply_lock = asyncio.Lock()
        self._sent_log_tail: list[str] = []
        self._sent_model_name = ""
        self._log_sent_at = float("-inf")
        self._review_sent_at = float("-inf")
        # Set by an operator's drain: restarts and recoveries must not reopen the gate behind their back.
        self._held = False
        # The speculative-decoding rule: off after sustained rejection, back on by a probe (engine_node/speculation.py).
        self.speculation = SpeculationGuard()
        self._speculation_reason = ""
        self.memory_cleanup = MemoryCleanup(
            engine_url=lambda: self.engine.base_url,
            backend=settings.backend,
            admission=self.admission,
            drain_timeout_s=settings.drain_timeout_s,
        )
        metrics.IN_FLIGHT.set_function(lambda: self.admission.in_flight)
        metrics.DEGRADED.set_function(lambda: 1 if self.gateway.policy.degraded else 0)

    async def run(self) -> None:
        """Serve until cancelled: engine first (last good config), then the gateway, then the control plane."""
        try:
            await self.start()
            if self.link is not None:
                await self.link.run()
            else:
                await asyncio.Event().wait()
        finally:
            await self.close()

    async def start(self) -> None:
        self.config = self.store.load()
        if self.config is not None:
            try:
                await self.vet(self.config)
            except ConfigRejected as exc:
                # The operator narrowed what this node may run since it was applied: start on the node's own model.
                log.error("the last good config %s is refused now (%s); starting without it", self.config.label, exc)
                self.config = None
        if self.config is not None:
            log.info("starting on the last good config %s", self.config.label)
        self.bundle = self.policy_store.load_bundle()
        self._rebuild_keys()
        self.classifier = self.policy_store.load_model() or IntentClassifier.load()
        self._rebuild_policy()
        await self.engine.start(self._engine_args(self.config))
        # Shut until the start-up warmup has passed (or was skipped); requests meanwhile get a quick 503.
        await self.admission.drain(0)
        self.admission.refuse_while_closed(self._warming_refusal)
        self._set_status("warming")
        self._runner = web.AppRunner(self.gateway.app(), access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        log.info("gateway on http://%s:%s, engine on %s", self.settings.host, self.port, self.engine.base_url)
        if self.telemetry.gpu is not None:
            self.telemetry.gpu.start()
            metrics.watch_gpu(self.telemetry.gpu.value)
        self.telemetry.sm.start()
        self._spawn(self._sample_forever())
        self._spawn(self._cleanup_watch())
        self._spawn(self._startup_warmup())
        if self.settings.control_plane_url:
            self.link = ControlLink(
                urls=self.settings.control_plane_urls,
                node_name=self.settings.node_name,
                token=self.settings.token,
                hello=self.hello,
                heartbeat=self.heartbeat,
                on_message=self.on_message,
            )

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        await self.telemetry.close()
        await self.memory_cleanup.close()
        await self.warmup.close()
        await self.engine.close()

    async def _sample_forever(self) -> None:
        """Build one metric sample a second; send it only while connected (a missed one is never queued)."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        await self.telemetry.scraper.scrape()  # the baseline of the first sample's counter deltas
        while True:
            due += SAMPLE_PERIOD_S
            now = loop.time()
            if due < now:  # a slow scrape or send: skip the missed seconds instead of bursting
                due = now + SAMPLE_PERIOD_S
            await asyncio.sleep(due - now)
            try:
                sample = await self.telemetry.collect()
                link = self.link
                if link is not None and link.connected.is_set():
                    await link.send(sample)
                    review = self.review_samples()
                    if review is not None:
                        await link.send(review)
                await self._speculation_check()
            except Exception:
                log.exception("the metric sample failed; next one in a second")

    def _spawn(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def gateway_url(self) -> str:
        """Where clients send their OpenAI requests (plus /v1), as shown on the node's page."""
        return gateway_url(self.settings, self.port)

    async def on_message(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "config":
            await self.apply(message)
        elif kind == "policy":
            self.apply_policy(message)
        elif kind == "intent_model":
            await self.apply_intent_model(message)
        elif kind == "warmup_dataset":
            self.apply_warmup_dataset(message)
        elif kind == "command":
            await self.command(int(message.get("id", 0)), str(message.get("op", "")))
        elif kind == "cleanup_denied":
            self.memory_cleanup.denied(str(message.get("reason", ""))[:200])
        elif kind == "speculation_denied":
            log.info("speculative decoding lease refused: %s", str(message.get("reason", ""))[:200])
        elif kind == "error":
            # The control plane could not use something we sent (e.g. a control plane that does not know
            # "sample" yet answers every one with an error): say so once per distinct error, then quietly.
            error = str(message.get("error", ""))[:200]
            if error not in self._logged_errors and len(self._logged_errors) < 100:
                self._logged_errors.add(error)
                log.warning("control plane replied with an error: %s", error)
            else:
                log.debug("control plane replied with an error: %s", error)

    async def apply(self, message: dict) -> None:
        """Apply a pushed config and answer ACK, or NACK with the reason while serving the last good one."""
        async with self._apply_lock:
            try:
                config = NodeConfig.from_message(message)
            except ConfigRejected as exc:
                metrics.CONFIG_APPLIES.labels(result="nack", kind="invalid").inc()
                await self._reply("nack", message.get("hash", ""), message.get("version"), str(exc))
                return
            if self.config is not None and config.hash == self.config.hash:
                await self._reply("ack", config.hash, config.version)
                return
            try:
                # Pricing new strict patterns (engine_node/policy/pattern_cost.py) takes seconds on a hostile config:
                # in a worker thread, so the gateway keeps answering meanwhile.
                await asyncio.to_thread(Policy, config.content)
            except PatternRejected as exc:  # names the pattern: temperature.strict_patterns[2]: ...
                metrics.CONFIG_APPLIES.labels(result="nack", kind="invalid").inc()
                await self._reply("nack", config.hash, config.version, str(exc))
                return
            except (KeyError, TypeError, ValueError) as exc:
                metrics.CONFIG_APPLIES.labels(result="nack", kind="invalid").inc()
                await self._reply("nack", config.hash, config.version, f"parameters: not a request policy: {exc!r}")
                return
            try:
                await self.vet(config)
            except ConfigRejected as exc:
                metrics.CONFIG_APPLIES.labels(result="nack", kind="refused").inc()
                log.error("config %s refused: %s", config.label, exc)
                await self._reply("nack", config.hash, config.version, str(exc))
                return
            if self._speculative_flag(config) != self._speculative_flag(self.config):
                # New speculative settings (not just the rule's hot fields): the rule starts afresh, with speculation
                # as the config says.
                self.speculation = SpeculationGuard()
            new_args = self._engine_args(config)
            kind = "cold" if new_args != self.engine.args else "hot"
            previous = self.config
            try:
                if kind == "cold":
                    await self._restart_engine(new_args, reason=f"config {config.label}")
                self.config = config
                self._rebuild_policy()
            except EngineStartFailed as exc:
                metrics.CONFIG_APPLIES.labels(result="nack", kind=kind).inc()
                await self._reply("nack", config.hash, config.version, str(exc))
                await self._recover()
                return
            if kind == "cold":
                result = await self._warm(trigger="config")
                if result["state"] == "failed":
                    metrics.CONFIG_APPLIES.labels(result="nack", kind="warmup").inc()
                    await self._roll_back(previous, failed=config, reason=result["reason"])
                    await self._reply("nack", config.hash, config.version, result["reason"])
                    return
                self._reopen()
            self.store.save(config, previous=previous)
            metrics.CONFIG_APPLIES.labels(result="ack", kind=kind).inc()
            log.info("applied %s (%s)", config.label, kind)
            await self._reply("ack", config.hash, config.version)

    async def vet(self, config: NodeConfig) -> None:
        """What the node checks before it runs a config's engine, whatever the control plane checked
        (engine_node/config_checks.py): the flag table, the allow-list, the draft's tokenizer and vocabulary, what the
        config asks of the checkpoints. Raises ConfigRejected naming the template field."""
        self._engine_args(config)
        # Paths resolve through the file system, tokenizer files are hashed: off the gateway's event loop.
        notes = await asyncio.to_thread(check_config, config, self.settings, self.allow_list)
        log.info("config %s: models allowed; %s", config.label, "; ".join(notes))

    def _engine_args(self, config: NodeConfig | None) -> list[str]:
        """The engine flags of `config` under the current policy bundle: without speculative decoding while the
        pool is degraded and its template turns it off, or while the node's rule has turned it off. A policy push
        never restarts the engine by itself."""
        degradation = (self.bundle or {}).get("content", {}).get("degradation") or {}
        allowed = degradation.get("speculative_decoding", True) is not False and not self.speculation.off
        return engine_args(config, self.settings, speculative=allowed)

    def _speculative_flag(self, config: NodeConfig | None) -> list[str]:
        """The --speculative-config this config asks for, whatever the rule or the degradation says now."""
        args = engine_args(config, self.settings) if config is not None else []
        return [arg for arg in args if arg.startswith("--speculative-config")]

    def _rebuild_policy(self) -> None:
        params = self.config.content if self.config else None
        self.admission.set_engine_capacity((params or {}).get("engine", {}).get("max_num_seqs"))
        bundle = self.bundle["content"] if self.bundle else None
        label = self.config.label if self.config else "defaults"
        try:
            policy = Policy(params, bundle, self.classifier)
        except PatternRejected as exc:
            # Only a config stored before strict patterns ran on RE2, or before their cost was bounded, gets here (a
            # pushed one is checked before it is applied): serve it with the default patterns rather than not start,
            # until the next push replaces it.
            log.error("last good config %s: %s; its strict patterns are replaced by the defaults", label, exc)
            temperature = {**params.get("temperature", {}), "strict_patterns": DEFAULT_STRICT_PATTERNS}
            policy = Policy({**params, "temperature": temperature}, bundle, self.classifier)
        self.gateway.set_policy(policy, label)

    def _reopen(self) -> None:
        if self._held:
            self._set_status("draining")
            return
        self.admission.resume()
        self._set_status("online")

    def _set_status(self, status: str) -> None:
        """Change the node's status and tell the control plane now, not at the next heartbeat."""
        if status == self.status:
            return
        self.status = status
        self.memory_cleanup.unsettle()
        if self.link is not None and self.link.connected.is_set():
            self._spawn(self.link.send(self.heartbeat()))

    def _engine_state(self, state: str) -> None:
        if state == "degraded":
            metrics.ENGINE_RESTARTS.labels(cause="crash").inc()
        self._set_status(state)

    async def _reply(self, kind: str, content_hash: str, version, error: str = "") -> None:
        message = {"type": kind, "hash": content_hash, "version": version}
        if error:
            message["error"] = error
        await self._send(message)

    async def _send(self, message: dict) -> None:
        if self.link is not None:
            await self.link.send(message)
