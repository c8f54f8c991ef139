"""The simulated engine: vLLM v1-style continuous batching over a paged KV cache, one step at a time.

Each step the scheduler first gives every running sequence its tokens (the rest of its prompt, up to
the token budget, or one decode token plus the speculative draft), preempting the newest running
sequence when the cache has no block left (recompute: it goes back to the front of the queue and
later prefills prompt and output again). If nothing was preempted it admits waiting sequences while
there are seats (--max-num-seqs), budget (--max-num-batched-tokens) and free blocks. Then it sleeps
for the step's simulated duration and hands every sequence its new tokens.
"""

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

from engine_node.simulator.gpu import SimulatedGpu
from engine_node.simulator.kvcache import BlockPool, PrefixCache
from engine_node.simulator.metrics import FinishedRequest, SimulatorMetrics
from engine_node.simulator.model import LatencyModel, SpeculativeConfig, SpeculativeSampler
from engine_node.simulator.profile import Faults
from engine_node.simulator.sequence import Sequence, StepOutput

logger = logging.getLogger("engine_node.simulator")

# How far behind its simulated timeline the step loop may be and still catch up (see Engine.run).
MAX_CATCH_UP_S = 0.1


@dataclass(frozen=True)
class _Scheduled:
    sequence: Sequence
    num_tokens: int
    is_decode: bool
    epoch: int


