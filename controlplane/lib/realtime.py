"""The one place that sends to Channels groups: group names and typed event payloads."""

from typing import TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def fleet_group() -> str:
    return "fleet"


def pool_group(pool_name: str) -> str:
    return f"pool.{pool_name}"


class VersionRef(TypedDict):
    template: str
    number: int
    hash: str


class PoolReleased(TypedDict):
    type: str  # "pool.released": consumers forward it through their `pool_released` handler
    pool: str
    kind: str
    version: VersionRef
    previous_version: VersionRef | None
    actor: str
    reason: str
    at: str


def send(groups: list[str], event: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group in groups:
        async_to_sync(layer.group_send)(group, event)
