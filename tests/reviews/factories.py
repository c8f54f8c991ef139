"""Review items as a node's batch stores them (through the ingest service, never by hand)."""

from controlplane.nodes.models import EngineNode
from controlplane.nodes.services.engine_nodes import node_create
from controlplane.reviews.services import review_samples_ingest


def sample(text: str, **fields) -> dict:
    return {
        "text": text,
        "intent": "other",
        "confidence": 0.41,
        "runner_up": "return_refund",
        "runner_up_confidence": 0.33,
        "reasons": ["below_floor"],
        "tier": "normal",
        **fields,
    }


def node_in(pool, actor, name: str = "gpu-1") -> EngineNode:
    existing = EngineNode.objects.filter(name=name).first()
    return existing or node_create(actor=actor, name=name, pool=pool)[0]


def ingest(node: EngineNode, *samples: dict):
    return review_samples_ingest(node_id=node.pk, samples=list(samples))
