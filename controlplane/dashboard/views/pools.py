"""Pool pages: list, detail with timeline, publish, rollback after a diff preview, and the pool's client keys."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.advice.selectors import pool_suggestions
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.dashboard.charts import pool_charts
from controlplane.dashboard.live import live_numbers
from controlplane.lib import realtime
from controlplane.lib.errors import DomainError, InvalidField
from controlplane.metrics.samples import sample_window_s
from controlplane.nodes import selectors, whitelist_pins
from controlplane.nodes.gate import version_gate, version_gates
from controlplane.nodes.models import ClientKey, NodeCommand, Pool
from controlplane.nodes.services import canary_settings, client_keys, rollouts
from controlplane.nodes.services import pools as services
from controlplane.operations import degradation
from controlplane.operations import selectors as operations
from controlplane.params.diff import needs_restart
from controlplane.params.models import TemplateVersion
from controlplane.params.selectors import template_get, template_version_get


@page(write_action=Action.POOL_WRITE)
def pool_list(request):
    form = forms.PoolCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            pool = services.pool_create(actor=request.user, **form.cleaned_data)
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Pool {pool.name} created.")
            return redirect("dashboard:pool-detail", name=pool.name)
    pools = Pool.objects.select_related("desired_version__template")
    return render(request, "nodes/pool_list.html", {"pools": pools, "form": form})


@page()
def pool_detail(request, name):
    return _render_pool(request, name)


def _render_pool(request, name, publish_form=None, status=200, issued_key=None):
    live_seq = live_numbers(realtime.pool_group(name))  # before the state the page shows
    pool = get_object_or_404(Pool.objects.select_related("desired_version__template"), name=name)
    versions = list(TemplateVersion.objects.select_related("template").order_by("template__name", "-number"))
    now = timezone.now()
    # Production: each version with the gate's verdict, so the form says which ones may go without an override.
    gates = version_gates(versions=versions, now=now) if pool.is_production else {}
    return render(
        request,
        "nodes/pool_detail.html",
        {
            "pool": pool,
            "live_seq": live_seq,
            "timeline": selectors.pool_timeline(pool=pool),
            "history": operations.pool_history(pool=pool),
            "degradation": operations.pool_degradation(pool=pool),
            "versions": [(v, gates.get(v.pk)) for v in versions],
            # Non-production: how far its desired version is from counting as run, for production's gate.
            "gate": version_gate(version=pool.desired_version, now=now)
            if pool.desired_version and not pool.is_production
            else None,
            "version_runs": pool.version_runs.select_related("version__template")[:10],
            "cleanups": [
                selectors.command_summary(command=c)
                for c in NodeCommand.objects.filter(
                    node__pool=pool, op=NodeCommand.Op.CLEANUP, finished_at__isnull=True
                ).select_related("node__pool", "requested_by")
            ],
            "rollback_targets": selectors.pool_rollback_targets(pool=pool),
            "previous": selectors.pool_previous_version(pool=pool),
            "pinned": whitelist_pins.release_pins(whitelist_pins.latest_release(pool)),
            "whitelist_changes": whitelist_pins.pool_whitelist_changes(pool),
            "rollout": selectors.pool_rollout(pool=pool, now=now),
            "canary": _canary(pool),
            "canary_stages_text": stages_text(pool.canary_stages),
            "sample_window_s": sample_window_s(),
            "publish_form": publish_form or forms.PublishForm(),
            "charts": pool_charts(pool),
            "suggestions": pool_suggestions(pool=pool)["suggestions"],
            "client_keys": selectors.pool_client_keys(pool=pool),
            "issued_key": issued_key,
        },
        status=status,
    )


@require_POST
@page(write_action=Action.POOL_PUBLISH)
def pool_publish(request, name):
    pool = get_object_or_404(Pool, name=name)
    form = forms.PublishForm(request.POST)
    if form.is_valid():
        try:
            version = _version_from_ref(form.cleaned_data["version"])
            release = services.pool_publish(
                actor=request.user,
                pool=pool,
                version=version,
                reason=form.cleaned_data["reason"],
                override_reason=form.cleaned_data["override_reason"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Published {release.version} to {pool.name}.")
            return redirect("dashboard:pool-detail", name=name)
    return _render_pool(request, name, publish_form=form, status=400)


@page(Action.POOL_ROLLBACK, write_action=Action.POOL_ROLLBACK)
def pool_rollback(request, name):
    """GET previews the rollback's diff; POST (with a reason) carries it out."""
    pool = get_object_or_404(Pool.objects.select_related("desired_version__template"), name=name)
    ref = request.POST.get("version") if request.method == "POST" else request.GET.get("version", "")
    target = _version_from_ref(ref) if ref else selectors.pool_previous_version(pool=pool)
    if target is None:
        messages.error(request, f"{pool.name} has no earlier version to roll back to.")
        return redirect("dashboard:pool-detail", name=name)
    form = forms.RollbackForm(request.POST or None, initial={"version": target.ref})
    if request.method == "POST" and form.is_valid():
        try:
            release = services.pool_rollback(
                actor=request.user, pool=pool, version=target, reason=form.cleaned_data["reason"]
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Rolled {pool.name} back to {release.version}.")
            return redirect("dashboard:pool-detail", name=name)
    changes = selectors.pool_change_preview(pool=pool, version=target)
    return render(
        request,
        "nodes/pool_rollback.html",
        {
            "pool": pool,
            "target": target,
            "target_ref": target.ref,
            "changes": changes,
            "needs_restart": needs_restart(changes),
            "whitelist_changes": whitelist_pins.rollback_whitelist_preview(pool, target),
            "form": form,
            "rollback_targets": selectors.pool_rollback_targets(pool=pool),
        },
        status=400 if request.method == "POST" else 200,
    )


def _version_from_ref(ref: str) -> TemplateVersion:
    template_name, _, number = (ref or "").partition(":")
    if not template_name or not number:
        raise InvalidField("version", "choose a template version")
    return template_version_get(template=template_get(name=template_name), number=number)


@require_POST
@page(write_action=Action.POOL_DEGRADE)
def pool_degradation(request, name):
    """Degrade the pool now (`active=true`) or end its degradation, with the reason given."""
    pool = get_object_or_404(Pool, name=name)
    enable = request.POST.get("active") == "true"
    switch = degradation.degradation_enable if enable else degradation.degradation_disable
    try:
        switch(actor=request.user, pool=pool, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing changed. {exc.message}")
    else:
        messages.success(request, f"{pool.name} is degraded now." if enable else f"{pool.name} left degradation.")
    return redirect("dashboard:pool-detail", name=name)


def _canary(pool):
    rollout = selectors.pool_latest_rollout(pool=pool)
    return selectors.rollout_summary(rollout=rollout, now=timezone.now()) if rollout else None


@require_POST
@page(write_action=Action.POOL_PUBLISH)
def pool_rollout_action(request, name):
    """Pause, resume, promote now or abort the pool's running rollout; a reason is required."""
    pool = get_object_or_404(Pool, name=name)
    rollout = selectors.pool_active_rollout(pool=pool)
    actions = {
        "pause": rollouts.rollout_pause,
        "resume": rollouts.rollout_resume,
        "promote": rollouts.rollout_promote,
        "abort": rollouts.rollout_abort,
    }
    action = actions.get(request.POST.get("action", ""))
    if rollout is None or action is None:
        messages.error(request, f"{pool.name} has no rollout under way to change.")
    else:
        try:
            action(actor=request.user, rollout=rollout, reason=request.POST.get("reason", ""))
        except DomainError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Rollout of {rollout.to_version}: {request.POST['action']} done.")
    return redirect("dashboard:pool-detail", name=name)


@require_POST
@page(write_action=Action.POOL_WRITE)
def pool_canary(request, name):
    """Change the pool's canary stages (`1, 25%, 100%`) and analysis window for its next publishes, and (a
    non-production pool) how long a version must run healthy on one of its nodes before production may get it."""
    pool = get_object_or_404(Pool, name=name)
    try:
        canary_settings.pool_canary_update(
            actor=request.user,
            pool=pool,
            canary_stages=stages_parse(request.POST.get("stages", "")),
            analysis_window_s=_whole_number("analysis_window_s", request.POST.get("analysis_window_s", "")),
            soak_s=_whole_number("soak_s", request.POST["soak_s"]) if "soak_s" in request.POST else None,
            reason=request.POST.get("reason", ""),
        )
    except DomainError as exc:
        messages.error(request, f"Canary settings unchanged. {exc.message}")
    else:
        messages.success(request, f"{pool.name}'s next publishes roll out in the new stages.")
    return redirect("dashboard:pool-detail", name=name)


def stages_text(stages: list[dict]) -> str:
    """`[{"nodes": 1}, {"percent": 100}]` as people type it: `1, 100%`."""
    return ", ".join(f"{s['percent']}%" if "percent" in s else str(s.get("nodes")) for s in stages)


def stages_parse(text: str) -> list[dict]:
    """`1, 25%, 100%` → `[{"nodes": 1}, {"percent": 25}, {"percent": 100}]` (the service checks the rest)."""
    stages = []
    for part in (p.strip() for p in text.split(",")):
        number = part.removesuffix("%").strip()
        if not number.isdigit():
            raise InvalidField("canary_stages", f"{part or 'an empty stage'}: write a node count (2) or a share (25%)")
        stages.append({"percent": int(number)} if part.endswith("%") else {"nodes": int(number)})
    return stages


def _whole_number(field: str, text: str) -> int:
    if not text.strip().isdigit():
        raise InvalidField(field, "must be a whole number of seconds")
    return int(text)


@require_POST
@page(write_action=Action.CLIENT_KEY_MANAGE)
def pool_client_key_create(request, name):
    """Issue a gateway client key for the pool and show it this once on the pool page."""
    pool = get_object_or_404(Pool, name=name)
    tags = [tag for tag in request.POST.get("business_tags", "").replace(",", " ").split() if tag]
    try:
        client_key, key = client_keys.client_key_create(
            actor=request.user,
            name=request.POST.get("name", "").strip(),
            pools=[pool],
            kind=request.POST.get("kind", "client"),
            business_tags=tags,
        )
    except DomainError as exc:
        messages.error(request, f"No key issued. {exc.message}")
        return redirect("dashboard:pool-detail", name=name)
    return _render_pool(request, name, issued_key={"name": client_key.name, "kind": client_key.kind, "key": key})


@require_POST
@page(write_action=Action.CLIENT_KEY_MANAGE)
def client_key_revoke(request, pk):
    """Revoke a key; back to the pool page it was revoked from."""
    client_key = get_object_or_404(ClientKey, pk=pk)
    back = request.POST.get("pool") or client_key.pools.values_list("name", flat=True).first()
    try:
        client_keys.client_key_revoke(actor=request.user, client_key=client_key, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing revoked. {exc.message}")
    else:
        messages.success(request, f"Key {client_key.name} ({client_key.key_prefix}…) revoked; nodes refuse it now.")
    return redirect("dashboard:pool-detail", name=back) if back else redirect("dashboard:pools")
