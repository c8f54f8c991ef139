"""What the agent does to its engine beyond applying configs: operator commands, memory cleanup, warmup runs,
roll back after a failed warmup, restarts and recovery. A mixin of the Agent, which holds the apply lock,
the engine, the admission gate and the link these use.
"""

import asyncio
import json
import logging
import math

from engine_node import metrics
from engine_node.agent_speculation import OPS as SPECULATION_OPS
from engine_node.batching import Warming
from engine_node.cleanup import CHECK_PERIOD_S, cleanup_params
from engine_node.config import NodeConfig
from engine_node.engine import EngineStartFailed
from engine_node.warmup import warmup_params

log = logging.getLogger("engine_node.agent")

# On its first start a node has no warmup dataset on disk: it waits this long for the control plane's answer to
# its hello (which always says which dataset the pool has, if any) before serving unwarmed.
WARMUP_SYNC_WAIT_S = 15.0
# A warming node's Retry-After is the expected rest of its warmup, at most this: short enough that a client comes
# back soon after the node opens, long enough not to hammer it meanwhile.
WARMING_RETRY_MAX_S = 5


class NodeOperations:
    """Commands, cleanup, warmup and restarts of the Agent."""

    async def command(self, command_id: int, op: str) -> None:
        async def progress(state: str, text: str = "", result: str = "") -> None:
            await self._send(
                {"type": "command_progress", "id": command_id, "state": state, "progress": text, "result": result}
            )

        if self._apply_lock.locked():
            if op in {"cleanup", *SPECULATION_OPS}:
                # The pool's cleanup or speculation lease must not wait behind a config apply (a cold restart and its
                # warmup take minutes): give it back at once, the node asks again once it serves.
                await progress("failed", result=f"not started: {self._busy_text()}; ask again when it is online")
                return
            await progress("pending", f"waiting: {self._busy_text()}")
        async with self._apply_lock:
            try:
                if op == "drain":
                    await progress("running", "closing the gate and waiting for in-flight requests")
                    self._held = True
                    done, waited = await self.admission.drain(self.settings.drain_timeout_s)
                    self._set_status("draining")
                    await progress(
                        "succeeded",
                        result=f"drained in {waited:.1f}s"
                        if done
                        else f"gate closed; {self.admission.in_flight} requests still running after {waited:.0f}s",
                    )
                elif op == "resume":
                    self._held = False
                    self.admission.resume()
                    self._set_status("online")
                    await progress("succeeded", result="gate open, serving")
                elif op == "cleanup":
                    await self._cleanup(self.memory_cleanup.take_trigger(), progress)
                elif op in SPECULATION_OPS:
                    await self._speculation_switch(SPECULATION_OPS[op], progress)
                elif op == "restart":
                    await progress("running", "draining, then restarting the engine")
                    # The flags of the config and the policy now: a degraded pool's restart leaves speculative
                    # decoding out (or brings it back) here, one node at a time as the control plane sends them.
                    await self._restart_engine(self._engine_args(self.config), reason="operator request")
                    await progress("running", "engine restarted; warming up")
                    result = await self._warm(trigger="restart", command_progress=progress)
                    self._reopen()
                    if result["state"] == "failed":
                        text = f"engine restarted; {result['reason']} (serving: no other config to roll back to)"
                        await progress("failed", result=text)
                    else:
                        await progress("succeeded", result=f"engine restarted and serving ({self.engine.version})")
                elif op == "warmup":
                    await progress("running", "closing the gate and waiting for in-flight requests")
                    await self.admission.drain(self.settings.drain_timeout_s)
                    result = await self._warm(trigger="operator", command_progress=progress)
                    self._reopen()
                    await progress(
                        "failed" if result["state"] == "failed" else "succeeded",
                        result=json.dumps(result, separators=(",", ":")),
                    )
                else:
                    await progress("failed", result=f"unknown operation {op!r}")
            except EngineStartFailed as exc:
                await progress("failed", result=str(exc))
                await self._recover()
            except Exception as exc:  # the command ends with a state the operator sees, never in "running" for good
                log.exception("command %s (%s) failed unexpectedly", command_id, op)
                await progress("failed", result=f"the agent failed unexpectedly: {exc!r}"[:500])

    def _busy_text(self) -> str:
        """What holds the apply lock, for a command that has to wait for it."""
        if self.status == "warming":
            return "the node is warming up a new config"
        if self.status in {"draining", "restarting"}:
            return f"the node is applying a config ({self.status} the engine)"
        return "the node is applying a config"

    async def _cleanup(self, trigger: str, progress) -> None:
        """Drain, reset the prefix cache, release cached blocks, resume; the caller holds the apply lock."""
        self._set_status("draining")
        ok, result = await self.memory_cleanup.run(
            trigger=trigger,
            params=cleanup_params(self.config.content if self.config else None),
            progress=progress,
            reopen=self._reopen,
        )
        await progress("succeeded" if ok else "failed", "", json.dumps(result, separators=(",", ":")))

    async def _cleanup_watch(self) -> None:
        """Every few seconds: is an automatic cleanup due (fragmentation above the threshold, or the timer)?"""
        while True:
            await asyncio.sleep(CHECK_PERIOD_S)
            try:
                await self._cleanup_check()
            except Exception:
                log.exception("the automatic cleanup check failed")

    async def _cleanup_check(self) -> None:
        if self.status != "online" or self._held or self._apply_lock.locked():
            return
        reading = await self.memory_cleanup.check_reading()
        params = cleanup_params(self.config.content if self.config else None)
        trigger = self.memory_cleanup.due(params, reading)
        if trigger is None:
            return
        if self.link is None:
            # Stand-alone: no pool to share a lease with.
            async with self._apply_lock:

                async def quiet(state: str, text: str = "", result: str = "") -> None:
                    return None

                await self._cleanup(trigger, quiet)
        elif self.link.connected.is_set():
            # The control plane grants one node of the pool at a time: the grant is a cleanup command.
            self.memory_cleanup.requested(trigger)
            fragmentation = reading.get("fragmentation") if reading else None
            await self.link.send({"type": "cleanup_request", "trigger": trigger, "fragmentation": fragmentation})

    async def _startup_warmup(self) -> None:
        """The first warmup, before the gate ever opens; it holds the apply lock so a pushed config waits for it."""
        async with self._apply_lock:
            try:
                if self.warmup_dataset is None and self.link is not None and self._warmup_params()["enabled"]:
                    try:
                        await asyncio.wait_for(self._warmup_synced.wait(), WARMUP_SYNC_WAIT_S)
                    except TimeoutError:
                        log.warning("no word from the control plane on the warmup dataset; serving without one")
                await self._warm(trigger="start")
            except Exception:
                log.exception("the start-up warmup failed unexpectedly; serving")
            finally:
                self.admission.refuse_while_closed(None)
                self._reopen()

    def _warmup_params(self) -> dict:
        return warmup_params(self.config.content if self.config else None)

    async def _warm(self, *, trigger: str, command_progress=None) -> dict:
        """Replay the warmup dataset with the gate shut; returns the final progress (`state`: passed, failed or
        skipped). The caller reopens the gate (or rolls back first)."""
        params = self._warmup_params()
        if not params["enabled"]:
            result = self.warmup.skip("warmup turned off (warmup.enabled)", trigger=trigger)
        elif not self.warmup_dataset or not self.warmup_dataset["messages"]:
            result = self.warmup.skip("no warmup dataset", trigger=trigger)
        else:
            self._set_status("warming")

            async def report(document: dict) -> None:
                await self._send({"type": "warmup_progress", **document})
                if command_progress is not None and document["state"] == "running":
                    await command_progress(
                        "running",
                        f"warming up: {document['done']}/{document['total']} requests, "
                        f"concurrency {document['concurrency']}, p99 {document['p99']} s",
                    )

            # Requests are refused at once meanwhile (those queued during a cold restart too): a client can retry
            # another node now rather than wait out a warmup of unknown length.
            self.admission.refuse_while_closed(self._warming_refusal)
            try:
                result = await self.warmup.run(
                    messages=self.warmup_dataset["messages"],
                    params=params,
                    policy=self.gateway.policy,
                    max_num_seqs=(self.config.content if self.config else {}).get("engine", {}).get("max_num_seqs"),
                    trigger=trigger,
                    on_progress=report,
                )
            finally:
                self.admission.refuse_while_closed(None)
        metrics.WARMUPS.labels(trigger=trigger, result=result["state"]).inc()
        await self._send({"type": "warmup_progress", **result})
        return result

    def _warming_refusal(self) -> Warming:
        """The 503 a request gets while the node warms up; Retry-After is the expected rest of the warmup, 1-5 s."""
        progress = self.warmup.progress
        done, total = progress.get("done") or 0, progress.get("total") or 0
        if progress.get("state") == "running" and 0 < done < total:
            remaining = progress.get("elapsed_s", 0.0) / done * (total - done)
            what = f"{done}/{total} warmup requests done"
        else:
            remaining, what = WARMING_RETRY_MAX_S, "starting"
        retry_after = max(1, min(WARMING_RETRY_MAX_S, math.ceil(remaining)))
        return Warming(
            f"{self.settings.node_name} is warming up ({what}) and takes no requests until it passes; "
            f"retry after {retry_after}s",
            retry_after,
        )

    async def _roll_back(self, previous: NodeConfig | None, *, failed: NodeConfig, reason: str) -> None:
        """After `failed`'s warmup failed: restart on the config the node ran before, warm it up and serve."""
        log.error("%s: rolling back from %s", reason, failed.label)
        self.config = previous
        self._rebuild_policy()
        try:
            await self._restart_engine(self._engine_args(previous), reason=f"config rollback from {failed.label}")
        except EngineStartFailed as exc:
            log.error("the previous config does not start either: %s", exc)
            await self._recover()
            return
        # Whatever this warmup finds, the node serves: the config it goes back to is the last one that passed.
        await self._warm(trigger="rollback")
        self._reopen()

    async def _restart_engine(self, args: list[str], *, reason: str) -> None:
        """Drain (bounded), restart with `args` and confirm a real request succeeds; the gate stays shut for the
        caller's warmup."""
        self._set_status("draining")
        done, waited = await self.admission.drain(self.settings.drain_timeout_s)
        if not done:
            log.warning("drain timed out after %.0fs with %d in flight", waited, self.admission.in_flight)
        self._set_status("restarting")
        self.restarts += 1
        metrics.ENGINE_RESTARTS.labels(cause="config" if reason.startswith("config") else "operator").inc()
        await self.engine.stop()
        await self.engine.start(args)

    async def _recover(self) -> None:
        """After a failed start, bring the engine back on the last good config and reopen the gate."""
        self._set_status("degraded")
        args = self._engine_args(self.config)
        while True:
            try:
                self.restarts += 1
                await self.engine.stop()
                await self.engine.start(args)
                break
            except EngineStartFailed as exc:
                log.error("engine does not start on the last good config either: %s", exc)
                await asyncio.sleep(5)
        self._reopen()
