"""Policy decision time on normal and hostile messages, before and after linear-time matching, in the same run.

before: the policy as it was: Python's `re` (backtracking) with the previous default patterns (look-around for phone
and ID numbers) over the first 4,000 characters, the classifier over the same 4,000 characters, scored with one
Python list per matched feature and hashed one gram at a time.
after: engine_node.policy as shipped: RE2 over the first and last 2,048 characters, the classifier over the first and
last 256 (engine_node/policy/rules.py, docs/policy-patterns.md).
Baseline: json.loads of a chat request body carrying a normal message, work every request costs the gateway before
the policy runs. Figures are ratios against that baseline, or after against before; the microseconds are there to
read them by. Each "after" figure is the best of several runs (noise from other processes stays out); a "before"
figure that takes seconds is run once.

Run from the repository root: `.venv/bin/python bench/policy_hostile.py [--passes N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import re
import statistics
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controlplane.params import schema  # noqa: E402
from engine_node import openai_api  # noqa: E402
from engine_node.policy.dataset import load_examples  # noqa: E402
from engine_node.policy.explain import estimate_tokens  # noqa: E402
from engine_node.policy.intent import N_BUCKETS, Intent, IntentClassifier, grams, softmax  # noqa: E402
from engine_node.policy.patterns import compile_pattern  # noqa: E402
from engine_node.policy.rules import Policy, RegexHit  # noqa: E402

SCAN_CHARS_BEFORE = 4000
PATTERNS_BEFORE = [
    *schema.DEFAULT_STRICT_PATTERNS[:2],
    r"(?<!\d)1[3-9]\d{9}(?!\d)",
    r"(?<!\d)\d{17}[\dXx](?!\d)",
]
_CJK_BEFORE = re.compile(r"[\u3000-\u9fff\uf900-\ufaff\uff00-\uffef]")
BUNDLE = {"whitelists": {"legal": ["legal_policy"]}, "overrides": [], "degradation": {"active": False}}
MAX_BODY_BYTES = 8 * 1024 * 1024


class PolicyBefore(Policy):
    """The strict scan and the classification as they were before RE2 and the bounded edges."""

    def __init__(self, params: dict, bundle: dict, classifier: IntentClassifier):
        super().__init__(params, bundle, classifier)
        self.python_patterns = [re.compile(p) for p in PATTERNS_BEFORE]

    def strict_hits(self, text: str) -> list[RegexHit]:
        scanned = text[:SCAN_CHARS_BEFORE]
        hits = []
        for pattern in self.python_patterns:
            found = pattern.search(scanned)
            if found:
                hits.append(RegexHit(pattern.pattern, found.group(0)[:80]))
        return hits

    def classify(self, text: str) -> Intent | None:
        if not text.strip():
            return None
        classifier = self.classifier
        buckets = {zlib.crc32(gram.encode("utf-8")) % N_BUCKETS for gram in grams(text[:SCAN_CHARS_BEFORE])}
        value = 1.0 / math.sqrt(len(buckets))
        scores = list(classifier.bias)
        for bucket in buckets:
            row = classifier.weights.get(bucket)
            if row is not None:
                scores = [score + value * weight for score, weight in zip(scores, row, strict=True)]
        probabilities = softmax([score / classifier.temperature for score in scores])
        best = max(range(len(probabilities)), key=probabilities.__getitem__)
        return Intent(label=classifier.labels[best], confidence=probabilities[best])


def estimate_tokens_before(text: str) -> int:
    cjk = len(_CJK_BEFORE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def best_us(func, runs: int) -> float:
    best = math.inf
    for _ in range(runs):
        started = time.perf_counter_ns()
        func()
        best = min(best, time.perf_counter_ns() - started)
    return best / 1000


def hostile_messages() -> dict[str, str]:
    rng = random.Random(11)
    varied_cjk = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(4000))
    words = " ".join(rng.choice(["order", "refund", "my", "where", "coupon", "invoice", "a", "x"]) for _ in range(2000))
    return {
        "4,000 digits": "1" * 4000,
        "20,000 digits": "1" * 20000,
        "4,000 x one CJK character": "单" * 4000,
        "4,000 varied CJK characters": varied_cjk,
        "4,000 one-letter words": "a " * 2000,
        "2,000 varied English words": words,
        "4,000 emoji": "😀" * 4000,
        "1 letter + 4,000 combining marks": "a" + "\u0301\u0316" * 2000,
        "4,000 lone surrogates (JSON \\ud800)": json.loads('"' + "\\ud800" * 4000 + '"'),
        "'1元' x 2,000": "1元" * 2000,
        "2.8 M CJK characters (an 8 MiB body)": "单" * (MAX_BODY_BYTES // 3 - 100),
    }


# (pattern, the text that makes Python's re backtrack, what RE2 gets: the same text, and the longest the scan reads)
TEMPLATE_PATTERNS = [
    (r"(a|a)+$", "a" * 23 + "!", "a" * 4096),
    (r"(x+x+)+y", "x" * 20, "x" * 4096),
    (r"(\d+)*元$", "1" * 22 + "!", "1" * 4096),
]


def run(passes: int) -> dict:
    params = schema.defaults()
    classifier = IntentClassifier.load()
    after = Policy(params, BUNDLE, classifier)
    before = PolicyBefore(params, BUNDLE, classifier)
    texts = [example.text for example in load_examples()]
    body = openai_api.compact_json({"model": "m", "messages": [{"role": "user", "content": texts[0]}]}).encode()
    baseline = statistics.median(best_us(lambda: json.loads(body), 200) for _ in range(5))

    normal = {"before": [math.inf] * len(texts), "after": [math.inf] * len(texts)}
    order = list(range(len(texts)))
    rng = random.Random(5)
    for _ in range(passes):
        for key, policy in (("before", before), ("after", after)):
            rng.shuffle(order)
            row = normal[key]
            for i in order:
                started = time.perf_counter_ns()
                policy.decide(texts[i])
                row[i] = min(row[i], (time.perf_counter_ns() - started) / 1000)

    hostile = {}
    for name, text in hostile_messages().items():
        slow = best_us(lambda text=text: before.decide(text), 1)
        if slow < 200_000:
            slow = min(slow, best_us(lambda text=text: before.decide(text), 2))
        hostile[name] = (slow, best_us(lambda text=text: after.decide(text), 20))
    big = "单" * (MAX_BODY_BYTES // 3 - 100)
    tokens = (best_us(lambda: estimate_tokens_before(big), 1), best_us(lambda: estimate_tokens(big), 3))

    templates = []
    for pattern, trap, long in TEMPLATE_PATTERNS:
        python = re.compile(pattern)
        compiled = compile_pattern(pattern, "bench")
        templates.append(
            (
                pattern,
                len(trap),
                best_us(lambda python=python, trap=trap: python.search(trap), 1),
                best_us(lambda compiled=compiled, trap=trap: compiled.search(trap.encode()), 20),
                best_us(lambda compiled=compiled, long=long: compiled.search(long.encode()), 20),
            )
        )
    return {
        "baseline": baseline,
        "normal": normal,
        "hostile": hostile,
        "tokens": tokens,
        "templates": templates,
        "offload": offload_cost(after, texts[:2000]),
        "passes": passes,
    }


def offload_cost(policy: Policy, texts: list[str]) -> dict:
    """Per decision: inline on the event loop vs in a worker thread (run_in_executor), wall and CPU time."""

    async def inline() -> None:
        for text in texts:
            policy.decide(text)

    async def threaded(pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        for text in texts:
            await loop.run_in_executor(pool, policy.decide, text)

    results = {"inline": [], "thread": []}
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(5):
            for key, coro in (("inline", inline), ("thread", lambda: threaded(pool))):
                wall, cpu = time.perf_counter(), time.process_time()
                asyncio.run(coro())
                results[key].append(
                    ((time.perf_counter() - wall) / len(texts) * 1e6, (time.process_time() - cpu) / len(texts) * 1e6)
                )
    return {key: (min(w for w, _ in rows), min(c for _, c in rows)) for key, rows in results.items()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(r: dict) -> None:
    base = r["baseline"]
    print()
    print(f"== policy decision, normal vs hostile messages, before vs after (baseline: json.loads {base:.1f} us)")
    n = r["normal"]
    print(f"\nnormal messages (engine_node/policy/data/intents.jsonl, {len(n['after'])}, best of {r['passes']} passes)")
    print(f"{'':34} {'before':>11} {'after':>11} {'after/before':>13} {'after/baseline':>15}")
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        b, a = percentile(n["before"], q), percentile(n["after"], q)
        print(f"{'Policy.decide ' + name:<34} {b:>8.1f} us {a:>8.1f} us {a / b:>12.2f}x {a / base:>14.1f}x")
    print("\nhostile messages (Policy.decide on the message as a client sends it)")
    print(f"{'':38} {'before':>12} {'after':>10} {'before/after':>13} {'after/baseline':>15}")
    for name, (b, a) in r["hostile"].items():
        print(f"{name:<38} {b / 1000:>9.2f} ms {a:>7.1f} us {b / a:>12.0f}x {a / base:>14.1f}x")
    b, a = r["tokens"]
    print(
        f"{'prompt token estimate, 8 MiB body':<38} {b / 1000:>9.2f} ms {a:>7.1f} us {b / a:>12.0f}x {a / base:>14.1f}x"
    )
    print("\ntemplate patterns Python's re backtracks on (before: re.search; after: RE2 on the same text, and on the")
    print("4,096 characters the scan reads at most)")
    print(f"{'':26} {'before':>12} {'after':>10} {'before/after':>13} {'after, 4,096 chars':>19}")
    for pattern, size, b, a, long in r["templates"]:
        print(f"{pattern + f' on {size} chars':<26} {b / 1000:>9.1f} ms {a:>7.1f} us {b / a:>12.0f}x {long:>16.1f} us")
    o = r["offload"]
    wi, ci = o["inline"]
    wt, ct = o["thread"]
    print("\nthe decision off the event loop (run_in_executor, 2 threads) vs inline, per normal message:")
    print(f"{'':34} {'inline':>10} {'thread':>10} {'thread/inline':>14}")
    print(f"{'wall time per decision':<34} {wi:>7.1f} us {wt:>7.1f} us {wt / wi:>13.2f}x")
    print(f"{'CPU time per decision':<34} {ci:>7.1f} us {ct:>7.1f} us {ct / ci:>13.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=3, help="passes over the dataset for normal messages")
    args = parser.parse_args()
    gc.collect()
    started = time.perf_counter()
    report(run(args.passes))
    print(f"\n(whole benchmark: {time.perf_counter() - started:.0f}s)")


if __name__ == "__main__":
    main()
