"""Benchmark: concluding one impact record, printed as a ratio against a baseline measured in the same run.

An impact record's conclusions compare 11 pool figures over two 10-minute windows of 1 s samples (600 + 600 values
each) with a Mann-Whitney test. The baseline is the least any rank test must do: sorting the same 11 x 1,200 values.
"""

import os
import random
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

from controlplane.impact import conclusions  # noqa: E402

SAMPLES = 600


def windows(seed: int) -> tuple[dict, dict]:
    rng = random.Random(seed)
    before = {f.key: [rng.lognormvariate(0, 0.2) for _ in range(SAMPLES)] for f in conclusions.FIGURES}
    after = {f.key: [rng.lognormvariate(0.1, 0.2) for _ in range(SAMPLES)] for f in conclusions.FIGURES}
    return before, after


def conclude(before: dict, after: dict) -> None:
    verdicts = {f.key: conclusions.figure_verdict(f, before[f.key], after[f.key]) for f in conclusions.FIGURES}
    conclusions.overall_outcome(verdicts)
    for key in conclusions.FIGURE_KEYS:
        conclusions.summary(before[key])
        conclusions.summary(after[key])


def sort_only(before: dict, after: dict) -> None:
    for key in conclusions.FIGURE_KEYS:
        sorted(before[key] + after[key])


def best(func, number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=5)) / number


def main() -> None:
    before, after = windows(1)
    measured = best(lambda: conclude(before, after), 20)
    baseline = best(lambda: sort_only(before, after), 200)
    print(f"{'benchmark':<44} {'per record':>12} {'baseline':>12} {'ratio':>8}  baseline is")
    print(
        f"{'impact conclusions, 11 figures x 600+600 s':<44} {measured * 1e3:>9.2f} ms {baseline * 1e3:>9.2f} ms "
        f"{measured / baseline:>7.1f}x  sorting the same values"
    )


if __name__ == "__main__":
    main()
