"""Classifies a customer message into a shop intent with a hashed n-gram linear model, in pure Python.

Features are character 1-3 grams of CJK runs, whole words and word bigrams of Latin text, and character 3-4 grams
inside Latin words (so typos still share most features), hashed into a fixed number of buckets. The model is a
multinomial logistic regression whose scores are divided by a temperature fitted on templates the model did not
train on, so its softmax probability is a confidence the gateway can compare with a floor such as 0.8.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
import struct
import unicodedata
import zlib
from dataclasses import dataclass
from pathlib import Path

MODEL_PATH = Path(__file__).resolve().parent / "data" / "intent_model.json"
MODEL_FORMAT = "intent-hashed-ngram-logreg-v1"
N_BUCKETS = 1 << 18
_BUCKET_MASK = N_BUCKETS - 1

_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_LATIN_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
_DIGIT_RUN = re.compile(r"\d+")
_SYMBOLS = "¥$￥?？!！"
# crc32(kind + gram) is crc32(gram) started from crc32(kind): buckets() hashes slices of the encoded text from these
# seeds instead of building a prefixed string per n-gram, and lands on the same buckets as hashing grams().
_SEED = {kind: zlib.crc32(kind.encode()) for kind in ("c", "w", "b", "l")}
_SYMBOL_HASHES = tuple((char, zlib.crc32(f"s{char}".encode())) for char in _SYMBOLS)
_TOKEN_HASHES = {token: zlib.crc32(token.encode()) for token in ("#order", "#num", "#empty")}
# Every character of the _CJK_RUN ranges is three bytes of UTF-8, so its 1-3 grams are 3, 6 and 9 byte slices.
_CJK_GRAM_BYTES = (3, 6, 9)


class IntentModelError(Exception):
    """The model file is missing, malformed, of another format, or does not match its recorded sha256."""


def _digit_token(run: str) -> str:
    # Order numbers are long, amounts short; the length class is what carries meaning, not the digits.
    return "#order" if len(run) >= 10 else "#num"


def grams(text: str) -> set[str]:
    """The distinct n-grams of a message, each prefixed with its kind (c: CJK, w: word, b: word pair, l: letters)."""
    text = unicodedata.normalize("NFKC", text).lower()
    # One generator per kind over the distinct runs, not one per run: a message of many short repeated runs
    # ("1元1元...") costs what its distinct n-grams cost.
    found = {
        "c" + run[i : i + n] for run in set(_CJK_RUN.findall(text)) for n in (1, 2, 3) for i in range(len(run) - n + 1)
    }
    words = _LATIN_WORD.findall(text)
    found.update("w" + word for word in words)
    found.update(f"b{a} {b}" for a, b in itertools.pairwise(words))
    found.update(
        "l" + padded[i : i + n]
        for padded in {f"<{word}>" for word in words}
        for n in (3, 4)
        for i in range(len(padded) - n + 1)
    )
    found.update({_digit_token(run) for run in set(_DIGIT_RUN.findall(text))})
    found.update("s" + char for char in _SYMBOLS if char in text)
    if not found:
        found.add("#empty")
    return found


def buckets(text: str) -> set[int]:
    """The hash buckets of a message's n-grams: crc32 of each of grams(text) in UTF-8, modulo N_BUCKETS.

    The classifier's hot path: the same set as hashing grams(), without building one string per n-gram.
    """
    text = unicodedata.normalize("NFKC", text).lower()
    crc = zlib.crc32
    found: set[int] = set()
    seed = _SEED["c"]
    for raw in {run.encode() for run in _CJK_RUN.findall(text)}:
        size = len(raw)
        found.update(crc(raw[i : i + width], seed) for width in _CJK_GRAM_BYTES for i in range(0, size - width + 1, 3))
    words = _LATIN_WORD.findall(text)
    if words:
        found.update(crc(word.encode(), _SEED["w"]) for word in words)
        found.update(crc(f"{a} {b}".encode(), _SEED["b"]) for a, b in itertools.pairwise(words))
        seed = _SEED["l"]
        for padded in {f"<{word}>".encode() for word in words}:
            size = len(padded)
            found.update(crc(padded[i : i + n], seed) for n in (3, 4) for i in range(size - n + 1))
    found.update(_TOKEN_HASHES[_digit_token(run)] for run in set(_DIGIT_RUN.findall(text)))
    found.update(digest for char, digest in _SYMBOL_HASHES if char in text)
    if not found:
        found.add(_TOKEN_HASHES["#empty"])
    return {digest & _BUCKET_MASK for digest in found}


def features(text: str) -> dict[int, float]:
    """Hashed, L2-normalised binary n-gram features of a message."""
    found = buckets(text)
    return dict.fromkeys(found, 1.0 / math.sqrt(len(found)))


def softmax(scores: list[float]) -> list[float]:
    """Probabilities from raw class scores, shifted by the maximum so large scores do not overflow."""
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [e / total for e in exps]


def payload_sha256(body: dict) -> str:
    """The sha256 of a model file's body (everything but the sha256 field) in canonical JSON."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def encode_weights(weights: dict[int, list[float]], n_labels: int) -> dict[str, str]:
    """Sparse weight rows packed as base64 uint32 bucket ids and float16 values, to keep the file small."""
    buckets = sorted(weights)
    values = [value for bucket in buckets for value in weights[bucket]]
    assert all(len(weights[bucket]) == n_labels for bucket in buckets)
    return {
        "buckets": base64.b64encode(struct.pack(f"<{len(buckets)}I", *buckets)).decode("ascii"),
        "values": base64.b64encode(struct.pack(f"<{len(values)}e", *values)).decode("ascii"),
    }


