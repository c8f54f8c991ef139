"""The audit log is append-only through every interface, and its filters and CSV export return the right rows."""

import csv
import io

import pytest
from django.contrib import admin
from django.db import DatabaseError, connection, transaction
from django.test import Client, RequestFactory

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry, AuditImmutable
from controlplane.audit.selectors import CSV_COLUMNS
from controlplane.nodes.services.pools import pool_create
from controlplane.params.services.templates import template_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def entries(agent, sre):
    """Three entries by two actors on two kinds of target, oldest first."""
    template_create(actor=agent, name="chat")
    pool_create(actor=sre, name="staging", is_production=False)
    template_create(actor=sre, name="mail")
    return list(AuditEntry.objects.order_by("id"))


def unchanged(entry: AuditEntry) -> bool:
    row = AuditEntry.objects.filter(pk=entry.pk).values("reason", "action", "actor_name").first()
    return row == {"reason": entry.reason, "action": entry.action, "actor_name": entry.actor_name}


def test_model_save_and_delete_raise(entries):
    entry = entries[0]
    entry.reason = "covering my tracks"
    with pytest.raises(AuditImmutable):
        entry.save()
    with pytest.raises(AuditImmutable):
        entry.delete()
    entry.refresh_from_db()
    assert entry.reason == ""
    assert AuditEntry.objects.count() == 3


def test_queryset_update_delete_and_bulk_update_raise(entries):
    with pytest.raises(AuditImmutable):
        AuditEntry.objects.filter(action="template.create").update(reason="x")
    with pytest.raises(AuditImmutable):
        AuditEntry.objects.all().delete()
    entries[0].reason = "x"
    # bulk_update opens its own atomic block; the savepoint keeps the test's transaction usable.
    with pytest.raises(AuditImmutable), transaction.atomic():
        AuditEntry.objects.bulk_update([entries[0]], ["reason"])
    assert AuditEntry.objects.count() == 3
    assert not AuditEntry.objects.exclude(reason="").exists()


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE audit_auditentry SET reason = 'rewritten'",
        "DELETE FROM audit_auditentry",
    ],
)
@pytest.mark.postgres
def test_postgres_trigger_refuses_raw_sql(entries, sql):
    assert connection.vendor == "postgresql"
    with (
        pytest.raises(DatabaseError, match="audit entries are append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert AuditEntry.objects.count() == 3
    assert all(unchanged(e) for e in entries)


def test_raw_insert_is_still_allowed(entries):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditentry (at, actor_name, request_id, action, target_type, target_id, target_repr,"
            " reason) VALUES (now(), 'system', '', 'system.note', 'x', '1', 'x', '')"
        )
    assert AuditEntry.objects.count() == 4


def test_django_admin_offers_no_add_change_or_delete(entries):
    superuser = User.objects.create_superuser(username="root", password="correct-horse-battery")
    model_admin = admin.site._registry[AuditEntry]
    request = RequestFactory().get("/admin/")
    request.user = superuser
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, entries[0])
    assert not model_admin.has_delete_permission(request, entries[0])
    assert model_admin.has_view_permission(request, entries[0])
    assert model_admin.get_actions(request) == {}

    client = Client()
    client.force_login(superuser)
    base = "/admin/audit/auditentry/"
    assert client.get(base).status_code == 200
    assert client.get(f"{base}add/").status_code == 403
    assert client.post(f"{base}add/", {"action": "forged"}).status_code == 403
    assert client.post(f"{base}{entries[0].pk}/change/", {"reason": "x"}).status_code == 403
    assert client.post(f"{base}{entries[0].pk}/delete/", {"post": "yes"}).status_code == 403
    bulk_delete = {"action": "delete_selected", "_selected_action": [entries[0].pk], "post": "yes"}
    # With no actions the list page just re-renders; the counts below prove nothing was deleted.
    assert client.post(base, bulk_delete).status_code == 200
    assert AuditEntry.objects.count() == 3
    assert all(unchanged(e) for e in entries)


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
@pytest.mark.parametrize("path", ["/api/v1/audit/", "/api/v1/audit/export.csv"])
def test_api_is_read_only_even_for_admins(entries, api_for, method, path):
    response = getattr(api_for("admin"), method)(path, {"action": "forged"}, format="json")
    assert response.status_code in (403, 405)
    assert AuditEntry.objects.count() == 3


def results(response) -> list[tuple[str, str]]:
    assert response.status_code == 200, response.content
    return [(e["actor"], e["action"]) for e in response.json()["results"]]


def test_list_is_newest_first(entries, api_for):
    assert results(api_for("oncall").get("/api/v1/audit/")) == [
        ("sre", "template.create"),
        ("sre", "pool.create"),
        ("agent", "template.create"),
    ]


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"actor": "agent"}, [("agent", "template.create")]),
        ({"action": "pool.create"}, [("sre", "pool.create")]),
        ({"target_type": "params.parametertemplate"}, [("sre", "template.create"), ("agent", "template.create")]),
        ({"actor": "sre", "action": "template.create"}, [("sre", "template.create")]),
        ({"target": "MAI"}, [("sre", "template.create")]),
        ({"actor": "nobody"}, []),
    ],
)
def test_filters(entries, api_for, params, expected):
    assert results(api_for("oncall").get("/api/v1/audit/", params)) == expected


