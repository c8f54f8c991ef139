"""The API's filter backend: django-filter, except that a malformed boolean filter is a 400 naming it, not ignored."""

from django_filters import BooleanFilter
from django_filters.rest_framework import DjangoFilterBackend

from controlplane.lib.errors import InvalidField

_BOOLEAN_VALUES = frozenset({"", "true", "false", "1", "0"})


class FilterBackend(DjangoFilterBackend):
    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            for name, field in filterset.filters.items():
                value = request.query_params.get(name)
                if isinstance(field, BooleanFilter) and value is not None and value.lower() not in _BOOLEAN_VALUES:
                    raise InvalidField(name, f"must be true or false, got {value!r}")
        return filterset
