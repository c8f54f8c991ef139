"""Whitelist pages: the lists, their versions, and editing a list's scenarios."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.params.models import Whitelist
from controlplane.params.services import whitelists as services


@page(write_action=Action.WHITELIST_WRITE)
def whitelist_list(request):
    form = forms.WhitelistForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            whitelist = services.whitelist_create(
                actor=request.user,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                scenarios=form.scenario_list(),
                comment=form.cleaned_data["comment"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Whitelist {whitelist.name} created.")
            return redirect("dashboard:whitelists")
    whitelists = Whitelist.objects.prefetch_related("versions__author")
    return render(request, "params/whitelist_list.html", {"whitelists": whitelists, "form": form})


@require_POST
@page(write_action=Action.WHITELIST_WRITE)
def whitelist_edit(request, name):
    whitelist = get_object_or_404(Whitelist, name=name)
    form = forms.WhitelistForm(request.POST)
    if form.is_valid():
        try:
            version = services.whitelist_version_create(
                actor=request.user,
                whitelist=whitelist,
                scenarios=form.scenario_list(),
                base_number=form.cleaned_data["base_version"],
                comment=form.cleaned_data["comment"],
            )
        except DomainError as exc:
            messages.error(request, f"{whitelist.name}: nothing saved. {exc.message}")
        else:
            messages.success(request, f"Saved {version}.")
    else:
        messages.error(request, f"{whitelist.name}: scenarios are required.")
    return redirect("dashboard:whitelists")
