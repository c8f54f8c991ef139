"""The simulated GPU: how long an engine step takes, and how many speculative draft tokens it accepts."""

import json
import random
from dataclasses import dataclass

from engine_node.simulator.profile import Profile

SPECULATIVE_METHODS = ("draft_model", "ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp", "suffix")


@dataclass(frozen=True)
class SpeculativeConfig:
    """The part of vLLM's --speculative-config the simulator uses.

    `batch_schedule` is vLLM's num_speculative_tokens_per_batch_size, inclusive (start, end, k) ranges with the last
    one carried forward: how many candidates a step of that many requests drafts (0: none)."""

    method: str
    num_speculative_tokens: int
    batch_schedule: tuple[tuple[int, int, int], ...] = ()

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
        low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        for name, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be an integer of at least 1")
        if low is not None and high is not None and low > high:
            raise ValueError(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
        schedule = config.get("num_speculative_tokens_per_batch_size")
        return cls(
            method=method,
            num_speculative_tokens=tokens,
            batch_schedule=_batch_schedule(schedule) if schedule is not None else (),
        )

    def tokens_at(self, batch_size: int) -> int:
        """Candidates a step of `batch_size` requests drafts, as vLLM's dynamic schedule looks it up."""
        k = self.num_speculative_tokens
        if not self.batch_schedule:
            return k
        chosen = self.batch_schedule[0][2]
        for start, _end, tokens in self.batch_schedule:
            if start > batch_size:
                break
            chosen = tokens
        return min(k, chosen)


def _batch_schedule(raw) -> tuple[tuple[int, int, int], ...]:
    """vLLM's validation of num_speculative_tokens_per_batch_size (vllm/v1/spec_decode/dynamic/utils.py)."""
    if not isinstance(raw, list) or not raw:
        raise ValueError(
            "num_speculative_tokens_per_batch_size must be a non-empty list of "
            "(range_start, range_end, num_speculative_tokens) entries."
        )
    entries = []
    for entry in raw:
        if (
            not isinstance(entry, list | tuple)
            or len(entry) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in entry)
        ):
            raise ValueError(
                "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                "(range_start, range_end, num_speculative_tokens)."
            )
        start, end, tokens = entry
        if start <= 0 or end <= 0:
            raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {tokens}).")
        if tokens < 0:
            raise ValueError("num_speculative_tokens_per_batch_size values must be >= 0.")
        entries.append((start, end, tokens))
    entries.sort()
    previous_end = 0
    for start, end, _ in entries:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if entries[0][0] != 1:
        raise ValueError(
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule."
        )
    return tuple(entries)


class LatencyModel:
    """Engine-step cost: prefill work plus a decode step that grows with the running batch and the KV it reads."""

    def __init__(self, profile: Profile, quantization: str | None, speculative: SpeculativeConfig | None) -> None:
        self._profile = profile
        self._factor = profile.time_scale / 1000.0
        if quantization:
            self._factor *= profile.supported_quantizations[quantization]
        self._spec_overhead = profile.verify_overhead if speculative else 1.0

    def step_seconds(
        self,
        prefill_tokens: int,
        decode_seqs: int,
        latency_factor: float = 1.0,
        kv_tokens: int = 0,
        drafting: bool = True,
    ) -> float:
        """Wall-clock seconds of one step that prefills `prefill_tokens` and decodes `decode_seqs` sequences.

        `kv_tokens` is the context the step's decoding sequences attend over (their prompt and output so far): decode
        attention reads every one of those tokens' K and V from GPU memory, so a memory-bound step costs
        `decode_per_kv_token_ms` per token on top of the per-sequence cost (0 in the default profile). A step that
        drafts no candidates (`drafting` False: vLLM's batch-size schedule gave it none) costs no verify overhead.
        """
        p = self._profile
        ms = 0.0
        if prefill_tokens:
            ms += p.prefill_base_ms + p.prefill_per_token_ms * prefill_tokens
        if decode_seqs:
            decode_ms = p.decode_base_ms + p.decode_per_seq_ms * decode_seqs + p.decode_per_kv_token_ms * kv_tokens
            ms += decode_ms * (self._spec_overhead if drafting else 1.0)
        return ms * self._factor * latency_factor


class SpeculativeSampler:
    """Draws how many of a draft's tokens the target model accepts, one seeded generator per request.

    The profile's acceptance_rate is the mean share of draft tokens accepted. Verification stops at
    the first rejected position, so with a per-position acceptance probability q and k draft tokens
    the mean share is q(1 - q^k) / (k(1 - q)); q is solved from acceptance_rate by bisection. The
    spec_acceptance_rate fault replaces the profile's rate while it is set.
    """

    def __init__(self, acceptance_rate: float, num_speculative_tokens: int) -> None:
        self.num_speculative_tokens = num_speculative_tokens
        self.acceptance_rate = acceptance_rate
        self.position_acceptance = _solve_position_acceptance(acceptance_rate, num_speculative_tokens)
        self._solved: dict[tuple[float, int], float] = {}

    def accepted(self, rng: random.Random, *, acceptance_rate: float | None = None, draft: int | None = None) -> int:
        """Accepted tokens of one draft of `draft` tokens (default: all of them): the length of its accepted
        prefix, at the profile's rate or `acceptance_rate`."""
        k = self.num_speculative_tokens if draft is None else draft
        if acceptance_rate is None and k == self.num_speculative_tokens:
            q = self.position_acceptance
        else:
            rate = self.acceptance_rate if acceptance_rate is None else acceptance_rate
            q = self._solved.get((rate, k))
            if q is None:
                q = self._solved[(rate, k)] = _solve_position_acceptance(rate, k)
        count = 0
        while count < k and rng.random() < q:
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
