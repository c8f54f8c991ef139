"""A canary rollout on the pool page in Chromium: the stage and its nodes' ACKs arrive live while the control plane
moves the rollout on; an SRE changes the canary settings, pauses, resumes and aborts, each with a reason, each
audited."""

import pytest
from django.utils import timezone

from controlplane.accounts.models import User
from controlplane.audit.models import AuditEntry
from controlplane.metrics.samples import sample_window_s
from controlplane.nodes.models import EngineNode, Pool, PoolRelease, Rollout
from controlplane.nodes.services import agent_sessions, rollouts
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.nodes.services.pools import pool_publish
from controlplane.params.models import TemplateVersion
from controlplane.params.services.templates import template_version_create
from tests.browser.sessions import open_signed_in
from tests.browser.test_oncall import off_thread

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NODES = ("gpu-c1", "gpu-c2", "gpu-c3")


def canary_under_way() -> None:
    """staging: three connected nodes on chat-default v1; a cooler v2 published goes to gpu-c1 first."""
    sre = User.objects.get(username="sre")
    staging = Pool.objects.get(name="staging")
    v1 = staging.desired_version
    for name in NODES:
        node_create(actor=sre, name=name, pool=staging)
    now = timezone.now()
    EngineNode.objects.filter(name__in=NODES).update(
        is_connected=True, last_seen_at=now, connected_at=now, applied_hash=v1.content_hash, applied_version=v1
    )
    document = {"inference_params": {"temperature": {"strict": 0.15}, "max_tokens": {"whitelist": []}}}
    v2 = template_version_create(
        actor=sre, template=v1.template, document=document, base_number=v1.number, comment="cooler strict tier"
    )
    pool_publish(actor=sre, pool=Pool.objects.get(pk=staging.pk), version=v2, reason="cooler strict tier")


def canary_acks() -> None:
    """gpu-c1 applies v2 and the analysis pass notes it: the stage's window starts."""
    rollout = Rollout.objects.get(pool__name="staging", state="running")
    node = EngineNode.objects.get(name="gpu-c1")
    agent_sessions.node_config_result(
        node_id=node.pk, ok=True, content_hash=rollout.to_version.content_hash, version=None
    )
    rollouts.rollouts_analyse()


def test_canary_progress_is_live_and_sre_pauses_resumes_and_aborts(seeded, server_url, new_page, shot):
    page = new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    # Settings first: one node, then the whole pool, a 60 s window; saved for the next publish.
    open_signed_in(page, server_url, "sre", "/pools/staging/")
    page.locator('[data-testid="canary-settings"] summary').click()
    page.fill('[data-testid="canary-stages-input"]', "1, 100%")
    page.fill('[data-testid="canary-window-input"]', "60")
    page.fill('[data-testid="canary-settings-reason"]', "one canary node first")
    page.click("#canary-settings-save")
    page.wait_for_url(f"{server_url}/pools/staging/")
    assert page.inner_text('[data-testid="canary-stages-now"]') == "1, 100%"
    staging = Pool.objects.get(name="staging")
    assert (staging.canary_stages, staging.analysis_window_s) == ([{"nodes": 1}, {"percent": 100}], 60)
    # A stage list that shrinks is refused with the reason, and nothing changes.
    page.locator('[data-testid="canary-settings"] summary').click()
    page.fill('[data-testid="canary-stages-input"]', "50%, 20%, 100%")
    page.fill('[data-testid="canary-settings-reason"]', "typo")
    page.click("#canary-settings-save")
    page.wait_for_url(f"{server_url}/pools/staging/")
    assert "percentages must grow" in page.inner_text("body")
    assert Pool.objects.get(name="staging").canary_stages == [{"nodes": 1}, {"percent": 100}]

    # A publish starts a canary: stage 1 of 2, gpu-c1 pending, the other two are the baseline.
    off_thread(canary_under_way)
    page.goto(f"{server_url}/pools/staging/")
    page.locator("#live-state.on").wait_for()
    assert page.inner_text('[data-testid="canary-state"]') == "running"
    assert page.inner_text('[data-testid="canary-stage"]') == "1"
    assert "gpu-c1 pending" in page.text_content('[data-testid="canary-stages"]')
    assert page.inner_text('[data-testid="canary-window"]') == "waiting for ACKs"
    shot(page, "60-canary-running-waiting-for-ack")

    # The canary node ACKs and the analysis pass moves on: the page follows without a reload.
    off_thread(canary_acks)
    page.wait_for_function(
        """() => document.querySelector('[data-testid="canary-stages"]').textContent.includes("gpu-c1 ACK")"""
    )
    page.wait_for_function(
        """() => /^\\d+ s$/.test(document.querySelector('[data-testid="canary-window"]').textContent)"""
    )
    # The 60 s window, after the node's 10 s of samples turn over to the new version.
    assert int(page.inner_text('[data-testid="canary-window"]').removesuffix(" s")) <= 60 + sample_window_s()
    shot(page, "61-canary-acked-window-running")

    # Pause, resume, abort: each needs a reason and is audited as the SRE.
    def act(button: str, reason: str) -> None:
        page.fill('[data-testid="canary-reason"]', reason)
        page.click(button)
        page.wait_for_url(f"{server_url}/pools/staging/")

    act("#canary-pause", "p99 looks noisy, holding")
    assert page.inner_text('[data-testid="canary-state"]') == "paused"
    assert page.locator("#canary-resume").is_visible() and page.locator("#canary-pause").count() == 0
    shot(page, "62-canary-paused")
    act("#canary-resume", "noise explained: batch job")
    assert page.inner_text('[data-testid="canary-state"]') == "running"
    act("#canary-abort", "wrong tier changed")
    assert page.inner_text('[data-testid="canary-state"]') == "aborted"
    assert "rollout aborted: wrong tier changed" in page.inner_text('[data-testid="canary-outcome"]')
    assert page.locator("#canary-abort").count() == 0  # an ended rollout has no actions and no window
    assert page.inner_text('[data-testid="canary-window"]') == "-"
    shot(page, "63-canary-aborted")

    rollout = Rollout.objects.get(pool__name="staging")
    assert rollout.state == Rollout.State.ABORTED
    staging = Pool.objects.get(name="staging")
    assert staging.desired_version == TemplateVersion.objects.get(template__name="chat-default", number=1)
    entries = AuditEntry.objects.filter(action__in=["rollout.pause", "rollout.resume", "rollout.abort"]).order_by("id")
    assert list(entries.values_list("action", "actor_name", "reason")) == [
        ("rollout.pause", "sre", "p99 looks noisy, holding"),
        ("rollout.resume", "sre", "noise explained: batch job"),
        ("rollout.abort", "sre", "wrong tier changed"),
    ]
    settings_entry = AuditEntry.objects.get(action="pool.canary_update")
    assert (settings_entry.actor_name, settings_entry.reason) == ("sre", "one canary node first")
    # The abort's rollback release is on the pool's timeline; the rollout.abort entry is its audit record.
    release = PoolRelease.objects.filter(pool=staging).order_by("-id").first()
    assert (release.kind, release.actor.username) == ("rollback", "sre")
    assert "rollout aborted: wrong tier changed" in release.reason

    # The audit page lists them too.
    page.goto(f"{server_url}/audit/")
    body = page.inner_text("body")
    for text in ("rollout.pause", "rollout.resume", "rollout.abort", "pool.canary_update"):
        assert text in body
    shot(page, "64-canary-audit")
