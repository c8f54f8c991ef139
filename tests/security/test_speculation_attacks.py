"""Attacks on the speculative-decoding rule: a hostile agent's lease requests, people sending the rule's
operations, and template values meant to smuggle text onto the engine's command line."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.nodes.models import NodeCommand
from controlplane.nodes.services.speculation import speculation_lease_request
from engine_node.config import ConfigRejected, NodeConfig, content_hash, engine_args
from engine_node.settings import AgentSettings
from tests.nodes.test_cleanup_services import staging  # noqa: F401 (fixture)

SETTINGS = AgentSettings(
    control_plane_url="", token="", node_name="n1", backend="simulator", model="m", served_model_name=""
)


@pytest.mark.django_db
def test_a_hostile_agent_cannot_inject_an_action_or_unbounded_text(staging):  # noqa: F811
    _, (gpu1, *_) = staging
    for action in ("restart", "off\n", "OFF", None, ["off"]):
        command, refusal = speculation_lease_request(node_id=gpu1.pk, action=action, reason="x", state={})
        assert command is None and refusal.startswith("action: must be off or on")
    assert not NodeCommand.objects.exists()

    state = {"state": {"nested": "x" * 10**6}, "last_change": "y" * 10**6, "tokens_per_s": float("inf"), "z": 1}
    command, _ = speculation_lease_request(node_id=gpu1.pk, action="off", reason="r" * 10**6, state=state)
    assert len(command.reason) <= len("automatic: ") + 1000
    figures = AuditEntry.objects.get(action="node.speculation_off").after["figures"]
    assert set(figures) == {"last_change"} and len(figures["last_change"]) == 500  # infinity and unknown keys dropped


@pytest.mark.django_db
def test_people_cannot_order_the_rules_restarts(api_for, staging):  # noqa: F811
    for op in ("speculation_off", "speculation_on"):
        response = api_for("sre").post("/api/v1/nodes/gpu-1/commands/", {"op": op, "reason": "x"}, format="json")
        assert response.status_code == 400, response.content
    assert not NodeCommand.objects.exists()


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"prompt_lookup_max": "4,--trust-remote-code"}, "speculative.prompt_lookup_max"),
        ({"prompt_lookup_min": 1.5}, "speculative.prompt_lookup_min"),
        ({"disable_above_batch_size": "8 --trust-remote-code"}, "speculative.disable_above_batch_size"),
        ({"disable_above_batch_size": -1}, "speculative.disable_above_batch_size"),
        ({"num_speculative_tokens": 10**9}, "speculative.num_speculative_tokens"),
    ],
)
def test_a_pushed_config_cannot_smuggle_text_into_the_speculative_config(spec, field):
    content = {
        "engine": {"max_num_seqs": 4},
        "speculative": {"enabled": True, "method": "ngram", "num_speculative_tokens": 3, **spec},
        "models": {},
    }
    config = NodeConfig.from_message({"version": None, "hash": content_hash(content), "content": content})
    with pytest.raises(ConfigRejected, match=f"^{field}: "):
        engine_args(config, SETTINGS)
