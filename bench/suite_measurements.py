"""The measurements that left `make test`: acceptance tests run here at full length, their figures printed.

`make test` runs each of these tests short, asserting the mechanism (an order, a count, a state); the same test with
its measuring switch set runs long enough for its figures to mean something, and asserts the direction or target
as well. Each one's printed lines are shown under its title; a failed run says so and shows its tail.

- make run on a busy machine (tests/integration/test_make_run.py, MAKE_RUN_OBSERVE_S=300): how long the control plane
  took to answer and the three simulated nodes to serve, the nodes' P99 over 10 s windows of five minutes of demo
  traffic against the seed's 1.6 s warning line, how long stopping took.
- capacity within the SLO (tests/replays/comparisons/test_acceptance_throughput.py, CONTROLPLANE_LADDER_MEASURE=1):
  defaults and the report's template each climb 2, 4, 6, 8 QPS ladders twice on the saturation fleet; sustained
  QPS under the 16 s first-round P99 line, and the template carrying more.

Simulated figures (the vLLM-protocol simulator), never measurements of vLLM. Needs Postgres and Redis as `make test`
does (TEST_DATABASE_URL / TEST_REDIS_URL, the Makefile's defaults otherwise).

`.venv/bin/python bench/suite_measurements.py [make-run] [capacity]`
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED_P99_WARNING_S = 1.6

MEASUREMENTS = {
    "make-run": (
        "make run on a busy machine (one core held by a hog), demo watched for 300 s once serving",
        "tests/integration/test_make_run.py",
        {"MAKE_RUN_OBSERVE_S": "300"},
    ),
    "capacity": (
        "capacity within the SLO: QPS ladders, defaults vs the report's template, two rounds (simulated)",
        "tests/replays/comparisons/test_acceptance_throughput.py",
        {"CONTROLPLANE_LADDER_MEASURE": "1"},
    ),
}
PYTEST_CHROME = re.compile(r"^(=+|-+|\.+|[.FEsx]+\s*\[\s*\d+%\]|\d+ (passed|failed).*|PASSED|FAILED.*)$")


def run(name: str) -> int:
    title, test, switches = MEASUREMENTS[name]
    env = dict(
        os.environ,
        DATABASE_URL=os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/controlplane"),
        REDIS_URL=os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
        CELERY_TASK_ALWAYS_EAGER="1",
        **switches,
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    print(title)
    for line in result.stdout.splitlines():
        if line.strip() and not PYTEST_CHROME.match(line.strip()):
            print("  " + line.strip())
    if name == "make-run" and (median := re.search(r"median ([\d.]+)s", result.stdout)):
        p99 = float(median.group(1))
        verdict = "within" if p99 < SEED_P99_WARNING_S else "ABOVE"
        print(f"  median node P99 {p99:.2f} s: {verdict} the seed's {SEED_P99_WARNING_S} s warning line (simulator)")
    if result.returncode != 0:
        print("\n".join(result.stdout.splitlines()[-40:]))
        print(f"  FAILED (pytest exit {result.returncode})")
    print()
    return result.returncode


def main() -> int:
    names = sys.argv[1:] or list(MEASUREMENTS)
    return max(run(name) for name in names)


if __name__ == "__main__":
    sys.exit(main())
