"""The one DRF exception handler: every error body is {"error": ..., "detail": ...}, plus `code` for domain errors."""

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.lib.body_limit import too_large_message
from controlplane.lib.errors import DomainError


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        # `code` is the stable name clients branch on (e.g. production_gate, stale_base_version).
        return Response({"error": exc.message, "code": exc.code, "detail": exc.detail}, status=exc.status_code)
    if isinstance(exc, RequestDataTooBig):
        # Django's own refusal of a JSON or form body over DATA_UPLOAD_MAX_MEMORY_SIZE, before reading it.
        request = context.get("request")
        declared = (request.META.get("CONTENT_LENGTH") if request is not None else "") or ""
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = too_large_message("body", int(declared) if declared.isdigit() else None, limit)
        return Response({"error": message, "code": "too_large", "detail": {"limit_bytes": limit}}, status=413)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"error": "invalid input: " + _summary(data), "detail": data}
    elif isinstance(data, dict) and "detail" in data:
        response.data = {"error": str(data["detail"]), "detail": None}
    if response.status_code == status.HTTP_401_UNAUTHORIZED and not response.has_header("WWW-Authenticate"):
        response["WWW-Authenticate"] = "Token"
    return response


def _summary(data, prefix: str = "") -> str:
    """First field error as `path: message`, so the headline already names the field."""
    if isinstance(data, dict):
        for key, value in data.items():
            path = key if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else str(key))
            return _summary(value, path)
    if isinstance(data, list) and data:
        return _summary(data[0], prefix)
    return f"{prefix}: {data}" if prefix else str(data)
