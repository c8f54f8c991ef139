"""Exposes the pools degraded now to every page, for the banner in base.html."""

from controlplane.operations.selectors import degraded_pools


def degradation_banner(request):
    user = getattr(request, "user", None)
    if not (user and user.is_authenticated):
        return {}
    # A lazy list: evaluated once, and only by a page that renders the banner.
    return {"degraded_pools": degraded_pools()}
