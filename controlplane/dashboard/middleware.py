"""Turns a domain error raised by a page into an error page with its status, never a traceback."""

import logging

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponse
from django.shortcuts import render

from controlplane.lib.api_errors import DATABASE_UNAVAILABLE_RETRY_AFTER_S
from controlplane.lib.errors import DomainError

log = logging.getLogger(__name__)


class DomainErrorPageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if request.path.startswith("/api/"):
            return None
        if isinstance(exception, DomainError):
            return render(request, "dashboard/error.html", {"message": exception.message}, status=exception.status_code)
        if isinstance(exception, OperationalError | InterfaceError):
            # A database locked past its busy timeout, or gone: say so and let the person retry.
            log.error("%s %s: database unavailable: %s", request.method, request.path, exception, exc_info=exception)
            message = "The database is busy or unavailable; try again in a moment."
            try:
                response = render(
                    request, "dashboard/error.html", {"title": "Unavailable", "message": message}, status=503
                )
            except DatabaseError:  # the page's own reads (banner, role) failed too
                response = HttpResponse(message, content_type="text/plain; charset=utf-8", status=503)
            response["Retry-After"] = str(DATABASE_UNAVAILABLE_RETRY_AFTER_S)
            return response
        return None
