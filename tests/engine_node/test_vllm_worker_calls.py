"""On the vLLM CPU build with its multiprocess executor (the one tensor parallelism uses): a workers' call the agent
stopped waiting for leaves the engine serving, while the same call with an engine-side `timeout` kills it.

vLLM's MultiprocExecutor.collective_rpc takes `timeout` as the deadline of its wait for the workers' replies; past
it, it raises and leaves the replies in the response queue, where the next model step reads one as its output. On a
GPU a step in flight (async scheduling) is what makes the workers late; the CPU build schedules synchronously, so
here a worker method that answers late (a subclass of the agent's extension, written by the test) makes them late
the same way: the executor code that reads the replies is the same.

The same run checks that the extension finds the real worker's KV cache (`model_runner.kv_caches`).
"""

import asyncio
import json

import aiohttp
import pytest

from engine_node.fragmentation import WORKER_EXTENSION_DIR, EngineCallFailed, WorkerCalls
from tests.engine_node.conftest import VllmServerError

pytestmark = pytest.mark.vllm

LATE_S = 1.5
LATE_EXTENSION = f"""
import time

from engine_node_worker import FragmentationWorkerExtension


class LateWorkerExtension(FragmentationWorkerExtension):
    def late_stats(self):
        time.sleep({LATE_S})
        return self.fragmentation_stats()
"""


def kv_bytes_per_block(model_dir) -> int:
    """K and V, every layer, block_size tokens: what one KV block of the tiny model takes in bfloat16."""
    config = json.loads((model_dir / "config.json").read_text())
    heads = config.get("num_key_value_heads", config["num_attention_heads"])
    return 2 * config["num_hidden_layers"] * heads * config["head_dim"] * 2


def test_a_late_reply_never_reaches_a_model_step(start_vllm, tiny_model_dir, tmp_path):
    (tmp_path / "late_extension.py").write_text(LATE_EXTENSION)
    server = start_vllm(
        ["--distributed-executor-backend=mp", "--worker-extension-cls=late_extension.LateWorkerExtension"],
        env={"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": f"{tmp_path}:{WORKER_EXTENSION_DIR}"},
    )
    assert "multiproc_executor.py" in server.log_tail(400)  # the executor tensor parallelism runs on

    async def agent_side():
        http = aiohttp.ClientSession()
        calls = WorkerCalls(lambda: http)
        try:
            with pytest.raises(EngineCallFailed, match="no answer within"):
                await calls.call(server.base_url, "late_stats", 0.3)
            served = await asyncio.to_thread(server.chat, "hi", max_tokens=4)
            answered = await calls.call(server.base_url, "late_stats", 60)
            return served, answered
        finally:
            await calls.close()
            await http.close()

    served, answered = asyncio.run(agent_side())
    assert served["usage"]["completion_tokens"] == 4
    assert server.chat("and again", max_tokens=4)["usage"]["completion_tokens"] == 4
    [worker] = answered
    assert worker["device"] == "cpu" and worker["rank"] == 0 and worker["fragmentation"] is None
    assert worker["kv_blocks"] > 0
    assert worker["kv_cache_bytes"] == worker["kv_blocks"] * worker["block_size"] * kv_bytes_per_block(tiny_model_dir)

    # The same call with a timeout in the body, as the agent used to send it: the engine gives up on the workers,
    # their late reply is read by the next step as its output, and the engine core dies.
    status, text = server.request("POST", "/collective_rpc", {"method": "late_stats", "timeout": 0.3}, timeout=60)
    assert status != 200, text
    with pytest.raises(VllmServerError):
        server.chat("one more", max_tokens=4, timeout=60)
    # The step took the late fragmentation reply for its own output.
    assert "'dict' object has no attribute 'sampled_token_ids'" in server.log_tail(2000)
