"""Suggestion pages: the draft version a suggestion opens, previewed as a diff, and the click that saves it."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render

from controlplane.accounts.roles import Action
from controlplane.advice import selectors
from controlplane.advice.services import draft_params, evidence_text, suggestion_apply
from controlplane.dashboard.access import page
from controlplane.lib.errors import DomainError, InvalidField
from controlplane.nodes.models import Pool
from controlplane.params import schema
from controlplane.params.diff import needs_restart, params_diff


@page(write_action=Action.TEMPLATE_WRITE)
def suggestion_preview(request, name, suggestion):
    pool = get_object_or_404(Pool.objects.select_related("desired_version__template"), name=name)
    error = None
    if request.method == "POST":
        try:
            version = suggestion_apply(
                actor=request.user,
                pool=pool,
                suggestion_id=suggestion,
                base_number=_number(request.POST.get("base_version")),
                comment=request.POST.get("comment", ""),
            )
        except DomainError as exc:
            error = exc.message
        else:
            messages.success(request, f"Saved {version} as a draft (not published).")
            return redirect("dashboard:version-detail", name=version.template.name, number=version.number)
    item = selectors.suggestion_find(pool=pool, suggestion_id=suggestion)
    if not item["is_actionable"]:
        raise InvalidField("suggestion", f"{item['id']} is advice only: it changes no field, so it opens no draft")
    template = pool.desired_version.template
    template.refresh_from_db()
    base = template.versions.get(number=template.latest_number)
    changes = params_diff(base.effective_params, schema.effective(draft_params(item, base)))
    return render(
        request,
        "advice/suggestion_preview.html",
        {
            "pool": pool,
            "item": item,
            "base": base,
            "changes": changes,
            "needs_restart": needs_restart(changes),
            "comment": evidence_text(item),
            "error": error,
        },
        status=409 if error else 200,
    )


def _number(text) -> int | None:
    return int(text) if text and str(text).isdigit() else None
