"""The speculative-decoding rule on vLLM's counters: windows, back-off, the probe and its growing wait."""

from controlplane.params.schema import FIELDS_BY_PATH
from engine_node.speculation import DEFAULTS, MIN_DRAFT_TOKENS, SpeculationGuard, speculation_params

PARAMS = {**speculation_params({"speculative": {"enabled": True}}), "window_s": 10, "probe_after_s": 60}


class Counters:
    """vLLM's cumulative counters as the scraper parses them, advanced one window at a time."""

    def __init__(self):
        self.drafted = self.accepted = self.tpot_count = self.tpot_sum = 0.0

    def window(self, *, drafted=300, acceptance=0.7, requests=10, tokens_per_s=100.0, speculating=True) -> dict:
        if speculating:
            self.drafted += drafted
            self.accepted += drafted * acceptance
        self.tpot_count += requests
        self.tpot_sum += requests / tokens_per_s
        return self.figures(speculating)

    def figures(self, speculating=True) -> dict:
        return {
            "draft_tokens": self.drafted if speculating else None,
            "accepted_tokens": self.accepted if speculating else None,
            "tpot_count": self.tpot_count,
            "tpot_sum": self.tpot_sum,
        }


def run(guard, counters, now, **window):
    guard.observe(counters.window(**window), PARAMS, now=now)
    return guard.due(PARAMS, now=now)


def test_defaults_are_the_templates():
    for key, value in DEFAULTS.items():
        assert FIELDS_BY_PATH[f"speculative.{key}"].default == value, key


def test_three_consecutive_rejected_windows_turn_it_off_and_a_good_one_resets_the_count():
    guard, counters = SpeculationGuard(), Counters()
    guard.observe(counters.figures(), PARAMS, now=0)
    assert run(guard, counters, 10, acceptance=0.5) is None  # 50 % rejected: above 40 %
    assert run(guard, counters, 20, acceptance=0.5) is None
    assert run(guard, counters, 30, acceptance=0.8) is None  # a good window: the count starts again
    assert guard.rejected_windows == 0
    assert run(guard, counters, 40, acceptance=0.5) is None
    assert run(guard, counters, 50, drafted=MIN_DRAFT_TOKENS - 1, acceptance=0.9) is None  # too few: counts neither
    assert run(guard, counters, 60, acceptance=0.3) is None
    decision = run(guard, counters, 70, acceptance=0.2)
    assert decision is not None and decision[0] == "off"
    assert "above 40% for 3 consecutive 10 s windows (70%, 80%" in decision[1]


def test_a_counter_that_goes_back_starts_a_new_window():
    guard, counters = SpeculationGuard(), Counters()
    guard.observe(counters.window(), PARAMS, now=0)
    assert (
        guard.observe({"draft_tokens": 5.0, "accepted_tokens": 1.0, "tpot_count": 1, "tpot_sum": 0.1}, PARAMS, 10)
        is None
    )
    assert guard.windows == []


def test_off_comes_back_only_after_the_wait_and_while_generation_is_slow_and_a_failed_probe_doubles_the_wait():
    guard, counters = SpeculationGuard(), Counters()
    guard.observe(counters.figures(), PARAMS, now=0)
    for t in (10, 20, 30):
        decision = run(guard, counters, t, acceptance=0.1)
    guard.requested("off", now=30)
    assert guard.due(PARAMS, now=31) is None  # asked already: no second request before the retry delay
    guard.applied("off", decision[1], now=35)
    assert guard.state(PARAMS, now=35)["state"] == "off"
    guard.observe(counters.figures(speculating=False), PARAMS, now=36)  # the restarted engine: no spec counters
    assert run(guard, counters, 46, speculating=False, tokens_per_s=10.0) is None  # slow, but only 11 s off
    assert run(guard, counters, 96, speculating=False, tokens_per_s=40.0) is None  # waited, but fast
    decision = run(guard, counters, 106, speculating=False, tokens_per_s=12.0)
    assert decision is not None and decision[0] == "on" and "12.0 tokens/s, below 15" in decision[1]
    guard.applied("on", decision[1], now=106)
    assert guard.state(PARAMS, now=106)["state"] == "probing"

    # The probe is rejected again: off, and the next wait is twice as long.
    guard.observe(counters.figures(), PARAMS, now=107)
    for t in (117, 127, 137):
        decision = run(guard, counters, t, acceptance=0.2)
    assert decision[0] == "off" and "a probe after an earlier back-off" in decision[1]
    guard.applied("off", decision[1], now=137)
    assert guard.hold_s(PARAMS) == 120
    guard.observe(counters.figures(speculating=False), PARAMS, now=138)
    assert run(guard, counters, 200, speculating=False, tokens_per_s=5.0) is None
    decision = run(guard, counters, 260, speculating=False, tokens_per_s=5.0)
    assert decision[0] == "on"

    # An accepted window ends the probing and the wait goes back to probe_after_s.
    guard.applied("on", decision[1], now=260)
    guard.observe(counters.figures(), PARAMS, now=261)
    assert run(guard, counters, 271, acceptance=0.9) is None
    assert guard.state(PARAMS, now=271)["state"] == "on" and guard.hold_s(PARAMS) == 60


def test_a_config_without_speculation_never_asks():
    guard, counters = SpeculationGuard(), Counters()
    params = {**PARAMS, "enabled": False}
    guard.observe(counters.figures(), params, now=0)
    for t in (10, 20, 30, 40):
        guard.observe(counters.window(acceptance=0.0), params, now=t)
        assert guard.due(params, now=t) is None
    assert guard.state(params)["state"] == "not configured"
