"""Errors of pools and releases."""

from controlplane.lib.errors import Conflict, DomainError


class ProductionGateClosed(DomainError):
    """A version that has not run healthy on a non-production pool (see nodes/gate.py) was sent to production
    without an override."""

    status_code = 409
    code = "production_gate"


class NothingToRollBack(Conflict):
    code = "nothing_to_roll_back"
