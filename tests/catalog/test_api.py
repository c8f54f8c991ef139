"""The catalog's REST endpoints: roles, the trust_remote_code grant, and errors that name the field."""

import pytest
from django.urls import reverse

from controlplane.catalog.models import ModelEntry
from controlplane.catalog.services import model_entry_create
from tests.helpers import state_snapshot

pytestmark = pytest.mark.django_db


def test_an_sre_registers_and_edits_a_model(api_for):
    client = api_for("sre")
    response = client.post(
        reverse("api:model-list"),
        {"name": "tiny-draft", "source": "/srv/models/tiny-draft", "is_draft_capable": True},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["is_draft_capable"] is True
    response = client.patch(
        reverse("api:model-detail", args=["tiny-draft"]), {"revision": "v2", "reason": "retrained"}, format="json"
    )
    assert response.status_code == 200 and response.json()["revision"] == "v2"
    assert [m["name"] for m in api_for("agent").get(reverse("api:model-list")).json()["results"]] == ["tiny-draft"]


def test_trust_remote_code_is_refused_to_an_sre_and_granted_by_an_admin(api_for, sre):
    model_entry_create(actor=sre, name="custom", source="org/custom")
    before = state_snapshot()
    url = reverse("api:model-detail", args=["custom"])
    response = api_for("sre").patch(url, {"trust_remote_code": True, "reason": "needs it"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"].startswith("trust_remote_code: only an admin")
    response = api_for("sre").post(
        reverse("api:model-list"), {"name": "x", "source": "org/x", "trust_remote_code": True}, format="json"
    )
    assert response.status_code == 403
    assert state_snapshot() == before
    response = api_for("admin").patch(url, {"trust_remote_code": True, "reason": "code reviewed"}, format="json")
    assert response.status_code == 200 and response.json()["trust_remote_code"] is True


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"name": "evil", "source": "--trust-remote-code.x"}, "source"),
        ({"name": "-evil", "source": "org/evil"}, "name"),
        ({"name": "evil", "source": "org/evil", "revision": "-1"}, "revision"),
        ({"name": "evil", "source": "org/evil", "extra": 1}, "extra"),
    ],
)
def test_bad_registrations_get_400_naming_the_field(api_for, body, path):
    response = api_for("sre").post(reverse("api:model-list"), body, format="json")
    assert response.status_code == 400
    assert f"{path}:" in response.json()["error"], response.json()
    assert not ModelEntry.objects.exists()
