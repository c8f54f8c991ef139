"""Background work of pools: the canary rollouts' analysis pass."""

from celery import shared_task

from controlplane.nodes.services.rollouts import rollouts_analyse


@shared_task(ignore_result=True, acks_late=False)
def rollouts_analyse_task() -> int:
    """Move every running rollout on (ACKs noted, finished windows analysed); each rollout under its row lock."""
    return rollouts_analyse()
