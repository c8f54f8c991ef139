"""Read the suite's timeline (test-artifacts/timeline-*.jsonl, written by `-p tests.timeline`): per worker, when it
started and finished, how long it ran tests and what it ran last; then the modules that cost most.

    .venv/bin/python scripts/suite_timeline.py [test-artifacts] [--top 25]
"""

import argparse
import json
from collections import Counter
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("artifacts", nargs="?", default="test-artifacts", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    workers = {
        path.stem.removeprefix("timeline-"): [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted(args.artifacts.glob("timeline-*.jsonl"))
    }
    if not workers:
        raise SystemExit(f"no timeline-*.jsonl under {args.artifacts}: run pytest with -p tests.timeline")
    origin = min(entry["start"] for tests in workers.values() for entry in tests)
    modules: Counter = Counter()
    cpu: Counter = Counter()
    for worker, tests in workers.items():
        tests.sort(key=lambda entry: entry["start"])
        busy = sum(entry["stop"] - entry["start"] for entry in tests)
        first, last = tests[0]["start"] - origin, tests[-1]["stop"] - origin
        print(
            f"{worker}: {len(tests)} tests from {first:.0f} s to {last:.0f} s, running tests {busy:.0f} s "
            f"({busy / max(last - first, 1e-9):.0%}); last: {tests[-1]['test']}"
        )
        for entry in tests:
            modules[entry["test"].split("::")[0]] += entry["stop"] - entry["start"]
            cpu[entry["test"].split("::")[0]] += entry.get("cpu", 0.0)
    print(f"\nCPU in all: {sum(cpu.values()):.0f} s (the workers' own and their child processes')")
    print(f"\nthe {args.top} costliest modules (wall seconds from first setup to last teardown, summed; CPU seconds):")
    for module, seconds in modules.most_common(args.top):
        print(f"{seconds:8.1f} {cpu[module]:8.1f}  {module}")
    print(f"\nthe {args.top} modules that cost most CPU:")
    for module, seconds in cpu.most_common(args.top):
        print(f"{seconds:8.1f}  {module}")


if __name__ == "__main__":
    main()
