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
# What the classifier reads of a message: its first and last 48 characters (all of it up to 97). A customer says what
# they want at the start or asks it at the end; the middle of a long message (the story of the order) dilutes the
# n-grams and costs pure-Python work per distinct n-gram (three per Chinese character). 48 is the widest edge whose
# decision p99 stays under 0.2 ms on the held-out set (bench/intent_quality.py, docs/intent-model.md): 128 gave the
# same held-out accuracy at over twice the p99.
CLASSIFIER_EDGE_CHARS = 48
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
# A weight row packed into one integer for scoring: each label's weight in fixed point (2**-24, exact for the model
# file's float16 values), offset to be non-negative, in its own 64-bit field. Summing a message's rows is then one
# sum() over about a hundred ints instead of a float sum per label over a tuple per row, ~half the scoring time, and
# exact. A field holds at most 2**18 rows (a message has at most N_BUCKETS distinct buckets) of |weight| < 2**15:
# 2**18 * 2**41 < 2**64, so no field carries into the next.
_FIXED_BITS = 24
_FIELD_BITS = 64
_FIELD_MASK = (1 << _FIELD_BITS) - 1
_ROW_OFFSET = 1 << 40
_WEIGHT_LIMIT = 1 << 15


def pack_rows(weights: dict[int, tuple[float, ...]]) -> dict[int, int]:
    """Every weight row as one integer of fixed-point fields (see _FIXED_BITS); refuses a weight out of range."""
    scale = 1 << _FIXED_BITS
    packed = {}
    for bucket, row in weights.items():
        value = 0
        for i, weight in enumerate(row):
            if not abs(weight) < _WEIGHT_LIMIT:  # also NaN
                raise IntentModelError(f"weight {weight!r} of bucket {bucket} is out of range")
            value |= (round(weight * scale) + _ROW_OFFSET) << (_FIELD_BITS * i)
        packed[bucket] = value
    return packed


class IntentModelError(Exception):
    """The model file is missing, malformed, of another format, or does not match its recorded sha256."""


def _digit_token(run: str) -> str:
    # Order numbers are long, amounts short; the length class is what carries meaning, not the digits.
    return "#order" if len(run) >= 10 else "#num"


def edges(text: str, each: int) -> str:
    """The first and last `each` characters of a text (all of it when it is no longer than both and the break),
    joined by a line break so that no pattern match or n-gram spans the gap. Edges of edges are the same text."""
    if len(text) <= 2 * each + 1:
        return text
    return f"{text[:each]}\n{text[-each:]}"


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


# A Latin word's own hashes (the word and its letter 3-4 grams) by word: a shop's vocabulary is small and each word
# costs a dozen crc32 calls. At most _WORD_CACHE_SIZE words of at most _WORD_CACHE_CHARS letters (~2 MB for a
# shop's words, ~6 MB if a client sends only 24-letter nonsense), emptied when full.
_WORD_CACHE_SIZE = 4096
_WORD_CACHE_CHARS = 24
_WORD_HASHES: dict[str, tuple[int, ...]] = {}


def _word_hashes(word: str) -> tuple[int, ...]:
    crc, seed, padded = zlib.crc32, _SEED["l"], f"<{word}>".encode()
    grams_of = (crc(padded[i : i + n], seed) for n in (3, 4) for i in range(len(padded) - n + 1))
    return (crc(word.encode(), _SEED["w"]), *grams_of)


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
        known = _WORD_HASHES
        for word in set(words):
            hashes = known.get(word)
            if hashes is None:
                hashes = _word_hashes(word)
                if len(word) <= _WORD_CACHE_CHARS:
                    if len(known) >= _WORD_CACHE_SIZE:
                        known.clear()  # bounded whatever a client sends; common words return within a few requests
                    known[word] = hashes
            found.update(hashes)
        found.update(crc(f"{a} {b}".encode(), _SEED["b"]) for a, b in itertools.pairwise(words))
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
        self.weights = weights  # as trained and stored; scoring reads the packed rows
        self._rows = pack_rows(weights)
        self._shifts = tuple(_FIELD_BITS * i for i in range(len(labels)))
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
        """The raw linear score of every label, in label order, before the temperature, for the edges of the text
        (CLASSIFIER_EDGE_CHARS): evaluation, comparison and log analysis read a message as the gateway does."""
        found = buckets(edges(text, CLASSIFIER_EDGE_CHARS))
        # A packed row is never 0 (every field carries the offset), so filter(None) drops exactly the missing buckets.
        rows = list(filter(None, map(self._rows.get, found)))
        if not rows:
            return list(self.bias)
        # Every feature of a message has the same value (binary, L2-normalised): the score is the bias plus that
        # value times each label's column sum, all columns summed at once in the packed fields.
        total, offset = sum(rows), len(rows) * _ROW_OFFSET
        value = 1.0 / (math.sqrt(len(found)) * (1 << _FIXED_BITS))
        return [
            bias + value * (((total >> shift) & _FIELD_MASK) - offset)
            for bias, shift in zip(self.bias, self._shifts, strict=True)
        ]

    def probabilities(self, text: str) -> dict[str, float]:
        """The calibrated softmax probability of every label for one message."""
        scaled = [score / self.temperature for score in self.scores(text)]
        return dict(zip(self.labels, softmax(scaled), strict=True))

    def classify(self, text: str) -> Intent:
        """The most likely label of one message, with its probability in [0, 1]."""
        probabilities = self.probabilities(text)
        label = max(probabilities, key=probabilities.__getitem__)
        return Intent(label=label, confidence=probabilities[label])
