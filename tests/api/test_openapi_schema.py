"""The OpenAPI description: generated with warnings as errors, valid, complete, and with its errors documented."""

import re

import pytest
import yaml
from django.core.management import call_command
from drf_spectacular.drainage import GENERATOR_STATS

from controlplane import api_urls
from tests.api.test_authorization_matrix import implemented_methods

NOT_DESCRIBED = {"schema", "docs"}  # the description and its Swagger UI (SERVE_INCLUDE_SCHEMA is off)


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> dict:
    """`manage.py spectacular --validate --fail-on-warn`, as `make lint` runs it: any warning fails."""
    path = tmp_path_factory.mktemp("openapi") / "openapi.yaml"
    GENERATOR_STATS.reset()  # warnings of descriptions other tests generated in this process are theirs
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return yaml.safe_load(path.read_text())


def schema_path(route: str) -> str:
    """`templates/<slug:name>/versions/<int:pk>/` -> `/api/v1/templates/{name}/versions/{id}/`."""
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{" + ("id" if m[1] == "pk" else m[1]) + "}", route)
    return "/api/v1/" + path


def operations(schema: dict):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield f"{method.upper()} {path}", operation


def test_every_route_and_method_is_described(schema):
    routes = {
        f"{method} {schema_path(str(p.pattern))}"
        for p in api_urls.urlpatterns
        if p.name not in NOT_DESCRIBED
        for method in implemented_methods(p) - {"HEAD"}
    }
    assert routes == {name for name, _ in operations(schema)}


def test_every_operation_documents_its_errors_in_the_error_shape(schema):
    for name, operation in operations(schema):
        responses = operation["responses"]
        errors = {code: r for code, r in responses.items() if code.startswith(("4", "5"))}
        assert errors, f"{name} documents no error"
        if "security" not in operation or operation["security"] != [{}]:
            assert "401" in errors or name == "POST /api/v1/auth/token/", name
        if "requestBody" in operation:
            assert {"400", "413"} <= set(errors), name
        if "{" in name:
            assert "404" in errors, name
        for code, response in errors.items():
            assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}, (
                name,
                code,
            )


def test_documented_types_follow_the_data(schema):
    components = schema["components"]["schemas"]
    pool = components["Pool"]["properties"]
    assert pool["desired_version"]["allOf"] == [{"$ref": "#/components/schemas/VersionRef"}]
    assert pool["desired_version"]["nullable"] is True
    release = components["Release"]["properties"]
    assert release["version"] == {"$ref": "#/components/schemas/VersionRef"}
    assert components["Version"]["properties"]["base_version"]["nullable"] is True
    export = schema["paths"]["/api/v1/templates/{name}/versions/{number}/export/"]["get"]["responses"]["200"]
    assert set(export["content"]) == {"application/yaml", "application/json"}
    csv = schema["paths"]["/api/v1/audit/export.csv"]["get"]["responses"]["200"]
    assert set(csv["content"]) == {"text/csv"}
    # A StrictSerializer refuses unknown fields, and the description says so.
    assert components["TemplateCreateRequest"]["additionalProperties"] is False
    publish = schema["paths"]["/api/v1/pools/{name}/publish/"]["post"]
    assert set(publish["requestBody"]["content"]) == {"application/json"}
    assert "production_gate" in publish["responses"]["409"]["description"]
