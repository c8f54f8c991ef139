"""User management page (admin) and the signed-in user's own API token."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from controlplane.accounts import services
from controlplane.accounts.models import User
from controlplane.accounts.roles import Action
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError


@page(Action.USER_MANAGE, write_action=Action.USER_MANAGE)
def user_list(request):
    form = forms.UserCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = services.user_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"User {user.username} created with role {user.role}.")
            return redirect("dashboard:users")
    return render(request, "accounts/user_list.html", {"users": User.objects.order_by("username"), "form": form})


@require_POST
@page(Action.USER_MANAGE, write_action=Action.USER_MANAGE)
def user_update(request, username):
    user = get_object_or_404(User, username=username)
    form = forms.UserUpdateForm(request.POST)
    if form.is_valid():
        try:
            services.user_update(actor=request.user, user=user, **form.cleaned_data)
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"{username}: role {form.cleaned_data['role']}.")
    else:
        messages.error(request, "Choose a role.")
    return redirect("dashboard:users")
