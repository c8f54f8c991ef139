"""Model catalog pages: the registered models, registering one, and one model's settings and the versions using it."""

from django.contrib import messages
from django.shortcuts import redirect, render

from controlplane.accounts.roles import Action
from controlplane.catalog import selectors, services
from controlplane.catalog.resolution import REFERENCES
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.params.selectors import versions_naming_model


@page(write_action=Action.MODEL_WRITE)
def model_list(request):
    """GET lists the catalog; POST registers a model."""
    form = forms.ModelEntryForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                entry = services.model_entry_create(
                    actor=request.user, name=form.cleaned_data["name"], **form.entry_values()
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Model {entry.name} registered.")
                return redirect("dashboard:models")
        status = 400
    return render(
        request, "catalog/model_list.html", {"entries": selectors.model_entries(), "form": form}, status=status
    )


@page(write_action=Action.MODEL_WRITE)
def model_detail(request, name):
    """GET shows one model and the template versions naming it; POST saves an edit (with a reason)."""
    entry = selectors.model_entry_get(name=name)
    initial = {key: getattr(entry, key) for key in forms.ModelEntryForm.ENTRY_FIELDS}
    form = forms.ModelEntryForm(request.POST or None, initial=initial)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            values = form.entry_values()
            changes = {key: value for key, value in values.items() if getattr(entry, key) != value}
            try:
                entry = services.model_entry_update(
                    actor=request.user, entry=entry, changes=changes, reason=form.cleaned_data["reason"]
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Model {entry.name} saved: {', '.join(sorted(changes))}.")
                return redirect("dashboard:model-detail", name=entry.name)
        status = 400
    current = entry.resolved()
    usage = []
    for version in versions_naming_model(name=entry.name):
        for field in REFERENCES:
            pinned = (version.pinned_models or {}).get(field)
            section, key = field.split(".", 1)
            if version.params.get(section, {}).get(key) == entry.name:
                usage.append(
                    {
                        "version": version,
                        "field": field,
                        "is_current": pinned == current,
                        "is_pinned": pinned is not None,
                        "pools": [pool.name for pool in version.desired_by.all()],
                    }
                )
    return render(request, "catalog/model_detail.html", {"entry": entry, "form": form, "usage": usage}, status=status)