def test_since_is_inclusive_and_until_exclusive(entries, api_for):
    middle = entries[1]
    client = api_for("oncall")
    since = results(client.get("/api/v1/audit/", {"since": middle.at.isoformat()}))
    until = results(client.get("/api/v1/audit/", {"until": middle.at.isoformat()}))
    both = results(
        client.get("/api/v1/audit/", {"since": entries[0].at.isoformat(), "until": entries[2].at.isoformat()})
    )
    assert since == [("sre", "template.create"), ("sre", "pool.create")]
    assert until == [("agent", "template.create")]
    assert both == [("sre", "pool.create"), ("agent", "template.create")]


def test_malformed_filter_is_a_400_naming_it(entries, api_for):
    response = api_for("oncall").get("/api/v1/audit/", {"since": "last tuesday"})
    assert response.status_code == 400
    assert response.json()["error"].startswith("since: ")
    assert response.json()["detail"][0]["path"] == "since"


def csv_rows(response) -> list[dict]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    text = b"".join(response.streaming_content).decode("utf-8")
    reader = csv.DictReader(io.StringIO(text))
    assert reader.fieldnames == CSV_COLUMNS
    return list(reader)


def test_csv_export_returns_the_filtered_rows(entries, api_for):
    rows = csv_rows(api_for("oncall").get("/api/v1/audit/export.csv", {"actor": "sre"}))
    assert [(r["actor"], r["action"], r["target"]) for r in rows] == [
        ("sre", "template.create", "mail"),
        ("sre", "pool.create", "staging"),
    ]
    assert rows[1]["after"] == '{"is_production": false, "name": "staging"}'
    assert rows[1]["before"] == "null"


def test_csv_export_unfiltered_has_every_row(entries, api_for):
    assert len(csv_rows(api_for("agent").get("/api/v1/audit/export.csv"))) == 3


def test_api_calls_record_the_request_id_header(api_for):
    response = api_for("sre").post(
        "/api/v1/pools/", {"name": "canary", "is_production": False}, format="json", HTTP_X_REQUEST_ID="req-abc.123"
    )
    assert response.status_code == 201
    assert response["X-Request-ID"] == "req-abc.123"
    assert AuditEntry.objects.get(action="pool.create").request_id == "req-abc.123"


def test_a_request_without_an_id_gets_a_generated_one(api_for):
    response = api_for("sre").post("/api/v1/pools/", {"name": "canary", "is_production": False}, format="json")
    generated = response["X-Request-ID"]
    assert len(generated) == 32
    assert AuditEntry.objects.get(action="pool.create").request_id == generated
