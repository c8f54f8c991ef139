"""The per-request policy: temperature tier, temperature, max_tokens and queue, each with the rule that decided it.

Precedence of the tier, highest first (seed, "温度参数分级控制" and "降级策略"):
degradation > manual override for the conversation > strict regex hit > business tag > intent at or above the
confidence floor > the normal tier. The template (hot parameters) and the policy bundle (whitelists, overrides,
degradation, pushed by the control plane) are compiled once per change into a `Policy`; `decide()` is then a
classification plus a few dictionary lookups.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from operator import itemgetter

from engine_node.policy.intent import CLASSIFIER_EDGE_CHARS, Intent, IntentClassifier, edges
from engine_node.policy.patterns import compile_patterns

TIERS = ("strict", "normal", "creative")
# What the policy reads of a request, so that a decision costs at most a fixed amount whatever a client sends
# (docs/policy-patterns.md). The strict patterns read every message, whatever its role (an amount in a system prompt
# or a tool's answer reaches the reply as surely as one the customer typed), each at its first and last 2,048
# characters (all of it up to 4,096): an amount or order number in a pasted text is found whether the question comes
# before or after it. Of the messages so read, joined in order, they read the first and last 8,192 characters: the
# system prompt and the start of the conversation, and its end, where the latest turn is; only the middle of a
# conversation longer than that goes unread, as the middle of one long message does. RE2 runs each pattern over
# those <= 64 KiB of UTF-8 in linear time. The classifier reads the first and last 48 characters of the latest user
# message (CLASSIFIER_EDGE_CHARS in engine_node/policy/intent.py, which says why).
REGEX_EDGE_CHARS = 2048
CONVERSATION_EDGE_CHARS = 4 * REGEX_EDGE_CHARS
# The template defaults of the sections the policy reads, for a node that has no config yet. They equal
# controlplane.params.schema's defaults (a test keeps them equal; the agent may not import the control plane).
DEFAULT_STRICT_PATTERNS = [
    r"[¥￥$]\s?\d+(?:[.,]\d{1,2})?|\d+(?:\.\d{1,2})?\s?(?:元|块|RMB|CNY|USD)",
    r"(?i)(?:订单号?|order\s*(?:no\.?|number|id|#))\s*[:：#]?\s*[A-Za-z0-9-]{6,}",
    r"(?:^|\D)(?P<hit>1[3-9]\d{9})(?:\D|$)",
    r"(?:^|\D)(?P<hit>\d{17}[\dXx])(?:\D|$)",
]
DEFAULT_INTENT_TIERS = {
    "order_status": "strict",
    "return_refund": "normal",
    "product_recommendation": "creative",
    "payment_billing": "strict",
    "coupon_promotion": "normal",
    "account_privacy": "strict",
    "legal_policy": "strict",
    "copywriting": "creative",
    "other": "normal",
}
DEFAULTS = {
    "max_tokens": {
        "default": 256,
        "streaming_threshold": 200,
        "whitelist": ["legal"],
        "hard_ceiling": 2048,
        "continuation_max_rounds": 2,
    },
    "temperature": {"strict": 0.3, "normal": 0.7, "creative": 0.9, "strict_patterns": DEFAULT_STRICT_PATTERNS},
    "intent": {"tiers": DEFAULT_INTENT_TIERS, "confidence_floor": 0.8, "accuracy_floor": 0.92},
    "batch": {
        "min_size": 2,
        "max_size": 8,
        "timeout_ms": 50,
        "long_context_threshold": 2048,
        "long_context_max_size": 2,
        "max_queue": 256,
        "long_context_max_queue": 16,
    },
    "degradation": {
        "load_threshold": 0.8,
        "exit_threshold": 0.6,
        "enter_after_s": 30,
        "exit_after_s": 120,
        "max_tokens": 128,
        "temperature": 0.7,
        "speculative_decoding": False,
    },
}
EMPTY_BUNDLE = {"whitelists": {}, "overrides": [], "degradation": {"active": False}}


@dataclass(frozen=True)
class RegexHit:
    pattern: str
    match: str


@dataclass(frozen=True)
class Decision:
    """What the gateway does with one request, and why (the explain endpoint returns this as JSON)."""

    intent: str | None
    confidence: float | None
    intent_source: str  # "classifier", "business_tag" or "none"
    regex_hits: tuple[RegexHit, ...]
    tier: str
    tier_rule: str  # a short code, safe as a metric label
    tier_detail: str
    temperature: float
    temperature_rule: str
    max_tokens: int | None
    max_tokens_rule: str
    continuation_rounds: int
    queue: str
    queue_rule: str
    business_tag: str | None = None
    conversation: str | None = None
    override: dict | None = None
    degraded: bool = False
    whitelist: str | None = None
    notes: tuple[str, ...] = field(default=())
    # The reply may run past max_tokens.streaming_threshold: a client that accepts a stream gets one after that many
    # tokens (engine_node/long_replies.py); None when max_tokens is at or below the threshold.
    stream_after_tokens: int | None = None
    confidence_floor: float | None = None  # the template's intent floor this decision was judged against
    # The classifier's second most likely label and its probability (the review queue samples close calls).
    runner_up: str | None = None
    runner_up_confidence: float | None = None

    def as_dict(self) -> dict:
        data = asdict(self)
        data["regex_hits"] = [asdict(hit) for hit in self.regex_hits]
        data["notes"] = list(self.notes)
        return data


class Policy:
    """A template's request-level parameters plus the pool's policy bundle, compiled."""

    def __init__(self, params: dict | None, bundle: dict | None = None, classifier: IntentClassifier | None = None):
        params = params or {}
        self.params = {section: {**values, **(params.get(section) or {})} for section, values in DEFAULTS.items()}
        self.bundle = {**EMPTY_BUNDLE, **(bundle or {})}
        self.classifier = classifier
        # Raises PatternRejected naming the pattern RE2 refuses; the agent NACKs such a config.
        self.patterns = compile_patterns(self.params["temperature"]["strict_patterns"])
        named = set(self.params["max_tokens"]["whitelist"])
        # scenario -> the whitelist that names it; only whitelists the template refers to count.
        self.whitelisted: dict[str, str] = {}
        for name in sorted(named):
            for scenario in self.bundle["whitelists"].get(name, []):
                self.whitelisted.setdefault(scenario, name)
        self.overrides = {o["conversation"]: o for o in self.bundle["overrides"]}

    @property
    def degraded(self) -> bool:
        return bool((self.bundle.get("degradation") or {}).get("active"))

    def decide(
        self,
        text: str,
        *,
        prompt_tokens: int = 0,
        client_max_tokens: int | None = None,
        business_tag: str | None = None,
        conversation: str | None = None,
        now: float | None = None,
        message_texts: Sequence[str] = (),
        granted_tags: Collection[str] = (),
    ) -> Decision:
        """`text` is the latest user message (what the classifier reads); `message_texts` every message of the request
        in order, whatever its role (what the strict patterns read; `text` alone when empty). `business_tag` is a tag
        the client's key may send; `granted_tags` every tag it may send: a classified intent lifts the max_tokens cap
        only when it is one of them."""
        temperature_params = self.params["temperature"]
        intent_params = self.params["intent"]
        notes: list[str] = []

        hits = self._hits(strict_scope(message_texts or (text,)))
        intent, confidence, source = None, None, "none"
        runner_up, runner_up_confidence = None, None
        if business_tag:
            intent, confidence, source = business_tag, 1.0, "business_tag"
        elif self.classifier is not None:
            ranked = self.classify_ranked(text)
            if ranked:
                (intent, top), second = ranked[0], ranked[1] if len(ranked) > 1 else (None, None)
                confidence, source = round(top, 4), "classifier"
                runner_up, runner_up_confidence = second[0], (round(second[1], 4) if second[1] is not None else None)
        floor = intent_params["confidence_floor"]
        confident = source == "business_tag" or (confidence is not None and confidence >= floor)

        override = self._override(conversation, now)
        if self.degraded:
            tier, tier_rule, detail = "normal", "degradation", "the pool is degraded"
        elif override is not None and override.get("tier"):
            tier, tier_rule, detail = override["tier"], "override", f"set by {override.get('set_by', '?')}"
        elif override is not None:
            tier, tier_rule, detail = "normal", "override", "the override sets an explicit temperature"
        elif hits:
            tier, tier_rule, detail = "strict", "regex", f"{len(hits)} strict pattern(s) matched"
        elif source == "business_tag":
            tier = intent_params["tiers"].get(business_tag) or (business_tag if business_tag in TIERS else None)
            if tier is None:
                tier, tier_rule, detail = "normal", "untiered_tag", f"business tag {business_tag!r} maps to no tier"
            else:
                tier_rule, detail = "business_tag", f"business tag {business_tag!r}"
        elif intent is None:
            tier, tier_rule, detail = "normal", "no_intent", "no classifier or empty message"
        elif not confident:
            tier, tier_rule = "normal", "low_confidence"
            detail = f"confidence {confidence:.2f} below the floor {floor:.2f}"
        else:
            tier, tier_rule = intent_params["tiers"].get(intent, "normal"), "intent"
            detail = f"{intent} at {confidence:.2f} (floor {floor:.2f})"

        if self.degraded:
            temperature, temperature_rule = self.params["degradation"]["temperature"], "degradation"
        elif override is not None and override.get("temperature") is not None:
            temperature, temperature_rule = override["temperature"], "override"
        else:
            temperature, temperature_rule = temperature_params[tier], f"tier {tier}"

        max_tokens, max_tokens_rule, rounds, whitelist = self._max_tokens(
            client_max_tokens,
            business_tag,
            intent if confident and source == "classifier" else None,
            granted_tags,
            notes,
        )
        streaming_threshold = self.params["max_tokens"]["streaming_threshold"]
        stream_after = streaming_threshold if max_tokens is None or max_tokens > streaming_threshold else None
        long_threshold = self.params["batch"]["long_context_threshold"]
        if prompt_tokens > long_threshold:
            queue, queue_rule = "long", f"prompt {prompt_tokens} tokens > {long_threshold}"
        else:
            queue, queue_rule = "short", f"prompt {prompt_tokens} tokens <= {long_threshold}"
        return Decision(
            intent=intent,
            confidence=confidence,
            intent_source=source,
            regex_hits=tuple(hits),
            tier=tier,
            tier_rule=tier_rule,
            tier_detail=detail,
            temperature=float(temperature),
            temperature_rule=temperature_rule,
            max_tokens=max_tokens,
            max_tokens_rule=max_tokens_rule,
            continuation_rounds=rounds,
            queue=queue,
            queue_rule=queue_rule,
            business_tag=business_tag,
            conversation=conversation,
            override=override,
            degraded=self.degraded,
            whitelist=whitelist,
            notes=tuple(notes),
            stream_after_tokens=stream_after,
            confidence_floor=floor,
            runner_up=runner_up,
            runner_up_confidence=runner_up_confidence,
        )

    def strict_hits(self, text: str) -> list[RegexHit]:
        """The strict patterns that match the edges of the message, each with the text it matched."""
        return self._hits(edges(text, REGEX_EDGE_CHARS))

    def _hits(self, scope: str) -> list[RegexHit]:
        if not self.patterns:
            return []
        # surrogatepass: a lone surrogate (valid in JSON) is text RE2 matches nothing against, not an error.
        scanned = scope.encode("utf-8", "surrogatepass")
        hits = []
        for pattern in self.patterns:
            found = pattern.search(scanned)
            if found is not None:
                hits.append(RegexHit(pattern.pattern, found[:80]))
        return hits

    def classify(self, text: str) -> Intent | None:
        """The classifier's reading of the edges of the message; None for a blank one."""
        classified = edges(text, CLASSIFIER_EDGE_CHARS)
        if self.classifier is None or not classified.strip():
            return None
        return self.classifier.classify(classified)

    def classify_ranked(self, text: str) -> list[tuple[str, float]]:
        """The classifier's two most likely labels of the edges of the message, best first; empty for a blank one."""
        classified = edges(text, CLASSIFIER_EDGE_CHARS)
        if self.classifier is None or not classified.strip():
            return []
        # sorted() over nine labels costs half what heapq.nlargest's setup does.
        return sorted(self.classifier.probabilities(classified).items(), key=itemgetter(1), reverse=True)[:2]

    def _override(self, conversation: str | None, now: float | None) -> dict | None:
        if not conversation:
            return None
        override = self.overrides.get(conversation)
        if override is None:
            return None
        if override.get("expires_at") is not None and override["expires_at"] <= (now or time.time()):
            return None
        return override

    def _max_tokens(
        self, client: int | None, tag: str | None, intent: str | None, granted: Collection[str], notes: list[str]
    ) -> tuple[int | None, str, int, str | None]:
        """(max_tokens, rule, continuation rounds allowed, whitelist that applied).

        A whitelist lifts the cap for a scenario an operator vouched for: a business tag the client's key is granted,
        or a confident classification of the latest user message as an intent the key is granted as a tag (the
        classifier then stands in for a tag the client could have sent, and never goes past one). The client's own
        words are no evidence: a sentence that reads as a legal question, added to any request, lifts nothing.
        """
        limits = self.params["max_tokens"]
        if self.degraded:
            cap = self.params["degradation"]["max_tokens"]
            if client is not None and client < cap:
                return client, "client (below the degradation cap)", 0, None
            # Continuing would undo the point of degrading: shorter replies for a saturated pool.
            return cap, "degradation", 0, None
        whitelist = self.whitelisted.get(tag) if tag else None
        if whitelist is None and intent:
            listed = self.whitelisted.get(intent)
            if listed is not None and intent in granted:
                whitelist = listed
            elif listed is not None:
                notes.append(f"intent {intent!r} is on whitelist {listed}, which lifts it only for a key granted it")
        if whitelist is not None:
            ceiling = limits["hard_ceiling"]
            if client is None:
                return ceiling, f"whitelist {whitelist}: hard ceiling", 0, whitelist
            if client > ceiling:
                notes.append(f"client asked for {client}; whitelist ceiling is {ceiling}")
                return ceiling, f"whitelist {whitelist}: hard ceiling", 0, whitelist
            return client, f"whitelist {whitelist}: client value", 0, whitelist
        cap = limits["default"]
        if client is not None and client <= cap:
            # The client asked for a short reply; continuing past it would override the client.
            return client, "client (at or below the cap)", 0, None
        if client is not None:
            notes.append(f"client asked for {client}; first-turn cap is {cap}")
        return cap, "first-turn cap", limits["continuation_max_rounds"], None


