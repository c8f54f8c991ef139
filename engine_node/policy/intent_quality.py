"""How good an intent model is on messages it never saw: accuracy, recall per label, calibration, confident mistakes.

Calibration is the expected calibration error (ECE): messages are put in equal-width bins by the model's top
confidence, and ECE is the message-weighted mean gap between each bin's confidence and its accuracy. The gateway
trusts a label at or above its floor (0.8), so the share of messages that are wrong at or above the floor is what
reaches a strict customer as a creative temperature; it is reported beside ECE.

Also here: the near-duplicate check that keeps the training data away from the separately written held-out set.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

from engine_node.policy.intent import IntentClassifier, grams

GATEWAY_FLOOR = 0.8
ECE_BINS = 10
# Two messages whose n-gram sets (intent.grams) overlap this much (Jaccard) count as the same message reworded
# ("How do I reset my password?" and "how do i reset my password pls").
NEAR_DUPLICATE_JACCARD = 0.7


class Labelled(Protocol):
    text: str
    label: str


def expected_calibration_error(outcomes: Sequence[tuple[float, bool]], bins: int = ECE_BINS) -> float:
    """ECE over (confidence, correct) pairs with `bins` equal-width bins on [0, 1]."""
    if not outcomes:
        return 0.0
    binned: dict[int, list[tuple[float, bool]]] = defaultdict(list)
    for confidence, correct in outcomes:
        binned[min(bins - 1, int(confidence * bins))].append((confidence, correct))
    gap = sum(
        len(members) * abs(statistics.fmean(c for c, _ in members) - sum(ok for _, ok in members) / len(members))
        for members in binned.values()
    )
    return gap / len(outcomes)


def quality(
    model: IntentClassifier,
    messages: Sequence[Labelled],
    *,
    floor: float = GATEWAY_FLOOR,
    bins: int = ECE_BINS,
    groups: dict[str, str] | None = None,
) -> dict:
    """Accuracy, per-label recall, ECE, the share wrong at or above `floor` and the share below it.

    `groups` names an attribute of the messages (e.g. {"lang": "lang"}) to report accuracy per value of it.
    """
    outcomes = []
    hits: dict[str, list[int]] = {label: [0, 0] for label in model.labels}
    by_group: dict[str, dict[str, list[int]]] = {name: defaultdict(lambda: [0, 0]) for name in groups or {}}
    for message in messages:
        intent = model.classify(message.text)
        correct = intent.label == message.label
        outcomes.append((intent.confidence, correct))
        hits[message.label][0] += correct
        hits[message.label][1] += 1
        for name, attribute in (groups or {}).items():
            tally = by_group[name][getattr(message, attribute)]
            tally[0] += correct
            tally[1] += 1
    n = len(outcomes)
    return {
        "n": n,
        "accuracy": sum(ok for _, ok in outcomes) / n,
        "recall": {label: right / total if total else 0.0 for label, (right, total) in hits.items()},
        "ece": expected_calibration_error(outcomes, bins),
        "confidently_wrong": sum(c >= floor and not ok for c, ok in outcomes) / n,
        "below_floor": sum(c < floor for c, _ in outcomes) / n,
        "groups": {
            name: {value: right / total for value, (right, total) in sorted(tally.items())}
            for name, tally in by_group.items()
        },
    }


def near_duplicates(
    held_out: Iterable[str], training: Iterable[str], threshold: float = NEAR_DUPLICATE_JACCARD
) -> list[tuple[str, str, float]]:
    """(held-out text, training text, Jaccard) for every held-out message some training message nearly repeats.

    The closest training message is reported once per held-out message; candidates come from an inverted index
    over n-grams, so checking a few hundred messages against tens of thousands takes seconds.
    """
    training = list(training)
    training_grams = [grams(text) for text in training]
    index: dict[str, list[int]] = defaultdict(list)
    for i, found in enumerate(training_grams):
        for gram in found:
            index[gram].append(i)
    found_pairs = []
    for text in held_out:
        mine = grams(text)
        shared: dict[int, int] = defaultdict(int)
        for gram in mine:
            for i in index.get(gram, ()):
                shared[i] += 1
        best, best_i = 0.0, -1
        for i, count in shared.items():
            jaccard = count / (len(mine) + len(training_grams[i]) - count)
            if jaccard > best:
                best, best_i = jaccard, i
        if best >= threshold:
            found_pairs.append((text, training[best_i], best))
    return found_pairs
