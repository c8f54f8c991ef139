"""Page-level access: every page needs a signed-in user; each write names the action it needs."""

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

from controlplane.accounts.roles import Action


def page(action: str = Action.VIEW, *, write_action: str | None = None) -> Callable:
    """GET needs `action`; POST needs `write_action` (and is refused when none is declared)."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            needed = write_action if request.method == "POST" else action
            if needed is None or not request.user.can(needed):
                raise PermissionDenied(f"your role ({request.user.role}) may not do this")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate
