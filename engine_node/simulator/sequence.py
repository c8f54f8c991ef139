"""One simulated request inside the engine: its prompt, its predetermined reply, and its progress."""

import asyncio
import random
import time
from dataclasses import dataclass, field

from engine_node.simulator.profile import Profile
from engine_node.simulator.text import ReplyWriter, natural_length, request_seed

# Keeps the speculative-acceptance draws independent of the reply-text draws of the same request.
_SPEC_STREAM = 0x5DEECE66D


@dataclass(frozen=True)
class StepOutput:
    """What one engine step produced for one request: new text, its token count, and the finish reason."""

    text: str
    num_tokens: int
    finish_reason: str | None


@dataclass(eq=False)
class Sequence:
    """A request's state in the scheduler; `epoch` changes on preemption so in-flight step results are dropped."""

    request_id: str
    prompt_tokens: int
    block_hashes: list[int]
    max_tokens: int
    target_tokens: int
    finish_reason: str
    writer: ReplyWriter
    spec_rng: random.Random
    arrival: float = field(default_factory=time.monotonic)
    outputs: asyncio.Queue = field(default_factory=asyncio.Queue)
    num_computed: int = 0
    num_output: int = 0
    epoch: int = 0
    scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    is_done: bool = False

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens: what a recompute after preemption has to prefill again."""
        return self.prompt_tokens + self.num_output

    @property
    def is_decoding(self) -> bool:
        """Whether the next step generates from this sequence rather than prefilling it."""
        return self.num_output > 0 and self.num_tokens - self.num_computed == 1


def new_sequence(
    *,
    request_id: str,
    prompt_tokens: int,
    block_hashes: list[int],
    seed_content: object,
    request_seed_param: object,
    max_tokens: int,
    min_tokens: int,
    ignore_eos: bool,
    simulator_seed: int,
    profile: Profile,
) -> Sequence:
    """A sequence whose reply length, finish reason, text and draft acceptances follow from its seed alone."""
    seed = request_seed(simulator_seed, seed_content, request_seed_param)
    rng = random.Random(seed)
    wanted = natural_length(rng, profile.reply_median, profile.reply_sigma, profile.reply_min, profile.reply_max)
    wanted = max(wanted, min_tokens)
    if ignore_eos or wanted > max_tokens:
        target, finish_reason = max_tokens, "length"
    else:
        target, finish_reason = wanted, "stop"
    return Sequence(
        request_id=request_id,
        prompt_tokens=prompt_tokens,
        block_hashes=block_hashes,
        max_tokens=max_tokens,
        target_tokens=target,
        finish_reason=finish_reason,
        writer=ReplyWriter(rng, target, finish_reason),
        spec_rng=random.Random(seed ^ _SPEC_STREAM),
    )
