"""The optimiser: seeded samplers over the study's dimensions, a grid that ends, history rebuilt from our rows."""

import math

import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from controlplane.tuning import optimiser
from controlplane.tuning import space as search
from controlplane.tuning.optimiser import Optimiser

DIMS = search.space_check(
    [
        {"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 32, "step": 8},
        {"path": "engine.enable_prefix_caching", "type": "choice", "choices": [True, False]},
    ],
    sampler="grid",
)


def test_a_grid_asks_each_point_once_and_then_is_exhausted():
    optimiser = Optimiser(objective="min_p99", sampler="grid", dims=DIMS, seed=3)
    seen = []
    while not optimiser.is_exhausted():
        trial, params = optimiser.ask()
        seen.append((params["engine.max_num_seqs"], params["engine.enable_prefix_caching"]))
        optimiser.tell(trial, value=1.0, is_feasible=True)
    assert sorted(seen) == sorted((n, c) for n in (8, 16, 24, 32) for c in (True, False))


def test_the_same_seed_and_history_ask_the_same_candidate():
    def next_after(history):
        optimiser = Optimiser(objective="min_p99", sampler="tpe", dims=DIMS, seed=11)
        optimiser.replay_history(history)
        return optimiser.ask()[1]

    history = [
        {
            "params": {"engine.max_num_seqs": n, "engine.enable_prefix_caching": True},
            "value": 2.0 - n / 32,
            "is_feasible": n > 8,
            "state": "complete",
        }
        for n in (8, 16, 24, 32)
    ] + [
        {
            "params": {"engine.max_num_seqs": 16, "engine.enable_prefix_caching": False},
            "value": None,
            "is_feasible": False,
            "state": "failed",
        }
    ]
    first = next_after(history)
    assert first == next_after(history)
    assert set(first) == {"engine.max_num_seqs", "engine.enable_prefix_caching"}
    assert first["engine.max_num_seqs"] in (8, 16, 24, 32)


def test_tpe_moves_towards_the_better_region_of_a_simple_function():
    dims = search.space_check([{"path": "engine.max_num_seqs", "type": "int", "low": 1, "high": 256}], sampler="tpe")
    optimiser = Optimiser(objective="min_p99", sampler="tpe", dims=dims, seed=0)
    values = []
    for _ in range(30):
        trial, params = optimiser.ask()
        value = abs(params["engine.max_num_seqs"] - 200) / 100
        values.append(value)
        optimiser.tell(trial, value=value, is_feasible=True)
    assert min(values[15:]) < 0.1
    assert sum(values[20:]) / 10 < sum(values[:5]) / 5


# A choice among numbers is searched by its index in ascending order; words and flags stay categories.
ORDERED = search.space_check(
    [
        {"path": "engine.max_num_seqs", "type": "choice", "choices": [16, 2, 8, 4]},
        {"path": "engine.gpu_memory_utilization", "type": "choice", "choices": [0.9, 0.8, 0.85]},
        {"path": "engine.enable_prefix_caching", "type": "choice", "choices": [True, False]},
    ],
    sampler="tpe",
)


def test_a_choice_among_numbers_is_an_ordered_index_and_words_and_flags_stay_categories():
    seqs, memory, caching = ORDERED
    assert optimiser.is_ordered(seqs) and optimiser.is_ordered(memory) and not optimiser.is_ordered(caching)
    assert optimiser.ordered_values(seqs) == [2, 4, 8, 16] and optimiser.ordered_values(memory) == [0.8, 0.85, 0.9]
    found = optimiser.distributions(ORDERED)
    assert found["engine.max_num_seqs"] == IntDistribution(0, 3)
    assert found["engine.gpu_memory_utilization"] == IntDistribution(0, 2)
    assert found["engine.enable_prefix_caching"] == CategoricalDistribution([True, False])
    assert optimiser.grid_space(ORDERED) == {
        "engine.max_num_seqs": [0, 1, 2, 3],
        "engine.gpu_memory_utilization": [0, 1, 2],
        "engine.enable_prefix_caching": [True, False],
    }


def test_the_mapping_keeps_the_order_and_goes_both_ways_for_every_allowed_value():
    seqs = ORDERED[0]
    values = optimiser.ordered_values(seqs)
    indices = [optimiser.to_sampler([seqs], {seqs.path: v})[seqs.path] for v in values]
    assert indices == [0, 1, 2, 3]  # ascending values, ascending indices: neighbours stay neighbours
    for index in range(4):
        value = optimiser.from_sampler([seqs], {seqs.path: index})[seqs.path]
        assert optimiser.to_sampler([seqs], {seqs.path: value}) == {seqs.path: index}
        assert type(value) is int  # the field's own value, not an index and not a float


def test_a_value_outside_the_allowed_set_is_not_mapped():
    seqs = ORDERED[0]
    for value in (3, 32, 0, -1, True, "8", None):
        with pytest.raises(ValueError, match=r"engine\.max_num_seqs"):
            optimiser.to_sampler([seqs], {seqs.path: value})


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_every_sampler_asks_only_allowed_values_and_reaches_all_of_them(sampler):
    dims = search.space_check(
        [
            {"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 4, 8, 16]},
            {"path": "engine.max_num_batched_tokens", "type": "choice", "choices": [8, 16, 32, 64]},
        ],
        sampler=sampler,
    )
    study = Optimiser(objective="min_p99", sampler=sampler, dims=dims, seed=5)
    seen = set()
    for _ in range(16 if sampler == "grid" else 60):
        trial, params = study.ask()
        point = (params["engine.max_num_seqs"], params["engine.max_num_batched_tokens"])
        assert point[0] in (2, 4, 8, 16) and point[1] in (8, 16, 32, 64)
        seen.add(point)
        # A bowl around (16, 64): TPE may concentrate there, but each value of each field must come up.
        study.tell(trial, value=abs(point[0] - 16) + abs(point[1] - 64) / 4, is_feasible=True)
    assert {p[0] for p in seen} == {2, 4, 8, 16} and {p[1] for p in seen} == {8, 16, 32, 64}
    if sampler == "grid":
        assert len(seen) == 16 and study.is_exhausted()


def test_a_history_in_field_values_is_told_to_the_sampler_as_indices():
    dims = search.space_check(
        [{"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 4, 8, 16]}], sampler="tpe"
    )
    study = Optimiser(objective="min_p99", sampler="tpe", dims=dims, seed=1)
    study.replay_history(
        [
            {"params": {"engine.max_num_seqs": n}, "value": 1.0, "is_feasible": True, "state": "complete"}
            for n in (2, 16)
        ]
    )
    assert [t.params["engine.max_num_seqs"] for t in study.study.trials] == [0, 3]
    assert study.ask()[1]["engine.max_num_seqs"] in (2, 4, 8, 16)


BOWL_DIMS = search.space_check(
    [
        {"path": "engine.max_num_seqs", "type": "choice", "choices": [2, 4, 8, 16]},
        {"path": "engine.max_num_batched_tokens", "type": "choice", "choices": [8, 16, 32, 64]},
    ],
    sampler="tpe",
)


def bowl(params) -> float:
    """A smooth 4 x 4 bowl whose best is the corner (16, 64), as on the bench."""
    return (
        1
        + 0.3 * (4 - math.log2(params["engine.max_num_seqs"])) ** 2
        + 0.2 * (6 - math.log2(params["engine.max_num_batched_tokens"])) ** 2
    )


def test_an_ordered_choice_lets_tpe_find_the_corner_of_a_smooth_grid_sooner_than_categories():
    """The reason for the order: on a smooth 4 x 4 bowl whose best is a corner (as (16, 64) on the bench), TPE
    reaches within 5 % of the best in at most 8 of 16 trials for more seeds when it sees the values' order."""

    def reached_by_8(seed: int) -> bool:
        study = Optimiser(objective="min_p99", sampler="tpe", dims=BOWL_DIMS, seed=seed)
        for _ in range(8):
            trial, params = study.ask()
            study.tell(trial, value=bowl(params), is_feasible=True)
            if bowl(params) <= 1.05:
                return True
        return False

    ordered = sum(reached_by_8(seed) for seed in range(12))
    original = optimiser.is_ordered
    optimiser.is_ordered = lambda dim: False  # the old behaviour: every choice a category
    try:
        categorical = sum(reached_by_8(seed) for seed in range(12))
    finally:
        optimiser.is_ordered = original
    assert ordered > categorical and ordered >= 10


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid"])
def test_an_ordered_choice_of_one_value_asks_that_value(sampler):
    """A one-point study (how the bench confirms a point) is an index range of 0..0."""
    dims = search.space_check([{"path": "engine.max_num_seqs", "type": "choice", "choices": [16]}], sampler=sampler)
    study = Optimiser(objective="min_p99", sampler=sampler, dims=dims, seed=0)
    trial, params = study.ask()
    assert params == {"engine.max_num_seqs": 16}
    study.tell(trial, value=1.0, is_feasible=True)
    assert study.is_exhausted() == (sampler == "grid")


def measured_points(seed: int, trials: int, *, skip_measured: bool) -> list[tuple]:
    """The points a TPE study measures in `trials` trials (a measured trial is one replay on the bench)."""
    study = Optimiser(objective="min_p99", sampler="tpe", dims=BOWL_DIMS, seed=seed)
    measured: dict[tuple, tuple[float, bool]] = {}
    points = []
    for _ in range(trials):
        trial, params = study.ask_unmeasured(measured) if skip_measured else study.ask()
        value = bowl(params)
        study.tell(trial, value=value, is_feasible=True)
        measured[study.point(params)] = (value, True)
        points.append(study.point(params))
    return points


def test_a_point_proposed_again_is_answered_from_the_record_not_measured_again():
    plain = [measured_points(seed, 8, skip_measured=False) for seed in range(12)]
    skipping = [measured_points(seed, 8, skip_measured=True) for seed in range(12)]
    assert sum(len(p) - len(set(p)) for p in plain) > 0  # TPE does propose measured points again here
    assert all(len(p) == len(set(p)) for p in skipping)  # none of them is measured twice

    fields = ("engine.max_num_seqs", "engine.max_num_batched_tokens")

    def first_within_5_percent(points) -> int:
        values = [bowl(dict(zip(fields, p, strict=True))) for p in points]
        return next((i + 1 for i, v in enumerate(values) if v <= 1.05), len(points) + 1)

    # The best comes within reach no later (56 measured trials over the 12 seeds either way since the Latin start-up;
    # with random start-up trials, 60 instead of 65: docs/tuning.md).
    assert sum(map(first_within_5_percent, skipping)) <= sum(map(first_within_5_percent, plain))
    assert all(first_within_5_percent(p) <= 8 for p in skipping)


def test_a_sampler_that_insists_on_a_measured_point_gets_it_measured_again():
    dims = search.space_check([{"path": "engine.max_num_seqs", "type": "choice", "choices": [16]}], sampler="tpe")
    study = Optimiser(objective="min_p99", sampler="tpe", dims=dims, seed=0)
    _, params = study.ask_unmeasured({(16,): (1.0, True)})  # the only point, measured: asked again in the end
    assert params == {"engine.max_num_seqs": 16}
    assert len(study.study.trials) == optimiser.MAX_REPROPOSALS + 1


def test_tpe_starts_from_a_seeded_latin_hypercube():
    for seed in range(6):
        study = Optimiser(objective="min_p99", sampler="tpe", dims=BOWL_DIMS, seed=seed)
        design = [optimiser.from_sampler(BOWL_DIMS, p) for p in optimiser.latin_hypercube(study.distributions, 3, seed)]
        asked = []
        for _ in range(optimiser.TPE.startup_trials):
            trial, params = study.ask_unmeasured({})
            study.tell(trial, value=bowl(params), is_feasible=True)
            asked.append(params)
        assert asked == design
        # Four points over four values: every value of each field once.
        points = optimiser.latin_hypercube(study.distributions, 4, seed)
        for path in study.distributions:
            assert sorted(p[path] for p in points) == [0, 1, 2, 3], points
    first = [optimiser.latin_hypercube(study.distributions, 3, seed) for seed in (0, 0, 1)]
    assert first[0] == first[1] != first[2]


def test_a_resumed_study_continues_its_start_up_design_and_a_failed_design_point_is_not_retried():
    design = optimiser.latin_hypercube(
        Optimiser(objective="min_p99", sampler="tpe", dims=BOWL_DIMS, seed=3).distributions,
        optimiser.TPE.startup_trials,
        3,
    )
    points = [optimiser.from_sampler(BOWL_DIMS, p) for p in design]
    resumed = Optimiser(objective="min_p99", sampler="tpe", dims=BOWL_DIMS, seed=3)
    resumed.replay_history(
        [
            {"params": points[0], "value": bowl(points[0]), "is_feasible": True, "state": "complete"},
            {"params": points[1], "value": None, "is_feasible": False, "state": "failed"},  # its engine failed
        ]
    )
    _, params = resumed.ask_unmeasured({resumed.point(points[0]): (bowl(points[0]), True)})
    assert params == points[2]


@pytest.mark.parametrize(
    "spec",
    [
        {"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 256, "step": 8},
        {"path": "engine.max_num_seqs", "type": "int", "low": 8, "high": 256, "log": True},
        {"path": "engine.gpu_memory_utilization", "type": "float", "low": 0.5, "high": 0.95},
        {"path": "engine.gpu_memory_utilization", "type": "float", "low": 0.5, "high": 0.95, "step": 0.05},
        {"path": "engine.enable_prefix_caching", "type": "choice", "choices": [True, False]},
    ],
)
def test_the_start_up_design_stays_inside_every_kind_of_range_and_spreads_over_it(spec):
    dims = search.space_check([spec], sampler="tpe")
    study = Optimiser(objective="min_p99", sampler="tpe", dims=dims, seed=2)
    dist = study.distributions[spec["path"]]
    values = [p[spec["path"]] for p in optimiser.latin_hypercube(study.distributions, 4, 2)]
    for value in values:
        assert dist._contains(dist.to_internal_repr(value)), (value, dist)
    if spec["type"] != "choice":
        # One in each quarter of the range (on the log scale when searched on it).
        scale = math.log if spec.get("log") else (lambda x: x)
        quarters = sorted(
            int(4 * (scale(v) - scale(spec["low"])) / (scale(spec["high"]) - scale(spec["low"])) - 1e-9) for v in values
        )
        assert quarters == [0, 1, 2, 3], values
    else:
        assert set(values) == {True, False}
