"""Creating whitelists and saving new versions of their scenario lists (production gets them through a publish)."""

from django.db import IntegrityError, transaction

from controlplane.audit.services import audit_record, mutating_service
from controlplane.lib.errors import Conflict, check_slug
from controlplane.nodes.models import Pool
from controlplane.operations.policy_bundle import push_policy
from controlplane.params.exceptions import DocumentInvalid, StaleBaseVersion
from controlplane.params.models import Whitelist, WhitelistVersion
from controlplane.params.schema import SCENARIO_NAME, FieldError

MAX_SCENARIOS = 500


def scenarios_validate(*, scenarios) -> list[str]:
    if not isinstance(scenarios, list):
        raise DocumentInvalid("scenarios are invalid", errors=[FieldError("scenarios", "must be a list of names")])
    errors = [
        FieldError(f"scenarios[{i}]", "must be a lowercase name of letters, digits, _ or -")
        for i, name in enumerate(scenarios)
        if not isinstance(name, str) or not SCENARIO_NAME.match(name)
    ]
    if not errors and len(set(scenarios)) != len(scenarios):
        errors.append(FieldError("scenarios", "must not list a name twice"))
    if len(scenarios) > MAX_SCENARIOS:
        errors.append(FieldError("scenarios", f"must hold at most {MAX_SCENARIOS} names"))
    if errors:
        raise DocumentInvalid("scenarios are invalid", errors=errors)
    return list(scenarios)


@mutating_service
def whitelist_create(*, actor, name: str, scenarios: list, description: str = "", comment: str = "") -> Whitelist:
    """A new whitelist with its first version."""
    check_slug("name", name)
    scenarios = scenarios_validate(scenarios=scenarios)
    with transaction.atomic():
        try:
            with transaction.atomic():
                whitelist = Whitelist.objects.create(name=name, description=description, latest_number=1)
        except IntegrityError:
            raise Conflict(f"name: a whitelist named {name!r} already exists") from None
        WhitelistVersion.objects.create(
            whitelist=whitelist, number=1, author=actor, comment=comment, scenarios=scenarios
        )
        audit_record(
            actor=actor, action="whitelist.create", target=whitelist, after={"scenarios": scenarios}, reason=comment
        )
        transaction.on_commit(_push_policy_to_non_production_pools)
    return whitelist


@mutating_service
def whitelist_version_create(
    *, actor, whitelist: Whitelist, scenarios: list, base_number: int | None, comment: str = ""
) -> WhitelistVersion:
    """Save the next scenario list, edited from `base_number`; a stale base raises 409."""
    scenarios = scenarios_validate(scenarios=scenarios)
    with transaction.atomic():
        locked = Whitelist.objects.select_for_update().get(pk=whitelist.pk)
        if base_number != locked.latest_number:
            raise StaleBaseVersion(
                f"base_version: version {base_number} is stale; the latest is {locked.latest_number}",
                detail={"current_version": locked.latest_number, "scenarios": _scenarios(locked)},
            )
        before = _scenarios(locked)
        version = WhitelistVersion.objects.create(
            whitelist=locked,
            number=locked.latest_number + 1,
            base_number=base_number,
            author=actor,
            comment=comment,
            scenarios=scenarios,
        )
        locked.latest_number = version.number
        locked.save(update_fields=["latest_number"])
        audit_record(
            actor=actor,
            action="whitelist.version_create",
            target=locked,
            before={"scenarios": before},
            after={"scenarios": scenarios},
            reason=comment,
        )
        transaction.on_commit(_push_policy_to_non_production_pools)
    whitelist.latest_number = locked.latest_number
    return version


def _scenarios(whitelist: Whitelist) -> list[str]:
    return whitelist.versions.get(number=whitelist.latest_number).scenarios


def _push_policy_to_non_production_pools() -> None:
    """Non-production pools follow the latest whitelists; production pools keep their release's pinned versions
    until an SRE publishes (controlplane/nodes/whitelist_pins.py), so nothing is sent to them."""
    push_policy(Pool.objects.filter(is_production=False))
