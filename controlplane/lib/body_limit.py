"""Request bodies over the limit are refused before Django reads them: by Content-Length, or by a counted read.

Two limits (settings): `UPLOAD_MAX_BYTES` for multipart uploads (datasets, warmup logs, template files), and
`DATA_UPLOAD_MAX_MEMORY_SIZE` for every other body (JSON documents and `content` strings, forms). An ASGI middleware
answers 413 from the Content-Length header without reading the body, and counts a chunked body as it arrives, ending
it at the limit. Inside Django, wherever it runs (the test client included), a JSON or form body is refused from its
Content-Length by Django itself (RequestDataTooBig, answered 413 by the API's exception handler) and the first upload
handler counts every multipart file's bytes.
"""

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.files.uploadhandler import FileUploadHandler

from controlplane.lib.errors import DomainError


class BodyTooLarge(DomainError, RequestDataTooBig):
    """A body or an uploaded file over its limit: 413 from the API and the dashboard's pages; Django's own 400 where
    a middleware (CSRF) reads the form before any view."""

    status_code = 413
    code = "too_large"

    def __init__(self, message: str, *, field: str = "body"):
        super().__init__(message, detail=[{"path": field, "message": message.split(": ", 1)[-1]}])
        self.field = field


class BoundedUploadHandler(FileUploadHandler):
    """First of Django's upload handlers: refuses a multipart body over `UPLOAD_MAX_BYTES` from its Content-Length
    before any part is read, and a file whose bytes pass the limit as they stream in (a chunked body). The paths in
    `LARGE_UPLOAD_PATHS` (conversation logs) get `CONVERSATION_LOG_MAX_BYTES` instead."""

    def handle_raw_input(self, input_data, META, content_length, boundary, encoding=None):
        self.limit = multipart_limit(getattr(self.request, "path", ""))
        if content_length > self.limit:
            raise BodyTooLarge(too_large_message("file", content_length, self.limit), field="file")
        self.received = 0

    def receive_data_chunk(self, raw_data, start):
        self.received = start + len(raw_data)
        if self.received > self.limit:
            message = too_large_message(self.field_name, None, self.limit)
            raise BodyTooLarge(message, field=self.field_name)
        return raw_data

    def file_complete(self, file_size):
        return None


# The multipart framing and the form's other fields around a conversation log's bytes.
LARGE_UPLOAD_FRAMING_BYTES = 1024 * 1024


def multipart_limit(path: str) -> int:
    """The byte limit of a multipart body sent to `path`: a conversation log's on its upload endpoints only."""
    if path in settings.LARGE_UPLOAD_PATHS:
        return max(settings.UPLOAD_MAX_BYTES, settings.CONVERSATION_LOG_MAX_BYTES + LARGE_UPLOAD_FRAMING_BYTES)
    return settings.UPLOAD_MAX_BYTES


def limit_for(content_type: str, path: str = "") -> tuple[int, str]:
    """(the byte limit for a body of this content type sent to `path`, what to call it in the error)."""
    if content_type.split(";", 1)[0].strip().lower() == "multipart/form-data":
        return multipart_limit(path), "file"
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "body"


# More digits than any body could have: int() refuses over 4,300 digits, so a longer header is read as this.
MAX_DECLARED_DIGITS = 30


def declared_length(value: str | bytes | None) -> int | None:
    """A Content-Length header as a number of bytes, or None when it is not one. ASCII digits only: str.isdigit() also
    says yes to "²" and "٣", which int() refuses; a number longer than MAX_DECLARED_DIGITS reads as 10**30 (over
    every limit) instead of reaching int()'s own limit on digits."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if not text or not text.isascii() or not text.isdigit():
        return None
    return int(text) if len(text) <= MAX_DECLARED_DIGITS else 10**MAX_DECLARED_DIGITS


def too_large_message(field: str, size: int | None, limit: int) -> str:
    mib = f" ({limit / (1 << 20):g} MiB)"
    size_text = f"{size} bytes" if size is not None else "the body"
    return f"{field}: {size_text} is over the limit of {limit} bytes{mib}"


class BodySizeLimitMiddleware:
    """ASGI middleware in front of Django: 413 for an HTTP body over its limit, before Django spools or parses it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        limit, field = limit_for(headers.get(b"content-type", b"").decode("latin-1"), scope.get("path", ""))
        declared = declared_length(headers.get(b"content-length"))
        if declared is not None and declared > limit:
            return await _refuse(send, scope, too_large_message(field, declared, limit), limit)
        received, over = 0, False

        async def counted_receive():
            nonlocal received, over
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Django's body reader stops at a disconnect without answering; the answer is ours.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        await self.app(scope, counted_receive, send)
        if over:
            await _refuse(send, scope, too_large_message(field, None, limit), limit)


async def _refuse(send, scope, message: str, limit: int) -> None:
    if scope.get("path", "").startswith("/api/"):
        body = json.dumps({"error": message, "code": "too_large", "detail": {"limit_bytes": limit}}).encode()
        content_type = b"application/json"
    else:
        body, content_type = message.encode(), b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
