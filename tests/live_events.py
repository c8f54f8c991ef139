"""Browser sockets of the numbered groups (the fleet, a pool, the alerts): what they say first."""


async def sequence_taken(socket, group: str) -> int:
    """The `sequence.taken` a numbered group's socket sends once subscribed: the number taken so far in `group`."""
    event = await socket.receive_json_from(timeout=5)
    assert event["type"] == "sequence.taken", event
    assert event["seq"]["group"] == group, event
    return event["seq"]["n"]
