"""Request ids: taken from X-Request-ID or generated, echoed back, and read by the audit log."""

import contextvars
import re
import uuid

_current: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
_ACCEPTED = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def current_request_id() -> str:
    return _current.get()


def bind_request_id(value: str) -> contextvars.Token:
    return _current.set(value)


class RequestIdMiddleware:
    """Binds one id per request so every audit entry of that request carries it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        supplied = request.headers.get("X-Request-ID", "")
        request_id = supplied if _ACCEPTED.match(supplied) else uuid.uuid4().hex
        request.request_id = request_id
        token = _current.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            _current.reset(token)
        response["X-Request-ID"] = request_id
        return response
