"""Refusals of the operations services, with stable codes for API clients."""

from controlplane.lib.errors import Conflict


class OverrideNotActive(Conflict):
    """The override was already revoked or has expired, so there is nothing to revoke."""

    code = "override_not_active"


class OverrideRace(Conflict):
    """Someone set an override of the same conversation and scope at the same moment."""

    code = "override_race"
