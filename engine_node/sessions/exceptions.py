"""What can go wrong with a stream session, as the gateway maps it to HTTP."""


class SessionUnknown(LookupError):
    """No session with this id on this node (never existed, expired, or held by another node)."""


class SeqOutOfRange(ValueError):
    """A resume position that is negative, not a number, or beyond what the session has produced."""


class SessionClosed(RuntimeError):
    """A chunk was published to a session that has already finished or been interrupted."""


class ChainError(ValueError):
    """A chunk that does not continue the chain: wrong session, seq or hash."""
