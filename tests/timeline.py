"""When each test ran, and on which worker: test-artifacts/timeline-<worker>.jsonl, one line a test (its module, its
first moment of setup and last of teardown, its phases' seconds). Loaded by `make test` (`-p tests.timeline`);
`scripts/suite_timeline.py` reads the files and says how busy each worker was and when each finished, which is
what decides the suite's wall time (docs/testing.md)."""

import json
import os
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
_tests: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    if hasattr(report, "node"):  # a worker's report as pytest-xdist hands it to the controller: the worker wrote it
        return
    entry = _tests.setdefault(report.nodeid, {"test": report.nodeid, "start": report.start, "phases": {}})
    entry["start"] = min(entry["start"], report.start)
    entry["stop"] = max(entry.get("stop", report.stop), report.stop)
    entry["phases"][report.when] = round(report.stop - report.start, 3)


def pytest_sessionfinish(session):
    if not _tests:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / f"timeline-{worker}.jsonl", "w", encoding="utf-8") as out:
        for entry in _tests.values():
            out.write(json.dumps(entry) + "\n")
