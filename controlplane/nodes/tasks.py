"""Background work of pools: the canary rollouts' analysis pass, the production gate's watch, waiting cleanups."""

from celery import shared_task

from controlplane.nodes.services.cleanup import cleanups_dispatch_due
from controlplane.nodes.services.rollouts import rollouts_analyse
from controlplane.nodes.services.version_runs import version_runs_watch


@shared_task(ignore_result=True, acks_late=False)
def rollouts_analyse_task() -> int:
    """Move every running rollout on (ACKs noted, finished windows analysed); each rollout under its row lock."""
    return rollouts_analyse()


@shared_task(ignore_result=True, acks_late=False)
def version_runs_watch_task() -> int:
    """Check every node of a non-production pool on its version: the production gate's evidence."""
    return version_runs_watch()


@shared_task(ignore_result=True, acks_late=False)
def cleanups_dispatch_due_task() -> int:
    """Expire cleanup leases past their bound and send the cleanups waiting for them."""
    return cleanups_dispatch_due()
