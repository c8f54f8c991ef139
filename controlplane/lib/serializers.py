"""Serializer base that refuses fields it does not know, so a typo is an error, not a no-op; and JSON fields that
the API description types (an object, a list of names) while the services word their own rules."""

from django.http import QueryDict
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.lib.errors import SLUG_PATTERN, InvalidField


class StrictSerializer(serializers.Serializer):
    """Unknown fields are errors; in a JSON body every value must have its documented JSON type (a form body
    carries only strings, so there the fields convert as usual)."""

    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
            if not isinstance(data, QueryDict):
                wrong = {
                    name: [problem]
                    for name, field in self.fields.items()
                    if name in data and (problem := json_type_problem(field, data[name]))
                }
                if wrong:
                    raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


def json_type_problem(field: serializers.Field, value) -> str | None:
    """What is wrong with the JSON type of `value` for `field` (None when nothing is, or null, which the field's
    own `allow_null` decides)."""
    if value is None:
        return None
    if isinstance(field, serializers.CharField) and not isinstance(value, str):
        return "must be a string"
    if isinstance(field, serializers.BooleanField) and not isinstance(value, bool):
        return "must be true or false"
    if isinstance(field, serializers.IntegerField) and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "must be an integer"
    if isinstance(field, serializers.FloatField) and (isinstance(value, bool) or not isinstance(value, int | float)):
        return "must be a number"
    if isinstance(field, serializers.ListField):
        if not isinstance(value, list):
            return "must be a list"
        for index, item in enumerate(value):
            if problem := json_type_problem(field.child, item):
                return f"item {index} {problem}"
    return None


@extend_schema_field({"type": "string", "pattern": SLUG_PATTERN, "maxLength": 64})
class SlugNameField(serializers.CharField):
    """The name of a new object; the service checks it (check_slug) and words the error."""


@extend_schema_field(OpenApiTypes.OBJECT)
class JSONObjectField(serializers.JSONField):
    """A JSON object, passed on for the service to check field by field."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object")
        return value


@extend_schema_field({"type": "array", "items": {"type": "string"}})
class NameListField(serializers.JSONField):
    """A list of names; the service says which names are valid (and which entry is not)."""


@extend_schema_field({"type": "array", "items": {"type": "object", "additionalProperties": {}}})
class ObjectListField(serializers.JSONField):
    """A list of JSON objects (e.g. canary stages); the service checks each."""


def validated(serializer_class, data) -> dict:
    """Run a serializer and return its data; DRF's handler turns failures into 400s naming the field."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def query_flag(params, name: str) -> bool:
    """A boolean query parameter: true/false (or 1/0); absent or empty is false; anything else is a 400."""
    value = params.get(name, "")
    if value.lower() in ("1", "true"):
        return True
    if value.lower() in ("", "0", "false"):
        return False
    raise InvalidField(name, f"must be true or false, got {value!r}")


def optional_int(field: str, value) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidField(field, f"must be an integer, got {value!r}") from None
