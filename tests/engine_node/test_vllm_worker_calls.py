"""One vLLM server on the CPU build with its multiprocess executor (the one tensor parallelism uses), for two tests in
this order: it serves the generated tiny model's chat and exports its metrics; and a workers' call the agent stopped
waiting for leaves the engine serving, while the same call with an engine-side `timeout` kills it (that test ends the
server). One start instead of two: a vLLM start costs ~30 s of both cores.

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
from tests.engine_node.conftest import SERVED_MODEL_NAME, VllmServerError, metric_value

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


@pytest.fixture(scope="module")
def server(start_module_vllm, tmp_path_factory):
    """The module's server: the defaults, the multiprocess executor and the late worker extension, in dev mode."""
    work = tmp_path_factory.mktemp("vllm-late")
    (work / "late_extension.py").write_text(LATE_EXTENSION)
    return start_module_vllm(
        ["--distributed-executor-backend=mp", "--worker-extension-cls=late_extension.LateWorkerExtension"],
        env={"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": f"{work}:{WORKER_EXTENSION_DIR}"},
    )


def test_tiny_model_serves_chat_and_exports_metrics(server):
    before = server.metrics()
    assert metric_value(before, "vllm:num_requests_running") is not None
    generated_before = metric_value(before, "vllm:generation_tokens_total")
    assert generated_before is not None

    # ignore_eos: a random-weight model may pick EOS first; this makes the token count exact.
    reply = server.chat("我的订单到哪里了？ Where is my order?", max_tokens=8, temperature=0, ignore_eos=True)
    assert reply["model"] == SERVED_MODEL_NAME
    choice = reply["choices"][0]
    assert choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 8

    after = server.metrics()
    assert metric_value(after, "vllm:num_requests_running") == 0
    assert metric_value(after, "vllm:generation_tokens_total") >= generated_before + 8


def test_a_late_reply_never_reaches_a_model_step(server, tiny_model_dir):
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
