"""When each test ran, and on which worker: test-artifacts/timeline-<worker>.jsonl, one line a test (its module, its
first moment of setup and last of teardown, its phases' seconds, and the CPU seconds it cost: the worker's own and
its child processes' that ended in it, a daphne, an agent and the vLLM under it). Loaded by `make test`
(`-p tests.timeline`); `scripts/suite_timeline.py` reads the files and says how busy each worker was and when each
finished, which is what decides the suite's wall time, and which modules cost the most CPU (docs/testing.md)."""

import json
import os
import resource
from pathlib import Path

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
_tests: dict[str, dict] = {}
_cpu_mark: list[float] = []


def _cpu_s() -> float:
    """CPU seconds (user and system) of this process and of every child it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_runtest_logreport(report):
    if hasattr(report, "node"):  # a worker's report as pytest-xdist hands it to the controller: the worker wrote it
        return
    entry = _tests.setdefault(report.nodeid, {"test": report.nodeid, "start": report.start, "phases": {}})
    entry["start"] = min(entry["start"], report.start)
    entry["stop"] = max(entry.get("stop", report.stop), report.stop)
    entry["phases"][report.when] = round(report.stop - report.start, 3)
    if report.when == "teardown":
        now = _cpu_s()
        entry["cpu"] = round(now - (_cpu_mark[0] if _cpu_mark else now), 3)
        _cpu_mark[:] = [now]


def pytest_sessionstart(session):
    _cpu_mark[:] = [_cpu_s()]


def pytest_sessionfinish(session):
    if not _tests:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / f"timeline-{worker}.jsonl", "w", encoding="utf-8") as out:
        for entry in _tests.values():
            out.write(json.dumps(entry) + "\n")
