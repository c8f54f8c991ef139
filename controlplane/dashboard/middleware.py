"""Turns a domain error raised by a page into an error page with its status, never a traceback."""

from django.shortcuts import render

from controlplane.lib.errors import DomainError


class DomainErrorPageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, DomainError) and not request.path.startswith("/api/"):
            return render(request, "dashboard/error.html", {"message": exception.message}, status=exception.status_code)
        return None
