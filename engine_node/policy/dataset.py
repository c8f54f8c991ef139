"""The labelled intent messages in data/intents.jsonl, the two held-out splits, and the separately written held-out set.

data/intents_heldout.jsonl was written by hand, independently of the training templates, as shop customers write
(complaints, suitability questions, mixed language, typos, long and terse messages). It is never trained on nor used
to fit the temperature; tests keep every training message away from it (see intent_quality.near_duplicates).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

DATASET_PATH = Path(__file__).resolve().parent / "data" / "intents.jsonl"
HELD_OUT_PATH = Path(__file__).resolve().parent / "data" / "intents_heldout.jsonl"
SPLIT_SEED = 618
HELD_OUT_FRACTION = 0.2
# The template of a message a reviewer labelled in the review queue: always in the training split.
REVIEWED_TEMPLATE_PREFIX = "review-"
# The model's output order; build_intents.py writes exactly these labels.
LABELS = (
    "order_status",
    "return_refund",
    "product_recommendation",
    "payment_billing",
    "coupon_promotion",
    "account_privacy",
    "legal_policy",
    "copywriting",
    "other",
)


@dataclass(frozen=True)
class Example:
    """One labelled message and the template it was generated from."""

    text: str
    label: str
    lang: str
    template: str


def load_examples(path: Path = DATASET_PATH) -> list[Example]:
    """Every example in the dataset file, in file order."""
    with Path(path).open(encoding="utf-8") as lines:
        return [Example(**json.loads(line)) for line in lines if line.strip()]


@dataclass(frozen=True)
class HeldOutMessage:
    """One message of the separately written held-out set: its label, language and the style it was written in."""

    text: str
    label: str
    lang: str
    style: str


def load_held_out(path: Path = HELD_OUT_PATH) -> list[HeldOutMessage]:
    """Every message of the separately written held-out set, in file order."""
    with Path(path).open(encoding="utf-8") as lines:
        return [HeldOutMessage(**json.loads(line)) for line in lines if line.strip()]


def dataset_sha256(path: Path = DATASET_PATH) -> str:
    """The sha256 of the dataset file's bytes, recorded in the model so a model names the data it came from."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def split_random(examples: list[Example], seed: int = SPLIT_SEED) -> tuple[list[Example], list[Example]]:
    """(train, held out): a seeded 80/20 split within each label."""
    by_label: dict[str, list[Example]] = defaultdict(list)
    for example in examples:
        by_label[example.label].append(example)
    rng = random.Random(seed)
    train: list[Example] = []
    held_out: list[Example] = []
    for label in sorted(by_label):
        group = list(by_label[label])
        rng.shuffle(group)
        cut = round(len(group) * HELD_OUT_FRACTION)
        held_out += group[:cut]
        train += group[cut:]
    return train, held_out


def split_by_template(examples: list[Example], seed: int = SPLIT_SEED) -> tuple[list[Example], list[Example]]:
    """(train, held out): whole templates held out, 20% of each label's templates in each language.

    A model cannot score well here by memorising a template's fixed wording, so this is the honest figure. Messages
    a reviewer labelled (template `review-<id>`, controlplane/reviews) are always trained on: learning them is the
    point of the review loop, and the comparison on the model page judges them apart; the held-out templates are
    the same as the base dataset's, so the two models' held-out figures compare.
    """
    templates: dict[tuple[str, str], set[str]] = defaultdict(set)
    for example in examples:
        if not example.template.startswith(REVIEWED_TEMPLATE_PREFIX):
            templates[(example.label, example.lang)].add(example.template)
    rng = random.Random(seed)
    held_templates: set[str] = set()
    for key in sorted(templates):
        names = sorted(templates[key])
        rng.shuffle(names)
        held_templates.update(names[: max(1, round(len(names) * HELD_OUT_FRACTION))])
    train = [example for example in examples if example.template not in held_templates]
    held_out = [example for example in examples if example.template in held_templates]
    return train, held_out
