"""Serializer base that refuses fields it does not know, so a typo is an error, not a no-op."""

from rest_framework import serializers

from controlplane.lib.errors import InvalidField


class StrictSerializer(serializers.Serializer):
    def to_internal_value(self, data):
        if hasattr(data, "keys"):
            unknown = sorted(set(data.keys()) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)


def validated(serializer_class, data) -> dict:
    """Run a serializer and return its data; DRF's handler turns failures into 400s naming the field."""
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def optional_int(field: str, value) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidField(field, f"must be an integer, got {value!r}") from None
