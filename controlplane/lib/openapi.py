"""The OpenAPI description's house rules: every operation lists the errors it can answer, in the one error shape.

`AutoSchema` adds, to what a view declares with `extend_schema`, the statuses that follow from the view itself:
400 and 413 where there is input, 401 and 403 from its permissions (403 where one of them says it `may_refuse` a
signed-in caller: controlplane/accounts/permissions.py), 404 from path parameters and pagination, 429 from
throttles. Statuses that come from the domain (404 for a name in the body, 409) are declared per view with
`not_found(...)` and `conflict(...)`, so their description says when they happen.
"""

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from controlplane.lib.serializers import StrictSerializer


class ErrorSerializer(serializers.Serializer):
    """Every error body (controlplane.lib.api_errors)."""

    error = serializers.CharField(help_text="One line for people: names the field and the problem where there is one.")
    code = serializers.CharField(
        required=False,
        help_text="Stable name of a domain refusal that clients branch on (e.g. `stale_base_version`, "
        "`production_gate`); absent on generic errors.",
    )
    detail = serializers.JSONField(
        allow_null=True,
        help_text="Validation errors: an object mapping each field to its messages; domain errors: their details "
        "(e.g. a list of `{path, message}`); otherwise null.",
    )


GENERIC = {
    "400": "Invalid input: `error` names the first field and its problem, `detail` holds them all.",
    "401": "No credentials, or invalid ones: send `Authorization: Token <key>` (POST /api/v1/auth/token/).",
    "403": "Your role may not do this (or, signed in with a session cookie, the CSRF token is missing).",
    "404": "No such object (or, for a list, no such page).",
    "413": "The request body is larger than the server accepts (DATA_UPLOAD_MAX_MEMORY_SIZE).",
    "429": "Too many requests: wait the number of seconds in `Retry-After`.",
}


def error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


def not_found(description: str) -> OpenApiResponse:
    """404 for an object named in the body or the query (path parameters get one of their own)."""
    return error(description)


def conflict(description: str) -> OpenApiResponse:
    """409: the request is well formed but the current state refuses it (stale base, duplicate name, gate...)."""
    return error(description)


class AutoSchema(SpectacularAutoSchema):
    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        for parameter in operation.get("parameters", []):
            if _empty_means_absent(parameter):
                parameter["allowEmptyValue"] = True
        responses = operation["responses"]
        for code in self._error_statuses(operation):
            if code not in responses:
                responses[code] = self._get_response_for_code(error(GENERIC[code]), code)
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _error_statuses(self, operation: dict) -> list[str]:
        parameters = operation.get("parameters", [])
        has_body = "requestBody" in operation
        codes = []
        if has_body or any(p["in"] == "query" for p in parameters):
            codes.append("400")
        permissions = self.view.get_permissions()
        if not all(isinstance(p, AllowAny) for p in permissions):
            codes.append("401")
        if any(_may_refuse(p, self.view, self.method) for p in permissions):
            codes.append("403")
        if any(p["in"] == "path" for p in parameters) or any(p["name"] == "page" for p in parameters):
            codes.append("404")
        if has_body:
            codes.append("413")
        if self.view.get_throttles():
            codes.append("429")
        return codes

    def _map_serializer(self, serializer, direction, bypass_extensions=False):
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        if direction == "request" and isinstance(force_instance(serializer), StrictSerializer):
            schema["additionalProperties"] = False  # unknown fields are refused (StrictSerializer)
        return schema

    def map_parsers(self):
        """JSON bodies are documented as JSON (nested documents have no form encoding); views that take files
        declare their parsers or a file field and keep multipart."""
        media_types = super().map_parsers()
        if "parser_classes" in vars(type(self.view)) or self._request_has_file():
            return media_types
        return [m for m in media_types if m == "application/json"] or media_types

    def _request_has_file(self) -> bool:
        serializer = self.get_request_serializer()
        fields = getattr(serializer, "fields", None) if isinstance(serializer, serializers.BaseSerializer) else None
        if fields is None and isinstance(serializer, type) and issubclass(serializer, serializers.BaseSerializer):
            fields = serializer().fields
        return any(isinstance(f, serializers.FileField) for f in (fields or {}).values())


def _may_refuse(permission, view, method: str) -> bool:
    """A permission that can refuse a signed-in caller says so with `may_refuse(view, method)`; others never do."""
    may_refuse = getattr(permission, "may_refuse", None)
    return may_refuse is not None and may_refuse(view, method)


def _empty_means_absent(parameter: dict) -> bool:
    """Optional text and boolean query filters read an empty value as "not given" (django-filter, and the views'
    `params.get(name) or default`), as HTML forms send them, and so does DRF's `page`; choices do not."""
    schema = parameter.get("schema", {})
    if parameter["in"] != "query" or parameter.get("required") or "enum" in schema:
        return False
    return schema.get("type") in ("string", "boolean") or parameter["name"] == "page"
