"""DRF permission: reads need any role, writes need the action the view declares."""

from types import SimpleNamespace

from rest_framework.permissions import SAFE_METHODS, BasePermission

from controlplane.accounts.roles import PERMISSIONS, Action, Role


class HasRole(BasePermission):
    """Views name `required_action` (a string for every write, or a dict keyed by HTTP method); reads need `view`."""

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if not handles(view, request.method):
            # DRF's dispatch answers 405 with the route's methods in `Allow`, whatever the caller's role.
            return True
        action = required_action(view, request)
        # A write whose view declares no action is refused rather than silently allowed.
        return action is not None and user.can(action)

    def may_refuse(self, view, method: str) -> bool:
        """Whether some signed-in caller may get 403 from this view for `method` (the OpenAPI description lists it:
        controlplane/lib/openapi.py): a role without the action, or a session without its CSRF token."""
        if method not in SAFE_METHODS:
            return True
        action = required_action(view, SimpleNamespace(method=method))
        return action is None or PERMISSIONS[action] != frozenset(Role)


def handles(view, method: str) -> bool:
    """Whether the view has a handler for the method (else the route does not have it: 405, not 403)."""
    name = method.lower()
    return name in view.http_method_names and hasattr(view, name)


def required_action(view, request) -> str | None:
    declared = getattr(view, "required_action", None)
    if isinstance(declared, dict):
        declared = declared.get(request.method)
    elif request.method in SAFE_METHODS:
        # A single declared action names what the view's writes need; its reads stay open to every role.
        declared = None
    if declared:
        return declared
    return Action.VIEW if request.method in SAFE_METHODS else None
