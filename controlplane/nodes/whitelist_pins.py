"""Which whitelist versions a release pins, and which ones a pool's gateways use.

Every release (publish, republish, rollback) pins the version of each whitelist its template version names. A
production pool's gateways use the pins of the release they run, so a whitelist edit by tuning staff makes a new
version that reaches production only through an SRE's publish; publishing the current template version again
(a republish) picks up the latest whitelists. During a canary rollout the canary nodes use the rollout's release's
pins and the other nodes those of the release before it; a rollback returns to the pins of the release it goes
back to. Non-production pools follow the latest version of every whitelist, so tuning staff try a whitelist on
staging at once; their releases pin too, which is how the production gate knows a version was in effect there.
"""

from django.db.models import F

from controlplane.nodes.models import Pool, PoolRelease, Rollout
from controlplane.params.models import TemplateVersion, WhitelistVersion


def referenced_whitelists(version: TemplateVersion) -> list[str]:
    """The whitelists a template version names (`max_tokens.whitelist`, schema default when omitted)."""
    return list(version.effective_params["max_tokens"]["whitelist"])


def latest_versions(names: list[str] | None = None) -> list[WhitelistVersion]:
    """The latest version of each named whitelist (of every whitelist with None), by name."""
    latest = WhitelistVersion.objects.filter(number=F("whitelist__latest_number")).select_related("whitelist")
    if names is not None:
        latest = latest.filter(whitelist__name__in=names)
    return sorted(latest, key=lambda v: v.whitelist.name)


def pins_for(version: TemplateVersion) -> list[WhitelistVersion]:
    """What a publish of `version` pins now: the latest version of each whitelist it names."""
    return latest_versions(referenced_whitelists(version))


def release_pins(release: PoolRelease | None) -> list[WhitelistVersion]:
    if release is None:
        return []
    return sorted(release.whitelist_versions.select_related("whitelist"), key=lambda v: v.whitelist.name)


def pins_summary(versions: list[WhitelistVersion]) -> dict[str, int]:
    """`{"legal": 3}`: how pins are shown in the API, the audit log and the timeline."""
    return {v.whitelist.name: v.number for v in versions}


def scenario_lists(versions: list[WhitelistVersion]) -> dict[str, list[str]]:
    """The policy bundle's `whitelists` section: scenario list by whitelist name."""
    return {v.whitelist.name: list(v.scenarios) for v in sorted(versions, key=lambda v: v.whitelist.name)}


def latest_release(pool: Pool) -> PoolRelease | None:
    """The release that set the pool's desired version (by id: releases in one second keep their order)."""
    return PoolRelease.objects.filter(pool_id=pool.pk).order_by("-pk").first()


def release_before(release: PoolRelease) -> PoolRelease | None:
    return PoolRelease.objects.filter(pool_id=release.pool_id, pk__lt=release.pk).order_by("-pk").first()


def newest_release_of(pool: Pool, version: TemplateVersion, *, before: PoolRelease | None = None) -> PoolRelease | None:
    """The pool's newest release of `version` (older than `before`, if given): what a rollback to it returns to."""
    releases = PoolRelease.objects.filter(pool_id=pool.pk, version_id=version.pk)
    if before is not None:
        releases = releases.filter(pk__lt=before.pk)
    return releases.order_by("-pk").first()


def rollback_pins(pool: Pool, version: TemplateVersion) -> list[WhitelistVersion]:
    """What a rollback of the pool to `version` pins: the pins of its newest release of that version before the
    current release, or, for a version it ran before it had releases, the latest ones."""
    target = newest_release_of(pool, version, before=latest_release(pool))
    return release_pins(target) if target is not None else pins_for(version)


def pins_diff(before: list[WhitelistVersion], after: list[WhitelistVersion]) -> list[dict]:
    """`[{"whitelist", "before", "after"}]` for each whitelist whose pinned version changes (None: not pinned)."""
    old, new = pins_summary(before), pins_summary(after)
    return [
        {"whitelist": name, "before": old.get(name), "after": new.get(name)}
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    ]


def serving_releases(pool: Pool) -> tuple[PoolRelease | None, Rollout | None]:
    """(the release the pool's non-canary nodes run, the active rollout whose release its canary nodes run)."""
    rollout = Rollout.objects.filter(pool_id=pool.pk, state__in=Rollout.ACTIVE).select_related("release").first()
    if rollout is None:
        return latest_release(pool), None
    return release_before(rollout.release), rollout


def is_canary_node(pool: Pool, node_name: str) -> bool:
    rollout = Rollout.objects.filter(pool_id=pool.pk, state__in=Rollout.ACTIVE).first()
    return rollout is not None and node_name in rollout.canary_nodes


def pool_whitelists(pool: Pool, *, canary: bool = False) -> dict[str, list[str]]:
    """The scenario lists a node of the pool uses: the latest ones on a non-production pool, the pinned ones on a
    production pool (nothing before its first release)."""
    if not pool.is_production:
        return scenario_lists(latest_versions())
    baseline, rollout = serving_releases(pool)
    return scenario_lists(release_pins(rollout.release if canary and rollout else baseline))


def rollback_whitelist_preview(pool: Pool, version: TemplateVersion) -> list[dict]:
    """How a rollback to `version` changes the pinned whitelists (nothing on a non-production pool, which follows
    the latest versions either way)."""
    if not pool.is_production:
        return []
    return pins_diff(release_pins(latest_release(pool)), rollback_pins(pool, version))


def pool_whitelist_changes(pool: Pool) -> list[dict]:
    """On a production pool with a desired version: each whitelist it names whose latest version is not the pinned
    one, `{"whitelist", "pinned", "latest"}` (pinned None: not pinned yet); a republish would pick these up."""
    if not pool.is_production or pool.desired_version is None:
        return []
    pinned = pins_summary(release_pins(latest_release(pool)))
    return [
        {"whitelist": v.whitelist.name, "pinned": pinned.get(v.whitelist.name), "latest": v.number}
        for v in pins_for(pool.desired_version)
        if pinned.get(v.whitelist.name) != v.number
    ]


def versions_off_non_production(versions: list[WhitelistVersion]) -> list[WhitelistVersion]:
    """Of these versions, those never in effect on a non-production pool: not pinned by one of its releases, and not
    the latest version of a whitelist that a non-production pool's desired version names (those follow the latest)."""
    if not versions:
        return []
    pinned_ids = set(
        PoolRelease.whitelist_versions.through.objects.filter(
            poolrelease__pool__is_production=False, whitelistversion__in=versions
        ).values_list("whitelistversion_id", flat=True)
    )
    live_names: set[str] = set()
    for pool in Pool.objects.filter(is_production=False, desired_version__isnull=False).select_related(
        "desired_version"
    ):
        live_names.update(referenced_whitelists(pool.desired_version))
    return [
        v
        for v in versions
        if v.pk not in pinned_ids and not (v.whitelist.name in live_names and v.number == v.whitelist.latest_number)
    ]