class Engine:
    """Waiting queue, running batch, KV blocks and the step loop of one simulated engine core."""

    def __init__(
        self,
        *,
        latency: LatencyModel,
        pool: BlockPool,
        prefix_cache: PrefixCache | None,
        sampler: SpeculativeSampler | None,
        speculative: SpeculativeConfig | None = None,
        metrics: SimulatorMetrics,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        faults: Faults,
        gpu: SimulatedGpu | None = None,
    ) -> None:
        self.latency = latency
        self.gpu = gpu
        self.pool = pool
        self.prefix_cache = prefix_cache
        self.sampler = sampler
        self.speculative = speculative
        self.metrics = metrics
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.faults = faults
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.is_sleeping = False
        self.num_steps = 0
        self.num_preemptions = 0
        self.max_running_observed = 0
        self._wakeup = asyncio.Event()
        self._logged_tokens = [0, 0]
        # Drafts, draft tokens, accepted tokens and accepted per position since the last log line.
        self._logged_drafts = [0, 0, 0, [0] * (sampler.num_speculative_tokens if sampler else 0)]

    def add(self, sequence: Sequence) -> None:
        """Queue a new request."""
        self.waiting.append(sequence)
        self._wakeup.set()
        self.update_gauges()

    def abort(self, sequence: Sequence) -> None:
        """Drop a request whose client went away; it counts as finished with reason "abort"."""
        if sequence.is_done:
            return
        if sequence in self.waiting:
            self.waiting.remove(sequence)
        self._finish(sequence, "abort", time.monotonic())
        self.pool.note_holes()
        self.update_gauges()

    def sleep(self, level: int) -> None:
        """Discard the KV cache (every running sequence goes back to the queue) and stop stepping."""
        self.is_sleeping = True
        for sequence in reversed(self.running):
            self._preempt(sequence, count=False)
        self.running.clear()
        if self.prefix_cache:
            self.prefix_cache.reset()
        self.metrics.record_sleep_state(sleeping=True, level=level)
        self.update_gauges()

    def wake_up(self) -> None:
        """Re-allocate memory from scratch, which leaves no stranded segments, and resume stepping."""
        if not self.is_sleeping:
            return
        self.is_sleeping = False
        self.pool.release_memory()
        if self.gpu is not None:
            self.gpu.release()
        self.metrics.record_sleep_state(sleeping=False, level=0)
        self._wakeup.set()
        self.update_gauges()

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix; blocks held by running sequences stay."""
        if self.prefix_cache:
            self.prefix_cache.reset()

    async def run(self) -> None:
        """The step loop; idles on an event while there is nothing to do.

        Steps follow a simulated timeline: each one ends its simulated duration after the previous one's end, not
        after the moment the loop got round to it. A loop woken late (timer granularity, a busy CPU, handlers
        between steps) starts the next step that much shorter, so lateness does not add up over the hundreds of
        steps of a reply; catching up is bounded by MAX_CATCH_UP_S, so a stall longer than that (a stopped
        process) is real lateness and not made good by a burst of instant steps.
        """
        step_end: float | None = None
        while True:
            scheduled = [] if self.is_sleeping else self._schedule()
            if not scheduled:
                step_end = None
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            prefill_tokens = sum(s.num_tokens for s in scheduled if not s.is_decode)
            decode_seqs = sum(1 for s in scheduled if s.is_decode)
            kv_tokens = sum(s.sequence.num_computed for s in scheduled if s.is_decode)
            drafting = any(s.is_decode and s.num_tokens > 1 for s in scheduled)
            duration = self.latency.step_seconds(
                prefill_tokens, decode_seqs, self.faults.latency_factor, kv_tokens, drafting=drafting
            )
            now = time.monotonic()
            start = now if step_end is None else max(step_end, now - MAX_CATCH_UP_S)
            # A leak's allocator waits come after the compute, with the GPU idle (engine_node/simulator/gpu.py).
            stall = duration * self.gpu.stall_ratio(now) if self.gpu is not None else 0.0
            step_end = start + duration + stall
            if self.gpu is not None:
                self.gpu.note_compute(start + duration, duration)
            # sleep(0) when behind still lets the HTTP handlers run between steps.
            await asyncio.sleep(max(0.0, step_end - now))
            self.num_steps += 1
            now = time.monotonic()
            for item in scheduled:
                self._apply(item, now)
            self.pool.note_holes()
            self.update_gauges()

    def _schedule(self) -> list[_Scheduled]:
        budget = self.max_num_batched_tokens
        draft = 0
        if self.sampler:
            # vLLM's batch-size schedule (num_speculative_tokens_per_batch_size) may give a busy step fewer or none.
            batch = len(self.running)
            draft = self.speculative.tokens_at(batch) if self.speculative else self.sampler.num_speculative_tokens
        scheduled: list[_Scheduled] = []
        preemptions_before = self.num_preemptions
        index = 0
        while index < len(self.running) and budget > 0:
            sequence = self.running[index]
            is_decode = sequence.is_decoding
            wanted = 1 + draft if is_decode else sequence.num_tokens - sequence.num_computed
            # A decode step always carries the full draft so acceptance draws never depend on load.
            tokens = wanted if is_decode else min(wanted, budget)
            if tokens > budget or not self._reserve(sequence, sequence.num_computed + tokens):
                break
            scheduled.append(_Scheduled(sequence, tokens, is_decode, sequence.epoch))
            budget -= tokens
            index += 1
        # vLLM admits nothing new in a step that had to preempt.
        while (
            self.waiting
            and self.num_preemptions == preemptions_before
            and len(self.running) < self.max_num_seqs
            and budget > 0
        ):
            sequence = self.waiting[0]
            cached = self._cached_tokens(sequence)
            tokens = min(sequence.num_tokens - cached, budget)
            if not self.pool.grow(id(sequence), cached + tokens):
                break
            self.waiting.popleft()
            self.running.append(sequence)
            sequence.num_computed = cached
            if sequence.scheduled_at is None:
                sequence.scheduled_at = time.monotonic()
            if self.prefix_cache:
                self.metrics.prefix_cache_queries.inc(sequence.prompt_tokens)
                self.metrics.prefix_cache_hits.inc(cached)
            scheduled.append(_Scheduled(sequence, tokens, False, sequence.epoch))
            budget -= tokens
        self.max_running_observed = max(self.max_running_observed, len(self.running))
        return scheduled

    def _reserve(self, sequence: Sequence, num_tokens: int) -> bool:
        """Blocks for `num_tokens` of `sequence`, preempting the newest running sequences; False if it was one."""
        while not self.pool.grow(id(sequence), num_tokens):
            victim = self.running.pop()
            self._preempt(victim, count=True)
            if victim is sequence:
                return False
        return True

    def _cached_tokens(self, sequence: Sequence) -> int:
        if not self.prefix_cache:
            return 0
        hits = self.prefix_cache.hit_blocks(sequence.block_hashes) * self.pool.block_size
        # The last prompt token is always recomputed so the step has logits to sample from.
        return min(hits, (sequence.prompt_tokens - 1) // self.pool.block_size * self.pool.block_size)

    def _preempt(self, sequence: Sequence, count: bool) -> None:
        self.pool.release(id(sequence))
        sequence.num_computed = 0
        sequence.epoch += 1
        self.waiting.appendleft(sequence)
        if count:
            self.num_preemptions += 1
            self.metrics.preemptions.inc()

    def _apply(self, item: _Scheduled, now: float) -> None:
        sequence = item.sequence
        if sequence.is_done or sequence.epoch != item.epoch:
            return
        if item.is_decode:
            emitted = 1
            drafts = item.num_tokens - 1
            if self.sampler and drafts:
                accepted = self.sampler.accepted(
                    sequence.spec_rng, acceptance_rate=self.faults.spec_acceptance_rate, draft=drafts
                )
                self.metrics.record_draft(drafts, accepted)
                logged = self._logged_drafts
                logged[0], logged[1], logged[2] = logged[0] + 1, logged[1] + drafts, logged[2] + accepted
                for position in range(accepted):
                    logged[3][position] += 1
                emitted += accepted
            sequence.num_computed += emitted
        else:
            sequence.num_computed += item.num_tokens
            if sequence.num_computed < sequence.num_tokens:
                return
            emitted = 1
        self._emit(sequence, min(emitted, sequence.target_tokens - sequence.num_output), now)

    def _emit(self, sequence: Sequence, count: int, now: float) -> None:
        sequence.num_output += count
        if sequence.first_token_at is None:
            sequence.first_token_at = now
            self.metrics.ttft.observe(now - sequence.arrival)
            self.metrics.prompt_tokens.inc(sequence.prompt_tokens)
            self._logged_tokens[0] += sequence.prompt_tokens
            if self.prefix_cache:
                self.prefix_cache.remember(sequence.block_hashes)
        else:
            self.metrics.inter_token_latency.observe(now - (sequence.last_token_at or now))
        sequence.last_token_at = now
        self.metrics.generation_tokens.inc(count)
        self._logged_tokens[1] += count
        finished = sequence.num_output >= sequence.target_tokens
        reason = sequence.finish_reason if finished else None
        sequence.outputs.put_nowait(StepOutput(sequence.writer.take(count), count, reason))
        if reason:
            self._finish(sequence, reason, now)

    def _finish(self, sequence: Sequence, reason: str, now: float) -> None:
        sequence.is_done = True
        if sequence in self.running:
            self.running.remove(sequence)
        self.pool.release(id(sequence))
        scheduled_at = sequence.scheduled_at or now
        first_token_at = sequence.first_token_at or now
        decode_time = now - first_token_at
        self.metrics.record_finished(
            FinishedRequest(
                finish_reason=reason,
                e2e_latency=now - sequence.arrival,
                queued_time=scheduled_at - sequence.arrival,
                prefill_time=first_token_at - scheduled_at,
                decode_time=decode_time,
                inference_time=now - scheduled_at,
                num_prompt_tokens=sequence.prompt_tokens,
                num_generation_tokens=sequence.num_output,
                max_tokens_param=sequence.max_tokens,
                mean_time_per_output_token=decode_time / (sequence.num_output - 1) if sequence.num_output > 1 else 0.0,
            )
        )

    def update_gauges(self) -> None:
        """Set the running, waiting, KV usage and fragmentation gauges from the current state."""
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.kv_cache_usage.set(self.pool.usage)
        self.metrics.fragmentation.set(self.pool.fragmentation)

    def state(self) -> dict:
        """What GET /sim/state reports."""
        return {
            "simulated": True,
            "waiting": len(self.waiting),
            "running": len(self.running),
            "max_running_observed": self.max_running_observed,
            "steps": self.num_steps,
            "preemptions": self.num_preemptions,
            "kv_cache_usage": self.pool.usage,
            "num_gpu_blocks": self.pool.num_blocks,
            "free_blocks": self.pool.num_free,
            "fragmentation": self.pool.fragmentation,
            "is_sleeping": self.is_sleeping,
            "faults": self.faults.as_dict(),
        }

    async def log_stats(self, interval_s: float = 10.0) -> None:
        """vLLM's periodic "Engine 000: Avg prompt throughput ..." line, skipped while idle."""
        while True:
            await asyncio.sleep(interval_s)
            prompt, generation = self._logged_tokens
            self._logged_tokens = [0, 0]
            if not (prompt or generation or self.running or self.waiting):
                continue
            logger.info(
                "Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Fragmentation: %.1f%% (simulated)",
                prompt / interval_s,
                generation / interval_s,
                len(self.running),
                len(self.waiting),
                self.pool.usage * 100,
                self.pool.fragmentation * 100,
            )
            self._log_drafts(interval_s)

    def _log_drafts(self, interval_s: float) -> None:
        """vLLM's "SpecDecoding metrics: ..." line over the same interval, when anything was drafted."""
        drafts, drafted, accepted, per_pos = self._logged_drafts
        self._logged_drafts = [0, 0, 0, [0] * len(per_pos)]
        if not drafts:
            return
        logger.info(
            "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
            "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
            "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%% (simulated)",
            1 + accepted / drafts,
            accepted / interval_s,
            drafted / interval_s,
            accepted,
            drafted,
            ", ".join(f"{count / drafts:.3f}" for count in per_pos),
            accepted / drafted * 100 if drafted else float("nan"),
        )
