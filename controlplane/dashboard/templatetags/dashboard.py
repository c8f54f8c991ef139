"""Template filters: compact JSON for parameter values, the hot/cold badge, shares as percentages."""

import json

from django import template
from django.utils.html import format_html

register = template.Library()

_APPLY_TITLE = {
    "hot": "hot: applied per request at the gateway, no restart",
    "cold": "cold: needs a drained restart of vLLM",
}


@register.filter
def compact(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


@register.simple_tag
def apply_badge(apply: str):
    return format_html('<span class="badge {}" title="{}">{}</span>', apply, _APPLY_TITLE.get(apply, ""), apply)


@register.filter
def percent(value, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage: 0.9134 -> "91.3 %"; None -> "—"."""
    if value is None:
        return "—"
    return f"{100 * value:.{digits}f} %"
