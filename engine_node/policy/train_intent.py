"""Trains the intent model on data/intents.jsonl, reports held-out quality and latency, and writes the model file.

Run from the repository root: `python -m engine_node.policy.train_intent`. Both held-out splits of the dataset are
trained and reported (before calibration: the figures are accuracies). The model written is trained on every message
and judged on data/intents_heldout.jsonl, messages written apart from the templates and never trained on nor used to
fit the temperature, so the quality the tests recompute from the shipped file is the honest one.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from engine_node.policy.dataset import (
    DATASET_PATH,
    HELD_OUT_PATH,
    LABELS,
    Example,
    dataset_sha256,
    load_examples,
    load_held_out,
    split_by_template,
    split_random,
)
from engine_node.policy.intent import (
    MODEL_FORMAT,
    MODEL_PATH,
    N_BUCKETS,
    IntentClassifier,
    decode_weights,
    encode_weights,
    features,
    payload_sha256,
    softmax,
)
from engine_node.policy.intent_quality import GATEWAY_FLOOR, quality

TRAIN_SEED = 11
EPOCHS = 12
LEARNING_RATE = 2.0
# Per-update weight decay on the touched rows; keeps confidences off 1.0 for messages unlike the training data.
L2 = 3e-4
SPLITS: dict[str, Callable[[list[Example]], tuple[list[Example], list[Example]]]] = {
    "random": split_random,
    "template": split_by_template,
}


def train(
    examples: list[Example],
    *,
    epochs: int = EPOCHS,
    seed: int = TRAIN_SEED,
    on_epoch: Callable[[int], None] | None = None,
) -> IntentClassifier:
    """Multinomial logistic regression by seeded SGD over hashed features, with a decaying learning rate.

    `on_epoch(n)` is called after each finished epoch (1-based), so a caller can report progress.
    """
    index = {label: i for i, label in enumerate(LABELS)}
    rows = [(features(example.text), index[example.label]) for example in examples]
    n_labels = len(LABELS)
    bias = [0.0] * n_labels
    weights: dict[int, list[float]] = {}
    rng = random.Random(seed)
    order = list(range(len(rows)))
    for epoch in range(epochs):
        rng.shuffle(order)
        rate = LEARNING_RATE / (1.0 + 0.5 * epoch)
        for i in order:
            feats, target = rows[i]
            scores = list(bias)
            for bucket, value in feats.items():
                row = weights.get(bucket)
                if row is not None:
                    scores = [score + value * weight for score, weight in zip(scores, row, strict=True)]
            gradient = softmax(scores)
            gradient[target] -= 1.0
            bias = [b - rate * g for b, g in zip(bias, gradient, strict=True)]
            for bucket, value in feats.items():
                row = weights.setdefault(bucket, [0.0] * n_labels)
                weights[bucket] = [w - rate * (value * g + L2 * w) for w, g in zip(row, gradient, strict=True)]
        if on_epoch is not None:
            on_epoch(epoch + 1)
    return IntentClassifier(labels=list(LABELS), bias=bias, weights={k: tuple(v) for k, v in weights.items()})


def fit_temperature(
    train_set: list[Example],
    *,
    split: Callable[..., tuple[list[Example], list[Example]]] = split_by_template,
    epochs: int = EPOCHS,
    on_epoch: Callable[[int], None] | None = None,
) -> float:
    """The softmax temperature that minimises log loss on templates held out from a model trained on the rest.

    Fitted on unseen templates because on seen ones the model is near-certain, which would teach it overconfidence;
    fitted inside the training set so the reported held-out figures stay untouched. Data without templates passes
    `split=split_random`.
    """
    inner_train, inner_held_out = split(train_set, seed=TRAIN_SEED)
    model = train(inner_train, epochs=epochs, on_epoch=on_epoch)
    index = {label: i for i, label in enumerate(model.labels)}
    scored = [(model.scores(example.text), index[example.label]) for example in inner_held_out]

    def log_loss(temperature: float) -> float:
        return -sum(math.log(softmax([s / temperature for s in scores])[target] + 1e-12) for scores, target in scored)

    return min((round(0.2 + 0.05 * step, 2) for step in range(57)), key=log_loss)


def evaluate(model: IntentClassifier, held_out: list[Example]) -> dict:
    """Accuracy, per-label precision and recall, the confusion matrix and mean confidence on held-out messages."""
    labels = model.labels
    confusion = {truth: dict.fromkeys(labels, 0) for truth in labels}
    confidences = []
    for example in held_out:
        intent = model.classify(example.text)
        confusion[example.label][intent.label] += 1
        confidences.append(intent.confidence)
    correct = sum(confusion[label][label] for label in labels)
    per_label = {}
    for label in labels:
        predicted = sum(confusion[truth][label] for truth in labels)
        actual = sum(confusion[label].values())
        per_label[label] = {
            "precision": confusion[label][label] / predicted if predicted else 0.0,
            "recall": confusion[label][label] / actual if actual else 0.0,
        }
    return {
        "accuracy": correct / len(held_out),
        "per_label": per_label,
        "confusion": confusion,
        "mean_confidence": statistics.fmean(confidences),
        "n": len(held_out),
    }


def latency_us(model: IntentClassifier, texts: list[str]) -> tuple[float, float]:
    """(median, p99) microseconds to classify one message, one message at a time."""
    timings = []
    for text in texts:
        start = time.perf_counter_ns()
        model.classify(text)
        timings.append((time.perf_counter_ns() - start) / 1000)
    timings.sort()
    return statistics.median(timings), timings[min(len(timings) - 1, int(len(timings) * 0.99))]


def as_shipped(model: IntentClassifier) -> IntentClassifier:
    """The model as its file stores it (float16 weights, rounded biases), so figures are the shipped file's."""
    n_labels = len(model.labels)
    packed = encode_weights({k: list(v) for k, v in model.weights.items()}, n_labels)
    return IntentClassifier(
        labels=model.labels,
        bias=[round(b, 6) for b in model.bias],
        weights=decode_weights(packed, n_labels),
        temperature=model.temperature,
    )


