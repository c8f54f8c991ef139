"""The agent's side of the speculative-decoding rule (engine_node/speculation.py): after every metric sample the
guard reads vLLM's counters; when it wants speculation off (sustained rejection) or back on (a probe while
generation is slow) the node asks the control plane for its pool's lease (`speculation_request`), which grants it
as a `speculation_off` / `speculation_on` command to one node of the pool at a time and audits it as the system's
action. The command drains the node (every admitted request finishes; new ones wait in the queue), restarts the
engine with or without --speculative-config, warms it up and reopens. A stand-alone node (no control plane) does
the same without a lease. A mixin of the Agent, which holds the guard, the apply lock, the engine and the link.
"""

import json
import logging

from engine_node.engine import EngineStartFailed
from engine_node.speculation import speculation_params

log = logging.getLogger("engine_node.agent")

OPS = {"speculation_off": "off", "speculation_on": "on"}


class SpeculationControl:
    """The guard's decisions turned into lease requests and drained restarts."""

    def _speculation_params(self) -> dict:
        return speculation_params(self.config.content if self.config else None)

    def speculation_state(self) -> dict:
        return self.speculation.state(self._speculation_params())

    async def _speculation_check(self) -> None:
        """After a sample: feed the guard, and ask for a change it wants (never while busy or held)."""
        params = self._speculation_params()
        self.speculation.observe(self.telemetry.scraper.latest, params)
        if self.status != "online" or self._held or self._apply_lock.locked():
            return
        degradation = (self.bundle or {}).get("content", {}).get("degradation") or {}
        if degradation.get("speculative_decoding", True) is False:
            return  # the degraded pool runs without speculation anyway; its end restarts with it
        decision = self.speculation.due(params)
        if decision is None:
            return
        action, reason = decision
        self._speculation_reason = reason
        log.warning("speculative decoding %s wanted: %s", action, reason)
        if self.link is None:
            # Stand-alone: no pool to share a lease with; the restart runs beside the sample loop, not in it.
            self.speculation.requested(action)
            self._spawn(self._speculation_alone(action))
        elif self.link.connected.is_set():
            self.speculation.requested(action)
            await self.link.send(
                {"type": "speculation_request", "action": action, "reason": reason, "state": self.speculation_state()}
            )

    async def _speculation_alone(self, action: str) -> None:
        async def quiet(state: str, text: str = "", result: str = "") -> None:
            return None

        async with self._apply_lock:
            await self._speculation_switch(action, quiet)

    async def _speculation_switch(self, action: str, progress) -> None:
        """Carry out a granted change; the caller holds the apply lock."""
        reason = getattr(self, "_speculation_reason", "") or f"speculative decoding {action} (operator)"
        was_off = self.speculation.off
        self.speculation.applied(action, reason)
        args = self._engine_args(self.config)
        if args == self.engine.args:
            await progress("succeeded", result=json.dumps({"speculation": action, "restarted": False}))
            return
        word = "without" if action == "off" else "with"
        try:
            await progress("running", f"draining, then restarting the engine {word} speculative decoding")
            await self._restart_engine(args, reason=f"speculative decoding {action}")
        except EngineStartFailed as exc:
            # Back to what ran before; _recover brings the engine back on it.
            self.speculation.off = was_off
            await progress("failed", result=str(exc))
            await self._recover()
            return
        result = await self._warm(trigger="restart", command_progress=progress)
        self._reopen()
        figures = {"speculation": action, "restarted": True, "reason": reason, "warmup": result["state"]}
        await progress("succeeded", result=json.dumps(figures, separators=(",", ":")))
        self._speculation_reason = ""
        log.warning("speculative decoding %s: %s", action, reason)
