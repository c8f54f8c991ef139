"""One running simulator: its settings, the engine built from them, and the faults currently injected."""

import logging
import os
import random
from dataclasses import dataclass

from aiohttp import web

from engine_node.simulator.gpu import SimulatedGpu
from engine_node.simulator.kvcache import BlockPool, PrefixCache
from engine_node.simulator.metrics import SimulatorMetrics
from engine_node.simulator.model import LatencyModel, SpeculativeConfig, SpeculativeSampler
from engine_node.simulator.profile import Faults, Profile
from engine_node.simulator.scheduler import Engine

VERSION = "0.32.0-simulated"
CRASH_EXIT_CODE = 70
logger = logging.getLogger("engine_node.simulator")


@dataclass(frozen=True)
class SimulatorSettings:
    """The vLLM server flags the simulator honours, after defaults and validation."""

    host: str
    port: int
    model: str
    served_model_names: list[str]
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    max_model_len: int
    quantization: str | None
    enable_prefix_caching: bool
    speculative: SpeculativeConfig | None
    seed: int
    log_requests: bool


def num_gpu_blocks(profile: Profile, gpu_memory_utilization: float) -> int:
    """KV blocks that fit: floor(kv_cache_bytes * gpu_memory_utilization / bytes_per_block)."""
    return int(profile.kv_cache_bytes * gpu_memory_utilization // profile.bytes_per_block)


class Simulator:
    """Everything the HTTP handlers share: settings, profile, engine, metrics and faults."""

    def __init__(self, settings: SimulatorSettings, profile: Profile) -> None:
        self.settings = settings
        self.profile = profile
        spec_tokens = settings.speculative.num_speculative_tokens if settings.speculative else 0
        self.metrics = SimulatorMetrics(settings.served_model_names[0], settings.max_model_len, spec_tokens)
        pool = BlockPool(
            num_gpu_blocks(profile, settings.gpu_memory_utilization),
            profile.block_size,
            profile.bytes_per_block,
            profile.fragmentation_floor,
        )
        self.metrics.cache_config_info(
            {
                "block_size": str(profile.block_size),
                "cache_dtype": "auto",
                "enable_prefix_caching": str(settings.enable_prefix_caching),
                "gpu_memory_utilization": str(settings.gpu_memory_utilization),
                "num_gpu_blocks": str(pool.num_blocks),
            }
        )
        self.engine = Engine(
            latency=LatencyModel(profile, settings.quantization, settings.speculative),
            pool=pool,
            prefix_cache=PrefixCache(pool.num_blocks, profile.block_size) if settings.enable_prefix_caching else None,
            sampler=SpeculativeSampler(profile.acceptance_rate, spec_tokens) if spec_tokens else None,
            speculative=settings.speculative,
            metrics=self.metrics,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            faults=profile.faults,
            gpu=SimulatedGpu(
                total_bytes=profile.kv_cache_bytes,
                reserved_share=settings.gpu_memory_utilization,
                leak_mb_per_s=lambda: self.engine.faults.memory_leak_mb_per_s,
            ),
        )
        self.metrics.gpu_utilization.set_function(self.engine.gpu.utilization)
        self.metrics.gpu_memory_used.set_function(self.engine.gpu.memory_used)
        self.engine.update_gauges()
        # Decides which requests an error_rate fault fails; seeded so a run can be replayed.
        self.fault_rng = random.Random(settings.seed)

    @property
    def faults(self) -> Faults:
        """The faults in force now."""
        return self.engine.faults

    def set_faults(self, faults: Faults) -> None:
        """Apply new faults (the caller carries out a crash fault, after it has answered)."""
        self.engine.faults = faults
        logger.warning("Faults now %s (simulated)", faults.as_dict())

    def should_fail(self) -> bool:
        """Whether an error_rate fault fails this request."""
        rate = self.faults.error_rate
        return rate > 0 and self.fault_rng.random() < rate


SIMULATOR = web.AppKey("simulator", Simulator)


def crash(reason: str = "simulated crash fault", exit_code: int = CRASH_EXIT_CODE) -> None:
    """Die like an engine whose worker segfaulted: no cleanup, by default exit code 70 (EX_SOFTWARE)."""
    logger.error("Engine core died: %s, exiting with code %d (simulated)", reason, exit_code)
    logging.shutdown()
    os._exit(exit_code)
