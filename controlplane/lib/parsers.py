"""Request body parsers that turn pathological JSON into a 400 instead of a server error, and bound its size."""

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from controlplane.lib.body_limit import declared_length, too_large_message


class PayloadTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"

    def __init__(self, hint: str = "send files as multipart uploads", *, field: str = "body", size: int | None = None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        super().__init__(f"{too_large_message(field, size, limit)}; {hint}")


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        # Refused from Content-Length before a byte is read; Django's own refusal of what it reads past the limit
        # (RequestDataTooBig) becomes the same 413 in controlplane.lib.api_errors.
        request = (parser_context or {}).get("request")
        length = declared_length(request.META.get("CONTENT_LENGTH")) if request is not None else None
        if length is not None and length > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            raise PayloadTooLarge(size=length)
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