def decode_weights(packed: dict[str, str], n_labels: int) -> dict[int, tuple[float, ...]]:
    """Inverse of encode_weights."""
    raw_buckets = base64.b64decode(packed["buckets"])
    raw_values = base64.b64decode(packed["values"])
    buckets = struct.unpack(f"<{len(raw_buckets) // 4}I", raw_buckets)
    values = struct.unpack(f"<{len(raw_values) // 2}e", raw_values)
    if len(values) != len(buckets) * n_labels:
        raise IntentModelError("weight table size does not match the bucket list")
    return {bucket: values[i * n_labels : (i + 1) * n_labels] for i, bucket in enumerate(buckets)}


@dataclass(frozen=True)
class Intent:
    """A classification: the most likely label and its probability."""

    label: str
    confidence: float


class IntentClassifier:
    """A loaded intent model; classify() is pure CPU work of a few hundred multiply-adds per message."""

    def __init__(
        self,
        *,
        labels: list[str],
        bias: list[float],
        weights: dict[int, tuple[float, ...]],
        temperature: float = 1.0,
        meta: dict | None = None,
    ):
        self.labels = labels
        self.bias = bias
        self.weights = weights
        self.temperature = temperature
        self.meta = meta or {}

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> IntentClassifier:
        """Reads a model file, refusing it unless its body hashes to the recorded sha256."""
        try:
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise IntentModelError(f"cannot read intent model {path}: {exc}") from exc
        return cls.from_document(document, source=str(path))

    @classmethod
    def from_document(cls, document: dict, *, source: str = "document") -> IntentClassifier:
        """A model from its parsed file (as the control plane pushes it), refused unless its sha256 verifies."""
        if not isinstance(document, dict):
            raise IntentModelError(f"intent model {source} is not a JSON object")
        document = dict(document)
        recorded = document.pop("sha256", None)
        if recorded != payload_sha256(document):
            raise IntentModelError(f"intent model {source} does not match its sha256")
        if document.get("format") != MODEL_FORMAT or document.get("n_buckets") != N_BUCKETS:
            raise IntentModelError(f"intent model {source} is not {MODEL_FORMAT} with {N_BUCKETS} buckets")
        labels = document["labels"]
        meta = {key: value for key, value in document.items() if key not in ("bias", "weights")}
        meta["sha256"] = recorded
        return cls(
            labels=labels,
            bias=document["bias"],
            weights=decode_weights(document["weights"], len(labels)),
            temperature=document["temperature"],
            meta=meta,
        )

    def scores(self, text: str) -> list[float]:
        """The raw linear score of every label, in label order, before the temperature."""
        found = buckets(text)
        # A row is a non-empty tuple, so filter(None) drops exactly the buckets without weights.
        rows = list(filter(None, map(self.weights.get, found)))
        if not rows:
            return list(self.bias)
        # Every feature of a message has the same value (binary, L2-normalised): the score is the bias plus that
        # value times each label's column sum, summed in C rather than one Python list per feature.
        value = 1.0 / math.sqrt(len(found))
        return [bias + value * total for bias, total in zip(self.bias, map(sum, zip(*rows, strict=True)), strict=True)]

    def probabilities(self, text: str) -> dict[str, float]:
        """The calibrated softmax probability of every label for one message."""
        scaled = [score / self.temperature for score in self.scores(text)]
        return dict(zip(self.labels, softmax(scaled), strict=True))

    def classify(self, text: str) -> Intent:
        """The most likely label of one message, with its probability in [0, 1]."""
        probabilities = self.probabilities(text)
        label = max(probabilities, key=probabilities.__getitem__)
        return Intent(label=label, confidence=probabilities[label])
