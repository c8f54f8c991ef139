"""The search space, objective, constraints and best-trial rules (pure: no database)."""

import pytest

from controlplane.lib.errors import InvalidField
from controlplane.tuning import space as search


def error_of(raw, sampler="tpe"):
    with pytest.raises(InvalidField) as caught:
        search.space_check(raw, sampler=sampler)
    return caught.value.detail[0]


def test_a_space_of_a_cold_int_a_hot_float_and_a_choice_is_kept_with_each_field_tagged():
    dims = search.space_check(
        [
            {"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 64, "step": 8},
            {"path": "temperature.normal", "type": "float", "low": 0.5, "high": 0.9, "step": 0.1},
            {"path": "engine.enable_prefix_caching", "type": "choice", "choices": [True, False]},
        ],
        sampler="grid",
    )
    assert [(d.path, d.apply) for d in dims] == [
        ("engine.max_num_seqs", "cold"),
        ("temperature.normal", "hot"),
        ("engine.enable_prefix_caching", "cold"),
    ]
    assert dims[0].grid_values() == [8, 16, 24, 32, 40, 48, 56, 64]
    assert dims[1].grid_values() == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert search.grid_size(dims) == 8 * 5 * 2


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        ([{"path": "engine.nope", "type": "int", "low": 1, "high": 2}], "space[0].path", "not a template field"),
        ([{"path": "engine.model", "type": "choice", "choices": ["a"]}], "space[0].path", "only numbers"),
        ([{"path": "temperature.strict_patterns", "type": "int", "low": 1, "high": 2}], "space[0].path", "regexes"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 0, "high": 8}], "space[0].low", "at least 1"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 5000}], "space[0].high", "at most 4096"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 8}], "space[0].high", "above low"),
        ([{"path": "engine.max_num_seqs", "type": "float", "low": 8, "high": 9}], "space[0].type", "whole number"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 8.5, "high": 9}], "space[0].low", "whole number"),
        ([{"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 16, "step": 0}], "space[0].step", "above 0"),
        (
            [{"path": "engine.max_num_seqs", "type": "int", "low": 1, "high": 9, "bogus": 1}],
            "space[0].bogus",
            "unknown",
        ),
        ([{"path": "engine.max_num_seqs", "type": "range", "low": 1, "high": 9}], "space[0].type", "int, float or"),
        ([{"path": "engine.quantization", "type": "choice", "choices": ["int3"]}], "space[0].choices[0]", "one of"),
        ([{"path": "engine.enable_prefix_caching", "type": "choice", "choices": [1]}], "space[0].choices[0]", "true"),
        ([{"path": "temperature.normal", "type": "float", "low": 0.1, "high": 3}], "space[0].high", "at most 2"),
        (
            [{"path": "temperature.normal", "type": "float", "low": 0, "high": 1, "log": True}],
            "space[0].log",
            "above 0",
        ),
        ([{"path": "temperature.normal", "type": "float", "low": float("nan"), "high": 1}], "space[0].low", "number"),
        ([], "space", "non-empty"),
        ("engine.max_num_seqs", "space", "non-empty list"),
    ],
)
def test_a_bad_dimension_is_refused_naming_its_key_and_the_rule(raw, path, words):
    detail = error_of(raw)
    assert detail["path"] == path and words in detail["message"], detail


def test_a_field_searched_twice_and_a_grid_float_without_a_step_are_refused():
    dim = {"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 16}
    assert error_of([dim, dim]) == {"path": "space[1].path", "message": "engine.max_num_seqs is searched twice"}
    float_dim = {"path": "temperature.normal", "type": "float", "low": 0.1, "high": 0.9}
    assert error_of([float_dim], sampler="grid")["path"] == "space[0].step"
    assert search.space_check([float_dim], sampler="tpe")[0].step is None


def test_candidate_params_set_the_searched_fields_and_leave_the_base_alone():
    base = {"engine": {"max_num_seqs": 64}, "temperature": {"strict": 0.3}}
    params = search.candidate_params(base, {"engine.max_num_seqs": 16, "batch.max_size": 4})
    assert params == {"engine": {"max_num_seqs": 16}, "temperature": {"strict": 0.3}, "batch": {"max_size": 4}}
    assert base["engine"]["max_num_seqs"] == 64


def figures(p99, error_rate, tokens_per_s=100.0):
    return {
        "requests": 100,
        "latency": {"e2e_s": {"p99": p99}},
        "errors": {"error_rate": error_rate},
        "throughput": {"output_tokens_per_s": tokens_per_s, "requests_per_s": 10.0},
    }


def test_constraints_default_to_the_slo_and_each_violation_is_one_sentence():
    limits = search.constraints_check(None, default_p99_s=1.8, default_error_rate=0.005)
    assert limits.as_dict() == {"p99_max_s": 1.8, "error_rate_max": 0.005}
    assert search.violations(search.measured(figures(1.79, 0.005)), limits) == []
    assert search.violations(search.measured(figures(1.81, 0.006)), limits) == [
        "P99 1.810 s above 1.8 s",
        "error rate 0.60% above 0.50%",
    ]
    assert search.violations(search.measured(figures(None, 1.0)), limits)[0] == "no successful request"
    with pytest.raises(InvalidField) as caught:
        search.constraints_check({"p99_max_s": -1}, default_p99_s=1.8, default_error_rate=0.005)
    assert caught.value.detail[0]["path"] == "constraints.p99_max_s"


def test_objective_values_come_from_the_run_figures():
    values = search.measured(figures(1.2, 0.0, tokens_per_s=950.5))
    assert search.objective_value("min_p99", values) == 1.2
    assert search.objective_value("max_throughput", values) == 950.5
    steps = [{"qps": 20, "violations": []}, {"qps": 40, "violations": []}, {"qps": 60, "violations": ["P99"]}]
    assert search.ladder_value(steps) == 40
    assert search.ladder_value([{"qps": 20, "violations": ["P99"]}]) is None


def test_the_best_trial_is_the_best_feasible_one_and_the_earliest_on_a_tie():
    trials = [
        {"id": 1, "value": 0.9, "is_feasible": False},  # fastest, but it broke the SLO
        {"id": 2, "value": 1.4, "is_feasible": True},
        {"id": 3, "value": 1.2, "is_feasible": True},
        {"id": 4, "value": 1.2, "is_feasible": True},
        {"id": 5, "value": None, "is_feasible": False},
    ]
    assert search.best_trial("min_p99", trials)["id"] == 3
    assert search.best_trial("max_throughput", trials)["id"] == 2
    assert search.best_trial("min_p99", [trials[0], trials[4]]) is None


def test_repeated_replays_score_the_median_and_count_errors_over_every_request():
    runs = [
        {"p99_s": 0.9, "error_rate": 0.0, "output_tokens_per_s": 300.0, "requests_per_s": 40.0, "requests": 100},
        {"p99_s": 1.6, "error_rate": 0.02, "output_tokens_per_s": 280.0, "requests_per_s": 39.0, "requests": 100},
        {"p99_s": 1.0, "error_rate": 0.01, "output_tokens_per_s": 310.0, "requests_per_s": 41.0, "requests": 200},
    ]
    assert search.repeated(runs) == {
        # One unlucky replay (1.6 s) does not move the median; a mean would say 1.167 s.
        "p99_s": 1.0,
        "error_rate": pytest.approx((0 + 2 + 2) / 400),
        "output_tokens_per_s": 300.0,
        "requests_per_s": 40.0,
        "requests": 400,
    }
    # An even count takes the middle two's mean; a run without a successful request has no P99 to count.
    two = search.repeated([{**runs[0], "p99_s": None, "error_rate": 1.0}, runs[1], runs[2]])
    assert two["p99_s"] == pytest.approx(1.3) and two["error_rate"] == pytest.approx((100 + 2 + 2) / 400)
    assert search.repeated(runs[:1]) == runs[0]
    nothing = search.repeated([{"p99_s": None, "error_rate": None, "requests": 0}] * 2)
    assert nothing["p99_s"] is None and nothing["error_rate"] is None


def test_pooled_repeats_take_the_p99_of_every_successful_request_together():
    def run(latencies, failed=0):
        return [{"ok": True, "e2e_s": v} for v in latencies] + [{"ok": False, "e2e_s": 9.0}] * failed

    # Three replays of 100 requests: each one's P99 is its slowest request but one (nearest rank 99 of 100).
    slow = run([0.5] * 97 + [2.0, 3.0, 4.0])
    calm = run([0.5] * 99 + [0.9])
    other = run([0.5] * 98 + [0.8, 1.0], failed=3)
    # 300 successes pooled: rank 297, the fourth slowest (1.0 s), so one replay's stray requests no longer decide it;
    # failed requests are not latencies.
    assert search.pooled_p99_of([slow, calm, other]) == 1.0
    assert search.pooled_p99_of([slow]) == 3.0
    assert search.pooled_p99_of([[{"ok": False, "e2e_s": 1.0}], []]) is None
    runs = [
        {"p99_s": 3.0, "error_rate": 0.0, "output_tokens_per_s": 300.0, "requests_per_s": 40.0, "requests": 100},
        {"p99_s": 0.9, "error_rate": 0.0, "output_tokens_per_s": 280.0, "requests_per_s": 39.0, "requests": 100},
        {"p99_s": 1.0, "error_rate": 0.03, "output_tokens_per_s": 310.0, "requests_per_s": 41.0, "requests": 103},
    ]
    pooled = search.repeated(runs, pooled_p99=0.9)
    # Only the P99 changes: throughputs stay the median, errors stay over every request.
    assert pooled == {**search.repeated(runs), "p99_s": 0.9}
    assert search.repeated(runs)["p99_s"] == 1.0
