"""Template → code execution on GPU hosts (issue: "Close the trust boundaries", item 1).

The report's attack: a template author saves `engine.model: "--trust-remote-code.x"` and
`engine.served_model_name: "attacker-org/evil-model"`; one ordinary publish later the node ran
`vllm ... --model --trust-remote-code.x --served-model-name attacker-org/evil-model`, which vLLM 0.32 reads
as trust_remote_code=True, model=attacker-org/evil-model. Free strings could also name any weights or path.

Refused at save (the API names the field), and refused by the agent when a config that bypassed the control
plane's validation is pushed anyway over the real control link: NACK naming the field, the engine keeps serving
and its command line never carries the hostile value as a flag.
"""

import shutil

import pytest
from django.urls import reverse

from controlplane.catalog.models import ModelEntry
from controlplane.catalog.services import model_entry_create
from controlplane.lib import realtime
from controlplane.nodes.models import EngineNode, Pool
from controlplane.nodes.realtime import config_message
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_create, pool_publish
from controlplane.params.models import ParameterTemplate, TemplateVersion
from controlplane.params.services.templates import template_create, template_version_create
from tests.engine_node.fleet import FAST_PROFILE, AgentProcess, engine_cmdline, flag_value, wait_until
from tests.helpers import state_snapshot
from tests.live_server import Daphne

HOSTILE = {"model": "--trust-remote-code.x", "served_model_name": "attacker-org/evil-model"}


def versions_url(name: str) -> str:
    return reverse("api:template-version-list", args=[name])


@pytest.mark.django_db
def test_a_template_author_cannot_save_a_model_that_reads_like_a_flag(api_for, agent):
    template_create(actor=agent, name="chat")
    before = state_snapshot()
    cases = [
        ({"engine": HOSTILE}, "engine.model", "must name a model catalog entry"),
        ({"engine": {"model": "attacker-org/evil-model"}}, "engine.model", "must name a model catalog entry"),
        ({"engine": {"model": "evil-model"}}, "engine.model", "is not in the model catalog"),
        ({"engine": {"served_model_name": "--trust-remote-code"}}, "engine.served_model_name", "must be 1-128"),
        ({"engine": {"tokenizer": "--trust-remote-code.x"}}, "engine.tokenizer", "no longer a template field"),
        (
            {"speculative": {"enabled": True, "draft_model": "/root/.ssh"}},
            "speculative.draft_model",
            "must name a model catalog entry",
        ),
    ]
    for params, path, message in cases:
        body = {"base_version": None, "document": {"inference_params": params}}
        response = api_for("agent").post(versions_url("chat"), body, format="json")
        assert response.status_code == 400, response.content
        errors = {e["path"]: e["message"] for e in response.json()["detail"]}
        assert message in errors.get(path, ""), (path, response.json())
    # A template author cannot put a model into the catalog either.
    response = api_for("agent").post(
        reverse("api:model-list"), {"name": "evil", "source": "attacker-org/evil-model"}, format="json"
    )
    assert response.status_code == 403
    assert state_snapshot() == before


def forge(template: ParameterTemplate, author, number: int, params: dict, pinned: dict) -> TemplateVersion:
    """A version written straight into the database: what a compromised control plane could push."""
    return TemplateVersion.objects.create(
        template=template, number=number, author=author, params=params, pinned_models=pinned
    )


def entry(name: str, source: str, **extra) -> dict:
    values = {"tokenizer": "", "revision": "", "tokenizer_revision": "", "trust_remote_code": False}
    return {"name": name, "source": source, **values, "is_draft_capable": False, **extra}


@pytest.fixture
def models_dir(tmp_path, tiny_model_dir, tiny_draft_model_dir):
    """The node's model directory: the tiny pair, a draft whose tokenizer differs, and a link that leaves it."""
    root = tmp_path / "models"
    shutil.copytree(tiny_model_dir, root / "tiny")
    shutil.copytree(tiny_draft_model_dir, root / "tiny-draft")
    shutil.copytree(tiny_draft_model_dir, root / "tiny-draft-other")
    tokenizer = root / "tiny-draft-other" / "tokenizer_config.json"
    tokenizer.write_text(tokenizer.read_text().replace("{", '{"model_max_length": 64, ', 1))
    (tmp_path / "outside").mkdir()
    shutil.copytree(tiny_model_dir, tmp_path / "outside" / "tiny")
    (root / "escape").symlink_to(tmp_path / "outside" / "tiny")
    return root


