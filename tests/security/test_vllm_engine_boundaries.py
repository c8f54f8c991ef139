"""The trust boundary on the real vLLM CPU build: `--flag=value` argv, a scrubbed environment, a hostile push NACKed.

One agent (the session's, tests/engine_node/vllm_node.py) supervises real vLLM (the tiny test model) against a real
control plane. vLLM is started with every option as one `--flag=value` element and serves; its environment holds no
agent secret; then the report's template, resolved by a compromised control plane to exactly what was asked, is
pushed: the node NACKs naming the field and vLLM keeps serving on the same process and command line.
"""

from pathlib import Path

import pytest

from controlplane.lib import realtime
from controlplane.nodes.models import EngineNode
from controlplane.nodes.realtime import config_message
from controlplane.params.models import TemplateVersion
from controlplane.params.services.templates import template_create
from tests.engine_node.conftest import SERVED_MODEL_NAME
from tests.engine_node.fleet import engine_cmdline, flag_value, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vllm, pytest.mark.agents]

# Options vLLM takes without a value: the operator's --engine-arg=--enforce-eager, and the table's switches.
SWITCHES = {"--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching", "--trust-remote-code"}


def test_real_vllm_gets_one_element_per_option_no_secrets_and_survives_a_hostile_push(vllm_node, tiny_model_dir, sre):
    pool, node, token = vllm_node.pool, vllm_node.node, vllm_node.token
    agent = vllm_node.connect()
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).is_connected, 30, "the agent to connect")
    pid = agent.health()["engine_pid"]
    args = engine_cmdline(pid)
    options = args[args.index("vllm.entrypoints.openai.api_server") + 1 :]
    assert all(opt in SWITCHES or (opt.startswith("--") and "=" in opt) for opt in options), options
    assert flag_value(options, "--model") == str(tiny_model_dir)
    assert flag_value(options, "--served-model-name") == SERVED_MODEL_NAME
    wait_until(lambda: agent.health()["status"] == "online", 120, "the start-up warmup to end")
    assert agent.chat("Where is my order?")[0] == 200

    environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    assert token not in environ and "ENGINE_NODE_" not in environ
    assert "VLLM_CPU_KVCACHE_SPACE=1" in environ.split("\0")

    template = template_create(actor=sre, name="forged")
    hostile = {"model": "--trust-remote-code.x", "served_model_name": "attacker-org/evil-model"}
    pinned = {
        "engine.model": {
            "name": "--trust-remote-code.x",
            "source": "--trust-remote-code.x",
            "tokenizer": "",
            "revision": "",
            "tokenizer_revision": "",
            "trust_remote_code": False,
            "is_draft_capable": False,
        }
    }
    forged = TemplateVersion.objects.create(
        template=template, number=1, author=sre, params={"engine": hostile}, pinned_models=pinned
    )
    realtime.send([realtime.agents_group(pool.name)], config_message(forged))
    wait_until(lambda: EngineNode.objects.get(pk=node.pk).last_nack_hash == forged.content_hash, 60, "the NACK")
    assert EngineNode.objects.get(pk=node.pk).last_nack_error.startswith(
        "engine.model: '--trust-remote-code.x' starts with '-'"
    )
    assert agent.health()["engine_pid"] == pid and engine_cmdline(pid) == args
    assert agent.chat("退货怎么操作？")[0] == 200
