"""Intent classifier quality and decision time, the shipped model against the one it replaced, in the same run.

Quality is measured on engine_node/policy/data/intents_heldout.jsonl, messages written apart from the training
templates (complaints, suitability and compatibility questions, typos, mixed language, long and terse messages) and
never trained on: accuracy (per language and per style), per-label recall, expected calibration error (10
equal-width confidence bins) and the share of messages wrong with a confidence at or above the gateway's 0.8 floor
(those reach a strict customer with the label's temperature, the fallback does not catch them).

Decision time is what the gateway spends classifying (the classifier reads the first and last 48 characters of the
message), per message the best of the passes so other processes' noise stays out (bench/gateway.py's convention),
p50 and p99 over the held-out set and over the dataset's by-template held-out messages; then the whole decision
(Policy.decide with the template defaults and the shipped model: classification, strict patterns, precedence,
max_tokens), against the 0.2 ms budget.

Baseline: the previous version of the model file in git (the version before the last commit that changed it, or the
committed one when the working tree's differs), measured in the same run; without git, the shipped model only.

Run from the repository root: `.venv/bin/python bench/intent_quality.py [--before REV] [--passes N]`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_node.policy.dataset import load_examples, load_held_out, split_by_template  # noqa: E402
from engine_node.policy.intent import MODEL_PATH, IntentClassifier, IntentModelError  # noqa: E402
from engine_node.policy.intent_quality import ECE_BINS, GATEWAY_FLOOR, quality  # noqa: E402
from engine_node.policy.rules import Policy  # noqa: E402

DECISION_BUDGET_US = 200

MODEL_IN_REPO = MODEL_PATH.relative_to(ROOT).as_posix()


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def previous_model(rev: str | None) -> tuple[IntentClassifier | None, str]:
    """The model file the shipped one replaced, and where it came from; (None, why) when there is none."""
    try:
        if rev is None:
            last = git("log", "-n", "1", "--format=%H", "--", MODEL_IN_REPO).strip()
            if not last:
                return None, "no committed model file"
            committed = git("show", f"{last}:{MODEL_IN_REPO}")
            changed = committed != MODEL_PATH.read_text(encoding="utf-8")
            rev = last if changed else f"{last}~1"
        text = git("show", f"{rev}:{MODEL_IN_REPO}")
        label = git("log", "-n", "1", "--format=%h %cs", rev).strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"not available ({exc.__class__.__name__})"
    try:
        return IntentClassifier.from_document(json.loads(text), source=f"{rev}:{MODEL_IN_REPO}"), label
    except (ValueError, IntentModelError) as exc:
        return None, f"not loadable: {exc}"


def decision_times(work: dict[str, object], texts: list[str], passes: int) -> dict[str, list[float]]:
    """Per callable (a model's classify, a policy's decide), per message, the best of `passes` timings in
    microseconds."""
    inputs = texts
    best = {name: [float("inf")] * len(inputs) for name in work}
    clock = time.perf_counter_ns
    rng = random.Random(5)
    order = list(range(len(inputs)))
    for _ in range(passes):
        # Models alternate pass by pass, each pass over the messages in a fresh order, so drift hits both alike.
        for name, classify in work.items():
            rng.shuffle(order)
            row = best[name]
            for i in order:
                t0 = clock()
                classify(inputs[i])
                elapsed = clock() - t0
                if elapsed < row[i]:
                    row[i] = elapsed
    return {name: sorted(ns / 1000 for ns in row) for name, row in best.items()}


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", help="git revision of the baseline model file (default: the previous version)")
    parser.add_argument("--passes", type=int, default=5, help="passes over the messages for decision time")
    args = parser.parse_args()

    after = IntentClassifier.load()
    before, before_from = previous_model(args.before)
    models = {"before": before, "after": after} if before is not None else {"after": after}
    held_out = load_held_out()
    groups = {"language": "lang", "style": "style"}
    results = {name: quality(model, held_out, groups=groups) for name, model in models.items()}

    names = list(models)
    print(f"\n== intent classifier on the separately written held-out set ({len(held_out)} messages)")
    print(f"   after: the shipped model (sha256 {after.meta['sha256'][:12]}, n_train {after.meta.get('n_train')})")
    print(f"   before: the previous model file, {before_from}")
    print(f"{'':40}" + "".join(f"{name:>10}" for name in names))

    def row(title: str, values: list[float], fmt: str = ".3f") -> None:
        print(f"{title:<40}" + "".join(f"{value:>10{fmt}}" for value in values))

    row("accuracy", [results[n]["accuracy"] for n in names])
    for group in groups:
        for value in results["after"]["groups"][group]:
            row(f"  {group} {value}", [results[n]["groups"][group][value] for n in names])
    print("per-label recall")
    for label in after.labels:
        row(f"  {label}", [results[n]["recall"][label] for n in names])
    row(f"expected calibration error ({ECE_BINS} bins)", [results[n]["ece"] for n in names], ".4f")
    row(f"wrong with confidence >= {GATEWAY_FLOOR:g}", [results[n]["confidently_wrong"] for n in names], ".4f")
    row(f"below the {GATEWAY_FLOOR:g} floor (to the fallback)", [results[n]["below_floor"] for n in names], ".4f")

    _, dataset_held_out = split_by_template(load_examples())
    sets = {
        "held-out set": [message.text for message in held_out],
        "dataset, held-out templates": [example.text for example in dataset_held_out],
    }
    print(f"\ndecision time per message (classifying the gateway's input), best of {args.passes} passes")
    print(f"{'':40}" + "".join(f"{name + ' p50':>12}{name + ' p99':>12}" for name in names) + f"{'p99 ratio':>11}")
    for title, texts in sets.items():
        times = decision_times({name: model.classify for name, model in models.items()}, texts, args.passes)
        cells = "".join(f"{percentile(times[n], 0.5):>9.1f} us{percentile(times[n], 0.99):>9.1f} us" for n in names)
        ratio = percentile(times["after"], 0.99) / percentile(times["before"], 0.99) if before is not None else 1.0
        print(f"{title + f' ({len(texts)})':<40}{cells}{ratio:>10.2f}x")

    policy = Policy(None, None, after)
    print(
        f"\nwhole decision per message (Policy.decide, template defaults, the shipped model), "
        f"best of {args.passes} passes"
    )
    print(f"{'':40}{'p50':>12}{'p99':>12}{'mean':>12}  budget p99 < {DECISION_BUDGET_US} us")
    for title, texts in sets.items():
        times = decision_times({"decide": policy.decide}, texts, args.passes)["decide"]
        p99 = percentile(times, 0.99)
        print(
            f"{title + f' ({len(texts)})':<40}{percentile(times, 0.5):>9.1f} us{p99:>9.1f} us"
            f"{sum(times) / len(times):>9.1f} us  {'met' if p99 < DECISION_BUDGET_US else 'NOT met'}"
        )


if __name__ == "__main__":
    main()
