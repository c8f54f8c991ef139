"""Small generated conversation logs for replay tests, written in the conversation-log app's JSON Lines format."""

import json

from controlplane.convlogs.reader import LogConversation, LogMessage

FIRST_MESSAGES = [
    "我的订单 20261111-8842 到哪了？",
    "Where is my order #A7731920?",
    "退货退款要多久到账？",
    "双十一有什么适合送妈妈的护肤品推荐吗",
    "优惠券为什么用不了",
]


def conversation(cid: str, started_at: float | None, *texts: str) -> LogConversation:
    """User turns `texts`, each followed by a short logged reply."""
    messages = []
    for text in texts:
        messages += [LogMessage("user", text), LogMessage("assistant", f"re: {text}")]
    return LogConversation(cid, started_at, messages)


def log_lines(count: int, *, turns: int = 1, start: float = 1_760_000_000.0, gap_s: float = 1.0) -> str:
    """`count` conversations, one per line, `gap_s` apart, first messages cycling through FIRST_MESSAGES."""
    lines = []
    for i in range(count):
        messages = []
        for turn in range(turns):
            text = FIRST_MESSAGES[i % len(FIRST_MESSAGES)] if turn == 0 else f"还有一个问题 {i}-{turn}"
            messages += [{"role": "user", "content": text}, {"role": "assistant", "content": "好的"}]
        lines.append(json.dumps({"conversation_id": f"c{i}", "created_at": start + i * gap_s, "messages": messages}))
    return "\n".join(lines) + "\n"


def store_log(actor, text: str, name: str = "festival-log"):
    from controlplane.convlogs.services.logs import conversation_log_create

    return conversation_log_create(actor=actor, name=name, filename="log.jsonl", chunks=[text.encode("utf-8")])
