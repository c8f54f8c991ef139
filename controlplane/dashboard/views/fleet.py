"""Fleet pages: every node by pool with live status, one node's detail, credentials and operations."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from controlplane.accounts.roles import Action
from controlplane.alerts import signals
from controlplane.dashboard import forms
from controlplane.dashboard.access import page
from controlplane.dashboard.charts import node_charts
from controlplane.dashboard.live import live_numbers
from controlplane.lib import realtime
from controlplane.lib.errors import DomainError
from controlplane.metrics import selectors as metrics
from controlplane.nodes import selectors
from controlplane.nodes.models import EngineNode, NodeCommand, Pool
from controlplane.nodes.services import cleanup
from controlplane.nodes.services import engine_nodes as services


@page(write_action=Action.NODE_CREDENTIALS)
def fleet(request):
    """GET lists the fleet; POST registers a node and shows its token exactly once."""
    form = forms.NodeCreateForm(request.POST or None)
    issued = None
    if request.method == "POST" and form.is_valid():
        try:
            pool = get_object_or_404(Pool, name=form.cleaned_data["pool"])
            node, token = services.node_create(
                actor=request.user,
                name=form.cleaned_data["name"],
                pool=pool,
                description=form.cleaned_data["description"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            issued = {"node": node.name, "token": token}
            form = forms.NodeCreateForm()
    live_seq = live_numbers(realtime.fleet_group())  # before the state the page shows
    now = timezone.now()
    pools = Pool.objects.select_related("desired_version__template").prefetch_related("nodes")
    return render(
        request,
        "nodes/fleet.html",
        {
            "rollouts": [selectors.pool_rollout(pool=pool, now=now) for pool in pools],
            "pools": pools,
            "form": form,
            "issued": issued,
            "live_seq": live_seq,
        },
    )


@page()
def node_detail(request, name):
    return _render_node(request, name, issued=None)


def _render_node(request, name, *, issued):
    pool_name = EngineNode.objects.filter(name=name).values_list("pool__name", flat=True).first()
    live_seq = live_numbers(realtime.pool_group(pool_name)) if pool_name else "{}"  # before the node's state
    node = get_object_or_404(
        EngineNode.objects.select_related("pool__desired_version__template", "applied_version__template"), name=name
    )
    return render(
        request,
        "nodes/node_detail.html",
        {
            "node": node,
            "summary": selectors.node_summary(node=node, now=timezone.now()),
            "client": selectors.node_client_example(node=node),
            "commands": [
                selectors.command_summary(command=c) for c in node.commands.select_related("requested_by")[:20]
            ],
            "ops": [c for c in NodeCommand.Op.choices if c[0] not in NodeCommand.SYSTEM_OPS],
            "issued": issued,
            "live_seq": live_seq,
            "charts": node_charts(node),
            "absent": [
                {"label": signals.SIGNALS[key].label if key in signals.SIGNALS else key, "reason": reason}
                for key, reason in sorted(
                    metrics.node_absent_figures(name=node.name, max_age_s=signals.SAMPLE_FRESH_S).items()
                )
            ],
        },
    )


@require_POST
@page(write_action=Action.NODE_OPERATE)
def node_command(request, name):
    node = get_object_or_404(EngineNode, name=name)
    try:
        command = services.node_command_request(
            actor=request.user, node=node, op=request.POST.get("op", ""), reason=request.POST.get("reason", "")
        )
    except DomainError as exc:
        messages.error(request, f"Nothing sent. {exc.message}")
    else:
        messages.success(request, f"Sent {command.get_op_display().lower()} to {node.name}.")
    return redirect("dashboard:node-detail", name=name)


@require_POST
@page(write_action=Action.NODE_OPERATE)
def pool_cleanup(request, name):
    """Clean up every connected node of the pool, one node at a time."""
    pool = get_object_or_404(Pool, name=name)
    try:
        commands = cleanup.pool_cleanup_request(actor=request.user, pool=pool, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Nothing sent. {exc.message}")
    else:
        names = ", ".join(c.node.name for c in commands)
        messages.success(request, f"Memory cleanup of {pool.name} started, one node at a time: {names}.")
    return redirect("dashboard:pool-detail", name=name)


@require_POST
@page(write_action=Action.NODE_CREDENTIALS)
def node_token(request, name):
    """Rotate (shows the new token once) or revoke the node's token."""
    node = get_object_or_404(EngineNode.objects.select_related("pool"), name=name)
    issued = None
    try:
        if request.POST.get("action") == "revoke":
            services.node_token_revoke(actor=request.user, node=node, reason=request.POST.get("reason", ""))
            messages.success(request, f"Token of {node.name} revoked; its connection was closed.")
        else:
            token = services.node_token_rotate(actor=request.user, node=node, reason=request.POST.get("reason", ""))
            issued = {"node": node.name, "token": token}
    except DomainError as exc:
        messages.error(request, exc.message)
    if issued is None:
        return redirect("dashboard:node-detail", name=name)
    return _render_node(request, name, issued=issued)