def model_document(
    model: IntentClassifier,
    *,
    split: str,
    n_train: int,
    accuracy: float,
    training_set_sha256: str,
    epochs: int = EPOCHS,
    held_out: str | None = None,
) -> dict:
    """The portable JSON model IntentClassifier.load reads: the body plus its own `sha256`.

    `held_out` names the messages `accuracy` was measured on when they are not a split of the training set.
    """
    body = {
        "format": MODEL_FORMAT,
        "n_buckets": N_BUCKETS,
        "labels": model.labels,
        "bias": [round(b, 6) for b in model.bias],
        "temperature": model.temperature,
        "weights": encode_weights({k: list(v) for k, v in model.weights.items()}, len(model.labels)),
        "training_set_sha256": training_set_sha256,
        "split": split,
        "n_train": n_train,
        "held_out_accuracy": round(accuracy, 4),
        "epochs": epochs,
        "seed": TRAIN_SEED,
    }
    if held_out is not None:
        body["held_out"] = held_out
    return {**body, "sha256": payload_sha256(body)}


def write_model(model: IntentClassifier, path: Path, *, n_train: int, accuracy: float) -> str:
    """Writes the model trained on all of the checked-in dataset, naming the dataset file's sha256 and the held-out
    set its accuracy was measured on; returns the model's sha256."""
    document = model_document(
        model,
        split="all",
        n_train=n_train,
        accuracy=accuracy,
        training_set_sha256=dataset_sha256(DATASET_PATH),
        held_out=HELD_OUT_PATH.name,
    )
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return document["sha256"]


def report(name: str, result: dict) -> None:
    """Prints one split's evaluation as plain text."""
    print(f"\n== split by {name}: held-out n={result['n']} accuracy={result['accuracy']:.4f}", end="")
    print(f" mean confidence before calibration={result['mean_confidence']:.3f}")
    for label, scores in result["per_label"].items():
        print(f"  {label:24s} precision={scores['precision']:.3f} recall={scores['recall']:.3f}")
    labels = list(result["confusion"])
    print("  confusion (rows: truth, columns: predicted, in label order)")
    for truth in labels:
        print(f"  {truth:24s} " + " ".join(f"{result['confusion'][truth][p]:4d}" for p in labels))


def report_quality(result: dict) -> None:
    """Prints the shipped model's figures on the separately written held-out set."""
    print(f"\n== separately written held-out set ({HELD_OUT_PATH.name}): n={result['n']}")
    print(f"  accuracy={result['accuracy']:.4f}  ECE={result['ece']:.4f}", end="")
    print(f"  wrong at >= {GATEWAY_FLOOR:g}={result['confidently_wrong']:.4f}", end="")
    print(f"  below {GATEWAY_FLOOR:g}={result['below_floor']:.4f}")
    for group, values in result["groups"].items():
        print(f"  {group}: " + "  ".join(f"{value} {accuracy:.3f}" for value, accuracy in values.items()))
    for label, recall in result["recall"].items():
        print(f"  {label:24s} recall={recall:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=MODEL_PATH, help="where to write the model (trained on all)")
    parser.add_argument(
        "--splits",
        default=",".join(SPLITS),
        help="dataset splits to train and report before the shipped model (comma-separated; empty for none)",
    )
    parser.add_argument(
        "--extra-template-seeds",
        type=int,
        nargs="*",
        default=[],
        help="also train and report the by-template split for these split seeds (how much the figure varies)",
    )
    args = parser.parse_args()
    examples = load_examples()
    for seed in args.extra_template_seeds:
        train_set, held_out = split_by_template(examples, seed=seed)
        accuracy = evaluate(train(train_set), held_out)["accuracy"]
        print(f"by-template split with seed {seed}: held-out n={len(held_out)} accuracy={accuracy:.4f}")
    for name in filter(None, args.splits.split(",")):
        train_set, held_out = SPLITS[name](examples)
        started = time.perf_counter()
        model = train(train_set)
        print(f"\ntrained on {len(train_set)} messages ({name} split) in {time.perf_counter() - started:.1f}s")
        report(name, evaluate(model, held_out))
    started = time.perf_counter()
    model = train(examples)
    model.temperature = fit_temperature(examples)
    model = as_shipped(model)
    print(f"\ntrained on all {len(examples)} messages in {time.perf_counter() - started:.1f}s", end="")
    print(f" (with the temperature fit), temperature {model.temperature}")
    messages = load_held_out()
    result = quality(model, messages, groups={"language": "lang", "style": "style"})
    report_quality(result)
    digest = write_model(model, args.out, n_train=len(examples), accuracy=result["accuracy"])
    shipped = IntentClassifier.load(args.out)
    median, p99 = latency_us(shipped, [message.text for message in messages])
    print(f"\nwrote {args.out} ({args.out.stat().st_size} bytes, sha256 {digest})")
    print(f"latency per message over {len(messages)} held-out messages: median {median:.1f} us, p99 {p99:.1f} us")


if __name__ == "__main__":
    main()
