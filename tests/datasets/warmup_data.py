"""Small warmup message files and conversation logs, in every shape an upload accepts."""

import csv
import io
import json

SYSTEM = "你是商城客服助手。"

# Eight conversations of a festival sale. User queries, after normalisation, and how often each is asked:
#   我的订单到哪了 4 (spelled "我的订单到哪了？" twice, "我的订单到哪了" once, "我的订单到哪了！！" once)
#   where is my order 3 ("Where is my order?" twice, "where is my order" once)
#   定金可以退吗 2, 优惠券怎么用 2 (a tie: 定金 is asked first)
#   退款多久到账 1, 发票 1
CONVERSATIONS: list[list[tuple[str, str]]] = [
    [("system", SYSTEM), ("user", "我的订单到哪了？"), ("assistant", "请提供订单号。"), ("user", "定金可以退吗")],
    [("user", "Where is my order?"), ("assistant", "Could you share the order number?")],
    [("system", SYSTEM), ("user", "优惠券怎么用？"), ("assistant", "结算页选择即可。"), ("user", "我的订单到哪了")],
    [("user", "where is my order"), ("assistant", "Sure.")],
    [("user", "我的订单到哪了？"), ("assistant", "已发货。"), ("user", "定金可以退吗？")],
    [("user", "  优惠券怎么用  "), ("assistant", "结算页选择即可。")],
    [("user", "Where is my order?"), ("assistant", "Sure."), ("user", "退款多久到账")],
    [("user", "我的订单到哪了！！"), ("assistant", "明天送达。"), ("user", "能开发票吗"), ("assistant", "可以。")],
]
EXPECTED_TOP = [
    {"text": "我的订单到哪了？", "count": 4},
    {"text": "Where is my order?", "count": 3},
    {"text": "定金可以退吗", "count": 2},
    {"text": "优惠券怎么用？", "count": 2},
    {"text": "退款多久到账", "count": 1},
    {"text": "能开发票吗", "count": 1},
]
USER_MESSAGES = 13


def conversation_lines(conversations=CONVERSATIONS) -> str:
    """One conversation per line: {"messages": [...]}, with the extra fields real exports carry."""
    return "".join(
        json.dumps(
            {"id": f"c{i}", "started_at": "2024-11-11T00:00:00+08:00", "messages": _messages(turns)},
            ensure_ascii=False,
        )
        + "\n"
        for i, turns in enumerate(conversations, start=1)
    )


def message_lines(conversations=CONVERSATIONS) -> str:
    """One message per line: {"role", "content", "conversation_id"}."""
    return "".join(
        json.dumps({"conversation_id": f"c{i}", "role": role, "content": content}, ensure_ascii=False) + "\n"
        for i, turns in enumerate(conversations, start=1)
        for role, content in turns
    )


def csv_log(conversations=CONVERSATIONS, *, with_ids: bool = True) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["conversation_id", "role", "content"] if with_ids else ["role", "content"])
    for i, turns in enumerate(conversations, start=1):
        for role, content in turns:
            writer.writerow([f"c{i}", role, content] if with_ids else [role, content])
    return out.getvalue()


def _messages(turns) -> list[dict]:
    return [{"role": role, "content": content} for role, content in turns]


def messages_csv(rows: list[dict], columns=("text", "intent", "business_tag")) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({column: row.get(column, "") for column in columns})
    return out.getvalue().encode("utf-8")


def messages_jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")


MESSAGES = [
    {"text": "我的订单到哪了？", "intent": "order_status"},
    {"text": "满300减50的券怎么用", "intent": "coupon_promotion", "business_tag": "promo:1111"},
    {"text": "How do I get a refund?", "intent": "return_refund"},
    {"text": "这个条款是什么意思", "intent": "legal_policy", "business_tag": "legal"},
    {"text": "你好"},
]
