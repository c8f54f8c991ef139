"""The one DRF exception handler: every error body is {"error": ..., "detail": ...}, plus `code` for domain errors."""

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.lib.body_limit import declared_length, too_large_message
from controlplane.lib.errors import DomainError

log = logging.getLogger(__name__)

# A database that stayed locked past its busy timeout, or went away: a passing condition, worth a retry.
DATABASE_UNAVAILABLE_RETRY_AFTER_S = 2


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        # `code` is the stable name clients branch on (e.g. production_gate, stale_base_version).
        return Response({"error": exc.message, "code": exc.code, "detail": exc.detail}, status=exc.status_code)
    if isinstance(exc, OperationalError | InterfaceError):
        request = context.get("request")
        where = f"{request.method} {request.path}" if request is not None else "API"
        log.error("%s: database unavailable: %s", where, exc, exc_info=exc)
        response = Response(
            {"error": "database busy or unavailable; retry shortly", "detail": None},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
        response["Retry-After"] = str(DATABASE_UNAVAILABLE_RETRY_AFTER_S)
        return response
    if isinstance(exc, RequestDataTooBig):
        # Django's own refusal of a JSON or form body over DATA_UPLOAD_MAX_MEMORY_SIZE, before reading it.
        request = context.get("request")
        declared = declared_length(request.META.get("CONTENT_LENGTH")) if request is not None else None
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        message = too_large_message("body", declared, limit)
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


@csrf_exempt  # API clients authenticate with tokens; a POST to a wrong path is a 404, not a CSRF 403 page
def api_route_not_found(request):
    """A path under /api/ that no route matches: the error shape of the API, not the dashboard's HTML page."""
    hint = ""
    if not request.path.endswith("/"):
        try:
            resolve(request.path + "/")
            hint = f"; did you mean {request.path}/ (every API path ends with a slash)?"
        except Resolver404:
            pass
    return JsonResponse({"error": f"no API route {request.path}{hint}", "detail": None}, status=404)