@pytest.mark.agents
@pytest.mark.django_db(transaction=True)
def test_the_agent_refuses_hostile_configs_pushed_past_the_control_planes_checks(tmp_path, sre, models_dir):
    profile = tmp_path / "fast.yaml"
    profile.write_text(FAST_PROFILE)
    server = Daphne(tmp_path)
    server.start()
    pool = pool_create(actor=sre, name="gpu", is_production=False)
    node, token = node_create(actor=sre, name="gpu-1", pool=pool)
    agent = AgentProcess(
        name=node.name,
        token=token,
        control_plane_url=server.ws_agent_url,
        work=tmp_path,
        backend_args=[
            "--backend", "simulator", "--simulator-profile", str(profile), "--model-dir", str(models_dir),
            "--allow-model", "Qwen/Qwen3-0.6B",
        ],
    )  # fmt: skip
    try:
        agent.start()
        wait_until(lambda: EngineNode.objects.get(pk=node.pk).is_connected, 30, "the agent to connect")
        # A legitimate version first, through the real services: the catalog's tiny pair as main and draft model.
        model_entry_create(actor=sre, name="tiny", source=str(models_dir / "tiny"))
        model_entry_create(actor=sre, name="tiny-draft", source=str(models_dir / "tiny-draft"), is_draft_capable=True)
        template = template_create(actor=sre, name="chat")
        document = {
            "inference_params": {
                "max_tokens": {"whitelist": []},
                "engine": {"model": "tiny", "served_model_name": "tiny"},
                "speculative": {"enabled": True, "method": "draft_model", "draft_model": "tiny-draft"},
            }
        }
        good = template_version_create(actor=sre, template=template, document=document, base_number=None)
        pool_publish(actor=sre, pool=pool, version=good, reason="the tiny pair")
        wait_until(lambda: EngineNode.objects.get(pk=node.pk).applied_hash == good.content_hash, 60, "ACK")
        wait_until(lambda: agent.health()["status"] == "online", 60, "the node to serve")
        pid = agent.health()["engine_pid"]
        args = engine_cmdline(pid)
        assert flag_value(args, "--model") == str(models_dir / "tiny")
        assert '"model":"' + str(models_dir / "tiny-draft") + '"' in flag_value(args, "--speculative-config")
        agent.model = "tiny"

        forged = template_create(actor=sre, name="forged")
        base = dict(document["inference_params"])
        tiny, draft = entry("tiny", str(models_dir / "tiny")), entry("tiny-draft", str(models_dir / "tiny-draft"))
        cases = [
            # The report's template, and the same with the control plane resolving it to whatever was asked.
            (
                {"engine": HOSTILE},
                {},
                "engine.model: '--trust-remote-code.x' starts with '-'",
            ),
            (
                {"engine": HOSTILE},
                {"engine.model": entry("--trust-remote-code.x", "--trust-remote-code.x")},
                "engine.model: '--trust-remote-code.x' starts with '-'",
            ),
            (
                {"engine": {"model": "tiny", "served_model_name": "--trust-remote-code"}},
                {"engine.model": tiny},
                "engine.served_model_name: '--trust-remote-code' starts with '-'",
            ),
            # Weights the operator never allowed: a repo id, a path outside the model directory, a link out of it.
            (
                {"engine": {"model": "evil"}},
                {"engine.model": entry("evil", "attacker-org/evil-model")},
                "engine.model: 'attacker-org/evil-model' is not allowed on this node",
            ),
            (
                {"engine": {"model": "evil"}},
                {"engine.model": entry("evil", str(tmp_path / "outside" / "tiny"))},
                "is not allowed on this node",
            ),
            (
                {"engine": {"model": "evil"}},
                {"engine.model": entry("evil", str(models_dir / "escape"))},
                "is not allowed on this node",
            ),
            (
                {"engine": {"model": "evil"}},
                {"engine.model": entry("evil", str(models_dir / "tiny" / ".." / ".." / "outside" / "tiny"))},
                "is not allowed on this node",
            ),
            # Remote code the node's operator did not allow.
            (
                {"engine": {"model": "tiny"}},
                {"engine.model": {**tiny, "trust_remote_code": True}},
                "engine.model: 'tiny' needs trust_remote_code, which this node does not allow",
            ),
            # A draft whose tokenizer files differ from the main model's, and one the catalog never marked a draft.
            (
                {**base, "speculative": {"enabled": True, "method": "draft_model", "draft_model": "tiny-draft-other"}},
                {
                    "engine.model": tiny,
                    "speculative.draft_model": entry(
                        "tiny-draft-other", str(models_dir / "tiny-draft-other"), is_draft_capable=True
                    ),
                },
                "speculative.draft_model: 'tiny-draft-other' does not share the tokenizer of the main model 'tiny': "
                "tokenizer_config.json differ",
            ),
            (
                base,
                {"engine.model": tiny, "speculative.draft_model": {**draft, "is_draft_capable": False}},
                "speculative.draft_model: 'tiny-draft' is not marked as a draft model",
            ),
        ]
        for number, (params, pinned, nack) in enumerate(cases, start=1):
            version = forge(forged, sre, number, params, pinned)
            realtime.send([realtime.agents_group(pool.name)], config_message(version))
            wait_until(
                lambda v=version: EngineNode.objects.get(pk=node.pk).last_nack_hash == v.content_hash,
                30,
                f"the NACK of case {number}",
            )
            node_row = EngineNode.objects.get(pk=node.pk)
            assert node_row.last_nack_error.startswith(nack) or nack in node_row.last_nack_error, (
                number,
                node_row.last_nack_error,
            )
            # Still the good version, on the same engine process, serving; no hostile value in its argv.
            assert node_row.applied_hash == good.content_hash
            assert agent.health()["engine_pid"] == pid and agent.health()["status"] == "online"
            assert agent.chat("Where is my order?")[0] == 200
            args = engine_cmdline(pid)
            assert not any(arg.startswith("--trust-remote-code") for arg in args), args
            assert "attacker-org/evil-model" not in " ".join(args)
        assert Pool.objects.get(pk=pool.pk).desired_version_id == good.pk
        assert ModelEntry.objects.count() == 2
    finally:
        agent.stop()
        server.stop()
