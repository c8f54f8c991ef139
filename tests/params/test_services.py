"""Template and whitelist services: numbering, stale bases, immutability, import/export and hashes."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.params import codec, schema
from controlplane.params.diff import needs_restart, params_diff
from controlplane.params.exceptions import DocumentInvalid, StaleBaseVersion
from controlplane.params.models import ParameterTemplate, TemplateVersion, WhitelistVersion
from controlplane.params.services.templates import (
    document_validate,
    template_create,
    template_import,
    template_version_create,
    template_version_export,
)
from controlplane.params.services.whitelists import whitelist_create, whitelist_version_create
from tests.factories import legal_whitelist, template_with_versions

pytestmark = pytest.mark.django_db


def strict(value: float) -> dict:
    return {"inference_params": {"temperature": {"strict": value}, "max_tokens": {"whitelist": []}}}


def test_template_names_must_be_slugs_and_unique(sre):
    template_create(actor=sre, name="chat")
    with pytest.raises(Conflict, match="name: a template named 'chat' already exists"):
        template_create(actor=sre, name="chat")
    with pytest.raises(InvalidField, match="name: must be 1-64 lowercase"):
        template_create(actor=sre, name="Chat Default")
    assert list(ParameterTemplate.objects.values_list("name", flat=True)) == ["chat"]


def test_versions_are_numbered_per_template(agent):
    _, chat = template_with_versions(agent, "chat", temperatures=(0.3, 0.2, 0.1))
    _, mail = template_with_versions(agent, "mail", temperatures=(0.3, 0.25))
    assert [v.number for v in chat] == [1, 2, 3]
    assert [v.number for v in mail] == [1, 2]
    assert [v.base_number for v in chat] == [None, 1, 2]
    assert ParameterTemplate.objects.get(name="chat").latest_number == 3


def test_stale_base_version_is_refused_with_the_current_version(agent, sre):
    template, (_, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    with pytest.raises(StaleBaseVersion) as caught:
        template_version_create(actor=sre, template=template, document=strict(0.1), base_number=1)
    current = caught.value.detail["current_version"]
    assert current["number"] == 2
    assert current["author"] == "agent"
    assert current["document"] == v2.document
    assert caught.value.status_code == 409
    assert TemplateVersion.objects.filter(template=template).count() == 2


def test_first_version_must_not_name_a_base(agent):
    template = template_create(actor=agent, name="chat")
    with pytest.raises(StaleBaseVersion, match="latest is 0"):
        template_version_create(actor=agent, template=template, document=strict(0.3), base_number=1)
    assert template_version_create(actor=agent, template=template, document=strict(0.3), base_number=0).number == 1


def test_invalid_document_stores_nothing_and_names_every_field(agent):
    template = template_create(actor=agent, name="chat")
    entries = AuditEntry.objects.count()
    bad = {"inference_params": {"temperature": {"strict": 5}, "batch": {"max_size": "8"}}}
    with pytest.raises(DocumentInvalid) as caught:
        template_version_create(actor=agent, template=template, document=bad, base_number=None)
    assert [e.path for e in caught.value.errors] == ["temperature.strict", "batch.max_size"]
    assert str(caught.value) == "document is invalid: temperature.strict: must be between 0 and 2, got 5"
    assert TemplateVersion.objects.count() == 0
    assert AuditEntry.objects.count() == entries
    template.refresh_from_db()
    assert template.latest_number == 0


def test_whitelist_references_must_exist(agent):
    with pytest.raises(DocumentInvalid) as caught:
        document_validate(document={"inference_params": {}})
    assert [str(e) for e in caught.value.errors] == ["max_tokens.whitelist[0]: unknown whitelist 'legal'"]
    legal_whitelist(agent)
    assert document_validate(document={"inference_params": {}}) == {}
    with pytest.raises(DocumentInvalid, match=r"max_tokens.whitelist\[1\]: unknown whitelist 'vip'"):
        document_validate(document={"inference_params": {"max_tokens": {"whitelist": ["legal", "vip"]}}})


def test_saved_versions_are_immutable(agent):
    _, (v1,) = template_with_versions(agent)
    v1.comment = "rewritten history"
    with pytest.raises(DocumentInvalid, match="versions are immutable"):
        v1.save()
    assert TemplateVersion.objects.get(pk=v1.pk).comment == "v1"
    whitelist = legal_whitelist(agent)
    first = whitelist.versions.get()
    first.scenarios = ["anything"]
    with pytest.raises(DocumentInvalid, match="versions are immutable"):
        first.save()
    assert WhitelistVersion.objects.get(pk=first.pk).scenarios == ["legal", "legal_policy"]


def test_content_hash_depends_only_on_effective_parameters(agent):
    template, (explicit_default, other, empty_like) = template_with_versions(agent, temperatures=(0.3, 0.2, 0.3))
    assert len(explicit_default.content_hash) == 64
    # Spelling out a default value does not change what the node runs, so the hash is the same.
    assert explicit_default.content_hash == empty_like.content_hash
    assert explicit_default.content_hash != other.content_hash
    reloaded = TemplateVersion.objects.get(pk=explicit_default.pk)
    assert reloaded.content_hash == explicit_default.content_hash
    with_defaults_omitted = template_version_create(
        actor=agent,
        template=template,
        document={"inference_params": {"max_tokens": {"whitelist": []}}},
        base_number=3,
    )
    assert with_defaults_omitted.content_hash == explicit_default.content_hash


def test_diff_lists_changed_fields_with_their_apply_tag(agent):
    _, (v1, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    assert [c.as_dict() for c in params_diff(v1.effective_params, v2.effective_params)] == [
        {"path": "temperature.strict", "old": 0.3, "new": 0.2, "apply": "hot"}
    ]
    assert not needs_restart(params_diff(v1.effective_params, v2.effective_params))
    cold = schema.effective({"engine": {"max_num_seqs": 32}})
    changes = params_diff(v1.effective_params, cold)
    assert {"path": "engine.max_num_seqs", "old": 64, "new": 32, "apply": "cold"} in [c.as_dict() for c in changes]
    assert needs_restart(changes)


def test_import_keeps_the_exact_text_and_exports_it_unchanged(agent, seed_yaml):
    legal_whitelist(agent)
    template = template_create(actor=agent, name="seed")
    version = template_import(actor=agent, template=template, text=seed_yaml.encode(), fmt="yaml", base_number=None)
    assert version.comment == "imported from YAML"
    assert template_version_export(version=version, fmt="yaml") == seed_yaml
    # The other format is generated from the parameters, in schema order.
    exported_json = template_version_export(version=version, fmt="json")
    assert codec.parse(exported_json, "json") == codec.parse(seed_yaml, "yaml")


def test_export_of_an_edited_version_is_in_schema_order(agent):
    template = template_create(actor=agent, name="chat")
    document = {
        "inference_params": {
            "max_tokens": {"default": 256, "streaming_threshold": 200, "whitelist": []},
            "temperature": {"strict": 0.3, "normal": 0.7, "creative": 0.9},
            "batch": {"min_size": 2, "max_size": 8, "timeout_ms": 50},
        }
    }
    version = template_version_create(actor=agent, template=template, document=document, base_number=None)
    version = TemplateVersion.objects.get(pk=version.pk)
    assert template_version_export(version=version, fmt="yaml") == (
        "inference_params:\n"
        "  max_tokens:\n"
        "    default: 256\n"
        "    streaming_threshold: 200\n"
        "    whitelist: []\n"
        "  temperature:\n"
        "    strict: 0.3\n"
        "    normal: 0.7\n"
        "    creative: 0.9\n"
        "  batch:\n"
        "    min_size: 2\n"
        "    max_size: 8\n"
        "    timeout_ms: 50\n"
    )


def test_export_refuses_an_unknown_format(agent):
    _, (v1,) = template_with_versions(agent)
    with pytest.raises(DocumentInvalid, match="format: must be one of yaml, json"):
        template_version_export(version=v1, fmt="xml")


def test_version_audit_entry_holds_before_and_after(agent):
    _, (v1, v2) = template_with_versions(agent, temperatures=(0.3, 0.2))
    entry = AuditEntry.objects.get(action="template.version_create", target_id=str(v2.pk))
    assert entry.before == v1.params
    assert entry.after == v2.params
    assert entry.reason == "v2"
    assert entry.target_repr == "chat v2"


def test_whitelist_versions_follow_their_base(agent, sre):
    whitelist = whitelist_create(actor=agent, name="vip", scenarios=["vip"])
    version = whitelist_version_create(actor=sre, whitelist=whitelist, scenarios=["vip", "gold"], base_number=1)
    assert version.number == 2
    with pytest.raises(StaleBaseVersion) as caught:
        whitelist_version_create(actor=agent, whitelist=whitelist, scenarios=["x"], base_number=1)
    assert caught.value.detail == {"current_version": 2, "scenarios": ["vip", "gold"]}
    assert list(whitelist.versions.values_list("number", flat=True)) == [2, 1]


@pytest.mark.parametrize(
    ("scenarios", "expected"),
    [
        ("legal", "scenarios: must be a list of names"),
        (["Legal"], "scenarios[0]: must be a lowercase name"),
        (["a", "a"], "scenarios: must not list a name twice"),
        ([f"s{i}" for i in range(501)], "scenarios: must hold at most 500 names"),
    ],
)
def test_whitelist_scenarios_are_validated(agent, scenarios, expected):
    with pytest.raises(DocumentInvalid) as caught:
        whitelist_create(actor=agent, name="vip", scenarios=scenarios)
    assert str(caught.value.errors[0]).startswith(expected)
    assert not AuditEntry.objects.filter(action="whitelist.create").exists()


def test_whitelist_names_are_unique(agent):
    legal_whitelist(agent)
    with pytest.raises(Conflict, match="name: a whitelist named 'legal' already exists"):
        legal_whitelist(agent)
