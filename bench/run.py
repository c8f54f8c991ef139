"""Benchmarks, printed as ratios against a baseline measured in the same run (never pass/fail timings).

- editor validation: what the template editor costs the server per keystroke (parse + schema check),
  against PyYAML's pure-Python safe loader on the same text (what a plain `yaml.safe_load` costs).
- version diff: the field-by-field diff of two effective documents, against a plain dict comparison.
"""

import os
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

import django  # noqa: E402

django.setup()

import yaml  # noqa: E402

from controlplane.params import codec, schema, validation  # noqa: E402
from controlplane.params.diff import params_diff  # noqa: E402


def best_per_call(func, number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=5)) / number


def main() -> None:
    seed = (ROOT / "controlplane/params/fixtures/seed_inference_params.yaml").read_text(encoding="utf-8")
    full = codec.dump({schema.ROOT: schema.defaults()}, "yaml")
    rows = []
    for label, text in [("seed document", seed), ("full document", full)]:
        baseline = best_per_call(lambda text=text: yaml.load(text, Loader=yaml.SafeLoader), 300)
        measured = best_per_call(lambda text=text: validation.validate(codec.parse(text, "yaml")), 300)
        rows.append((f"editor validation, {label}", measured, baseline, "yaml.safe_load (pure Python)"))

    old = schema.effective({})
    new = schema.effective({"temperature": {"strict": 0.2}, "engine": {"max_num_seqs": 128}})
    baseline = best_per_call(lambda: old == new, 20000)
    measured = best_per_call(lambda: params_diff(old, new), 2000)
    rows.append(("version diff", measured, baseline, "dict equality"))

    print(f"{'benchmark':<36} {'per call':>12} {'baseline':>12} {'ratio':>8}  baseline is")
    for name, measured, base, what in rows:
        print(f"{name:<36} {measured * 1e6:>9.1f} us {base * 1e6:>9.1f} us {measured / base:>7.2f}x  {what}")


if __name__ == "__main__":
    main()
