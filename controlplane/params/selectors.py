"""Reads of templates, versions and whitelists that the API and dashboard share."""

from django.db.models import Q
from django.shortcuts import get_object_or_404

from controlplane.lib.errors import InvalidField
from controlplane.params.diff import FieldChange, params_diff
from controlplane.params.models import ParameterTemplate, TemplateVersion


def template_get(*, name: str) -> ParameterTemplate:
    return get_object_or_404(ParameterTemplate, name=name)


def template_version_get(*, template: ParameterTemplate, number) -> TemplateVersion:
    try:
        number = int(number)
    except (TypeError, ValueError):
        raise InvalidField("version", f"must be a version number, got {number!r}") from None
    return get_object_or_404(
        TemplateVersion.objects.select_related("template", "author"), template=template, number=number
    )


def template_versions_diff(*, template: ParameterTemplate, old_number, new_number) -> list[FieldChange]:
    old = template_version_get(template=template, number=old_number)
    new = template_version_get(template=template, number=new_number)
    return params_diff(
        old.effective_params, new.effective_params, old_models=old.pinned_models, new_models=new.pinned_models
    )


def versions_naming_model(*, name: str):
    """Template versions whose engine.model or speculative.draft_model names this catalog entry, newest first."""
    return (
        TemplateVersion.objects.filter(Q(params__engine__model=name) | Q(params__speculative__draft_model=name))
        .select_related("template", "author")
        .prefetch_related("desired_by")
        .order_by("template__name", "-number")
    )
