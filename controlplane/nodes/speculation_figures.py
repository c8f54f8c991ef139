"""What people see of a node's speculative-decoding rule (engine_node/speculation.py): its reported state, and
the outcome of the rule's restarts, in figures and words."""

import json


def speculation_summary(reported: dict | None) -> dict:
    """The node's speculative-decoding rule in figures and words, from what its agent reported."""
    reported = reported if isinstance(reported, dict) else {}
    state = str(reported.get("state") or "")
    speed = reported.get("tokens_per_s")
    speed = float(speed) if isinstance(speed, int | float) else None
    windows = reported.get("rejected_windows")
    windows = int(windows) if isinstance(windows, int) else None
    needed = reported.get("backoff_windows")
    if state == "off":
        text = f"off for {reported.get('off_for_s')} s; probed again after {reported.get('probe_after_s')} s"
        text += " while generation is slow"
    elif state in {"on", "probing"}:
        text = state + (f": {windows}/{needed} consecutive rejected windows" if windows is not None else "")
    elif state:
        text = state
    else:
        text = "not reported"
    if speed is not None:
        text += f"; generation {speed:.1f} tokens/s per request"
    return {
        "state": state,
        "text": text,
        "rejected_windows": windows,
        "tokens_per_s": speed,
        "last_change": str(reported.get("last_change") or "")[:500],
    }


def speculation_figures(*, result: str) -> dict | None:
    """A finished speculation_off/on command's outcome in one line (the agent reports it as JSON)."""
    try:
        document = json.loads(result) if result else None
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("speculation") not in {"off", "on"}:
        return None
    action = document["speculation"]
    if document.get("restarted"):
        text = f"engine restarted {'without' if action == 'off' else 'with'} speculative decoding"
    else:
        text = f"speculative decoding {action}; the engine already ran that way"
    if isinstance(document.get("warmup"), str):
        text += f" · warmup {document['warmup'][:20]}"
    return {"state": action, "text": text}
