"""Suggestions for a pool or a template, computed on request from the figures and records, cached briefly."""

from datetime import datetime
from urllib.parse import urlencode

from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from controlplane.advice import records
from controlplane.advice.figures import WINDOW_S, WindowFigures, pool_window_figures
from controlplane.advice.rules import rule_suggestions
from controlplane.alerts.defaults import DEFAULT_RULES
from controlplane.alerts.models import AlertRuleVersion
from controlplane.lib.errors import NotFound
from controlplane.metrics import selectors as metrics
from controlplane.nodes.models import Pool
from controlplane.params.models import ParameterTemplate

# Figures move by the second but a window mean of ten minutes hardly does: a page reload or the apply that follows
# the preview reads the same suggestions, and a busy page does not re-read ten minutes of rows every time.
CACHE_S = 15
RULE_NAMES = ("batch-idle", "long-requests", "spec-decode-rejection", "p99-latency")


def alert_lines() -> dict[str, tuple[float, float | None]]:
    """The warning and critical lines of the rules the suggestions follow: each alert rule's newest enabled version,
    else the seed's (the defaults)."""
    lines = {rule["name"]: (rule["warn"], rule["critical"]) for rule in DEFAULT_RULES if rule["name"] in RULE_NAMES}
    for version in AlertRuleVersion.objects.filter(rule__name__in=RULE_NAMES).select_related("rule").order_by("number"):
        lines[version.rule.name] = (version.warn, version.critical) if version.is_enabled else lines[version.rule.name]
    return lines


def pool_suggestions(*, pool: Pool, now: datetime | None = None, use_cache: bool = True) -> dict:
    """{pool, template, version, window, suggestions} for the pool's running version; no version, no suggestions."""
    # The pool's creation time keeps a pool made again under a reused id (a restored database, a test run) from
    # reading the old pool's suggestions; a publish changes the version id and so the key.
    key = f"advice:pool:{pool.pk}:{pool.created_at.timestamp()}:{pool.desired_version_id}"
    if use_cache and now is None and (cached := cache.get(key)) is not None:
        return cached
    now = now or timezone.now()
    version = pool.desired_version
    result = {
        "pool": pool.name,
        "template": version.template.name if version else None,
        "version": version.number if version else None,
        "window": {"since": None, "until": now, "seconds": WINDOW_S},
        "computed_at": now,
        "is_simulated": False,
        "suggestions": [],
    }
    if version is not None:
        params = version.effective_params
        figures = pool_window_figures(
            pool=pool.name, params=params, load_threshold=params["degradation"]["load_threshold"], now=now
        )
        result["window"]["since"] = figures.since
        simulated, _ = metrics.simulated_node_counts(pool=pool.name)
        result["is_simulated"] = simulated > 0
        found = rule_suggestions(figures, params, alert_lines())
        changes = records.measured_changes(pool)
        found += records.record_suggestions(changes=changes, params=params, figures=figures)
        records.add_cautions(found, changes=changes)
        for item in found:
            _link(item, pool=pool, version=version, figures=figures, is_simulated=result["is_simulated"])
        result["suggestions"] = found
    if use_cache:
        cache.set(key, result, CACHE_S)
    return result


def template_suggestions(*, template: ParameterTemplate, now: datetime | None = None) -> dict:
    """The suggestions of every pool that runs a version of the template, each saying its pool."""
    pools = Pool.objects.filter(desired_version__template=template).select_related("desired_version__template")
    found = []
    for pool in pools.order_by("name"):
        found.extend(pool_suggestions(pool=pool, now=now)["suggestions"])
    return {"template": template.name, "latest_version": template.latest_number or None, "suggestions": found}


def suggestion_find(*, pool: Pool, suggestion_id) -> dict:
    """One suggestion of the pool by its id (as listed now); NotFound when the figures no longer call for it."""
    for item in pool_suggestions(pool=pool)["suggestions"]:
        if item["id"] == suggestion_id:
            return item
    raise NotFound(f"suggestion: pool {pool.name!r} has no suggestion {str(suggestion_id)[:80]!r} now")


def _link(item: dict, *, pool: Pool, version, figures: WindowFigures, is_simulated: bool) -> None:
    item["pool"] = pool.name
    item["is_simulated"] = is_simulated
    item["template"] = version.template.name
    item["version"] = version.number
    item["links"] = {
        "pool": reverse("dashboard:pool-detail", kwargs={"name": pool.name}),
        "version": reverse(
            "dashboard:version-detail", kwargs={"name": version.template.name, "number": version.number}
        ),
        "preview": reverse("dashboard:suggestion-preview", kwargs={"name": pool.name, "suggestion": item["id"]}),
    }
    window = {"since": figures.since.isoformat(), "until": figures.until.isoformat()}
    for cited in item["evidence"]:
        if cited.get("metric") and "link" not in cited:
            query = urlencode({"metric": cited["metric"], **window})
            cited["link"] = reverse("api:metric-history", kwargs={"scope": "pool", "name": pool.name}) + "?" + query
