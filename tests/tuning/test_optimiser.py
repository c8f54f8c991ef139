"""The optimiser: seeded samplers over the study's dimensions, a grid that ends, history rebuilt from our rows."""

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
