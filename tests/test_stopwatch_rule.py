"""The suite asserts orders, counts and states, never elapsed times (tests/stopwatch_rule.py); speed is measured by
`make bench`."""

from pathlib import Path

from tests.stopwatch_rule import stopwatch_asserts, stopwatches_under

TESTS = Path(__file__).resolve().parent

PLANTED = """
import time

def test_planted(gate):
    started = time.monotonic()
    gate.admit()
    assert time.monotonic() - started < 1                     # 7: a bound on a difference of readings
    took = time.perf_counter() - started
    assert took < 5                                           # 9: a name holding an elapsed time
    waited = round(took * 1000)
    assert 35 <= waited                                       # 11: derived from one
    t0 = loop.time()
    assert gate.ok and (loop.time() - t0) <= 2.5, "at once"   # 13: inside a larger condition
    assert abs(time.time() - sample["t"]) < 5                 # 14: now minus a stored moment
    assert rows[-1]["sent"] - cancelled.at.timestamp() < 1.0  # 15: a stored moment minus a datetime's
    during["seconds"] = time.monotonic() - started
    assert during["seconds"] < 10                             # 17: an item holding an elapsed time
    self.took = time.monotonic() - t0
    assert self.took >= 0.5                                   # 19: an attribute holding one
"""

ALLOWED = """
import time

def test_allowed(sample, rows):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not rows:           # waiting for a state
        time.sleep(0.1)
    assert rows, "no row after 30 s"
    assert time.time() - 15 < sample["t"] <= time.time()      # a moment in a window of moments
    first, second = time.monotonic(), time.monotonic()
    assert first <= second                                    # an order of two readings
    assert sample["t"] <= cancelled.at.timestamp()            # an order of two moments
    assert sample["duration_cap_s"] == 45 and sample["ttft_s"] <= sample["e2e_s"]
"""


def test_no_test_asserts_on_elapsed_time():
    found = stopwatches_under(TESTS)
    assert not found, "move these measurements to make bench; assert an order, a count or a state:\n" + "\n".join(
        map(str, found)
    )


def test_the_rule_finds_planted_stopwatches_and_leaves_waits_and_orders_alone():
    assert [found.line for found in stopwatch_asserts(PLANTED)] == [7, 9, 11, 13, 14, 15, 17, 19]
    assert stopwatch_asserts(ALLOWED) == []
