"""The simulator's /metrics: vLLM's v1 Prometheus names, types, labels and buckets, each HELP marked simulated.

Names, label sets and bucket lists follow vllm/v1/metrics/loggers.py (PrometheusStatLogger) and
vllm/v1/spec_decode/metrics.py (SpecDecodingProm). Left out: metrics of features the simulator does
not have (LoRA, multi-modal and external KV-connector caches, KV residency sampling) and
vllm:iteration_tokens_total, a histogram whose `_total` suffix promtool's linter rejects.
"""

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
TOKEN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                         20.0, 40.0, 80.0]  # fmt: skip
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
FINISH_REASONS = ("stop", "length", "abort")
LABELS = ["model_name", "engine"]


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to max_value, as vLLM buckets its token-count histograms."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


@dataclass(frozen=True)
class FinishedRequest:
    """Per-request timings and counts, observed once when a request finishes."""

    finish_reason: str
    e2e_latency: float
    queued_time: float
    prefill_time: float
    decode_time: float
    inference_time: float
    num_prompt_tokens: int
    num_generation_tokens: int
    max_tokens_param: int
    mean_time_per_output_token: float


class SimulatorMetrics:
    """One CollectorRegistry holding the vLLM series of engine 0 and the simulator's own gauge."""

    def __init__(self, model_name: str, max_model_len: int, num_speculative_tokens: int) -> None:
        self.registry = CollectorRegistry()
        labels = (model_name, "0")

        def gauge(name: str, doc: str):
            return Gauge(name, f"{doc} (simulated)", LABELS, registry=self.registry).labels(*labels)

        def counter(name: str, doc: str):
            return Counter(name, f"{doc} (simulated)", LABELS, registry=self.registry).labels(*labels)

        def histogram(name: str, doc: str, buckets: list):
            return Histogram(name, f"{doc} (simulated)", LABELS, buckets=buckets, registry=self.registry).labels(
                *labels
            )

        token_buckets = build_1_2_5_buckets(max_model_len)
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.fragmentation = Gauge(
            "sim:memory_fragmentation_ratio",
            "Share of reserved KV memory stranded in split allocator segments (simulated).",
            LABELS,
            registry=self.registry,
        ).labels(*labels)
        self.gpu_utilization = Gauge(
            "sim:gpu_utilization_ratio",
            "Share of the last second the simulated GPU computed (simulated).",
            LABELS,
            registry=self.registry,
        ).labels(*labels)
        self.gpu_memory_used = Gauge(
            "sim:gpu_memory_used_ratio",
            "Simulated GPU memory used over its total: the reservation plus any leaked memory (simulated).",
            LABELS,
            registry=self.registry,
        ).labels(*labels)
        sleep_state = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2. (simulated)",
            [*LABELS, "sleep_state"],
            registry=self.registry,
        )
        self._sleep_state = {s: sleep_state.labels(*labels, s) for s in ("awake", "weights_offloaded", "discard_all")}
        self.record_sleep_state(sleeping=False, level=0)
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests. (simulated)",
            [*LABELS, "finished_reason"],
            registry=self.registry,
        )
        self._success = {reason: success.labels(*labels, reason) for reason in FINISH_REASONS}
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", token_buckets
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", token_buckets
        )
        self.max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            token_buckets,
        )
        self.params_n = histogram("vllm:request_params_n", "Histogram of the n request parameter.", [1, 2, 5, 10, 20])
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", token_buckets
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.inter_token_latency = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TOKEN_LATENCY_BUCKETS
        )
        self.request_tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.spec_enabled = num_speculative_tokens > 0
        if self.spec_enabled:
            self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
            self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
            self.spec_accepted_tokens = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position. (simulated)",
                [*LABELS, "position"],
                registry=self.registry,
            )
            self.spec_accepted_per_pos = [per_pos.labels(*labels, str(p)) for p in range(num_speculative_tokens)]

    def cache_config_info(self, info: dict[str, str]) -> None:
        """vllm:cache_config_info, the info-style gauge set to 1 whose labels are the cache config."""
        gauge = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig (simulated)",
            [*sorted(info), "engine"],
            registry=self.registry,
        )
        gauge.labels(**info, engine="0").set(1)

    def record_sleep_state(self, sleeping: bool, level: int) -> None:
        """Set vllm:engine_sleep_state as vLLM does for sleep levels 1 and 2."""
        self._sleep_state["awake"].set(0 if sleeping else 1)
        self._sleep_state["weights_offloaded"].set(1 if sleeping and level == 1 else 0)
        self._sleep_state["discard_all"].set(1 if sleeping and level == 2 else 0)

    def record_draft(self, num_draft_tokens: int, num_accepted: int) -> None:
        """Count one verified draft and how many of its tokens were accepted, by position."""
        self.spec_drafts.inc()
        self.spec_draft_tokens.inc(num_draft_tokens)
        self.spec_accepted_tokens.inc(num_accepted)
        for position in range(num_accepted):
            self.spec_accepted_per_pos[position].inc()

    def record_finished(self, request: FinishedRequest) -> None:
        """Observe a finished request in vLLM's per-request counters and histograms."""
        self._success[request.finish_reason].inc()
        self.e2e.observe(request.e2e_latency)
        self.queue_time.observe(request.queued_time)
        self.prefill_time.observe(request.prefill_time)
        self.inference_time.observe(request.inference_time)
        self.decode_time.observe(request.decode_time)
        self.request_prompt_tokens.observe(request.num_prompt_tokens)
        self.request_generation_tokens.observe(request.num_generation_tokens)
        self.request_tpot.observe(request.mean_time_per_output_token)
        self.max_num_generation_tokens.observe(request.max_tokens_param)
        self.params_n.observe(1)
        self.params_max_tokens.observe(request.max_tokens_param)

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every series."""
        return generate_latest(self.registry)
