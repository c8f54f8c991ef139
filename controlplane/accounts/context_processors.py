"""Exposes what the signed-in user may do to every template as `can.<action>`."""

from controlplane.accounts.roles import Action


def role(request):
    user = getattr(request, "user", None)
    allowed = {a.value: bool(user and user.is_authenticated and user.can(a)) for a in Action}
    return {"can": {key.replace(".", "_"): value for key, value in allowed.items()}}
