"""Simulated tokens: a cheap prompt-token estimate, per-request seeds, and deterministic pseudo-text replies.

Prompt tokens are estimated without a tokenizer: every non-ASCII character (a CJK character, say) is
one token, every run of ASCII characters is one token per 4 characters (rounded up), and a chat
message adds 3 template tokens (`<|im_start|>`, the role, `<|im_end|>`) plus 2 for the reply header.
The estimate keeps the pieces themselves so that prompts sharing a prefix share prefix-cache blocks.
"""

import hashlib
import json
import math
import random
import re

_PIECE = re.compile(r"[\x00-\x7f]+|[^\x00-\x7f]")
_ASCII_CHARS_PER_TOKEN = 4

_WORDS = (
    "the", "model", "answers", "each", "request", "with", "a", "short", "reply", "about", "cache", "blocks",
    "batches", "tokens", "and", "latency", "while", "scheduler", "keeps", "every", "sequence", "moving",
    "through", "prefill", "decode", "on", "one", "simulated", "GPU", "so", "operators", "can", "watch",
    "queues", "grow", "shrink", "under", "load",
)  # fmt: skip
_HANZI = "模型回答每个请求缓存块批次令牌延迟调度器保持序列预填充解码显卡运维观察队列增长收缩负载推理服务节点"
_END = {"en": ".", "zh": "。"}
_COMMA = {"en": ",", "zh": "，"}


def text_pieces(text: str) -> list[str]:
    """The simulated tokens of `text`: one per non-ASCII character, one per 4 ASCII characters."""
    pieces: list[str] = []
    for match in _PIECE.finditer(text):
        run = match.group()
        if run.isascii():
            pieces.extend(run[i : i + _ASCII_CHARS_PER_TOKEN] for i in range(0, len(run), _ASCII_CHARS_PER_TOKEN))
        else:
            pieces.append(run)
    return pieces


def chat_pieces(messages: list[dict]) -> list[str]:
    """The simulated tokens of a chat prompt, with a ChatML-like template around each message."""
    pieces: list[str] = []
    for message in messages:
        pieces += ["<|im_start|>", str(message.get("role", "user"))]
        pieces += text_pieces(message_text(message.get("content")))
        pieces.append("<|im_end|>")
    return [*pieces, "<|im_start|>", "assistant"]


def message_text(content: object) -> str:
    """The text of a message's content, which is a string or a list of OpenAI content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def request_seed(simulator_seed: int, content: object, request_seed: object = None) -> int:
    """A 64-bit seed from the simulator's --seed, the request's prompt and its own `seed` field."""
    canonical = json.dumps([simulator_seed, content, request_seed], sort_keys=True, ensure_ascii=False)
    return int.from_bytes(hashlib.blake2b(canonical.encode("utf-8"), digest_size=8).digest(), "big")


def natural_length(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    """How many tokens the simulated model wants to say before it stops on its own."""
    return max(low, min(high, round(rng.lognormvariate(math.log(median), sigma))))


class ReplyWriter:
    """Writes a reply of exactly `length` tokens, ending a sentence on "stop" and mid-sentence on "length"."""

    def __init__(self, rng: random.Random, length: int, finish_reason: str) -> None:
        self._rng = rng
        self._length = length
        self._finish_reason = finish_reason
        self._position = 0
        self._language = "en"
        self._left_in_sentence = 0
        self._after_comma = False

    def take(self, count: int) -> str:
        """The next `count` tokens of the reply as text."""
        return "".join(self._next_token() for _ in range(count))

    def _next_token(self) -> str:
        position = self._position
        self._position += 1
        stops = self._finish_reason == "stop"
        if stops and position == self._length - 1:
            return _END[self._language]
        # Punctuation never lands on the last token of a cut reply, nor just before the final full stop.
        may_punctuate = position < self._length - (2 if stops else 1)
        if position == 0 or self._left_in_sentence < 0:
            self._start_sentence()
            return self._word(first=True, opening=position == 0)
        if self._left_in_sentence == 0:
            if may_punctuate:
                self._left_in_sentence = -1
                return _END[self._language]
            return self._word(first=False, opening=False)
        self._left_in_sentence -= 1
        wants_comma = self._rng.random() < 0.08
        if may_punctuate and wants_comma and self._left_in_sentence > 1 and not self._after_comma:
            self._after_comma = True
            return _COMMA[self._language]
        self._after_comma = False
        return self._word(first=False, opening=False)

    def _start_sentence(self) -> None:
        self._language = "en" if self._rng.random() < 0.6 else "zh"
        self._left_in_sentence = self._rng.randint(5, 16)

    def _word(self, first: bool, opening: bool) -> str:
        if self._language == "zh":
            return self._rng.choice(_HANZI)
        word = self._rng.choice(_WORDS)
        if first:
            word = word[0].upper() + word[1:]
        return word if opening else " " + word
