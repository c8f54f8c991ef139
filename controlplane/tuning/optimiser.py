"""The optimiser behind a study: an in-memory Optuna study rebuilt from our finished trials, asked for the next one.

Optuna's own storage is not used: our TuningTrial rows are the record, so a study whose worker died resumes from
them (samplers are seeded; TPE sees the measured history; the re-proposals of measured points that `ask_unmeasured`
answered from the record are not rows and are not replayed).
"""

import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from controlplane.tuning.space import Dimension, Objective

# One constraint, the SLO: Optuna counts a trial feasible when every constraint value is 0 or less.
SLO = "slo"
# How many proposals of points already measured in a row are answered from the record before the point proposed is
# measured again (the sampler insists: it has converged there).
MAX_REPROPOSALS = 50


@dataclass(frozen=True)
class TpeSettings:
    """How TPE starts and proposes: `startup_trials` before the model guides, from a seeded Latin hypercube
    (`latin`) or drawn at random (Optuna's own start-up); each proposal the best of `ei_candidates` drawn from the
    model of the good trials (Optuna's default is 24). The product's are TPE below (docs/tuning.md);
    bench/tuning_sampler.py compares others on model landscapes."""

    startup_trials: int = 3
    latin: bool = True
    ei_candidates: int = 100


TPE = TpeSettings()
optuna.logging.set_verbosity(logging.WARNING)


def is_ordered(dim: Dimension) -> bool:
    """A choice among numbers (`engine.max_num_seqs` in 2, 4, 8, 16): its values have an order; words and flags not."""
    return dim.type == "choice" and all(isinstance(v, int | float) and not isinstance(v, bool) for v in dim.choices)


def ordered_values(dim: Dimension) -> list:
    """An ordered choice's values, ascending: the sampler sees the position of a value in this list."""
    return sorted(dim.choices)


def distributions(dims: Sequence[Dimension]) -> dict:
    """What the sampler searches, per field. An ordered choice is searched as the index of its value among the
    allowed values, ascending (an IntDistribution 0..n-1): the same candidates as the grid, but TPE models neighbouring
    values as alike (its kernel over an int is a discretised normal) instead of as unrelated categories. Over powers
    of two the index is the log scale. A categorical distribution stays only for words and flags."""
    out = {}
    for dim in dims:
        if is_ordered(dim):
            out[dim.path] = IntDistribution(0, len(dim.choices) - 1)
        elif dim.type == "choice":
            out[dim.path] = CategoricalDistribution(list(dim.choices))
        elif dim.type == "int":
            out[dim.path] = IntDistribution(int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log)
        else:
            out[dim.path] = FloatDistribution(dim.low, dim.high, step=dim.step, log=dim.log)
    return out


def grid_space(dims: Sequence[Dimension]) -> dict:
    """The grid sampler's points, in the sampler's terms (an ordered choice by index): the grid and TPE search one
    space."""
    return {d.path: list(range(len(d.choices))) if is_ordered(d) else d.grid_values() for d in dims}


def to_sampler(dims: Sequence[Dimension], values: Mapping[str, object]) -> dict:
    """A candidate's field values as the sampler sees them; a value outside an ordered choice raises ValueError."""
    out = {}
    for dim in dims:
        value = values[dim.path]
        if is_ordered(dim):
            allowed = ordered_values(dim)
            if isinstance(value, bool) or value not in allowed:
                raise ValueError(f"{dim.path} = {value!r} is not one of {allowed}")
            value = allowed.index(value)
        out[dim.path] = value
    return out


def from_sampler(dims: Sequence[Dimension], params: Mapping[str, object]) -> dict:
    """The sampler's parameters as field values (what a trial records, publishes and shows)."""
    return {d.path: ordered_values(d)[params[d.path]] if is_ordered(d) else params[d.path] for d in dims}


def _slo(is_feasible: bool) -> float:
    return 0.0 if is_feasible else 1.0


class StudyGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid, asked and told one trial at a time: it stops an `optimize` loop when the grid is done, which
    ask-and-tell has not got; `Optimiser.is_exhausted` ends our loop instead."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def sampler_for(name: str, dims: Sequence[Dimension], seed: int, tpe: TpeSettings = TPE) -> optuna.samplers.BaseSampler:
    """`tpe` (constraint-aware), `random`, or `grid` over every dimension's grid values, in a seeded order."""
    if name == "grid":
        return StudyGridSampler(grid_space(dims), seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    # A few start-up trials first (the Optimiser enqueues a Latin hypercube for them), then TPE (constraint-aware:
    # it reads each trial's SLO constraint); small budgets are the point of a study, so the start-up is short.
    return optuna.samplers.TPESampler(
        seed=seed, n_startup_trials=tpe.startup_trials, n_ei_candidates=tpe.ei_candidates, multivariate=True
    )


def latin_hypercube(dists: Mapping[str, object], count: int, seed: int) -> list[dict]:
    """`count` seeded points, in the sampler's terms, that split every field's range into `count` equal strata and
    put one point in each (a Latin hypercube): each field's low, middle and high third is tried once, where random
    start-up trials may try 8 sequences three times and 16 never. A float or an int takes a random place within its
    stratum (on the log scale when the field is searched on it); a choice of words or flags takes the stratum's."""
    rng = random.Random(f"latin-hypercube:{seed}")
    strata = {}
    for path in dists:
        order = list(range(count))
        rng.shuffle(order)
        strata[path] = order
    points = []
    for k in range(count):
        point = {}
        for path, dist in dists.items():
            u = (strata[path][k] + rng.random()) / count
            point[path] = _place(dist, u)
        points.append(point)
    return points


def _place(dist, u: float):
    """The value at quantile `u` (0 <= u < 1) of a distribution's range."""
    if isinstance(dist, CategoricalDistribution):
        return dist.choices[min(len(dist.choices) - 1, int(u * len(dist.choices)))]
    low, high = dist.low, dist.high
    value = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if dist.log else low + u * (high - low)
    if isinstance(dist, IntDistribution):
        step = dist.step
        slots = (high - low) // step + 1
        index = int(u * slots) if not dist.log else round((value - low) / step)
        return min(high, low + step * min(slots - 1, index))
    if dist.step is not None:
        value = low + dist.step * round((value - low) / dist.step)
    return min(high, max(low, value))


class Optimiser:
    """Ask for a candidate; tell its measured value (or its failure). One per run of a study's task."""

    def __init__(self, *, objective: str, sampler: str, dims: Sequence[Dimension], seed: int, tpe: TpeSettings = TPE):
        self.dims = list(dims)
        self.distributions = distributions(self.dims)
        self.study = optuna.create_study(
            direction=Objective.DIRECTION[objective], sampler=sampler_for(sampler, self.dims, seed, tpe)
        )
        # TPE's start-up trials: the design's points in order, each tried once (measured or failed), resumed from
        # the history after a restart; then the model guides.
        is_latin = sampler == "tpe" and tpe.latin
        self._design = latin_hypercube(self.distributions, tpe.startup_trials, seed) if is_latin else []
        self._tried: set[tuple] = set()

    def replay_history(self, trials: Sequence[Mapping]) -> None:
        """Feed finished trials back ({params, value, is_feasible, state}); a failed one counts as failed."""
        for trial in trials:
            params = to_sampler(self.dims, trial["params"])
            if trial["state"] == "complete" and trial["value"] is not None:
                frozen = create_trial(
                    params=params,
                    distributions=self.distributions,
                    value=trial["value"],
                    constraints={SLO: _slo(trial["is_feasible"])},
                )
            else:
                frozen = create_trial(params=params, distributions=self.distributions, state=TrialState.FAIL)
            self.study.add_trial(frozen)
            self._tried.add(self.point(trial["params"]))

    def is_exhausted(self) -> bool:
        """Whether a grid has no point left (a grid study ends there, whatever its budget)."""
        sampler = self.study.sampler
        return isinstance(sampler, optuna.samplers.GridSampler) and sampler.is_exhausted(self.study)

    def ask(self) -> tuple[optuna.trial.Trial, dict]:
        """The next candidate: Optuna's trial (to tell) and the field values to try; a start-up design point first
        while one is untried."""
        for params in self._design:
            if self.point(from_sampler(self.dims, params)) not in self._tried:
                self.study.enqueue_trial(params)
                break
        trial = self.study.ask(self.distributions)
        return trial, from_sampler(self.dims, trial.params)

    def point(self, values: Mapping[str, object]) -> tuple:
        """A candidate's identity: its field values in the dimensions' order."""
        return tuple(values[d.path] for d in self.dims)

    def ask_unmeasured(self, measured: Mapping[tuple, tuple[float, bool]]) -> tuple[optuna.trial.Trial, dict]:
        """The next candidate whose point is not in `measured` ({point: (value, is_feasible)}).

        In a small discrete space (a 4 x 4 grid of engine fields) TPE proposes points it has already seen, and a
        study that replays each again spends its budget learning nothing it did not know. A point already measured
        that the sampler proposes is told its recorded measurement at once (no replay, no trial row) and the sampler
        asked again; only after MAX_REPROPOSALS such proposals in a row is a measured point tried again."""
        for _ in range(MAX_REPROPOSALS):
            trial, values = self.ask()
            earlier = measured.get(self.point(values))
            if earlier is None:
                return trial, values
            self.tell(trial, value=earlier[0], is_feasible=earlier[1])
        return self.ask()

    def tell(self, trial: optuna.trial.Trial, *, value: float | None, is_feasible: bool) -> None:
        self._tried.add(self.point(from_sampler(self.dims, trial.params)))
        if value is None:
            self.study.tell(trial, state=TrialState.FAIL)
            return
        trial.set_constraint(SLO, _slo(is_feasible))
        self.study.tell(trial, value)
