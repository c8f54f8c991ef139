"""Opening a suggestion as a draft version: the template's next version with the suggestion's change applied."""

import copy

from controlplane.advice import selectors
from controlplane.lib.errors import Conflict, InvalidField
from controlplane.nodes.models import Pool
from controlplane.params import schema
from controlplane.params.models import TemplateVersion
from controlplane.params.services.templates import template_version_create

MAX_COMMENT = 500


# Not registered as a mutating service of its own: it writes through template_version_create, whose audit entry
# (action template.version_create, the comment citing the evidence as its reason) is the record of it.
def suggestion_apply(
    *, actor, pool: Pool, suggestion_id, base_number: int | None = None, comment: str = ""
) -> TemplateVersion:
    """Save the pool's suggestion `suggestion_id` (as listed now) as the next version of the template the pool runs,
    edited from its latest version (or `base_number`; a stale one is 409). Nothing is published."""
    if not isinstance(suggestion_id, str) or not suggestion_id:
        raise InvalidField("suggestion", "required: the id of one of the pool's suggestions")
    if pool.desired_version is None:
        raise Conflict(f"pool: {pool.name} runs no version, so it has no suggestions")
    item = selectors.suggestion_find(pool=pool, suggestion_id=suggestion_id)
    if not item["is_actionable"]:
        raise InvalidField("suggestion", f"{suggestion_id}: advice only, it changes no field")
    template = pool.desired_version.template
    template.refresh_from_db()
    base = template.versions.filter(number=base_number or template.latest_number).first()
    if base is None:
        raise InvalidField("base_version", f"template {template.name!r} has no version {base_number}")
    params = draft_params(item, base)
    if schema.effective(params) == base.effective_params:
        raise Conflict(f"suggestion: version {base.number} of {template.name} already has this change")
    comment = (comment or "").strip()[:MAX_COMMENT]
    cited = evidence_text(item)
    return template_version_create(
        actor=actor,
        template=template,
        document={"inference_params": params},
        base_number=base_number or template.latest_number,
        comment=_bounded(f"{cited} {comment}".strip()),
    )


def draft_params(item: dict, base: TemplateVersion) -> dict:
    """`base`'s authored parameters with the suggestion's changes applied."""
    params = copy.deepcopy(base.params)
    for change in item["changes"]:
        section, field = change["path"].split(".")
        params.setdefault(section, {})[field] = change["to"]
    return params


def evidence_text(item: dict) -> str:
    """The comment a draft version carries: the suggestion, its change and what it rests on."""
    changes = "; ".join(f"{c['path']} {c['from']!r} -> {c['to']!r}" for c in item["changes"])
    cited = [
        f"{e['label']} {e['display']}" + (f" over {e['samples']} s" if e.get("samples") else "")
        for e in item["evidence"]
    ]
    cited += [f"impact record {r['id']} ({r['outcome']})" for r in item["records"]]
    return (
        f"Suggestion {item['id']} on pool {item['pool']} ({item['template']} v{item['version']}): {changes}. "
        f"Evidence: {'; '.join(cited)}."
    )


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_COMMENT else text[: MAX_COMMENT - 1] + "…"
