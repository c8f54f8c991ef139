"""Templates name catalog models; versions pin the entries they resolved to, configs carry them, publishes check."""

import json

import pytest
from django.urls import reverse

from controlplane.catalog.exceptions import ModelReferenceRefused
from controlplane.catalog.services import model_entry_create, model_entry_update
from controlplane.nodes.realtime import config_message
from controlplane.nodes.services.pools import pool_create, pool_publish, pool_rollback
from controlplane.params.exceptions import DocumentInvalid
from controlplane.params.models import TemplateVersion
from controlplane.params.selectors import template_versions_diff
from controlplane.params.services.templates import template_create, template_version_create
from engine_node.config import NodeConfig, content_hash

pytestmark = pytest.mark.django_db


def doc(**sections) -> dict:
    return {"inference_params": {"max_tokens": {"whitelist": []}, **sections}}


@pytest.fixture
def catalog(sre, admin_user):
    main = model_entry_create(actor=sre, name="qwen3-8b", source="/srv/models/qwen3-8b", revision="r1")
    draft = model_entry_create(actor=sre, name="qwen3-0.6b", source="/srv/models/qwen3-0.6b", is_draft_capable=True)
    custom = model_entry_create(actor=sre, name="custom", source="org/custom")
    model_entry_update(actor=admin_user, entry=custom, changes={"trust_remote_code": True}, reason="code reviewed")
    return {"main": main, "draft": draft, "custom": custom}


@pytest.fixture
def template(agent):
    return template_create(actor=agent, name="chat")


@pytest.mark.parametrize(
    ("sections", "path", "message"),
    [
        ({"engine": {"model": "evil-model"}}, "engine.model", "'evil-model' is not in the model catalog (registered: "),
        (
            {"speculative": {"enabled": True, "draft_model": "qwen3-8b"}},
            "speculative.draft_model",
            "'qwen3-8b' is not marked as a draft model in the catalog",
        ),
        (
            {"engine": {"model": "custom"}, "speculative": {"enabled": True, "draft_model": "qwen3-0.6b"}},
            "speculative.draft_model",
            "'qwen3-0.6b' is not allowed to run remote code, but vLLM would load it with 'custom'",
        ),
    ],
)
def test_saving_refuses_references_the_catalog_does_not_allow(agent, catalog, template, sections, path, message):
    with pytest.raises(DocumentInvalid) as refused:
        template_version_create(actor=agent, template=template, document=doc(**sections), base_number=None)
    assert any(e.path == path and e.message.startswith(message) for e in refused.value.errors), refused.value.errors
    assert not TemplateVersion.objects.exists()


def test_a_version_pins_the_entries_and_the_config_carries_them(agent, catalog, template):
    sections = {"engine": {"model": "qwen3-8b"}, "speculative": {"enabled": True, "draft_model": "qwen3-0.6b"}}
    version = template_version_create(actor=agent, template=template, document=doc(**sections), base_number=None)
    assert version.pinned_models == {
        "engine.model": catalog["main"].resolved(),
        "speculative.draft_model": catalog["draft"].resolved(),
    }
    message = json.loads(config_message(version)["text"])
    assert message["content"]["models"]["engine.model"]["source"] == "/srv/models/qwen3-8b"
    # The node verifies the hash over everything it runs, resolved entries included.
    node = NodeConfig.from_message(message)
    assert node.hash == version.content_hash == content_hash(message["content"])


def test_a_catalog_edit_reaches_nodes_only_with_a_new_version(agent, sre, catalog, template):
    v1 = template_version_create(
        actor=agent, template=template, document=doc(engine={"model": "qwen3-8b"}), base_number=None
    )
    hash_before = v1.content_hash
    model_entry_update(actor=sre, entry=catalog["main"], changes={"revision": "r2"}, reason="new weights")
    v1 = TemplateVersion.objects.get(pk=v1.pk)
    assert v1.content_hash == hash_before and v1.pinned_models["engine.model"]["revision"] == "r1"
    v2 = template_version_create(
        actor=agent, template=template, document=doc(engine={"model": "qwen3-8b"}), base_number=1
    )
    assert v2.pinned_models["engine.model"]["revision"] == "r2" and v2.content_hash != v1.content_hash
    changes = template_versions_diff(template=template, old_number=1, new_number=2)
    assert [(c.path, c.apply) for c in changes] == [("engine.model (catalog entry)", "cold")]
    assert (changes[0].old["revision"], changes[0].new["revision"]) == ("r1", "r2")


def test_publishing_checks_the_pinned_entries(agent, sre, admin_user, catalog, template):
    staging = pool_create(actor=sre, name="staging", is_production=False)
    trusted = template_version_create(
        actor=agent, template=template, document=doc(engine={"model": "custom"}), base_number=None
    )
    plain = template_version_create(actor=agent, template=template, document=doc(), base_number=1)
    pool_publish(actor=sre, pool=staging, version=trusted, reason="custom model")
    pool_publish(actor=sre, pool=staging, version=plain, reason="back to the node's own")
    # An admin withdraws the grant: the version that pinned it may not go out again, rollback included.
    model_entry_update(actor=admin_user, entry=catalog["custom"], changes={"trust_remote_code": False}, reason="cve")
    with pytest.raises(ModelReferenceRefused, match=r"^engine.model: 'custom' may no longer run remote code"):
        pool_rollback(actor=sre, pool=staging, reason="regression", version=trusted)
    # A version saved before the catalog (a free string, nothing pinned) is refused too.
    legacy = TemplateVersion.objects.create(
        template=template, number=3, author=agent, params={"engine": {"model": "/models/x"}}, pinned_models={}
    )
    with pytest.raises(ModelReferenceRefused, match=r"^engine.model: '/models/x' was saved without a catalog entry"):
        pool_publish(actor=sre, pool=staging, version=legacy, reason="old one")


def test_the_editor_names_unknown_models_while_typing(api_for, catalog):
    response = api_for("agent").post(
        reverse("api:document-validate"),
        {"document": doc(engine={"model": "qwen3-8b", "served_model_name": "--trust-remote-code"})},
        format="json",
    )
    assert response.json()["valid"] is False
    assert [e["path"] for e in response.json()["errors"]] == ["engine.served_model_name"]
    response = api_for("agent").post(
        reverse("api:document-validate"), {"document": doc(engine={"model": "qwen-8b"})}, format="json"
    )
    assert response.json()["errors"][0]["path"] == "engine.model"
    assert "not in the model catalog" in response.json()["errors"][0]["message"]
