"""Reads of the model catalog that the API and dashboard share."""

from django.shortcuts import get_object_or_404

from controlplane.catalog.models import ModelEntry


def model_entry_get(*, name: str) -> ModelEntry:
    return get_object_or_404(ModelEntry, name=name)


def model_entries(*, draft_capable: bool | None = None):
    entries = ModelEntry.objects.all()
    if draft_capable is not None:
        entries = entries.filter(is_draft_capable=draft_capable)
    return entries
