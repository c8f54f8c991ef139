"""Operations pages: conversation overrides in effect, setting one, revoking one."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError
from controlplane.nodes.models import Pool
from controlplane.operations import selectors, services
from controlplane.operations.models import ConversationOverride


@page(write_action=Action.OVERRIDE_SET)
def override_list(request):
    """GET lists the overrides in effect; POST sets one (replacing an open one of the same scope)."""
    pools = list(Pool.objects.values_list("name", flat=True))
    form = forms.OverrideForm(request.POST or None, pools=pools)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            pool_name = data["pool"]
            try:
                override = services.override_set(
                    actor=request.user,
                    pool=None if pool_name == forms.ALL_POOLS else get_object_or_404(Pool, name=pool_name),
                    conversation=data["conversation"],
                    tier=data["tier"] or None,
                    temperature=data["temperature"],
                    reason=data["reason"],
                    expires_in_minutes=data["expires_in_minutes"],
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Override set: {override}, {override.setting}.")
                return redirect("dashboard:overrides")
        status = 400
    return render(
        request,
        "operations/override_list.html",
        {"overrides": selectors.active_overrides(), "form": form},
        status=status,
    )


@require_POST
@page(write_action=Action.OVERRIDE_SET)
def override_revoke(request, pk):
    override = get_object_or_404(ConversationOverride.objects.select_related("pool"), pk=pk)
    try:
        services.override_revoke(actor=request.user, override=override, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing revoked. {exc.message}")
    else:
        messages.success(request, f"Override revoked: {override}.")
    return redirect("dashboard:overrides")
