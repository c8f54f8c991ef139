"""Errors of alert rules, silences and acknowledgements."""

from controlplane.lib.errors import Conflict


class StaleRuleVersion(Conflict):
    """An edit named a base version of the rule that is no longer the latest."""

    code = "stale_base_version"
