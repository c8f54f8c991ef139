"""`make run` on a busy machine, measured: the acceptance test of `make run` (tests/integration/test_make_run.py) with
a five-minute watch of the demo instead of the suite's 30 s, and its figures read back.

Prints how long the control plane took to answer (install check, migrations, demo data), how long until the three
simulated nodes served, the nodes' P99 over 10 s windows of the demo's synthetic traffic (simulator figures, not
vLLM's) against the seed's 1.6 s warning line, and how long every process took to end after SIGTERM. The test's
assertions (serving, no traceback, no firing P99 alert, nothing left behind) still hold the run.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WATCH_S = int(os.environ.get("MAKE_RUN_OBSERVE_S", "300"))
SEED_P99_WARNING_S = 1.6


def main() -> int:
    env = dict(os.environ, MAKE_RUN_OBSERVE_S=str(WATCH_S))
    test = "tests/integration/test_make_run.py"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("make run:")]
    print(f"make run on a busy machine (one core held by a hog), demo watched for {WATCH_S} s once serving")
    for line in lines:
        print("  " + line.removeprefix("make run: "))
    median = re.search(r"median ([\d.]+)s", result.stdout)
    if median:
        p99 = float(median.group(1))
        verdict = "within" if p99 < SEED_P99_WARNING_S else "ABOVE"
        print(f"  median node P99 {p99:.2f} s: {verdict} the seed's {SEED_P99_WARNING_S} s warning line (simulator)")
    if result.returncode != 0:
        print(result.stdout[-4000:])
        print(f"the make run test failed (exit {result.returncode})")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
