"""The figures of a conversation log against a pool's parameters, gathered one conversation at a time in flat memory.

Reply lengths (overall, first turn, later turns, per intent), prompt lengths against the long-context threshold, turns
per conversation and strict-pattern hits. The intent of a conversation is the pool's classifier's reading of its first
user message, and the strict patterns run on RE2 over each user message's edges: the gateway's own policy code
(engine_node/policy), so the figures are what the gateway would decide. A message without a token count in the log
gets the gateway's estimate (one token per CJK character, one per four other characters), and the result says how
many were estimated.
"""

from __future__ import annotations

from controlplane.convlogs.histogram import TokenHistogram
from controlplane.convlogs.reader import LogConversation
from engine_node.policy.explain import estimate_tokens
from engine_node.policy.rules import Policy

FIXED_LIMITS = (256, 512)
NO_INTENT = "(no user message)"
REPLY_BINS = (16, 1024)
PROMPT_BINS = (128, 8192)
MAX_TURNS = 200


class LogAnalyser:
    """Feed conversations with `add`; `result()` is a JSON-ready dict of the figures."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.cap = policy.params["max_tokens"]["default"]
        self.long_threshold = policy.params["batch"]["long_context_threshold"]
        self.floor = policy.params["intent"]["confidence_floor"]
        self.conversations = 0
        self.messages = 0
        self.replies = TokenHistogram()
        self.first_turn = TokenHistogram()
        self.later_turns = TokenHistogram()
        self.prompts = TokenHistogram()
        self.turns = TokenHistogram(MAX_TURNS)
        self.intents: dict[str, dict] = {}
        self.tokens_from_log = 0
        self.tokens_estimated = 0
        self.prompts_from_log = 0
        self.prompts_estimated = 0
        self.user_messages = 0
        self.user_messages_with_hit = 0
        self.conversations_with_hit = 0
        self.pattern_hits = [0] * len(policy.patterns)
        self._pattern_index = {pattern.pattern: i for i, pattern in enumerate(policy.patterns)}

    def add(self, conversation: LogConversation) -> None:
        self.conversations += 1
        self.messages += len(conversation.messages)
        intent = self._intent(conversation)
        context = 0
        turn = 0
        user_turns = 0
        hit_here = False
        for message in conversation.messages:
            tokens = self._tokens(message)
            if message.role == "user":
                user_turns += 1
                hit_here |= self._strict(message.text)
            elif message.role == "assistant":
                if message.prompt_tokens is not None:
                    prompt = message.prompt_tokens
                    self.prompts_from_log += 1
                else:
                    prompt = context
                    self.prompts_estimated += 1
                self.prompts.add(prompt)
                self.replies.add(tokens)
                intent["replies"].add(tokens)
                if turn == 0:
                    self.first_turn.add(tokens)
                    intent["first_turn"].add(tokens)
                else:
                    self.later_turns.add(tokens)
                turn += 1
            context += tokens
        self.turns.add(min(user_turns, MAX_TURNS))
        self.conversations_with_hit += hit_here

    def _tokens(self, message) -> int:
        if message.tokens is not None:
            if message.role == "assistant":
                self.tokens_from_log += 1
            return message.tokens
        if message.role == "assistant":
            self.tokens_estimated += 1
        return estimate_tokens(message.text)

    def _intent(self, conversation: LogConversation) -> dict:
        first = next((m.text for m in conversation.messages if m.role == "user" and m.text.strip()), None)
        found = self.policy.classify(first) if first is not None else None
        label = found.label if found is not None else NO_INTENT
        entry = self.intents.get(label)
        if entry is None:
            entry = self.intents[label] = {
                "conversations": 0,
                "low_confidence": 0,
                "replies": TokenHistogram(),
                "first_turn": TokenHistogram(),
            }
        entry["conversations"] += 1
        if found is not None and found.confidence < self.floor:
            entry["low_confidence"] += 1
        return entry

    def _strict(self, text: str) -> bool:
        self.user_messages += 1
        hits = self.policy.strict_hits(text)
        if not hits:
            return False
        self.user_messages_with_hit += 1
        for hit in hits:
            self.pattern_hits[self._pattern_index[hit.pattern]] += 1
        return True

    def token_source(self) -> str:
        """ "log", "estimated" or "mixed": where the reply lengths came from."""
        if self.tokens_estimated and self.tokens_from_log:
            return "mixed"
        return "estimated" if self.tokens_estimated else "log"

    def result(self) -> dict:
        limits = {str(limit): limit for limit in FIXED_LIMITS}
        limits["cap"] = self.cap

        def lengths(histogram: TokenHistogram) -> dict:
            return {
                **histogram.summary(),
                "above": {name: histogram.share_above(limit) for name, limit in limits.items()},
            }

        intents = []
        for label, entry in sorted(self.intents.items(), key=lambda item: (-item[1]["conversations"], item[0])):
            intents.append(
                {
                    "intent": label,
                    "conversations": entry["conversations"],
                    "low_confidence": entry["low_confidence"],
                    "whitelist": self.policy.whitelisted.get(label),
                    "replies": lengths(entry["replies"]),
                    "first_turn": lengths(entry["first_turn"]),
                }
            )
        return {
            "conversations": self.conversations,
            "messages": self.messages,
            "cap": self.cap,
            "long_context_threshold": self.long_threshold,
            "confidence_floor": self.floor,
            "tokens": {
                "source": self.token_source(),
                "replies_from_log": self.tokens_from_log,
                "replies_estimated": self.tokens_estimated,
                "prompts_from_log": self.prompts_from_log,
                "prompts_estimated": self.prompts_estimated,
                "estimate": "1 token per CJK character, 1 per 4 other characters",
            },
            "replies": {
                "all": lengths(self.replies),
                "first_turn": lengths(self.first_turn),
                "later_turns": lengths(self.later_turns),
            },
            "histograms": {
                "replies": self.replies.bins(*REPLY_BINS),
                "first_turn": self.first_turn.bins(*REPLY_BINS),
                "prompts": self.prompts.bins(*PROMPT_BINS),
                "turns": self.turns.bins(1, 30),
            },
            "intents": intents,
            "prompts": {
                **self.prompts.summary(),
                "above_long_context": self.prompts.share_above(self.long_threshold),
            },
            "turns": self.turns.summary(),
            "strict": {
                "user_messages": self.user_messages,
                "with_hit": self.user_messages_with_hit,
                "share": self.user_messages_with_hit / self.user_messages if self.user_messages else None,
                "conversations_with_hit": self.conversations_with_hit,
                "patterns": self.result_patterns(),
            },
        }

    def result_patterns(self) -> list[dict]:
        return [
            {"pattern": pattern.pattern, "hits": hits}
            for pattern, hits in zip(self.policy.patterns, self.pattern_hits, strict=True)
        ]

    def histograms(self) -> dict[str, TokenHistogram]:
        """The histograms suggestions read (exact percentiles need them, not the rounded result)."""
        return {
            "first_turn": self.first_turn,
            "prompts": self.prompts,
            **{f"intent:{label}": entry["replies"] for label, entry in self.intents.items()},
        }
