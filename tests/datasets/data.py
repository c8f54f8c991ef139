"""Small labelled datasets cut from the shipped intents.jsonl, and their CSV / JSON Lines encodings."""

import csv
import functools
import io
import json
import random
import unicodedata
from collections import defaultdict

from engine_node.policy.dataset import LABELS, load_examples


@functools.cache
def _examples() -> tuple:
    return tuple(load_examples())


def easy_rows(templates_per_label: int = 3) -> list[dict]:
    """Every message of the first few templates of each label, without template info: a random split then holds
    out near-copies of training messages, so even two epochs score 1.0 (a model that clears any floor)."""
    by_template: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for example in _examples():
        by_template[example.label][example.template].append(example)
    rows = [
        {"text": example.text, "label": label}
        for label in LABELS
        for template in sorted(by_template[label])[:templates_per_label]
        for example in by_template[label][template]
    ]
    return unique(rows)


def hard_rows(per_label: int = 25, seed: int = 5) -> list[dict]:
    """A few messages from many templates per label: two epochs on these score far below 0.92."""
    by_label: dict[str, list] = defaultdict(list)
    for example in _examples():
        by_label[example.label].append(example)
    rng = random.Random(seed)
    return unique(
        [{"text": e.text, "label": label} for label in LABELS for e in rng.sample(by_label[label], per_label)]
    )


def unique(rows: list[dict]) -> list[dict]:
    """Rows whose text differs in more than letter case, width or spacing (what the upload counts as new)."""
    seen: set[str] = set()
    kept = []
    for row in rows:
        key = " ".join(unicodedata.normalize("NFKC", row["text"]).casefold().split())
        if key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def as_csv(rows: list[dict], *, bom: bool = False) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = list(rows[0]) if rows else ["text", "label"]
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row[c] for c in columns])
    return (("\ufeff" if bom else "") + out.getvalue()).encode("utf-8")


def as_jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
