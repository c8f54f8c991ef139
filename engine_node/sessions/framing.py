"""The wire form of a session: ids, seeds, the hash chain over chunks, SSE rendering and its verification."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping

import msgspec

from engine_node.sessions.exceptions import ChainError, SeqOutOfRange

FRAMING_KEYS = ("x_session", "x_seq", "x_hash")
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{8,64}")


def new_session_id() -> str:
    """A random URL-safe id (128 bits)."""
    return secrets.token_urlsafe(16)


def new_seed() -> int:
    """A random sampling seed that fits every engine's seed field."""
    return secrets.randbelow(2**31)


def is_session_id(value: str) -> bool:
    return bool(_SESSION_ID.fullmatch(value))


def canonical_json(value: object) -> str:
    """The hashed form: sorted keys, no whitespace, non-ASCII kept (hashed as UTF-8)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def genesis_hash(session_id: str, seed: int) -> str:
    """The hash the first chunk extends: sha256 of "<session id>:<seed>"."""
    return hashlib.sha256(_utf8(f"{session_id}:{seed}")).hexdigest()


def chain_hash(prev_hash: str, payload: Mapping) -> str:
    """sha256(previous hash hex + canonical JSON of the chunk without x_session, x_seq and x_hash)."""
    return hashlib.sha256(_utf8(prev_hash + canonical_json(payload))).hexdigest()


def _framed_data(payload_json: str, session_id: str, seq: int, hash_hex: str) -> str:
    tail = f'"x_session":{json.dumps(session_id)},"x_seq":{seq},"x_hash":"{hash_hex}"}}'
    return "{" + tail if payload_json == "{}" else payload_json[:-1] + "," + tail


def render_sse(framed: Mapping) -> bytes:
    """A framed chunk as SSE bytes (`id: <seq>`, `data: <json>`): canonical JSON payload, framing keys last."""
    payload = {k: v for k, v in framed.items() if k not in FRAMING_KEYS}
    seq = framed["x_seq"]
    data = _framed_data(canonical_json(payload), framed["x_session"], seq, framed["x_hash"])
    return _utf8(f"id: {seq}\ndata: {data}\n\n")


def interrupted_event(session_id: str, last_seq: int, seed: int, reason: str) -> bytes:
    """The SSE event a client gets when its generation was abandoned; it is not part of the hash chain."""
    body = {
        "error": {"message": "generation interrupted", "type": "generation_interrupted", "param": None, "code": reason},
        "x_session": session_id,
        "x_seq": last_seq,
        "x_seed": seed,
    }
    return _utf8(f"event: interrupted\ndata: {json.dumps(body, ensure_ascii=False, separators=(',', ':'))}\n\n")


def request_summary(body: Mapping, *, path: str = "") -> dict:
    """What a session remembers of its request: endpoint, model and a hash of the messages (or prompt): of their
    canonical JSON, or of the JSON as the client sent it when the gateway forwards it raw (msgspec.Raw)."""
    conversation = body.get("messages", body.get("prompt"))
    data = bytes(conversation) if isinstance(conversation, msgspec.Raw) else _utf8(canonical_json(conversation))
    return {"path": path, "model": body.get("model"), "input_sha256": hashlib.sha256(data).hexdigest()}


def resume_position(after: str | None, last_event_id: str | None = None) -> int:
    """The seq a client last received: the `after` query parameter, else the Last-Event-ID header, else 0."""
    raw = after if after not in (None, "") else last_event_id
    if raw in (None, ""):
        return 0
    if not raw.strip().isdigit():
        raise SeqOutOfRange(f"resume position must be a non-negative integer, got {raw!r}")
    return int(raw)


def check_chain(session_id: str, seed: int, chunks, *, after_seq: int = 0, prev_hash: str | None = None) -> str:
    """Raise ChainError unless the parsed chunks continue the chain; returns the last hash.

    Pass after_seq and the hash of chunk `after_seq` to check the tail received on a resume.
    """
    if after_seq and prev_hash is None:
        raise ChainError("checking from after_seq > 0 needs the hash of that chunk")
    prev = prev_hash or genesis_hash(session_id, seed)
    expected = after_seq
    for chunk in chunks:
        expected += 1
        if chunk.get("x_session") != session_id:
            raise ChainError(f"chunk {expected}: session {chunk.get('x_session')!r}, expected {session_id!r}")
        if chunk.get("x_seq") != expected:
            raise ChainError(f"chunk {expected}: x_seq {chunk.get('x_seq')!r} (missing or repeated chunk)")
        digest = chain_hash(prev, {k: v for k, v in chunk.items() if k not in FRAMING_KEYS})
        if chunk.get("x_hash") != digest:
            raise ChainError(f"chunk {expected}: hash mismatch (content changed or chunk out of order)")
        prev = digest
    return prev


def verify_chain(session_id: str, seed: int, chunks, *, after_seq: int = 0, prev_hash: str | None = None) -> bool:
    """True when the parsed chunks (dicts) form an unbroken chain from the session's genesis (or after_seq)."""
    try:
        check_chain(session_id, seed, chunks, after_seq=after_seq, prev_hash=prev_hash)
    except ChainError:
        return False
    return True


class StreamSession:
    """The chain state of one session: how many chunks were framed and the hash the next one extends."""

    def __init__(self, session_id: str, seed: int):
        self.session_id = session_id
        self.seed = seed
        self.seq = 0
        self.last_hash = genesis_hash(session_id, seed)

    def frame(self, chunk: Mapping) -> dict:
        """The chunk with x_session, x_seq and x_hash added (any such keys it had are replaced)."""
        payload = {k: v for k, v in chunk.items() if k not in FRAMING_KEYS}
        self.seq += 1
        self.last_hash = chain_hash(self.last_hash, payload)
        return {**payload, "x_session": self.session_id, "x_seq": self.seq, "x_hash": self.last_hash}

    def frame_sse(self, chunk: Mapping) -> bytes:
        """frame() and render_sse() in one pass: the canonical JSON is built once for the hash and the wire."""
        payload = {k: v for k, v in chunk.items() if k not in FRAMING_KEYS}
        payload_json = canonical_json(payload)
        self.seq += 1
        self.last_hash = hashlib.sha256(_utf8(self.last_hash + payload_json)).hexdigest()
        return _utf8(
            f"id: {self.seq}\ndata: {_framed_data(payload_json, self.session_id, self.seq, self.last_hash)}\n\n"
        )