_SENTENCE_END = set("。！？!?.…；;~～")
_CLOSERS = set("\"'”’」』）)]】》>*_`")
# A reply cut right after one of these is obviously unfinished even though it is punctuation; U+FFFD is what a cap
# between the bytes of one character (a byte-level token) leaves: cut mid-word.
_OPENERS = set(",，、:：(（[【《“‘-—\ufffd")


def strict_scope(texts: Sequence[str]) -> str:
    """What the strict patterns read of a request's messages: each at its edges, and of those joined, the edges."""
    if len(texts) == 1:
        return edges(texts[0], REGEX_EDGE_CHARS)  # the common case, without a join
    return edges("\n".join([edges(text, REGEX_EDGE_CHARS) for text in texts]), CONVERSATION_EDGE_CHARS)


def ends_mid_sentence(text: str) -> bool:
    """True when a reply cut by max_tokens stops inside a sentence (Chinese or English punctuation)."""
    stripped = text.rstrip()
    if not stripped:
        return False
    if text[len(stripped) :].count("\n") >= 2:
        return False  # a paragraph break: the cut fell between paragraphs
    end = len(stripped)
    while end > 0 and stripped[end - 1] in _CLOSERS:
        end -= 1
    if end == 0:
        return False
    last = stripped[end - 1]
    if last in _OPENERS:
        return True
    if last in _SENTENCE_END:
        return False
    # Emoji and other symbols close a chat sentence as often as a full stop does.
    return not (ord(last) >= 0x2600 and not last.isalnum())
