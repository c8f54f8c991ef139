"""The simulated GPU: how long an engine step takes, and how many speculative draft tokens it accepts."""

import json
import random
from dataclasses import dataclass

from engine_node.simulator.profile import Profile

SPECULATIVE_METHODS = ("draft_model", "ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "suffix")


@dataclass(frozen=True)
class SpeculativeConfig:
    """The part of vLLM's --speculative-config the simulator uses."""

    method: str
    num_speculative_tokens: int

    @classmethod
    def parse(cls, raw: str) -> "SpeculativeConfig":
        """Parse the JSON string of --speculative-config; raises ValueError with vLLM-like wording."""
        try:
            config = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--speculative-config must be a JSON object: {exc}") from exc
        if not isinstance(config, dict):
            raise ValueError("--speculative-config must be a JSON object")
        method = config.get("method") or ("draft_model" if config.get("model") else None)
        if method not in SPECULATIVE_METHODS:
            raise ValueError(f"Unsupported speculative method: {method!r}. Choose one of {list(SPECULATIVE_METHODS)}")
        if method == "draft_model" and not config.get("model"):
            raise ValueError("speculative_config.model is required for the draft_model method")
        tokens = config.get("num_speculative_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            raise ValueError("num_speculative_tokens must be provided with speculative_config and be at least 1")
        return cls(method=method, num_speculative_tokens=tokens)


class LatencyModel:
    """Engine-step cost: prefill work plus a decode step that grows with the running batch and the KV it reads."""

    def __init__(self, profile: Profile, quantization: str | None, speculative: SpeculativeConfig | None) -> None:
        self._profile = profile
        self._factor = profile.time_scale / 1000.0
        if quantization:
            self._factor *= profile.supported_quantizations[quantization]
        self._spec_overhead = profile.verify_overhead if speculative else 1.0

    def step_seconds(
        self, prefill_tokens: int, decode_seqs: int, latency_factor: float = 1.0, kv_tokens: int = 0
    ) -> float:
        """Wall-clock seconds of one step that prefills `prefill_tokens` and decodes `decode_seqs` sequences.

        `kv_tokens` is the context the step's decoding sequences attend over (their prompt and output so far): decode
        attention reads every one of those tokens' K and V from GPU memory, so a memory-bound step costs
        `decode_per_kv_token_ms` per token on top of the per-sequence cost (0 in the default profile).
        """
        p = self._profile
        ms = 0.0
        if prefill_tokens:
            ms += p.prefill_base_ms + p.prefill_per_token_ms * prefill_tokens
        if decode_seqs:
            decode_ms = p.decode_base_ms + p.decode_per_seq_ms * decode_seqs + p.decode_per_kv_token_ms * kv_tokens
            ms += decode_ms * self._spec_overhead
        return ms * self._factor * latency_factor


class SpeculativeSampler:
    """Draws how many of a draft's tokens the target model accepts, one seeded generator per request.

    The profile's acceptance_rate is the mean share of draft tokens accepted. Verification stops at
    the first rejected position, so with a per-position acceptance probability q and k draft tokens
    the mean share is q(1 - q^k) / (k(1 - q)); q is solved from acceptance_rate by bisection.
    """

    def __init__(self, acceptance_rate: float, num_speculative_tokens: int) -> None:
        self.num_speculative_tokens = num_speculative_tokens
        self.position_acceptance = _solve_position_acceptance(acceptance_rate, num_speculative_tokens)

    def accepted(self, rng: random.Random) -> int:
        """Accepted tokens of one draft: the length of its accepted prefix."""
        count = 0
        while count < self.num_speculative_tokens and rng.random() < self.position_acceptance:
            count += 1
        return count


def expected_acceptance(position_acceptance: float, k: int) -> float:
    """Mean accepted share of a k-token draft when each position is accepted with this probability."""
    q = position_acceptance
    return sum(q ** (i + 1) for i in range(k)) / k


def _solve_position_acceptance(rate: float, k: int) -> float:
    if rate <= 0.0 or rate >= 1.0:
        return rate
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        if expected_acceptance(middle, k) < rate:
            low = middle
        else:
            high = middle
    return (low + high) / 2
