"""Registering and editing catalog models: values checked field by field, trust_remote_code for admins only."""

import pytest

from controlplane.audit.models import AuditEntry
from controlplane.catalog.models import ModelEntry
from controlplane.catalog.services import model_entry_create, model_entry_update
from controlplane.lib.errors import Conflict, Forbidden, InvalidField

pytestmark = pytest.mark.django_db


def test_an_sre_registers_a_model_and_the_audit_log_holds_it(sre):
    entry = model_entry_create(
        actor=sre, name="qwen3-8b", source="Qwen/Qwen3-8B", revision="a" * 40, is_draft_capable=False
    )
    assert entry.resolved() == {
        "name": "qwen3-8b",
        "source": "Qwen/Qwen3-8B",
        "tokenizer": "",
        "revision": "a" * 40,
        "tokenizer_revision": "",
        "trust_remote_code": False,
        "is_draft_capable": False,
    }
    audit = AuditEntry.objects.get(action="model.create")
    assert audit.actor_name == "sre" and audit.after["source"] == "Qwen/Qwen3-8B"


@pytest.mark.parametrize(
    ("values", "field", "message"),
    [
        ({"name": "--trust-remote-code.x"}, "name", "must be 1-64 lowercase letters"),
        ({"name": "Qwen3"}, "name", "must be 1-64 lowercase letters"),
        ({"source": "--trust-remote-code"}, "source", "starts with '-'"),
        ({"source": "-x"}, "source", "starts with '-'"),
        ({"source": "/srv/models/../../etc"}, "source", "must be an absolute path on the nodes"),
        ({"source": "a/b/c"}, "source", "must be an absolute path"),
        ({"source": "/srv/models/qwen\n--trust-remote-code"}, "source", "control characters"),
        ({"tokenizer": "--x"}, "tokenizer", "starts with '-'"),
        ({"revision": "--x"}, "revision", "starts with '-'"),
        ({"revision": "main..other"}, "revision", "must be a branch, tag or commit id"),
        ({"tokenizer_revision": "a b"}, "tokenizer_revision", "must be a branch, tag or commit id"),
        ({"is_draft_capable": "yes"}, "is_draft_capable", "must be true or false"),
    ],
)
def test_bad_values_are_refused_naming_the_field(sre, values, field, message):
    arguments = {"name": "qwen3-8b", "source": "/srv/models/qwen3-8b", **values}
    with pytest.raises(InvalidField, match=f"^{field}: .*{message}") as refused:
        model_entry_create(actor=sre, **arguments)
    assert refused.value.detail[0]["path"] == field
    assert not ModelEntry.objects.exists() and not AuditEntry.objects.exists()


def test_names_are_unique(sre):
    model_entry_create(actor=sre, name="tiny", source="/srv/models/tiny")
    with pytest.raises(Conflict, match="name: a model named 'tiny' is already in the catalog"):
        model_entry_create(actor=sre, name="tiny", source="/srv/models/other")


def test_only_an_admin_decides_trust_remote_code(sre, admin_user):
    with pytest.raises(Forbidden, match=r"^trust_remote_code: only an admin"):
        model_entry_create(actor=sre, name="custom", source="org/custom", trust_remote_code=True)
    assert not ModelEntry.objects.exists()
    entry = model_entry_create(actor=sre, name="custom", source="org/custom")
    with pytest.raises(Forbidden, match=r"^trust_remote_code"):
        model_entry_update(actor=sre, entry=entry, changes={"trust_remote_code": True}, reason="needs it")
    entry = model_entry_update(actor=admin_user, entry=entry, changes={"trust_remote_code": True}, reason="reviewed")
    assert entry.trust_remote_code
    # Taking it back is the admin's decision as well.
    with pytest.raises(Forbidden):
        model_entry_update(actor=sre, entry=entry, changes={"trust_remote_code": False}, reason="not needed")
    # An SRE's edit of other fields leaves the grant as it is.
    entry = model_entry_update(
        actor=sre, entry=entry, changes={"revision": "v2", "trust_remote_code": True}, reason="r"
    )
    assert entry.revision == "v2" and entry.trust_remote_code


def test_an_edit_records_what_changed_and_why(sre):
    entry = model_entry_create(actor=sre, name="tiny", source="/srv/models/tiny")
    model_entry_update(
        actor=sre, entry=entry, changes={"revision": "v2", "source": "/srv/models/tiny"}, reason="retrained"
    )
    audit = AuditEntry.objects.get(action="model.update")
    assert (audit.before, audit.after, audit.reason) == ({"revision": ""}, {"revision": "v2"}, "retrained")
    with pytest.raises(InvalidField, match=r"^changes: nothing to change"):
        model_entry_update(actor=sre, entry=entry, changes={"revision": "v2"}, reason="again")
    with pytest.raises(InvalidField, match=r"^name: cannot be changed"):
        model_entry_update(actor=sre, entry=entry, changes={"name": "other"}, reason="rename")
    with pytest.raises(InvalidField, match=r"^reason: required"):
        model_entry_update(actor=sre, entry=entry, changes={"revision": "v3"}, reason=" ")
    assert ModelEntry.objects.get(name="tiny").revision == "v2"
